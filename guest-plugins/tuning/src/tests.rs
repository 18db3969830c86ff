//! tuning logic against the SDK's fake host (the cases of §7.3).

use wasm_cni_sdk::fake::{FakeHost, NsId, NETNS_PATH};
use wasm_cni_sdk::host::StoreError;
use wasm_cni_sdk::net::NetError;
use wasm_cni_sdk::{CniResult, Interface, IpConfig, Plugin, Request};

use crate::plugin::Backup;
use crate::Tuning;

const CONT: NsId = NsId::Container;
const KEY: &str = "ctr1_eth0";

fn conf(extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { "," };
    format!(r#"{{"cniVersion":"1.0.0","name":"tun","type":"tuning"{sep}{extra}}}"#)
}

fn setup() -> (FakeHost, String) {
    let host = FakeHost::new("eth0");
    host.add_link(CONT, "eth0", "veth", 1500);
    let mac = host.link(CONT, "eth0").map(|l| l.mac).unwrap_or_default();
    (host, mac)
}

fn prev(mac: &str) -> CniResult {
    CniResult {
        interfaces: vec![Interface {
            name: "eth0".into(),
            mac: Some(mac.into()),
            sandbox: Some(NETNS_PATH.into()),
            ..Interface::default()
        }],
        ips: vec![IpConfig {
            address: "10.0.0.2/24".into(),
            gateway: Some("10.0.0.1".into()),
            interface: Some(0),
        }],
        ..CniResult::default()
    }
}

fn req(host: &FakeHost, config: &str, mac: &str) -> Request {
    let mut req = host.request(config);
    req.prev_result = Some(prev(mac));
    req
}

/// ADD, CHECK, DEL, and the link is back to where it was.
fn round_trip(config: &str, args: &[(&str, &str)], verify: impl Fn(&FakeHost)) {
    let (host, mac) = setup();
    let before = host.link(CONT, "eth0");
    let mut r = req(&host, config, &mac);
    r.args = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = Tuning::add(&host, &r).unwrap();
    verify(&host);
    let saved = host.store_value(KEY).expect("a backup in the store");
    serde_json::from_str::<Backup>(&saved).unwrap();
    let mut checked = r.clone();
    checked.prev_result = Some(out);
    Tuning::check(&host, &checked).unwrap();
    Tuning::del(&host, &r).unwrap();
    assert_eq!(host.link(CONT, "eth0"), before, "{config}");
    assert_eq!(host.store_value(KEY), None);
    Tuning::del(&host, &r).unwrap();
}

#[test]
fn passes_prev_result_through_unchanged_with_only_sysctls() {
    let (host, mac) = setup();
    let r = req(
        &host,
        &conf(r#""sysctl":{"net.ipv4.conf.all.log_martians":"1"}"#),
        &mac,
    );
    let out = Tuning::add(&host, &r).unwrap();
    assert_eq!(out, prev(&mac));
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.all.log_martians")
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        host.store_value(KEY),
        None,
        "no backup without link changes"
    );
    Tuning::check(&host, &r).unwrap();
    Tuning::del(&host, &r).unwrap();
    // DEL does not restore sysctls (reference behaviour).
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.all.log_martians")
            .as_deref(),
        Some("1")
    );
}

