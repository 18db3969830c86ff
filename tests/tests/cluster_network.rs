//! Cluster networking across nodes, as a cluster would run it, simulated on
//! one machine: no kubelet or API server can be installed here.
//!
//! * Nodes are network namespaces: `n1`..`n3` on one LAN (a bridge in a
//!   namespace of its own), `n4` behind a router namespace on another
//!   subnet, every node dual-stack. So mode `auto` routes n1..n3 to each
//!   other directly and reaches n4 (and n4 them) through VXLAN.
//! * The API server is a stand-in (`tests/fixtures/kube-nodes.py`) serving
//!   the Node list and watch over HTTPS from the router namespace, which the
//!   test drives: Nodes added, changed and deleted, the history expired
//!   (410), the server stalled, and gone.
//! * Each node runs its own `wasm-cni daemon --cluster-node`, and one pod
//!   made by wasm-cni's bridge and host-local through the CNI protocol.
//!   n1 and n4 also run containerd 1.6, driven through its CRI as the
//!   kubelet drives it (`host/cri`): their pods, host ports included, come
//!   the runtime's way, from a conflist naming wasm-cni.
//! * The conformance checks' netserver (`tests/fixtures/netserver.py`)
//!   runs in every pod and outside the cluster (the router), answering
//!   HTTP and UDP with its name and the address it was reached from.
//!
//! The cluster is built once; its checks are the phases of one test.
//! Attacker here: whoever can write a Node object. They must not get a
//! route, device or entry onto any node beyond what their own Node's pod
//! CIDR justifies, nor take one away from another Node.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_cri::proto::PortMapping;
use wasm_cni_cri::{pause_image, Containerd};
use wasm_cni_tests::{
    is_root, plugin, sh, tls_certs, tls_certs_for, wasm_cni_bin, workspace_root, Daemon,
    Invocation, Netns, TempDir,
};

const TOKEN: &str = "cluster-token-1";

/// The stand-in API server, driven through its control socket.
struct Api {
    child: std::process::Child,
    dir: TempDir,
}

impl Api {
    fn start(rt: &Netns) -> Api {
        let dir = TempDir::new("kube-nodes");
        tls_certs_for(dir.path(), &["192.168.77.254", "192.168.78.254"]);
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &rt.name, "python3"])
            .arg(workspace_root().join("tests/fixtures/kube-nodes.py"))
            .args(["0.0.0.0", "6443"])
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .arg(TOKEN)
            .arg(dir.join("control.sock"))
            .stdout(std::fs::File::create(dir.join("requests.log")).unwrap())
            .stderr(std::fs::File::create(dir.join("server.err")).unwrap())
            .spawn()
            .expect("python3");
        let api = Api { child, dir };
        wait_for("the API server", Duration::from_secs(10), || {
            std::fs::read_to_string(api.dir.join("requests.log"))
                .unwrap_or_default()
                .contains("listening")
        });
        api
    }

    fn send(&self, cmd: Value) {
        let mut s = UnixStream::connect(self.dir.join("control.sock")).expect("control socket");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        writeln!(s, "{cmd}").unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ok", "{cmd}");
    }

    fn put(&self, node: Value) {
        self.send(json!({ "put": node }));
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Node object as the API server holds it.
fn node_object(name: &str, cidrs: &[&str], ips: &[&str], created: &str) -> Value {
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"podCIDR": cidrs.first(), "podCIDRs": cidrs},
        "status": {"addresses": ips.iter().map(|a| json!({"type": "InternalIP", "address": a}))
            .chain([json!({"type": "Hostname", "address": name})]).collect::<Vec<_>>()},
    })
}

/// A Node without a namespace of its own, on the LAN, made after the
/// others.
fn n5(cidr: &str) -> Value {
    node_object("n5", &[cidr], &["192.168.77.5"], "2026-12-07T11:00:00Z")
}

/// A pod that containerd made through its CRI.
struct CriPod {
    name: String,
    /// Its pause process, whose network namespace is the pod's.
    pid: u32,
    v4: String,
    v6: String,
}

struct Node {
    name: String,
    /// Before `ns`: containerd removes its pods before the node goes.
    ctd: Option<Containerd>,
    ctd_dir: Option<TempDir>,
    cri_pods: Vec<CriPod>,
    ns: Netns,
    v4: String,
    v6: String,
    cidr4: String,
    cidr6: String,
    dir: TempDir,
    daemon: Option<Daemon>,
    pod: Option<Netns>,
    /// The pod's addresses.
    pod4: String,
    pod6: String,
}

impl Node {
    fn object(&self) -> Value {
        node_object(
            &self.name,
            &[&self.cidr4, &self.cidr6],
            &[&self.v4, &self.v6],
            "2026-12-07T09:00:00Z",
        )
    }

