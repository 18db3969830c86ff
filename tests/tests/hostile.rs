//! Hostile plugins. Each attack must end in a clean CNI error (the right
//! code, a message naming the plugin and the cause) within the configured
//! deadline plus a little slack, with the node and container namespaces
//! (links, addresses, routes, sysctls), the state directory and the host
//! process as they were: `wasm-cni` exits 1 with an error on stdout, never
//! by a signal or a panic.
//!
//! The plugins: `fx-hostile` (Rust, one attack per config) and `wasi-probe`
//! (hand-written WAT importing WASI sockets and filesystem, assembled here).
//! Digest pins and planted artifacts are at the end.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use wasm_cni_tests::hostile::{
    add, entry, files, foreign_links, hostile, world, Attack, DEADLINE_MS,
};
use wasm_cni_tests::{fixture, is_root, sh, workspace_root, Invocation, Output, Sandbox};

#[test]
fn runaway_cpu_ends_at_the_deadline() {
    let Some((sb, pod)) = hostile("hspin") else {
        return;
    };
    let conf = sb.conf(
        "1.1.0",
        "hspin",
        json!([entry("fx-hostile", "spin", json!({}))]),
    );
    let out = Attack::new(999, &["deadline of 2000 ms exceeded"]).run(&sb, &pod, &conf, add("c1"));
    // It ran until the deadline, not less.
    assert!(out.elapsed >= Duration::from_millis(DEADLINE_MS));
}

#[test]
fn unbounded_memory_growth_ends_at_the_cap() {
    let Some((sb, pod)) = hostile("hhog") else {
        return;
    };
    let conf = sb.conf(
        "1.1.0",
        "hhog",
        json!([entry(
            "fx-hostile",
            "hog",
            json!({"wasm": {"memoryBytes": 32 << 20}})
        )]),
    );
    Attack::new(999, &["memory limit of 33554432 bytes exceeded"]).run(&sb, &pod, &conf, add("c1"));
}

#[test]
fn deep_recursion_traps() {
    let Some((sb, pod)) = hostile("hrec") else {
        return;
    };
    // On the wasm stack the engine's limit stops it; with frames in linear
    // memory, Rust's shadow stack runs below address 0 first.
    for (attack, cause) in [
        ("recurse", "call stack exhausted"),
        ("recurse-frames", "out of bounds memory access"),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hrec",
            json!([entry("fx-hostile", attack, json!({}))]),
        );
        Attack::new(999, &["trapped", cause]).run(&sb, &pod, &conf, add("c1"));
    }
}

#[test]
fn traps_and_panics_are_clean_errors() {
    let Some((sb, pod)) = hostile("htrap") else {
        return;
    };
    for attack in ["trap", "panic"] {
        let conf = sb.conf(
            "1.1.0",
            "htrap",
            json!([entry("fx-hostile", attack, json!({}))]),
        );
        Attack::new(999, &["trapped", "unreachable"]).run(&sb, &pod, &conf, add("c1"));
    }
}

#[test]
fn a_100_mb_answer_is_refused_and_commits_nothing() {
    let Some((sb, pod)) = hostile("hbig") else {
        return;
    };
    // Under the default 64 MiB the plugin cannot even build it.
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "big-result", json!({}))]),
    );
    Attack::new(999, &["memory limit of 67108864 bytes exceeded"]).run(&sb, &pod, &conf, add("c1"));
    // With room to build it, the result limit refuses it, and the state the
    // plugin wrote first is not committed.
    let roomy = json!({"keys": ["10.7.0.2", "10.7.0.3"], "wasm": {"memoryBytes": 256 << 20}});
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "big-result", roomy.clone())]),
    );
    Attack::new(
        999,
        &["result of 10", "bytes exceeds maxResultBytes (1048576)"],
    )
    .run(&sb, &pod, &conf, add("c1"));
    // An error message is an answer too.
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "big-error", roomy)]),
    );
    Attack::new(
        999,
        &["error of 10", "bytes exceeds maxResultBytes (1048576)"],
    )
    .run(&sb, &pod, &conf, add("c1"));
    // What was refused for size was fine in itself: the plugin can commit.
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "none", json!({"keys": ["10.7.0.2"]}))]),
    );
    pod.run(add("c1"), &conf).assert_ok();
    let state = files(&sb.state_dir());
    assert!(
        state
            .keys()
            .any(|p| p.ends_with("store/hbig/fx-hostile.json")),
        "{:?}",
        state.keys()
    );
}

