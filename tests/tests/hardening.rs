//! The seven ways a hostile component broke the sandbox's promises (issue
//! #9), each carried out from inside the sandbox against the real binary in
//! throwaway namespaces, and each checked the way `hostile.rs` checks an
//! attack: a clean CNI error (or refusal) within the deadline plus slack,
//! and the node and container namespaces (links with their ifindex,
//! addresses, routes in every table, sysctls) and the state directory as
//! they were.
//!
//! 1. waits: WASI sleeps, WASI calls against the budget, the store lock;
//! 2. a link is known by name, ifindex and kind, not by name alone;
//! 3. links are created during ADD only, and DEL and GC leave none behind;
//! 4. the uplink cannot be taken over by a macvlan;
//! 5. a failed ADD takes back every change it made;
//! 6. the store quota counts what is written;
//! 7. taps only in the container, owned as the config says.
//!
//! Plus the per-call log cap, and namespace handles that cost no
//! descriptors.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::{add, entry, files, hostile, world, Attack, SLACK};
use wasm_cni_tests::{fixture, plugin, plugin_logs, Invocation, Output, Pod, Sandbox};

fn with(tag: &str, fixtures: &[&str]) -> Option<(Sandbox, Pod)> {
    let (sb, pod) = hostile(tag)?;
    for f in fixtures {
        sb.install(&fixture(f), f);
    }
    Some((sb, pod))
}

/// One `fx-net` chain entry: `ops` for ADD (strict), merged with `extra`.
fn fx_net(ops: Value, extra: Value) -> Value {
    let mut e = json!({"type": "fx-net", "strict": true, "ops": ops, "wasm": {"deadlineMs": 2000}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        e[k] = v.clone();
    }
    e
}

fn refused<'a>(plugin: &'a str, why: &'a [&'a str]) -> Attack<'a> {
    Attack {
        plugin,
        ..Attack::new(999, why)
    }
}

// --- 1. Every wait a plugin can cause ends by its deadline ---------------

#[test]
fn a_wasi_sleep_ends_at_the_deadline() {
    let Some((sb, pod)) = with("hsleep", &["fx-wasi"]) else {
        return;
    };
    let attack = Attack {
        plugin: "fx-wasi",
        deadline_ms: 1000,
        ..Attack::new(999, &["deadline of 1000 ms exceeded"])
    };
    // Eight seconds asked for, and u64::MAX nanoseconds: both end at the
    // deadline, through the preview-1 adapter's poll_oneoff.
    for (name, extra) in [("sleep", json!({"ms": 8000})), ("sleep-forever", json!({}))] {
        let mut e = entry("fx-wasi", name, extra);
        e["wasm"]["deadlineMs"] = json!(1000);
        let conf = sb.conf("1.1.0", "hsleep", json!([e]));
        let out = attack.run(&sb, &pod, &conf, add("c1"));
        assert!(out.elapsed >= Duration::from_millis(1000), "{out:?}");
    }
}

#[test]
fn wasi_calls_are_charged_to_the_budget() {
    let Some((sb, pod)) = with("hclock", &["fx-wasi"]) else {
        return;
    };
    let conf = sb.conf(
        "1.1.0",
        "hclock",
        json!([entry(
            "fx-wasi",
            "clock-flood",
            json!({"count": 300_000, "wasm": {"hostCallBudget": 50}})
        )]),
    );
    Attack {
        plugin: "fx-wasi",
        ..Attack::new(999, &["host call budget of 50 calls exhausted"])
    }
    .run(&sb, &pod, &conf, add("c1"));
}

