//! portmap against the SDK's fake host.

use wasm_cni_sdk::fake::{netconf, FakeHost, NETNS_PATH};
use wasm_cni_sdk::filter::{FilterError, Protocol, Rule};
use wasm_cni_sdk::{CniResult, Interface, IpConfig, Plugin};

use crate::Portmap;

fn prev() -> CniResult {
    CniResult {
        interfaces: vec![
            Interface {
                name: "cni0".into(),
                ..Interface::default()
            },
            Interface {
                name: "veth1".into(),
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
                interface: Some(2),
            },
            // Another interface's address is not the pod's.
            IpConfig {
                address: "10.88.0.1/16".into(),
                gateway: None,
                interface: Some(0),
            },
            IpConfig {
                address: "10.88.0.6/16".into(),
                gateway: None,
                interface: Some(2),
            },
            IpConfig {
                address: "fd00::5/64".into(),
                gateway: None,
                interface: Some(2),
            },
        ],
        ..CniResult::default()
    }
}

fn conf(extra: &str, mappings: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("{extra},")
    };
    netconf(
        "1.1.0",
        "mynet",
        "portmap",
        &format!(r#"{extra}"runtimeConfig":{{"portMappings":{mappings}}}"#),
    )
}

fn pm(protocol: Protocol, host_ip: Option<&str>, hp: u16, addr: &str, cp: u16) -> Rule {
    Rule::PortMap {
        protocol,
        host_ip: host_ip.map(str::to_string),
        host_port: hp,
        address: addr.into(),
        port: cp,
    }
}

#[test]
fn maps_each_port_for_the_first_address_of_each_family() {
    let host = FakeHost::new("eth0");
    let c = conf(
        "",
        r#"[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},
            {"hostPort":5353,"containerPort":53,"protocol":"UDP","hostIP":"0.0.0.0"},
            {"hostPort":8443,"containerPort":443,"hostIP":"2001:db8::1"}]"#,
    );
    let req = host.request_with_prev(&c, &prev());
    let out = Portmap::add(&host, &req).unwrap();
    assert_eq!(out, prev(), "the prevResult passes through");
    assert_eq!(
        host.filter_rules(),
        vec![
            pm(Protocol::Tcp, None, 8080, "10.88.0.5", 80),
            pm(Protocol::Udp, None, 5353, "10.88.0.5", 53),
            Rule::HairpinMasquerade("10.88.0.5".into()),
            pm(Protocol::Tcp, None, 8080, "fd00::5", 80),
            pm(Protocol::Tcp, Some("2001:db8::1"), 8443, "fd00::5", 443),
            Rule::HairpinMasquerade("fd00::5".into()),
        ]
    );
    Portmap::check(&host, &req).unwrap();
    // DEL leaves the rules to the host.
    Portmap::del(&host, &req).unwrap();
    assert_eq!(host.filter_rules().len(), 6);
    host.set_filter_rules(Vec::new());
    let e = Portmap::check(&host, &req).unwrap_err();
    assert!(e.msg.contains("missing"), "{}", e.msg);
}

#[test]
fn snat_false_maps_without_hairpin_and_no_mappings_maps_nothing() {
    let host = FakeHost::new("eth0");
    let c = conf(r#""snat":false"#, r#"[{"hostPort":80,"containerPort":80}]"#);
    Portmap::add(&host, &host.request_with_prev(&c, &prev())).unwrap();
    assert_eq!(
        host.filter_rules(),
        vec![
            pm(Protocol::Tcp, None, 80, "10.88.0.5", 80),
            pm(Protocol::Tcp, None, 80, "fd00::5", 80)
        ]
    );
    let host = FakeHost::new("eth0");
    let c = conf("", "[]");
    Portmap::add(&host, &host.request_with_prev(&c, &prev())).unwrap();
    assert!(host.filter_rules().is_empty());
}

#[test]
fn unsupported_options_are_code_2_and_bad_values_code_7() {
    let host = FakeHost::new("eth0");
    for (extra, maps, key) in [
        (r#""markMasqBit":13"#, "[]", "markMasqBit"),
        (
            r#""externalSetMarkChain":"KUBE-MARK-MASQ""#,
            "[]",
            "externalSetMarkChain",
        ),
        (r#""conditionsV4":["-s","1.2.3.4"]"#, "[]", "conditionsV4"),
        (r#""backend":"ebpf""#, "[]", "backend"),
        (
            "",
            r#"[{"hostPort":1,"containerPort":1,"protocol":"icmp"}]"#,
            "runtimeConfig.portMappings.protocol",
        ),
    ] {
        let e =
            Portmap::add(&host, &host.request_with_prev(&conf(extra, maps), &prev())).unwrap_err();
        assert_eq!(e.code, 2, "{extra} {maps}: {e:?}");
        assert!(e.msg.contains(key), "{}", e.msg);
    }
    for maps in [
        r#"[{"hostPort":0,"containerPort":80}]"#,
        r#"[{"hostPort":80,"containerPort":70000}]"#,
        r#"[{"hostPort":80,"containerPort":80,"hostIP":"nope"}]"#,
    ] {
        let e = Portmap::add(&host, &host.request_with_prev(&conf("", maps), &prev())).unwrap_err();
        assert_eq!(e.code, 7, "{maps}: {e:?}");
    }
    let e = Portmap::add(
        &host,
        &host.request_with_prev(
            &conf(r#""markMasqBit":13,"externalSetMarkChain":"X""#, "[]"),
            &prev(),
        ),
    )
    .unwrap_err();
    assert_eq!(e.code, 7);
    // Empty conditions and the reference backends are fine.
    Portmap::add(
        &host,
        &host.request_with_prev(
            &conf(r#""conditionsV4":[],"backend":"nftables""#, "[]"),
            &prev(),
        ),
    )
    .unwrap();
    // Without a prevResult it is not chained.
    let e = Portmap::add(&host, &host.request(&conf("", "[]"))).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (7, "must be called as chained plugin")
    );
    assert!(host.filter_rules().is_empty());
}

#[test]
fn a_taken_port_is_a_plugin_error_naming_the_holder() {
    let host = FakeHost::new("eth0");
    host.fail_filter(FilterError::PortTaken(
        "tcp port 8080 (IPv4) is already mapped to container abc (eth0) of network \"mynet\""
            .into(),
    ));
    let c = conf("", r#"[{"hostPort":8080,"containerPort":80}]"#);
    let e = Portmap::add(&host, &host.request_with_prev(&c, &prev())).unwrap_err();
    assert_eq!(e.code, 100);
    assert!(e.msg.contains("container abc"), "{}", e.msg);
}