#[test]
fn a_host_call_flood_exhausts_the_budget() {
    let Some((sb, pod)) = hostile("hflood") else {
        return;
    };
    let conf = sb.conf(
        "1.1.0",
        "hflood",
        json!([entry("fx-hostile", "flood", json!({}))]),
    );
    Attack::new(999, &["host call budget of 10000 calls exhausted"]).run(
        &sb,
        &pod,
        &conf,
        add("c1"),
    );
    let conf = sb.conf(
        "1.1.0",
        "hflood",
        json!([entry(
            "fx-hostile",
            "flood",
            json!({"wasm": {"hostCallBudget": 100}})
        )]),
    );
    Attack::new(999, &["host call budget of 100 calls exhausted"]).run(&sb, &pod, &conf, add("c1"));
}

#[test]
fn links_that_are_not_the_attachments_cannot_be_deleted() {
    let Some((sb, pod)) = hostile("hdel") else {
        return;
    };
    foreign_links(&pod);
    // Another attachment, made the ordinary way: a veth `eth3` in the
    // container with `vvictim0` in the node, both recorded as its own.
    sb.install(&fixture("fx-net"), "fx-net");
    let victim = sb.conf(
        "1.1.0",
        "hdel",
        json!([{"type": "fx-net", "strict": true, "ops": [
            {"op": "create-veth", "name": "eth3", "peer": "vvictim0", "peer-ns": "node"}
        ]}]),
    );
    pod.run(Invocation::new("ADD").id("victim").ifname("eth3"), &victim)
        .assert_ok();
    for (ns, name, why) in [
        ("node", "lo", "may not delete \"lo\" in the node namespace"),
        (
            "node",
            "other0",
            "may not delete \"other0\" in the node namespace",
        ),
        (
            "node",
            "vvictim0",
            "may not delete \"vvictim0\" in the node namespace",
        ),
        (
            "container",
            "eth3",
            "may not delete \"eth3\" in the container namespace",
        ),
        (
            "container",
            "eth1",
            "may not delete \"eth1\" in the container namespace",
        ),
        (
            "container",
            "lo",
            "may not delete \"lo\" in the container namespace",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hdel",
            json!([entry(
                "fx-hostile",
                "delete",
                json!({"ns": ns, "link": name})
            )]),
        );
        let out = Attack::new(999, &["delete: refused", why]).run(&sb, &pod, &conf, add("thief"));
        // The host says so itself, whatever the plugin reports.
        assert!(
            out.stderr.contains("plugin fx-hostile: refused"),
            "{}",
            out.stderr
        );
    }
    pod.run(Invocation::new("DEL").id("victim").ifname("eth3"), &victim)
        .assert_ok();
}

#[test]
fn sysctls_outside_net_or_of_other_interfaces_are_refused() {
    let Some((sb, pod)) = hostile("hsys") else {
        return;
    };
    foreign_links(&pod);
    // Were the policy to fail, writing the current hostname back would still
    // change nothing outside the test.
    let hostname = sh(&["sysctl", "-n", "kernel.hostname"]).trim().to_string();
    for (ns, key, value, why) in [
        (
            "container",
            "kernel.hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "node",
            "kernel.hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "container",
            "net.ipv4.conf.eth0/../../../kernel/hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "node",
            "net.ipv4.conf.other0.forwarding",
            "1",
            "does not belong to this attachment",
        ),
        (
            "node",
            "net.ipv4.conf.all.rp_filter",
            "0",
            "would change every interface of the node",
        ),
        ("node", "net.core.somaxconn", "7", "is a node-wide setting"),
        (
            "container",
            "net.ipv4.conf.eth1.arp_notify",
            "1",
            "does not belong to this attachment",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hsys",
            json!([entry(
                "fx-hostile",
                "sysctl",
                json!({"ns": ns, "key": key, "value": value})
            )]),
        );
        Attack::new(999, &["sysctl: refused", why]).run(&sb, &pod, &conf, add("c1"));
    }
}

#[test]
fn no_namespace_but_the_attachments_is_reachable() {
    let Some((sb, pod)) = hostile("hns") else {
        return;
    };
    // The runtime (or a hostile config) names the node's own namespace as
    // the container's: the host refuses to hand it out as one.
    let conf = sb.conf(
        "1.1.0",
        "hns",
        json!([entry("fx-hostile", "container-netns", json!({}))]),
    );
    let inv = add("c1").netns(pod.node.path());
    let attack = Attack::new(
        999,
        &["container-netns: refused", "is the node's own namespace"],
    );
    pod.run(Invocation::new("STATUS"), &conf).assert_ok();
    let before = world(&sb, &pod);
    let out = inv.run_in(Some(&pod.node.name), &conf);
    assert_eq!(out.error_code(), attack.code, "{out:?}");
    for needle in attack.cause {
        assert!(out.error_msg().contains(needle), "{}", out.error_msg());
    }
    assert_eq!(before, world(&sb, &pod));
    // A plugin names a namespace by handle only, and handles come from
    // `container-netns` and `node-netns`; a forged one is below.
    let probe = WasiProbe::new(&sb);
    let conf = probe.conf(&sb, "hns", 2, false);
    Attack {
        plugin: "wasi-probe",
        ..Attack::new(999, &["trapped", "unknown handle index 5"])
    }
    .run(&sb, &pod, &conf, add("c1"));
}

