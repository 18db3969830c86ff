//! Running plugins the way a container runtime does, one measured process
//! at a time, and the throwaway namespaces and directories they run in.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One process run to completion: wall time from spawn to reaping, and its
/// `wait4` rusage — CPU (user + system) and peak RSS, both covering the
/// process and every descendant it waited for (the reference bridge's
/// host-local, wasm-cni's threads).
#[derive(Debug, Clone)]
pub struct Measured {
    pub wall: Duration,
    pub cpu: Duration,
    pub maxrss_kib: u64,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Measured {
    pub fn ok(self, what: &str) -> io::Result<Self> {
        if self.code == 0 {
            Ok(self)
        } else {
            Err(io::Error::other(format!(
                "{what} failed (exit {}): {}{}",
                self.code,
                self.stdout.trim(),
                self.stderr.trim()
            )))
        }
    }

    pub fn json(&self) -> io::Result<serde_json::Value> {
        serde_json::from_str(&self.stdout)
            .map_err(|e| io::Error::other(format!("result is not JSON ({e}): {}", self.stdout)))
    }
}

/// The CNI environment of one invocation.
pub struct Cni<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    pub cni_path: &'a str,
}

/// Execute `bin` with exactly the CNI environment (plus PATH), `stdin` as
/// its config, in the calling thread's network namespace (see
/// [`in_netns`]).
pub fn exec(bin: &Path, cni: &Cni<'_>, stdin: &[u8]) -> io::Result<Measured> {
    exec_env(bin, cni, stdin, &[])
}

/// [`exec`] with `extra` variables besides the CNI ones.
pub fn exec_env(
    bin: &Path,
    cni: &Cni<'_>,
    stdin: &[u8],
    extra: &[(&str, &str)],
) -> io::Result<Measured> {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .envs(extra.iter().copied())
        .env("PATH", PATH)
        .env("CNI_COMMAND", cni.command)
        .env("CNI_CONTAINERID", cni.container_id)
        .env("CNI_NETNS", cni.netns)
        .env("CNI_IFNAME", cni.ifname)
        .env("CNI_PATH", cni.cni_path);
    measure(bin, cmd, stdin)
}

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Execute `bin` with `args` and only PATH in its environment, measured
/// like [`exec`].
pub fn exec_args(bin: &Path, args: &[&std::ffi::OsStr], stdin: &[u8]) -> io::Result<Measured> {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_clear().env("PATH", PATH);
    measure(bin, cmd, stdin)
}

/// While set, processes run under GNU time, whose peak RSS figure is the
/// one kept (see [`measure`]); their times are not meant to be used.
static RSS_PASS: AtomicBool = AtomicBool::new(false);

pub fn rss_pass(on: bool) {
    RSS_PASS.store(on, Ordering::SeqCst);
}

/// `cmd` under `/usr/bin/time -f %M`, which writes the peak RSS to `out`.
fn under_time(cmd: &Command, out: &Path) -> Command {
    let mut t = Command::new("/usr/bin/time");
    t.arg("-f").arg("%M").arg("-o").arg(out);
    t.arg(cmd.get_program()).args(cmd.get_args());
    t.env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            t.env(k, v);
        }
    }
    t
}

/// Run `cmd` to completion and measure it. Peak RSS: `wait4` reports, for
/// a process that was forked and then exec'd, the larger of its own peak
/// and its parent's resident set when it was forked (the kernel keeps the
/// old mm's high-water mark at exec), so a big parent (this bench) hides
/// small children. The RSS pass runs them under GNU time, a parent of about
/// a megabyte, and takes its figure.
fn measure(bin: &Path, cmd: Command, stdin: &[u8]) -> io::Result<Measured> {
    let rss_file = RSS_PASS.load(Ordering::SeqCst).then(|| {
        static N: AtomicU32 = AtomicU32::new(0);
        std::env::temp_dir().join(format!(
            "wasm-cni-bench-rss-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    });
    let mut cmd = match &rss_file {
        Some(f) => under_time(&cmd, f),
        None => cmd,
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::other(format!("executing {}: {e}", bin.display())))?;
    let pid = child.id() as libc::pid_t;
    if let Some(mut s) = child.stdin.take() {
        // A plugin may exit without reading everything.
        let _ = s.write_all(stdin);
    }
    // Plugins write little to stderr: reading stdout to the end first
    // cannot fill the stderr pipe.
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_string(&mut stdout)?;
    }
    if let Some(mut s) = child.stderr.take() {
        s.read_to_string(&mut stderr)?;
    }
    let (status, usage) = wait4(pid)?;
    let wall = started.elapsed();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let maxrss_kib = match &rss_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let _ = std::fs::remove_file(f);
            text.lines()
                .rev()
                .find_map(|l| l.trim().parse::<u64>().ok())
                .unwrap_or(0)
        }
        None => usage.ru_maxrss as u64,
    };
    Ok(Measured {
        wall,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        maxrss_kib,
        code,
        stdout,
        stderr,
    })
}

fn wait4(pid: libc::pid_t) -> io::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our child, not reaped elsewhere (std's `Child`
        // is never waited on); both out-pointers are valid.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return Ok((status, usage));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM end the bench between runs, so that everything it
/// made is removed on the way out.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn check_interrupted() -> io::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err(io::Error::other("interrupted"))
    } else {
        Ok(())
    }
}

