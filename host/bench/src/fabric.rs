//! Item 14: cluster mode, as a cluster runs it. Three node namespaces on
//! one LAN (a bridge in a namespace of its own, which also runs the tests'
//! stand-in API server, `tests/fixtures/kube-nodes.py`: no kube-apiserver
//! can be installed here), each running `wasm-cni daemon --cluster-node`.
//!
//! * Convergence: from a Node's add (or delete) on the API server until
//!   its route is on (or gone from) all three nodes, as `ip monitor route`
//!   in each node reports it, with 50 and then 500 Node objects (the
//!   others have no namespace: their routes point into the LAN).
//! * Footprint: one daemon's RSS with 500 Nodes and 110 pods it made on its
//!   node, then its CPU over a quiet minute.
//! * Throughput: iperf3 from a pod on one node to a pod on another, direct
//!   and over VXLAN, against the same path built by hand (veth + route; a
//!   plain VXLAN device with the same neighbour and forwarding entries,
//!   and the same masquerade), alternated round by round. Pods on every
//!   side have an MTU of 1450.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::proc::{cpu_time, exec, in_netns, status_field, Cni, Netns, WorkDir};
use crate::scenarios::{wasm_conf, Programs};

const TOKEN: &str = "bench-token";
const API_IP: &str = "192.168.0.254";
/// Nodes with a namespace of their own.
const REAL: usize = 3;
const POD_MTU: u32 = 1450;

#[derive(Debug, Default)]
pub struct Figures {
    pub convergence: Vec<Convergence>,
    pub pods: usize,
    pub nodes: usize,
    pub rss_kib: u64,
    pub idle: Duration,
    pub idle_cpu: Duration,
    /// Direct, then VXLAN.
    pub throughput: Vec<Throughput>,
}

#[derive(Debug, Default)]
pub struct Convergence {
    pub nodes: usize,
    /// Until every node had it, ms; a sample past the limit is 10 000.
    pub add_ms: Vec<f64>,
    pub del_ms: Vec<f64>,
    pub late: usize,
}

#[derive(Debug, Default)]
pub struct Throughput {
    pub mode: &'static str,
    /// Gbit/s per round: by hand, wasm-cni's ptp, wasm-cni's bridge.
    pub hand: Vec<f64>,
    pub ptp: Vec<f64>,
    pub bridge: Vec<f64>,
}

pub fn iperf3_installed() -> bool {
    Path::new("/usr/bin/iperf3").is_file()
}

pub struct Knobs {
    pub samples: usize,
    pub pods: usize,
    pub idle: Duration,
    pub rounds: usize,
}

