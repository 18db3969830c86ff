//! What the hostile-plugin suites share: a sandbox with the hostile
//! fixtures in throwaway namespaces, a snapshot of everything an attack
//! could change, and the check that an attack ended as it must: a clean CNI
//! error with the right code naming the plugin and the cause, within the
//! deadline plus slack, with the world exactly as before.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::{fixture, is_root, plugin, sh, Invocation, Netns, Output, Pod, Sandbox};

/// Every attack runs under this deadline unless it sets its own.
pub const DEADLINE_MS: u64 = 2_000;
/// Process start, `ip netns exec`, loading the plugin and the rollback DEL
/// after the failure, on a loaded two-core machine.
pub const SLACK: Duration = Duration::from_millis(1_500);

pub fn hostile(tag: &str) -> Option<(Sandbox, Pod)> {
    if !is_root(tag) {
        return None;
    }
    let sb = Sandbox::new(tag);
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    Some((sb, Pod::new(tag)))
}

/// A chain entry for `attack`, with `extra` keys merged in (`wasm` limits
/// are merged into the default deadline).
pub fn entry(plugin: &str, attack: &str, extra: Value) -> Value {
    let mut e = json!({"type": plugin, "attack": attack, "wasm": {"deadlineMs": DEADLINE_MS}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        if k == "wasm" {
            for (lk, lv) in v.as_object().into_iter().flatten() {
                e["wasm"][lk] = lv.clone();
            }
        } else {
            e[k] = v.clone();
        }
    }
    e
}

/// Every regular file under `dir` with its contents, except `*.lock`: the
/// store creates an empty lock file on first use, which holds no state.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none_or(|x| x != "lock") {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.insert(p.strip_prefix(dir).unwrap_or(&p).to_path_buf(), bytes);
            }
        }
    }
    out
}

/// Sysctls the attacks go for, beyond those `Netns::snapshot` records.
pub const NODE_KEYS: &[&str] = &[
    "net.core.somaxconn",
    "net.ipv4.conf.other0.forwarding",
    "net.ipv4.conf.all.rp_filter",
    "net.ipv6.conf.all.forwarding",
];
pub const CTR_KEYS: &[&str] = &["net.ipv4.conf.eth1.arp_notify", "net.core.somaxconn"];

#[derive(Debug, PartialEq)]
pub struct World {
    node: String,
    ctr: String,
    state: BTreeMap<PathBuf, Vec<u8>>,
    hostname: String,
}

pub fn world(sb: &Sandbox, pod: &Pod) -> World {
    world_with(sb, pod, &[])
}

/// [`world`] with more node sysctls (those of links an attack targets).
pub fn world_with(sb: &Sandbox, pod: &Pod, node_keys: &[&str]) -> World {
    let sysctls = |ns: &Netns, keys: &[&str]| {
        keys.iter()
            .filter(|k| ns.try_exec(&["sysctl", "-n", k]))
            .map(|k| format!("{k}={}", ns.exec(&["sysctl", "-n", k])))
            .collect::<String>()
    };
    World {
        node: pod.node.snapshot() + &sysctls(&pod.node, NODE_KEYS) + &sysctls(&pod.node, node_keys),
        ctr: pod.ctr.snapshot() + &sysctls(&pod.ctr, CTR_KEYS),
        state: files(&sb.state_dir()),
        hostname: sh(&["sysctl", "-n", "kernel.hostname"]),
    }
}

/// A link another owner holds in each namespace: `other0` (with `other1`)
/// in the node, `eth1` in the container, before the attack.
pub fn foreign_links(pod: &Pod) {
    pod.node.exec(&[
        "ip", "link", "add", "other0", "type", "veth", "peer", "other1",
    ]);
    pod.ctr
        .exec(&["ip", "link", "add", "eth1", "type", "veth", "peer", "eth2"]);
}

pub struct Attack<'a> {
    /// The plugin type (`fx-hostile`, `wasi-probe`, ...).
    pub plugin: &'a str,
    pub code: u64,
    /// Each must appear in the error message.
    pub cause: &'a [&'a str],
    pub deadline_ms: u64,
    /// Node sysctls to compare beyond [`NODE_KEYS`].
    pub node_keys: &'a [&'a str],
}

