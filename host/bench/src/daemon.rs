//! The daemon side of the bench: one `wasm-cni daemon`, warm for the whole
//! run, in a node namespace of its own; every daemon-mode run uses a fresh
//! container namespace, fresh state and a bridge of its own name in that
//! node (removed after the run, unmeasured), so the kernel does the same
//! work as for the other sides. The daemon logs each request's CPU time
//! (its request thread's rusage), which is how its share of a call's CPU
//! is counted.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::proc::{Netns, WorkDir};

/// What a daemon's log says about a stretch of requests.
#[derive(Debug, Default, Clone, Copy)]
pub struct Logged {
    pub cpu: Duration,
    /// The ADDs' time from accept to answer, inside the daemon.
    pub add_wall: Duration,
}

pub struct DaemonSide {
    pub node: Netns,
    pub socket: PathBuf,
    log: PathBuf,
    /// How far the log was read.
    read: Mutex<u64>,
    child: Mutex<Option<Child>>,
}

impl DaemonSide {
    pub fn start(wasm_cni: &std::path::Path, work: &WorkDir) -> io::Result<Self> {
        let node = Netns::new()?;
        let dir = work.root.join("daemon");
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("run/daemon.sock");
        let log = dir.join("daemon.log");
        let child = Command::new("ip")
            .args(["netns", "exec", &node.name])
            .arg(wasm_cni)
            .arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .arg("--json-log")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?)
            .spawn()?;
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err(io::Error::other("the daemon did not start listening"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(DaemonSide {
            node,
            socket,
            log,
            read: Mutex::new(0),
            child: Mutex::new(Some(child)),
        })
    }

    /// The daemon's process id (`ip netns exec` execs it in place).
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().ok()?.as_ref().map(Child::id)
    }

    /// `conf` sent to this daemon.
    pub fn conf(&self, mut conf: Value) -> Value {
        conf["daemon"] = json!("require");
        conf["daemonSocket"] = json!(self.socket);
        conf
    }

    /// What the daemon logged for the requests it served since the last
    /// call: their CPU, and the wall time of each ADD inside the daemon.
    pub fn since(&self) -> Logged {
        let Ok(mut read) = self.read.lock() else {
            return Logged::default();
        };
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            if f.seek(SeekFrom::Start(*read)).is_ok() {
                let _ = f.read_to_string(&mut text);
            }
        }
        *read += text.len() as u64;
        let mut out = Logged::default();
        // One JSON object per line; a request's event carries its wall and
        // CPU time.
        for event in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if event["event"] != "request" {
                continue;
            }
            let ms = |key: &str| Duration::from_secs_f64(event[key].as_f64().unwrap_or(0.0) / 1e3);
            out.cpu += ms("cpu_ms");
            if event["verb"] == "ADD" && event["outcome"] == "ok" {
                out.add_wall += ms("ms");
            }
        }
        out
    }

    pub fn cpu_since(&self) -> Duration {
        self.since().cpu
    }

    /// Remove a bridge a daemon-mode run made in the node.
    pub fn remove_link(&self, name: &str) {
        let _ = Command::new("ip")
            .args(["-n", &self.node.name, "link", "del", name])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for DaemonSide {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            if let Some(mut child) = c.take() {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let _ = child.wait();
            }
        }
    }
}