#[test]
fn another_networks_or_plugins_state_is_out_of_reach() {
    let Some((sb, pod)) = hostile("hstate") else {
        return;
    };
    sb.install(&fixture("fx-hostile"), "fx-victim");
    let keys = json!(["10.5.0.2", "10.5.0.3"]);
    // The same keys held in two other scopes: this plugin on another
    // network, and another plugin on this network.
    for (network, plugin) in [("victimnet", "fx-hostile"), ("hstate", "fx-victim")] {
        let conf = sb.conf(
            "1.1.0",
            network,
            json!([entry(plugin, "none", json!({"keys": keys}))]),
        );
        pod.run(add("victim"), &conf).assert_ok();
    }
    assert_eq!(
        files(&sb.state_dir())
            .keys()
            .filter(|p| p.starts_with("store"))
            .count(),
        2
    );
    // The thief lists its scope (empty), tries to release the keys (GC
    // only), reserves them in its own scope, then traps: nothing commits.
    let conf = sb.conf(
        "1.1.0",
        "hstate",
        json!([entry("fx-hostile", "steal-state", json!({"keys": keys}))]),
    );
    Attack::new(999, &["trapped", "unreachable"]).run(&sb, &pod, &conf, add("thief"));
}

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

/// The hand-written WAT plugin, assembled per attack.
struct WasiProbe {
    dir: PathBuf,
}

impl WasiProbe {
    fn new(sb: &Sandbox) -> Self {
        let dir = sb.dir.join("probe");
        std::fs::create_dir_all(&dir).unwrap();
        WasiProbe { dir }
    }

    /// The component for attack `attack` (see probe.wat), with two extra
    /// memories of 37.5 MiB each if `extra_memories`.
    fn component(attack: u32, extra_memories: bool) -> Vec<u8> {
        let root = workspace_root();
        let probe = root.join("tests/wasi-probe");
        let text = std::fs::read_to_string(probe.join("probe.wat")).unwrap();
        let text = text
            .replace(
                "(global $attack i32 (i32.const 0)) ;; ATTACK",
                &format!("(global $attack i32 (i32.const {attack}))"),
            )
            .replace(
                ";; EXTRA-MEMORIES",
                if extra_memories {
                    "(memory $m1 600) (memory $m2 600)"
                } else {
                    ""
                },
            );
        let mut module = wat::parse_str(&text).unwrap();
        let mut resolve = wit_parser::Resolve::default();
        resolve.push_dir(root.join("wit")).unwrap();
        let (pkg, _) = resolve.push_dir(probe.join("wit")).unwrap();
        let world = resolve.select_world(&[pkg], Some("probe")).unwrap();
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
            false,
        )
        .unwrap();
        let mut encoder = wit_component::ComponentEncoder::default();
        encoder.module(&module).unwrap().validate(true);
        encoder.encode().unwrap()
    }

    /// Install the variant as plugin `wasi-probe` and return a config.
    fn conf(&self, sb: &Sandbox, network: &str, attack: u32, extra_memories: bool) -> Value {
        let path = self
            .dir
            .join(format!("probe-{attack}-{extra_memories}.wasm"));
        std::fs::write(&path, Self::component(attack, extra_memories)).unwrap();
        sb.install(&path, "wasi-probe");
        sb.conf(
            "1.1.0",
            network,
            json!([{"type": "wasi-probe", "wasm": {"deadlineMs": DEADLINE_MS}}]),
        )
    }
}

