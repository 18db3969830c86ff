//! The checks and conversions both backends share.

use crate::net::{
    broadcast_v4, check_link_name, check_sysctl_key, format_mac, parse_cidr, parse_mac, IpNet,
    IpNetFamily, NetError,
};

#[test]
fn ipnet_parses_and_prints() {
    let n = parse_cidr("10.1.2.3/24").unwrap();
    assert_eq!(
        (n.addr().to_string(), n.prefix_len()),
        ("10.1.2.3".to_string(), 24)
    );
    assert_eq!(n.to_string(), "10.1.2.3/24");
    assert_eq!(n.trunc().to_string(), "10.1.2.0/24");
    assert!(n.contains(&"10.1.2.200".parse::<std::net::IpAddr>().unwrap()));
    assert!(!n.contains(&"10.1.3.1".parse::<std::net::IpAddr>().unwrap()));
    assert!(!n.contains(&"::1".parse::<std::net::IpAddr>().unwrap()));
    let v6 = parse_cidr("fd00::1:2/64").unwrap();
    assert_eq!(v6.trunc().to_string(), "fd00::/64");
    assert!(v6.is_ipv6() && !v6.is_ipv4());
    assert_eq!(parse_cidr("0.0.0.0/0").unwrap().trunc().prefix_len(), 0);
    assert_eq!(parse_cidr("::/0").unwrap().to_string(), "::/0");
    for bad in [
        "10.1.2.3",
        "10.1.2.3/33",
        "::1/129",
        "10.1.2.3/",
        "/24",
        "x/24",
        "10.1.2.3/+4",
        "10.1.2.3/24/1",
        // ipnet's own parser takes these; Go's ParseCIDR does not.
        "010.1.2.3/24",
        "10.1.2.003/24",
    ] {
        assert!(
            matches!(parse_cidr(bad), Err(NetError::Invalid(_))),
            "{bad}"
        );
    }
    // Why the host does not use `str::parse` for plugins' CIDRs.
    assert!("010.1.2.3/24".parse::<IpNet>().is_ok());
}

#[test]
fn broadcast_is_what_brd_plus_gives() {
    let brd = |s: &str| broadcast_v4(&parse_cidr(s).unwrap()).map(|b| b.to_string());
    assert_eq!(brd("10.1.2.3/24").as_deref(), Some("10.1.2.255"));
    assert_eq!(brd("10.1.2.3/30").as_deref(), Some("10.1.2.3"));
    assert_eq!(brd("10.1.2.3/0").as_deref(), Some("255.255.255.255"));
    assert_eq!(brd("10.1.2.3/31"), None);
    assert_eq!(brd("10.1.2.3/32"), None);
    assert_eq!(brd("fd00::1/64"), None);
}

#[test]
fn macs() {
    assert_eq!(
        parse_mac("02:AB:cd:00:11:ff").unwrap(),
        [2, 0xab, 0xcd, 0, 0x11, 0xff]
    );
    assert_eq!(
        format_mac(&[2, 0xab, 0xcd, 0, 0x11, 0xff]),
        "02:ab:cd:00:11:ff"
    );
    for bad in [
        "",
        "02:ab:cd:00:11",
        "02:ab:cd:00:11:ff:00",
        "02:ab:cd:00:11:f",
        "02-ab-cd-00-11-ff",
        "01:00:5e:00:00:01",
        "00:00:00:00:00:00",
        "0g:00:00:00:00:01",
    ] {
        assert!(matches!(parse_mac(bad), Err(NetError::Invalid(_))), "{bad}");
    }
}

#[test]
fn link_names() {
    for good in ["eth0", "a", "0123456789abcde", "veth-1_x.2", "lo"] {
        check_link_name(good).unwrap();
    }
    for bad in [
        "",
        ".",
        "..",
        "0123456789abcdef",
        "a/b",
        "a:b",
        "a b",
        "a\tb",
        "a\0b",
    ] {
        assert!(
            matches!(check_link_name(bad), Err(NetError::Invalid(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn sysctl_keys() {
    for good in [
        "net.ipv4.ip_forward",
        "net.ipv6.conf.eth-0.accept_ra",
        "net.ipv4.conf.veth_1.rp_filter",
    ] {
        check_sysctl_key(good).unwrap();
    }
    for bad in [
        "",
        ".",
        "net..ipv4",
        ".net",
        "net.",
        "net/ipv4",
        "../x",
        "net.ipv4.*",
        "net.ipv4.a b",
        "net.ipv4.ä",
    ] {
        assert!(
            matches!(check_sysctl_key(bad), Err(NetError::Invalid(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn errno_mapping() {
    let m = |e| NetError::from_errno(e, "x");
    assert!(matches!(m(libc::EEXIST), NetError::Exists(_)));
    for e in [libc::ENOENT, libc::ENODEV, libc::ESRCH, libc::EADDRNOTAVAIL] {
        assert!(matches!(m(e), NetError::NotFound(_)), "{e}");
    }
    for e in [libc::EINVAL, libc::ERANGE] {
        match m(e) {
            NetError::Invalid(msg) => assert!(msg.contains(&format!("errno {e}")), "{msg}"),
            other => unreachable!("{other:?}"),
        }
    }
    for e in [
        libc::EPERM,
        libc::EBUSY,
        libc::ENETDOWN,
        libc::EOPNOTSUPP,
        libc::ENOBUFS,
    ] {
        assert_eq!(
            m(e),
            NetError::Kernel {
                errno: e,
                msg: "x".into()
            }
        );
        assert_eq!(m(e).errno(), Some(e));
    }
    assert_eq!(m(libc::EEXIST).errno(), None);
}
