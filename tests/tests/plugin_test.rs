//! `wasm-cni plugin test`, as a plugin author runs it: as an ordinary
//! call, no namespaces, no root. Every bundled plugin passes with a
//! typical config; fixtures that leave store state, fail a second DEL,
//! fail a DEL without a namespace or return an invalid result fail the
//! property that says so; a plugin trying to leak a link cannot.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{fixture, plugin, wasm_cni_bin, TempDir};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// `wasm-cni plugin test` of `component` (copied with `delegates` into a
/// directory of their own) with `config` and extra arguments.
fn plugin_test(component: &Path, delegates: &[&str], config: Value, extra: &[&str]) -> Run {
    let dir = TempDir::new("ptest");
    let target = dir.path().join(component.file_name().unwrap());
    std::fs::copy(component, &target).unwrap();
    for d in delegates {
        std::fs::copy(plugin(d), dir.path().join(format!("{d}.wasm"))).unwrap();
    }
    let conf = dir.path().join("config.json");
    std::fs::write(&conf, config.to_string()).unwrap();
    let started = Instant::now();
    let out = Command::new(wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(&target)
        .arg("--config")
        .arg(&conf)
        .args(extra)
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

impl Run {
    /// The verdict line of `property`.
    fn line(&self, property: &str) -> &str {
        let prefix = |v: &str| format!("{v} {property}:");
        self.stdout
            .lines()
            .find(|l| l.starts_with(&prefix("PASS")) || l.starts_with(&prefix("FAIL")))
            .unwrap_or_else(|| panic!("no verdict for {property}:\n{}", self.stdout))
    }

    fn passed(&self, property: &str) -> bool {
        self.line(property).starts_with("PASS")
    }

    fn assert_all_pass(&self, what: &str) {
        assert_eq!(self.code, 0, "{what}:\n{}\n{}", self.stdout, self.stderr);
        assert!(!self.stdout.contains("FAIL"), "{what}:\n{}", self.stdout);
    }
}

fn temp_file(dir: &TempDir, name: &str, v: Value) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// What a chained plugin finds: the container interface an interface
/// plugin made, with its address.
fn prev_result() -> Value {
    json!({"cniVersion": "1.1.0",
           "interfaces": [{"name": "eth0", "sandbox": "/run/netns/plugin-test"}],
           "ips": [{"address": "10.0.2.99/24", "interface": 0, "gateway": "10.0.2.2"}]})
}

#[test]
fn every_bundled_plugin_passes_with_a_typical_config() {
    let extra = TempDir::new("ptest");
    let prev = temp_file(&extra, "prev.json", prev_result());
    let prev = format!("@{}", prev.display());
    let cases: Vec<(&str, &[&str], Value, Vec<String>)> = vec![
        ("bridge", &["host-local"], json!({"cniVersion": "1.1.0", "name": "ptbr", "type": "bridge",
            "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/24"}]],
                     "routes": [{"dst": "0.0.0.0/0"}]}}), vec![]),
        ("ptp", &["host-local"], json!({"cniVersion": "1.0.0", "name": "ptptp", "type": "ptp",
            "ipMasq": true, "ipam": {"type": "host-local", "subnet": "10.89.0.0/24"}}), vec![]),
        ("macvlan", &["static"], json!({"cniVersion": "1.1.0", "name": "ptmv", "type": "macvlan",
            "master": "eth0", "ipam": {"type": "static", "addresses": [{"address": "10.0.2.77/24"}]}}), vec![]),
        ("macvtap", &["host-local"], json!({"cniVersion": "1.1.0", "name": "ptmvt", "type": "macvtap",
            "master": "eth0", "ipam": {"type": "host-local", "subnet": "10.0.2.0/24",
                                       "rangeStart": "10.0.2.100", "rangeEnd": "10.0.2.120"}}), vec![]),
        // vlan and ipvlan: this kernel lacks the modules, the model has them.
        ("vlan", &["static"], json!({"cniVersion": "1.1.0", "name": "ptvl", "type": "vlan",
            "master": "eth0", "vlanId": 42, "mtu": 1400,
            "ipam": {"type": "static", "addresses": [{"address": "10.42.0.5/24", "gateway": "10.42.0.1"}],
                     "routes": [{"dst": "0.0.0.0/0"}]}}), vec![]),
        ("ipvlan", &["host-local"], json!({"cniVersion": "1.1.0", "name": "ptiv", "type": "ipvlan",
            "mode": "l3", "ipam": {"type": "host-local", "subnet": "10.0.2.0/24",
                                   "rangeStart": "10.0.2.130", "rangeEnd": "10.0.2.140"}}), vec![]),
        ("tap", &["static"], json!({"cniVersion": "1.1.0", "name": "pttap", "type": "tap",
            "ipam": {"type": "static", "addresses": [{"address": "10.90.0.5/24"}]}}), vec![]),
        ("loopback", &[], json!({"cniVersion": "0.4.0", "name": "ptlo", "type": "loopback"}), vec![]),
        // VM mode: a tap on the node, the address only reserved.
        ("bridge", &["host-local"], json!({"cniVersion": "1.1.0", "name": "ptvmbr", "type": "bridge",
            "bridge": "vmbr0", "isGateway": true, "vm": {"interface": "tap", "owner": 107},
            "ipam": {"type": "host-local", "subnet": "10.214.0.0/24"}}), vec![]),
        ("ptp", &["host-local"], json!({"cniVersion": "1.1.0", "name": "ptvmptp", "type": "ptp",
            "vm": {"interface": "tap"}, "ipam": {"type": "host-local", "subnet": "10.215.0.0/24"}}), vec![]),
        ("tuning", &[], json!({"cniVersion": "1.1.0", "name": "pttun", "type": "tuning",
            "mtu": 1400, "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}}),
            vec!["--prev-result".into(), prev.clone()]),
        ("portmap", &[], json!({"cniVersion": "1.1.0", "name": "ptpm", "type": "portmap",
            "capabilities": {"portMappings": true}}),
            vec!["--prev-result".into(), prev.clone(), "--capability-args".into(),
                 json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}).to_string()]),
        ("firewall", &[], json!({"cniVersion": "1.1.0", "name": "ptfw", "type": "firewall"}),
            vec!["--prev-result".into(), prev.clone()]),
    ];
    let mut points = 0;
    for (name, delegates, config, extra) in cases {
        let mut extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        extra.push("--faults");
        let run = plugin_test(&plugin(name), delegates, config, &extra);
        run.assert_all_pass(name);
        for property in [
            "add",
            "check",
            "del",
            "del-again",
            "del-without-netns",
            "faults-add",
            "faults-del",
        ] {
            assert!(run.passed(property), "{name} {property}");
        }
        // Every plugin here makes host calls in ADD, each one a point
        // where a failure was injected and cleaned up after.
        let add: u64 = run
            .line("faults-add")
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(add > 0, "{name}: {}", run.line("faults-add"));
        points += add;
        eprintln!(
            "{name}: {} | {}",
            run.line("faults-add"),
            run.line("faults-del")
        );
        assert!(
            run.took < Duration::from_secs(5),
            "{name} took {:?}",
            run.took
        );
    }
    eprintln!("fault injection: {points} ADD injection points over the bundled plugins, 0 leaks");
}

