//! The behavioural suite: each case is written once against `&mut dyn Net`
//! with two opened namespaces, and runs against both backends.
//!
//! Cases avoid what the memory model leaves out (IPv6 link-local addresses
//! and routes, the local table): they look for what they expect rather than
//! comparing whole lists.

use std::net::IpAddr;

use crate::net::{
    IpNet, IpNetFamily, IpvlanMode, LinkChange, LinkInfo, MacvlanMode, Net, NetError, NsId,
    RateLimit, Route, INGRESS_HANDLE, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, TBF_HANDLE, TC_H_INGRESS,
    TC_H_ROOT,
};

use super::support::{has_module, memory_env, require_root, KernelEnv};

/// Generate one test per case and backend: `shared::memory::CASE` and
/// `shared::kernel::CASE` (root only).
macro_rules! both_backends {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[test]
                fn $case() {
                    let (mut net, a, b) = super::memory_env();
                    super::$case(&mut net, a, b);
                }
            )*
        }
        mod kernel {
            $(
                #[test]
                fn $case() {
                    super::require_root!();
                    let mut env = super::KernelEnv::new(stringify!($case));
                    super::$case(&mut env.net, env.a, env.b);
                }
            )*
        }
    };
}

/// Cases for link kinds a kernel module provides: on the kernel backend
/// they run where the module is there, and say so where it is not.
macro_rules! both_backends_with_module {
    ($($case:ident: $module:literal),* $(,)?) => {
        mod memory_modules {
            $(
                #[test]
                fn $case() {
                    let (mut net, a, b) = super::memory_env();
                    super::$case(&mut net, a, b);
                }
            )*
        }
        mod kernel_modules {
            $(
                #[test]
                fn $case() {
                    super::require_root!();
                    if !super::has_module($module) {
                        eprintln!(concat!("skipped: this kernel has no ", $module, " module"));
                        return;
                    }
                    let mut env = super::KernelEnv::new(stringify!($case));
                    super::$case(&mut env.net, env.a, env.b);
                }
            )*
        }
    };
}

both_backends_with_module!(vlan: "8021q", ipvlan: "ipvlan");

both_backends!(
    handles,
    veth_across_namespaces,
    veth_settings,
    veth_errors,
    delete_link_removes_peer,
    bridge_create_reuse_not_a_bridge,
    bridge_ports_and_mtu,
    bridge_mac_follows_its_ports,
    enslave_errors,
    bridge_carrier,
    macvlan_each_mode_in_target,
    macvlan_errors,
    macvtap,
    tap,
    addresses_v4_v6,
    address_errors,
    loopback,
    routes_add_list_delete,
    route_lookup,
    route_errors,
    link_down_drops_routes,
    delete_link_drops_addresses_and_routes,
    sysctls,
    traffic_control,
);