#[test]
fn a_store_lock_held_past_the_deadline_is_try_again_later() {
    let Some((sb, pod)) = with("hlock", &["fx-wasi"]) else {
        return;
    };
    let conf = |network: &str, attack: &str, key: &str, extra: Value| {
        let mut e = entry("fx-wasi", attack, json!({"key": key}));
        for (k, v) in extra.as_object().into_iter().flatten() {
            e[k] = v.clone();
        }
        sb.conf("1.1.0", network, json!([e]))
    };
    let holder = conf(
        "hlock",
        "sleep-holding-lock",
        "10.0.0.1",
        json!({"ms": 60_000, "wasm": {"deadlineMs": 4000}}),
    );
    let victim = conf(
        "hlock",
        "reserve",
        "10.0.0.2",
        json!({"wasm": {"deadlineMs": 1000}}),
    );
    let neighbour = conf(
        "hlock-other",
        "reserve",
        "10.0.0.2",
        json!({"wasm": {"deadlineMs": 1000}}),
    );
    pod.run(Invocation::new("STATUS"), &holder).assert_ok();
    std::thread::scope(|s| {
        let held = s.spawn(|| pod.run(add("holder"), &holder));
        // Let the holder take its scope's lock.
        let store = sb.state_dir().join("store/hlock/fx-wasi.lock");
        let started = Instant::now();
        while !store.exists() && started.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // The same scope waits until its own deadline, then gives up with
        // "try again later"...
        let out = pod.run(add("victim"), &victim);
        assert_eq!(out.error_code(), 11, "{out:?}");
        assert!(
            out.error_msg().contains("stayed locked by another call"),
            "{}",
            out.error_msg()
        );
        assert!(out.elapsed >= Duration::from_millis(1000), "{out:?}");
        assert!(
            out.elapsed <= Duration::from_millis(1000) + SLACK,
            "{out:?}"
        );
        // ...while another network's scope is not held up at all.
        let out = pod.run(add("neighbour"), &neighbour);
        out.assert_ok();
        assert!(out.elapsed < Duration::from_millis(1000), "{out:?}");
        // The holder itself ends at its deadline, and commits nothing.
        let out = held.join().unwrap();
        assert_eq!(out.error_code(), 999, "{out:?}");
        assert!(out.error_msg().contains("deadline of 4000 ms exceeded"));
        assert!(
            out.elapsed <= Duration::from_millis(4000) + SLACK,
            "{out:?}"
        );
    });
    // Once the lock is free the victim gets in.
    pod.run(add("victim"), &victim).assert_ok();
    let state = files(&sb.state_dir());
    let scope = String::from_utf8_lossy(&state[std::path::Path::new("store/hlock/fx-wasi.json")]);
    assert!(
        scope.contains("10.0.0.2") && !scope.contains("10.0.0.1"),
        "{scope}"
    );
}

// --- 2. A link is known by more than its name ----------------------------

/// The node-side identity of `dev`: ifindex, kind and flags.
fn identity(pod: &Pod, dev: &str) -> Value {
    let l = pod
        .node
        .link(dev)
        .unwrap_or_else(|| panic!("{dev} is gone"));
    json!([
        l["ifindex"],
        l["linkinfo"]["info_kind"],
        l["flags"],
        l["mtu"]
    ])
}

