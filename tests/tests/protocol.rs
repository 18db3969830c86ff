//! The CNI protocol at the edge, through the real binary. No root needed.

use serde_json::json;
use wasm_cni_tests::{fixture, run_with_env, Invocation, Sandbox};

fn conf_bytes(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn minimal() -> serde_json::Value {
    json!({"cniVersion":"1.1.0","name":"net","type":"wasm-cni","chain":[{"type":"fx"}]})
}

/// Required variables per verb, as skel enforces them.
const REQUIRED: &[(&str, &[&str])] = &[
    (
        "ADD",
        &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
    ),
    (
        "CHECK",
        &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
    ),
    ("DEL", &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"]),
    ("GC", &["CNI_PATH"]),
    ("STATUS", &["CNI_PATH"]),
];

fn full_env(command: &str) -> Vec<(&str, &str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "ctr1"),
        ("CNI_NETNS", "/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/usr/lib/cni"),
    ]
}

#[test]
fn each_missing_variable_per_verb_is_code_4_naming_it() {
    for (verb, vars) in REQUIRED {
        for missing in *vars {
            let env: Vec<_> = full_env(verb)
                .into_iter()
                .filter(|(k, _)| k != missing)
                .collect();
            let out = run_with_env(&env, &conf_bytes(&minimal()));
            assert_eq!(out.error_code(), 4, "{verb} without {missing}: {out:?}");
            assert!(
                out.error_msg().contains(missing),
                "{verb} without {missing}: {}",
                out.error_msg()
            );
        }
    }
}

#[test]
fn invalid_variables_are_code_4() {
    let cases: &[(&str, &str, &str)] = &[
        ("CNI_CONTAINERID", "-bad id", "containerID"),
        ("CNI_IFNAME", "averyveryverylongname", "too long"),
        ("CNI_IFNAME", "eth/0", "invalid character"),
        ("CNI_IFNAME", "..", "interface name"),
        ("CNI_ARGS", "K=V;BROKEN", "ARGS"),
        ("CNI_COMMAND", "BOGUS", "CNI_COMMAND"),
    ];
    for (var, value, needle) in cases {
        let mut env = full_env("ADD");
        env.retain(|(k, _)| k != var);
        env.push((var, value));
        let out = run_with_env(&env, &conf_bytes(&minimal()));
        assert_eq!(out.error_code(), 4, "{var}={value}: {out:?}");
        assert!(
            out.error_msg().contains(needle),
            "{var}={value}: {}",
            out.error_msg()
        );
    }
}

#[test]
fn malformed_stdin_is_code_6() {
    let out = run_with_env(&full_env("ADD"), b"{not json");
    assert_eq!(out.error_code(), 6);
    assert!(out.error_msg().contains("unmarshal"), "{}", out.error_msg());
}

#[test]
fn missing_or_bad_network_name_is_code_7() {
    let no_name = json!({"cniVersion":"1.1.0","type":"wasm-cni","chain":[{"type":"fx"}]});
    let out = run_with_env(&full_env("ADD"), &conf_bytes(&no_name));
    assert_eq!(out.error_code(), 7);
    assert!(out.error_msg().contains("missing network name"));
    let bad =
        json!({"cniVersion":"1.1.0","name":"bad name!","type":"wasm-cni","chain":[{"type":"fx"}]});
    let out = run_with_env(&full_env("ADD"), &conf_bytes(&bad));
    assert_eq!(out.error_code(), 7);
    assert!(out.error_msg().contains("invalid characters"));
}

