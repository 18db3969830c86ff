//! bandwidth against the SDK's fake host, chained after a veth the
//! attachment made.

use wasm_cni_sdk::fake::{netconf, FakeHost, NsId};
use wasm_cni_sdk::net::{Ops, RateLimit};
use wasm_cni_sdk::veth::setup_veth;
use wasm_cni_sdk::{CniResult, Host, Interface, Plugin};

use crate::plugin::ifb_name;
use crate::Bandwidth;

/// A fake host with a veth pair the attachment created, and the result
/// that reports it.
fn chained() -> (FakeHost, CniResult) {
    let host = FakeHost::new("eth0");
    let node = host.node_netns().unwrap();
    let cont = host.container_netns().unwrap();
    let pair = setup_veth(&node, &cont, "mynet", "ctr1", "eth0", Some(1400), None).unwrap();
    let prev = CniResult {
        interfaces: vec![
            Interface {
                name: pair.host.name.clone(),
                ..Interface::default()
            },
            Interface {
                name: "eth0".into(),
                sandbox: Some(wasm_cni_sdk::fake::NETNS_PATH.into()),
                ..Interface::default()
            },
        ],
        ..CniResult::default()
    };
    (host, prev)
}

fn conf(extra: &str) -> String {
    netconf("1.1.0", "mynet", "bandwidth", extra)
}

#[test]
fn the_ifb_name_is_the_references() {
    // What the reference v1.1.1 creates for network "mynet", container
    // "ctr1" (SHA-512, 12 hex digits).
    assert_eq!(ifb_name("mynet", "ctr1"), "bwp5145007e2a84");
}

#[test]
fn ingress_and_egress_limits() {
    let (host, prev) = chained();
    let hv = prev.interfaces[0].name.clone();
    let c = conf(
        r#""ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":200000"#,
    );
    let req = host.request_with_prev(&c, &prev);
    let out = Bandwidth::add(&host, &req).unwrap();
    let ifb = ifb_name("mynet", &req.container_id);
    assert_eq!(out.interfaces.len(), 3);
    assert_eq!(out.interfaces[2].name, ifb);
    let node = host.node_netns().unwrap();
    let limit = |rate, burst| RateLimit { rate, burst };
    assert!(node.has_rate_limit(&hv, limit(1_000_000, 100_000)).unwrap());
    assert!(node
        .has_rate_limit(&ifb, limit(2_000_000, 200_000))
        .unwrap());
    assert_eq!(node.link_by_name(&ifb).unwrap().mtu, 1400);
    assert!(node
        .list_qdiscs(&hv)
        .unwrap()
        .iter()
        .any(|q| q.kind == "ingress"));
    let checked = host.request_with_prev(&c, &out);
    Bandwidth::check(&host, &checked).unwrap();
    // A different limit does not check.
    let other = conf(
        r#""ingressRate":5000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":200000"#,
    );
    let e = Bandwidth::check(&host, &host.request_with_prev(&other, &out)).unwrap_err();
    assert!(e.msg.contains("ingress limit"), "{}", e.msg);
    Bandwidth::del(&host, &req).unwrap();
    assert!(!host.link_names(NsId::Node).contains(&ifb));
    // DEL again: nothing left to do.
    Bandwidth::del(&host, &req).unwrap();
}

#[test]
fn runtime_config_replaces_the_config_and_zero_means_nothing() {
    let (host, prev) = chained();
    let hv = prev.interfaces[0].name.clone();
    let c = conf(
        r#""ingressRate":1000000,"ingressBurst":100000,
           "runtimeConfig":{"bandwidth":{"ingressRate":3000000,"ingressBurst":300000}}"#,
    );
    let out = Bandwidth::add(&host, &host.request_with_prev(&c, &prev)).unwrap();
    assert_eq!(out, prev, "no egress limit: no ifb");
    let node = host.node_netns().unwrap();
    assert!(node
        .has_rate_limit(
            &hv,
            RateLimit {
                rate: 3_000_000,
                burst: 300_000
            }
        )
        .unwrap());
    let (host, prev) = chained();
    let out = Bandwidth::add(&host, &host.request_with_prev(&conf(""), &prev)).unwrap();
    assert_eq!(out, prev);
    assert!(host
        .node_netns()
        .unwrap()
        .list_qdiscs(&hv)
        .unwrap()
        .is_empty());
}

#[test]
fn bad_rates_are_refused() {
    let (host, prev) = chained();
    for (extra, msg) in [
        (
            r#""ingressRate":1000"#,
            "if rate is set, burst must also be set",
        ),
        (
            r#""egressBurst":1000"#,
            "if burst is set, rate must also be set",
        ),
        (
            r#""ingressRate":-1,"ingressBurst":8"#,
            "rate and burst must be a positive integer",
        ),
        (
            r#""egressRate":1,"egressBurst":40000000000"#,
            "burst cannot be more than 4GB",
        ),
    ] {
        let e = Bandwidth::add(&host, &host.request_with_prev(&conf(extra), &prev)).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (7, msg), "{extra}");
    }
    let e = Bandwidth::add(
        &host,
        &host.request(&conf(r#""ingressRate":8,"ingressBurst":8"#)),
    )
    .unwrap_err();
    assert_eq!(e.msg, "must be called as chained plugin");
    // A host interface that is not the container's veth peer.
    let mut wrong = prev.clone();
    wrong.interfaces[0].name = "other0".into();
    let e = Bandwidth::add(
        &host,
        &host.request_with_prev(&conf(r#""ingressRate":8,"ingressBurst":8"#), &wrong),
    )
    .unwrap_err();
    assert_eq!(e.msg, "no host interface found");
}