fn run(cmd: &mut Command) -> io::Result<String> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip netns exec <ns>` + each whitespace-separated command.
fn in_ns(ns: &Netns, cmds: &[String]) -> io::Result<()> {
    for c in cmds {
        run(Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .args(c.split_whitespace()))?;
    }
    Ok(())
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The stand-in API server in the LAN's namespace.
struct Api {
    child: Child,
    control: PathBuf,
}

impl Api {
    fn start(lan: &Netns, dir: &Path) -> io::Result<Api> {
        let d = dir.display();
        std::fs::write(
            dir.join("server.ext"),
            format!("subjectAltName=IP:{API_IP}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )?;
        for cmd in [
            format!("req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=wasm-cni-bench-ca -keyout {d}/ca.key -out {d}/ca.pem"),
            format!("req -newkey rsa:2048 -nodes -subj /CN={API_IP} -keyout {d}/server.key -out {d}/server.csr"),
            format!("x509 -req -in {d}/server.csr -CA {d}/ca.pem -CAkey {d}/ca.key -CAcreateserial -days 1 -extfile {d}/server.ext -out {d}/server.pem"),
        ] {
            run(Command::new("openssl").args(cmd.split(' ')).stderr(Stdio::null()))?;
        }
        std::fs::write(dir.join("token"), format!("{TOKEN}\n"))?;
        let log = dir.join("api.log");
        let control = dir.join("control.sock");
        let child = Command::new("ip")
            .args(["netns", "exec", &lan.name, "python3"])
            .arg(crate::workspace_root().join("tests/fixtures/kube-nodes.py"))
            .args([API_IP, "6443"])
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .arg(TOKEN)
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.join("api.err"))?)
            .spawn()?;
        let mut api = Api { child, control };
        let started = Instant::now();
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening")
        {
            if started.elapsed() > Duration::from_secs(10) {
                kill(&mut api.child);
                return Err(io::Error::other("the stand-in API server did not start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(api)
    }

    fn send(&self, cmd: &Value) -> io::Result<()> {
        let mut s = UnixStream::connect(&self.control)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(s, "{cmd}")?;
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line)?;
        if line.trim() != "ok" {
            return Err(io::Error::other(format!("API server: {cmd}: {line}")));
        }
        Ok(())
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn node_object(name: &str, cidr: &str, ip: &str, created: &str) -> Value {
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    })
}

/// The `k`th Node without a namespace: its CIDR and InternalIP.
fn filler(k: usize) -> Value {
    node_object(
        &format!("f{k}"),
        &format!("10.{}.{}.0/24", 100 + k / 256, k % 256),
        &format!("192.168.{}.{}", 10 + k / 250, k % 250 + 1),
        "2026-12-07T10:00:00Z",
    )
}

struct Node {
    name: String,
    ns: Netns,
    dir: PathBuf,
    daemon: Option<Child>,
    /// `ip monitor route` in the node, line by line, as it printed them.
    monitor: Child,
    lines: Receiver<(Instant, String)>,
}

impl Node {
    fn new(i: usize, lan: &Netns, work: &WorkDir) -> io::Result<Node> {
        let ns = Netns::new()?;
        let dir = work.root.join(format!("fabric-n{i}"));
        std::fs::create_dir_all(&dir)?;
        run(Command::new("ip")
            .args([
                "link", "add", "eth0", "netns", &ns.name, "type", "veth", "peer", "name",
            ])
            .arg(format!("lan{i}"))
            .args(["netns", &lan.name]))?;
        in_ns(lan, &[format!("ip link set lan{i} master br0 up")])?;
        in_ns(
            &ns,
            &[
                format!("ip addr add 192.168.0.{i}/16 dev eth0"),
                "ip link set eth0 up".into(),
                "ip link set lo up".into(),
                "sysctl -qw net.ipv4.ip_forward=1".into(),
            ],
        )?;
        let mut monitor = Command::new("ip")
            .args(["-n", &ns.name, "monitor", "route"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = monitor
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("ip monitor: no stdout"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Node {
            name: format!("n{i}"),
            ns,
            dir,
            daemon: None,
            monitor,
            lines,
        })
    }

    fn start_daemon(&mut self, progs: &Programs, api: &Path, mode: &str) -> io::Result<()> {
        if let Some(mut d) = self.daemon.take() {
            kill(&mut d);
        }
        let socket = self.dir.join("daemon.sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns.name])
            .arg(&progs.wasm_cni)
            .arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .args(["--cluster-node", &self.name, "--cluster-mode", mode])
            .args(["--api-server", &format!("https://{API_IP}:6443")])
            .arg("--api-token-file")
            .arg(api.join("token"))
            .arg("--api-ca-file")
            .arg(api.join("ca.pem"))
            .arg("--cluster-status")
            .arg(self.dir.join("cluster.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("daemon.log"))?)
            .spawn()?;
        self.daemon = Some(child);
        let started = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err(io::Error::other(format!(
                    "{}: the daemon did not start",
                    self.name
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    fn status(&self) -> Value {
        std::fs::read(self.dir.join("cluster.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null)
    }

    fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// A pod on this node `i`, made through its daemon by bridge (the
    /// lower half of the node's /24) or ptp (the upper half) and
    /// host-local.
    fn pod(
        &self,
        progs: &Programs,
        pod: &Netns,
        i: usize,
        id: usize,
        ptp: bool,
    ) -> io::Result<String> {
        let state = self.dir.join(if ptp { "state-ptp" } else { "state" });
        let ipam = json!({
            "type": "host-local",
            "ranges": [[{"subnet": format!("10.200.{i}.{}/25", if ptp { 128 } else { 0 })}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": state.join("ipam"),
        });
        let entry = if ptp {
            json!({"type": "ptp", "mtu": POD_MTU, "ipam": ipam})
        } else {
            json!({"type": "bridge", "bridge": "cni0", "isGateway": true, "mtu": POD_MTU, "ipam": ipam})
        };
        let mut conf = wasm_conf(progs, &state, &[entry]);
        conf["daemon"] = json!("require");
        conf["daemonSocket"] = json!(self.dir.join("daemon.sock"));
        let netns = pod.path();
        let id = format!("pod{id}");
        let m = in_netns(&self.ns, || {
            exec(
                &progs.wasm_cni,
                &Cni {
                    command: "ADD",
                    container_id: &id,
                    netns: &netns,
                    ifname: "eth0",
                    cni_path: "/opt/cni/bin",
                },
                conf.to_string().as_bytes(),
            )?
            .ok("pod ADD")
        })?;
        m.json()?["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .map(str::to_string)
            .ok_or_else(|| io::Error::other("pod ADD: no address"))
    }

    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// When this node's monitor printed a line starting with `prefix`.
    fn seen(&self, prefix: &str, limit: Instant) -> Option<Instant> {
        loop {
            let left = limit.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if line.starts_with(prefix) => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            kill(&mut d);
        }
        kill(&mut self.monitor);
    }
}

/// Until every node's status shows `nodes` Nodes and as many routes as
/// Nodes have a CIDR besides its own.
fn converged(nodes: &[Node], want: usize) -> io::Result<()> {
    let started = Instant::now();
    loop {
        if nodes.iter().all(|n| {
            let s = n.status();
            s["nodes"].as_u64() == Some(want as u64)
                && s["routes"].as_array().map(Vec::len) == Some(want - 1)
        }) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            let why: Vec<String> = nodes
                .iter()
                .map(|n| format!("{}: {}", n.name, n.status()))
                .collect();
            return Err(io::Error::other(format!(
                "cluster mode did not converge on {want} Nodes: {}",
                why.join("; ")
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Node added, then deleted, `samples` times: how long until all three
/// nodes had its route, and until none had.
fn convergence(api: &Api, nodes: &[Node], total: usize, samples: usize) -> io::Result<Convergence> {
    let mut c = Convergence {
        nodes: total,
        ..Convergence::default()
    };
    let late_ms = 10_000.0;
    for s in 0..samples {
        let cidr = format!("10.250.{}.0/24", s % 250);
        let probe = node_object(
            "probe",
            &cidr,
            &format!("192.168.200.{}", s % 250 + 1),
            "2026-12-07T11:00:00Z",
        );
        for (add, out) in [(true, &mut c.add_ms), (false, &mut c.del_ms)] {
            nodes.iter().for_each(Node::drain);
            let t0 = Instant::now();
            if add {
                api.send(&json!({ "put": probe }))?;
            } else {
                api.send(&json!({ "delete": "probe" }))?;
            }
            let prefix = if add {
                format!("{cidr} ")
            } else {
                format!("Deleted {cidr} ")
            };
            let limit = t0 + Duration::from_secs(10);
            let mut last = Some(t0);
            for n in nodes {
                last = match (last, n.seen(&prefix, limit)) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            match last {
                Some(at) => out.push(at.duration_since(t0).as_secs_f64() * 1e3),
                None => {
                    c.late += 1;
                    out.push(late_ms);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(c)
}

fn iperf(client: &Netns, server: &str) -> io::Result<f64> {
    let out = run(Command::new("ip").args([
        "netns",
        "exec",
        &client.name,
        "iperf3",
        "-J",
        "-c",
        server,
        "-t",
        "3",
        "-O",
        "1",
    ]))?;
    let v: Value = serde_json::from_str(&out).map_err(io::Error::other)?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .ok_or_else(|| io::Error::other(format!("iperf3: {}", v["error"])))
}

fn iperf_server(ns: &Netns) -> io::Result<Child> {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, "iperf3", "-s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Two nodes on the LAN with a pod each, linked by hand: a veth whose node
/// end is the pod's gateway, a route to the other pod's /24 (direct), or a
/// VXLAN device with the neighbour and forwarding entries cluster mode
/// writes (vxlan).
struct Hand {
    nodes: [Netns; 2],
    pods: [Netns; 2],
}

impl Hand {
    fn new(lan: &Netns) -> io::Result<Hand> {
        let nodes = [Netns::new()?, Netns::new()?];
        let pods = [Netns::new()?, Netns::new()?];
        for (k, (node, pod)) in nodes.iter().zip(&pods).enumerate() {
            let i = k + 1;
            run(Command::new("ip")
                .args([
                    "link", "add", "eth0", "netns", &node.name, "type", "veth", "peer", "name",
                ])
                .arg(format!("lanh{i}"))
                .args(["netns", &lan.name]))?;
            run(Command::new("ip").args([
                "link", "add", "eth0", "netns", &pod.name, "type", "veth", "peer", "name", "hv",
                "netns", &node.name,
            ]))?;
            in_ns(lan, &[format!("ip link set lanh{i} master br0 up")])?;
            in_ns(
                node,
                &[
                    format!("ip addr add 192.168.0.10{i}/16 dev eth0"),
                    "ip link set eth0 up".into(),
                    format!("ip addr add 10.201.{i}.1/24 dev hv"),
                    format!("ip link set hv mtu {POD_MTU} up"),
                    "sysctl -qw net.ipv4.ip_forward=1".into(),
                    // What leaves the cluster masqueraded, as cluster mode
                    // does (and kindnetd's ip-masq agent): the same
                    // conntrack on every packet.
                    "nft add table inet hand".into(),
                    "nft add chain inet hand post { type nat hook postrouting priority 100 ; }".into(),
                    format!("nft add rule inet hand post ip saddr 10.201.{i}.0/24 ip daddr != 10.201.0.0/16 masquerade"),
                    // The tunnel, unused until vxlan mode routes to it.
                    format!("ip link add hvx address 0a:00:00:00:00:0{i} mtu {POD_MTU} type vxlan id 7 local 192.168.0.10{i} dstport 4789 nolearning"),
                    "ip link set hvx up".into(),
                ],
            )?;
            in_ns(
                pod,
                &[
                    format!("ip addr add 10.201.{i}.2/24 dev eth0"),
                    format!("ip link set eth0 mtu {POD_MTU} up"),
                    "ip link set lo up".into(),
                    format!("ip route add default via 10.201.{i}.1"),
                ],
            )?;
        }
        let hand = Hand { nodes, pods };
        hand.route(false)?;
        Ok(hand)
    }

    fn route(&self, vxlan: bool) -> io::Result<()> {
        for (k, node) in self.nodes.iter().enumerate() {
            let j = 2 - k;
            let cmds = if vxlan {
                vec![
                    format!("ip neigh replace 10.201.{j}.0 lladdr 0a:00:00:00:00:0{j} dev hvx nud permanent"),
                    format!("bridge fdb append 0a:00:00:00:00:0{j} dev hvx dst 192.168.0.10{j}"),
                    format!("ip route replace 10.201.{j}.0/24 via 10.201.{j}.0 dev hvx onlink"),
                ]
            } else {
                vec![format!(
                    "ip route replace 10.201.{j}.0/24 via 192.168.0.10{j}"
                )]
            };
            in_ns(node, &cmds)?;
        }
        Ok(())
    }
}

pub fn measure(progs: &Programs, work: &WorkDir, k: &Knobs) -> io::Result<Figures> {
    let lan = Netns::new()?;
    in_ns(
        &lan,
        &[
            "ip link add br0 type bridge".into(),
            format!("ip addr add {API_IP}/16 dev br0"),
            "ip link set br0 up".into(),
        ],
    )?;
    let api_dir = work.root.join("fabric-api");
    std::fs::create_dir_all(&api_dir)?;
    let api = Api::start(&lan, &api_dir)?;
    let mut nodes = Vec::new();
    for i in 1..=REAL {
        nodes.push(Node::new(i, &lan, work)?);
        api.send(&json!({ "put": node_object(
            &format!("n{i}"),
            &format!("10.200.{i}.0/24"),
            &format!("192.168.0.{i}"),
            "2026-12-07T09:00:00Z",
        ) }))?;
    }
    let mut figures = Figures::default();
    let mut total = REAL;
    for scale in [50, 500] {
        while total < scale {
            api.send(&json!({ "put": filler(total) }))?;
            total += 1;
        }
        if nodes[0].daemon.is_none() {
            for n in &mut nodes {
                n.start_daemon(progs, &api_dir, "auto")?;
            }
        }
        converged(&nodes, total)?;
        eprintln!(
            "bench: 14 convergence with {total} Nodes, {} samples",
            k.samples
        );
        figures
            .convergence
            .push(convergence(&api, &nodes, total + 1, k.samples)?);
        converged(&nodes, total)?;
    }
    figures.nodes = total;

    eprintln!(
        "bench: 14 {} pods on n1, then {} s idle",
        k.pods,
        k.idle.as_secs()
    );
    let mut pods = Vec::new();
    let mut first = None;
    for p in 0..k.pods.max(1) {
        let pod = Netns::new()?;
        let ip = nodes[0].pod(progs, &pod, 1, p, false)?;
        first.get_or_insert(ip);
        pods.push(pod);
    }
    let far = Netns::new()?;
    let far_ip = nodes[1].pod(progs, &far, 2, 0, false)?;
    // kindnetd's layout, the one built by hand below.
    let (near_ptp, far_ptp) = (Netns::new()?, Netns::new()?);
    nodes[0].pod(progs, &near_ptp, 1, k.pods, true)?;
    let far_ptp_ip = nodes[1].pod(progs, &far_ptp, 2, 1, true)?;
    figures.pods = pods.len();
    let pid = nodes[0]
        .pid()
        .ok_or_else(|| io::Error::other("n1's daemon is gone"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    figures.rss_kib =
        status_field(&status, "VmRSS:").ok_or_else(|| io::Error::other("no VmRSS"))?;
    let cpu = || cpu_time(pid).ok_or_else(|| io::Error::other("n1's daemon: no CPU time"));
    let before = cpu()?;
    std::thread::sleep(k.idle);
    figures.idle = k.idle;
    figures.idle_cpu = cpu()?.saturating_sub(before);

    let hand = Hand::new(&lan)?;
    let mut servers = vec![
        iperf_server(&far)?,
        iperf_server(&far_ptp)?,
        iperf_server(&hand.pods[1])?,
    ];
    std::thread::sleep(Duration::from_millis(300));
    let result = (|| {
        for mode in ["direct", "vxlan"] {
            if mode == "vxlan" {
                for n in &mut nodes[..2] {
                    n.start_daemon(progs, &api_dir, "vxlan")?;
                }
                wait_routes(&nodes[0], "10.200.2.0/24", "wcni-vx4")?;
                wait_routes(&nodes[1], "10.200.1.0/24", "wcni-vx4")?;
                hand.route(true)?;
            }
            eprintln!("bench: 14 throughput, {mode}, {} rounds", k.rounds);
            let mut t = Throughput {
                mode,
                ..Throughput::default()
            };
            for round in 0..k.rounds.max(1) {
                for side in crate::rotation(&[0, 1, 2], round) {
                    match side {
                        0 => t.hand.push(iperf(&hand.pods[0], "10.201.2.2")?),
                        1 => t.ptp.push(iperf(&near_ptp, &far_ptp_ip)?),
                        _ => t.bridge.push(iperf(&pods[0], &far_ip)?),
                    }
                }
            }
            figures.throughput.push(t);
        }
        Ok::<(), io::Error>(())
    })();
    for s in &mut servers {
        kill(s);
    }
    result?;
    drop(nodes);
    drop(api);
    Ok(figures)
}

/// Until `node` routes `cidr` through `dev`.
fn wait_routes(node: &Node, cidr: &str, dev: &str) -> io::Result<()> {
    let started = Instant::now();
    loop {
        let out = run(Command::new("ip").args(["-n", &node.ns.name, "route", "show", cidr]))?;
        if out.contains(&format!("dev {dev}")) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(io::Error::other(format!(
                "{}: no route to {cidr} through {dev}: {out}",
                node.name
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Figures {
    pub(crate) fn section(&self, page: &mut crate::report::Page) {
        use crate::stats::{cell, num, paired_ratio, percentile, ratio_cell, summarize};
        use std::fmt::Write as _;
        let body = &mut page.body;
        let _ = writeln!(
            body,
            "\n## 14. Cluster mode: convergence, footprint, pod-to-pod throughput\n\n\
             Three nodes as namespaces on one LAN, each running `wasm-cni daemon --cluster-node` \
             against a stand-in API server (`tests/fixtures/kube-nodes.py`, list + watch over HTTPS; \
             no kube-apiserver can be installed here); the other Nodes have no namespace, their \
             routes point into the LAN. Convergence: from the Node's add (delete) on the API server \
             until `ip monitor route` on all three nodes printed its route (its deletion); a sample \
             past 10 s counts as 10 s. Its p99 is the largest but one of {} samples.\n",
            self.convergence.first().map_or(0, |c| c.add_ms.len())
        );
        let _ = writeln!(
            body,
            "| Node objects | add p50, ms | add p99, ms | delete p50, ms | delete p99, ms | past 10 s |\n|---|---|---|---|---|---|"
        );
        for c in &self.convergence {
            let _ = writeln!(
                body,
                "| {} | {} | {} | {} | {} | {} |",
                c.nodes,
                num(percentile(&c.add_ms, 0.5)),
                num(percentile(&c.add_ms, 0.99)),
                num(percentile(&c.del_ms, 0.5)),
                num(percentile(&c.del_ms, 0.99)),
                c.late
            );
        }
        let rss = self.rss_kib as f64 / 1024.0;
        let core = self.idle_cpu.as_secs_f64() / self.idle.as_secs_f64().max(1e-9);
        let _ = writeln!(
            body,
            "\nFootprint of one node's daemon (cluster mode and the pods' CNI calls in one process) \
             with {} Nodes and {} pods it made: RSS {} MiB; CPU over {} s idle {} ms ({} % of a core).\n",
            self.nodes,
            self.pods,
            num(rss),
            self.idle.as_secs(),
            num(self.idle_cpu.as_secs_f64() * 1e3),
            num(core * 100.0),
        );
        let _ = writeln!(
            body,
            "Pod-to-pod TCP (iperf3, one stream, 3 s after 1 s omitted), Gbit/s, median (p25–p75) of \
             alternated rounds. By hand: a veth whose node end is the pod's gateway, and a route to \
             the other pod's /24 (direct) or a plain VXLAN device with the entries cluster mode \
             writes (vxlan), and an nf_tables masquerade of what leaves the cluster as cluster mode \
             has (without it, conntrack's share of every packet, about 6 % here, would be counted \
             against wasm-cni). wasm-cni ptp is the same layout (kindnetd's), made by wasm-cni's ptp and \
             routed by cluster mode; wasm-cni bridge is the DaemonSet's, one bridge hop more on each \
             node. MTU 1450 for every pod.\n\n\
             | mode | by hand | wasm-cni ptp | wasm-cni bridge | ptp ÷ by hand | bridge ÷ by hand |\n|---|---|---|---|---|---|"
        );
        for t in &self.throughput {
            let _ = writeln!(
                body,
                "| {} | {} | {} | {} | {} | {} |",
                t.mode,
                cell(&summarize(&t.hand)),
                cell(&summarize(&t.ptp)),
                cell(&summarize(&t.bridge)),
                ratio_cell(&paired_ratio(&t.hand, &t.ptp)),
                ratio_cell(&paired_ratio(&t.hand, &t.bridge)),
            );
        }
        let heads = &mut page.heads;
        for c in &self.convergence {
            let p99 = percentile(&c.add_ms, 0.99).max(percentile(&c.del_ms, 0.99));
            heads.push(crate::Headline {
                what: format!("route convergence p99, add and delete, {} Nodes", c.nodes),
                value: format!("{} ms", num(p99)),
                target: "≤ 1000 ms".into(),
                met: p99 <= 1000.0,
            });
        }
        heads.push(crate::Headline {
            what: format!(
                "cluster-mode daemon RSS, {} Nodes + {} pods",
                self.nodes, self.pods
            ),
            value: format!("{} MiB", num(rss)),
            target: "≤ 50 MiB".into(),
            met: rss <= 50.0,
        });
        heads.push(crate::Headline {
            what: format!("cluster-mode daemon CPU, idle {} s", self.idle.as_secs()),
            value: format!("{} % of a core", num(core * 100.0)),
            target: "(kindnetd and flannel request 10 %)".into(),
            met: true,
        });
        for t in &self.throughput {
            let r = paired_ratio(&t.hand, &t.ptp).median;
            heads.push(crate::Headline {
                what: format!(
                    "pod-to-pod TCP across nodes, {}, wasm-cni ptp ÷ the same path by hand",
                    t.mode
                ),
                value: format!("{}×", num(r)),
                target: "≥ 0.95×".into(),
                met: r >= 0.95,
            });
        }
    }
}