/// The injection points are the plugin's host calls that reach the
/// kernel: a strict fx-net with three reads in ADD and two in DEL has
/// exactly those, and each failure ends its verb with the kernel's error.
#[test]
fn every_host_call_is_an_injection_point() {
    let read = json!({"op": "get-sysctl", "ns": "node", "key": "net.ipv4.ip_forward"});
    let run = plugin_test(
        &fixture("fx-net"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "ptcount", "type": "fx-net", "strict": true,
               "ops": [read, read, read], "delOps": [read, read]}),
        &["--faults", "--json"],
    );
    let v: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    let detail = |p: &str| {
        v["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["property"] == p)
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(detail("faults-add"), "3 injection points, 0 leaks", "{v}");
    assert_eq!(detail("faults-del"), "2 injection points, 0 leaks", "{v}");
    assert_eq!(v["passed"], true, "{v}");
}

#[test]
fn a_chained_plugin_must_pass_the_prev_result_on() {
    let extra = TempDir::new("ptest");
    let prev = temp_file(&extra, "prev.json", prev_result());
    // fx with "ip" adds an address; without prevResult handling it would
    // drop the earlier plugin's, but fx appends to the prevResult.
    let run = plugin_test(
        &fixture("fx"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "ptfx", "type": "fx", "ip": "10.0.2.98/24"}),
        &["--prev-result", &format!("@{}", prev.display())],
    );
    run.assert_all_pass("fx appending to prevResult");
    // fx-net returns only its own interfaces: the earlier address is gone.
    let run = plugin_test(
        &fixture("fx-net"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "ptfxn", "type": "fx-net", "ops": []}),
        &["--prev-result", &format!("@{}", prev.display())],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.line("add")
            .contains("prevResult's address 10.0.2.99/24 is missing"),
        "{}",
        run.stdout
    );
}