#[test]
fn wasi_sockets_and_files_are_denied() {
    let Some((sb, pod)) = hostile("hwasi") else {
        return;
    };
    let probe = WasiProbe::new(&sb);
    let attack = |code, cause| Attack {
        plugin: "wasi-probe",
        ..Attack::new(code, cause)
    };
    // Creating a TCP or UDP socket, or looking up a name, is refused before
    // any descriptor exists.
    let conf = probe.conf(&sb, "hwasi", 0, false);
    attack(
        5,
        &["sockets: tcp and udp access-denied, name lookup refused"],
    )
    .run(&sb, &pod, &conf, add("c1"));
    // No directory is preopened, so no path can be named; a forged
    // descriptor traps.
    let conf = probe.conf(&sb, "hwasi", 1, false);
    attack(999, &["trapped", "unknown handle index 7"]).run(&sb, &pod, &conf, add("c1"));
    // Memories are capped together: three of them, each under the cap.
    let conf = probe.conf(&sb, "hwasi", 0, true);
    attack(999, &["memory limit of 67108864 bytes exceeded"]).run(&sb, &pod, &conf, add("c1"));
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_pinned_digest_must_match() {
    let sb = Sandbox::new("pin");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    let actual = sha256(&sb.plugin_dir().join("fx-hostile.wasm"));
    let wrong = "ab".repeat(32);
    let pinned =
        |pin: &str| json!({"type": "fx-hostile", "attack": "none", "wasm": {"sha256": pin}});
    let out = Invocation::new("ADD").run(&sb.conf("1.1.0", "pin", json!([pinned(&wrong)])));
    assert_eq!(out.error_code(), 7, "{out:?}");
    let msg = out.error_msg();
    assert!(
        msg.contains("fx-hostile") && msg.contains("sha256 mismatch"),
        "{msg}"
    );
    assert!(msg.contains(&wrong) && msg.contains(&actual), "{msg}");
    // Nothing was loaded, so nothing was compiled into the cache.
    assert_eq!(std::fs::read_dir(sb.cache_dir()).unwrap().count(), 0);
    // Upper case is the same digest.
    let out = Invocation::new("ADD").run(&sb.conf(
        "1.1.0",
        "pin",
        json!([pinned(&actual.to_uppercase())]),
    ));
    out.assert_ok();
    // The IPAM delegate's pin is `ipam.wasm.sha256`.
    let conf = sb.conf(
        "1.1.0",
        "pin",
        json!([{"type": "fx-hostile", "attack": "none",
                "ipam": {"type": "fx-hostile", "wasm": {"sha256": wrong}}}]),
    );
    sb.install(&fixture("fx"), "fx");
    let mut conf = conf;
    conf["chain"][0]["type"] = json!("fx");
    conf["chain"][0]["callIpam"] = json!(true);
    let out = Invocation::new("ADD").id("ipam").run(&conf);
    assert_eq!(out.error_code(), 7, "{out:?}");
    let msg = out.error_msg();
    assert!(msg.contains(&wrong) && msg.contains(&actual), "{msg}");
}

/// `(compiled, loaded)` from the host's debug line.
fn cache_stats(out: &Output) -> (u64, u64) {
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("artifact cache:"))
        .unwrap_or_else(|| panic!("no cache accounting: {}", out.stderr));
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    (n[0], n[1])
}

#[test]
fn a_planted_artifact_is_never_loaded() {
    let sb = Sandbox::new("plant");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    sb.install(&fixture("fx-wasi"), "fx-wasi");
    let run = |plugin: &str| {
        let conf = sb.conf(
            "1.1.0",
            "plant",
            json!([{"type": plugin, "attack": "none"}]),
        );
        let out = Invocation::new("ADD")
            .env("WASM_CNI_LOG", "debug")
            .run(&conf);
        out.assert_ok();
        out
    };
    run("fx-hostile");
    run("fx-wasi");
    let digest = sha256(&sb.plugin_dir().join("fx-hostile.wasm"));
    let artifact_of = |digest: &str| {
        std::fs::read_dir(sb.cache_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with(digest) && name.ends_with(".cwasm")
            })
            .unwrap()
    };
    let mine = artifact_of(&digest);
    let theirs = artifact_of(&sha256(&sb.plugin_dir().join("fx-wasi.wasm")));
    let genuine = std::fs::read(&mine).unwrap();
    assert_eq!(cache_stats(&run("fx-hostile")), (0, 1));

    // Another component's artifact under this one's name: its trailer
    // records the other digest.
    std::fs::copy(&theirs, &mine).unwrap();
    let out = run("fx-hostile");
    assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
    assert!(
        out.stderr.contains("trailer does not record"),
        "{}",
        out.stderr
    );
    assert_eq!(out.json()["interfaces"][0]["name"], "calm");

    // Bytes anyone could have written (they would forge the trailer too):
    // group- or world-writable, or owned by another user.
    std::fs::write(&mine, &genuine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run("fx-hostile");
    assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
    assert!(
        out.stderr.contains("group- or world-writable"),
        "{}",
        out.stderr
    );
    if is_root("a_planted_artifact_is_never_loaded (foreign owner)") {
        std::fs::write(&mine, &genuine).unwrap();
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o644)).unwrap();
        sh(&["chown", "65534:65534", mine.to_str().unwrap()]);
        let out = run("fx-hostile");
        assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
        assert!(out.stderr.contains("owned by uid 65534"), "{}", out.stderr);
    }
    // Each refused artifact was replaced by one of our own.
    assert_eq!(cache_stats(&run("fx-hostile")), (0, 1));
}
