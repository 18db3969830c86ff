//! tap logic against the SDK's fake host.

use wasm_cni_sdk::fake::{
    ipam_result, netconf, suite, with_ipam_type, FakeHost, NsId, TapInfo, NETNS_PATH,
};
use wasm_cni_sdk::{CniError, CniResult, Dns, Interface, Plugin};

use crate::Tap;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf("1.1.0", "tapnet", "tap", extra)
}

fn l3(extra: &str) -> String {
    conf(&with_ipam_type("static", extra))
}

fn new_host() -> FakeHost {
    FakeHost::with_ipam_result(&[("10.20.0.5/24", Some("10.20.0.1"))], &["0.0.0.0/0"])
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Tap::add(host, &host.request(config))
}

#[test]
fn l2_tap_is_the_container_interface() {
    let host = new_host();
    let node_before = host.link_names(NODE);
    let r = add(&host, &conf("")).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!((l.kind.as_str(), l.up, l.mtu), ("tun", true, 1500));
    assert_eq!(
        host.tap(CONT, "eth0"),
        Some(TapInfo::default()),
        "single queue, no owner or group"
    );
    assert_eq!(
        r.interfaces,
        [Interface {
            name: "eth0".into(),
            mac: Some(l.mac.clone()),
            sandbox: Some(NETNS_PATH.into()),
            ..Interface::default()
        }]
    );
    assert!(r.ips.is_empty() && r.routes.is_empty() && r.dns.is_none());
    assert!(host.ipam_calls().is_empty(), "no IPAM without `ipam`");
    assert_eq!(host.link_names(NODE), node_before, "nothing on the node");
}

