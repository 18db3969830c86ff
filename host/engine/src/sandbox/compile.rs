//! Compiling a component, bounded: its size, and the CPU time and memory
//! Cranelift may spend on it. A crafted component costs compile time and
//! memory about linearly in its size (14 MB took 9.6 s and 195 MB here),
//! and `pull`, `compile` and the first ADD without a cached artifact compile
//! whatever arrives; so the binary compiles in a child process of its own
//! (`wasm-cni __compile`, the same executable), under `RLIMIT_DATA`, killed
//! once it has used `compileMs` of CPU time: a compile that runs away costs
//! the node that bound and no more, and leaves no thread behind in a
//! daemon. CPU time, not wall time, is what a component is judged by: many
//! pods starting at once on a busy node must not make a good component
//! fail for good. A wall-clock bound (several times as long) still ends a
//! compile that cannot get the CPU, as "try again later". The child reads
//! the component on stdin and writes the precompiled artifact on stdout;
//! the parent loads it as wasmtime's own serialised form (its header is
//! checked against the engine).
//!
//! Where no executable was set up for this (the library in tests), compiling
//! happens in-process, still bounded by size.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::component::Component;
use wasmtime::Engine;

use wasm_cni_protocol::config::Limits as ConfLimits;

/// Components larger than this are refused before they are read.
pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 16 << 20;
/// Compiling one component may take this much CPU time.
pub const DEFAULT_COMPILE_MS: u64 = 10_000;
/// The wall-clock bound is this many times the CPU bound, plus
/// [`WALL_SLACK`]: a compile waiting for the CPU on a busy node.
const WALL_FACTOR: u32 = 4;
const WALL_SLACK: Duration = Duration::from_secs(5);
/// How often the child's CPU time is read.
const POLL: Duration = Duration::from_millis(5);
/// And this much memory (`RLIMIT_DATA` of the compiling process).
pub const DEFAULT_COMPILE_MEMORY_BYTES: u64 = 512 << 20;

/// The hidden subcommand the child runs.
pub const CHILD_COMMAND: &str = "__compile";

/// The bounds of loading one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    pub max_bytes: u64,
    pub timeout: Duration,
    pub memory_bytes: u64,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            max_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            timeout: Duration::from_millis(DEFAULT_COMPILE_MS),
            memory_bytes: DEFAULT_COMPILE_MEMORY_BYTES,
        }
    }
}

impl CompileLimits {
    /// A chain entry's `wasm` keys over `base`.
    pub fn resolve(limits: &ConfLimits, base: &CompileLimits) -> Self {
        CompileLimits {
            max_bytes: limits.max_component_bytes.unwrap_or(base.max_bytes),
            timeout: limits
                .compile_ms
                .map_or(base.timeout, Duration::from_millis),
            memory_bytes: limits.compile_memory_bytes.unwrap_or(base.memory_bytes),
        }
    }
}

/// Why a component was not compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{size} bytes is over the limit of {max} (wasm.maxComponentBytes)")]
    TooLarge { size: u64, max: u64 },
    #[error("compiling took more than {ms} ms of CPU time (wasm.compileMs)")]
    Timeout { ms: u128 },
    /// The wall-clock bound passed first: the node was too busy.
    #[error("compiling did not finish within {ms} ms: the node is too busy; try again later")]
    Overloaded { ms: u128 },
    #[error("compiling needed more than {bytes} bytes of memory (wasm.compileMemoryBytes)")]
    Memory { bytes: u64 },
    /// Not a valid component, or the compiler failed: its words.
    #[error("{0}")]
    Invalid(String),
    #[error("the compiler process: {0}")]
    Process(String),
}

impl CompileError {
    /// A bound was hit (as opposed to the component being invalid).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            CompileError::TooLarge { .. }
                | CompileError::Timeout { .. }
                | CompileError::Memory { .. }
                | CompileError::Overloaded { .. }
        )
    }

    /// Worth trying again later (as opposed to a bound the component
    /// passes whenever it is compiled).
    pub fn is_transient(&self) -> bool {
        matches!(self, CompileError::Overloaded { .. })
    }
}

