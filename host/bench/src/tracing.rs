//! Item 11: what tracing costs a call. bridge + host-local, ADD then DEL,
//! in one node namespace with a live OTLP sink on its loopback (answers 200
//! to every export), a fresh container namespace per run: per invocation
//! with tracing off and on (the runtime's `TRACEPARENT`, the collector in
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), and through two daemons in the node, one
//! exporting (`--otlp-endpoint`) and one not.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::proc::{exec_env, in_netns, Cni, Netns, WorkDir};
use crate::scenarios::Programs;
use crate::scenarios::{bridge_entry, wasm_conf};

pub const SIDES: [&str; 4] = [
    "per invocation, tracing off",
    "per invocation, tracing on",
    "daemon, tracing off",
    "daemon, tracing on",
];

const SINK_PORT: u16 = 4318;
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A collector that takes everything: reads each request whole, answers
/// 200 with an empty body.
const SINK: &str = r#"
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// Processes of the item, killed on drop.
struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn daemon(wasm_cni: &Path, node: &Netns, socket: &Path, extra: &[&str]) -> io::Result<Child> {
    let child = Command::new("ip")
        .args(["netns", "exec", &node.name])
        .arg(wasm_cni)
        .arg("daemon")
        .arg("--socket")
        .arg(socket)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let started = Instant::now();
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(io::Error::other("a daemon of item 11 did not listen"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(child)
}

/// ADD wall times (ms) per side, `rounds` each, sides rotated.
pub fn measure(progs: &Programs, work: &WorkDir, rounds: usize) -> io::Result<[Vec<f64>; 4]> {
    let node = Netns::new()?;
    // The sink and the exporters meet on the node's loopback.
    let up = Command::new("ip")
        .args(["netns", "exec", &node.name, "ip", "link", "set", "lo", "up"])
        .status()?;
    if !up.success() {
        return Err(io::Error::other("item 11: cannot set lo up in the node"));
    }
    let mut procs = Kill(Vec::new());
    procs.0.push(
        Command::new("ip")
            .args(["netns", "exec", &node.name, "python3", "-c", SINK])
            .arg(SINK_PORT.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let started = Instant::now();
    while in_netns(&node, || {
        TcpStream::connect(("127.0.0.1", SINK_PORT)).map(drop)
    })
    .is_err()
    {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(io::Error::other("the OTLP sink of item 11 did not listen"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = work.root.join("tracing");
    std::fs::create_dir_all(&dir)?;
    let sockets: [PathBuf; 2] = [dir.join("off.sock"), dir.join("on.sock")];
    let endpoint = format!("http://127.0.0.1:{SINK_PORT}");
    procs
        .0
        .push(daemon(&progs.wasm_cni, &node, &sockets[0], &[])?);
    procs.0.push(daemon(
        &progs.wasm_cni,
        &node,
        &sockets[1],
        &["--otlp-endpoint", &endpoint],
    )?);

    let mut out: [Vec<f64>; 4] = Default::default();
    // One unmeasured round first: artifacts, page cache, the daemons' engines.
    for round in 0..=rounds {
        for k in 0..SIDES.len() {
            let side = (k + round) % SIDES.len();
            crate::proc::check_interrupted()?;
            let state = work.run_dir(&format!("trace{side}"))?;
            // A bridge of each side's own: the sides do not share one.
            let mut entry = bridge_entry(&state);
            entry["bridge"] = json!(format!("trc{side}"));
            let mut conf: Value = wasm_conf(progs, &state, &[entry]);
            let (bin, extra): (&Path, Vec<(&str, &str)>) = match side {
                0 => (&progs.wasm_cni, vec![]),
                1 => (
                    &progs.wasm_cni,
                    vec![
                        ("TRACEPARENT", TRACEPARENT),
                        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                    ],
                ),
                _ => {
                    conf["daemon"] = json!("require");
                    conf["daemonSocket"] = json!(sockets[side - 2]);
                    (&progs.client, vec![("TRACEPARENT", TRACEPARENT)])
                }
            };
            let stdin = serde_json::to_vec(&conf).map_err(io::Error::other)?;
            let ctr = Netns::new()?;
            let netns = ctr.path();
            let cni_path = progs.reference.to_string_lossy().into_owned();
            let cni = |command| Cni {
                command,
                container_id: "bench-trace",
                netns: &netns,
                ifname: "eth0",
                cni_path: &cni_path,
            };
            let add = in_netns(&node, || {
                exec_env(bin, &cni("ADD"), &stdin, &extra)?.ok("ADD (item 11)")
            })?;
            in_netns(&node, || {
                exec_env(bin, &cni("DEL"), &stdin, &extra)?.ok("DEL (item 11)")
            })?;
            ctr.retire();
            let _ = std::fs::remove_dir_all(&state);
            if round > 0 {
                out[side].push(add.wall.as_secs_f64() * 1000.0);
            }
        }
    }
    drop(procs);
    node.retire();
    Ok(out)
}
