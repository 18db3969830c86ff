//! Test harness: run the real `wasm-cni` binary the way a runtime does, with
//! components built by `cargo xtask plugins`, in throwaway directories and
//! (for kernel tests) throwaway network namespaces.
//!
//! Paths can be overridden: `WASM_CNI_BIN` (the binary), `WASM_CNI_COMPONENTS`
//! (the directory `cargo xtask plugins` wrote).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod hostile;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The `wasm-cni` binary under test.
pub fn wasm_cni_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WASM_CNI_BIN") {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    // `cargo xtask` puts the static build in target/bin; a plain `cargo
    // build` the dynamic one in target/release. The newer one is what was
    // built last.
    ["bin", "release", "debug"]
        .iter()
        .map(|dir| root.join("target").join(dir).join("wasm-cni"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!("wasm-cni binary not found: run `cargo xtask test`, `cargo build --release -p wasm-cni`, or set WASM_CNI_BIN")
        })
}

/// Directory of built components.
pub fn components_dir() -> PathBuf {
    std::env::var_os("WASM_CNI_COMPONENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target-guest").join("components"))
}

/// Path of a fixture component, failing loudly if it was not built.
pub fn fixture(name: &str) -> PathBuf {
    let p = components_dir()
        .join("fixtures")
        .join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} missing: run `cargo xtask plugins`",
        p.display()
    );
    p
}

/// Path of a plugin component, failing loudly if it was not built.
pub fn plugin(name: &str) -> PathBuf {
    let p = components_dir().join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} missing: run `cargo xtask plugins`",
        p.display()
    );
    p
}