impl CompileLimits {
    /// The wall-clock bound of one compile (and of waiting for another
    /// process's compile of the same component).
    pub fn wall(&self) -> Duration {
        self.timeout * WALL_FACTOR + WALL_SLACK
    }
}

/// CPU time (user + system) process `pid` has used so far.
fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces and parentheses):
    // state is the first, utime the 12th, stime the 13th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    Some(Duration::from_millis(ticks * 1000 / hz))
}

static COMPILER: OnceLock<PathBuf> = OnceLock::new();

/// Compile in a child process of this executable from now on (the
/// `wasm-cni` binary calls this first thing; it answers [`CHILD_COMMAND`]).
pub fn use_child_process() {
    compile_with(PathBuf::from("/proc/self/exe"));
}

/// Compile in child processes of `exe`, a `wasm-cni` binary (the bench
/// measures what the binary does this way).
pub fn compile_with(exe: PathBuf) {
    let _ = COMPILER.set(exe);
}

/// Compile `bytes` for `engine` within `limits`.
pub fn compile(
    engine: &Engine,
    bytes: &[u8],
    limits: &CompileLimits,
) -> Result<Component, CompileError> {
    let size = bytes.len() as u64;
    if size > limits.max_bytes {
        return Err(CompileError::TooLarge {
            size,
            max: limits.max_bytes,
        });
    }
    let Some(exe) = COMPILER.get() else {
        return Component::new(engine, bytes).map_err(|e| CompileError::Invalid(format!("{e:#}")));
    };
    let artifact = in_child(exe, bytes, limits)?;
    // SAFETY: the bytes are what this very executable (/proc/self/exe, the
    // running image even if its file was replaced) wrote as the
    // precompiled form of `bytes` for an engine of the same configuration,
    // read whole from its stdout; deserializing checks the header against
    // `engine`. This is the trust a compile in this process would have.
    unsafe { Component::deserialize(engine, &artifact) }
        .map_err(|e| CompileError::Process(format!("its artifact does not load: {e:#}")))
}