#[test]
fn mtu_mac_queues_owner_and_group() {
    let host = new_host();
    add(
        &host,
        &conf(r#""mtu":9000,"mac":"02:00:00:00:00:aa","multiQueue":true,"owner":107,"group":108"#),
    )
    .unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!((l.mtu, l.mac.as_str()), (9000, "02:00:00:00:00:aa"));
    assert_eq!(
        host.tap(CONT, "eth0"),
        Some(TapInfo {
            multi_queue: true,
            owner: Some(107),
            group: Some(108),
        })
    );
}

#[test]
fn mac_priority_config_then_cni_args_then_runtime_config() {
    suite::assert_mac_priority::<Tap>(&new_host(), conf);
}

#[test]
fn invalid_and_unsupported_config_changes_nothing() {
    let host = new_host();
    host.add_link(CONT, "br0", "bridge", 1500);
    host.allow_container_bridge("br0");
    let before = host.snapshot();
    for (extra, code, msg) in [
        (r#""mtu":-1"#, 7, "invalid MTU -1, must be 0 or [68, 65521]"),
        (
            r#""mtu":65522"#,
            7,
            "invalid MTU 65522, must be 0 or [68, 65521]",
        ),
        (r#""mtu":"big""#, 7, "failed to load netconf"),
        (r#""owner":-1"#, 7, "failed to load netconf"),
        (r#""multiQueue":"yes""#, 7, "failed to load netconf"),
        (
            r#""mac":"nope""#,
            7,
            r#"invalid MAC address "nope" (from mac)"#,
        ),
        (
            r#""selinuxContext":"system_u:system_r:container_t:s0""#,
            2,
            "unsupported field selinuxContext: system_u:system_r:container_t:s0",
        ),
    ] {
        let e = add(&host, &conf(extra)).unwrap_err();
        assert_eq!(e.code, code, "{extra}: {e}");
        assert!(e.msg.starts_with(msg), "{extra}: {}", e.msg);
    }
    let mut req = host.request(&conf(""));
    req.args = vec![("FOO".into(), "1".into())];
    assert_eq!(Tap::add(&host, &req).unwrap_err().code, 4);
    req.args.push(("IgnoreUnknown".into(), "1".into()));
    req.config = conf(r#""selinuxContext":"""#);
    Tap::add(&host, &req).unwrap();
    Tap::del(&host, &req).unwrap();
    assert_eq!(host.snapshot(), before);
}

#[test]
fn bridge_in_the_container_namespace() {
    let host = new_host();
    let br = host.add_link(CONT, "br0", "bridge", 1500);
    host.allow_container_bridge("br0");
    let r = add(&host, &l3(r#""bridge":"br0""#)).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!((l.master, l.up), (Some(br), true));
    assert_eq!(r.interfaces.len(), 1, "the bridge is not reported");
    assert_eq!(host.addresses(CONT, "eth0"), ["10.20.0.5/24"]);
    Tap::del(&host, &host.request(&l3(r#""bridge":"br0""#))).unwrap();
    assert_eq!(host.link_names(CONT), ["lo", "br0"], "the bridge stays");
}

#[test]
fn a_bad_bridge_fails_and_removes_the_tap() {
    let host = new_host();
    host.add_link(CONT, "br0", "bridge", 1500);
    host.add_link(CONT, "dummy0", "device", 1500);
    host.allow_container_bridge("dummy0");
    let before = host.snapshot();
    // Missing, not a bridge. (A bridge the config names is the plugin's to
    // use as a master: the host grants it, so there is no refusal here.)
    for (bridge, msg) in [
        ("nobr0", "failed to get bridge nobr0: not found"),
        (
            "dummy0",
            "failed to set tap eth0 as a port of bridge dummy0: invalid argument",
        ),
    ] {
        let e = add(&host, &l3(&format!(r#""bridge":"{bridge}""#))).unwrap_err();
        assert_eq!(e.code, 999);
        assert!(e.msg.starts_with(msg), "{bridge}: {}", e.msg);
        assert_eq!(host.snapshot(), before, "{bridge}");
    }
    assert!(host.ipam_calls().is_empty(), "IPAM runs after the bridge");
}

#[test]
fn ipam_configures_the_tap_and_dns_comes_from_config_only() {
    let host = new_host();
    let mut res = ipam_result(&[("10.20.0.5/24", Some("10.20.0.1"))], &["0.0.0.0/0"]);
    res.dns = Some(Dns {
        nameservers: vec!["10.20.0.53".into()],
        ..Dns::default()
    });
    host.set_ipam_result(res);
    let r = add(&host, &l3("")).unwrap();
    assert_eq!(r.ips.len(), 1);
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.routes[0].dst, "0.0.0.0/0");
    assert_eq!(r.dns, None, "IPAM's dns is dropped, as in the reference");
    assert_eq!(host.addresses(CONT, "eth0"), ["10.20.0.5/24"]);
    assert!(host
        .routes(CONT)
        .contains(&"0.0.0.0/0 via 10.20.0.1 dev eth0".to_string()));
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.eth0.arp_notify")
            .as_deref(),
        Some("1")
    );
    // Unlike macvlan, the reference tap leaves ndisc_notify alone.
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.ndisc_notify")
            .as_deref(),
        Some("0")
    );
    Tap::del(&host, &host.request(&l3(""))).unwrap();
    let r = add(&host, &l3(r#""dns":{"nameservers":["9.9.9.9"]}"#)).unwrap();
    assert_eq!(r.dns.unwrap().nameservers, ["9.9.9.9"]);
}

#[test]
fn failed_add_removes_the_tap_and_releases_the_ip() {
    suite::assert_failed_ipam_add_rolls_back::<Tap>(new_host, &l3(""));

    let host = new_host();
    host.set_ipam_result(ipam_result(&[], &[]));
    let before = host.snapshot();
    let e = add(&host, &l3("")).unwrap_err();
    assert_eq!(e.msg, "IPAM plugin returned missing IP config");
    assert_eq!(host.snapshot(), before);
}

#[test]
fn an_existing_interface_is_left_alone() {
    let host = new_host();
    host.add_link(CONT, "eth0", "veth", 1500);
    let before = host.snapshot();
    let e = add(&host, &conf("")).unwrap_err();
    assert_eq!(e.code, 999);
    assert!(
        e.msg.starts_with("failed to create tap: already exists"),
        "{}",
        e.msg
    );
    assert_eq!(host.snapshot(), before);
}

#[test]
fn del_is_idempotent_and_survives_a_gone_namespace() {
    let host = new_host();
    let req = suite::assert_del_is_idempotent::<Tap>(&host, &l3(""), &l3(""));
    // DEL reads only the JSON: a config ADD would refuse still cleans up.
    Tap::add(&host, &req).unwrap();
    let mut bad = req.clone();
    bad.config = l3(r#""selinuxContext":"x","mtu":-5"#);
    Tap::del(&host, &bad).unwrap();
    assert_eq!(host.link_names(CONT), ["lo"]);
    Tap::add(&host, &req).unwrap();
    host.remove_container_netns();
    Tap::del(&host, &req).unwrap();
    let mut no_netns = req;
    no_netns.netns = None;
    Tap::del(&host, &no_netns).unwrap();
}

#[test]
fn check_validates_sandbox_addresses_and_routes() {
    let host = new_host();
    let r = add(&host, &l3("")).unwrap();
    let with_prev = |prev: &CniResult| host.request_with_prev(&l3(""), prev);
    Tap::check(&host, &with_prev(&r)).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "check"]);

    let e = Tap::check(&host, &host.request(&l3(""))).unwrap_err();
    assert_eq!(e.msg, "Required prevResult missing");

    let mut elsewhere = r.clone();
    elsewhere.interfaces[0].sandbox = Some("/var/run/netns/other".into());
    let e = Tap::check(&host, &with_prev(&elsewhere)).unwrap_err();
    assert_eq!(
        e.msg,
        format!("Sandbox in prevResult /var/run/netns/other doesn't match configured netns: {NETNS_PATH}")
    );

    host.set_ipam_error("check", CniError::internal("not allocated"));
    assert_eq!(
        Tap::check(&host, &with_prev(&r)).unwrap_err().msg,
        "not allocated"
    );
    let host = new_host();
    let r = add(&host, &l3("")).unwrap();
    host.remove_route(CONT, "0.0.0.0/0");
    let req = host.request_with_prev(&l3(""), &r);
    let e = Tap::check(&host, &req).unwrap_err();
    assert!(
        e.msg.starts_with("Expected Route {Dst:0.0.0.0/0"),
        "{}",
        e.msg
    );
    host.remove_address(CONT, "eth0", "10.20.0.5/24");
    let e = Tap::check(&host, &req).unwrap_err();
    assert_eq!(e.msg, "Failed to match addr 10.20.0.5/24 on interface eth0");

    // L2: nothing to validate but the sandbox.
    let host = new_host();
    let r = add(&host, &conf("")).unwrap();
    Tap::check(&host, &host.request_with_prev(&conf(""), &r)).unwrap();
    assert!(host.ipam_calls().is_empty());
}

#[test]
fn status_and_gc_go_to_ipam() {
    suite::assert_status_and_gc_go_to_ipam::<Tap>(&new_host(), &conf(""), &l3(""));
}