/// `wasm-cni plugin test COMPONENT ARGS…` as a plugin author runs it (no
/// `CNI_COMMAND` in its environment): its exit code and everything it
/// printed, stdout then stderr.
pub fn plugin_test(component: &Path, args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::new(wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(component)
        .args(args)
        .env_remove("CNI_COMMAND")
        .output()
        .expect("run wasm-cni plugin test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A unique name for this process and call: tests run in parallel.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(unique(&format!("wasm-cni-test-{tag}-")));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether this test run serves every chain through a daemon
/// (`WASM_CNI_TEST_DAEMON=1`): the same tests, the other front door.
pub fn daemon_mode() -> bool {
    std::env::var_os("WASM_CNI_TEST_DAEMON").is_some_and(|v| v == "1")
}

/// A `wasm-cni daemon` started for a test inside a network namespace of
/// the test's (the node it serves), listening in a temporary directory;
/// stopped with SIGTERM when dropped (SIGKILL if it does not stop).
pub struct Daemon {
    pub dir: TempDir,
    pub socket: PathBuf,
    child: Option<std::process::Child>,
    /// How it was started, for [`Daemon::restart`].
    netns: String,
    command: Vec<String>,
}

impl Daemon {
    /// Start a daemon in `netns` with `args` and wait until it answers.
    pub fn start(netns: &str, args: &[&str]) -> Self {
        Self::start_wrapped(netns, &[], args)
    }

    /// [`Daemon::start`] with `wrapper` (a command that execs the rest,
    /// such as `unshare -m`) in front of the binary.
    pub fn start_wrapped(netns: &str, wrapper: &[&str], args: &[&str]) -> Self {
        let dir = TempDir::new("daemon");
        let socket = dir.join("run/daemon.sock");
        let mut command: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        command.push(wasm_cni_bin().to_string_lossy().into_owned());
        command.extend(["daemon".into(), "--socket".into()]);
        command.push(socket.to_string_lossy().into_owned());
        command.extend(args.iter().map(|s| s.to_string()));
        let mut d = Daemon {
            dir,
            socket,
            child: None,
            netns: netns.to_string(),
            command,
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .expect("daemon log");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .args(&self.command)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn the daemon");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Start it again, as before, on the same socket (after `stop_with`).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop it first");
        self.spawn();
    }

    /// Start it again from `bin` instead (an upgrade), after `stop_with`.
    pub fn restart_as(&mut self, bin: &Path) {
        let old = wasm_cni_bin().to_string_lossy().into_owned();
        let new = bin.to_string_lossy().into_owned();
        for arg in &mut self.command {
            if *arg == old {
                *arg = new.clone();
            }
        }
        self.restart();
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("the daemon exited ({status}): {}", self.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the daemon did not listen: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// `conf` with `"daemon": mode` and this daemon's socket.
    pub fn conf(&self, conf: &Value, mode: &str) -> Value {
        let mut c = conf.clone();
        c["daemon"] = mode.into();
        c["daemonSocket"] = self.socket.to_string_lossy().into_owned().into();
        c
    }

    /// Send `signal` and wait for the exit status.
    pub fn stop_with(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                return child.wait().expect("wait for the daemon");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_with("TERM");
        }
    }
}

/// A plugin directory, state directory and cache directory for one test.
/// In daemon mode it also has a daemon, in a namespace of its own, that its
/// configs name (`Pod::run` sends a pod's calls to the pod's node daemon).
pub struct Sandbox {
    pub daemon: Option<Daemon>,
    pub dir: TempDir,
    /// The namespace the sandbox's daemon runs in; dropped after it.
    _daemon_ns: Option<Netns>,
}

impl Sandbox {
    pub fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        for sub in ["plugins", "state", "cache"] {
            std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
        let (daemon, ns) = if daemon_mode() {
            let ns = Netns::new("sbd");
            (Some(Daemon::start(&ns.name, &[])), Some(ns))
        } else {
            (None, None)
        };
        Sandbox {
            daemon,
            dir,
            _daemon_ns: ns,
        }
    }
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.join("plugins")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }
    /// Install a component file as plugin `type`.
    pub fn install(&self, component: &Path, plugin_type: &str) -> &Self {
        std::fs::copy(
            component,
            self.plugin_dir().join(format!("{plugin_type}.wasm")),
        )
        .expect("install component");
        self
    }
    /// A `wasm-cni` plugin config for `chain` with this sandbox's dirs
    /// (and, in daemon mode, its daemon).
    pub fn conf(&self, cni_version: &str, name: &str, chain: Value) -> Value {
        let conf = serde_json::json!({
            "cniVersion": cni_version,
            "name": name,
            "type": "wasm-cni",
            "pluginDir": self.plugin_dir(),
            "stateDir": self.state_dir(),
            "cacheDir": self.cache_dir(),
            "chain": chain,
        });
        match &self.daemon {
            Some(d) => d.conf(&conf, "require"),
            None => conf,
        }
    }
}

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {:?}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
    /// The CNI error code, asserting the process failed properly.
    pub fn error_code(&self) -> u64 {
        assert_eq!(self.code, 1, "expected failure, got {self:?}");
        self.json()["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("no code in {}", self.stdout))
    }
    pub fn error_msg(&self) -> String {
        self.json()["msg"].as_str().unwrap_or_default().to_string()
    }
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, 0, "expected success: {self:?}");
        self
    }
}

/// Run `wasm-cni` with exactly `env` (plus PATH) and `stdin`.
pub fn run_with_env(env: &[(&str, &str)], stdin: &[u8]) -> Output {
    run_in(None, env, stdin)
}

/// Run `wasm-cni`, optionally inside network namespace `netns` (by name,
/// via `ip netns exec`), with exactly `env` (plus PATH) and `stdin`.
pub fn run_in(netns: Option<&str>, env: &[(&str, &str)], stdin: &[u8]) -> Output {
    run_wrapped(netns, &[], env, stdin)
}

/// [`run_in`], with `wrapper` (a command and its arguments, such as
/// `prlimit --nofile=64`) in front of the binary.
pub fn run_wrapped(
    netns: Option<&str>,
    wrapper: &[&str],
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Output {
    run_program(&wasm_cni_bin(), netns, wrapper, env, stdin)
}

/// Spawn `cmd`, whose program a test may have just copied: another test
/// thread's fork may still hold the copy's write descriptor until its exec
/// closes it (ETXTBSY, the kernel race Go's os/exec retries too). Give that
/// a second; anything else fails at once.
pub fn spawn_copied(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// [`Command::output`] through [`spawn_copied`].
pub fn output_of_copied(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn_copied(cmd)?.wait_with_output()
}

/// [`run_wrapped`] for another program than `wasm-cni` (the thin client
/// laid out as a node has it, say).
pub fn run_program(
    bin: &Path,
    netns: Option<&str>,
    wrapper: &[&str],
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Output {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Some(ns) = netns {
        argv.extend(["ip", "netns", "exec", ns].map(Into::into));
    }
    argv.extend(wrapper.iter().map(Into::into));
    argv.push(bin.into());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // Let a developer see the host's logs of a failing test.
        .env(
            "WASM_CNI_LOG",
            std::env::var("WASM_CNI_LOG").unwrap_or_default(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = spawn_copied(&mut cmd).expect("spawn wasm-cni");
    if let Some(mut s) = child.stdin.take() {
        // The binary may exit before reading everything (e.g. VERSION).
        let _ = s.write_all(stdin);
    }
    let out = child.wait_with_output().expect("wait for wasm-cni");
    Output {
        code: out
            .status
            .code()
            .unwrap_or_else(|| panic!("wasm-cni died from a signal: {:?}", out.status)),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// Standard CNI environment for a verb.
pub struct Invocation<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: String,
    pub ifname: &'a str,
    pub args: &'a str,
    pub extra: Vec<(&'a str, &'a str)>,
}

impl<'a> Invocation<'a> {
    pub fn new(command: &'a str) -> Self {
        Invocation {
            command,
            container_id: "ctr1",
            netns: "/run/netns/none".into(),
            ifname: "eth0",
            args: "",
            extra: Vec::new(),
        }
    }
    pub fn id(mut self, id: &'a str) -> Self {
        self.container_id = id;
        self
    }
    pub fn netns(mut self, ns: impl Into<String>) -> Self {
        self.netns = ns.into();
        self
    }
    pub fn ifname(mut self, ifname: &'a str) -> Self {
        self.ifname = ifname;
        self
    }
    pub fn env(mut self, k: &'a str, v: &'a str) -> Self {
        self.extra.push((k, v));
        self
    }
    pub fn run(&self, conf: &Value) -> Output {
        self.run_in(None, conf)
    }
    pub fn run_in(&self, netns_name: Option<&str>, conf: &Value) -> Output {
        self.run_wrapped(netns_name, &[], conf)
    }
    /// Run with `wrapper` in front of the binary (see [`run_wrapped`]).
    pub fn run_wrapped(&self, netns_name: Option<&str>, wrapper: &[&str], conf: &Value) -> Output {
        let mut env = vec![
            ("CNI_COMMAND", self.command),
            ("CNI_CONTAINERID", self.container_id),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_IFNAME", self.ifname),
            ("CNI_ARGS", self.args),
            ("CNI_PATH", "/usr/lib/cni"),
        ];
        env.extend(self.extra.iter().copied());
        let bytes = serde_json::to_vec(conf).expect("serialise conf");
        run_wrapped(netns_name, wrapper, &env, &bytes)
    }
}

/// Lines the plugins logged through the `log` import, in order, as
/// `(plugin type, message)`.
pub fn plugin_logs(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("wasm-cni[")?;
            let (plugin, rest) = rest.split_once("] ")?;
            let (_, msg) = rest.split_once(": ")?;
            Some((plugin.to_string(), msg.to_string()))
        })
        .collect()
}

/// True when running as root; kernel tests need it. Prints why a test is
/// skipped otherwise (CI runs as root, so nothing is skipped there).
pub fn is_root(test: &str) -> bool {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    let root = String::from_utf8_lossy(&out.stdout).trim() == "0";
    if !root {
        eprintln!("SKIP {test}: needs root for network namespaces");
    }
    root
}

/// Whether the kernel can make links of a module's kind (`8021q` for
/// vlan, `ipvlan`); if not, says that `test` skips and why.
pub fn has_module(test: &str, module: &str) -> bool {
    let there = std::path::Path::new("/sys/module").join(module).exists()
        || Command::new("modprobe")
            .arg(module)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !there {
        eprintln!("SKIP {test}: this kernel has no {module} module");
    }
    there
}

/// Run a command, panicking with its output if it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A virtualenv under target/`name` with `package` from PyPI, made on
/// first use (the tests install what they need); its directory.
pub fn python_venv(name: &str, package: &str) -> PathBuf {
    // Tests of one binary run as threads: one makes it, the others wait.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = workspace_root().join("target").join(name);
    let done = venv.join(".installed");
    if std::fs::read_to_string(&done).ok().as_deref() != Some(package) {
        sh(&["python3", "-m", "venv", venv.to_str().expect("utf-8 path")]);
        sh(&[
            venv.join("bin/pip").to_str().expect("utf-8 path"),
            "install",
            "--quiet",
            package,
        ]);
        std::fs::write(&done, package).expect("mark the virtualenv");
    }
    venv
}

/// A network namespace made for one test, deleted on drop (also when the
/// test fails), with everything in it.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        // Names stay short: they also prefix interface names in some tests.
        let name = unique(&format!("wc{tag}"));
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Run a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Like `exec` but returns success instead of panicking.
    pub fn try_exec(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Links, addresses, routes (all tables) and the sysctls that plugins
    /// touch, as comparable text: equal snapshots mean nothing changed.
    /// IPv6 link-local addresses and their routes are left out: the kernel
    /// makes them itself, asynchronously (DAD), whoever brought a link up.
    pub fn snapshot(&self) -> String {
        let mut out = String::new();
        // A bridge's timers tick on their own.
        for line in self.exec(&["ip", "-d", "-o", "link", "show"]).lines() {
            let mut words = line.split_whitespace().peekable();
            while let Some(w) = words.next() {
                out += w;
                out.push(' ');
                if w.ends_with("_timer") {
                    words.next();
                }
            }
            out.push('\n');
        }
        let kernel_made = |l: &&str| l.contains("fe80:") || l.contains("ff00::/8");
        for cmd in [
            &["ip", "-o", "addr", "show"][..],
            &["ip", "route", "show", "table", "all"],
            &["ip", "-6", "route", "show", "table", "all"],
        ] {
            for line in self.exec(cmd).lines().filter(|l| !kernel_made(l)) {
                out += line;
                out.push('\n');
            }
        }
        for key in [
            "net.ipv4.ip_forward",
            "net.ipv4.conf.all.forwarding",
            "net.ipv4.conf.lo.arp_notify",
        ] {
            out += &format!("{key}={}", self.exec(&["sysctl", "-n", key]));
        }
        out
    }

    /// `ip -j link show DEV` as JSON, or None if the link does not exist.
    pub fn link(&self, dev: &str) -> Option<Value> {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &self.name, "ip", "-j", "-d", "link", "show", "dev", dev,
            ])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v.as_array()?.first().cloned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A node namespace and a container namespace, for running `wasm-cni` the
/// way a runtime would: inside the node, pointing at the container. In
/// daemon mode a daemon runs in the node and serves the pod's calls.
pub struct Pod {
    pub daemon: Option<Daemon>,
    pub node: Netns,
    pub ctr: Netns,
}

impl Pod {
    pub fn new(tag: &str) -> Self {
        let node = Netns::new(&format!("{tag}n"));
        let daemon = daemon_mode().then(|| Daemon::start(&node.name, &[]));
        Pod {
            daemon,
            node,
            ctr: Netns::new(&format!("{tag}c")),
        }
    }

    /// `conf` as this pod's calls send it: to the node's daemon in daemon
    /// mode, unchanged otherwise.
    pub fn conf(&self, conf: &Value) -> Value {
        match &self.daemon {
            Some(d) if conf.get("daemon").is_some() => d.conf(conf, "require"),
            _ => conf.clone(),
        }
    }

    /// Run a verb of `wasm-cni` inside the node namespace for the container.
    pub fn run(&self, inv: Invocation<'_>, conf: &Value) -> Output {
        inv.netns(self.ctr.path())
            .run_in(Some(&self.node.name), &self.conf(conf))
    }
}

/// A real etcd (Debian `etcd-server`) for one test, in a namespace of its
/// own with a temporary data directory, stopped (and everything it made
/// deleted) on drop. Node namespaces reach it over a bridge in its
/// namespace (`join`); the client URL is [`Etcd::endpoint`].
pub struct Etcd {
    pub ns: Netns,
    pub dir: TempDir,
    child: Option<std::process::Child>,
    joined: std::sync::atomic::AtomicU8,
}

/// The cluster network between the etcd namespace and the nodes.
const ETCD_ADDR: &str = "10.213.0.1";

impl Etcd {
    pub fn start() -> Self {
        let ns = Netns::new("etcd");
        ns.exec(&["ip", "link", "add", "cl0", "type", "bridge"]);
        ns.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{ETCD_ADDR}/24"),
            "dev",
            "cl0",
        ]);
        ns.exec(&["ip", "link", "set", "cl0", "up"]);
        let mut e = Etcd {
            ns,
            dir: TempDir::new("etcd"),
            child: None,
            joined: std::sync::atomic::AtomicU8::new(0),
        };
        e.spawn();
        e
    }

    /// The URL nodes use.
    pub fn endpoint(&self) -> String {
        format!("http://{ETCD_ADDR}:2379")
    }

    /// A `store` object for a wasm-cni config naming this etcd.
    pub fn store(&self, node: &str, timeout_ms: u64) -> Value {
        serde_json::json!({"type": "etcd", "endpoints": [self.endpoint()],
            "prefix": "/wasm-cni-test", "timeoutMs": timeout_ms, "node": node})
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("etcd log");
        let data = self.dir.join("data");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns.name,
                "etcd",
                "--name",
                "t",
                "--data-dir",
            ])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &format!("http://{ETCD_ADDR}:2379,http://127.0.0.1:2379"),
                "--advertise-client-urls",
                &format!("http://{ETCD_ADDR}:2379"),
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "t=http://127.0.0.1:2380",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd (cargo xtask setup installs etcd-server)");
        self.child = Some(child);
        let started = Instant::now();
        while !self.ns.try_exec(&[
            "etcdctl",
            "--endpoints",
            "http://127.0.0.1:2379",
            "endpoint",
            "health",
        ]) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "etcd did not come up: {}",
                std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Connect `node` to the cluster network (its address 10.213.0.N).
    pub fn join(&self, node: &Netns) {
        let n = self
            .joined
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 10;
        let port = format!("p{n}");
        self.ns.exec(&[
            "ip", "link", "add", &port, "type", "veth", "peer", "name", "cl0", "netns", &node.name,
        ]);
        self.ns
            .exec(&["ip", "link", "set", &port, "master", "cl0", "up"]);
        node.exec(&[
            "ip",
            "addr",
            "add",
            &format!("10.213.0.{n}/24"),
            "dev",
            "cl0",
        ]);
        node.exec(&["ip", "link", "set", "cl0", "up"]);
    }

    /// `etcdctl ARGS` against this etcd; its stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let mut full = vec!["etcdctl", "--endpoints", "http://127.0.0.1:2379"];
        full.extend_from_slice(args);
        self.ns.exec(&full)
    }

    /// Every key under `prefix` with its value.
    pub fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        let out = self.ctl(&["get", "--prefix", prefix]);
        let lines: Vec<&str> = out.lines().collect();
        lines
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].to_string(), c[1].to_string()))
            .collect()
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// SIGSTOP: etcd keeps its sockets open and answers nothing.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL and wait: gone, mid-whatever.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
    }
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 signed by it
/// (`server.pem`, `server.key`), in `dir`, for a TLS server of a test.
pub fn tls_certs(dir: &Path) {
    tls_certs_for(dir, &["127.0.0.1"]);
}

