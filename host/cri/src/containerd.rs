//! A containerd of the caller's own, run the way a node runs it for the
//! kubelet, but with every path under one directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Cri;

static INSTANCES: AtomicUsize = AtomicUsize::new(0);

/// The sandbox image's name in containerd (`sandbox_image`).
pub const PAUSE_REF: &str = "localhost/wasm-cni-test/pause:1";

/// An offline pause image: busybox-static's `sleep` as the sandbox's only
/// process (a pod's pause process only has to hold the namespaces), built
/// by buildah from scratch with storage of its own, as an OCI archive at
/// `dir/pause.oci.tar`.
pub fn pause_image(dir: &Path) -> Result<PathBuf, String> {
    let archive = dir.join("pause.oci.tar");
    let storage = dir.join("pause-build");
    let root = storage.join("root");
    let runroot = storage.join("run");
    let buildah = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("buildah")
            .arg("--root")
            .arg(&root)
            .arg("--runroot")
            .arg(&runroot)
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .map_err(|e| format!("buildah: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "buildah {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let result = (|| {
        let c = buildah(&["from", "scratch"])?;
        buildah(&["copy", &c, "/bin/busybox", "/busybox"])?;
        buildah(&[
            "config",
            "--entrypoint",
            r#"["/busybox","sleep","2147483647"]"#,
            &c,
        ])?;
        buildah(&["commit", "-q", &c, PAUSE_REF])?;
        let dest = format!("oci-archive:{}:{PAUSE_REF}", archive.display());
        buildah(&["push", "-q", PAUSE_REF, &dest])?;
        let _ = buildah(&["rm", "-a"]);
        let _ = buildah(&["rmi", "-a", "-f"]);
        Ok(archive)
    })();
    let _ = fs::remove_dir_all(&storage);
    result
}

/// containerd 1.6 with the CRI plugin, in network namespace `netns`, its
/// root, state, socket and logs under `dir`; pod namespaces are mounted
/// under its state dir, not /run/netns. Stopped on drop, after removing
/// every sandbox it still has, and its shims with it.
pub struct Containerd {
    dir: PathBuf,
    child: Option<Child>,
    pub sock: PathBuf,
    /// The cgroup its pods are put under (one per instance, removed on
    /// drop), so that no cgroup of the machine's is created or left.
    cgroup_parent: String,
}

impl Containerd {
    /// Starts containerd, waits until its CRI answers, and imports the
    /// pause image `pause` (from [`pause_image`]).
    pub fn start(
        netns: &str,
        dir: &Path,
        cni_bin_dir: &Path,
        cni_conf_dir: &Path,
        pause: &Path,
    ) -> Result<Containerd, String> {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let sock = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        let d = |p: &str| dir.join(p).display().to_string();
        fs::write(
            &config,
            format!(
                r#"version = 2
root = "{root}"
state = "{state}"
# Only what the CRI's pod lifecycle needs: no other snapshotter, no /opt.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.overlayfs", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_REF}"
  netns_mounts_under_state_dir = true
  # The sandbox's oom_score_adj (-998) is refused on this machine's kernel
  # (EIO); clamp to containerd's own, as containerd does in user namespaces.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
"#,
                root = d("root"),
                state = d("state"),
                sock = sock.display(),
                bin = cni_bin_dir.display(),
                conf = cni_conf_dir.display(),
                runc = d("runc"),
            ),
        )
        .map_err(|e| format!("{}: {e}", config.display()))?;
        let log = fs::File::create(dir.join("containerd.log")).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        // A mount namespace of its own (slave: the node's mounts still show)
        // takes containerd's mounts (rootfs, pod netns) away with it; not
        // `ip netns exec`, whose fresh /sys hides the cgroup mounts runc needs.
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "nsenter"])
            .arg(format!("--net=/run/netns/{netns}"))
            .args(["containerd", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("containerd: {e}"))?;
        let mut me = Containerd {
            dir: dir.to_path_buf(),
            child: Some(child),
            sock,
            cgroup_parent: format!(
                "/wasm-cni-test-{}-{}",
                std::process::id(),
                INSTANCES.fetch_add(1, Ordering::Relaxed)
            ),
        };
        let started = Instant::now();
        loop {
            if let Some(c) = me.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(format!("containerd exited ({st}): {}", me.log()));
                }
            }
            if me.sock.exists() {
                if let Ok(cri) = Cri::connect(&me.sock) {
                    if cri.status().is_ok() {
                        break;
                    }
                }
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("containerd did not answer: {}", me.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = me.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "native",
            &pause.display().to_string(),
        ])?;
        if !out.contains(PAUSE_REF) {
            return Err(format!("pause image import: {out}"));
        }
        Ok(me)
    }

    /// `ctr` against this containerd, in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .map_err(|e| format!("ctr: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("ctr {}: {text}", args.join(" ")))
        }
    }

    pub fn cri(&self) -> Result<Cri, String> {
        Ok(Cri::connect(&self.sock)?.with_cgroup_parent(&self.cgroup_parent))
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// The pid of the containerd process (unshare and nsenter exec it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s). Sandboxes and
    /// their shims stay, as they do when a node's containerd restarts.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every process whose command line names this containerd's socket:
    /// its shims (`-address <sock>`).
    fn shims(&self) -> Vec<i32> {
        let needle = self.sock.as_os_str().as_encoded_bytes().to_vec();
        let mut pids = Vec::new();
        for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(cmd) = fs::read(e.path().join("cmdline")) {
                if cmd.split(|b| *b == 0).any(|a| a == needle.as_slice()) {
                    pids.push(pid);
                }
            }
        }
        pids
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Ok(cri) = self.cri() {
                for p in cri.list_pods().unwrap_or_default() {
                    let _ = cri.stop_pod(&p.id);
                    let _ = cri.remove_pod(&p.id);
                }
            }
        }
        self.stop();
        // Shims and their containers outlive containerd by design; a failed
        // test can leave some. Their sockets are named in the bundles.
        let bundles = self.dir.join("state/io.containerd.runtime.v2.task/k8s.io");
        let sockets: Vec<PathBuf> = fs::read_dir(&bundles)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| fs::read_to_string(e.path().join("address")).ok())
            .filter_map(|a| a.trim().strip_prefix("unix://").map(PathBuf::from))
            .collect();
        for pid in self.shims() {
            // SAFETY: kill(2); the pid names this containerd's socket.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let runc = self.dir.join("runc/k8s.io");
        for e in fs::read_dir(&runc).into_iter().flatten().flatten() {
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&runc)
                .args(["delete", "--force"])
                .arg(e.file_name())
                .output();
        }
        for s in sockets {
            let _ = fs::remove_file(s);
        }
        // cgroup v1 has one tree per controller; v2 one.
        let rel = self.cgroup_parent.trim_start_matches('/');
        let mut dirs = vec![Path::new("/sys/fs/cgroup").join(rel)];
        for e in fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            dirs.push(e.path().join(rel));
        }
        for d in dirs {
            let _ = fs::remove_dir(d);
        }
    }
}