#[test]
fn a_link_is_known_by_more_than_its_name() {
    let Some((sb, pod)) = with("hid", &["fx-net"]) else {
        return;
    };
    let node_veth = |x: &str, y: &str| json!({"op": "create-veth", "ns": "node", "name": x, "peer": y, "peer-ns": "node"});
    // The attack as reported: veth vx0<->vy0 in the node, then vy0 deleted,
    // which takes vx0 along. The record then lists neither.
    let a = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(
            json!([node_veth("vx0", "vy0"), {"op": "delete", "ns": "node", "name": "vy0"}]),
            json!({})
        )]),
    );
    pod.run(add("a1"), &a).assert_ok();
    let rec = files(&sb.state_dir());
    let rec = String::from_utf8_lossy(&rec[std::path::Path::new("networks/hid/a1:eth0.json")]);
    assert!(!rec.contains("vx0") && !rec.contains("vy0"), "{rec}");
    // Another network then makes its own vx0, a bridge.
    let b = sb.conf(
        "1.1.0",
        "hid-other",
        json!([fx_net(
            json!([{"op": "ensure-bridge", "ns": "node", "name": "vx0"},
                   {"op": "up", "ns": "node", "name": "vx0"}]),
            json!({"bridge": "vx0"})
        )]),
    );
    pod.run(add("b1"), &b).assert_ok();
    let theirs = identity(&pod, "vx0");
    // The first attachment's DEL goes for vx0: refused, it is not its own
    // (and DEL changes nothing in the node but deleting what it created).
    let mut greedy = a.clone();
    greedy["chain"][0]["delOps"] = json!([{"op": "delete", "ns": "node", "name": "vx0"}]);
    let out = pod.run(Invocation::new("DEL").id("a1"), &greedy);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert!(
        out.error_msg().contains("not created for this attachment"),
        "{out:?}"
    );
    assert_eq!(identity(&pod, "vx0"), theirs);
    pod.run(Invocation::new("DEL").id("a1"), &a).assert_ok();
    assert_eq!(identity(&pod, "vx0"), theirs);

    // With the name still recorded: a2 keeps vx1<->vy1; then both go and
    // someone else's bridge takes the name vx1.
    let keep = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(json!([node_veth("vx1", "vy1")]), json!({}))]),
    );
    let replace = |dev: &str| {
        pod.node.exec(&["ip", "link", "del", dev]);
        pod.node.exec(&["ip", "link", "add", dev, "type", "bridge"]);
        identity(&pod, dev)
    };
    pod.run(add("a2"), &keep).assert_ok();
    let theirs = replace("vx1");
    let mut greedy = keep.clone();
    greedy["chain"][0]["delOps"] = json!([{"op": "delete", "ns": "node", "name": "vx1"}]);
    let out = pod.run(Invocation::new("DEL").id("a2"), &greedy);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert!(
        out.error_msg()
            .contains("is no longer the one this attachment created"),
        "{out:?}"
    );
    assert_eq!(identity(&pod, "vx1"), theirs);
    // DEL itself removes what the attachment created, and only that.
    pod.run(Invocation::new("DEL").id("a2"), &keep).assert_ok();
    assert_eq!(identity(&pod, "vx1"), theirs);

    // GC of a stale attachment whose link was replaced: the same.
    let stale = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(json!([node_veth("vx2", "vy2")]), json!({}))]),
    );
    pod.run(add("a3"), &stale).assert_ok();
    let theirs = replace("vx2");
    let mut gc = stale.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    pod.run(Invocation::new("GC"), &gc).assert_ok();
    assert_eq!(identity(&pod, "vx2"), theirs);
    assert!(!sb.state_dir().join("networks/hid/a3:eth0.json").exists());
    pod.run(Invocation::new("DEL").id("b1"), &b).assert_ok();
}

// --- 3. Links are created during ADD only, and do not outlive DEL --------

