//! Rollback: a failed or interrupted ADD takes back every change it made
//! (but keeps the shared ones other attachments may depend on), a failed
//! retry keeps the first ADD's record, an ADD killed halfway leaves what GC
//! and DEL need, and an ADD past its caps (links, rules, tc objects) is
//! refused and rolled back within its deadline. Each checked against the
//! real binary in throwaway namespaces, with the world (links with their
//! ifindex, addresses, routes in every table, sysctls, the node's nftables
//! rules and qdiscs, the state directory) exactly as before.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::{
    add, del, entry, everything, files, fx_net, hostile, hostile_with, identity, refused,
    sandbox_with, world, Attack, SLACK,
};
use wasm_cni_tests::{plugin, Invocation, Pod};

/// What a plugin does to the node and the pod before failing: a bridge the
/// config names, its address (inside its IPAM network), proxy_arp, the
/// forwarding switches, a veth into the pod with an address, a pod sysctl,
/// and three routes the policy refuses (half the Internet each way via the
/// bridge, and one in the `local` table).
fn busy_ops() -> Value {
    json!([
        {"op": "ensure-bridge", "ns": "node", "name": "brf0"},
        {"op": "up", "ns": "node", "name": "brf0"},
        {"op": "mtu", "ns": "node", "name": "brf0", "mtu": 1400},
        {"op": "ipam-add"},
        {"op": "add-address", "ns": "node", "link": "brf0", "cidr": "10.61.0.1/24"},
        {"op": "add-route", "ns": "node", "dst": "0.0.0.0/1", "dev": "brf0"},
        {"op": "add-route", "ns": "node", "dst": "128.0.0.0/1", "dev": "brf0"},
        {"op": "add-route", "ns": "node", "dst": "10.61.0.0/25", "dev": "brf0", "table": 255},
        {"op": "set-sysctl", "ns": "node", "key": "net.ipv4.conf.brf0.proxy_arp", "value": "1"},
        {"op": "set-sysctl", "ns": "node", "key": "net.ipv4.ip_forward", "value": "1"},
        {"op": "set-sysctl", "ns": "node", "key": "net.ipv6.conf.all.forwarding", "value": "1"},
        {"op": "create-veth", "name": "eth0", "peer": "vf0", "peer-ns": "node"},
        {"op": "master", "ns": "node", "name": "vf0", "master": "brf0"},
        {"op": "up", "name": "eth0"},
        {"op": "add-address", "link": "eth0", "cidr": "10.61.0.5/24"},
        {"op": "add-route", "dst": "10.62.0.0/24", "dev": "eth0", "table": 255},
        {"op": "set-sysctl", "key": "net.ipv4.conf.lo.arp_notify", "value": "1"}
    ])
}

fn busy(extra: Value) -> Value {
    let mut e = fx_net(
        busy_ops(),
        json!({"strict": false, "bridge": "brf0",
               "ipam": {"type": "static", "addresses": [{"address": "10.61.0.5/24"}]}}),
    );
    for (k, v) in extra.as_object().into_iter().flatten() {
        e[k] = v.clone();
    }
    e
}

const BRIDGE_KEYS: &[&str] = &[
    "net.ipv4.conf.brf0.proxy_arp",
    "net.ipv4.conf.brf0.forwarding",
];

#[test]
fn a_plugin_stopped_halfway_leaves_no_links_behind() {
    let Some((sb, pod)) = hostile("hlitter") else {
        return;
    };
    // It creates a veth pair, then spins into the deadline: its DEL knows
    // nothing of the pair, so the host removes what it recorded as created.
    let conf = sb.conf(
        "1.1.0",
        "hlitter",
        json!([entry("fx-hostile", "litter", json!({"link": "vlitter0"}))]),
    );
    let out = Attack::new(999, &["deadline of 2000 ms exceeded"]).run(&sb, &pod, &conf, add("c1"));
    assert!(pod.node.link("vlitter0").is_none(), "{}", out.stderr);
}

