//! vlan logic against the SDK's fake host.

use wasm_cni_sdk::fake::{netconf, suite, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::net::{LinkSettings, NetError, Ops};
use wasm_cni_sdk::{CniError, CniResult, Plugin};

use crate::Vlan;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { "," };
    netconf(
        "1.1.0",
        "vl",
        "vlan",
        &format!(r#""master":"ens3","vlanId":100{sep}{extra}"#),
    )
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
    Vlan::add(host, &host.request(config))
}

#[test]
fn a_vlan_of_the_master_goes_straight_into_the_container() {
    let host = new_host();
    let r = add(&host, &conf("")).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    let master = host.link(NODE, "ens3").unwrap();
    assert_eq!(
        (l.kind.as_str(), l.vlan_id, l.up, l.mtu),
        ("vlan", Some(100), true, 1500)
    );
    assert_eq!(l.mac, master.mac, "a vlan has its master's MAC");
    assert_eq!(r.interfaces.len(), 1);
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(l.mac.as_str()));
    assert_eq!(r.interfaces[0].sandbox.as_deref(), Some(NETNS_PATH));
    assert!(r.ips.is_empty());
    assert_eq!(host.link_names(NODE), ["lo", "ens3"], "nothing on the node");
}

#[test]
fn config_errors_change_nothing() {
    let host = new_host();
    let before = host.snapshot();
    let bare = |extra: &str| netconf("1.1.0", "vl", "vlan", extra);
    for (config, code, msg) in [
        (
            bare(r#""vlanId":5"#),
            7,
            "\"master\" field is required. It specifies the host interface name to create the VLAN for",
        ),
        (
            bare(r#""master":"ens3","vlanId":4095"#),
            7,
            "invalid VLAN ID 4095 (must be between 0 and 4094 inclusive)",
        ),
        (
            bare(r#""master":"ens3","vlanId":-1"#),
            7,
            "invalid VLAN ID -1 (must be between 0 and 4094 inclusive)",
        ),
        (
            conf(r#""mtu":9000"#),
            7,
            "invalid MTU 9000, must be [0, master MTU(1500)]",
        ),
        (
            bare(r#""master":"nope","vlanId":5"#),
            999,
            r#"failed to lookup master "nope": not found"#,
        ),
        (bare(r#""master":"ens3","vlanId":"5""#), 7, ""),
    ] {
        let e = add(&host, &config).unwrap_err();
        assert_eq!(e.code, code, "{config}: {}", e.msg);
        assert!(e.msg.starts_with(msg), "{config}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before);
    add(&host, &conf(r#""mtu":1400"#)).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().mtu, 1400);
}

#[test]
fn ipam_configures_the_link_and_dns_comes_from_config_only() {
    let host = new_host();
    let r = add(&host, &l3(r#""dns":{"nameservers":["9.9.9.9"]}"#)).unwrap();
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.dns.unwrap().nameservers, ["9.9.9.9"]);
    assert_eq!(host.addresses(CONT, "eth0"), ["192.168.1.50/24"]);
    assert!(host
        .routes(CONT)
        .contains(&"0.0.0.0/0 via 192.168.1.1 dev eth0".to_string()));
}

#[test]
fn failed_add_removes_the_link_and_releases_the_ip() {
    suite::assert_failed_ipam_add_rolls_back::<Vlan>(new_host, &l3(""));
}

#[test]
fn the_master_is_granted_as_the_host_grants_it() {
    // The host grants the master the config names (vlan has no default
    // master), and no other node link: the ADD passes its policy with
    // nothing granted by hand.
    let host = FakeHost::new("eth0");
    host.add_link(NODE, "ens9", "device", 1500);
    add(&host, &conf("")).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().kind, "vlan");
    let e = host.ns(NODE).set_link("ens9", &LinkSettings::up());
    assert!(matches!(e, Err(NetError::Refused(_))), "{e:?}");
}

#[test]
fn link_in_container_uses_a_container_master() {
    let host = new_host();
    host.disable_policy();
    host.add_link(CONT, "uplink0", "device", 1500);
    let config = netconf(
        "1.1.0",
        "vl",
        "vlan",
        r#""master":"uplink0","vlanId":7,"linkInContainer":true"#,
    );
    add(&host, &config).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().vlan_id, Some(7));
}

#[test]
fn del_is_idempotent_and_needs_no_master() {
    let host = new_host();
    let gone = netconf(
        "1.1.0",
        "vl",
        "vlan",
        r#""master":"gone","vlanId":100,"ipam":{"type":"static"}"#,
    );
    let req = suite::assert_del_is_idempotent::<Vlan>(&host, &gone, &l3(""));
    Vlan::add(&host, &req).unwrap();
    host.remove_container_netns();
    Vlan::del(&host, &req).unwrap();
}

#[test]
fn check_validates_id_mtu_mac_and_addresses() {
    let host = new_host();
    let r = add(&host, &l3(r#""mtu":1400"#)).unwrap();
    let with_prev = |config: &str| host.request_with_prev(config, &r);
    Vlan::check(&host, &with_prev(&l3(r#""mtu":1400"#))).unwrap();
    Vlan::check(&host, &with_prev(&l3(""))).unwrap();
    let other_id = netconf(
        "1.1.0",
        "vl",
        "vlan",
        r#""master":"ens3","vlanId":101,"ipam":{"type":"static"}"#,
    );
    let e = Vlan::check(&host, &with_prev(&other_id)).unwrap_err();
    assert_eq!(
        e.msg,
        "container vlan id 100 does not match expected value: 101"
    );
    let e = Vlan::check(&host, &with_prev(&l3(r#""mtu":1300"#))).unwrap_err();
    assert_eq!(
        e.msg,
        "container vlan MTU 1400 does not match expected value: 1300"
    );
    host.remove_address(CONT, "eth0", "192.168.1.50/24");
    let e = Vlan::check(&host, &with_prev(&l3(""))).unwrap_err();
    assert_eq!(
        e.msg,
        "Failed to match addr 192.168.1.50/24 on interface eth0"
    );
    let e = Vlan::check(&host, &host.request(&l3(""))).unwrap_err();
    assert_eq!(e.msg, "vlan: required prevResult missing");
}

#[test]
fn status_and_gc_go_to_ipam() {
    suite::assert_status_and_gc_go_to_ipam::<Vlan>(&new_host(), &conf(""), &l3(""));
}
