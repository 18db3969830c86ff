//! firewall against the SDK's fake host.

use wasm_cni_sdk::fake::{netconf, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::filter::{FilterError, Rule};
use wasm_cni_sdk::net::{LinkSettings, Ops};
use wasm_cni_sdk::{CniResult, Interface, IpConfig, Plugin};

use crate::Firewall;

fn prev() -> CniResult {
    CniResult {
        interfaces: vec![
            Interface {
                name: "cni0".into(),
                ..Interface::default()
            },
            Interface {
                name: "eth0".into(),
                sandbox: Some(NETNS_PATH.into()),
                ..Interface::default()
            },
        ],
        ips: vec![
            IpConfig {
                address: "10.88.0.5/16".into(),
                gateway: Some("10.88.0.1".into()),
                interface: Some(1),
            },
            IpConfig {
                address: "fd00::5/64".into(),
                gateway: None,
                interface: Some(1),
            },
        ],
        ..CniResult::default()
    }
}

fn conf(extra: &str) -> String {
    netconf("1.1.0", "mynet", "firewall", extra)
}

/// What the bridge plugin before it in the chain made: `cni0` with the
/// attachment's veth as a port. The host lets a plugin isolate only a
/// bridge the attachment's own link is a port of.
fn bridged(host: &FakeHost) {
    host.allow_node_link("cni0");
    let (n, c) = (host.ns(NsId::Node), host.ns(NsId::Container));
    n.ensure_bridge("cni0", None).unwrap();
    c.create_veth("eth0", "veth1", &n, None, None).unwrap();
    let port = LinkSettings {
        master: Some("cni0".into()),
        ..LinkSettings::default()
    };
    n.set_link("veth1", &port).unwrap();
}

#[test]
fn forwarding_for_each_address_and_same_bridge_isolation() {
    let host = FakeHost::new("eth0");
    let c = conf(r#""ingressPolicy":"same-bridge""#);
    let req = host.request_with_prev(&c, &prev());
    // Another network's bridge is not this attachment's to isolate.
    let e = Firewall::add(&host, &req).unwrap_err();
    assert!(e.msg.contains("refused by host policy"), "{}", e.msg);
    assert!(host.filter_rules().is_empty());
    bridged(&host);
    assert_eq!(Firewall::add(&host, &req).unwrap(), prev());
    assert_eq!(
        host.filter_rules(),
        vec![
            Rule::AllowForward("10.88.0.5".into()),
            Rule::AllowForward("fd00::5".into()),
            Rule::IsolateBridge("cni0".into()),
        ]
    );
    Firewall::check(&host, &req).unwrap();
    // DEL leaves the rules to the host.
    Firewall::del(&host, &req).unwrap();
    assert_eq!(host.filter_rules().len(), 3);
    host.set_filter_rules(Vec::new());
    assert!(Firewall::check(&host, &req).is_err());

    // The default policy is open.
    let host = FakeHost::new("eth0");
    Firewall::add(&host, &host.request_with_prev(&conf(""), &prev())).unwrap();
    assert_eq!(host.filter_rules().len(), 2);
}

#[test]
fn options_it_cannot_honour_are_refused() {
    let host = FakeHost::new("eth0");
    for (extra, key) in [
        (r#""backend":"firewalld""#, "backend"),
        (
            r#""iptablesAdminChainName":"MY-ADMIN""#,
            "iptablesAdminChainName",
        ),
        (r#""firewalldZone":"trusted""#, "firewalldZone"),
    ] {
        let e = Firewall::add(&host, &host.request_with_prev(&conf(extra), &prev())).unwrap_err();
        assert_eq!(e.code, 2, "{extra}");
        assert!(e.msg.contains(key), "{}", e.msg);
    }
    let e = Firewall::add(
        &host,
        &host.request_with_prev(&conf(r#""ingressPolicy":"closed""#), &prev()),
    )
    .unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (7, "unknown ingress policy: \"closed\"")
    );
    let e = Firewall::add(&host, &host.request(&conf(""))).unwrap_err();
    assert_eq!(e.msg, "missing prevResult from earlier plugin");
    let mut bare = prev();
    bare.interfaces.clear();
    let e = Firewall::add(
        &host,
        &host.request_with_prev(&conf(r#""ingressPolicy":"same-bridge""#), &bare),
    )
    .unwrap_err();
    assert!(
        e.msg.contains("chain \"firewall\" plugin with \"bridge\""),
        "{}",
        e.msg
    );
    host.fail_filter(FilterError::Refused("no".into()));
    let e = Firewall::add(&host, &host.request_with_prev(&conf(""), &prev())).unwrap_err();
    assert_eq!(e.code, 999);
    assert!(host.filter_rules().is_empty());
}
