//! static IPAM against the reference's test cases.

use wasm_cni_sdk::fake::FakeHost;
use wasm_cni_sdk::{CniError, CniResult, Plugin, Request};

use crate::Static;

fn run(config: &str, args: &[(&str, &str)]) -> Result<CniResult, CniError> {
    let host = FakeHost::new("eth0");
    let mut req = host.request(config);
    req.args = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Static::add(&host, &req)
}

fn ips(r: &CniResult) -> Vec<(String, Option<String>)> {
    r.ips
        .iter()
        .map(|i| (i.address.clone(), i.gateway.clone()))
        .collect()
}

fn pair(a: &str, g: Option<&str>) -> (String, Option<String>) {
    (a.to_string(), g.map(ToString::to_string))
}

const FULL: &str = r#"{
    "cniVersion": "1.0.0", "name": "mynet", "type": "ipvlan",
    "ipam": {
        "type": "static",
        "addresses": [
            {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
            {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0"},
            {"dst": "10.10.0.0/16", "gw": "10.10.0.254"},
            {"dst": "3ffe:ffff:0:01ff::1/64"}
        ],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"]}
    }
}"#;

#[test]
fn allocates_the_configured_addresses() {
    let r = run(FULL, &[]).unwrap();
    assert!(r.interfaces.is_empty());
    assert_eq!(
        ips(&r),
        [
            pair("10.10.0.1/24", Some("10.10.0.254")),
            pair("3ffe:ffff:0:1ff::1/64", Some("3ffe:ffff::1"))
        ]
    );
    assert!(r.ips.iter().all(|i| i.interface.is_none()));
    let dsts: Vec<&str> = r.routes.iter().map(|r| r.dst.as_str()).collect();
    assert_eq!(dsts, ["0.0.0.0/0", "10.10.0.0/16", "3ffe:ffff:0:1ff::/64"]);
    assert_eq!(r.routes[1].gw.as_deref(), Some("10.10.0.254"));
    let dns = r.dns.unwrap();
    assert_eq!(
        (dns.nameservers, dns.domain.as_deref()),
        (vec!["8.8.8.8".to_string()], Some("example.com"))
    );
}

#[test]
fn cni_args_ip_and_gateway() {
    let config = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static","routes":[{"dst":"0.0.0.0/0"}]}}"#;
    let r = run(
        config,
        &[
            ("IP", "10.10.0.1/24,11.11.0.1/24"),
            ("GATEWAY", "10.10.0.254"),
        ],
    )
    .unwrap();
    assert_eq!(
        ips(&r),
        [
            pair("10.10.0.1/24", Some("10.10.0.254")),
            pair("11.11.0.1/24", None)
        ]
    );
    // Appended to config addresses.
    let config = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.9.0.1/24"}]}}"#;
    let r = run(
        config,
        &[("IP", "2001:db8::5/64"), ("GATEWAY", "2001:db8::1")],
    )
    .unwrap();
    assert_eq!(
        ips(&r),
        [
            pair("10.9.0.1/24", None),
            pair("2001:db8::5/64", Some("2001:db8::1"))
        ]
    );
    // Unknown CNI_ARGS: error unless IgnoreUnknown.
    assert_eq!(run(config, &[("FOO", "1")]).unwrap_err().code, 4);
    run(config, &[("IgnoreUnknown", "true"), ("FOO", "1")]).unwrap();
}

#[test]
fn args_cni_ips_and_runtime_config_ips_replace_everything() {
    let config = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.9.0.1/24"}]},
        "args":{"cni":{"ips":["10.10.0.1/24","3ffe:ffff:0:01ff::1/64"]}}}"#;
    let r = run(config, &[("IP", "10.8.0.1/24")]).unwrap();
    assert_eq!(
        ips(&r),
        [
            pair("10.10.0.1/24", None),
            pair("3ffe:ffff:0:1ff::1/64", None)
        ]
    );
    let config = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static"},
        "args":{"cni":{"ips":["10.10.0.1/24"]}},"runtimeConfig":{"ips":["10.11.0.1/24"]}}"#;
    assert_eq!(
        ips(&run(config, &[]).unwrap()),
        [pair("10.11.0.1/24", None)]
    );
}

#[test]
fn validation_messages() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 7] = [
        (
            r#"{"cniVersion":"1.0.0","name":"n"}"#,
            &[],
            "IPAM config missing 'ipam' key",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1"}]}}"#,
            &[],
            "the 'address' field is expected to be in CIDR notation, got: '10.0.0.1'",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{}}"#,
            &[("IP", "10.0.0.1")],
            "the 'ip' field is expected to be in CIDR notation, got: '10.0.0.1'",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{}}"#,
            &[("IP", "10.0.0.1/24"), ("GATEWAY", "x")],
            "invalid gateway address: x",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{},"args":{"cni":{"ips":["10.0.0.1"]}}}"#,
            &[],
            "an entry in the 'ips' field is NOT in CIDR notation, got: '10.0.0.1'",
        ),
        (
            r#"{"cniVersion":"0.2.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1/24"},{"address":"10.0.1.1/24"}]}}"#,
            &[],
            "CNI version 0.2.0 does not support more than 1 address per family",
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"routes":[{"dst":"10.0.0.0"}]}}"#,
            &[],
            "ipam.routes: invalid CIDR address: 10.0.0.0",
        ),
    ];
    for (config, args, msg) in cases {
        let e = run(config, args).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (7, msg), "{config}");
    }
    // One address per family is fine at 0.2.0.
    run(
        r#"{"cniVersion":"0.2.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1/24"},{"address":"2001:db8::1/64"}]}}"#,
        &[],
    )
    .unwrap();
}

#[test]
fn del_status_gc_do_nothing_and_check_compares() {
    let host = FakeHost::new("eth0");
    let mut req: Request = host.request(FULL);
    Static::del(&host, &req).unwrap();
    Static::del(&host, &host.request("not even json")).unwrap();
    Static::status(&host, FULL).unwrap();
    Static::gc(&host, FULL, &[]).unwrap();
    assert!(host.ipam_calls().is_empty());

    assert_eq!(
        Static::check(&host, &req).unwrap_err().msg,
        "Required prevResult missing"
    );
    let added = Static::add(&host, &req).unwrap();
    req.prev_result = Some(added.clone());
    Static::check(&host, &req).unwrap();
    let mut wrong_gw = added.clone();
    wrong_gw.ips[0].gateway = Some("10.10.0.1".into());
    req.prev_result = Some(wrong_gw);
    assert_eq!(
        Static::check(&host, &req).unwrap_err().msg,
        "static: Failed to match addr 10.10.0.1 on interface eth0"
    );
    let mut missing = added;
    missing.ips.remove(1);
    req.prev_result = Some(missing);
    assert!(Static::check(&host, &req)
        .unwrap_err()
        .msg
        .contains("Failed to find addr 3ffe:ffff:0:1ff::1"));
}