fn cidr(s: &str) -> IpNet {
    crate::net::parse_cidr(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn up() -> LinkChange {
    LinkChange {
        up: Some(true),
        ..LinkChange::default()
    }
}

fn down() -> LinkChange {
    LinkChange {
        up: Some(false),
        ..LinkChange::default()
    }
}

fn is_exists<T: std::fmt::Debug>(r: Result<T, NetError>) -> bool {
    matches!(r, Err(NetError::Exists(_)))
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T, NetError>) -> bool {
    matches!(r, Err(NetError::NotFound(_)))
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T, NetError>) -> bool {
    matches!(r, Err(NetError::Invalid(_)))
}

fn errno_of<T: std::fmt::Debug>(r: Result<T, NetError>) -> Option<i32> {
    r.err().and_then(|e| e.errno())
}

fn names(links: &[LinkInfo]) -> Vec<&str> {
    links.iter().map(|l| l.name.as_str()).collect()
}

/// A veth pair with both ends up: `name` in `a`, `peer` in `b`.
fn running_veth(net: &mut dyn Net, a: NsId, name: &str, b: NsId, peer: &str) -> LinkInfo {
    net.create_veth(a, name, peer, b, None, None).unwrap();
    net.set_link(b, peer, &up()).unwrap();
    net.set_link(a, name, &up()).unwrap()
}

/// The kernel turns carrier changes into `IFF_RUNNING` in its linkwatch
/// work, asynchronously: wait briefly for the expected state.
fn settled(net: &mut dyn Net, ns: NsId, name: &str, oper_up: bool) -> LinkInfo {
    let mut link = net.link_by_name(ns, name).unwrap();
    for _ in 0..150 {
        if link.oper_up == oper_up {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        link = net.link_by_name(ns, name).unwrap();
    }
    link
}

fn route(dst: &str) -> Route {
    Route::to(cidr(dst))
}

fn find<'a>(routes: &'a [Route], dst: &str) -> Option<&'a Route> {
    routes.iter().find(|r| r.dst == cidr(dst))
}

pub fn handles(net: &mut dyn Net, a: NsId, b: NsId) {
    assert!(net.same_ns(a, a));
    assert!(!net.same_ns(a, b));
    assert!(is_not_found(net.link_by_name(NsId(999), "lo")));
}

pub fn veth_across_namespaces(net: &mut dyn Net, a: NsId, b: NsId) {
    let mac = "02:11:22:33:44:55";
    let va = net
        .create_veth(a, "wv0", "wv1", b, Some(1400), Some("02:11:22:33:44:55"))
        .unwrap();
    assert_eq!(va.name, "wv0");
    assert_eq!(va.kind, "veth");
    assert_eq!(va.mtu, 1400);
    assert_eq!(va.mac, mac);
    assert!(!va.up && !va.oper_up);
    assert_eq!(va.master, None);
    assert_eq!(va.txqlen, 1000);

    let vb = net.link_by_name(b, "wv1").unwrap();
    assert_eq!(vb.kind, "veth");
    assert_eq!(vb.mtu, 1400, "the MTU applies to both ends");
    assert_ne!(vb.mac, mac);
    assert_eq!(va.peer_index, Some(vb.index));
    assert_eq!(vb.peer_index, Some(va.index));
    assert_eq!(net.link_by_index(a, va.index).unwrap(), va);
    assert_eq!(net.link_by_index(b, vb.index).unwrap(), vb);

    let in_a = net.links(a).unwrap();
    assert!(names(&in_a).contains(&"lo") && names(&in_a).contains(&"wv0"));
    assert!(!names(&in_a).contains(&"wv1"));
    assert!(names(&net.links(b).unwrap()).contains(&"wv1"));
    assert!(is_not_found(net.link_by_name(a, "wv1")));

    // Carrier needs both ends up.
    net.set_link(a, "wv0", &up()).unwrap();
    let va = settled(net, a, "wv0", false);
    assert!(va.up && !va.oper_up);
    net.set_link(b, "wv1", &up()).unwrap();
    assert!(settled(net, a, "wv0", true).oper_up);
    assert!(settled(net, b, "wv1", true).oper_up);
    net.set_link(b, "wv1", &down()).unwrap();
    let va = settled(net, a, "wv0", false);
    assert!(va.up && !va.oper_up);
}

pub fn veth_settings(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    assert_eq!(net.link_by_name(a, "wv0").unwrap().mtu, 1500);
    let change = LinkChange {
        mtu: Some(9000),
        mac: Some("02:AA:bb:CC:dd:01".into()),
        promisc: Some(true),
        allmulti: Some(true),
        txqlen: Some(500),
        ..LinkChange::default()
    };
    let l = net.set_link(a, "wv0", &change).unwrap();
    assert_eq!(
        (l.mtu, l.mac.as_str(), l.txqlen),
        (9000, "02:aa:bb:cc:dd:01", 500)
    );
    assert!(l.promisc && l.allmulti && !l.up);
    let change = LinkChange {
        promisc: Some(false),
        allmulti: Some(false),
        ..up()
    };
    let l = net.set_link(a, "wv0", &change).unwrap();
    assert!(!l.promisc && !l.allmulti && l.up);
    // An empty change is a read.
    assert_eq!(net.set_link(a, "wv0", &LinkChange::default()).unwrap(), l);
}

pub fn veth_errors(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    let before_a = net.links(a).unwrap().len();
    let before_b = net.links(b).unwrap().len();
    assert!(is_exists(net.create_veth(a, "wv0", "wx1", b, None, None)));
    assert!(is_exists(net.create_veth(a, "wx0", "wv1", b, None, None)));
    assert!(is_exists(net.create_veth(a, "wx0", "wx0", a, None, None)));
    assert!(is_invalid(net.create_veth(
        a,
        "0123456789abcdef",
        "wx1",
        b,
        None,
        None
    )));
    assert!(is_invalid(net.create_veth(a, "wx0", "a/b", b, None, None)));
    assert!(is_invalid(net.create_veth(
        a,
        "wx0",
        "wx1",
        b,
        None,
        Some("01:00:5e:00:00:01")
    )));
    assert!(is_invalid(net.create_veth(
        a,
        "wx0",
        "wx1",
        b,
        None,
        Some("00:00:00:00:00:00")
    )));
    assert!(is_invalid(net.create_veth(
        a,
        "wx0",
        "wx1",
        b,
        None,
        Some("02:11:22:33:44")
    )));
    assert!(is_invalid(net.create_veth(
        a,
        "wx0",
        "wx1",
        b,
        Some(67),
        None
    )));
    assert!(is_invalid(net.create_veth(
        a,
        "wx0",
        "wx1",
        b,
        Some(65536),
        None
    )));
    assert!(is_not_found(net.create_veth(
        a,
        "wx0",
        "wx1",
        NsId(999),
        None,
        None
    )));
    assert_eq!(
        net.links(a).unwrap().len(),
        before_a,
        "failures create nothing"
    );
    assert_eq!(
        net.links(b).unwrap().len(),
        before_b,
        "failures create nothing"
    );

    assert!(is_invalid(net.set_link(
        a,
        "wv0",
        &LinkChange {
            mtu: Some(67),
            ..LinkChange::default()
        }
    )));
    assert!(is_invalid(net.set_link(
        a,
        "wv0",
        &LinkChange {
            mac: Some("nope".into()),
            ..LinkChange::default()
        }
    )));
    assert!(is_not_found(net.set_link(a, "nope0", &up())));
    assert!(is_not_found(net.link_by_name(a, "nope0")));
    assert!(is_not_found(net.link_by_index(a, 99_999)));
    assert!(is_not_found(net.delete_link(a, "nope0")));
    // `lo` is not a link anyone may delete.
    assert_eq!(errno_of(net.delete_link(a, "lo")), Some(libc::EOPNOTSUPP));
}

pub fn delete_link_removes_peer(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    net.delete_link(a, "wv0").unwrap();
    assert!(is_not_found(net.link_by_name(a, "wv0")));
    assert!(is_not_found(net.link_by_name(b, "wv1")));
    // And from the other side.
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    net.delete_link(b, "wv1").unwrap();
    assert!(is_not_found(net.link_by_name(a, "wv0")));
    assert!(is_not_found(net.delete_link(a, "wv0")));
}

pub fn bridge_create_reuse_not_a_bridge(net: &mut dyn Net, a: NsId, b: NsId) {
    let br = net.ensure_bridge(a, "wbr0", None).unwrap();
    assert_eq!((br.kind.as_str(), br.mtu, br.up), ("bridge", 1500, false));
    let again = net.ensure_bridge(a, "wbr0", Some(9000)).unwrap();
    assert_eq!(again.index, br.index);
    assert_eq!(again.mtu, 1500, "an existing bridge is returned as it is");
    let br1 = net.ensure_bridge(a, "wbr1", Some(9000)).unwrap();
    assert_eq!(br1.mtu, 9000);
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    assert!(is_exists(net.ensure_bridge(a, "wv0", None)));
    assert!(is_exists(net.ensure_bridge(a, "lo", None)));
    assert!(is_invalid(net.ensure_bridge(a, "bad name", None)));
    assert!(is_invalid(net.ensure_bridge(a, "wbr2", Some(10))));
}

pub fn bridge_ports_and_mtu(net: &mut dyn Net, a: NsId, b: NsId) {
    let br = net.ensure_bridge(a, "wbr0", Some(9000)).unwrap();
    net.create_veth(a, "wv0", "wv1", b, Some(1400), None)
        .unwrap();
    let master = LinkChange {
        master: Some("wbr0".into()),
        ..LinkChange::default()
    };
    let port = net.set_link(a, "wv0", &master).unwrap();
    assert_eq!(port.master, Some(br.index));
    // A bridge MTU given at creation still follows its smallest port.
    assert_eq!(net.link_by_name(a, "wbr0").unwrap().mtu, 1400);

    let hairpin = LinkChange {
        hairpin: Some(true),
        ..LinkChange::default()
    };
    net.set_link(a, "wv0", &hairpin).unwrap();
    let release = LinkChange {
        master: Some(String::new()),
        ..LinkChange::default()
    };
    assert_eq!(net.set_link(a, "wv0", &release).unwrap().master, None);
    assert_eq!(
        net.link_by_name(a, "wbr0").unwrap().mtu,
        1500,
        "no ports: 1500"
    );
    // Releasing a link that has no master is fine.
    assert_eq!(net.set_link(a, "wv0", &release).unwrap().master, None);

    // Enslave and set hairpin in one change; an MTU set on the bridge sticks.
    let both = LinkChange {
        hairpin: Some(true),
        ..master.clone()
    };
    assert_eq!(
        net.set_link(a, "wv0", &both).unwrap().master,
        Some(br.index)
    );
    let l = net.set_link(
        a,
        "wbr0",
        &LinkChange {
            mtu: Some(1300),
            ..LinkChange::default()
        },
    );
    assert_eq!(l.unwrap().mtu, 1300);
    net.create_veth(a, "wv2", "wv3", b, Some(1450), None)
        .unwrap();
    net.set_link(a, "wv2", &master).unwrap();
    assert_eq!(net.link_by_name(a, "wbr0").unwrap().mtu, 1300);

    // Deleting the bridge releases its ports.
    net.delete_link(a, "wbr0").unwrap();
    assert_eq!(net.link_by_name(a, "wv0").unwrap().master, None);
}

/// A bridge takes its lowest port's MAC (the zero MAC once the last port
/// leaves) until its own MAC is set, as the bridge plugin's `isGateway`
/// relies on.
pub fn bridge_mac_follows_its_ports(net: &mut dyn Net, a: NsId, b: NsId) {
    net.ensure_bridge(a, "wbr0", None).unwrap();
    let mac = |net: &mut dyn Net, name: &str| net.link_by_name(a, name).unwrap().mac;
    let to = |m: &str| LinkChange {
        master: Some(m.into()),
        ..LinkChange::default()
    };
    net.create_veth(a, "wv0", "wv1", b, None, Some("02:00:00:00:00:05"))
        .unwrap();
    net.create_veth(a, "wv2", "wv3", b, None, Some("02:00:00:00:00:03"))
        .unwrap();
    net.set_link(a, "wv0", &to("wbr0")).unwrap();
    assert_eq!(mac(net, "wbr0"), "02:00:00:00:00:05");
    net.set_link(a, "wv2", &to("wbr0")).unwrap();
    assert_eq!(mac(net, "wbr0"), "02:00:00:00:00:03", "the lowest port's");
    net.set_link(a, "wv2", &to("")).unwrap();
    assert_eq!(mac(net, "wbr0"), "02:00:00:00:00:05");
    net.delete_link(a, "wv0").unwrap();
    assert_eq!(mac(net, "wbr0"), "00:00:00:00:00:00", "no ports");

    let set = LinkChange {
        mac: Some("02:00:00:00:00:07".into()),
        ..LinkChange::default()
    };
    net.set_link(a, "wbr0", &set).unwrap();
    net.set_link(a, "wv2", &to("wbr0")).unwrap();
    assert_eq!(mac(net, "wbr0"), "02:00:00:00:00:07", "a MAC set sticks");
    net.delete_link(a, "wbr0").unwrap();
}

pub fn enslave_errors(net: &mut dyn Net, a: NsId, b: NsId) {
    net.ensure_bridge(a, "wbr0", None).unwrap();
    net.ensure_bridge(a, "wbr1", None).unwrap();
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    let to = |m: &str| LinkChange {
        master: Some(m.into()),
        ..LinkChange::default()
    };
    assert!(is_not_found(net.set_link(a, "wv0", &to("nobr0"))));
    assert!(
        is_invalid(net.set_link(a, "wbr0", &to("wv0"))),
        "master must be a bridge"
    );
    assert!(is_invalid(net.set_link(a, "lo", &to("wbr0"))));
    assert_eq!(
        errno_of(net.set_link(a, "wbr1", &to("wbr0"))),
        Some(libc::ELOOP)
    );
    let hairpin = LinkChange {
        hairpin: Some(true),
        ..LinkChange::default()
    };
    assert!(
        is_invalid(net.set_link(a, "wv0", &hairpin)),
        "hairpin needs a bridge"
    );
    assert_eq!(net.link_by_name(a, "wv0").unwrap().master, None);
}

pub fn bridge_carrier(net: &mut dyn Net, a: NsId, b: NsId) {
    net.ensure_bridge(a, "wbr0", None).unwrap();
    net.set_link(a, "wbr0", &up()).unwrap();
    assert!(settled(net, a, "wbr0", true).oper_up, "no ports: carrier");
    running_veth(net, a, "wv0", b, "wv1");
    let master = LinkChange {
        master: Some("wbr0".into()),
        ..LinkChange::default()
    };
    net.set_link(a, "wv0", &master).unwrap();
    assert!(
        settled(net, a, "wbr0", true).oper_up,
        "a running port: carrier"
    );
    net.set_link(b, "wv1", &down()).unwrap();
    assert!(
        !settled(net, a, "wbr0", false).oper_up,
        "no running port: none"
    );
}

pub fn macvlan_each_mode_in_target(net: &mut dyn Net, a: NsId, b: NsId) {
    let modes = [
        MacvlanMode::Bridge,
        MacvlanMode::Private,
        MacvlanMode::Vepa,
        MacvlanMode::Passthru,
    ];
    for (i, mode) in modes.into_iter().enumerate() {
        let master = format!("wm{i}");
        let m = net
            .create_veth(a, &master, &format!("wp{i}"), a, Some(1450), None)
            .unwrap();
        // The new link takes the master's own name, which is free in `b`.
        let mv = net
            .create_macvlan(a, &master, &master, mode, None, None, b, false)
            .unwrap();
        assert_eq!(mv.name, master);
        assert_eq!(mv.kind, "macvlan");
        assert_eq!(mv.macvlan_mode, Some(mode));
        assert_eq!(mv.mtu, 1450, "inherits the master's MTU");
        assert_eq!(mv.txqlen, 1000);
        assert_eq!(mv.peer_index, None);
        if mode == MacvlanMode::Passthru {
            assert_eq!(mv.mac, m.mac, "passthru takes the master's MAC");
        } else {
            assert_ne!(mv.mac, m.mac);
        }
        assert_eq!(net.link_by_name(b, &master).unwrap(), mv);
        assert_eq!(net.link_by_name(a, &master).unwrap().kind, "veth");
    }
    // Given MTU and MAC; carrier follows the master.
    let mv = net
        .create_macvlan(
            a,
            "mv9",
            "wm0",
            MacvlanMode::Bridge,
            Some(1400),
            Some("02:00:00:00:00:09"),
            b,
            false,
        )
        .unwrap();
    assert_eq!((mv.mtu, mv.mac.as_str()), (1400, "02:00:00:00:00:09"));
    net.set_link(b, "mv9", &up()).unwrap();
    assert!(!settled(net, b, "mv9", false).oper_up, "master is down");
    net.set_link(a, "wp0", &up()).unwrap();
    net.set_link(a, "wm0", &up()).unwrap();
    assert!(settled(net, b, "mv9", true).oper_up);
    // Deleting the master takes its macvlans along.
    net.delete_link(a, "wm0").unwrap();
    assert!(is_not_found(net.link_by_name(b, "mv9")));
    assert!(is_not_found(net.link_by_name(b, "wm0")));
}

pub fn vlan(net: &mut dyn Net, a: NsId, b: NsId) {
    let m = net
        .create_veth(a, "wm0", "wp0", a, Some(1450), None)
        .unwrap();
    // Straight into `b`, under a name `a` uses too, with the master's MAC.
    let v = net.create_vlan(a, "wm0", "wm0", 100, None, b).unwrap();
    assert_eq!(
        (v.kind.as_str(), v.vlan_id, v.mtu, v.mac.as_str()),
        ("vlan", Some(100), 1450, m.mac.as_str())
    );
    assert_eq!(net.link_by_name(b, "wm0").unwrap(), v);
    // Another id on the same master is fine; the same id is not.
    let v2 = net.create_vlan(a, "v2", "wm0", 200, Some(1400), b).unwrap();
    assert_eq!((v2.vlan_id, v2.mtu), (Some(200), 1400));
    assert!(is_exists(net.create_vlan(a, "v3", "wm0", 100, None, b)));
    assert!(is_exists(net.create_vlan(a, "v2", "wm0", 300, None, b)));
    assert!(is_invalid(net.create_vlan(a, "v3", "wm0", 4095, None, b)));
    assert!(is_invalid(net.create_vlan(
        a,
        "v3",
        "wm0",
        300,
        Some(1451),
        b
    )));
    assert!(is_not_found(net.create_vlan(a, "v3", "nope", 300, None, b)));
    assert_eq!(
        errno_of(net.create_vlan(a, "v3", "lo", 300, None, b)),
        Some(libc::EOPNOTSUPP)
    );
    // Carrier follows the master; the master may still become a bridge port.
    net.set_link(b, "v2", &up()).unwrap();
    assert!(!settled(net, b, "v2", false).oper_up, "master is down");
    net.set_link(a, "wp0", &up()).unwrap();
    net.set_link(a, "wm0", &up()).unwrap();
    assert!(settled(net, b, "v2", true).oper_up);
    net.ensure_bridge(a, "wbr0", None).unwrap();
    let port = LinkChange {
        master: Some("wbr0".into()),
        ..Default::default()
    };
    net.set_link(a, "wm0", &port).unwrap();
    // Deleting the master takes its vlans along.
    net.delete_link(a, "wm0").unwrap();
    assert!(is_not_found(net.link_by_name(b, "wm0")));
    assert!(is_not_found(net.link_by_name(b, "v2")));
}

pub fn ipvlan(net: &mut dyn Net, a: NsId, b: NsId) {
    let m = net
        .create_veth(a, "wm0", "wp0", a, Some(1450), None)
        .unwrap();
    let v = net
        .create_ipvlan(a, "wm0", "wm0", IpvlanMode::L2, None, b)
        .unwrap();
    assert_eq!(
        (v.kind.as_str(), v.ipvlan_mode, v.mtu, v.mac.as_str()),
        ("ipvlan", Some(IpvlanMode::L2), 1450, m.mac.as_str())
    );
    assert_eq!(net.link_by_name(b, "wm0").unwrap(), v);
    // The mode is the master's: a second ipvlan in l3 switches the first.
    let v2 = net
        .create_ipvlan(a, "iv2", "wm0", IpvlanMode::L3, Some(1400), b)
        .unwrap();
    assert_eq!((v2.ipvlan_mode, v2.mtu), (Some(IpvlanMode::L3), 1400));
    assert_eq!(
        net.link_by_name(b, "wm0").unwrap().ipvlan_mode,
        Some(IpvlanMode::L3)
    );
    assert!(is_exists(net.create_ipvlan(
        a,
        "iv2",
        "wm0",
        IpvlanMode::L3,
        None,
        b
    )));
    assert!(is_invalid(net.create_ipvlan(
        a,
        "iv3",
        "wm0",
        IpvlanMode::L3,
        Some(1451),
        b
    )));
    assert!(is_not_found(net.create_ipvlan(
        a,
        "iv3",
        "nope",
        IpvlanMode::L2,
        None,
        b
    )));
    assert!(is_invalid(net.create_ipvlan(
        a,
        "iv3",
        "lo",
        IpvlanMode::L2,
        None,
        b
    )));
    // One receive hook per master: an ipvlan master carries no macvlan, a
    // macvlan master no ipvlan, a bridge port neither.
    assert_eq!(
        errno_of(net.create_macvlan(a, "mv0", "wm0", MacvlanMode::Bridge, None, None, b, false)),
        Some(libc::EBUSY)
    );
    net.create_veth(a, "wm1", "wp1", a, None, None).unwrap();
    net.create_macvlan(a, "mv1", "wm1", MacvlanMode::Bridge, None, None, b, false)
        .unwrap();
    assert_eq!(
        errno_of(net.create_ipvlan(a, "iv3", "wm1", IpvlanMode::L2, None, b)),
        Some(libc::EBUSY)
    );
    net.ensure_bridge(a, "wbr0", None).unwrap();
    net.create_veth(a, "wm2", "wp2", a, None, None).unwrap();
    let port = LinkChange {
        master: Some("wbr0".into()),
        ..Default::default()
    };
    net.set_link(a, "wm2", &port).unwrap();
    assert_eq!(
        errno_of(net.create_ipvlan(a, "iv3", "wm2", IpvlanMode::L2, None, b)),
        Some(libc::EBUSY)
    );
    assert_eq!(
        errno_of(net.set_link(a, "wm0", &port)),
        Some(libc::EBUSY),
        "an ipvlan master cannot become a port"
    );
    // Carrier follows the master; deleting it takes its ipvlans along.
    net.set_link(b, "iv2", &up()).unwrap();
    assert!(!settled(net, b, "iv2", false).oper_up, "master is down");
    net.set_link(a, "wp0", &up()).unwrap();
    net.set_link(a, "wm0", &up()).unwrap();
    assert!(settled(net, b, "iv2", true).oper_up);
    net.delete_link(a, "wm0").unwrap();
    assert!(is_not_found(net.link_by_name(b, "wm0")));
    assert!(is_not_found(net.link_by_name(b, "iv2")));
}

pub fn macvlan_errors(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wm0", "wp0", a, None, None).unwrap();
    net.create_macvlan(a, "mv0", "wm0", MacvlanMode::Bridge, None, None, b, false)
        .unwrap();
    assert!(is_exists(net.create_macvlan(
        a,
        "mv0",
        "wm0",
        MacvlanMode::Bridge,
        None,
        None,
        b,
        false
    )));
    assert!(is_not_found(net.create_macvlan(
        a,
        "mv1",
        "nope0",
        MacvlanMode::Bridge,
        None,
        None,
        b,
        false
    )));
    assert!(is_invalid(net.create_macvlan(
        a,
        "mv1",
        "wm0",
        MacvlanMode::Bridge,
        Some(1501),
        None,
        b,
        false
    )));
    assert!(is_invalid(net.create_macvlan(
        a,
        "mv1",
        "wm0",
        MacvlanMode::Bridge,
        None,
        Some("ff:ff:ff:ff:ff:ff"),
        b,
        false
    )));
    assert!(is_invalid(net.create_macvlan(
        a,
        "mv1",
        "lo",
        MacvlanMode::Bridge,
        None,
        None,
        b,
        false
    )));
    // Passthru cannot share its master.
    assert!(is_invalid(net.create_macvlan(
        a,
        "mv1",
        "wm0",
        MacvlanMode::Passthru,
        None,
        None,
        b,
        false
    )));
    net.create_veth(a, "wm1", "wp1", a, None, None).unwrap();
    net.create_macvlan(a, "mv1", "wm1", MacvlanMode::Passthru, None, None, b, false)
        .unwrap();
    assert!(is_invalid(net.create_macvlan(
        a,
        "mv2",
        "wm1",
        MacvlanMode::Bridge,
        None,
        None,
        b,
        false
    )));
    // A bridge port cannot carry macvlans, nor can a macvlan master be a port.
    net.ensure_bridge(a, "wbr0", None).unwrap();
    let master = LinkChange {
        master: Some("wbr0".into()),
        ..LinkChange::default()
    };
    assert_eq!(errno_of(net.set_link(a, "wm0", &master)), Some(libc::EBUSY));
    net.create_veth(a, "wm2", "wp2", a, None, None).unwrap();
    net.set_link(a, "wm2", &master).unwrap();
    assert_eq!(
        errno_of(net.create_macvlan(a, "mv3", "wm2", MacvlanMode::Bridge, None, None, b, false)),
        Some(libc::EBUSY)
    );
    // A master's MTU change pulls its macvlans down with it.
    net.set_link(
        a,
        "wm0",
        &LinkChange {
            mtu: Some(1400),
            ..LinkChange::default()
        },
    )
    .unwrap();
    assert_eq!(net.link_by_name(b, "mv0").unwrap().mtu, 1400);
}

pub fn macvtap(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wm0", "wp0", a, None, None).unwrap();
    for (i, mode) in [MacvlanMode::Bridge, MacvlanMode::Vepa, MacvlanMode::Private]
        .into_iter()
        .enumerate()
    {
        let name = format!("mt{i}");
        let t = net
            .create_macvlan(a, &name, "wm0", mode, None, None, b, true)
            .unwrap();
        assert_eq!(
            (t.kind.as_str(), t.macvlan_mode, t.mtu),
            ("macvtap", Some(mode), 1500)
        );
        assert_eq!(t.txqlen, 500);
    }
    assert!(is_exists(net.create_macvlan(
        a,
        "mt0",
        "wm0",
        MacvlanMode::Bridge,
        None,
        None,
        b,
        true
    )));
    net.delete_link(b, "mt0").unwrap();
    assert!(is_not_found(net.link_by_name(b, "mt0")));
}

pub fn tap(net: &mut dyn Net, a: NsId, b: NsId) {
    let t = net
        .create_tap(
            a,
            "wtap0",
            Some(1400),
            Some("02:00:00:00:ab:01"),
            false,
            Some(1000),
            Some(1000),
        )
        .unwrap();
    assert_eq!(
        (t.kind.as_str(), t.mtu, t.mac.as_str()),
        ("tun", 1400, "02:00:00:00:ab:01")
    );
    assert!(!t.up);
    net.set_link(a, "wtap0", &up()).unwrap();
    let t = settled(net, a, "wtap0", false);
    assert!(t.up && !t.oper_up, "no process attached: no carrier");
    let q = net
        .create_tap(a, "wtap1", None, None, true, None, None)
        .unwrap();
    assert_eq!((q.kind.as_str(), q.mtu), ("tun", 1500));
    assert!(is_exists(
        net.create_tap(a, "wtap0", None, None, false, None, None)
    ));
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    assert!(is_exists(
        net.create_tap(a, "wv0", None, None, false, None, None)
    ));
    assert!(is_invalid(net.create_tap(
        a,
        "wtap2",
        Some(65522),
        None,
        false,
        None,
        None
    )));
    assert!(
        is_not_found(net.link_by_name(a, "wtap2")),
        "a refused tap is not left behind"
    );
    assert!(is_invalid(net.create_tap(
        a,
        "wtap2",
        None,
        Some("0g:00:00:00:00:01"),
        false,
        None,
        None
    )));
    net.delete_link(a, "wtap0").unwrap();
    assert!(is_not_found(net.link_by_name(a, "wtap0")));
}

pub fn addresses_v4_v6(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv0", &cidr("10.1.2.3/16")).unwrap();
    net.add_address(a, "wv0", &cidr("10.1.9.1/31")).unwrap();
    net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    let addrs = net.addresses(a, "wv0").unwrap();
    for want in ["10.1.2.3/24", "10.1.2.3/16", "10.1.9.1/31", "fd00::1/64"] {
        assert!(addrs.contains(&cidr(want)), "{want} in {addrs:?}");
    }
    let first_v6 = addrs.iter().position(IpNetFamily::is_ipv6).unwrap();
    assert!(
        addrs[first_v6..].iter().all(IpNetFamily::is_ipv6),
        "IPv4 first: {addrs:?}"
    );

    // The kernel's subnet routes.
    let routes = net.routes(a, "wv0", None).unwrap();
    let r = find(&routes, "10.1.2.0/24").unwrap();
    assert_eq!(
        (r.scope, r.src, r.gw),
        (Some(RT_SCOPE_LINK), Some(ip("10.1.2.3")), None)
    );
    assert_eq!((r.table, r.dev.as_deref()), (Some(254), Some("wv0")));
    assert!(find(&routes, "10.1.9.0/31").is_some());
    let r6 = find(&routes, "fd00::/64").unwrap();
    assert_eq!(
        (r6.priority, r6.scope),
        (Some(256), Some(RT_SCOPE_UNIVERSE))
    );

    net.del_address(a, "wv0", &cidr("10.1.2.3/16")).unwrap();
    net.del_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    let addrs = net.addresses(a, "wv0").unwrap();
    assert!(!addrs.contains(&cidr("10.1.2.3/16")) && !addrs.contains(&cidr("fd00::1/64")));
    assert!(addrs.contains(&cidr("10.1.2.3/24")));
    let routes = net.routes(a, "wv0", None).unwrap();
    assert!(find(&routes, "fd00::/64").is_none() && find(&routes, "10.1.0.0/16").is_none());
    assert!(find(&routes, "10.1.2.0/24").is_some());
    // Addresses on a link that is down get their routes when it comes up.
    net.create_veth(a, "wv2", "wv3", b, None, None).unwrap();
    net.add_address(a, "wv2", &cidr("10.3.0.1/24")).unwrap();
    assert!(find(&net.routes(a, "wv2", None).unwrap(), "10.3.0.0/24").is_none());
    net.set_link(a, "wv2", &up()).unwrap();
    assert!(find(&net.routes(a, "wv2", None).unwrap(), "10.3.0.0/24").is_some());
}

pub fn address_errors(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    assert!(is_exists(net.add_address(a, "wv0", &cidr("10.1.2.3/24"))));
    assert!(is_exists(net.add_address(a, "wv0", &cidr("fd00::1/64"))));
    assert!(
        is_exists(net.add_address(a, "wv0", &cidr("fd00::1/80"))),
        "IPv6: same address"
    );
    assert!(is_not_found(net.add_address(
        a,
        "nope0",
        &cidr("10.1.2.4/24")
    )));
    assert!(is_not_found(net.del_address(
        a,
        "wv0",
        &cidr("10.1.2.4/24")
    )));
    assert!(is_not_found(net.del_address(
        a,
        "wv0",
        &cidr("10.1.2.3/25")
    )));
    assert!(is_not_found(net.del_address(a, "wv0", &cidr("fd00::2/64"))));
    assert!(is_not_found(net.del_address(
        a,
        "nope0",
        &cidr("10.1.2.3/24")
    )));
    assert!(is_not_found(net.addresses(a, "nope0")));
    // The same address on another link is allowed.
    running_veth(net, a, "wv2", b, "wv3");
    net.add_address(a, "wv2", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv2", &cidr("fd00::1/64")).unwrap();
}

pub fn loopback(net: &mut dyn Net, a: NsId, _b: NsId) {
    let lo = net.link_by_name(a, "lo").unwrap();
    assert_eq!((lo.index, lo.kind.as_str(), lo.mtu), (1, "device", 65536));
    assert_eq!(lo.mac, "00:00:00:00:00:00");
    assert!(!lo.up);
    assert!(net.addresses(a, "lo").unwrap().is_empty());
    net.set_link(a, "lo", &up()).unwrap();
    let lo = settled(net, a, "lo", true);
    assert!(lo.up && lo.oper_up);
    let addrs = net.addresses(a, "lo").unwrap();
    assert_eq!(addrs, vec![cidr("127.0.0.1/8"), cidr("::1/128")]);
    net.add_address(a, "lo", &cidr("127.0.0.2/8")).unwrap();
}

pub fn route_lookup(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    running_veth(net, a, "wv2", b, "wv3");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv2", &cidr("10.1.3.3/24")).unwrap();
    net.add_route(
        a,
        &Route {
            dev: Some("wv2".into()),
            ..route("10.1.2.128/25")
        },
    )
    .unwrap();
    assert_eq!(
        net.route_dev(a, &ip("10.1.2.5")).unwrap().as_deref(),
        Some("wv0")
    );
    // The longest prefix wins.
    assert_eq!(
        net.route_dev(a, &ip("10.1.2.200")).unwrap().as_deref(),
        Some("wv2")
    );
    assert_eq!(
        net.route_dev(a, &ip("10.1.3.9")).unwrap().as_deref(),
        Some("wv2")
    );
    assert_eq!(net.route_dev(a, &ip("192.0.2.1")).unwrap(), None);
    assert_eq!(net.route_dev(a, &ip("fd00::1")).unwrap(), None);
}

pub fn routes_add_list_delete(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();

    let via = |dst: &str, gw: &str| Route {
        gw: Some(ip(gw)),
        ..route(dst)
    };
    let dev = |dst: &str| Route {
        dev: Some("wv0".into()),
        ..route(dst)
    };
    net.add_route(a, &via("0.0.0.0/0", "10.1.2.1")).unwrap();
    net.add_route(a, &via("10.9.0.0/24", "10.1.2.1")).unwrap();
    net.add_route(a, &dev("10.8.0.0/24")).unwrap();
    net.add_route(
        a,
        &Route {
            priority: Some(200),
            ..dev("10.8.0.0/24")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            table: Some(100),
            ..via("10.7.0.0/24", "10.1.2.1")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            table: Some(1000),
            ..dev("10.7.1.0/24")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            mtu: Some(1300),
            advmss: Some(1200),
            ..via("10.6.0.0/24", "10.1.2.1")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            src: Some(ip("10.1.2.3")),
            ..dev("10.5.0.0/24")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            scope: Some(RT_SCOPE_UNIVERSE),
            ..dev("10.4.0.0/24")
        },
    )
    .unwrap();
    net.add_route(a, &via("fd09::/64", "fd00::2")).unwrap();
    net.add_route(
        a,
        &Route {
            priority: Some(10),
            ..dev("fd08::/64")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            dev: Some("wv0".into()),
            ..via("fd07::/64", "fe80::1")
        },
    )
    .unwrap();
    net.add_route(a, &via("::/0", "fd00::2")).unwrap();

    let main = net.routes(a, "wv0", None).unwrap();
    let get = |d: &str| {
        find(&main, d)
            .cloned()
            .unwrap_or_else(|| Route::to(cidr("0.0.0.0/32")))
    };
    let default = get("0.0.0.0/0");
    assert_eq!(
        (default.gw, default.scope, default.dev.as_deref()),
        (Some(ip("10.1.2.1")), Some(RT_SCOPE_UNIVERSE), Some("wv0"))
    );
    assert_eq!(default.table, Some(254));
    assert_eq!(get("10.9.0.0/24").gw, Some(ip("10.1.2.1")));
    let linked: Vec<&Route> = main
        .iter()
        .filter(|r| r.dst == cidr("10.8.0.0/24"))
        .collect();
    assert_eq!(linked.len(), 2);
    assert!(linked
        .iter()
        .all(|r| r.scope == Some(RT_SCOPE_LINK) && r.gw.is_none()));
    assert!(linked.iter().any(|r| r.priority == Some(200)));
    assert!(linked.iter().any(|r| r.priority.is_none()));
    let m = get("10.6.0.0/24");
    assert_eq!((m.mtu, m.advmss), (Some(1300), Some(1200)));
    assert_eq!(get("10.5.0.0/24").src, Some(ip("10.1.2.3")));
    assert_eq!(get("10.4.0.0/24").scope, Some(RT_SCOPE_UNIVERSE));
    assert!(
        find(&main, "10.7.0.0/24").is_none(),
        "other tables are not listed"
    );
    let v6 = get("fd09::/64");
    assert_eq!(
        (v6.gw, v6.priority, v6.scope),
        (Some(ip("fd00::2")), Some(1024), Some(0))
    );
    assert_eq!(get("fd08::/64").priority, Some(10));
    assert_eq!(get("fd07::/64").gw, Some(ip("fe80::1")));
    assert_eq!(get("::/0").gw, Some(ip("fd00::2")));

    let t100 = net.routes(a, "wv0", Some(100)).unwrap();
    assert_eq!(t100.len(), 1);
    assert_eq!(
        (t100[0].dst, t100[0].table),
        (cidr("10.7.0.0/24"), Some(100))
    );
    let t1000 = net.routes(a, "wv0", Some(1000)).unwrap();
    assert_eq!(t1000.len(), 1);
    assert_eq!(t1000[0].table, Some(1000));

    // Deleting: by what is given.
    net.del_route(
        a,
        &Route {
            priority: Some(200),
            ..dev("10.8.0.0/24")
        },
    )
    .unwrap();
    let left: Vec<Route> = net
        .routes(a, "wv0", None)
        .unwrap()
        .into_iter()
        .filter(|r| r.dst == cidr("10.8.0.0/24"))
        .collect();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].priority, None);
    net.del_route(a, &dev("10.8.0.0/24")).unwrap();
    net.del_route(a, &via("0.0.0.0/0", "10.1.2.1")).unwrap();
    net.del_route(
        a,
        &Route {
            table: Some(100),
            ..via("10.7.0.0/24", "10.1.2.1")
        },
    )
    .unwrap();
    net.del_route(
        a,
        &Route {
            table: Some(1000),
            ..dev("10.7.1.0/24")
        },
    )
    .unwrap();
    net.del_route(a, &via("fd09::/64", "fd00::2")).unwrap();
    net.del_route(a, &dev("fd08::/64")).unwrap();
    let main = net.routes(a, "wv0", None).unwrap();
    for gone in ["10.8.0.0/24", "0.0.0.0/0", "fd09::/64", "fd08::/64"] {
        assert!(find(&main, gone).is_none(), "{gone} deleted");
    }
    assert!(net.routes(a, "wv0", Some(100)).unwrap().is_empty());
    assert!(net.routes(a, "wv0", Some(1000)).unwrap().is_empty());
    // A kernel subnet route can be deleted too, like with `ip route del`.
    net.del_route(a, &dev("10.1.2.0/24")).unwrap();
    assert!(find(&net.routes(a, "wv0", None).unwrap(), "10.1.2.0/24").is_none());
    // A destination alone names a route to delete.
    net.del_route(a, &route("10.9.0.0/24")).unwrap();
    net.del_route(a, &route("fd07::/64")).unwrap();
    let main = net.routes(a, "wv0", None).unwrap();
    assert!(find(&main, "10.9.0.0/24").is_none() && find(&main, "fd07::/64").is_none());
}