/// User + system CPU time `pid` has used so far, every thread's; None
/// when its `/proc/PID/stat` cannot be read or parsed.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces: utime and stime
    // are the 14th and 15th of the whole line.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let mut tick = || fields.next()?.parse::<u64>().ok();
    let ticks = tick()? + tick()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_micros(ticks * 1_000_000 / hz))
}

/// A number field of `/proc/PID/status` text: `VmRSS:` (kB), `Threads:`.
pub fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Namespaces this process made and has not deleted yet: swept by
/// [`sweep_namespaces`] on the way out whatever happened.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn run_ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Namespaces retired after a successful run, deleted by [`bury`].
static RETIRED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A network namespace named `wcb<pid>-<n>`, deleted on drop unless
/// [`Netns::retire`]d.
pub struct Netns {
    pub name: String,
    file: File,
    retired: bool,
}

impl Netns {
    pub fn new() -> io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "wcb{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run_ip(&["netns", "add", &name])?;
        if let Ok(mut live) = LIVE.lock() {
            live.push(name.clone());
        }
        let ns_path = format!("/run/netns/{name}");
        let file = match File::open(&ns_path) {
            Ok(f) => f,
            Err(e) => {
                let _ = run_ip(&["netns", "del", &name]);
                return Err(e);
            }
        };
        Ok(Netns {
            name,
            file,
            retired: false,
        })
    }

    /// Keep the namespace until the next [`bury`]: deleting a namespace
    /// makes the kernel tear it down in the background (RCU grace periods,
    /// the rtnl lock), which would land in the next measured run.
    pub fn retire(mut self) {
        self.retired = true;
        if let Ok(mut r) = RETIRED.lock() {
            r.push(self.name.clone());
        }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.retired {
            delete(&self.name);
        }
    }
}

fn delete(name: &str) {
    if run_ip(&["netns", "del", name]).is_ok() {
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|n| n != name);
        }
    }
}

/// Delete the retired namespaces, then give the kernel `settle` to finish
/// tearing them down before anything is measured again.
pub fn bury(settle: Duration) {
    let names: Vec<String> = RETIRED
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    if names.is_empty() {
        return;
    }
    for name in &names {
        delete(name);
    }
    std::thread::sleep(settle);
}

/// Delete any namespace of ours still present (after a panic, say).
pub fn sweep_namespaces() {
    let left: Vec<String> = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for name in left {
        let _ = run_ip(&["netns", "del", &name]);
    }
}

/// Run `f` on a thread that has joined `ns`: every process it spawns starts
/// there, as a plugin started by a runtime in the node starts in the node.
pub fn in_netns<T: Send>(ns: &Netns, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let fd = ns.file.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a namespace fd that outlives this scope; it
            // changes only this thread, which ends with the scope.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("bench thread panicked")))
    })
}

/// The bench's work directory: `state/` is a private tmpfs (CNI state
/// normally lives on tmpfs under /run; the reference plugins do not fsync,
/// wasm-cni does, so a disk would measure the disk), `cache/` holds
/// wasm-cni's artifacts on disk as in production. Removed on drop.
pub struct WorkDir {
    pub root: PathBuf,
    pub tmpfs: bool,
}

impl WorkDir {
    pub fn new() -> io::Result<Self> {
        let root = std::env::temp_dir().join(format!("wasm-cni-bench-{}", std::process::id()));
        std::fs::create_dir_all(root.join("state"))?;
        std::fs::create_dir_all(root.join("cache"))?;
        let target = std::ffi::CString::new(root.join("state").as_os_str().as_encoded_bytes())
            .map_err(io::Error::other)?;
        // SAFETY: all pointers are valid NUL-terminated strings.
        let rc = unsafe {
            libc::mount(
                c"wasm-cni-bench".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=512m,mode=0700".as_ptr().cast(),
            )
        };
        Ok(WorkDir {
            root,
            tmpfs: rc == 0,
        })
    }

    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    /// A fresh directory for one run's state.
    pub fn run_dir(&self, tag: &str) -> io::Result<PathBuf> {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = self
            .state()
            .join(format!("{tag}-{}", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.tmpfs {
            if let Ok(target) = std::ffi::CString::new(self.state().as_os_str().as_encoded_bytes())
            {
                // SAFETY: a valid path string.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
