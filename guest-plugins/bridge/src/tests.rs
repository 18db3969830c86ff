//! Bridge logic against the SDK's fake host.

use wasm_cni_sdk::fake::{ipam_result, netconf, suite, with_ipam_type, FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::naming::veth_name;
use wasm_cni_sdk::net::{LinkSettings, NetError, Ops};
use wasm_cni_sdk::{CniError, CniResult, Dns, Host, Plugin};

use crate::Bridge;

const NODE: NsId = NsId::Node;
const CONT: NsId = NsId::Container;

fn conf(extra: &str) -> String {
    netconf("1.1.0", "mynet", "bridge", extra)
}

fn l3(extra: &str) -> String {
    conf(&with_ipam_type("host-local", extra))
}

fn host_v4() -> FakeHost {
    let host = FakeHost::with_ipam_result(&[("10.1.2.2/24", None)], &["0.0.0.0/0"]);
    host.allow_node_link("cni0");
    host
}

fn add(host: &FakeHost, config: &str) -> Result<CniResult, CniError> {
    Bridge::add(host, &host.request(config))
}

#[test]
fn invalid_configs_have_reference_messages() {
    let host = host_v4();
    let cases = [
        (
            conf(r#""hairpinMode":true,"promiscMode":true"#),
            7,
            "cannot set hairpin mode and promiscuous mode at the same time",
        ),
        (
            conf(r#""vlan":-100"#),
            7,
            "invalid VLAN ID -100 (must be between 0 and 4094)",
        ),
        (
            conf(r#""vlan":5000"#),
            7,
            "invalid VLAN ID 5000 (must be between 0 and 4094)",
        ),
        (
            conf(r#""vlanTrunk":[{"minID":5}]"#),
            7,
            "minID and maxID should be configured simultaneously, maxID is missing",
        ),
        (
            conf(r#""vlanTrunk":[{"maxID":5}]"#),
            7,
            "minID and maxID should be configured simultaneously, minID is missing",
        ),
        (
            conf(r#""vlanTrunk":[{"minID":0,"maxID":5}]"#),
            7,
            "incorrect trunk minID parameter",
        ),
        (
            conf(r#""vlanTrunk":[{"minID":1,"maxID":5000}]"#),
            7,
            "incorrect trunk maxID parameter",
        ),
        (
            conf(r#""vlanTrunk":[{"minID":9,"maxID":5}]"#),
            7,
            "minID is greater than maxID in trunk parameter",
        ),
        (
            conf(r#""vlanTrunk":[{"id":4095}]"#),
            7,
            "incorrect trunk id parameter",
        ),
        (
            l3(r#""disableContainerInterface":true"#),
            7,
            "cannot use IPAM when DisableContainerInterface flag is set",
        ),
        (
            conf(r#""mtu":-1"#),
            7,
            "invalid MTU -1, must be 0 (unset) or between 68 and 65535",
        ),
        (
            conf(r#""mtu":70000"#),
            7,
            "invalid MTU 70000, must be 0 (unset) or between 68 and 65535",
        ),
        (conf(r#""bridge":"""#), 7, "invalid bridge name \"\""),
        (
            conf(r#""runtimeConfig":{"mac":"zz:00"}"#),
            7,
            "invalid MAC address \"zz:00\" (from runtimeConfig.mac)",
        ),
        (conf(r#""isGateway":"yes""#), 7, ""),
        ("{oops".to_string(), 6, "failed to load netconf"),
    ];
    let before = host.snapshot();
    for (config, code, msg) in cases {
        let e = add(&host, &config).unwrap_err();
        assert_eq!(e.code, code, "{config}: {e}");
        assert!(e.msg.starts_with(msg), "{config}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before, "a rejected config changes nothing");
    assert!(host.ipam_calls().is_empty());
}

#[test]
fn unsupported_fields_are_code_2_and_change_nothing() {
    let host = host_v4();
    let before = host.snapshot();
    for (extra, key) in [
        (r#""ipMasq":true,"ipMasqBackend":"ebpf""#, "ipMasqBackend"),
        (r#""vlan":100"#, "vlan"),
        (
            r#""vlanTrunk":[{"id":101},{"minID":200,"maxID":210}]"#,
            "vlanTrunk",
        ),
        (r#""portIsolation":true"#, "portIsolation"),
    ] {
        let e = add(&host, &l3(extra)).unwrap_err();
        assert_eq!(e.code, 2, "{extra}");
        assert!(
            e.msg.starts_with(&format!("unsupported field {key}")),
            "{}",
            e.msg
        );
    }
    assert_eq!(host.snapshot(), before);
    assert!(host.filter_rules().is_empty());
    // Defaults of those fields are fine.
    add(
        &host,
        &l3(r#""ipMasq":false,"vlan":0,"vlanTrunk":[],"macspoofchk":false"#),
    )
    .unwrap();
}

#[test]
fn unknown_cni_args_are_rejected_unless_ignored() {
    let host = host_v4();
    let mut req = host.request(&l3(""));
    req.args = vec![("K8S_POD_NAME".into(), "p".into())];
    let e = Bridge::add(&host, &req).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (4, r#"ARGS: unknown args ["K8S_POD_NAME=p"]"#)
    );
    req.args.insert(0, ("IgnoreUnknown".into(), "1".into()));
    Bridge::add(&host, &req).unwrap();
}

#[test]
fn add_v4_gateway_builds_the_reference_topology() {
    let host = host_v4();
    let r = add(&host, &l3(r#""isGateway":true"#)).unwrap();

    // Result: [bridge, host veth, container].
    assert_eq!(r.interfaces.len(), 3);
    let veth = host.node_veth();
    assert_eq!(veth, veth_name("mynet", "ctr1", "eth0", 0));
    assert_eq!(r.interfaces[0].name, "cni0");
    assert_eq!(r.interfaces[0].mac, host.link(NODE, "cni0").map(|l| l.mac));
    assert_eq!(r.interfaces[1].name, veth);
    assert_eq!(r.interfaces[1].mac, host.link(NODE, &veth).map(|l| l.mac));
    assert_ne!(r.interfaces[0].mac, r.interfaces[1].mac);
    assert_eq!(r.interfaces[2].name, "eth0");
    assert_eq!(r.interfaces[2].sandbox.as_deref(), Some(NETNS_PATH));
    assert_eq!(r.interfaces[2].mac, host.link(CONT, "eth0").map(|l| l.mac));
    assert_eq!(r.ips.len(), 1);
    assert_eq!(r.ips[0].address, "10.1.2.2/24");
    assert_eq!(r.ips[0].gateway.as_deref(), Some("10.1.2.1"));
    assert_eq!(r.ips[0].interface, Some(2));
    assert_eq!(r.routes.len(), 1);
    assert_eq!(r.dns, None);

    // Node: lo, ens3, cni0 with the gateway, the veth enslaved and up.
    assert_eq!(host.link_names(NODE), ["lo", "ens3", "cni0", veth.as_str()]);
    let br = host.link(NODE, "cni0").unwrap();
    assert!(br.up && br.kind == "bridge" && !br.promisc);
    assert_eq!(host.addresses(NODE, "cni0"), ["10.1.2.1/24"]);
    let hv = host.link(NODE, &veth).unwrap();
    assert_eq!((hv.master, hv.up, hv.oper_up), (Some(br.index), true, true));
    assert_eq!(host.hairpin(NODE, &veth), Some(false));
    assert_eq!(
        host.sysctl(NODE, "net.ipv4.ip_forward").as_deref(),
        Some("1")
    );
    assert_eq!(
        host.sysctl(NODE, "net.ipv6.conf.all.forwarding").as_deref(),
        Some("0")
    );
    assert_eq!(
        host.sysctl(NODE, "net.ipv6.conf.cni0.accept_ra").as_deref(),
        Some("0")
    );
    assert_eq!(
        host.sysctl(NODE, &format!("net.ipv6.conf.{veth}.accept_ra"))
            .as_deref(),
        Some("0")
    );

    // Container: eth0 (veth peer of the host end) up with the address and
    // the default route via the gateway.
    let c = host.link(CONT, "eth0").unwrap();
    assert_eq!(
        (c.kind.as_str(), c.up, c.peer_index),
        ("veth", true, Some(hv.index))
    );
    assert_eq!(host.addresses(CONT, "eth0"), ["10.1.2.2/24"]);
    assert_eq!(
        host.routes(CONT),
        [
            "10.1.2.0/24 dev eth0 src 10.1.2.2 scope 253",
            "0.0.0.0/0 via 10.1.2.1 dev eth0"
        ]
    );
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.accept_dad")
            .as_deref(),
        Some("0")
    );
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.eth0.arp_notify")
            .as_deref(),
        Some("1")
    );
    assert_eq!(host.ipam_calls(), ["add"]);
}

#[test]
fn add_v6_enables_ipv6_and_puts_the_gateway_on_the_bridge() {
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    host.set_ipam_result(ipam_result(&[("2001:db8::2/64", None)], &["::/0"]));
    host.set_sysctl(CONT, "net.ipv6.conf.lo.disable_ipv6", "1");
    let r = add(&host, &l3(r#""isGateway":true"#)).unwrap();
    assert_eq!(r.ips[0].gateway.as_deref(), Some("2001:db8::1"));
    assert_eq!(host.addresses(NODE, "cni0"), ["2001:db8::1/64"]);
    assert_eq!(
        host.sysctl(NODE, "net.ipv6.conf.all.forwarding").as_deref(),
        Some("1")
    );
    assert_eq!(
        host.sysctl(NODE, "net.ipv4.ip_forward").as_deref(),
        Some("0")
    );
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.lo.disable_ipv6")
            .as_deref(),
        Some("0")
    );
    assert_eq!(
        host.sysctl(CONT, "net.ipv6.conf.eth0.keep_addr_on_down")
            .as_deref(),
        Some("1")
    );
    assert!(host
        .routes(CONT)
        .contains(&"::/0 via 2001:db8::1 dev eth0".to_string()));
}

#[test]
fn gateway_bridge_keeps_its_own_stable_mac() {
    // A kernel bridge follows its lowest port MAC until its MAC is set: with
    // isGateway the reference pins the MAC it had before the first port.
    let host = host_v4();
    let req = host.request(&l3(r#""isGateway":true"#));
    let r = Bridge::add(&host, &req).unwrap();
    assert_ne!(r.interfaces[0].mac, r.interfaces[1].mac);
    let mac = host.link(NODE, "cni0").unwrap().mac;
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(mac.as_str()));
    Bridge::del(&host, &req).unwrap();
    assert_eq!(host.link(NODE, "cni0").unwrap().mac, mac);

    // Without isGateway nothing is pinned, as in the reference.
    let host = host_v4();
    let r = add(&host, &l3("")).unwrap();
    assert_eq!(r.interfaces[0].mac, r.interfaces[1].mac);
}

/// A node bridge whose ports all left before a gateway ADD pinned its MAC
/// has the zero MAC, as the kernel leaves it (a rolled-back ADD gets there
/// too). The next gateway ADD pins the MAC the bridge takes from its new
/// port instead of failing to set the zero one, and the bridge keeps it
/// after DEL.
#[test]
fn gateway_bridge_with_the_zero_mac_pins_the_one_it_takes() {
    let host = host_v4();
    host.add_link(NODE, "cni0", "bridge", 1500);
    let first = add(&host, &l3("")).unwrap();
    Bridge::del(&host, &host.request(&l3(""))).unwrap();
    assert_eq!(
        host.link(NODE, "cni0").unwrap().mac,
        "00:00:00:00:00:00",
        "the kernel's bridge with no ports: {first:?}"
    );
    let req = host.request(&l3(r#""isGateway":true"#));
    let r = Bridge::add(&host, &req).unwrap();
    let mac = host.link(NODE, "cni0").unwrap().mac;
    assert_ne!(mac, "00:00:00:00:00:00");
    assert_eq!(r.interfaces[0].mac.as_deref(), Some(mac.as_str()));
    Bridge::del(&host, &req).unwrap();
    assert_eq!(host.link(NODE, "cni0").unwrap().mac, mac, "pinned");
}

#[test]
fn dual_stack_default_gateway_adds_default_routes() {
    let host = FakeHost::new("eth0");
    host.allow_node_link("br0");
    host.set_ipam_result(ipam_result(
        &[("10.1.2.2/24", None), ("2001:db8::2/64", None)],
        &[],
    ));
    let r = add(&host, &l3(r#""bridge":"br0","isDefaultGateway":true"#)).unwrap();
    let routes: Vec<(String, Option<String>)> = r
        .routes
        .iter()
        .map(|r| (r.dst.clone(), r.gw.clone()))
        .collect();
    assert_eq!(
        routes,
        [
            ("0.0.0.0/0".to_string(), Some("10.1.2.1".to_string())),
            ("::/0".to_string(), Some("2001:db8::1".to_string()))
        ]
    );
    assert_eq!(
        host.addresses(NODE, "br0"),
        ["10.1.2.1/24", "2001:db8::1/64"]
    );
    let cont_routes = host.routes(CONT);
    assert!(
        cont_routes.contains(&"0.0.0.0/0 via 10.1.2.1 dev eth0".to_string()),
        "{cont_routes:?}"
    );
    assert!(cont_routes.contains(&"::/0 via 2001:db8::1 dev eth0".to_string()));
    // An IPAM default route with a gateway is kept, not duplicated.
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    let mut res = ipam_result(&[("10.1.2.2/24", Some("10.1.2.254"))], &["0.0.0.0/0"]);
    res.routes[0].gw = Some("10.1.2.254".into());
    host.set_ipam_result(res);
    let r = add(&host, &l3(r#""isDefaultGateway":true"#)).unwrap();
    assert_eq!(r.routes.len(), 1);
    assert_eq!(host.addresses(NODE, "cni0"), ["10.1.2.254/24"]);
}

#[test]
fn layer2_without_ipam() {
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    let r = add(&host, &conf(r#""mtu":1400"#)).unwrap();
    assert_eq!(r.interfaces.len(), 3);
    assert!(r.ips.is_empty() && r.routes.is_empty());
    let c = host.link(CONT, "eth0").unwrap();
    assert!(c.up);
    assert_eq!(c.mtu, 1400);
    assert_eq!(host.link(NODE, "cni0").map(|l| l.mtu), Some(1400));
    assert_eq!(
        host.link(NODE, &host.node_veth()).map(|l| l.mtu),
        Some(1400)
    );
    assert!(host.addresses(CONT, "eth0").is_empty());
    assert!(host.addresses(NODE, "cni0").is_empty());
    assert!(host.ipam_calls().is_empty());

    // disableContainerInterface leaves the container end down.
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    add(&host, &conf(r#""disableContainerInterface":true"#)).unwrap();
    assert!(!host.link(CONT, "eth0").unwrap().up);
}

#[test]
fn container_mac_priority() {
    let host = host_v4();
    let mut req = host.request(&l3(""));
    req.args = vec![("MAC".into(), "02:00:00:00:00:01".into())];
    let r = Bridge::add(&host, &req).unwrap();
    assert_eq!(r.interfaces[2].mac.as_deref(), Some("02:00:00:00:00:01"));
    Bridge::del(&host, &req).unwrap();

    req.config = l3(r#""args":{"cni":{"mac":"02:00:00:00:00:02"}}"#);
    let r = Bridge::add(&host, &req).unwrap();
    assert_eq!(r.interfaces[2].mac.as_deref(), Some("02:00:00:00:00:02"));
    Bridge::del(&host, &req).unwrap();

    req.config = l3(
        r#""args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}"#,
    );
    let r = Bridge::add(&host, &req).unwrap();
    assert_eq!(r.interfaces[2].mac.as_deref(), Some("02:00:00:00:00:03"));
    assert_eq!(host.link(CONT, "eth0").unwrap().mac, "02:00:00:00:00:03");
}

#[test]
fn existing_bridge_is_reused_and_a_non_bridge_is_an_error() {
    let host = host_v4();
    let index = host.add_link(NODE, "cni0", "bridge", 1500);
    add(&host, &l3("")).unwrap();
    assert_eq!(host.link(NODE, "cni0").unwrap().index, index);

    let host = host_v4();
    host.add_link(NODE, "cni0", "device", 1500);
    let e = add(&host, &l3("")).unwrap_err();
    assert_eq!(e.code, 999);
    assert!(
        e.msg
            .contains(r#""cni0" already exists but is not a bridge"#),
        "{}",
        e.msg
    );
    assert!(host.ipam_calls().is_empty());
}

#[test]
fn bridge_address_conflicts_and_force_address() {
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    host.add_link(NODE, "cni0", "bridge", 1500);
    host.add_address(NODE, "cni0", "10.0.0.1/8");
    host.set_ipam_result(ipam_result(&[("10.1.2.3/16", None)], &[]));
    let e = add(&host, &l3(r#""isGateway":true"#)).unwrap_err();
    assert_eq!(
        e.msg,
        r#"failed to set bridge addr: "cni0" already has an IP address different from 10.1.0.1/16"#
    );
    // The failed ADD released its IP and removed its veth.
    assert_eq!(host.ipam_calls(), ["add", "del"]);
    assert!(!host.ipam_allocated());
    assert_eq!(host.link_names(NODE), ["lo", "ens3", "cni0"]);
    assert_eq!(host.link_names(CONT), ["lo"]);

    add(&host, &l3(r#""isGateway":true,"forceAddress":true"#)).unwrap();
    assert_eq!(host.addresses(NODE, "cni0"), ["10.1.0.1/16"]);

    // IPv6: an overlapping address is replaced, a disjoint one kept.
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    host.add_link(NODE, "cni0", "bridge", 1500);
    host.add_address(NODE, "cni0", "2001:db8:1::1/64");
    host.add_address(NODE, "cni0", "2001:db8::99/64");
    host.set_ipam_result(ipam_result(&[("2001:db8::5/64", None)], &[]));
    add(&host, &l3(r#""isGateway":true,"forceAddress":true"#)).unwrap();
    assert_eq!(
        host.addresses(NODE, "cni0"),
        ["2001:db8:1::1/64", "2001:db8::1/64"]
    );
}

#[test]
fn promisc_and_hairpin() {
    let host = host_v4();
    add(&host, &l3(r#""promiscMode":true"#)).unwrap();
    assert!(host.link(NODE, "cni0").unwrap().promisc);
    let host = host_v4();
    add(&host, &l3(r#""hairpinMode":true"#)).unwrap();
    assert_eq!(host.hairpin(NODE, &host.node_veth()), Some(true));
    assert!(!host.link(NODE, "cni0").unwrap().promisc);
}

#[test]
fn failure_after_ipam_releases_the_ip_and_removes_the_veth() {
    let host = host_v4();
    host.fail_next(
        "add_route",
        "0.0.0.0/0",
        NetError::Kernel(-17, "file exists".into()),
    );
    let e = add(&host, &l3(r#""isGateway":true"#)).unwrap_err();
    assert_eq!(e.code, 999);
    assert!(
        e.msg
            .starts_with("failed to add route '0.0.0.0/0 via 10.1.2.1 dev eth0"),
        "{}",
        e.msg
    );
    assert_eq!(host.ipam_calls(), ["add", "del"]);
    assert!(!host.ipam_allocated());
    assert_eq!(host.link_names(CONT), ["lo"]);
    assert!(host.node_veth().is_empty());

    // IPAM failing: its error passes through unchanged, veth removed.
    let host = host_v4();
    host.set_ipam_error(
        "add",
        CniError::internal("no IP addresses available in range set"),
    );
    let e = add(&host, &l3("")).unwrap_err();
    assert_eq!(e.msg, "no IP addresses available in range set");
    assert_eq!(host.link_names(CONT), ["lo"]);
    assert!(host.node_veth().is_empty());
}

#[test]
fn second_add_with_the_same_ifname_fails_and_keeps_the_first() {
    let host = host_v4();
    add(&host, &l3("")).unwrap();
    let snapshot = host.snapshot();
    let e = add(&host, &l3("")).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (999, "container veth name provided (eth0) already exists")
    );
    assert_eq!(host.snapshot(), snapshot);
    assert_eq!(host.ipam_calls(), ["add"]);
}

#[test]
fn host_veth_name_collision_retries_with_a_new_salt() {
    let host = host_v4();
    let taken = veth_name("mynet", "ctr1", "eth0", 0);
    host.add_link(NODE, &taken, "veth", 1500);
    let r = add(&host, &l3("")).unwrap();
    assert_eq!(r.interfaces[1].name, veth_name("mynet", "ctr1", "eth0", 1));
}

#[test]
fn del_is_idempotent_and_survives_a_gone_netns() {
    let host = host_v4();
    let req = host.request(&l3(r#""isGateway":true"#));
    Bridge::add(&host, &req).unwrap();
    Bridge::del(&host, &req).unwrap();
    assert_eq!(host.link_names(CONT), ["lo"]);
    assert!(host.node_veth().is_empty());
    assert_eq!(
        host.link_names(NODE),
        ["lo", "ens3", "cni0"],
        "the bridge stays"
    );
    assert_eq!(
        host.addresses(NODE, "cni0"),
        ["10.1.2.1/24"],
        "and keeps its address"
    );
    assert!(!host.ipam_allocated());
    Bridge::del(&host, &req).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "del", "del"]);

    // Netns gone: IPAM DEL only, success.
    let host = host_v4();
    Bridge::add(&host, &req).unwrap();
    host.remove_container_netns();
    assert!(
        host.node_veth().is_empty(),
        "the host end died with the netns"
    );
    Bridge::del(&host, &req).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "del"]);

    // DEL without ADD, L2: nothing to do.
    let host = FakeHost::new("eth0");
    host.allow_node_link("cni0");
    Bridge::del(&host, &host.request(&conf(""))).unwrap();
    assert!(host.ipam_calls().is_empty());

    // An IPAM DEL error is returned.
    let host = host_v4();
    host.set_ipam_error("del", CniError::internal("ipam broke"));
    assert_eq!(Bridge::del(&host, &req).unwrap_err().msg, "ipam broke");
}

#[test]
fn check_after_add_passes_and_catches_drift() {
    let host = host_v4();
    let config = l3(r#""isGateway":true"#);
    let r = add(&host, &config).unwrap();
    let req = host.request_with_prev(&config, &r);
    Bridge::check(&host, &req).unwrap();
    assert_eq!(host.ipam_calls(), ["add", "check"]);

    // A chained plugin changing the default gateway is tolerated.
    host.remove_route(CONT, "0.0.0.0/0");
    host.add_default_route(CONT, "eth0", "10.1.2.254");
    Bridge::check(&host, &req).unwrap();

    host.remove_route(CONT, "0.0.0.0/0");
    let e = Bridge::check(&host, &req).unwrap_err();
    assert_eq!(
        e.msg,
        "Expected Route {Dst:0.0.0.0/0 GW:<nil>} not found in routing table"
    );

    let host = host_v4();
    let r = add(&host, &config).unwrap();
    let req = host.request_with_prev(&config, &r);
    host.remove_address(CONT, "eth0", "10.1.2.2/24");
    let e = Bridge::check(&host, &req).unwrap_err();
    assert_eq!(e.msg, "Failed to match addr 10.1.2.2/24 on interface eth0");

    let e = Bridge::check(&host, &host.request(&config)).unwrap_err();
    assert_eq!(e.msg, "Required prevResult missing");

    // Promisc drift and a missing host veth.
    let host = host_v4();
    let r = add(&host, &config).unwrap();
    let e = Bridge::check(
        &host,
        &host.request_with_prev(&l3(r#""isGateway":true,"promiscMode":true"#), &r),
    )
    .unwrap_err();
    assert!(
        e.msg
            .starts_with("Bridge interface cni0 configured Promisc Mode true"),
        "{}",
        e.msg
    );
    let mut wrong = r.clone();
    wrong.interfaces[2].mac = Some("02:99:99:99:99:99".into());
    let e = Bridge::check(&host, &host.request_with_prev(&config, &wrong)).unwrap_err();
    assert!(e.msg.contains("doesn't match container Mac"), "{}", e.msg);

    // IPAM CHECK failure is passed up.
    host.set_ipam_error("check", CniError::internal("lost reservation"));
    assert_eq!(
        Bridge::check(&host, &host.request_with_prev(&config, &r))
            .unwrap_err()
            .msg,
        "lost reservation"
    );
}

#[test]
fn ip_masq_and_macspoofchk_ask_the_host_for_rules() {
    use wasm_cni_sdk::filter::{FilterError, Rule};
    let host = FakeHost::with_ipam_result(
        &[("10.1.2.2/24", None), ("fd00:1::2/64", None)],
        &["0.0.0.0/0"],
    );
    host.allow_node_link("cni0");
    let config =
        l3(r#""isGateway":true,"ipMasq":true,"ipMasqBackend":"nftables","macspoofchk":true"#);
    let r = add(&host, &config).unwrap();
    let veth = r.interfaces[1].name.clone();
    let mac = r.interfaces[2].mac.clone().unwrap();
    assert_eq!(
        host.filter_rules(),
        vec![
            Rule::Masquerade {
                source: "10.1.2.2".into(),
                except: vec!["10.1.2.0/24".into()]
            },
            Rule::Masquerade {
                source: "fd00:1::2".into(),
                except: vec!["fd00:1::/64".into()]
            },
            Rule::MacSpoofCheck { link: veth, mac },
        ]
    );
    // CHECK verifies them.
    let req = host.request_with_prev(&config, &r);
    Bridge::check(&host, &req).unwrap();
    host.set_filter_rules(host.filter_rules()[1..].to_vec());
    let e = Bridge::check(&host, &req).unwrap_err();
    assert!(e.msg.contains("masquerade 10.1.2.2"), "{}", e.msg);

    // Without ipMasq nothing is asked for.
    let host = host_v4();
    add(&host, &l3(r#""isGateway":true"#)).unwrap();
    assert!(host.filter_rules().is_empty());

    // A refusal fails the ADD and leaves no veth or allocation behind.
    let host = host_v4();
    host.fail_filter(FilterError::Refused("not yours".into()));
    let e = add(&host, &l3(r#""ipMasq":true"#)).unwrap_err();
    assert!(
        e.msg.contains("refused by host policy: not yours"),
        "{}",
        e.msg
    );
    assert!(host.node_veth().is_empty());
    assert!(!host.ipam_allocated());
}

#[test]
fn dns_from_config_overrides_ipam() {
    let host = host_v4();
    let mut res = ipam_result(&[("10.1.2.2/24", None)], &[]);
    res.dns = Some(Dns {
        nameservers: vec!["10.1.2.53".into()],
        ..Dns::default()
    });
    host.set_ipam_result(res);
    let r = add(&host, &l3("")).unwrap();
    assert_eq!(
        r.dns.as_ref().map(|d| d.nameservers.clone()),
        Some(vec!["10.1.2.53".to_string()])
    );
    Bridge::del(&host, &host.request(&l3(""))).unwrap();
    let r = add(
        &host,
        &l3(r#""dns":{"nameservers":["1.1.1.1"],"search":["svc"]}"#),
    )
    .unwrap();
    let dns = r.dns.unwrap();
    assert_eq!(
        (dns.nameservers, dns.search),
        (vec!["1.1.1.1".to_string()], vec!["svc".to_string()])
    );
}

#[test]
fn status_and_gc_forward_to_ipam() {
    let host = host_v4();
    suite::assert_status_and_gc_go_to_ipam::<Bridge>(&host, &conf(""), &l3(""));
    host.set_ipam_error("status", CniError::new(50, "exhausted"));
    assert_eq!(Bridge::status(&host, &l3("")).unwrap_err().code, 50);
}

#[test]
fn status_tells_a_bridge_that_is_down_from_one_that_cannot_serve() {
    let host = host_v4();
    // Missing: the next ADD creates it.
    Bridge::status(&host, &l3("")).unwrap();
    add(&host, &l3("")).unwrap();
    Bridge::status(&host, &l3("")).unwrap();
    let set_up = |up: bool| {
        let settings = LinkSettings {
            up: Some(up),
            ..LinkSettings::default()
        };
        host.node_netns()
            .unwrap()
            .set_link("cni0", &settings)
            .unwrap();
    };
    set_up(false);
    let e = Bridge::status(&host, &l3("")).unwrap_err();
    assert_eq!(e.code, 51, "{e:?}");
    assert!(e.msg.contains(r#"bridge "cni0" is down"#), "{}", e.msg);
    set_up(true);
    Bridge::status(&host, &l3("")).unwrap();

    let host = host_v4();
    host.add_link(NODE, "cni0", "device", 1500);
    let e = Bridge::status(&host, &l3("")).unwrap_err();
    assert_eq!(e.code, 50, "{e:?}");
    assert!(e.msg.contains("not a bridge"), "{}", e.msg);
}

#[test]
fn the_host_policy_is_respected() {
    // The host grants the bridge the config names (here not the default
    // cni0) and nothing more; every step of a successful ADD stays within
    // that, with nothing granted by hand.
    let host = FakeHost::new("eth0");
    host.set_ipam_result(ipam_result(&[("10.1.2.2/24", None)], &["0.0.0.0/0"]));
    add(
        &host,
        &l3(r#""bridge":"br9","isGateway":true,"hairpinMode":true"#),
    )
    .unwrap();
    assert_eq!(host.addresses(NODE, "br9"), ["10.1.2.1/24"]);
    // Another network's bridge on the node is not this attachment's to
    // change, even though it is there.
    host.add_link(NODE, "br7", "bridge", 1500);
    let e = host
        .ns(NODE)
        .set_link("br7", &LinkSettings::up())
        .unwrap_err();
    assert!(matches!(e, NetError::Refused(_)), "{e:?}");
}

#[test]
fn del_accepts_a_config_that_add_rejected() {
    let host = host_v4();
    let config = l3(r#""hairpinMode":true,"promiscMode":true,"vlan":9999"#);
    add(&host, &config).unwrap_err();
    Bridge::del(&host, &host.request(&config)).unwrap();
    assert_eq!(host.ipam_calls(), ["del"]);
}

/// `vm`: a tap on the node as a port of the bridge instead of the veth
/// pair; the address reserved, reported for the tap, set on no link but
/// the gateway's on the bridge; DEL removes the tap and releases the IP.
#[test]
fn vm_tap_is_a_bridge_port_and_the_address_is_only_reserved() {
    let host = host_v4();
    let config = l3(r#""isGateway":true,"vm":{"interface":"tap","owner":107,"multiQueue":true}"#);
    let r = add(&host, &config).unwrap();
    let tap = wasm_cni_sdk::vm::link_name(
        wasm_cni_sdk::vm::VmInterface::Tap,
        "mynet",
        &host.request(&config).container_id,
        "eth0",
    );
    assert_eq!(r.interfaces.len(), 2);
    assert_eq!(r.interfaces[1].name, tap);
    assert_eq!(r.interfaces[1].sandbox, None);
    assert_eq!(r.ips[0].interface, Some(1));
    assert_eq!(r.ips[0].address, "10.1.2.2/24");
    assert_eq!(r.ips[0].gateway.as_deref(), Some("10.1.2.1"));
    let link = host.link(NODE, &tap).unwrap();
    let br = host.link(NODE, "cni0").unwrap();
    assert_eq!(
        (link.kind.as_str(), link.master, link.up),
        ("tun", Some(br.index), true)
    );
    // Nothing in the container: the guest configures its own address.
    assert_eq!(host.link_names(CONT), ["lo"]);
    let mut req = host.request(&config);
    req.prev_result = Some(r);
    Bridge::check(&host, &req).unwrap();
    Bridge::del(&host, &host.request(&config)).unwrap();
    assert!(host.link(NODE, &tap).is_none());
    assert!(!host.ipam_allocated());
    // A second DEL finds nothing to do.
    Bridge::del(&host, &host.request(&config)).unwrap();
}

#[test]
fn vm_macvtap_sits_on_the_bridge_or_its_parent() {
    let host = host_v4();
    let config = l3(r#""vm":{"interface":"macvtap"}"#);
    let r = add(&host, &config).unwrap();
    let name = &r.interfaces[1].name;
    assert!(name.starts_with("mvt"), "{name}");
    let link = host.link(NODE, name).unwrap();
    assert_eq!(link.kind, "macvtap");
    assert_eq!(host.link_names(CONT), ["lo"]);
    Bridge::del(&host, &host.request(&config)).unwrap();
    assert!(host.link(NODE, name).is_none());
    // Options that cannot work with a VM are code 7.
    for bad in [
        r#""vm":{"interface":"macvtap","owner":1}"#,
        r#""vm":{"interface":"tap"},"macspoofchk":true"#,
        r#""vm":{"interface":"virtio"}"#,
    ] {
        let e = add(&host_v4(), &l3(bad)).unwrap_err();
        assert_eq!(e.code, 7, "{bad}: {}", e.msg);
    }
}