pub fn route_errors(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    net.create_veth(a, "wv2", "wv3", b, None, None).unwrap();
    let via = |dst: &str, gw: &str| Route {
        gw: Some(ip(gw)),
        ..route(dst)
    };
    let dev = |dst: &str, d: &str| Route {
        dev: Some(d.into()),
        ..route(dst)
    };

    net.add_route(a, &via("10.9.0.0/24", "10.1.2.1")).unwrap();
    assert!(is_exists(net.add_route(a, &via("10.9.0.0/24", "10.1.2.1"))));
    assert!(
        is_exists(net.add_route(a, &dev("10.9.0.0/24", "wv0"))),
        "same dst and priority"
    );
    assert!(
        is_exists(net.add_route(a, &dev("10.1.2.0/24", "wv0"))),
        "the kernel's subnet route"
    );
    net.add_route(a, &via("fd09::/64", "fd00::2")).unwrap();
    assert!(is_exists(net.add_route(a, &via("fd09::/64", "fd00::3"))));

    assert_eq!(
        errno_of(net.add_route(a, &via("10.8.0.0/24", "10.99.0.1"))),
        Some(libc::ENETUNREACH)
    );
    assert_eq!(
        errno_of(net.add_route(a, &via("fd08::/64", "fd99::1"))),
        Some(libc::EHOSTUNREACH)
    );
    assert_eq!(
        errno_of(net.add_route(a, &dev("10.8.0.0/24", "wv2"))),
        Some(libc::ENETDOWN)
    );
    assert!(is_not_found(net.add_route(a, &dev("10.8.0.0/24", "nope0"))));
    assert!(
        is_invalid(net.add_route(a, &dev("10.8.0.1/24", "wv0"))),
        "host bits"
    );
    assert!(is_invalid(net.add_route(
        a,
        &Route {
            src: Some(ip("10.1.2.99")),
            ..dev("10.8.0.0/24", "wv0")
        }
    )));
    assert!(
        is_invalid(net.add_route(a, &route("10.8.0.0/24"))),
        "no gateway, no device"
    );
    assert!(
        is_invalid(net.add_route(a, &via("10.8.0.0/24", "fd00::2"))),
        "mixed families"
    );
    assert!(find(&net.routes(a, "wv0", None).unwrap(), "10.8.0.0/24").is_none());

    assert!(is_not_found(net.del_route(a, &dev("10.8.0.0/24", "wv0"))));
    assert!(
        is_not_found(net.del_route(a, &via("10.9.0.0/24", "10.1.2.9"))),
        "gateway differs"
    );
    assert!(is_not_found(net.del_route(
        a,
        &Route {
            priority: Some(7),
            ..dev("10.9.0.0/24", "wv0")
        }
    )));
    assert!(is_not_found(net.del_route(
        a,
        &Route {
            table: Some(100),
            ..via("10.9.0.0/24", "10.1.2.1")
        }
    )));
    assert!(is_not_found(net.del_route(a, &via("fd07::/64", "fd00::2"))));
    assert!(is_not_found(net.routes(a, "nope0", None)));
}