/// [`tls_certs`] for a server at these IP addresses.
pub fn tls_certs_for(dir: &Path, ips: &[&str]) {
    let d = dir.display().to_string();
    let names: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
            names.join(",")
        ),
    )
    .expect("server.ext");
    for cmd in [
        format!("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=wasm-cni-test-ca -keyout {d}/ca.key -out {d}/ca.pem"),
        format!("openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout {d}/server.key -out {d}/server.csr"),
        format!("openssl x509 -req -in {d}/server.csr -CA {d}/ca.pem -CAkey {d}/ca.key -CAcreateserial -days 1 -extfile {d}/server.ext -out {d}/server.pem"),
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        sh(&args);
    }
}

/// A network as a runtime calls it once installed: the conflist's
/// `wasm-cni` entry as stdin (with `cniVersions`, from which the plugin
/// picks as libcni 1.2 would), the `wasm-cni` in `bin_dir`, run in the node
/// namespace with `CNI_PATH` = `bin_dir`.
pub struct Installed {
    client: PathBuf,
    node: String,
    cni_path: String,
    stdin: Vec<u8>,
}

impl Installed {
    pub fn new(bin_dir: &Path, node: &Netns, conflist: &Path) -> Self {
        let text = std::fs::read(conflist).expect("the conflist");
        let conflist: Value = serde_json::from_slice(&text).expect("a JSON conflist");
        let mut stdin = conflist["plugins"][0].clone();
        for key in ["name", "cniVersion", "cniVersions"] {
            if let Some(v) = conflist.get(key) {
                stdin[key] = v.clone();
            }
        }
        Installed {
            client: bin_dir.join("wasm-cni"),
            node: node.name.clone(),
            cni_path: bin_dir.display().to_string(),
            stdin: serde_json::to_vec(&stdin).expect("JSON"),
        }
    }