#[test]
fn unsupported_config_version_is_code_1() {
    for v in ["0.2.0", "2.0.0"] {
        let c = json!({"cniVersion": v,"name":"n","type":"wasm-cni","chain":[{"type":"fx"}]});
        let out = run_with_env(&full_env("ADD"), &conf_bytes(&c));
        assert_eq!(out.error_code(), 1, "{v}: {out:?}");
    }
    // CHECK needs 0.4.0, GC and STATUS need 1.1.0.
    let c = json!({"cniVersion":"0.3.1","name":"n","type":"wasm-cni","chain":[{"type":"fx"}]});
    assert_eq!(
        run_with_env(&full_env("CHECK"), &conf_bytes(&c)).error_code(),
        1
    );
    let c = json!({"cniVersion":"1.0.0","name":"n","type":"wasm-cni","chain":[{"type":"fx"}]});
    assert_eq!(
        run_with_env(&full_env("STATUS"), &conf_bytes(&c)).error_code(),
        1
    );
    assert_eq!(
        run_with_env(&full_env("GC"), &conf_bytes(&c)).error_code(),
        1
    );
}

#[test]
fn version_reports_supported_versions() {
    let out = run_with_env(&[("CNI_COMMAND", "VERSION")], br#"{"cniVersion":"0.4.0"}"#);
    out.assert_ok();
    assert!(out.stdout.ends_with('\n'));
    let v = out.json();
    assert_eq!(v["cniVersion"], "0.4.0");
    assert_eq!(
        v["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
    // VERSION needs neither a config nor other variables.
    let out = run_with_env(&[("CNI_COMMAND", "VERSION")], b"");
    assert_eq!(out.assert_ok().json()["cniVersion"], "1.1.0");
}

#[test]
fn unknown_plugin_type_names_type_and_plugin_dir() {
    let sb = Sandbox::new("unknown");
    let conf = sb.conf("1.1.0", "n", json!([{"type": "no-such-plugin"}]));
    let out = Invocation::new("ADD").run(&conf);
    assert_eq!(out.error_code(), 7);
    let msg = out.error_msg();
    assert!(msg.contains("no-such-plugin"), "{msg}");
    assert!(
        msg.contains(&sb.plugin_dir().display().to_string()),
        "{msg}"
    );
}

#[test]
fn empty_or_bad_chain_is_code_7() {
    for chain in [
        json!([]),
        json!([{"tag": "x"}]),
        json!("fx"),
        json!([{"type": "../fx"}]),
    ] {
        let c = json!({"cniVersion":"1.1.0","name":"n","type":"wasm-cni","chain": chain});
        let out = run_with_env(&full_env("ADD"), &conf_bytes(&c));
        assert_eq!(out.error_code(), 7, "{chain}: {out:?}");
    }
}

/// The result goes out in the config's version, converted from 1.1.
#[test]
fn add_result_is_printed_in_the_config_version() {
    let sb = Sandbox::new("versions");
    sb.install(&fixture("fx"), "fx");
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let id = format!("ctr-{}", v.replace('.', ""));
        let conf = sb.conf(
            v,
            "vernet",
            json!([{"type":"fx","tag":"a","ip":"10.1.2.3/24"}]),
        );
        let out = Invocation::new("ADD").id(&id).run(&conf);
        out.assert_ok();
        let r = out.json();
        assert_eq!(r["cniVersion"], v);
        assert_eq!(r["ips"][0]["address"], "10.1.2.3/24");
        assert_eq!(r["ips"][0]["interface"], 0);
        let has_version = r["ips"][0].get("version").is_some();
        assert_eq!(has_version, v.starts_with("0."), "{v}: {r}");
        // Go-style 4-space indentation, no trailing newline.
        assert!(
            out.stdout.contains("\n    \"cniVersion\""),
            "{}",
            out.stdout
        );
        assert!(!out.stdout.ends_with('\n'));
        Invocation::new("DEL").id(&id).run(&conf).assert_ok();
    }
}

#[test]
fn errors_carry_the_config_version() {
    let sb = Sandbox::new("errver");
    sb.install(&fixture("fx"), "fx");
    let conf = sb.conf(
        "1.0.0",
        "n",
        json!([{"type":"fx","add":"fail","failCode":11}]),
    );
    let out = Invocation::new("ADD").run(&conf);
    assert_eq!(out.error_code(), 11);
    assert_eq!(out.json()["cniVersion"], "1.0.0");
}
