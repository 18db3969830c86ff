//! macvlan logic against the SDK's fake host.

use wasm_cni_sdk::fake::{ipam_result, netconf, suite, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::net::MacvlanMode;
use wasm_cni_sdk::{CniError, CniResult, Dns, Plugin};

use crate::Macvlan;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf("1.1.0", "mv", "macvlan", extra)
}

fn l3(extra: &str) -> String {
    conf(&with_ipam_type("static", extra))
}

fn new_host() -> FakeHost {
    let host =
        FakeHost::with_ipam_result(&[("192.168.1.50/24", Some("192.168.1.1"))], &["0.0.0.0/0"]);
    // The host must grant the master; for the default master that means
    // the host resolving it too (reported to the host side).
    host.allow_node_link("ens3");
    host
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Macvlan::add(host, &host.request(config))
}

#[test]
fn default_master_is_the_default_route_interface() {
    let host = new_host();
    let r = add(&host, &conf("")).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!(
        (l.kind.as_str(), l.macvlan_mode, l.up, l.mtu),
        ("macvlan", Some(MacvlanMode::Bridge), true, 1500)
    );
    assert_eq!(r.interfaces.len(), 1);
    assert_eq!(r.interfaces[0].name, "eth0");
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(l.mac.as_str()));
    assert_eq!(r.interfaces[0].sandbox.as_deref(), Some(NETNS_PATH));
    assert!(r.ips.is_empty());
    assert_eq!(host.link_names(NODE), ["lo", "ens3"], "nothing on the node");

    // Without a default route there is no master to pick; an IPv6 one is
    // used when there is no IPv4 one.
    suite::assert_default_master_needs_a_default_route::<Macvlan>(&conf(""));
}

#[test]
fn modes_and_validation() {
    for (mode, want) in [
        ("", MacvlanMode::Bridge),
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
        (r#""mode":"foo""#, 7, r#"unknown macvlan mode: "foo""#),
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
            r#""bcqueuelen":100"#,
            2,
            "unsupported field bcqueuelen: 100",
        ),
        (
            r#""mac":"nope""#,
            7,
            r#"invalid MAC address "nope" (from mac)"#,
        ),
    ] {
        let e = add(&host, &conf(extra)).unwrap_err();
        assert_eq!(e.code, code, "{extra}");
        assert!(e.msg.starts_with(msg), "{extra}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before);
    add(&host, &conf(r#""mtu":1400"#)).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().mtu, 1400);
}

#[test]
fn mac_priority_config_then_cni_args_then_runtime_config() {
    suite::assert_mac_priority::<Macvlan>(&new_host(), conf);
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
    let r = add(&host, &l3("")).unwrap();
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.dns, None, "IPAM's dns is dropped, as in the reference");
    assert_eq!(host.addresses(CONT, "eth0"), ["192.168.1.50/24"]);
    assert!(host
        .routes(CONT)
        .contains(&"0.0.0.0/0 via 192.168.1.1 dev eth0".to_string()));
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.eth0.arp_notify")
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.ndisc_notify")
            .as_deref(),
        Some("1")
    );
    Macvlan::del(&host, &host.request(&l3(""))).unwrap();
    let r = add(&host, &l3(r#""dns":{"nameservers":["9.9.9.9"]}"#)).unwrap();
    assert_eq!(r.dns.unwrap().nameservers, ["9.9.9.9"]);
}

#[test]
fn failed_add_removes_the_link_and_releases_the_ip() {
    suite::assert_failed_ipam_add_rolls_back::<Macvlan>(new_host, &l3(""));
}

#[test]
fn the_master_is_granted_as_the_host_grants_it() {
    suite::assert_master_granted_as_the_host_grants::<Macvlan>(conf, "macvlan");
}

#[test]
fn link_in_container_uses_a_container_master() {
    let host = new_host();
    host.disable_policy();
    host.add_link(CONT, "uplink0", "device", 1500);
    add(&host, &conf(r#""master":"uplink0","linkInContainer":true"#)).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().kind, "macvlan");
}

#[test]
fn del_is_idempotent() {
    let host = new_host();
    // DEL never looks the master up.
    let req = suite::assert_del_is_idempotent::<Macvlan>(&host, &l3(r#""master":"gone""#), &l3(""));
    Macvlan::add(&host, &req).unwrap();
    host.remove_container_netns();
    Macvlan::del(&host, &req).unwrap();
}

#[test]
fn check_validates_mode_mac_and_addresses() {
    let host = new_host();
    let r = add(&host, &l3(r#""mode":"vepa""#)).unwrap();
    let with_prev = |config: &str| host.request_with_prev(config, &r);
    Macvlan::check(&host, &with_prev(&l3(r#""mode":"vepa""#))).unwrap();
    let e = Macvlan::check(&host, &with_prev(&l3(""))).unwrap_err();
    assert_eq!(
        e.msg,
        "container macvlan mode vepa does not match expected value: bridge"
    );
    host.remove_address(CONT, "eth0", "192.168.1.50/24");
    let e = Macvlan::check(&host, &with_prev(&l3(r#""mode":"vepa""#))).unwrap_err();
    assert_eq!(
        e.msg,
        "Failed to match addr 192.168.1.50/24 on interface eth0"
    );
    let e = Macvlan::check(&host, &host.request(&l3(r#""mode":"vepa""#))).unwrap_err();
    assert_eq!(e.msg, "required prevResult missing");
}

#[test]
fn status_and_gc_go_to_ipam() {
    suite::assert_status_and_gc_go_to_ipam::<Macvlan>(&new_host(), &conf(""), &l3(""));
}
