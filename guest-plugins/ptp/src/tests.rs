//! ptp logic against the SDK's fake host.

use wasm_cni_sdk::fake::{ipam_result, netconf, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::net::NetError;
use wasm_cni_sdk::{CniError, CniResult, Plugin, Request};

use crate::Ptp;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf(
        "1.0.0",
        "rs-ptpnet",
        "ptp",
        &with_ipam_type("host-local", extra),
    )
}

fn host_with(ips: &[(&str, Option<&str>)], routes: &[&str]) -> FakeHost {
    FakeHost::with_ipam_result(ips, routes)
}

fn host_v4() -> FakeHost {
    host_with(&[("10.200.2.2/24", Some("10.200.2.1"))], &["0.0.0.0/0"])
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Ptp::add(host, &host.request(config))
}

#[test]
fn add_v4_matches_the_reference_run() {
    let host = host_v4();
    let r = add(&host, &conf(r#""mtu":1400"#)).unwrap();
    let veth = host.node_veth();
    assert_eq!(r.interfaces.len(), 2);
    assert_eq!(r.interfaces[0].name, veth);
    assert_eq!(r.interfaces[0].sandbox, None);
    assert_eq!(r.interfaces[1].name, "eth0");
    assert_eq!(r.interfaces[1].sandbox.as_deref(), Some(NETNS_PATH));
    assert_eq!(r.ips[0].interface, Some(1));
    assert_eq!(r.ips[0].gateway.as_deref(), Some("10.200.2.1"));
    assert_eq!(r.routes[0].dst, "0.0.0.0/0");

    // Container: no kernel connected route; gw/32 scope link and subnet via gw.
    assert_eq!(
        host.link(CONT, "eth0").map(|l| (l.mtu, l.up)),
        Some((1400, true))
    );
    assert_eq!(host.addresses(CONT, "eth0"), ["10.200.2.2/24"]);
    assert_eq!(
        host.routes(CONT),
        [
            "0.0.0.0/0 via 10.200.2.1 dev eth0",
            "10.200.2.1/32 dev eth0 src 10.200.2.2 scope 253",
            "10.200.2.0/24 via 10.200.2.1 dev eth0 src 10.200.2.2",
        ]
    );
    // Node: veth with gateway/32 and a host route to the container.
    assert_eq!(
        host.link(NODE, &veth).map(|l| (l.mtu, l.up)),
        Some((1400, true))
    );
    assert_eq!(host.addresses(NODE, &veth), ["10.200.2.1/32"]);
    assert!(host
        .routes(NODE)
        .contains(&format!("10.200.2.2/32 dev {veth} scope 254")));
    assert_eq!(
        host.sysctl(NODE, "net.ipv4.ip_forward").as_deref(),
        Some("1")
    );
    assert_eq!(host.ipam_calls(), ["add"]);
}

#[test]
fn add_dual_stack() {
    let host = host_with(
        &[
            ("10.1.1.2/24", Some("10.1.1.1")),
            ("2001:db8::2/64", Some("2001:db8::1")),
        ],
        &["0.0.0.0/0", "::/0"],
    );
    add(&host, &conf("")).unwrap();
    let veth = host.node_veth();
    assert_eq!(
        host.addresses(NODE, &veth),
        ["10.1.1.1/32", "2001:db8::1/128"]
    );
    // The kernel keeps no scope on an IPv6 route.
    assert!(host
        .routes(NODE)
        .contains(&format!("2001:db8::2/128 dev {veth}")));
    assert_eq!(
        host.sysctl(NODE, "net.ipv6.conf.all.forwarding").as_deref(),
        Some("1")
    );
    let routes = host.routes(CONT);
    assert!(
        routes.contains(&"::/0 via 2001:db8::1 dev eth0".to_string()),
        "{routes:?}"
    );
    assert!(routes.contains(&"2001:db8::/64 via 2001:db8::1 dev eth0 src 2001:db8::2".to_string()));
    assert!(!routes.iter().any(|r| r.starts_with("2001:db8::/64 dev")));
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.keep_addr_on_down")
            .as_deref(),
        Some("1")
    );
}

#[test]
fn config_errors() {
    let host = host_v4();
    let e = add(&host, r#"{"cniVersion":"1.0.0","name":"n","type":"ptp"}"#).unwrap_err();
    assert_eq!(e.code, 7);
    let e = add(&host, &conf(r#""ipMasq":true,"ipMasqBackend":"bpf""#)).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (2, "unsupported field ipMasqBackend: \"bpf\"")
    );
    let e = add(&host, &conf(r#""mtu":20"#)).unwrap_err();
    assert_eq!(e.code, 7);
    assert!(host.ipam_calls().is_empty());
}

#[test]
fn ip_masq_asks_the_host_and_check_verifies() {
    use wasm_cni_sdk::filter::{FilterError, Rule};
    let host = host_v4();
    let config = conf(r#""ipMasq":true,"ipMasqBackend":"iptables""#);
    let r = add(&host, &config).unwrap();
    let addr = r.ips[0].address.split('/').next().unwrap().to_string();
    assert_eq!(host.filter_rules().len(), 1);
    assert!(matches!(&host.filter_rules()[0],
        Rule::Masquerade { source, except } if *source == addr && except.len() == 1));
    Ptp::check(&host, &host.request_with_prev(&config, &r)).unwrap();
    host.set_filter_rules(Vec::new());
    let e = Ptp::check(&host, &host.request_with_prev(&config, &r)).unwrap_err();
    assert!(e.msg.contains("missing"), "{}", e.msg);

    // A failure to add the rule undoes the veth and the allocation.
    let host = host_v4();
    host.fail_filter(FilterError::Kernel(1, "EPERM".into()));
    add(&host, &config).unwrap_err();
    assert!(!host.ipam_allocated());
    assert!(host.node_veth().is_empty());
}

#[test]
fn missing_gateway_releases_the_ip() {
    let host = host_with(&[("10.1.1.2/24", None)], &[]);
    let e = add(&host, &conf("")).unwrap_err();
    assert_eq!(e.msg, "ptp: IPAM returned no gateway for 10.1.1.2/24");
    assert_eq!(host.ipam_calls(), ["add", "del"]);
    assert!(host.node_veth().is_empty());
    let host = host_with(&[], &[]);
    assert_eq!(
        add(&host, &conf("")).unwrap_err().msg,
        "IPAM plugin returned missing IP config"
    );
    assert!(!host.ipam_allocated());
}

#[test]
fn failure_on_the_node_side_leaves_nothing_behind() {
    let host = host_v4();
    let before = host.snapshot();
    host.fail_next(
        "add_address",
        "10.200.2.1/32",
        NetError::Kernel(-13, "permission denied".into()),
    );
    let e = add(&host, &conf("")).unwrap_err();
    assert!(
        e.msg
            .starts_with("failed to add IP addr 10.200.2.1/32 to veth"),
        "{}",
        e.msg
    );
    assert!(!host.ipam_allocated());
    // Only forwarding changed (the reference enables it first, too).
    host.set_sysctl(NODE, "net.ipv4.ip_forward", "0");
    assert_eq!(host.snapshot(), before);
}

#[test]
fn a_second_attachment_in_the_same_netns_fails_cleanly() {
    let host = host_v4();
    host.disable_policy();
    add(&host, &conf("")).unwrap();
    let first = host.snapshot();
    host.set_ipam_result(ipam_result(&[("10.200.2.3/24", Some("10.200.2.1"))], &[]));
    let mut req = host.request(&conf(""));
    req.ifname = "eth1".into();
    let e = Ptp::add(&host, &req).unwrap_err();
    assert!(
        e.msg.starts_with("failed to add route 10.200.2.1/32"),
        "{}",
        e.msg
    );
    assert_eq!(host.link_names(CONT), ["lo", "eth0"]);
    assert_eq!(host.snapshot(), first);
}

#[test]
fn del_releases_first_and_is_idempotent() {
    let host = host_v4();
    let req = host.request(&conf(""));
    Ptp::add(&host, &req).unwrap();
    Ptp::del(&host, &req).unwrap();
    assert_eq!(host.link_names(CONT), ["lo"]);
    assert!(host.node_veth().is_empty());
    assert!(!host.routes(NODE).iter().any(|r| r.contains("10.200.2.2")));
    Ptp::del(&host, &req).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "del", "del"]);

    // IPAM DEL failing stops DEL before the link (reference order).
    let host = host_v4();
    Ptp::add(&host, &req).unwrap();
    host.set_ipam_error("del", CniError::internal("ipam down"));
    assert_eq!(Ptp::del(&host, &req).unwrap_err().msg, "ipam down");
    assert_eq!(host.link_names(CONT), ["lo", "eth0"]);

    // Netns gone.
    let host = host_v4();
    Ptp::add(&host, &req).unwrap();
    host.remove_container_netns();
    Ptp::del(&host, &req).unwrap();
    assert!(host.node_veth().is_empty());
    let mut no_netns = req.clone();
    no_netns.netns = None;
    Ptp::del(&host, &no_netns).unwrap();
}

#[test]
fn check_validates_prev_result() {
    let host = host_v4();
    let r = add(&host, &conf("")).unwrap();
    let mut req: Request = host.request(&conf(""));
    req.prev_result = Some(r.clone());
    Ptp::check(&host, &req).unwrap();
    host.remove_route(CONT, "10.200.2.0/24");
    let e = Ptp::check(&host, &req).unwrap_err();
    assert_eq!(
        e.msg,
        "Failed to find Gateway 10.200.2.1 for interface eth0"
    );

    let mut other = req.clone();
    other.netns = Some("/var/run/netns/other".into());
    let e = Ptp::check(&host, &other).unwrap_err();
    assert!(e.msg.starts_with("Sandbox in prevResult"), "{}", e.msg);
    req.prev_result = None;
    assert_eq!(
        Ptp::check(&host, &req).unwrap_err().msg,
        "Required prevResult missing"
    );
}

#[test]
fn dns_and_status() {
    let host = host_v4();
    let r = add(&host, &conf(r#""dns":{"nameservers":["10.0.0.53"]}"#)).unwrap();
    assert_eq!(r.dns.unwrap().nameservers, ["10.0.0.53"]);
    Ptp::status(&host, &conf("")).unwrap();
    Ptp::gc(&host, &conf(""), &[]).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "status", "gc"]);
}

/// `vm`: a tap on the node holding the gateway, a route to the reserved
/// address through it, nothing in the container.
#[test]
fn vm_tap_routes_the_reserved_address() {
    use wasm_cni_sdk::fake::{FakeHost, NsId};
    let host = FakeHost::with_ipam_result(&[("10.1.2.2/24", Some("10.1.2.1"))], &[]);
    let config = wasm_cni_sdk::fake::netconf(
        "1.1.0",
        "mynet",
        "ptp",
        &wasm_cni_sdk::fake::with_ipam_type(
            "host-local",
            r#""vm":{"interface":"tap","owner":107}"#,
        ),
    );
    let r = crate::Ptp::add(&host, &host.request(&config)).unwrap();
    assert_eq!(r.interfaces.len(), 1);
    let tap = r.interfaces[0].name.clone();
    assert!(tap.starts_with("tap"), "{tap}");
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(host.link(NsId::Node, &tap).unwrap().kind, "tun");
    assert_eq!(host.link_names(NsId::Container), ["lo"]);
    let mut req = host.request(&config);
    req.prev_result = Some(r);
    crate::Ptp::check(&host, &req).unwrap();
    crate::Ptp::del(&host, &host.request(&config)).unwrap();
    assert!(host.link(NsId::Node, &tap).is_none());
    assert!(!host.ipam_allocated());
    let bad = wasm_cni_sdk::fake::netconf(
        "1.1.0",
        "mynet",
        "ptp",
        &wasm_cni_sdk::fake::with_ipam_type("host-local", r#""vm":{"interface":"macvtap"}"#),
    );
    assert_eq!(
        crate::Ptp::add(&host, &host.request(&bad))
            .unwrap_err()
            .code,
        7
    );
}