#[test]
fn broken_plugins_fail_the_property_that_says_so() {
    // Holds its IPAM allocation after DEL.
    let run = plugin_test(
        &fixture("fx-net"),
        &["host-local"],
        json!({"cniVersion": "1.1.0", "name": "ptleak", "type": "fx-net",
               "ops": [{"op": "ipam-add"}],
               "ipam": {"type": "host-local", "subnet": "10.91.0.0/24"}}),
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.passed("add"));
    assert!(
        run.line("del").contains("the store still holds")
            && run
                .line("del")
                .contains("10.91.0.2 held by ptest-ctr-1/eth0"),
        "{}",
        run.stdout
    );
    assert!(!run.passed("gc"), "{}", run.stdout);

    // Deletes its node link by name on DEL and fails when it is gone: a
    // second DEL, and a DEL after the namespace (and so the veth) went.
    let run = plugin_test(
        &fixture("fx-net"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "pttwice", "type": "fx-net",
               "ops": [{"op": "create-veth", "ns": "node", "name": "vx{cid}",
                        "peer": "eth0", "peer-ns": "container"}],
               "delOps": [{"op": "delete", "ns": "node", "name": "vx{cid}"}]}),
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.passed("del"), "{}", run.stdout);
    assert!(!run.passed("del-again"), "{}", run.stdout);
    assert!(
        run.line("del-without-netns").contains("gone"),
        "{}",
        run.stdout
    );

    // A result the host cannot accept.
    let run = plugin_test(
        &fixture("fx"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "ptbad", "type": "fx", "ip": "bogus"}),
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.line("add").contains("returned an invalid result"),
        "{}",
        run.stdout
    );

    // Fails every DEL.
    let run = plugin_test(
        &fixture("fx"),
        &[],
        json!({"cniVersion": "0.4.0", "name": "ptdel", "type": "fx", "del": "fail"}),
        &["--json"],
    );
    assert_eq!(run.code, 1);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["passed"], false);
    let props = v["properties"].as_array().unwrap();
    let del = props.iter().find(|p| p["property"] == "del").unwrap();
    assert_eq!(del["ok"], false);
    assert!(
        del["detail"].as_str().unwrap().contains("error 999"),
        "{del}"
    );
    // 0.4.0 has no GC or STATUS: not run.
    assert!(props.iter().all(|p| p["property"] != "gc"), "{v}");
}

/// The host records every link a plugin creates and removes it on DEL and
/// GC: a plugin that creates a bridge per container and never deletes it
/// leaves nothing, cycle after cycle.
#[test]
fn a_plugin_cannot_leak_a_link() {
    let run = plugin_test(
        &fixture("fx-net"),
        &[],
        json!({"cniVersion": "1.1.0", "name": "ptlink", "type": "fx-net",
               "ops": [{"op": "ensure-bridge", "ns": "node", "name": "lk{cid}"},
                       {"op": "create-veth", "ns": "container", "name": "eth1",
                        "peer": "lp{cid}", "peer-ns": "node"}]}),
        &[],
    );
    run.assert_all_pass("a plugin leaving its links");
    assert!(
        run.line("del").contains("nothing left behind"),
        "{}",
        run.stdout
    );
}

#[test]
fn bad_invocations_are_clear_errors() {
    let dir = TempDir::new("ptest");
    let conf = temp_file(
        &dir,
        "c.json",
        json!({"cniVersion": "1.1.0", "name": "x", "type": "x"}),
    );
    let out = Command::new(wasm_cni_bin())
        .args(["plugin", "test", "/nonexistent/x.wasm", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent"));
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = Command::new(wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(plugin("bridge"))
        .arg("--config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--config"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