#[test]
fn a_failed_retry_of_an_add_keeps_the_first_ones_record() {
    let Some((sb, pod)) = hostile_with("hretry", &["fx-net"]) else {
        return;
    };
    let before = world(&sb, &pod);
    let conf = sb.conf(
        "1.1.0",
        "hretry",
        json!([fx_net(
            json!([{"op": "create-veth", "name": "eth0", "peer": "vr0", "peer-ns": "node"}]),
            json!({})
        )]),
    );
    pod.run(add("c1"), &conf).assert_ok();
    let record = sb.state_dir().join("networks/hretry/c1:eth0.json");
    let first = std::fs::read(&record).unwrap();
    // The runtime lost the answer and asks again: eth0 exists, the ADD
    // fails, and what the first ADD made stays recorded and in place.
    let out = pod.run(add("c1"), &conf);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert_eq!(std::fs::read(&record).unwrap(), first);
    assert!(pod.node.link("vr0").is_some());
    pod.run(Invocation::new("DEL").id("c1"), &conf).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

#[test]
fn an_add_killed_halfway_leaves_what_gc_and_del_need() {
    let Some((sb, pod)) = hostile_with("hkill", &["fx-net"]) else {
        return;
    };
    let before = world(&sb, &pod);
    let conf = sb.conf(
        "1.1.0",
        "hkill",
        json!([fx_net(
            json!([{"op": "create-veth", "name": "eth0", "peer": "vk0", "peer-ns": "node"},
                   {"op": "create-veth", "ns": "node", "name": "vk1", "peer": "vk2", "peer-ns": "node"}]),
            json!({"end": "spin", "wasm": {"deadlineMs": 30_000}})
        )]),
    );
    pod.run(Invocation::new("STATUS"), &conf).assert_ok();
    let record = sb.state_dir().join("networks/hkill/c1:eth0.json");
    for verb in ["GC", "DEL"] {
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &pod.node.name])
            .arg(wasm_cni_tests::wasm_cni_bin())
            .env_clear()
            .envs([
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_NETNS", pod.ctr.path().as_str()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/usr/lib/cni"),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes())
            .unwrap();
        // Wait until both pairs exist, then kill the process mid-ADD.
        let started = Instant::now();
        while pod.node.link("vk1").is_none() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let pending: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        assert_eq!(pending["pending"], true, "{pending}");
        let names: Vec<&str> = pending["nodeLinks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["vk0", "vk1", "vk2"], "{pending}");
        // The runtime never got a result: GC does not list it, or the
        // runtime DELs it. Either way nothing is left.
        let mut cleanup = conf.clone();
        cleanup["cni.dev/valid-attachments"] = json!([]);
        pod.run(Invocation::new(verb).id("c1"), &cleanup)
            .assert_ok();
        assert!(!record.exists(), "{verb}");
        assert_eq!(before, world(&sb, &pod), "{verb}");
    }
}

#[test]
fn a_failed_add_takes_back_every_change() {
    let Some((sb, pod)) = hostile_with("hundo", &["fx-net"]) else {
        return;
    };
    sb.install(&plugin("static"), "static");
    let attack = |cause: &'static [&'static str]| Attack {
        node_keys: BRIDGE_KEYS,
        ..refused("fx-net", cause)
    };
    // The plugin fails itself; the host stops it (a trap); a later plugin
    // of the chain fails after it succeeded.
    let cases: [(Value, &'static [&'static str]); 3] = [
        (
            json!([busy(json!({"end": "fail"}))]),
            &["failing on purpose"],
        ),
        (json!([busy(json!({"end": "trap"}))]), &["trapped"]),
        (
            json!([busy(json!({})), entry("fx-hostile", "trap", json!({}))]),
            &["trapped"],
        ),
    ];
    for (chain, cause) in cases {
        let conf = sb.conf("1.1.0", "hundo", chain);
        let plugin = if conf["chain"].as_array().unwrap().len() == 2 {
            "fx-hostile"
        } else {
            "fx-net"
        };
        let out = Attack {
            plugin,
            ..attack(cause)
        }
        .run(&sb, &pod, &conf, add("c1"));
        // The routes were refused by policy, not merely undone.
        assert!(
            out.stderr.contains("outside the attachment's networks"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("table 255 is the kernel's own"),
            "{}",
            out.stderr
        );
    }
    // A bridge that was there before (up, as a node's bridge is) keeps
    // what it had: its settings, its MAC, no address; everything else of
    // the node and the pod is as before. (What the kernel derives from
    // having had a port, carrier and GSO limits, is not a setting.)
    pod.node
        .exec(&["ip", "link", "add", "brf0", "type", "bridge"]);
    pod.node.exec(&["ip", "link", "set", "brf0", "up"]);
    let settings = |pod: &Pod| {
        let l = pod.node.link("brf0").unwrap();
        let up = l["flags"].as_array().unwrap().contains(&json!("UP"));
        let sysctl = |k: &str| pod.node.exec(&["sysctl", "-n", k]);
        // IPv6 link-local addresses and routes are the kernel's, as in
        // `Netns::snapshot`.
        let ours = |text: String| -> Vec<String> {
            text.lines()
                .filter(|l| !l.contains("fe80:") && !l.contains("ff00::/8"))
                .map(str::to_string)
                .collect()
        };
        (
            json!([l["ifindex"], l["mtu"], l["address"], l["promiscuity"], up]),
            ours(pod.node.exec(&["ip", "-o", "addr", "show", "dev", "brf0"])),
            ours(
                pod.node
                    .exec(&["ip", "route", "show", "table", "all", "dev", "brf0"]),
            ),
            BRIDGE_KEYS.iter().map(|k| sysctl(k)).collect::<Vec<_>>(),
        )
    };
    let others = |pod: &Pod| {
        let node: Vec<String> = pod
            .node
            .snapshot()
            .lines()
            .filter(|l| !l.contains("brf0"))
            .map(str::to_string)
            .collect();
        (node, pod.ctr.snapshot(), files(&sb.state_dir()))
    };
    let conf = sb.conf("1.1.0", "hundo", json!([busy(json!({"end": "fail"}))]));
    pod.run(Invocation::new("STATUS"), &conf).assert_ok();
    let before = (settings(&pod), others(&pod));
    let out = pod.run(add("c1"), &conf);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert_eq!(before, (settings(&pod), others(&pod)));
}