    fn status(&self) -> Value {
        std::fs::read(self.dir.join("cluster.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null)
    }

    fn start_daemon(&mut self, api_ip: &str) {
        let status = self.dir.join("cluster.json");
        let server = format!("https://{api_ip}:6443");
        let token = self.dir.join("token");
        let ca = self.dir.join("ca.pem");
        self.daemon = Some(Daemon::start(
            &self.ns.name,
            &[
                "--cluster-node",
                &self.name,
                "--api-server",
                &server,
                "--api-token-file",
                token.to_str().unwrap(),
                "--api-ca-file",
                ca.to_str().unwrap(),
                "--cluster-status",
                status.to_str().unwrap(),
                "--cluster-resync-ms",
                "1000",
                "--api-max-backoff-ms",
                "1000",
                "--api-watch-seconds",
                "20",
                "--metrics",
                &format!("unix:{}", self.dir.join("metrics.sock").display()),
            ],
        ));
    }

    /// What cluster mode owns or could touch on the node, as text: links,
    /// addresses, routes of every table, the tunnels' entries, nf_tables.
    fn snapshot(&self) -> String {
        let mut out = self.ns.snapshot();
        out += &self.ns.exec(&["ip", "neigh", "show", "nud", "permanent"]);
        // Rules without their counters.
        out += &self.ns.exec(&["nft", "-s", "list", "ruleset"]);
        for dev in ["wcni-vx4", "wcni-vx6"] {
            if self.ns.link(dev).is_some() {
                out += &self.ns.exec(&["bridge", "fdb", "show", "dev", dev]);
            }
        }
        out
    }

    /// This node's routes of cluster mode.
    fn routes(&self) -> String {
        self.ns.exec(&["ip", "route", "show", "proto", "157"])
            + &self.ns.exec(&["ip", "-6", "route", "show", "proto", "157"])
    }
}

/// Processes killed on drop: the netservers.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where a check runs from: a pod or a node, and its addresses.
struct Endpoint {
    name: String,
    node: usize,
    /// The command prefix that runs a program in its network namespace.
    enter: Vec<String>,
    v4: String,
    v6: String,
}

const NETSERVER_PORT: u16 = 8080;
const HOST_PORT: u16 = 54323;

/// The cluster: LAN, router, four nodes with a pod each, the API server.
struct Cluster {
    servers: Procs,
    nodes: Vec<Node>,
    api: Api,
    rt: Netns,
    _lan: Netns,
    plugins: TempDir,
}

fn build() -> Cluster {
    let lan = Netns::new("lan");
    lan.exec(&["ip", "link", "add", "br0", "type", "bridge"]);
    lan.exec(&["ip", "link", "set", "br0", "up"]);
    let rt = Netns::new("rt");
    for k in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        rt.exec(&["sysctl", "-qw", k]);
    }
    // The router's leg on the LAN.
    sh(&[
        "ip", "link", "add", "rtlan", "netns", &rt.name, "type", "veth", "peer", "name", "rtp",
        "netns", &lan.name,
    ]);
    lan.exec(&["ip", "link", "set", "rtp", "master", "br0", "up"]);
    for cmd in [
        "ip addr add 192.168.77.254/24 dev rtlan",
        "ip addr add fd77::fe/64 dev rtlan nodad",
        "ip link set rtlan up",
    ] {
        rt.exec(&cmd.split(' ').collect::<Vec<_>>());
    }
    let plugins = TempDir::new("cluster-plugins");
    for p in ["bridge", "host-local", "portmap"] {
        std::fs::copy(plugin(p), plugins.join(format!("{p}.wasm"))).unwrap();
    }
    let api = Api::start(&rt);
    let mut nodes = Vec::new();
    for i in 1..=4u8 {
        let ns = Netns::new(&format!("n{i}"));
        let (v4, v6, gw4, gw6) = if i < 4 {
            sh(&[
                "ip",
                "link",
                "add",
                "eth0",
                "netns",
                &ns.name,
                "type",
                "veth",
                "peer",
                "name",
                &format!("lan{i}"),
                "netns",
                &lan.name,
            ]);
            lan.exec(&[
                "ip",
                "link",
                "set",
                &format!("lan{i}"),
                "master",
                "br0",
                "up",
            ]);
            (
                format!("192.168.77.{i}"),
                format!("fd77::{i}"),
                "192.168.77.254",
                "fd77::fe",
            )
        } else {
            sh(&[
                "ip", "link", "add", "eth0", "netns", &ns.name, "type", "veth", "peer", "name",
                "rtwan", "netns", &rt.name,
            ]);
            for cmd in [
                "ip addr add 192.168.78.254/24 dev rtwan",
                "ip addr add fd78::fe/64 dev rtwan nodad",
                "ip link set rtwan up",
            ] {
                rt.exec(&cmd.split(' ').collect::<Vec<_>>());
            }
            (
                "192.168.78.4".to_string(),
                "fd78::4".to_string(),
                "192.168.78.254",
                "fd78::fe",
            )
        };
        for cmd in [
            format!("ip addr add {v4}/24 dev eth0"),
            format!("ip addr add {v6}/64 dev eth0 nodad"),
            "ip link set eth0 up".to_string(),
            format!("ip route add default via {gw4}"),
            format!("ip -6 route add default via {gw6}"),
            "sysctl -qw net.ipv4.ip_forward=1".to_string(),
            "sysctl -qw net.ipv6.conf.all.forwarding=1".to_string(),
        ] {
            ns.exec(&cmd.split(' ').collect::<Vec<_>>());
        }
        let dir = TempDir::new(&format!("n{i}"));
        for f in ["token", "ca.pem"] {
            std::fs::copy(api.dir.join(f), dir.join(f)).unwrap();
        }
        nodes.push(Node {
            name: format!("n{i}"),
            ctd: None,
            ctd_dir: None,
            cri_pods: Vec::new(),
            ns,
            v4,
            v6,
            cidr4: format!("10.244.{i}.0/24"),
            cidr6: format!("fd00:10:244:{i}::/64"),
            dir,
            daemon: None,
            pod: None,
            pod4: String::new(),
            pod6: String::new(),
        });
    }
    Cluster {
        servers: Procs(Vec::new()),
        nodes,
        api,
        rt,
        _lan: lan,
        plugins,
    }
}

impl Cluster {
    /// One pod on each node, made by wasm-cni's bridge and host-local;
    /// on n1 and n4 containerd's too: a pod, and on n1 three more with the
    /// same host port on different host IPs and protocols (the conformance
    /// HostPort test).
    fn pods(&mut self) {
        for n in &mut self.nodes {
            let pod = Netns::new(&format!("{}p", n.name));
            let conf = podnet(self.plugins.path(), n, "1.1.0");
            let out = Invocation::new("ADD")
                .id("pod1")
                .netns(pod.path())
                .run_in(Some(&n.ns.name), &conf);
            out.assert_ok();
            let ips = out.json()["ips"].as_array().cloned().unwrap_or_default();
            let addr = |v6: bool| {
                ips.iter()
                    .filter_map(|ip| ip["address"].as_str())
                    .find(|a| a.contains(':') == v6)
                    .and_then(|a| a.split('/').next())
                    .unwrap()
                    .to_string()
            };
            n.pod4 = addr(false);
            n.pod6 = addr(true);
            n.pod = Some(pod);
        }
        let pause_dir = TempDir::new("cluster-pause");
        let pause = pause_image(pause_dir.path()).unwrap_or_else(|e| panic!("{e}"));
        for i in [0, 3] {
            let n = &mut self.nodes[i];
            let dir = TempDir::new(&format!("{}-containerd", n.name));
            let (bin, confs) = (dir.join("bin"), dir.join("net.d"));
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::create_dir_all(&confs).unwrap();
            std::os::unix::fs::symlink(wasm_cni_bin(), bin.join("wasm-cni")).unwrap();
            // containerd runs `loopback` itself for every pod.
            std::fs::copy("/usr/lib/cni/loopback", bin.join("loopback")).unwrap();
            let mut entry = podnet(self.plugins.path(), n, "1.0.0");
            entry["capabilities"] = json!({"portMappings": true});
            entry["chain"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
            let conflist = json!({
                "cniVersion": "1.0.0",
                "name": "podnet",
                "plugins": [entry],
            });
            std::fs::write(confs.join("10-podnet.conflist"), conflist.to_string()).unwrap();
            let ctd = Containerd::start(&n.ns.name, &dir.join("c"), &bin, &confs, &pause)
                .unwrap_or_else(|e| panic!("{}: {e}", n.name));
            let cri = ctd.cri().unwrap();
            let port = |protocol: i32, host_ip: &str| PortMapping {
                protocol,
                container_port: i32::from(NETSERVER_PORT),
                host_port: i32::from(HOST_PORT),
                host_ip: host_ip.into(),
            };
            let mut wanted = vec![("web", Vec::new())];
            if i == 0 {
                wanted.extend([
                    ("hp-lo", vec![port(0, "127.0.0.1")]),
                    ("hp-ip", vec![port(0, &n.v4)]),
                    ("hp-udp", vec![port(1, &n.v4)]),
                ]);
            }
            for (what, ports) in wanted {
                let name = format!("{}-{what}", n.name);
                let id = cri
                    .run_pod_ports(&name, ports)
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{}", ctd.log()));
                let ips = cri.pod_ips(&id).unwrap();
                let family = |v6: bool| {
                    ips.iter()
                        .find(|a| a.contains(':') == v6)
                        .unwrap_or_else(|| panic!("{name}: {ips:?}"))
                        .clone()
                };
                n.cri_pods.push(CriPod {
                    v4: family(false),
                    v6: family(true),
                    pid: cri.pod_pid(&id).unwrap(),
                    name,
                });
            }
            n.ctd = Some(ctd);
            n.ctd_dir = Some(dir);
        }
    }

    /// Every pod, and where to run a program in it.
    fn all_pods(&self) -> Vec<Endpoint> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            out.push(Endpoint {
                name: format!("{}-pod", n.name),
                node: i,
                enter: netns_enter(&n.pod.as_ref().unwrap().name),
                v4: n.pod4.clone(),
                v6: n.pod6.clone(),
            });
            for p in &n.cri_pods {
                out.push(Endpoint {
                    name: p.name.clone(),
                    node: i,
                    enter: cri_enter(p),
                    v4: p.v4.clone(),
                    v6: p.v6.clone(),
                });
            }
        }
        out
    }