#[test]
fn promisc_mtu_txqlen_allmulti_round_trip() {
    round_trip(&conf(r#""promisc":true"#), &[], |h| {
        assert!(h.link(CONT, "eth0").unwrap().promisc)
    });
    round_trip(&conf(r#""args":{"cni":{"promisc":true}}"#), &[], |h| {
        assert!(h.link(CONT, "eth0").unwrap().promisc)
    });
    round_trip(&conf(r#""mtu":1454"#), &[], |h| {
        assert_eq!(h.link(CONT, "eth0").unwrap().mtu, 1454)
    });
    round_trip(
        &conf(r#""mtu":9000,"args":{"cni":{"mtu":1454}}"#),
        &[],
        |h| assert_eq!(h.link(CONT, "eth0").unwrap().mtu, 1454),
    );
    round_trip(&conf(r#""txQLen":20000"#), &[], |h| {
        assert_eq!(h.link(CONT, "eth0").unwrap().txqlen, 20000)
    });
    round_trip(&conf(r#""args":{"cni":{"txQLen":20000}}"#), &[], |h| {
        assert_eq!(h.link(CONT, "eth0").unwrap().txqlen, 20000)
    });
    round_trip(&conf(r#""allmulti":true"#), &[], |h| {
        assert!(h.link(CONT, "eth0").unwrap().allmulti)
    });
    round_trip(&conf(r#""args":{"cni":{"allmulti":true}}"#), &[], |h| {
        assert!(h.link(CONT, "eth0").unwrap().allmulti)
    });
}

#[test]
fn mac_from_every_source_and_its_priority() {
    let want = "c2:11:22:33:44:55";
    for (config, args) in [
        (conf(r#""mac":"c2:11:22:33:44:55""#), vec![]),
        (
            conf(r#""args":{"cni":{"mac":"c2:11:22:33:44:55"}}"#),
            vec![],
        ),
        (conf(""), vec![("MAC", want)]),
        (
            conf(r#""runtimeConfig":{"mac":"c2:11:22:33:44:55"}"#),
            vec![],
        ),
        // Priority: config < CNI_ARGS < runtimeConfig < args.cni.
        (
            conf(
                r#""mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"c2:11:22:33:44:55"}}"#,
            ),
            vec![("MAC", "02:00:00:00:00:02")],
        ),
    ] {
        round_trip(&config, &args, |h| {
            assert_eq!(h.link(CONT, "eth0").unwrap().mac, want)
        });
        let (host, mac) = setup();
        let mut r = req(&host, &config, &mac);
        r.args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = Tuning::add(&host, &r).unwrap();
        assert_eq!(out.interfaces[0].mac.as_deref(), Some(want), "{config}");
        assert_eq!(out.ips, prev(&mac).ips);
    }
}

#[test]
fn everything_at_once_saves_the_reference_backup_shape() {
    let (host, mac) = setup();
    let config =
        conf(r#""mac":"c2:11:22:33:44:55","promisc":true,"mtu":1400,"txQLen":42,"allmulti":true"#);
    let r = req(&host, &config, &mac);
    Tuning::add(&host, &r).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&host.store_value(KEY).unwrap()).unwrap();
    assert_eq!(
        saved,
        serde_json::json!({"mac": mac, "promisc": false, "mtu": 1500, "allmulti": false, "txQLen": 1000})
    );
    Tuning::del(&host, &r).unwrap();
    let l = host.link(CONT, "eth0").unwrap();
    assert_eq!(
        (l.mac, l.promisc, l.mtu, l.txqlen, l.allmulti),
        (mac, false, 1500, 1000, false)
    );
}

#[test]
fn ifname_substitution_in_sysctls_add_and_check() {
    let (host, mac) = setup();
    let r = req(
        &host,
        &conf(r#""sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"}"#),
        &mac,
    );
    Tuning::add(&host, &r).unwrap();
    assert_eq!(
        host.sysctl(CONT, "net.ipv4.conf.eth0.arp_notify")
            .as_deref(),
        Some("1")
    );
    Tuning::check(&host, &r).unwrap();
    host.set_sysctl(CONT, "net.ipv4.conf.eth0.arp_notify", "0");
    let e = Tuning::check(&host, &r).unwrap_err();
    assert_eq!(
        e.msg,
        "Error: Tuning configured value of net.ipv4.conf.eth0.arp_notify is 1, current value is 0"
    );
}

#[test]
fn config_validation() {
    let (host, mac) = setup();
    let cases = [
        (
            conf(r#""sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}"#),
            7,
            "duplicated sysctl keys are not allowed",
        ),
        (
            conf(r#""sysctl":{"kernel.hostname":"x"}"#),
            7,
            r#"invalid net sysctl key: "kernel/hostname""#,
        ),
        (
            conf(r#""sysctl":{"net.ipv4.conf.IFNAME.x":"1","net..x":"1"}"#),
            7,
            "invalid net sysctl key",
        ),
        (conf(r#""mtu":12"#), 7, "invalid MTU 12"),
        (conf(r#""txQLen":-1"#), 7, "invalid txQLen -1"),
        (conf(r#""mac":"nope""#), 7, "invalid MAC address"),
    ];
    let before = host.snapshot();
    for (config, code, msg) in cases {
        let e = Tuning::add(&host, &req(&host, &config, &mac)).unwrap_err();
        assert_eq!(e.code, code, "{config}");
        assert!(e.msg.contains(msg), "{config}: {}", e.msg);
    }
    assert_eq!(host.snapshot(), before);
    let mut r = req(&host, &conf(""), &mac);
    r.ifname = "eth/0".into();
    assert!(Tuning::add(&host, &r)
        .unwrap_err()
        .msg
        .contains("invalid character"));
    let mut r = req(&host, &conf(""), &mac);
    r.prev_result = None;
    assert_eq!(
        Tuning::add(&host, &r).unwrap_err().msg,
        "Required prevResult missing"
    );
    assert_eq!(
        Tuning::check(&host, &r).unwrap_err().msg,
        "Required prevResult missing"
    );
}

#[test]
fn failed_add_undoes_sysctls_and_link_changes() {
    let (host, mac) = setup();
    let before = host.snapshot();
    host.fail_next(
        "set_link",
        "eth0",
        NetError::Kernel(-22, "invalid argument".into()),
    );
    let config = conf(r#""sysctl":{"net.core.somaxconn":"500"},"mtu":1400"#);
    let e = Tuning::add(&host, &req(&host, &config, &mac)).unwrap_err();
    assert!(e.msg.starts_with("failed to tune eth0"), "{}", e.msg);
    assert_eq!(host.snapshot(), before);
    assert_eq!(host.store_value(KEY), None);

    // A second sysctl failing undoes the first.
    host.fail_next(
        "set_sysctl",
        "arp_notify",
        NetError::NotFound("no such sysctl".into()),
    );
    let config =
        conf(r#""sysctl":{"net.core.somaxconn":"500","net.ipv4.conf.eth0.arp_notify":"1"}"#);
    Tuning::add(&host, &req(&host, &config, &mac)).unwrap_err();
    assert_eq!(host.snapshot(), before);

    // The store failing: nothing changed.
    host.set_store_error(StoreError::Io("disk full".into()));
    let e = Tuning::add(&host, &req(&host, &conf(r#""mtu":1400"#), &mac)).unwrap_err();
    assert_eq!(e.code, 5);
    assert_eq!(host.snapshot(), before);
}

#[test]
fn del_is_best_effort() {
    // Netns gone: success, backup forgotten.
    let (host, mac) = setup();
    let r = req(&host, &conf(r#""mtu":1400"#), &mac);
    Tuning::add(&host, &r).unwrap();
    host.remove_container_netns();
    Tuning::del(&host, &r).unwrap();
    assert_eq!(host.store_value(KEY), None);

    // Link gone: success, backup forgotten.
    let (host, mac) = setup();
    let r = req(&host, &conf(r#""mtu":1400"#), &mac);
    Tuning::add(&host, &r).unwrap();
    host.delete_link(CONT, "eth0");
    Tuning::del(&host, &r).unwrap();
    assert_eq!(host.store_value(KEY), None);

    // A failed restore keeps the backup for a retry.
    let (host, mac) = setup();
    let r = req(&host, &conf(r#""mtu":1400"#), &mac);
    Tuning::add(&host, &r).unwrap();
    host.fail_next("set_link", "eth0", NetError::Kernel(-16, "busy".into()));
    Tuning::del(&host, &r).unwrap_err();
    assert!(host.store_value(KEY).is_some());
    Tuning::del(&host, &r).unwrap();
    assert_eq!(host.link(CONT, "eth0").unwrap().mtu, 1500);

    // Nothing saved: nothing to do.
    let (host, mac) = setup();
    Tuning::del(&host, &req(&host, &conf(""), &mac)).unwrap();
}

#[test]
fn check_detects_drift() {
    let (host, mac) = setup();
    let config = conf(r#""mtu":1400,"promisc":true"#);
    let r = req(&host, &config, &mac);
    Tuning::add(&host, &r).unwrap();
    Tuning::check(&host, &r).unwrap();
    let e = Tuning::check(&host, &req(&host, &conf(r#""mtu":1400"#), &mac)).unwrap_err();
    assert_eq!(
        e.msg,
        "Error: Tuning link eth0 configured promisc is false, current value is 1"
    );
    let e = Tuning::check(
        &host,
        &req(&host, &conf(r#""mtu":1300,"promisc":true"#), &mac),
    )
    .unwrap_err();
    assert_eq!(
        e.msg,
        "Error: Tuning configured MTU of eth0 is 1300, current value is 1400"
    );
    host.delete_link(CONT, "eth0");
    assert_eq!(
        Tuning::check(&host, &r).unwrap_err().msg,
        "Cannot find container link eth0"
    );
}

#[test]
fn del_accepts_a_config_that_add_rejected() {
    let (host, mac) = setup();
    let r = req(&host, &conf(r#""sysctl":{"kernel.hostname":"x"}"#), &mac);
    Tuning::add(&host, &r).unwrap_err();
    Tuning::del(&host, &r).unwrap();
}