pub fn link_down_drops_routes(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    net.add_route(
        a,
        &Route {
            gw: Some(ip("10.1.2.1")),
            ..route("10.9.0.0/24")
        },
    )
    .unwrap();
    net.add_route(
        a,
        &Route {
            gw: Some(ip("fd00::2")),
            ..route("fd09::/64")
        },
    )
    .unwrap();
    // Losing carrier keeps everything.
    net.set_link(b, "wv1", &down()).unwrap();
    assert_eq!(
        net.routes(a, "wv0", None)
            .unwrap()
            .iter()
            .filter(|r| !is_link_local(&r.dst))
            .count(),
        4
    );
    net.set_link(a, "wv0", &down()).unwrap();
    assert!(net.routes(a, "wv0", None).unwrap().is_empty());
    let addrs = net.addresses(a, "wv0").unwrap();
    assert_eq!(
        addrs,
        vec![cidr("10.1.2.3/24")],
        "IPv6 addresses go with the link"
    );
    net.set_link(a, "wv0", &up()).unwrap();
    let routes = net.routes(a, "wv0", None).unwrap();
    assert!(
        find(&routes, "10.1.2.0/24").is_some(),
        "the subnet route is back"
    );
    assert!(
        find(&routes, "10.9.0.0/24").is_none(),
        "static routes are not"
    );
}

