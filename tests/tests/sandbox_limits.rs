//! Sandbox limits: whatever a component does, its call ends as a clean CNI
//! error (the right code, a message naming the plugin and the cause) within
//! its deadline plus a little slack, and changes nothing: the node and
//! container namespaces (links with their ifindex, addresses, routes in
//! every table, sysctls), the state directory and the host process are as
//! they were, and `wasm-cni` exits 1, never by a signal or a panic.
//!
//! What the component controls, and what it must not gain: CPU, memory,
//! recursion and traps; the size of its answer; how many host calls it
//! makes (WASI ones included) and how long it waits (WASI sleeps, the store
//! lock); what it logs; how many namespace handles it opens; how much it
//! writes to the store (local and etcd); what WASI sockets and files it
//! asks for; and how long it runs under `plugin test`.
//!
//! The plugins: `fx-hostile` (Rust, one attack per config), `fx-net`, and
//! `wasi-probe` (hand-written WAT importing WASI sockets and filesystem,
//! assembled here).

mod wasi_probe;
use wasi_probe::WasiProbe;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::{
    add, entry, files, hostile, hostile_with, Attack, DEADLINE_MS, SLACK,
};
use wasm_cni_tests::{
    fixture, is_root, plugin_logs, Daemon, Invocation, Netns, Output, Sandbox, TempDir,
};

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
    // With room to build it, the host refuses to copy it past four times
    // maxResultBytes, and the state the plugin wrote first is not
    // committed.
    let roomy = json!({"keys": ["10.7.0.2", "10.7.0.3"], "wasm": {"memoryBytes": 256 << 20}});
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "big-result", roomy.clone())]),
    );
    let too_large = [
        "answer of more than 4194304 bytes",
        "exceeds maxResultBytes (1048576)",
    ];
    Attack::new(999, &too_large).run(&sb, &pod, &conf, add("c1"));
    // An error message is an answer too.
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry("fx-hostile", "big-error", roomy.clone())]),
    );
    Attack::new(999, &too_large).run(&sb, &pod, &conf, add("c1"));
    // Under the copying bound, the size is known and named.
    let conf = sb.conf(
        "1.1.0",
        "hbig",
        json!([entry(
            "fx-hostile",
            "big-result",
            json!({"count": 2, "wasm": {"memoryBytes": 256 << 20}})
        )]),
    );
    Attack::new(
        999,
        &["result of 20", "bytes exceeds maxResultBytes (1048576)"],
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

/// A daemon keeps its instances' slots between calls (`instance_pool`).
/// The attacker is a plugin that reads what the call before it on the slot
/// left in memory: its own component's earlier call, for another
/// attachment, another tenant, in the pages a slot keeps resident (reset in
/// place) and in those it gives back. It must find nothing; and a slot
/// holds memories under the same per-call cap as a fresh mapping.
#[test]
fn a_daemons_pooled_slot_keeps_nothing_of_the_last_call() {
    let Some((sb, pod)) = hostile("hpool") else {
        return;
    };
    let daemon = Daemon::start(&pod.node.name, &[]);
    let probe = WasiProbe::new(&sb);
    let attack = |code, cause| Attack {
        plugin: "wasi-probe",
        ..Attack::new(code, cause)
    };
    let conf = daemon.conf(&probe.conf(&sb, "hpool", 3, false), "require");
    for id in ["c1", "c2", "c3"] {
        attack(5, &["memory was fresh: no residue of an earlier call"]).run(
            &sb,
            &pod,
            &conf,
            add(id),
        );
    }
    let conf = daemon.conf(&probe.conf(&sb, "hpool", 0, true), "require");
    attack(999, &["memory limit of 67108864 bytes exceeded"]).run(&sb, &pod, &conf, add("c4"));
    // Served by this daemon (not in process): its log has the calls.
    let log = daemon.log();
    assert!(log.matches("wasi-probe").count() >= 4, "{log}");
}

#[test]
fn a_wasi_sleep_ends_at_the_deadline() {
    let Some((sb, pod)) = hostile_with("hsleep", &["fx-wasi"]) else {
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
    let Some((sb, pod)) = hostile_with("hclock", &["fx-wasi"]) else {
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
    let Some((sb, pod)) = hostile_with("hlock", &["fx-wasi"]) else {
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

#[test]
fn the_store_quota_counts_what_is_written() {
    let Some((sb, pod)) = hostile("hquota") else {
        return;
    };
    // 64 KiB values of control characters, which JSON writes six bytes
    // each: the quota must stop them at 32 MiB as written, not as passed.
    // The memory limit leaves room for the scope as the host holds it
    // (three bytes per byte stored), so that the quota is what stops them.
    let conf = sb.conf(
        "1.1.0",
        "hquota",
        json!([entry(
            "fx-hostile",
            "store-escapes",
            json!({"wasm": {"deadlineMs": 30_000, "memoryBytes": 256 << 20}})
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

#[test]
fn plugin_test_ends_at_its_bound_whatever_the_component_does() {
    if !is_root("plugin_test_ends_at_its_bound_whatever_the_component_does") {
        return;
    }
    // A component that spins into its deadline whenever a host call fails:
    // under --faults every injection point costs a whole deadline.
    let dir = TempDir::new("tb7");
    std::fs::copy(fixture("fx-net"), dir.join("fx-net.wasm")).unwrap();
    let reads: Vec<Value> = (0..40)
        .map(|_| json!({"op": "list-links", "ns": "node"}))
        .collect();
    let conf = dir.join("conf.json");
    std::fs::write(
        &conf,
        json!({"cniVersion": "1.1.0", "name": "tb7", "type": "fx-net",
               "ops": reads, "onFailure": "spin", "wasm": {"deadlineMs": 10_000}})
        .to_string(),
    )
    .unwrap();
    let started = Instant::now();
    let out = Command::new(wasm_cni_tests::wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(dir.join("fx-net.wasm"))
        .arg("--config")
        .arg(&conf)
        .args(["--faults", "--max-seconds", "4"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL time-bound"), "{text}");
    assert!(text.contains("--max-seconds"), "{text}");
    // 40 × 10 s without the bound; the bound plus one tick and the exit.
    assert!(took < Duration::from_secs(4) + SLACK, "{took:?}");
}

#[test]
fn a_large_scope_in_etcd_reads_back_and_an_oversized_write_is_no_retry() {
    if !is_root("a_large_scope_in_etcd_reads_back_and_an_oversized_write_is_no_retry") {
        return;
    }
    let etcd = wasm_cni_tests::Etcd::start();
    let node = Netns::new("tb9n");
    etcd.join(&node);
    let ctr = Netns::new("tb9c");
    let sb = Sandbox::new("tb9");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    let fill = |from: u64, count: u64| {
        let mut c = sb.conf(
            "1.1.0",
            "tbnet9",
            json!([{"type": "fx-hostile", "attack": "store-fill", "from": from,
                    "count": count, "wasm": {"deadlineMs": 10_000}}]),
        );
        c["store"] = etcd.store("tb9n", 5000);
        c
    };
    // Five calls of 20 values of 64 KiB (1.3 MB each, under etcd's 1.5 MiB
    // request limit): the scope grows past 5 MiB, beyond gRPC's default
    // reply size, and every call still reads it.
    for i in 0..5u64 {
        let id = format!("f{i}");
        let out = Invocation::new("ADD")
            .id(&id)
            .netns(ctr.path())
            .run_in(Some(&node.name), &fill(i * 20, 20));
        out.assert_ok();
    }
    // A single call writing 1.9 MB: etcd refuses the request for its size.
    // Trying again cannot help: not code 11, and the message says why.
    let out = Invocation::new("ADD")
        .id("big")
        .netns(ctr.path())
        .run_in(Some(&node.name), &fill(100, 30));
    let code = out.error_code();
    assert_ne!(code, 11, "{out:?}");
    assert!(
        out.error_msg().contains("request is too large"),
        "{}",
        out.error_msg()
    );
    // And the store still serves this scope.
    Invocation::new("ADD")
        .id("after")
        .netns(ctr.path())
        .run_in(Some(&node.name), &fill(0, 1))
        .assert_ok();
}

/// What a plugin controls here: the size of what it passes an import. What
/// it must not gain: host memory beyond what its call was admitted with. A
/// 62 MB log line was copied whole into the host before it was cut to 4
/// KiB, and a lookup of 1024 keys that all point at one 1 MiB buffer is a
/// gigabyte to a host that copies each: now the host copies at most its
/// transfer bound out of a plugin at once, and refuses the rest.
#[test]
fn what_the_host_copies_out_of_a_plugin_is_bounded() {
    let Some((sb, pod)) = hostile("hcopy") else {
        return;
    };
    for (attack, extra) in [
        ("big-log", json!({"wasm": {"memoryBytes": 200 << 20}})),
        ("alias-args", json!({})),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hcopy",
            json!([entry("fx-hostile", attack, extra)]),
        );
        Attack::new(999, &["an import's arguments of more than 4194304 bytes"]).run(
            &sb,
            &pod,
            &conf,
            add("c1"),
        );
    }
}

/// A memory cgroup of a test's own (v1's memory controller, or v2), with a
/// limit; removed when dropped, once its processes are gone.
struct MemoryCgroup {
    dir: std::path::PathBuf,
    v1: bool,
}

impl MemoryCgroup {
    fn new(tag: &str, limit: u64) -> MemoryCgroup {
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
        let root = if v1 {
            std::path::PathBuf::from("/sys/fs/cgroup/memory")
        } else {
            let root = std::path::PathBuf::from("/sys/fs/cgroup");
            let controllers =
                std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            // The machine kinds this runs on have one; a test of the limit
            // without it would test nothing.
            assert!(
                controllers.split_whitespace().any(|c| c == "memory"),
                "no memory cgroup controller (v1 or v2) on this machine"
            );
            root
        };
        let dir = root.join(wasm_cni_tests::unique(&format!("wasm-cni-test-{tag}-")));
        std::fs::create_dir(&dir).unwrap();
        let file = if v1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        std::fs::write(dir.join(file), limit.to_string()).unwrap();
        if !v1 {
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        MemoryCgroup { dir, v1 }
    }

    /// `sh` that moves itself into the cgroup, then runs the rest. It runs
    /// under `ip netns exec`, whose mount namespace has a /sys of its own
    /// without the cgroup mounts: it mounts the hierarchy there first, as a
    /// container runtime does for its containers (in that mount namespace
    /// only).
    fn wrapper(&self) -> Vec<String> {
        let name = self.dir.file_name().unwrap().to_string_lossy();
        let mount = if self.v1 {
            "mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/memory && \
             mount -t cgroup -o memory memory /sys/fs/cgroup/memory"
                .to_string()
        } else {
            "mount -t cgroup2 cgroup2 /sys/fs/cgroup".to_string()
        };
        let procs = if self.v1 {
            format!("/sys/fs/cgroup/memory/{name}/cgroup.procs")
        } else {
            format!("/sys/fs/cgroup/{name}/cgroup.procs")
        };
        vec![
            "sh".into(),
            "-c".into(),
            format!("{mount} && echo $$ > {procs} && exec \"$@\""),
            "sh".into(),
        ]
    }

    /// Processes of it the kernel's OOM killer killed.
    fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v1 {
            ("memory.oom_control", "oom_kill ")
        } else {
            ("memory.events", "oom_kill ")
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let procs = self.dir.join("cgroup.procs");
        for pid in std::fs::read_to_string(&procs).unwrap_or_default().lines() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        let started = Instant::now();
        while std::fs::remove_dir(&self.dir).is_err() && started.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What its peers control: how many requests they send at once, and
/// plugins that use all the memory they may (their linear memory, a log
/// line the host must copy). What they must not gain: the daemon killed by
/// its memory cgroup. Two concurrent ADDs of a plugin logging 62 MB once
/// got the daemon OOM-killed under its DaemonSet limit; now it admits a
/// request only when what its plugins may use fits beside those in flight,
/// under a real cgroup limit, and every request is answered.
#[test]
fn a_daemon_admits_only_what_fits_its_memory_limit() {
    let Some((sb, pod)) = hostile("hcgroup") else {
        return;
    };
    let cgroup = MemoryCgroup::new("hcgroup", 256 << 20);
    let wrapper = cgroup.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let daemon = Daemon::start_wrapped(&pod.node.name, &wrapper, &["--max-concurrent", "16"]);
    let started = Instant::now();
    while !daemon.log().contains("208 MiB for requests") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        daemon.log().contains("memory: limit 256 MiB"),
        "{}",
        daemon.log()
    );
    // At its limits: 52 MiB of its own 64, and a line the host copies just
    // under its bound; or a line far over it.
    let worst = daemon.conf(
        &sb.conf(
            "1.1.0",
            "hcgroup",
            json!([entry(
                "fx-hostile",
                "worst",
                json!({"count": 52, "logBytes": 4_000_000, "wasm": {"deadlineMs": 20_000}})
            )]),
        ),
        "require",
    );
    let flood = daemon.conf(
        &sb.conf(
            "1.1.0",
            "hcgroup",
            json!([entry(
                "fx-hostile",
                "big-log",
                json!({"count": 40, "wasm": {"deadlineMs": 20_000}})
            )]),
        ),
        "require",
    );
    let outs: Vec<(bool, Output)> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..8)
            .map(|i| {
                let (pod, worst, flood) = (&pod, &worst, &flood);
                s.spawn(move || {
                    let id = format!("m{i}");
                    let conf = if i % 4 == 3 { flood } else { worst };
                    (i % 4 != 3, pod.run(add(&id), conf))
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (worst, out) in &outs {
        if *worst {
            out.assert_ok();
            assert_eq!(out.json()["interfaces"][0]["name"], "worst:52", "{out:?}");
        } else {
            assert_eq!(out.error_code(), 999, "{out:?}");
            assert!(out.error_msg().contains("an import's arguments"), "{out:?}");
        }
    }
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the OOM killer ran: {}",
        daemon.log()
    );
    // A request that can never fit is told so at once.
    let huge = daemon.conf(
        &sb.conf(
            "1.1.0",
            "hcgroup",
            json!([entry(
                "fx-hostile",
                "none",
                json!({"wasm": {"memoryBytes": 400 << 20}})
            )]),
        ),
        "require",
    );
    let out = pod.run(add("m-huge"), &huge);
    assert_eq!(out.error_code(), 11, "{out:?}");
    assert!(
        out.error_msg()
            .contains("more than the 208 MiB it has for requests"),
        "{out:?}"
    );
    // Still the same daemon, serving.
    let calm = daemon.conf(
        &sb.conf(
            "1.1.0",
            "hcgroup",
            json!([entry("fx-hostile", "none", json!({}))]),
        ),
        "require",
    );
    pod.run(add("m-after"), &calm).assert_ok();
    drop(daemon);
    drop(cgroup);
}