impl Attack<'_> {
    pub fn new<'a>(code: u64, cause: &'a [&'a str]) -> Attack<'a> {
        Attack {
            plugin: "fx-hostile",
            code,
            cause,
            deadline_ms: DEADLINE_MS,
            node_keys: &[],
        }
    }

    /// Warm the artifact cache (STATUS), record the world, run ADD of
    /// `conf` as attachment `id`, and check the outcome as the module docs
    /// say.
    pub fn run(&self, sb: &Sandbox, pod: &Pod, conf: &Value, inv: Invocation<'_>) -> Output {
        // The timed call measures the plugin, not Cranelift. (Compiling
        // comes before instantiating, so this warms the cache even for a
        // plugin that cannot be instantiated.)
        pod.run(Invocation::new("STATUS"), conf);
        let before = world_with(sb, pod, self.node_keys);
        let out = pod.run(inv, conf);
        assert_eq!(out.error_code(), self.code, "{out:?}");
        let msg = out.error_msg();
        assert!(msg.contains(self.plugin), "plugin not named: {msg}");
        for needle in self.cause {
            assert!(msg.contains(needle), "cause {needle:?} not named: {msg}");
        }
        eprintln!(
            "{} -> {} {msg:?} in {:?}",
            self.plugin, self.code, out.elapsed
        );
        let limit = Duration::from_millis(self.deadline_ms) + SLACK;
        assert!(out.elapsed <= limit, "took {:?} > {limit:?}", out.elapsed);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert_eq!(before, world_with(sb, pod, self.node_keys), "{msg}");
        out
    }
}

pub fn add(id: &str) -> Invocation<'_> {
    Invocation::new("ADD").id(id)
}

pub fn hostile_with(tag: &str, fixtures: &[&str]) -> Option<(Sandbox, Pod)> {
    let (sb, pod) = hostile(tag)?;
    for f in fixtures {
        sb.install(&fixture(f), f);
    }
    Some((sb, pod))
}

/// One `fx-net` chain entry: `ops` for ADD (strict), merged with `extra`.
pub fn fx_net(ops: Value, extra: Value) -> Value {
    let mut e = json!({"type": "fx-net", "strict": true, "ops": ops, "wasm": {"deadlineMs": 2000}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        e[k] = v.clone();
    }
    e
}

pub fn refused<'a>(plugin: &'a str, why: &'a [&'a str]) -> Attack<'a> {
    Attack {
        plugin,
        ..Attack::new(999, why)
    }
}

/// The node-side identity of `dev`: ifindex, kind and flags.
pub fn identity(pod: &Pod, dev: &str) -> Value {
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

pub fn sandbox_with(tag: &str, fixtures: &[&str], plugins: &[&str]) -> Option<(Sandbox, Pod)> {
    if !is_root(tag) {
        return None;
    }
    let sb = Sandbox::new(tag);
    for f in fixtures {
        sb.install(&fixture(f), f);
    }
    for p in plugins {
        sb.install(&plugin(p), p);
    }
    Some((sb, Pod::new(tag)))
}

/// The node's nftables rules (every table, not just wasm-cni's: the
/// skeleton of wasm-cni's own tables stays once made) and qdiscs, beyond
/// what `world` records.
pub fn filter_and_tc(ns: &Netns) -> String {
    let rules: String = ns
        .exec(&["nft", "list", "ruleset"])
        .lines()
        .filter(|l| l.contains("comment") || l.contains("masquerade") || l.contains("dnat"))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    rules + &ns.exec(&["tc", "qdisc", "show"])
}

#[derive(Debug, PartialEq)]
pub struct Everything {
    world: World,
    node_filter: String,
    ctr_filter: String,
}

pub fn everything(sb: &Sandbox, pod: &Pod, node_keys: &[&str]) -> Everything {
    Everything {
        world: world_with(sb, pod, node_keys),
        node_filter: filter_and_tc(&pod.node),
        ctr_filter: filter_and_tc(&pod.ctr),
    }
}

pub fn del(id: &str) -> Invocation<'_> {
    Invocation::new("DEL").id(id)
}