/// Run the compiler child: component in, artifact out, killed at the
/// deadline.
fn in_child(exe: &PathBuf, bytes: &[u8], limits: &CompileLimits) -> Result<Vec<u8>, CompileError> {
    use std::os::unix::process::CommandExt;
    let proc_err = |e: std::io::Error| CompileError::Process(e.to_string());
    let memory = limits.memory_bytes;
    let parent = std::process::id();
    // A CPU bound as a backstop to the wall-clock kill (every core busy).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let cpu = limits
        .timeout
        .as_secs()
        .saturating_add(1)
        .saturating_mul(cores);
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_COMMAND)
        .env_clear()
        // Fewer malloc arenas: less address space reserved per thread.
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec the closure only calls setrlimit, prctl
    // and getppid, which are async-signal-safe, on values computed before
    // the fork, and allocates nothing (its errors are raw OS errors).
    unsafe {
        cmd.pre_exec(move || {
            let set = |what, n: u64| {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                // SAFETY: a valid rlimit for a valid resource.
                if libc::setrlimit(what, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            };
            set(libc::RLIMIT_DATA, memory)?;
            set(libc::RLIMIT_CPU, cpu)?;
            set(libc::RLIMIT_CORE, 0)?;
            // The compile dies with the thread that waits for it: a
            // process that exits while one runs (loaded ahead of a step
            // never reached, chain/ahead.rs) leaves none running. Checked
            // after, in case that thread already went.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(proc_err)?;
    let pid = child.id();
    let (mut stdin, mut stdout, mut stderr) =
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileError::Process("no pipes".into()));
            }
        };
    // The artifact is a few times the component; more is not ours.
    let max_out = (bytes.len() as u64).saturating_mul(16).max(64 << 20);
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = (&mut stdout).take(max_out + 1).read_to_end(&mut out);
        r.map(|_| out)
    });
    let errs = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    // Until it exits: killed once its CPU time passes the bound, or the
    // wall-clock bound passes first.
    let started = std::time::Instant::now();
    let wall = limits.wall();
    let status = loop {
        let over = match rx.recv_timeout(POLL) {
            Ok(s) => break s.map_err(proc_err)?,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(CompileError::Process("its waiter went away".into()))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if cpu_of(pid).is_some_and(|c| c > limits.timeout) {
                    Some(CompileError::Timeout {
                        ms: limits.timeout.as_millis(),
                    })
                } else if started.elapsed() > wall {
                    Some(CompileError::Overloaded {
                        ms: wall.as_millis(),
                    })
                } else {
                    None
                }
            }
        };
        if let Some(why) = over {
            // SAFETY: kill(2) on the child's pid, which cannot have been
            // reused: the child is not reaped until the waiter's wait ends.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            let _ = rx.recv();
            let _ = (feeder.join(), reader.join(), errs.join(), waiter.join());
            return Err(why);
        }
    };
    let _ = (feeder.join(), waiter.join());
    let out = reader
        .join()
        .map_err(|_| CompileError::Process("reader panicked".into()))?
        .map_err(proc_err)?;
    let why = errs.join().unwrap_or_default();
    if status.success() {
        if out.len() as u64 > max_out {
            return Err(CompileError::Process(format!(
                "an artifact of more than {max_out} bytes"
            )));
        }
        return Ok(out);
    }
    // Out of memory under RLIMIT_DATA: an allocation fails and the child
    // aborts saying so.
    if why.contains("memory allocation") || why.contains("Cannot allocate memory") {
        return Err(CompileError::Memory {
            bytes: limits.memory_bytes,
        });
    }
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(2), _) => Err(CompileError::Invalid(why.trim().to_string())),
        (_, Some(libc::SIGXCPU)) => Err(CompileError::Timeout {
            ms: limits.timeout.as_millis(),
        }),
        (_, Some(libc::SIGABRT | libc::SIGSEGV | libc::SIGKILL)) => Err(CompileError::Memory {
            bytes: limits.memory_bytes,
        }),
        _ => Err(CompileError::Process(format!("{status}: {}", why.trim()))),
    }
}

/// The child's side: a component on stdin, its precompiled artifact on
/// stdout; exit 2 with the reason on stderr if it does not compile.
pub fn child_main() -> i32 {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("reading the component: {e}");
        return 1;
    }
    let engine = match Engine::new(&super::engine_config()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("the engine: {e:#}");
            return 1;
        }
    };
    match engine.precompile_component(&bytes) {
        Ok(art) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&art).and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("writing the artifact: {e}");
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("{e:#}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keys_override_the_defaults() {
        let base = CompileLimits::default();
        let l = CompileLimits::resolve(
            &ConfLimits {
                max_component_bytes: Some(1 << 20),
                compile_ms: Some(250),
                ..ConfLimits::default()
            },
            &base,
        );
        assert_eq!(l.max_bytes, 1 << 20);
        assert_eq!(l.timeout, Duration::from_millis(250));
        assert_eq!(l.memory_bytes, DEFAULT_COMPILE_MEMORY_BYTES);
    }

    #[test]
    fn an_oversized_component_is_refused_before_compiling() {
        let engine = Engine::default();
        let limits = CompileLimits {
            max_bytes: 8,
            ..CompileLimits::default()
        };
        let e = compile(&engine, &[0u8; 9], &limits).err().unwrap();
        assert!(e.is_limit());
        assert_eq!(
            e.to_string(),
            "9 bytes is over the limit of 8 (wasm.maxComponentBytes)"
        );
    }
}
