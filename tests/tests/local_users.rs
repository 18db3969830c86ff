//! What an unprivileged local user of a node (uid 65534) controls, and what
//! it must not gain.
//!
//! It may open any file or directory others may read, and a flock needs no
//! more; bind any TCP port nobody holds (the daemon's metrics port before
//! the daemon starts, or while it restarts); listen on a unix socket of its
//! own; and answer whatever connects as it likes (200 to every probe, made-
//! up figures, a byte at a time). It must not gain: a wait of the host's
//! (the image store's lock: every pull and `images rm`); the daemon's
//! service (CNI requests go on without the metrics listener, which the
//! daemon takes back once the port is free); or a verdict or figure taken
//! for the daemon's (`status` and `probe` check who answers, and bound the
//! whole exchange).
//!
//! The installer's lock is in `install.rs`, with the installer.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use wasm_cni_tests::{fixture, is_root, wasm_cni_bin, Daemon, Invocation, Pod, Sandbox, TempDir};

const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// A process of uid 65534's, killed when dropped.
struct Squatter(Child);

impl Squatter {
    /// `python3 -c CODE ARGS` as uid 65534 inside `netns` (or here), once it
    /// printed its first line.
    fn start(netns: Option<&str>, code: &str, args: &[&str]) -> Squatter {
        use std::io::BufRead;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).args(NOBODY);
                c
            }
            None => {
                let mut c = Command::new(NOBODY[0]);
                c.args(&NOBODY[1..]);
                c
            }
        };
        let mut child = cmd
            .args(["/usr/bin/python3", "-c", code])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the squatter did not start");
        Squatter(child)
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A listener that says yes to everything: 200 and made-up figures.
const YES: &str = r#"
import socket, sys
fam = socket.AF_UNIX if sys.argv[1] == "unix" else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
if fam == socket.AF_UNIX:
    s.bind(sys.argv[2])
    import os; os.chmod(sys.argv[2], 0o666)
else:
    s.bind(("127.0.0.1", int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
body = b"ok\nwasm_cni_requests_total{verb=\"ADD\",outcome=\"ok\",code=\"0\"} 999999\n"
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + body)
    except OSError:
        pass
    c.close()
"#;

/// `wasm-cni ARGS` in `netns`: exit code, stdout, stderr.
fn cli(netns: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", netns])
        .arg(wasm_cni_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A squatter on the daemon's metrics port gets nothing: the daemon starts
/// and serves CNI, says who holds the port, and takes it once it is free;
/// `probe` and `status` refuse the squatter's answers, naming its uid; and
/// a unix socket of the user's own is refused the same way.
#[test]
fn a_squatted_metrics_port_gives_the_squatter_nothing() {
    if !is_root("a_squatted_metrics_port_gives_the_squatter_nothing") {
        return;
    }
    let sb = Sandbox::new("lusq");
    sb.install(&fixture("fx"), "fx");
    let pod = Pod::new("lusq");
    let node = pod.node.name.clone();
    let port = "19761";
    let addr = format!("tcp:127.0.0.1:{port}");
    let squatter = Squatter::start(Some(&node), YES, &["tcp", port]);
    let daemon = Daemon::start(&node, &["--metrics", &addr]);
    // CNI is served all the same.
    let conf = daemon.conf(
        &sb.conf("1.1.0", "lusq", json!([{"type": "fx"}])),
        "require",
    );
    pod.run(Invocation::new("ADD").id("sq1"), &conf).assert_ok();
    let log = daemon.log();
    assert!(
        log.contains(&format!("cannot listen on {addr}")) && log.contains("held by uid 65534"),
        "{log}"
    );
    // The squatter's "200" is not the daemon's.
    let (code, out, err) = cli(&node, &["probe", "ready", "--metrics", &addr]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("served by uid 65534"), "{err}");
    assert!(!out.contains("ok"), "{out}");
    let file = sb.dir.join("lusq.conf");
    std::fs::write(&file, conf.to_string()).unwrap();
    let (_, text, _) = cli(
        &node,
        &[
            "status",
            "--conf",
            file.to_str().unwrap(),
            "--metrics",
            &addr,
        ],
    );
    assert!(text.contains("served by uid 65534"), "{text}");
    assert!(!text.contains("999999"), "{text}");

    // Gone: the daemon takes its port within its retry period.
    drop(squatter);
    let started = Instant::now();
    loop {
        let (code, out, err) = cli(&node, &["probe", "live", "--metrics", &addr]);
        if code == 0 {
            assert_eq!(out.trim(), "ok");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{err}\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(daemon.log().contains(&format!("listening on {addr} now")));
    let (code, out, err) = cli(&node, &["probe", "ready", "--metrics", &addr]);
    assert_eq!(code, 0, "{out}{err}");
    pod.run(Invocation::new("DEL").id("sq1"), &conf).assert_ok();

    // A unix socket of the user's own is not the daemon's either.
    let dir = TempDir::new("lusq-unix");
    let own = dir.join("theirs");
    std::fs::create_dir(&own).unwrap();
    chown_nobody(&own);
    let socket = own.join("metrics.sock");
    let _theirs = Squatter::start(Some(&node), YES, &["unix", socket.to_str().unwrap()]);
    let unix = format!("unix:{}", socket.display());
    let (code, out, err) = cli(&node, &["probe", "ready", "--metrics", &unix]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("served by uid 65534"), "{err}");
}

fn chown_nobody(p: &Path) {
    let s = Command::new("chown")
        .arg("65534:65534")
        .arg(p)
        .status()
        .unwrap();
    assert!(s.success());
}

/// uid 65534 holds a flock on everything of an image store it can open
/// (the directory, and the `.lock` older versions made readable by all):
/// `images rm` waits for none of it, and the store's own lock is a file
/// uid 65534 cannot open.
#[test]
fn no_local_user_can_hold_the_image_stores_lock() {
    if !is_root("no_local_user_can_hold_the_image_stores_lock") {
        return;
    }
    let dir = TempDir::new("luimg");
    let store = dir.join("images");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join(".lock"), b"").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(store.join(".lock"), std::fs::Permissions::from_mode(0o644)).unwrap();
    const HOLD: &str = r#"
import fcntl, os, sys
held = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]
for fd in held:
    fcntl.flock(fd, fcntl.LOCK_SH)
print("ready", flush=True)
import time; time.sleep(600)
"#;
    let lock_old = store.join(".lock");
    let _held = Squatter::start(
        None,
        HOLD,
        &[store.to_str().unwrap(), lock_old.to_str().unwrap()],
    );
    let started = Instant::now();
    // Bounded here, as a test of a wait must be: the old store waited for
    // the holder without end.
    let out = Command::new("timeout")
        .arg("20")
        .arg(wasm_cni_bin())
        .args(["images", "rm", "--image-dir"])
        .arg(&store)
        .arg("127.0.0.1:5000/cni/absent@sha256:".to_string() + &"0".repeat(64))
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no image"), "{err}");
    let lock = store.join(".wasm-cni.lock");
    let meta = std::fs::metadata(&lock).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(
        !wasm_cni_tests::nobody_can_flock(&lock),
        "uid 65534 opened the store's lock"
    );
    // The control: the old `.lock`, open to all, it can.
    assert!(wasm_cni_tests::nobody_can_flock(&lock_old));
}