#[test]
fn a_failed_add_keeps_shared_changes_others_may_depend_on() {
    let Some((sb, pod)) = hostile_with("hkeep", &["fx-net"]) else {
        return;
    };
    sb.install(&plugin("static"), "static");
    // A neighbour on the same bridge, added first.
    let neighbour = sb.conf(
        "1.1.0",
        "hkeep",
        json!([fx_net(
            json!([{"op": "ensure-bridge", "ns": "node", "name": "brf0"},
                   {"op": "create-veth", "name": "eth0", "peer": "vn0", "peer-ns": "node"},
                   {"op": "master", "ns": "node", "name": "vn0", "master": "brf0"}]),
            json!({"bridge": "brf0"})
        )]),
    );
    let other_pod = wasm_cni_tests::Netns::new("hkeepc2");
    let neighbour_add = Invocation::new("ADD").id("n1").netns(other_pod.path());
    neighbour_add
        .run_in(Some(&pod.node.name), &neighbour)
        .assert_ok();
    let theirs = identity(&pod, "vn0");
    let conf = sb.conf("1.1.0", "hkeep", json!([busy(json!({"end": "fail"}))]));
    let out = pod.run(add("c1"), &conf);
    assert_eq!(out.error_code(), 999, "{out:?}");
    // Its own links and the pod's side are gone or back...
    assert!(pod.node.link("vf0").is_none());
    assert!(pod.ctr.link("eth0").is_none());
    assert_eq!(
        pod.ctr
            .exec(&["sysctl", "-n", "net.ipv4.conf.lo.arp_notify"])
            .trim(),
        "0"
    );
    // ...the shared bridge keeps the changes the neighbour may rely on, and
    // the neighbour is untouched.
    assert!(pod.node.link("brf0").is_some());
    assert_eq!(identity(&pod, "vn0"), theirs);
    assert!(sb.state_dir().join("networks/hkeep/n1:eth0.json").is_file());
    assert!(!sb.state_dir().join("networks/hkeep/c1:eth0.json").exists());
    let del = Invocation::new("DEL").id("n1").netns(other_pod.path());
    del.run_in(Some(&pod.node.name), &neighbour).assert_ok();
}

#[test]
fn an_add_past_its_caps_is_refused_and_rolled_back_within_the_deadline() {
    let Some((sb, pod)) = sandbox_with("tb3", &["fx-net"], &["host-local"]) else {
        return;
    };
    let deadline = 3000;
    let flood = |ops: Value| {
        sb.conf(
            "1.1.0",
            "tbnet3",
            json!([{"type": "fx-net", "strict": true,
                    "ipam": {"type": "host-local", "subnet": "10.74.0.0/24",
                             "dataDir": sb.dir.join("ipam").to_string_lossy()},
                    "ops": ops,
                    "wasm": {"deadlineMs": deadline, "hostCallBudget": 100_000}}]),
        )
    };
    let cases = [
        // 3 000 ifbs asked for: the 9th link is refused.
        (
            json!([{"op": "create-ifb", "ns": "node", "name": "tbifb{i}", "repeat": 3000}]),
            "at most 8 links",
        ),
        // 5 000 rules in the node's shared chains: refused past the cap.
        (
            json!([{"op": "ipam-add"},
                   {"op": "filter-add", "repeat": 5000,
                    "rules": [{"masquerade": {"source": "10.74.0.2",
                                              "except": ["10.{i}.0.0/16"]}}]}]),
            "an attachment may add at most 32",
        ),
        // Node routes inside its own /24, one per address.
        (
            json!([{"op": "ipam-add"},
                   {"op": "create-veth", "name": "eth0", "peer": "tbv{cid}", "peer-ns": "node"},
                   {"op": "up", "ns": "node", "name": "tbv{cid}"},
                   {"op": "add-route", "ns": "node", "dst": "10.74.0.{i}/32", "dev": "tbv{cid}",
                    "repeat": 200}]),
            "at most 16 addresses and routes",
        ),
    ];
    for (i, (ops, why)) in cases.into_iter().enumerate() {
        let conf = flood(ops);
        pod.run(Invocation::new("STATUS"), &conf);
        let before = everything(&sb, &pod, &[]);
        let id = format!("c{i}");
        let out = pod.run(add(&id), &conf);
        assert_eq!(out.error_code(), 999, "{out:?}");
        assert!(out.error_msg().contains(why), "{}", out.error_msg());
        assert!(
            out.elapsed < Duration::from_millis(deadline) + SLACK,
            "{why}: {:?}",
            out.elapsed
        );
        assert_eq!(before, everything(&sb, &pod, &[]), "{why}");
        let started = Instant::now();
        pod.run(del(&id), &conf).assert_ok();
        assert!(started.elapsed() < SLACK);
    }
}