fn is_link_local(n: &IpNet) -> bool {
    matches!(n.addr(), IpAddr::V6(v6) if v6.is_unicast_link_local())
}

pub fn delete_link_drops_addresses_and_routes(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    net.add_route(
        a,
        &Route {
            gw: Some(ip("10.1.2.1")),
            ..route("10.9.0.0/24")
        },
    )
    .unwrap();
    net.delete_link(a, "wv0").unwrap();
    running_veth(net, a, "wv0", b, "wv1");
    assert!(net.addresses(a, "wv0").unwrap().iter().all(is_link_local));
    assert!(net
        .routes(a, "wv0", None)
        .unwrap()
        .iter()
        .all(|r| is_link_local(&r.dst)));
    // Nothing routes through the old link any more: the gateway is gone.
    assert_eq!(
        errno_of(net.add_route(
            a,
            &Route {
                gw: Some(ip("10.1.2.1")),
                ..route("10.9.0.0/24")
            }
        )),
        Some(libc::ENETUNREACH)
    );
}

pub fn sysctls(net: &mut dyn Net, a: NsId, b: NsId) {
    net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    // A new namespace's IPv4 settings start from the node's, so read first.
    let before_b = net.sysctl_get(b, "net.ipv4.ip_forward").unwrap();
    for value in ["1", "0"] {
        net.sysctl_set(a, "net.ipv4.ip_forward", value).unwrap();
        assert_eq!(net.sysctl_get(a, "net.ipv4.ip_forward").unwrap(), value);
        assert_eq!(
            net.sysctl_get(a, "net.ipv4.conf.all.forwarding").unwrap(),
            value
        );
        assert_eq!(
            net.sysctl_get(a, "net.ipv4.conf.wv0.forwarding").unwrap(),
            value
        );
    }
    net.sysctl_set(a, "net.ipv4.ip_forward", "1").unwrap();
    assert_eq!(
        net.sysctl_get(b, "net.ipv4.ip_forward").unwrap(),
        before_b,
        "per namespace"
    );
    net.sysctl_set(a, "net.ipv4.conf.wv0.rp_filter", "2\n")
        .unwrap();
    assert_eq!(
        net.sysctl_get(a, "net.ipv4.conf.wv0.rp_filter").unwrap(),
        "2"
    );
    net.sysctl_set(a, "net.ipv6.conf.wv0.disable_ipv6", "1")
        .unwrap();
    assert_eq!(
        net.sysctl_get(a, "net.ipv6.conf.wv0.disable_ipv6").unwrap(),
        "1"
    );
    assert_eq!(
        net.sysctl_get(b, "net.ipv6.conf.wv1.accept_ra").unwrap(),
        "1"
    );
    // Per-link keys go with the link.
    net.delete_link(a, "wv0").unwrap();
    assert!(is_not_found(
        net.sysctl_get(a, "net.ipv4.conf.wv0.forwarding")
    ));

    assert!(is_not_found(net.sysctl_get(a, "net.ipv4.no_such_key")));
    assert!(is_not_found(net.sysctl_set(a, "net.ipv4.no_such_key", "1")));
    assert!(is_invalid(net.sysctl_set(a, "net.ipv4.ip_forward", "yes")));
    for bad in [
        "",
        "net/ipv4/ip_forward",
        "net..ipv4",
        "net.ipv4.",
        ".net",
        "../etc/passwd",
        "net.ipv4.ip forward",
        "net.ipv4.*",
    ] {
        assert!(is_invalid(net.sysctl_get(a, bad)), "{bad:?}");
        assert!(is_invalid(net.sysctl_set(a, bad, "1")), "{bad:?}");
    }
}

