//! loopback logic against the SDK's fake host.

use wasm_cni_sdk::fake::{FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::{CniResult, Interface, Plugin};

use crate::Loopback;

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#;

#[test]
fn add_sets_lo_up_and_reports_its_addresses() {
    let host = FakeHost::new("eth0");
    let r = Loopback::add(&host, &host.request(CONF)).unwrap();
    assert!(host.link(NsId::Container, "lo").unwrap().up);
    assert_eq!(
        r.interfaces,
        [Interface {
            name: "lo".into(),
            mac: Some("00:00:00:00:00:00".into()),
            sandbox: Some(NETNS_PATH.into()),
            ..Interface::default()
        }]
    );
    let ips: Vec<(&str, Option<u32>)> = r
        .ips
        .iter()
        .map(|i| (i.address.as_str(), i.interface))
        .collect();
    assert_eq!(ips, [("127.0.0.1/8", Some(0)), ("::1/128", Some(0))]);
    assert!(r.ips.iter().all(|i| i.gateway.is_none()));
    assert!(r.routes.is_empty() && r.dns.is_none());
}

#[test]
fn add_passes_prev_result_through_and_ignores_ifname() {
    let host = FakeHost::new("eth0");
    let mut req = host.request(CONF);
    req.ifname = "whatever".into();
    let prev = CniResult {
        interfaces: vec![Interface {
            name: "eth0".into(),
            ..Interface::default()
        }],
        ..CniResult::default()
    };
    req.prev_result = Some(prev.clone());
    assert_eq!(Loopback::add(&host, &req).unwrap(), prev);
    assert!(host.link(NsId::Container, "lo").unwrap().up);
}

#[test]
fn non_loopback_address_on_lo_is_an_error() {
    let host = FakeHost::new("eth0");
    host.add_address(NsId::Container, "lo", "10.9.9.9/32");
    let e = Loopback::add(&host, &host.request(CONF)).unwrap_err();
    assert_eq!(
        e.msg,
        r#"loopback interface found with non-loopback address "10.9.9.9""#
    );
}

#[test]
fn del_sets_lo_down_and_tolerates_a_missing_netns() {
    let host = FakeHost::new("eth0");
    let req = host.request(CONF);
    Loopback::add(&host, &req).unwrap();
    Loopback::check(&host, &req).unwrap();
    Loopback::del(&host, &req).unwrap();
    assert!(!host.link(NsId::Container, "lo").unwrap().up);
    assert_eq!(
        Loopback::check(&host, &req).unwrap_err().msg,
        "loopback interface is down"
    );
    Loopback::del(&host, &req).unwrap();
    host.remove_container_netns();
    Loopback::del(&host, &req).unwrap();
    let mut no_netns = req.clone();
    no_netns.netns = None;
    Loopback::del(&host, &no_netns).unwrap();
    assert!(Loopback::add(&host, &req).is_err());
}

#[test]
fn status_and_gc_are_no_ops() {
    let host = FakeHost::new("eth0");
    Loopback::status(&host, CONF).unwrap();
    Loopback::gc(&host, CONF, &[]).unwrap();
    assert!(host.ipam_calls().is_empty());
}
