//! ipvlan logic against the SDK's fake host.

use wasm_cni_sdk::fake::{ipam_result, netconf, suite, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::net::IpvlanMode;
use wasm_cni_sdk::{CniError, CniResult, Interface, Plugin};

use crate::Ipvlan;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf("1.1.0", "iv", "ipvlan", extra)
}

fn l3(extra: &str) -> String {
    conf(&with_ipam_type("static", extra))
}

fn new_host() -> FakeHost {
    let host =
        FakeHost::with_ipam_result(&[("192.168.1.50/24", Some("192.168.1.1"))], &["0.0.0.0/0"]);
    host.allow_node_link("ens3");
    host
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Ipvlan::add(host, &host.request(config))
}

#[test]
fn default_master_is_the_default_route_interface() {
    let host = new_host();
    let r = add(&host, &conf("")).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!(
        (l.kind.as_str(), l.ipvlan_mode, l.up, l.mtu),
        ("ipvlan", Some(IpvlanMode::L2), true, 1500)
    );
    assert_eq!(
        l.mac,
        host.link(NODE, "ens3").unwrap().mac,
        "the master's MAC"
    );
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(l.mac.as_str()));
    assert_eq!(r.interfaces[0].sandbox.as_deref(), Some(NETNS_PATH));
    assert_eq!(host.link_names(NODE), ["lo", "ens3"], "nothing on the node");
    suite::assert_default_master_needs_a_default_route::<Ipvlan>(&conf(""));
}

#[test]
fn modes_and_validation() {
    for (mode, want) in [
        ("", IpvlanMode::L2),
        ("l2", IpvlanMode::L2),
        ("l3", IpvlanMode::L3),
        ("l3s", IpvlanMode::L3s),
    ] {
        let host = new_host();
        add(&host, &conf(&format!(r#""master":"ens3","mode":"{mode}""#))).unwrap();
        assert_eq!(host.link(CONT, "eth0").unwrap().ipvlan_mode, Some(want));
    }
    let host = new_host();
    let before = host.snapshot();
    for (extra, code, msg) in [
        (r#""mode":"bridge""#, 7, r#"unknown ipvlan mode: "bridge""#),
        (
            r#""mtu":9000"#,
            7,
            "invalid MTU 9000, must be [0, master MTU(1500)]",
        ),
        (
            r#""master":"nope""#,
            999,
            r#"failed to lookup master "nope": not found"#,
        ),
    ] {
        let e = add(&host, &conf(extra)).unwrap_err();
        assert_eq!(e.code, code, "{extra}");
        assert!(e.msg.starts_with(msg), "{extra}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before);
}

#[test]
fn ipam_configures_the_link_and_dns_comes_from_config_only() {
    let host = new_host();
    let r = add(
        &host,
        &l3(r#""mode":"l3","dns":{"nameservers":["9.9.9.9"]}"#),
    )
    .unwrap();
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.dns.unwrap().nameservers, ["9.9.9.9"]);
    assert_eq!(host.addresses(CONT, "eth0"), ["192.168.1.50/24"]);
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.ndisc_notify")
            .as_deref(),
        Some("1")
    );
}

#[test]
fn chained_it_takes_the_previous_interface_as_master_and_its_addresses() {
    // After a plugin that put `uplink0` in the pod and addressed nothing
    // on eth0: ipvlan stacks on it and configures the addresses reported.
    let host = new_host();
    host.disable_policy();
    host.add_link(CONT, "uplink0", "device", 9000);
    let mut prev = ipam_result(&[("10.9.0.7/24", Some("10.9.0.1"))], &["0.0.0.0/0"]);
    prev.interfaces = vec![Interface {
        name: "uplink0".into(),
        sandbox: Some(NETNS_PATH.into()),
        ..Interface::default()
    }];
    let chained = conf(r#""linkInContainer":true"#);
    let r = Ipvlan::add(&host, &host.request_with_prev(&chained, &prev)).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!((l.kind.as_str(), l.mtu), ("ipvlan", 9000));
    assert_eq!(host.addresses(CONT, "eth0"), ["10.9.0.7/24"]);
    assert_eq!(r.ips.len(), 1);
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.interfaces.len(), 1, "{r:?}");
    assert!(host.ipam_calls().is_empty(), "no IPAM when chained");
    // Two interfaces: which one is the master is not for ipvlan to guess.
    let host = new_host();
    prev.interfaces.push(Interface {
        name: "uplink1".into(),
        ..Interface::default()
    });
    let e = Ipvlan::add(&host, &host.request_with_prev(&chained, &prev)).unwrap_err();
    assert_eq!(
        e.msg,
        "chained master failure. PrevResult lacks a single named interface"
    );
}

#[test]
fn failed_add_removes_the_link_and_releases_the_ip() {
    suite::assert_failed_ipam_add_rolls_back::<Ipvlan>(new_host, &l3(""));
}

#[test]
fn the_master_is_granted_as_the_host_grants_it() {
    suite::assert_master_granted_as_the_host_grants::<Ipvlan>(conf, "ipvlan");
}

#[test]
fn del_is_idempotent() {
    let host = new_host();
    let req = suite::assert_del_is_idempotent::<Ipvlan>(&host, &l3(r#""master":"gone""#), &l3(""));
    Ipvlan::add(&host, &req).unwrap();
    host.remove_container_netns();
    Ipvlan::del(&host, &req).unwrap();
}

#[test]
fn check_validates_mode_mac_and_addresses() {
    let host = new_host();
    let r = add(&host, &l3(r#""mode":"l3s""#)).unwrap();
    let with_prev = |config: &str| host.request_with_prev(config, &r);
    Ipvlan::check(&host, &with_prev(&l3(r#""mode":"l3s""#))).unwrap();
    let e = Ipvlan::check(&host, &with_prev(&l3(""))).unwrap_err();
    assert_eq!(
        e.msg,
        "container IPVlan mode l3s does not match expected value: l2"
    );
    let e = Ipvlan::check(&host, &with_prev(&l3(r#""mode":"l3s","master":"nope""#))).unwrap_err();
    assert!(
        e.msg.starts_with(r#"failed to lookup master "nope""#),
        "{}",
        e.msg
    );
    host.remove_address(CONT, "eth0", "192.168.1.50/24");
    let e = Ipvlan::check(&host, &with_prev(&l3(r#""mode":"l3s""#))).unwrap_err();
    assert_eq!(
        e.msg,
        "Failed to match addr 192.168.1.50/24 on interface eth0"
    );
    let e = Ipvlan::check(&host, &host.request(&l3(""))).unwrap_err();
    assert_eq!(e.msg, "required prevResult missing");
}

#[test]
fn status_and_gc_go_to_ipam() {
    suite::assert_status_and_gc_go_to_ipam::<Ipvlan>(&new_host(), &conf(""), &l3(""));
}
