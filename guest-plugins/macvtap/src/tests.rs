//! macvtap logic against the SDK's fake host.

use wasm_cni_sdk::fake::{ipam_result, netconf, suite, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::net::{LinkSettings, MacvlanMode, NetError, Ops};
use wasm_cni_sdk::{CniError, CniResult, Dns, Plugin};

use crate::Macvtap;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf("1.1.0", "mvt", "macvtap", extra)
}

fn l3(extra: &str) -> String {
    conf(&with_ipam_type("static", extra))
}

fn new_host() -> FakeHost {
    let host =
        FakeHost::with_ipam_result(&[("192.168.1.50/24", Some("192.168.1.1"))], &["0.0.0.0/0"]);
    // The host grants the master: config-named, or (no `master`) the
    // default-route link; the fake models both as an allowed node link.
    host.allow_node_link("ens3");
    host
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Macvtap::add(host, &host.request(config))
}

#[test]
fn default_master_is_the_default_route_interface() {
    let host = new_host();
    let r = add(&host, &conf("")).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!(
        (l.kind.as_str(), l.macvlan_mode, l.up, l.mtu, l.promisc),
        ("macvtap", Some(MacvlanMode::Bridge), true, 1500, false)
    );
    assert_eq!(l.txqlen, 1000, "the master's queue length, as kubevirt");
    assert_eq!(r.interfaces.len(), 1);
    assert_eq!(r.interfaces[0].name, "eth0");
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(l.mac.as_str()));
    assert_eq!(r.interfaces[0].sandbox.as_deref(), Some(NETNS_PATH));
    assert!(r.ips.is_empty() && r.dns.is_none());
    assert_eq!(host.link_names(NODE), ["lo", "ens3"], "nothing on the node");

    suite::assert_default_master_needs_a_default_route::<Macvtap>(&conf(""));
}