    /// Every pod but the host-port ones: what the conformance checks dial.
    fn endpoints(&self) -> Vec<Endpoint> {
        let mut out = self.all_pods();
        out.retain(|p| !p.name.contains("-hp-"));
        out
    }

    /// A netserver in every pod and one outside the cluster, on the router.
    fn netservers(&mut self) {
        let mut at: Vec<(String, Vec<String>)> = self
            .all_pods()
            .into_iter()
            .map(|p| (p.name, p.enter))
            .collect();
        at.push(("outside".into(), netns_enter(&self.rt.name)));
        for (name, enter) in at {
            let mut child = Command::new(&enter[0])
                .args(&enter[1..])
                .arg("python3")
                .arg(workspace_root().join("tests/fixtures/netserver.py"))
                .args(["serve", &name, &NETSERVER_PORT.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let mut line = String::new();
            let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
            self.servers.0.push(child);
            assert_eq!(line.trim(), "serving", "the netserver in {name}");
        }
    }

    /// The Nodes on the API server, and each node's daemon in cluster mode.
    fn daemons(&mut self) {
        for n in &self.nodes {
            self.api.put(n.object());
        }
        for n in &mut self.nodes {
            let api_ip = if n.name == "n4" {
                "192.168.78.254"
            } else {
                "192.168.77.254"
            };
            n.start_daemon(api_ip);
        }
    }

    /// Every node's status lists `n` Nodes and routes to every other pod
    /// CIDR in the plan.
    fn converged(&self, nodes: usize, routes_each: usize) -> bool {
        self.nodes.iter().all(|n| {
            let s = n.status();
            s["nodes"].as_u64() == Some(nodes as u64)
                && s["routes"].as_array().map(Vec::len) == Some(routes_each)
                && n.routes().lines().count() == routes_each
        })
    }

    fn wait_converged(&self, nodes: usize, routes_each: usize) {
        let started = Instant::now();
        while !self.converged(nodes, routes_each) {
            if started.elapsed() > Duration::from_secs(30) {
                let mut why = String::new();
                for n in &self.nodes {
                    why += &format!(
                        "{}: {}\n{}\n{}\n",
                        n.name,
                        n.status(),
                        n.routes(),
                        n.daemon.as_ref().map(Daemon::log).unwrap_or_default()
                    );
                }
                panic!("not converged on {nodes} Nodes, {routes_each} routes each:\n{why}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every pod reaches every other pod, both families, and every node
    /// every other node's pod.
    fn all_pairs_reach(&self) {
        let mut failed = Vec::new();
        for a in &self.nodes {
            for b in &self.nodes {
                if a.name == b.name {
                    continue;
                }
                let pod = a.pod.as_ref().unwrap();
                for (dst, what) in [(&b.pod4, "v4"), (&b.pod6, "v6")] {
                    if !reach(pod, dst) {
                        failed.push(format!("pod {} -> pod {} {what} ({dst})", a.name, b.name));
                    }
                    if !reach(&a.ns, dst) {
                        failed.push(format!("node {} -> pod {} {what} ({dst})", a.name, b.name));
                    }
                }
            }
        }
        assert!(failed.is_empty(), "unreachable:\n{}", failed.join("\n"));
    }

    fn snapshots(&self) -> Vec<String> {
        self.nodes.iter().map(Node::snapshot).collect()
    }
}

/// The wasm-cni network every pod of a node is on (containerd's conflist
/// adds portmap).
fn podnet(plugins: &std::path::Path, n: &Node, version: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": "podnet",
        "type": "wasm-cni",
        "pluginDir": plugins,
        "stateDir": n.dir.join("state"),
        "cacheDir": n.dir.join("cache"),
        "chain": [{
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": n.cidr4}], [{"subnet": n.cidr6}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            },
        }],
    })
}

/// The command prefix that runs a program in network namespace `name`.
fn netns_enter(name: &str) -> Vec<String> {
    ["ip", "netns", "exec", name].map(String::from).to_vec()
}

fn cri_enter(p: &CriPod) -> Vec<String> {
    ["nsenter", "-t", &p.pid.to_string(), "-n"]
        .map(String::from)
        .to_vec()
}

/// The netserver's answers from `enter`'s namespace, target by target
/// (`proto,host,port`): its name and the address it saw, or an error.
fn dial(enter: &[String], targets: &[String]) -> Vec<(String, String)> {
    let out = Command::new(&enter[0])
        .args(&enter[1..])
        .arg("python3")
        .arg(workspace_root().join("tests/fixtures/netserver.py"))
        .arg("dial")
        .args(targets)
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(t, a)| (t.to_string(), a.to_string()))
        .collect()
}

/// Dial every `(target, answer wanted)` from `from`; what did not answer
/// so, as lines for the failure message.
fn expect_answers(from: &str, enter: &[String], want: &[(String, String)]) -> Vec<String> {
    let targets: Vec<String> = want.iter().map(|(t, _)| t.clone()).collect();
    let got = dial(enter, &targets);
    want.iter()
        .filter_map(|(t, w)| {
            let answer = got.iter().find(|(g, _)| g == t).map(|(_, a)| a.as_str());
            let ok = answer.is_some_and(|a| a == w || (w.ends_with(' ') && a.starts_with(w)));
            (!ok).then(|| format!("{from} -> {t}: wanted {w:?}, got {answer:?}"))
        })
        .collect()
}

/// Each node's snapshot as it was, or the lines that differ.
fn same(now: &[String], then: &[String], what: &str) {
    let mut diff = String::new();
    for (i, (a, b)) in now.iter().zip(then).enumerate() {
        for l in a.lines().filter(|l| !b.lines().any(|m| m == *l)) {
            diff += &format!("n{} + {l}\n", i + 1);
        }
        for l in b.lines().filter(|l| !a.lines().any(|m| m == *l)) {
            diff += &format!("n{} - {l}\n", i + 1);
        }
    }
    assert!(diff.is_empty(), "{what}:\n{diff}");
}

/// `wasm-cni status` on the node, as an operator reads it.
fn status_text(n: &Node) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &n.ns.name])
        .arg(wasm_cni_bin())
        .args(["status", "--conf-dir"])
        .arg(n.dir.path())
        .arg("--cluster-status")
        .arg(n.dir.join("cluster.json"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How many packets `ns` received from `src` so far (a counter of the
/// test's own in that namespace, made on first use).
fn received_from(ns: &Netns, src: &str) -> u64 {
    let family = if src.contains(':') { "ip6" } else { "ip" };
    let _ = ns.try_exec(&["nft", "add", "table", "inet", "probe"]);
    let _ = ns.try_exec(&[
        "nft",
        "add",
        "chain",
        "inet",
        "probe",
        "in",
        "{ type filter hook input priority 0 ; }",
    ]);
    let listed = ns.exec(&["nft", "list", "chain", "inet", "probe", "in"]);
    let rule = format!("{family} saddr {src} counter packets ");
    let Some(at) = listed.find(&rule) else {
        ns.exec(&[
            "nft", "add", "rule", "inet", "probe", "in", family, "saddr", src, "counter",
        ]);
        return 0;
    };
    listed[at + rule.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A ping that may need a moment for IPv6 neighbours and DAD to settle.
fn reach(from: &Netns, dst: &str) -> bool {
    for _ in 0..10 {
        if from.try_exec(&["ping", "-c", "1", "-W", "1", dst]) {
            return true;
        }
    }
    false
}

#[test]
fn pods_on_different_nodes_reach_each_other_and_hostile_nodes_change_nothing() {
    if !is_root("pods_on_different_nodes_reach_each_other") {
        return;
    }
    let mut c = build();
    c.pods();
    c.netservers();
    // The pods' IPv6 addresses past DAD, so the snapshot is a settled one.
    wait_for("DAD on the nodes", Duration::from_secs(10), || {
        c.nodes
            .iter()
            .all(|n| !n.ns.exec(&["ip", "-6", "addr"]).contains("tentative"))
    });
    let pristine = c.snapshots();
    c.daemons();

    // Phase 1: auto mode, direct on the LAN, VXLAN to and from n4.
    c.wait_converged(4, 6);
    let shown = status_text(&c.nodes[0]);
    assert!(
        shown.contains("CLUSTER node n1  mode auto  4 Nodes"),
        "{shown}"
    );
    assert!(
        shown.contains("tunnel wcni-vx4  vni 1  port 4789  local 192.168.77.1  mtu 1450"),
        "{shown}"
    );
    let n1 = c.nodes[0].routes();
    assert!(
        n1.contains("10.244.2.0/24 via 192.168.77.2 dev eth0"),
        "{n1}"
    );
    assert!(
        n1.contains("10.244.4.0/24 via 10.244.4.0 dev wcni-vx4 onlink"),
        "{n1}"
    );
    assert!(
        n1.lines().any(
            |l| l.starts_with("fd00:10:244:4::/64 via fd00:10:244:4:: dev wcni-vx6")
                && l.contains(" onlink")
        ),
        "{n1}"
    );
    let n4 = c.nodes[3].routes();
    assert!(!n4.contains("dev eth0"), "{n4}");
    c.all_pairs_reach();
    let mtu = c.nodes[0].ns.link("wcni-vx4").unwrap()["mtu"].as_u64();
    assert_eq!(mtu, Some(1450));
    // Without NAT between pods, with it on the way out: n2's pod sees n1's
    // pod address and n4's (over the tunnel); the router, outside the
    // cluster, sees n1's node address.
    let (n1, n2, n4) = (&c.nodes[0], &c.nodes[1], &c.nodes[3]);
    let n2pod = n2.pod.as_ref().unwrap();
    assert_eq!(received_from(&c.rt, &n1.pod4), 0);
    for (from, dst, seen, at) in [
        (n1.pod.as_ref().unwrap(), &n2.pod4, &n1.pod4, n2pod),
        (n4.pod.as_ref().unwrap(), &n2.pod4, &n4.pod4, n2pod),
        (n1.pod.as_ref().unwrap(), &n2.pod6, &n1.pod6, n2pod),
        (
            n1.pod.as_ref().unwrap(),
            &"192.168.77.254".to_string(),
            &n1.v4,
            &c.rt,
        ),
        (
            n1.pod.as_ref().unwrap(),
            &"fd77::fe".to_string(),
            &n1.v6,
            &c.rt,
        ),
        (
            n4.pod.as_ref().unwrap(),
            &"192.168.78.254".to_string(),
            &n4.v4,
            &c.rt,
        ),
    ] {
        let before = received_from(at, seen);
        assert!(reach(from, dst), "{dst}");
        assert!(received_from(at, seen) > before, "{dst} did not see {seen}");
    }
    assert_eq!(
        received_from(&c.rt, &n1.pod4),
        0,
        "a pod's address left the cluster"
    );

    // Phase 1b: the conformance checks (Networking Granular Checks, and
    // HostPort), between every pair of nodes both ways, both families.
    // Pod to pod, HTTP and UDP: the receiver sees the sender's pod
    // address; pod to outside: the node's. A node to every other node's
    // pods. Pods of containerd and of the CNI protocol alike.
    let eps = c.endpoints();
    let mut failed = Vec::new();
    let each = |addr: &str, want: String| {
        let host = addr.to_string();
        ["tcp", "udp"].map(move |p| (format!("{p},{host},{NETSERVER_PORT}"), want.clone()))
    };
    for src in &eps {
        let node = &c.nodes[src.node];
        let mut want = Vec::new();
        for dst in eps.iter().filter(|d| d.node != src.node) {
            want.extend(each(&dst.v4, format!("{} {}", dst.name, src.v4)));
            want.extend(each(&dst.v6, format!("{} {}", dst.name, src.v6)));
        }
        want.extend(each("192.168.77.254", format!("outside {}", node.v4)));
        want.extend(each("fd77::fe", format!("outside {}", node.v6)));
        failed.extend(expect_answers(&src.name, &src.enter, &want));
    }
    for (i, n) in c.nodes.iter().enumerate() {
        let mut want = Vec::new();
        for dst in eps.iter().filter(|d| d.node != i) {
            want.extend(each(&dst.v4, format!("{} ", dst.name)));
            want.extend(each(&dst.v6, format!("{} ", dst.name)));
        }
        failed.extend(expect_answers(&n.name, &netns_enter(&n.ns.name), &want));
    }
    // HostPort 54323 three times on n1: on 127.0.0.1 over TCP, on its
    // address over TCP and over UDP, each reaching its own pod; from
    // another node only the last two, and n1's loopback one never.
    let hp = |proto: &str, ip: &str, pod: &str| {
        (format!("{proto},{ip},{HOST_PORT}"), format!("n1-{pod} "))
    };
    let n1v4 = c.nodes[0].v4.clone();
    let on_n1 = [
        hp("tcp", "127.0.0.1", "hp-lo"),
        hp("tcp", &n1v4, "hp-ip"),
        hp("udp", &n1v4, "hp-udp"),
    ];
    let enter = |n: &Node| netns_enter(&n.ns.name);
    failed.extend(expect_answers("n1", &enter(&c.nodes[0]), &on_n1));
    for n in &c.nodes[1..] {
        failed.extend(expect_answers(&n.name, &enter(n), &on_n1[1..]));
        let lo = dial(&enter(n), &[format!("tcp,127.0.0.1,{HOST_PORT}")]);
        assert!(
            lo.len() == 1 && lo.iter().all(|(_, a)| a.starts_with("ERROR")),
            "{}: n1's loopback host port answered: {lo:?}",
            n.name
        );
    }
    assert!(
        failed.is_empty(),
        "{} conformance checks failed:\n{}",
        failed.len(),
        failed.join("\n")
    );

    // Phase 2: hostile Nodes, each refused on every node, each leaving
    // every node as it was.
    let before = c.snapshots();
    let hostile = [
        ("h-default", vec!["0.0.0.0/0"], vec!["192.168.77.9"]),
        (
            "h-half",
            vec!["128.0.0.0/1", "::/0"],
            vec!["192.168.77.9", "fd77::9"],
        ),
        ("h-steal", vec!["10.244.2.0/25"], vec!["192.168.77.9"]),
        ("h-lan", vec!["192.168.77.0/25"], vec!["192.168.77.9"]),
        ("h-twin", vec!["10.244.9.0/24"], vec!["192.168.77.2"]),
        ("h-loop", vec!["10.244.10.0/24"], vec!["127.0.0.1"]),
        ("h-bad", vec!["10.244.11.1/24"], vec!["192.168.77.9"]),
    ];
    for (name, cidrs, ips) in &hostile {
        let cidrs: Vec<&str> = cidrs.to_vec();
        let ips: Vec<&str> = ips.to_vec();
        c.api
            .put(node_object(name, &cidrs, &ips, "2026-12-07T10:00:00Z"));
    }
    wait_for(
        "every hostile Node refused",
        Duration::from_secs(30),
        || {
            c.nodes.iter().all(|n| {
                let s = n.status();
                let refused = s["refused"].as_array().cloned().unwrap_or_default();
                // Exactly the hostile ones: none of the nodes, nor itself.
                refused.len() == hostile.len()
                    && hostile
                        .iter()
                        .all(|(h, _, _)| refused.iter().any(|r| r["node"] == *h))
            })
        },
    );
    std::thread::sleep(Duration::from_millis(1500));
    same(&c.snapshots(), &before, "a hostile Node changed a node");
    for n in &c.nodes {
        let page = sh(&[
            "curl",
            "-s",
            "--unix-socket",
            n.dir.join("metrics.sock").to_str().unwrap(),
            "http://localhost/metrics",
        ]);
        for want in [
            "wasm_cni_cluster_refused_nodes 7",
            "wasm_cni_cluster_nodes 11",
            "wasm_cni_cluster_routes 6",
        ] {
            let ours: Vec<&str> = page.lines().filter(|l| l.contains("cluster")).collect();
            assert!(page.contains(want), "{}: {want}: {ours:?}", n.name);
        }
    }
    let shown = status_text(&c.nodes[3]);
    assert!(
        shown.contains("refused node h-default: 0.0.0.0/0 is wider"),
        "{shown}"
    );
    assert!(
        shown.contains("refused node h-lan: 192.168.77.0/25 holds"),
        "{shown}"
    );
    for (name, _, _) in &hostile {
        c.api.send(json!({ "delete": name }));
    }
    c.wait_converged(4, 6);
    same(&c.snapshots(), &before, "the hostile Nodes left a trace");

    // Phase 3: a Node added, changed and deleted.
    c.api.put(n5("10.244.5.0/24"));
    c.wait_converged(5, 7);
    assert!(c.nodes[0]
        .routes()
        .contains("10.244.5.0/24 via 192.168.77.5 dev eth0"));
    c.api.put(n5("10.244.6.0/24"));
    wait_for(
        "n5's CIDR changed everywhere",
        Duration::from_secs(10),
        || {
            c.nodes.iter().all(|n| {
                n.routes().contains("10.244.6.0/24") && !n.routes().contains("10.244.5.0/24")
            })
        },
    );
    c.api.send(json!({ "delete": "n5" }));
    c.wait_converged(4, 6);
    same(&c.snapshots(), &before, "a Node's change left a trace");
    // A single-stack Node of either family: routes of its family alone
    // (n5 above had IPv4 only; n6 has IPv6 only).
    c.api.put(node_object(
        "n6",
        &["fd00:10:244:6::/64"],
        &["fd77::6"],
        "2026-12-07T11:00:00Z",
    ));
    c.wait_converged(5, 7);
    for n in &c.nodes {
        let six = n.ns.exec(&["ip", "-6", "route", "show", "proto", "157"]);
        assert!(six.contains("fd00:10:244:6::/64 via"), "{}: {six}", n.name);
    }
    c.api.send(json!({ "delete": "n6" }));
    c.wait_converged(4, 6);
    same(&c.snapshots(), &before, "an IPv6-only Node left a trace");

    // Phase 4: the watch expires (410): every daemon lists again and
    // sees a Node added after.
    c.api.send(json!({ "expire": true }));
    c.api.put(n5("10.244.5.0/24"));
    c.wait_converged(5, 7);
    c.api.send(json!({ "delete": "n5" }));
    c.wait_converged(4, 6);

    // Phase 5: the API server gone for a while: traffic flows, nothing
    // changes; on its return a deletion made meanwhile is applied.
    c.api.send(json!({ "down": true }));
    std::thread::sleep(Duration::from_secs(5));
    c.all_pairs_reach();
    same(&c.snapshots(), &before, "an outage changed a node");
    assert!(c.nodes.iter().all(|n| !n.status()["apiError"].is_null()));
    c.api.send(json!({ "down": false }));
    c.api.put(n5("10.244.5.0/24"));
    c.wait_converged(5, 7);

    // Phase 6: a stalled server answers nothing; what was applied stays,
    // and the change made during the stall arrives once it answers.
    c.api.send(json!({ "stall": true }));
    c.api.send(json!({ "delete": "n5" }));
    std::thread::sleep(Duration::from_secs(2));
    c.api.send(json!({ "stall": false }));
    c.wait_converged(4, 6);
    same(&c.snapshots(), &before, "a Node's change left a trace");

    // Phase 7: the daemon killed, stopped, and upgraded (stopped, and
    // another binary started in its place: these bytes plus a trailer, as
    // a DaemonSet's rollout replaces the file), traffic flowing across:
    // nothing is lost and nothing changes.
    let upgrade = TempDir::new("cluster-upgrade");
    let next = upgrade.join("wasm-cni");
    let mut bytes = std::fs::read(wasm_cni_bin()).unwrap();
    bytes.extend_from_slice(b"\nwasm-cni next\n");
    std::fs::write(&next, bytes).unwrap();
    std::fs::set_permissions(&next, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for signal in ["KILL", "TERM", "upgrade"] {
        let ping = std::process::Command::new("ip")
            .args(["netns", "exec", &c.nodes[3].pod.as_ref().unwrap().name])
            .args(["ping", "-q", "-i", "0.05", "-c", "80", &c.nodes[0].pod4])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        for n in &mut c.nodes[..] {
            if n.name == "n1" || n.name == "n4" {
                let d = n.daemon.as_mut().unwrap();
                if signal == "upgrade" {
                    d.stop_with("TERM");
                    d.restart_as(&next);
                } else {
                    d.stop_with(signal);
                    d.restart();
                }
            }
        }
        let out = ping.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(" 0% packet loss"), "{signal}: {text}");
        c.wait_converged(4, 6);
        std::thread::sleep(Duration::from_millis(1500));
        same(
            &c.snapshots(),
            &before,
            "a restart ({signal}) changed a node",
        );
        let changes: Vec<u64> = c
            .nodes
            .iter()
            .map(|n| n.status()["changes"].as_u64().unwrap_or(99))
            .collect();
        assert_eq!(
            changes[0], 0,
            "the new daemon on n1 changed something: {changes:?}"
        );
    }
    // Phase 8: `wasm-cni uninstall` on every node, its daemon stopped:
    // links, addresses, routes of every table, neighbours and sysctls as
    // they were before cluster mode started; the pods' own stay.
    for n in &mut c.nodes {
        n.daemon.as_mut().unwrap().stop_with("TERM");
        let status = n.dir.join("cluster.json");
        let out = n.ns.exec(&[
            wasm_cni_bin().to_str().unwrap(),
            "uninstall",
            "--record",
            n.dir.join("no-record.json").to_str().unwrap(),
            "--cluster-status",
            status.to_str().unwrap(),
        ]);
        assert!(out.contains("removed cluster mode's routes"), "{out}");
        assert!(!status.exists());
    }
    same(&c.snapshots(), &pristine, "uninstall left something behind");
}

/// The Node client against an API server that lies
/// (`tests/fixtures/kube-liar.py`, on 127.0.0.1 with a free port).
/// Attacker: whoever answers at the API server's address with a
/// certificate the node trusts (a compromised or impersonated API server,
/// a proxy). They control every byte of every reply. They must not get a
/// Node in that is not one, a read past its bound, a wait past its
/// deadline, a request loop without end, or raw terminal text into an
/// error; each lie is an error (or a skipped object) and nothing else.
#[test]
fn a_lying_api_server_gets_an_error_in_bounded_time_and_nothing_else() {
    use wasm_cni_cluster::api::{Api, ApiError, Event};
    let dir = TempDir::new("kube-liar");
    tls_certs(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let log = dir.join("requests.log");
    let child = Command::new("python3")
        .arg(workspace_root().join("tests/fixtures/kube-liar.py"))
        .arg(port.to_string())
        .arg(dir.join("server.pem"))
        .arg(dir.join("server.key"))
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let _server = Procs(vec![child]);
    wait_for("the lying API server", Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening")
    });
    let api = |lie: &str| -> Api {
        let token = dir.join(format!("{lie}.token"));
        std::fs::write(&token, lie).unwrap();
        let mut api = Api::new(
            &format!("https://127.0.0.1:{port}"),
            token,
            dir.join("ca.pem"),
        )
        .unwrap();
        api.request_timeout = Duration::from_secs(2);
        api.watch_timeout = Duration::from_secs(1);
        api
    };
    let failed = |r: Result<_, ApiError>| -> String {
        match r {
            Err(ApiError::Failed(why)) => why,
            Err(ApiError::Gone) => "410".into(),
            Ok(_) => "no error".into(),
        }
    };

    for (lie, want, limit) in [
        ("loop", "ran past 400 pages", 60),
        ("long-continue", "a continue token of 5000 bytes", 5),
        ("big-page", "over the limit of 33554432", 10),
        ("gone-page", "410", 5),
        ("stall", "no complete reply within 2000 ms", 5),
        ("bad-version", "no usable resourceVersion", 5),
        ("not-a-list", "not a NodeList", 5),
    ] {
        let started = Instant::now();
        let why = failed(api(lie).list().map(|_| ()));
        let took = started.elapsed();
        assert!(why.contains(want), "{lie}: wanted {want:?}, got {why:?}");
        assert!(took < Duration::from_secs(limit), "{lie}: {took:?}");
    }
    // The loop stops at its bound, not before: 400 requests.
    let pages = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("loop "))
        .count();
    assert_eq!(pages, 400);

    // Objects that are not Nodes are skipped, with a reason; the good one
    // is kept.
    let listed = api("junk-items").list().unwrap();
    assert_eq!(listed.nodes.keys().collect::<Vec<_>>(), ["good"]);
    assert_eq!(listed.skipped.len(), 5, "{:?}", listed.skipped);

    // Watches.
    for (lie, want, limit) in [
        ("long-line", "a line over the limit of 1048576 bytes", 5),
        // Its own timeoutSeconds (1) and 10 s more.
        ("trickle", "the stream did not end within 11000 ms", 15),
    ] {
        let started = Instant::now();
        let why = failed(api(lie).watch("5", &mut |_| {}).map(|_| ()));
        let took = started.elapsed();
        assert!(why.contains(want), "{lie}: wanted {want:?}, got {why:?}");
        assert!(took < Duration::from_secs(limit), "{lie}: {took:?}");
    }
    let why = failed(api("error-500").watch("5", &mut |_| {}).map(|_| ()));
    assert!(why.contains("the watch ended with an error: etcd"), "{why}");
    assert!(
        !why.chars().any(char::is_control),
        "control characters from the server: {why:?}"
    );
    let mut events = Vec::new();
    let last = api("odd-type").watch("5", &mut |e| events.push(e)).unwrap();
    assert_eq!(last, "9");
    assert!(
        matches!(&events[..], [Event::Skipped(why), Event::Put(n)]
            if why.contains("HIJACK") && n.name == "b"),
        "{events:?}"
    );
}
