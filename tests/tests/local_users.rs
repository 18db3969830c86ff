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

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasm_cni_tests::{is_root, wasm_cni_bin, TempDir};

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
    let out = Command::new(wasm_cni_bin())
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
    let tried = Command::new(NOBODY[0])
        .args(&NOBODY[1..])
        .args(["flock", "-n", "-s"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert!(!tried.status.success(), "uid 65534 opened the store's lock");
}