pub fn traffic_control(net: &mut dyn Net, a: NsId, b: NsId) {
    running_veth(net, a, "wv0", b, "wv1");
    let ifb = net.create_ifb(a, "wifb0", Some(1400)).unwrap();
    assert_eq!((ifb.kind.as_str(), ifb.mtu, ifb.up), ("ifb", 1400, true));
    assert!(matches!(
        net.create_ifb(a, "wifb0", None),
        Err(NetError::Exists(_))
    ));
    // Found by the host_imports fuzzer (the model created the link, then
    // refused the MTU): ifb has no MTU bounds.
    let odd = net.create_ifb(a, "wifb1", Some(40)).unwrap();
    assert_eq!(odd.mtu, 40);
    net.delete_link(a, "wifb1").unwrap();
    let tbfs = |net: &mut dyn Net| -> Vec<_> {
        net.qdiscs(a, "wv0")
            .unwrap()
            .into_iter()
            .filter(|q| q.kind == "tbf")
            .collect()
    };
    let slow = RateLimit {
        rate: 8_000_000,
        burst: 80_000,
    };
    net.set_rate_limit(a, "wv0", &slow).unwrap();
    let t = tbfs(net);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].handle, t[0].parent), (TBF_HANDLE, TC_H_ROOT));
    assert_eq!(t[0].tbf, Some(slow.tbf(net.ticks_per_us()).unwrap()));
    // Setting it again replaces it.
    let fast = RateLimit {
        rate: 100_000_000,
        burst: 1_000_000,
    };
    net.set_rate_limit(a, "wv0", &fast).unwrap();
    let t = tbfs(net);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].tbf, Some(fast.tbf(net.ticks_per_us()).unwrap()));
    for bad in [
        RateLimit { rate: 0, burst: 1 },
        RateLimit {
            rate: 1000,
            burst: 0,
        },
        RateLimit {
            rate: 1000,
            burst: 8 << 32,
        },
    ] {
        assert!(
            matches!(
                net.set_rate_limit(a, "wv0", &bad),
                Err(NetError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        net.set_rate_limit(a, "nope0", &slow),
        Err(NetError::NotFound(_))
    ));
    net.redirect_ingress(a, "wv0", "wifb0").unwrap();
    let q = net.qdiscs(a, "wv0").unwrap();
    assert!(
        q.iter()
            .any(|q| q.kind == "ingress" && q.handle == INGRESS_HANDLE && q.parent == TC_H_INGRESS),
        "{q:?}"
    );
    assert!(matches!(
        net.redirect_ingress(a, "wv0", "wifb0"),
        Err(NetError::Exists(_))
    ));
    assert!(matches!(
        net.redirect_ingress(a, "wv1", "wifb0"),
        Err(NetError::NotFound(_))
    ));
    net.delete_link(a, "wv0").unwrap();
    assert!(matches!(net.qdiscs(a, "wv0"), Err(NetError::NotFound(_))));
    net.delete_link(a, "wifb0").unwrap();
}

#[test]
fn reference_tbf_parameters() {
    // The bandwidth plugin's numbers for 1 Mbit/s, 100 kbit burst, with
    // 15.625 ticks per microsecond: 125000 B/s, 12500 B bucket = 0.1 s =
    // 1562500 ticks, limit 25 ms * 125000 + 12500 = 15625 B.
    let t = RateLimit {
        rate: 1_000_000,
        burst: 100_000,
    }
    .tbf(15.625)
    .unwrap();
    assert_eq!((t.rate, t.buffer, t.limit), (125_000, 1_562_500, 15_625));
}
