//! Packet filtering end to end, in namespaces of the test's own: a "node"
//! with an "uplink" next to it (another host, with no route back to the
//! pods) and pods on the node's bridge. podman's default conflist — bridge
//! with ipMasq and hairpin, portmap, firewall, tuning — runs once through
//! the Debian reference plugins (iptables) and once through wasm-cni
//! (nftables, sandboxed); the reachability table must come out the same,
//! and after DEL nothing of it may work and no rule may remain.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{daemon_mode, is_root, plugin, Daemon, Invocation, Netns, Output, Sandbox};

const PROBE: &str = env!("CARGO_BIN_EXE_wasm-cni-probe");
const REFERENCE_DIR: &str = "/usr/lib/cni";

/// A probe server in a namespace, killed on drop.
struct Server(Child);

impl Server {
    fn start(ns: &Netns, port: u16) -> Server {
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, PROBE, "serve", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the probe server");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ask the server at `addr`:`port` from inside `ns` which source address it
/// saw; `None` if it cannot be reached. Tries until `patience` is spent
/// (IPv6 addresses are usable only once duplicate detection is over).
fn peer(ns: &Netns, addr: &str, port: u16, patience: Duration) -> Option<String> {
    let started = Instant::now();
    loop {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                PROBE,
                "peer",
                addr,
                &port.to_string(),
            ])
            .output()
            .expect("run the probe");
        if out.status.success() {
            return Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        if started.elapsed() >= patience {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The node, its uplink and one pod, numbered `k` so parallel tests do not
/// share addresses (they share nothing else either: all namespaces are
/// the test's).
struct Topo {
    node: Netns,
    uplink: Netns,
    pod: Netns,
    k: u8,
    bridge: String,
}

impl Topo {
    fn new(tag: &str, k: u8) -> Topo {
        let node = Netns::new(&format!("{tag}n"));
        let uplink = Netns::new(&format!("{tag}u"));
        let pod = Netns::new(&format!("{tag}p"));
        let up = format!("up{k}");
        node.exec(&[
            "ip",
            "link",
            "add",
            &up,
            "type",
            "veth",
            "peer",
            "name",
            "uplink0",
            "netns",
            &uplink.name,
        ]);
        node.exec(&[
            "ip",
            "addr",
            "add",
            &format!("192.168.{k}.1/24"),
            "dev",
            &up,
        ]);
        node.exec(&[
            "ip",
            "addr",
            "add",
            &format!("fd77:{k}::1/64"),
            "dev",
            &up,
            "nodad",
        ]);
        node.exec(&["ip", "link", "set", &up, "up"]);
        uplink.exec(&[
            "ip",
            "addr",
            "add",
            &format!("192.168.{k}.2/24"),
            "dev",
            "uplink0",
        ]);
        uplink.exec(&[
            "ip",
            "addr",
            "add",
            &format!("fd77:{k}::2/64"),
            "dev",
            "uplink0",
            "nodad",
        ]);
        uplink.exec(&["ip", "link", "set", "uplink0", "up"]);
        node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        Topo {
            node,
            uplink,
            pod,
            k,
            bridge: format!("cni{k}"),
        }
    }

    /// podman's default network, with this topology's names.
    fn chain(&self, data_dir: &str) -> Vec<Value> {
        let k = self.k;
        vec![
            json!({"type":"bridge","bridge":self.bridge,"isGateway":true,"ipMasq":true,
                   "hairpinMode":true,
                   "ipam":{"type":"host-local","dataDir":data_dir,
                           "routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}],
                           "ranges":[[{"subnet":format!("10.{k}.0.0/24"),"gateway":format!("10.{k}.0.1")}],
                                     [{"subnet":format!("fd88:{k}::/64"),"gateway":format!("fd88:{k}::1")}]]}}),
            json!({"type":"portmap","capabilities":{"portMappings":true}}),
            json!({"type":"firewall"}),
            json!({"type":"tuning"}),
        ]
    }

    fn port_mappings() -> Value {
        json!([{"hostPort":8080,"containerPort":80,"protocol":"tcp"}])
    }

    /// Every way the mapped port and the masquerade are reached, with what
    /// the far end saw as the source (`-` when unreachable).
    fn reachability(&self, patience: Duration) -> Vec<(String, String)> {
        let k = self.k;
        let gw4 = format!("10.{k}.0.1");
        let gw6 = format!("fd88:{k}::1");
        let node4 = format!("192.168.{k}.1");
        let node6 = format!("fd77:{k}::1");
        let up4 = format!("192.168.{k}.2");
        let up6 = format!("fd77:{k}::2");
        let rows: Vec<(&str, &Netns, &str, u16)> = vec![
            ("uplink -> node v4 hostPort", &self.uplink, &node4, 8080),
            ("uplink -> node v6 hostPort", &self.uplink, &node6, 8080),
            ("pod -> gateway hostPort (hairpin)", &self.pod, &gw4, 8080),
            (
                "pod -> gateway v6 hostPort (hairpin)",
                &self.pod,
                &gw6,
                8080,
            ),
            ("node -> 127.0.0.1 hostPort", &self.node, "127.0.0.1", 8080),
            ("node -> node address hostPort", &self.node, &node4, 8080),
            ("pod -> uplink v4 (masquerade)", &self.pod, &up4, 9000),
            ("pod -> uplink v6 (masquerade)", &self.pod, &up6, 9000),
        ];
        rows.into_iter()
            .map(|(what, from, addr, port)| {
                let seen = peer(from, addr, port, patience).unwrap_or_else(|| "-".into());
                // Name addresses by role, so both runs compare.
                let seen = seen
                    .replace(&up4, "UPLINK")
                    .replace(&up6, "UPLINK6")
                    .replace(&node4, "NODE")
                    .replace(&node6, "NODE6")
                    .replace(&gw4, "GATEWAY")
                    .replace(&gw6, "GATEWAY6")
                    .replace(&format!("10.{k}.0."), "POD.")
                    .replace(&format!("fd88:{k}::"), "POD6::");
                (what.to_string(), seen)
            })
            .collect()
    }
}

/// What both runs must see while the pod is attached.
fn expected() -> Vec<(String, String)> {
    [
        ("uplink -> node v4 hostPort", "UPLINK"),
        ("uplink -> node v6 hostPort", "UPLINK6"),
        ("pod -> gateway hostPort (hairpin)", "GATEWAY"),
        ("pod -> gateway v6 hostPort (hairpin)", "GATEWAY6"),
        ("node -> 127.0.0.1 hostPort", "GATEWAY"),
        ("node -> node address hostPort", "NODE"),
        ("pod -> uplink v4 (masquerade)", "NODE"),
        ("pod -> uplink v6 (masquerade)", "NODE6"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

fn run_reference(t: &Topo, command: &str, chain: &[Value], prev: Option<&Value>) -> Option<Value> {
    let order: Vec<&Value> = if command == "DEL" {
        chain.iter().rev().collect()
    } else {
        chain.iter().collect()
    };
    let mut prev = prev.cloned();
    let netns = t.pod.path();
    for entry in order {
        let mut c = entry.clone();
        c["name"] = json!("podman");
        c["cniVersion"] = json!("1.0.0");
        if c.get("capabilities").is_some() {
            c["runtimeConfig"] = json!({"portMappings": Topo::port_mappings()});
        }
        if let Some(p) = &prev {
            c["prevResult"] = p.clone();
        }
        let ty = c["type"].as_str().unwrap().to_string();
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &t.node.name,
            &format!("{REFERENCE_DIR}/{ty}"),
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", "ctr1")
        .env("CNI_NETNS", &netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", REFERENCE_DIR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(c.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "reference {command} {ty}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if command == "ADD" {
            prev = Some(serde_json::from_slice(&out.stdout).unwrap());
        }
    }
    prev
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new("filter");
    for p in ["bridge", "host-local", "portmap", "firewall", "tuning"] {
        sb.install(&plugin(p), p);
    }
    sb
}

/// The wasm-cni config: the conflist as one chain, the port mappings as
/// the runtime passes capability arguments.
fn wasm_conf(sb: &Sandbox, t: &Topo, daemon: Option<&Daemon>) -> Value {
    let mut c = sb.conf(
        "1.0.0",
        "podman",
        json!(t.chain(&sb.dir.join("ipam").to_string_lossy())),
    );
    c["capabilities"] = json!({"portMappings": true});
    c["runtimeConfig"] = json!({"portMappings": Topo::port_mappings()});
    if let Some(d) = daemon {
        c = d.conf(&c, "require");
    }
    c
}

fn wasm(t: &Topo, command: &str, conf: &Value, id: &str) -> Output {
    Invocation::new(command)
        .id(id)
        .netns(t.pod.path())
        .run_in(Some(&t.node.name), conf)
}

/// The rules of wasm-cni's tables as nft lists them (its tables stay, empty,
/// once made).
fn wasm_tables(ns: &Netns) -> String {
    let all = ns.exec(&["nft", "list", "ruleset"]);
    let mut out = String::new();
    let mut inside = false;
    for line in all.lines() {
        if line.starts_with("table ") {
            inside = line.contains("wasm_cni");
        }
        if inside && line.contains("comment \"wasm-cni ") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The node's own nftables table and an iptables-nft rule, as they list.
fn node_rules(ns: &Netns) -> String {
    ns.exec(&["nft", "list", "table", "ip", "mine"])
        + &ns
            .exec(&["iptables-save", "-t", "filter"])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
}

#[test]
fn reference_plugins_reachability() {
    if !is_root("reference_plugins_reachability") {
        return;
    }
    assert!(
        std::path::Path::new(REFERENCE_DIR)
            .join("portmap")
            .is_file(),
        "reference plugins missing: cargo xtask setup installs containernetworking-plugins"
    );
    let t = Topo::new("fr", 71);
    let dir = wasm_cni_tests::TempDir::new("refipam");
    let chain = t.chain(&dir.path().to_string_lossy());
    let _pod_server = Server::start(&t.pod, 80);
    let _up_server = Server::start(&t.uplink, 9000);
    let result = run_reference(&t, "ADD", &chain, None).unwrap();
    let table = t.reachability(Duration::from_secs(5));
    assert_eq!(table, expected(), "the reference plugins, attached");
    run_reference(&t, "DEL", &chain, Some(&result));
    let after = t.reachability(Duration::ZERO);
    assert!(after.iter().all(|(_, seen)| seen == "-"), "{after:#?}");
}

#[test]
fn wasm_cni_reachability_and_the_nodes_own_rules() {
    if !is_root("wasm_cni_reachability_and_the_nodes_own_rules") {
        return;
    }
    let t = Topo::new("fw", 72);
    let sb = sandbox();
    let daemon = daemon_mode().then(|| Daemon::start(&t.node.name, &[]));
    let conf = wasm_conf(&sb, &t, daemon.as_ref());
    // The node's own rules, before wasm-cni runs.
    t.node.exec(&[
        "nft",
        "add table ip mine; add chain ip mine input { type filter hook input priority 0; policy accept; }; add rule ip mine input tcp dport 22 counter accept comment \"node\"",
    ]);
    t.node.exec(&[
        "iptables", "-A", "INPUT", "-p", "tcp", "--dport", "2222", "-j", "ACCEPT",
    ]);
    let before = node_rules(&t.node);

    let _pod_server = Server::start(&t.pod, 80);
    let _up_server = Server::start(&t.uplink, 9000);
    let out = wasm(&t, "ADD", &conf, "ctr1");
    out.assert_ok();
    let table = t.reachability(Duration::from_secs(5));
    assert_eq!(table, expected(), "wasm-cni, attached");
    let rules = wasm_tables(&t.node);
    for want in [
        "dnat ip to 10.72.0.",
        "masquerade",
        "accept",
        "tcp dport 8080",
    ] {
        assert!(rules.contains(want), "{want:?} missing:\n{rules}");
    }
    assert_eq!(
        node_rules(&t.node),
        before,
        "ADD touched the node's own rules"
    );

    let mut check = conf.clone();
    check["prevResult"] = out.json();
    wasm(&t, "CHECK", &check, "ctr1").assert_ok();
    // CHECK notices a rule gone from under it.
    let handle = t
        .node
        .exec(&["nft", "-a", "list", "chain", "inet", "wasm_cni", "forward"])
        .lines()
        .filter(|l| l.contains("comment"))
        .find_map(|l| l.split("# handle ").nth(1).map(str::to_string))
        .unwrap();
    t.node.exec(&[
        "nft",
        "delete",
        "rule",
        "inet",
        "wasm_cni",
        "forward",
        "handle",
        handle.trim(),
    ]);
    let failed = wasm(&t, "CHECK", &check, "ctr1");
    assert!(failed.error_msg().contains("firewall"), "{failed:?}");
    assert_eq!(
        node_rules(&t.node),
        before,
        "CHECK touched the node's own rules"
    );

    // A late DEL for an older container of the same name removes nothing.
    let kept = wasm_tables(&t.node);
    wasm(&t, "DEL", &conf, "ctr0-old").assert_ok();
    assert_eq!(
        wasm_tables(&t.node),
        kept,
        "a DEL for another container removed rules"
    );

    wasm(&t, "DEL", &conf, "ctr1").assert_ok();
    assert_eq!(wasm_tables(&t.node), "", "rules left after DEL");
    let after = t.reachability(Duration::ZERO);
    assert!(after.iter().all(|(_, seen)| seen == "-"), "{after:#?}");
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    wasm(&t, "GC", &gc, "").assert_ok();
    assert_eq!(
        node_rules(&t.node),
        before,
        "DEL or GC touched the node's own rules"
    );
}