    /// `verb` for container `id` in the namespace at `netns`, ifname eth0.
    pub fn call(&self, verb: &str, id: &str, netns: &str) -> Output {
        let env = [
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", self.cni_path.as_str()),
        ];
        run_program(&self.client, Some(&self.node), &[], &env, &self.stdin)
    }
}

/// A stand-in for the API server (tests/fixtures/kube-apiserver.py; no
/// kube-apiserver can be installed here): HTTPS on 127.0.0.1:6443 in `ns`,
/// with a CA and a token of this test.
pub struct KubeApi {
    child: std::process::Child,
    pub dir: TempDir,
}

impl KubeApi {
    pub fn start(ns: &Netns) -> KubeApi {
        let dir = TempDir::new("kube-api");
        tls_certs(dir.path());
        std::fs::write(dir.join("token"), "test-token-1\n").expect("token");
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "python3"])
            .arg(workspace_root().join("tests/fixtures/kube-apiserver.py"))
            .arg("6443")
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .arg("test-token-1")
            .stdout(std::fs::File::create(dir.join("requests.log")).expect("requests.log"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3");
        let api = KubeApi { child, dir };
        let started = std::time::Instant::now();
        while !std::fs::read_to_string(api.dir.join("requests.log"))
            .unwrap_or_default()
            .contains("listening")
        {
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        api
    }

    pub fn requests(&self) -> String {
        std::fs::read_to_string(self.dir.join("requests.log")).unwrap_or_default()
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real registry (Debian `docker-registry`, distribution 2.8) for one
/// test, inside the test's node namespace on 127.0.0.1, storing under a
/// temporary directory; optionally behind htpasswd (Basic) authentication.
/// Stopped on drop.
pub struct Registry {
    pub dir: TempDir,
    pub addr: String,
    ns: String,
    child: Option<std::process::Child>,
}

impl Registry {
    pub fn start(ns: &Netns, user: Option<(&str, &str)>) -> Self {
        Self::start_with(ns, user, false)
    }

    /// Over TLS with a certificate for 127.0.0.1 from a CA made for the
    /// test: [`Registry::ca`] is the file to trust.
    pub fn start_tls(ns: &Netns) -> Self {
        Self::start_with(ns, None, true)
    }

    /// The CA certificate of a TLS registry.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn start_with(ns: &Netns, user: Option<(&str, &str)>, tls: bool) -> Self {
        let dir = TempDir::new("registry");
        let addr = "127.0.0.1:5000".to_string();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {addr}\n",
            dir.join("data").display()
        );
        if tls {
            let d = dir.path().display().to_string();
            tls_certs(dir.path());
            config +=
                &format!("  tls:\n    certificate: {d}/server.pem\n    key: {d}/server.key\n");
        }
        if let Some((u, p)) = user {
            let line = sh(&["htpasswd", "-Bbn", u, p]);
            std::fs::write(dir.join("htpasswd"), line.trim()).expect("htpasswd file");
            config += &format!(
                "auth:\n  htpasswd:\n    realm: wasm-cni-test\n    path: {}\n",
                dir.join("htpasswd").display()
            );
        }
        std::fs::write(dir.join("config.yml"), config).expect("registry config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("registry log");
        // The access log goes to stdout, the rest to stderr.
        let access = log.try_clone().expect("registry log");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "docker-registry", "serve"])
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(access)
            .stderr(log)
            .spawn()
            .expect("spawn docker-registry (cargo xtask setup installs it)");
        let r = Registry {
            dir,
            addr,
            ns: ns.name.clone(),
            child: Some(child),
        };
        let started = Instant::now();
        while !r.accepts() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not come up: {}",
                r.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn accepts(&self) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, "bash", "-c"])
            .arg("exec 3<>/dev/tcp/127.0.0.1/5000")
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// HTTP requests the registry has logged so far.
    pub fn requests(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains(" HTTP/1.1\" "))
            .count()
    }

    /// Where the registry keeps a blob's bytes (distribution's filesystem
    /// layout), for tampering with.
    pub fn blob_data(&self, hex: &str) -> PathBuf {
        self.dir.join(format!(
            "data/docker/registry/v2/blobs/sha256/{}/{hex}/data",
            &hex[..2]
        ))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether uid 65534 can take a shared flock on `path` at once: what any
/// local user could do to a lock file it can open.
pub fn nobody_can_flock(path: &Path) -> bool {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["flock", "-n", "-s"])
        .arg(path)
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success())
}