#[test]
fn modes_and_validation() {
    for (mode, want) in [
        ("", MacvlanMode::Bridge),
        ("bridge", MacvlanMode::Bridge),
        ("private", MacvlanMode::Private),
        ("vepa", MacvlanMode::Vepa),
        ("passthru", MacvlanMode::Passthru),
    ] {
        let host = new_host();
        add(&host, &conf(&format!(r#""master":"ens3","mode":"{mode}""#))).unwrap();
        assert_eq!(host.link(CONT, "eth0").unwrap().macvlan_mode, Some(want));
    }
    let host = new_host();
    let before = host.snapshot();
    for (extra, code, msg) in [
        (r#""mode":"foo""#, 7, r#"unknown macvtap mode: "foo""#),
        (
            r#""mtu":9000"#,
            7,
            "invalid MTU 9000, must be [0, master MTU(1500)]",
        ),
        (
            r#""mtu":-1"#,
            7,
            "invalid MTU -1, must be [0, master MTU(1500)]",
        ),
        (
            r#""master":"nope""#,
            999,
            r#"failed to lookup master "nope": not found"#,
        ),
        (
            r#""mac":"nope""#,
            7,
            r#"invalid MAC address "nope" (from mac)"#,
        ),
        (r#""promiscMode":"on""#, 7, "failed to load netconf"),
        (
            r#""deviceID":"macvtap7""#,
            2,
            r#"unsupported field deviceID: "macvtap7""#,
        ),
        (r#""owner":107"#, 2, "unsupported field owner: 107"),
        (r#""group":107"#, 2, "unsupported field group: 107"),
        (
            r#""linkInContainer":true"#,
            2,
            "unsupported field linkInContainer: true",
        ),
        (
            r#""bcqueuelen":100"#,
            2,
            "unsupported field bcqueuelen: 100",
        ),
    ] {
        let e = add(&host, &conf(extra)).unwrap_err();
        assert_eq!(e.code, code, "{extra}: {e}");
        assert!(e.msg.starts_with(msg), "{extra}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before);
    // Defaults and nulls are not "set".
    let req = host.request(&conf(
        r#""mtu":1400,"deviceID":null,"linkInContainer":false,"bcqueuelen":0"#,
    ));
    Macvtap::add(&host, &req).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().mtu, 1400);
}

#[test]
fn promisc_mode() {
    let host = new_host();
    add(&host, &conf(r#""promiscMode":true"#)).unwrap();
    assert!(host.link(CONT, "eth0").unwrap().promisc);
}

#[test]
fn mac_priority_config_then_cni_args_then_runtime_config() {
    let host = new_host();
    let mut req = suite::assert_mac_priority::<Macvtap>(&host, conf);
    Macvtap::del(&host, &req).unwrap();
    req.args = vec![("BOGUS".into(), "1".into())];
    assert_eq!(Macvtap::add(&host, &req).unwrap_err().code, 4);
}

#[test]
fn ipam_configures_the_link_and_dns_comes_from_config_only() {
    let host = new_host();
    let mut res = ipam_result(&[("192.168.1.50/24", Some("192.168.1.1"))], &["0.0.0.0/0"]);
    res.dns = Some(Dns {
        nameservers: vec!["192.168.1.53".into()],
        ..Dns::default()
    });
    host.set_ipam_result(res);
    let r = add(&host, &l3(r#""mode":"vepa""#)).unwrap();
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.dns, None);
    assert_eq!(host.addresses(CONT, "eth0"), ["192.168.1.50/24"]);
    assert!(host
        .routes(CONT)
        .contains(&"0.0.0.0/0 via 192.168.1.1 dev eth0".to_string()));
    for key in [
        "net.ipv4.conf.eth0.arp_notify",
        "net.ipv6.conf.eth0.ndisc_notify",
    ] {
        assert_eq!(host.sysctl(CONT, key).as_deref(), Some("1"), "{key}");
    }
    assert!(host.link(CONT, "eth0").unwrap().up);
    Macvtap::del(&host, &host.request(&l3(""))).unwrap();
    let r = add(&host, &l3(r#""dns":{"nameservers":["9.9.9.9"]}"#)).unwrap();
    assert_eq!(r.dns.unwrap().nameservers, ["9.9.9.9"]);
}

#[test]
fn failed_add_removes_the_link_and_releases_the_ip() {
    suite::assert_failed_ipam_add_rolls_back::<Macvtap>(new_host, &l3(""));

    let host = new_host();
    let before = host.snapshot();
    host.fail_next("set_link", "eth0", NetError::Kernel(-1, "boom".into()));
    let e = add(&host, &conf(r#""promiscMode":true"#)).unwrap_err();
    assert!(
        e.msg.starts_with(r#"failed to configure "eth0""#),
        "{}",
        e.msg
    );
    assert_eq!(host.snapshot(), before);
}

#[test]
fn the_master_is_granted_as_the_host_grants_it() {
    suite::assert_master_granted_as_the_host_grants::<Macvtap>(conf, "macvtap");
}

#[test]
fn del_is_idempotent() {
    let host = new_host();
    let first = l3(r#""master":"gone","deviceID":"x""#);
    let req = suite::assert_del_is_idempotent::<Macvtap>(&host, &first, &l3(""));
    Macvtap::add(&host, &req).unwrap();
    host.remove_container_netns();
    Macvtap::del(&host, &req).unwrap();
}

#[test]
fn check_validates_type_mode_mac_promisc_and_addresses() {
    let host = new_host();
    let cfg = l3(r#""mode":"vepa","promiscMode":true"#);
    let r = add(&host, &cfg).unwrap();
    let with_prev = |config: &str, prev: &CniResult| host.request_with_prev(config, prev);
    Macvtap::check(&host, &with_prev(&cfg, &r)).unwrap();
    let e = Macvtap::check(&host, &with_prev(&l3(r#""promiscMode":true"#), &r)).unwrap_err();
    assert_eq!(
        e.msg,
        "container macvtap mode vepa does not match expected value: bridge"
    );
    let mut other_mac = r.clone();
    other_mac.interfaces[0].mac = Some("02:00:00:00:00:99".into());
    let e = Macvtap::check(&host, &with_prev(&cfg, &other_mac)).unwrap_err();
    assert!(
        e.msg.starts_with("interface eth0 Mac 02:00:00:00:00:99"),
        "{}",
        e.msg
    );
    host.ns(CONT)
        .set_link(
            "eth0",
            &LinkSettings {
                promisc: Some(false),
                ..LinkSettings::default()
            },
        )
        .unwrap();
    let e = Macvtap::check(&host, &with_prev(&cfg, &r)).unwrap_err();
    assert_eq!(
        e.msg,
        "interface eth0 is not in promiscuous mode (promiscMode)"
    );
    let cfg = l3(r#""mode":"vepa""#);
    Macvtap::check(&host, &with_prev(&cfg, &r)).unwrap();
    host.remove_address(CONT, "eth0", "192.168.1.50/24");
    let e = Macvtap::check(&host, &with_prev(&cfg, &r)).unwrap_err();
    assert_eq!(
        e.msg,
        "Failed to match addr 192.168.1.50/24 on interface eth0"
    );
    let e = Macvtap::check(&host, &host.request(&cfg)).unwrap_err();
    assert_eq!(e.msg, "Required prevResult missing");

    // A link of another kind under the name.
    let other = new_host();
    other.add_link(CONT, "eth0", "macvlan", 1500);
    let e = Macvtap::check(&other, &other.request_with_prev(&conf(""), &r)).unwrap_err();
    assert_eq!(e.msg, "error: Container interface eth0 not of type macvtap");
}

#[test]
fn status_and_gc_go_to_ipam() {
    suite::assert_status_and_gc_go_to_ipam::<Macvtap>(&new_host(), &conf(""), &l3(""));
}