#[test]
fn only_add_creates_links_and_del_and_gc_leave_none() {
    let Some((sb, pod)) = with("hverb", &["fx-net"]) else {
        return;
    };
    let create = json!([{"op": "create-veth", "ns": "node", "name": "vz0", "peer": "vz1", "peer-ns": "node"}]);
    let base = sb.conf("1.1.0", "hverb", json!([fx_net(json!([]), json!({}))]));
    pod.run(add("c1"), &base).assert_ok();
    for (verb, key) in [
        ("CHECK", "checkOps"),
        ("DEL", "delOps"),
        ("STATUS", "statusOps"),
        ("GC", "gcOps"),
    ] {
        let mut conf = base.clone();
        conf["chain"][0][key] = create.clone();
        conf["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
        let before = world(&sb, &pod);
        let out = pod.run(Invocation::new(verb).id("c1"), &conf);
        // STATUS answers any failure as 50 (its cause's code in details).
        let code = if verb == "STATUS" { 50 } else { 999 };
        assert_eq!(out.error_code(), code, "{verb}: {out:?}");
        assert!(
            out.error_msg()
                .contains("links are created during ADD only"),
            "{verb}: {}",
            out.error_msg()
        );
        assert!(pod.node.link("vz0").is_none(), "{verb} left a link");
        assert_eq!(before, world(&sb, &pod), "{verb}");
    }
    pod.run(Invocation::new("DEL").id("c1"), &base).assert_ok();

    // What ADD created goes with DEL, whether the plugin's DEL knows of it
    // or not: a pod veth and a node-only pair.
    let before = world(&sb, &pod);
    let littering = sb.conf(
        "1.1.0",
        "hverb",
        json!([fx_net(
            json!([{"op": "create-veth", "name": "eth0", "peer": "vw0", "peer-ns": "node"},
                   {"op": "create-veth", "ns": "node", "name": "vw1", "peer": "vw2", "peer-ns": "node"},
                   {"op": "up", "ns": "node", "name": "vw1"}]),
            json!({})
        )]),
    );
    pod.run(add("c2"), &littering).assert_ok();
    assert!(pod.node.link("vw1").is_some());
    pod.run(Invocation::new("DEL").id("c2"), &littering)
        .assert_ok();
    assert_eq!(before, world(&sb, &pod));
    // And with GC, for an attachment the runtime forgot.
    pod.run(add("c3"), &littering).assert_ok();
    let mut gc = littering.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    pod.run(Invocation::new("GC"), &gc).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

#[test]
fn a_failed_retry_of_an_add_keeps_the_first_ones_record() {
    let Some((sb, pod)) = with("hretry", &["fx-net"]) else {
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
    let Some((sb, pod)) = with("hkill", &["fx-net"]) else {
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

// --- 4. The uplink cannot be taken over ----------------------------------

#[test]
fn the_uplink_cannot_be_taken_over() {
    let Some((sb, pod)) = with("hup", &["fx-net"]) else {
        return;
    };
    // The node's uplink: the link that carries its address and default route.
    sb.install(&fixture("fx-net"), "macvlan");
    pod.node.exec(&[
        "ip", "link", "add", "uplink0", "type", "veth", "peer", "uplink1",
    ]);
    for dev in ["uplink0", "uplink1"] {
        pod.node.exec(&["ip", "link", "set", dev, "up"]);
    }
    pod.node
        .exec(&["ip", "addr", "add", "192.0.2.10/24", "dev", "uplink0"]);
    pod.node.exec(&[
        "ip",
        "route",
        "add",
        "default",
        "via",
        "192.0.2.1",
        "dev",
        "uplink0",
    ]);
    let macvlan = |plugin: &str, mode: &str, target: &str, name: &str| {
        let mut e = fx_net(
            json!([{"op": "macvlan", "ns": "node", "master": "uplink0", "mode": mode,
                    "target": target, "name": name}]),
            json!({}),
        );
        e["type"] = json!(plugin);
        sb.conf("1.1.0", "hup", json!([e]))
    };
    // A plugin whose type does not default to the uplink may not use it.
    refused("fx-net", &["does not belong to this attachment"]).run(
        &sb,
        &pod,
        &macvlan("fx-net", "bridge", "container", "eth0"),
        add("c1"),
    );
    // A macvlan-type plugin may, but not in passthru mode unless its config
    // asks for it, and not into the node namespace.
    refused("macvlan", &["passthru mode takes the master over"]).run(
        &sb,
        &pod,
        &macvlan("macvlan", "passthru", "container", "eth0"),
        add("c1"),
    );
    refused("macvlan", &["goes into the container namespace only"]).run(
        &sb,
        &pod,
        &macvlan("macvlan", "bridge", "node", "mvx0"),
        add("c1"),
    );
    // The ordinary case still works, and leaves nothing after DEL.
    let before = world(&sb, &pod);
    let ok = macvlan("macvlan", "bridge", "container", "eth0");
    pod.run(add("c1"), &ok).assert_ok();
    assert!(pod.ctr.link("eth0").is_some());
    pod.run(Invocation::new("DEL").id("c1"), &ok).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

// --- 5. A failed ADD takes back every change it made ---------------------

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
fn a_failed_add_takes_back_every_change() {
    let Some((sb, pod)) = with("hundo", &["fx-net"]) else {
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
    let Some((sb, pod)) = with("hkeep", &["fx-net"]) else {
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

// --- 6. The store quota counts what is written ----------------------------

#[test]
fn the_store_quota_counts_what_is_written() {
    let Some((sb, pod)) = hostile("hquota") else {
        return;
    };
    // 64 KiB values of control characters, which JSON writes six bytes
    // each: the quota must stop them at 32 MiB as written, not as passed.
    let conf = sb.conf(
        "1.1.0",
        "hquota",
        json!([entry(
            "fx-hostile",
            "store-escapes",
            json!({"wasm": {"deadlineMs": 30_000}})
        )]),
    );
    let out = pod.run(add("c1"), &conf);
    out.assert_ok();
    let name = out.json()["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let stored: usize = name.strip_prefix("stored:").unwrap().parse().unwrap();
    let file = sb.state_dir().join("store/hquota/fx-hostile.json");
    let size = std::fs::metadata(&file).unwrap().len();
    eprintln!("{stored} values accepted, scope file {size} bytes");
    assert!(stored > 0);
    assert!(
        size <= 32 << 20,
        "{size} bytes written under a 32 MiB quota"
    );
    assert!(size >= (stored as u64) * 6 * 65536, "{size}");
    pod.run(Invocation::new("DEL").id("c1"), &conf).assert_ok();
}

// --- 7. Taps only in the container, owned as the config says --------------

#[test]
fn taps_belong_in_the_container_with_the_owner_the_config_names() {
    let Some((sb, pod)) = with("htap", &["fx-net"]) else {
        return;
    };
    let tap = |ns: &str, name: &str, owner: Value, group: Value| {
        let mut op = json!({"op": "tap", "ns": ns, "name": name});
        if !owner.is_null() {
            op["owner"] = owner;
        }
        if !group.is_null() {
            op["group"] = group;
        }
        sb.conf(
            "1.1.0",
            "htap",
            json!([fx_net(json!([op]), json!({"owner": 1000}))]),
        )
    };
    for (conf, why) in [
        (
            tap("node", "tapx0", Value::Null, Value::Null),
            "taps are made in the container namespace only",
        ),
        (
            tap("container", "eth0", json!(0), Value::Null),
            "owner 0 is not the one the config names",
        ),
        (
            tap("container", "eth0", Value::Null, json!(5)),
            "group 5 is not the one the config names",
        ),
    ] {
        refused("fx-net", &[why]).run(&sb, &pod, &conf, add("c1"));
    }
    let before = world(&sb, &pod);
    let ok = tap("container", "eth0", json!(1000), Value::Null);
    pod.run(add("c1"), &ok).assert_ok();
    assert_eq!(
        pod.ctr.link("eth0").unwrap()["linkinfo"]["info_kind"],
        "tun"
    );
    pod.run(Invocation::new("DEL").id("c1"), &ok).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

// --- Bounds that need no class of their own --------------------------------

#[test]
fn a_call_logs_at_most_64_kib() {
    let Some((sb, pod)) = hostile("hlog") else {
        return;
    };
    let conf = sb.conf(
        "1.1.0",
        "hlog",
        json!([entry(
            "fx-hostile",
            "flood",
            json!({"count": 20_000, "wasm": {"hostCallBudget": 30_000}})
        )]),
    );
    let out: Output = pod.run(add("c1").env("WASM_CNI_LOG", "debug"), &conf);
    out.assert_ok();
    let logged: usize = plugin_logs(&out.stderr).iter().map(|(_, m)| m.len()).sum();
    assert!(logged <= (64 << 10) + 200, "{logged} bytes logged");
    assert!(
        out.stderr.contains("log limit of 65536 bytes"),
        "{}",
        &out.stderr[out.stderr.len() - 300..]
    );
    pod.run(Invocation::new("DEL").id("c1"), &conf).assert_ok();
}

#[test]
fn thousands_of_namespace_handles_cost_no_descriptors() {
    let Some((sb, pod)) = hostile("hfd") else {
        return;
    };
    // 9 000 handles to the same namespace, held at once, in a process that
    // may open only 64 descriptors.
    let conf = sb.conf(
        "1.1.0",
        "hfd",
        json!([entry(
            "fx-hostile",
            "handles",
            json!({"count": 9000, "wasm": {"hostCallBudget": 20_000}})
        )]),
    );
    pod.run(Invocation::new("STATUS"), &conf).assert_ok();
    let inv = add("c1").netns(pod.ctr.path());
    let out = inv.run_wrapped(Some(&pod.node.name), &["prlimit", "--nofile=64:64"], &conf);
    out.assert_ok();
    assert_eq!(out.json()["interfaces"][0]["name"], "held:9000");
}
