//! `wasm-cni daemon`: a long-lived front door to the same edge and chain
//! executor a per-invocation process runs, behind a unix socket.
//!
//! What it keeps warm: the wasm engine and its linker, every component it
//! has loaded (compiled, pre-linked, reloaded when its file changes). What
//! it does not: anything a call could leak into the next. Each call still
//! gets a fresh store and instance under the same limits and policy, and
//! all state is on disk in the same layout, written through, under the same
//! locks as per-invocation processes: a daemon and per-invocation processes
//! can serve one node side by side, and a daemon that dies loses nothing.
//!
//! * The socket: default `/run/wasm-cni/daemon.sock`, its directory 0700,
//!   the socket 0600; every peer's credentials are checked (root, or a uid
//!   or gid given with `--allow-uid`/`--allow-gid`); a systemd socket
//!   (`LISTEN_FDS`) is used when there is one.
//! * A connection carries one request (`wire`), read under a deadline and
//!   a size limit: a peer that stalls, sends garbage or too much is cut off
//!   and counted, and holds up nothing else.
//! * Different attachments run concurrently (a thread per request);
//!   requests for one (network, container id, ifname) run one at a time in
//!   arrival order.
//! * SIGTERM or SIGINT: stop accepting, finish what is in flight, exit 0.
//! * One log line per request on stderr (text or JSON), and Prometheus
//!   metrics when asked for (`metrics`).
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admission;
pub mod client;
mod metrics;
pub mod scrape;
mod workers;
pub use wasm_cni_client::wire;

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use admission::{Refused, Slots};
use metrics::Metrics;
pub use metrics::MetricsAddr;
use wasm_cni_base::log::{self, Level};
use wasm_cni_engine::edge::{self, Host, Outcome, Peer};
use wasm_cni_protocol::{CniError, Command, ErrorCode};
use wire::{Request, Response, WireError};
use workers::{Ready, Workers};

/// Request threads that may wait for the next connection at once, and for
/// how long (workers.rs): enough for a node's burst of pod starts, few
/// enough that their stacks' touched pages stay small.
const KEEP_IDLE_THREADS: usize = 16;
const KEEP_THREADS_FOR: Duration = Duration::from_secs(30);

/// How `wasm-cni daemon` runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    /// Non-root peers allowed, by uid or by gid.
    pub allow_uids: Vec<u32>,
    pub allow_gids: Vec<u32>,
    pub metrics: Option<MetricsAddr>,
    /// Requests served at once; more wait for a slot (and say so in the
    /// log) rather than being refused.
    pub max_concurrent: usize,
    /// A peer has this long to send its whole request.
    pub read_timeout: Duration,
    /// Connections open at once, all peers together; more are refused.
    pub max_connections: usize,
    /// Connections one non-root peer (uid) may hold open at once.
    pub max_peer_connections: usize,
    /// How long SIGTERM waits for the requests in flight before exiting.
    pub drain_timeout: Duration,
    /// The directories non-root peers' networks use.
    pub peer_dirs: edge::PeerDirs,
    pub json_log: bool,
    /// What `/readyz` reports on: run every [`READY_EVERY`] by a thread of
    /// its own (never per probe), `Err` with the cause. None: ready once
    /// listening.
    pub ready_check: Option<ReadyCheck>,
    /// Where trace spans go (OTLP/HTTP). Only the operator chooses: a
    /// request's own config cannot point the daemon anywhere.
    pub otlp_endpoint: Option<wasm_cni_engine::trace::Endpoint>,
    /// The node's trust policy for images, read at each request that
    /// names one (so an edited policy applies to the next). Only the
    /// operator chooses it.
    pub trust_policy: Option<PathBuf>,
    /// The memory the daemon may use, requests and itself; None: its
    /// cgroup's limit, if it has one.
    pub memory_limit: Option<u64>,
    /// Series of the daemon's companions (cluster mode), served with its
    /// own: name, help, and the metric they update.
    pub extra_metrics: ExtraMetrics,
}

/// Gauges and counters another part of the process updates, registered
/// under the daemon's prefix.
#[derive(Debug, Default, Clone)]
pub struct ExtraMetrics {
    pub gauges: Vec<(
        &'static str,
        &'static str,
        prometheus_client::metrics::gauge::Gauge,
    )>,
    pub counters: Vec<(
        &'static str,
        &'static str,
        prometheus_client::metrics::counter::Counter,
    )>,
}

/// A readiness check: whether the node's network can serve ADD now.
#[derive(Clone)]
pub struct ReadyCheck(pub Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for ReadyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadyCheck")
    }
}

/// How often the readiness check runs; a result older than three of these
/// is a check that hangs, and not ready.
pub const READY_EVERY: Duration = Duration::from_secs(3);

impl Options {
    pub fn new(socket: PathBuf) -> Self {
        Options {
            socket,
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            metrics: None,
            max_concurrent: 64,
            read_timeout: Duration::from_secs(5),
            max_connections: 512,
            max_peer_connections: 16,
            drain_timeout: Duration::from_secs(20),
            peer_dirs: edge::PeerDirs::default(),
            json_log: false,
            ready_check: None,
            otlp_endpoint: None,
            trust_policy: None,
            memory_limit: None,
            extra_metrics: ExtraMetrics::default(),
        }
    }
}

/// Where the DaemonSet's daemon serves its metrics and probe pages, and
/// where `wasm-cni probe` asks: beside the CNI socket, in a directory only
/// root can enter.
pub const DEFAULT_METRICS_SOCKET: &str = "unix:/run/wasm-cni/metrics.sock";

/// What the request threads share.
struct Shared {
    opts: Options,
    host: Host,
    turns: Turns,
    metrics: Metrics,
    traces: Option<wasm_cni_engine::trace::Exporter>,
    slots: Arc<Slots>,
    conns: Conns,
    workers: Arc<Workers>,
    stopping: AtomicBool,
}

/// Allocations of 128 KiB and more get pages of their own, returned when
/// freed. glibc raises this threshold to the largest block freed so far, so a
/// daemon that once freed a big buffer (a result, a netlink dump) serves
/// later ones from its heaps, whose free space then stays resident: measured
/// here, 3 000 ADD/DEL cycles grew a request thread's arena by 0.9 MiB while
/// the live heap stayed under 3 MiB; with the threshold fixed, anonymous
/// memory stayed flat at 4.0 MiB instead of 6.8–7.7
/// (host/bench/results/findings.md).
fn fixed_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only sets allocator parameters; called before any
        // request thread exists.
        if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) } != 1 {
            log::warn(format_args!("daemon: cannot fix malloc's mmap threshold"));
        }
    }
}

/// Stores alive at once: each request in flight runs a plugin and, inside
/// it, its IPAM delegate (which cannot delegate further); the readiness
/// check runs calls of its own beside them.
fn pooled_calls(max_concurrent: usize) -> u32 {
    let calls = max_concurrent.max(1).saturating_add(1).saturating_mul(2);
    u32::try_from(calls).unwrap_or(u32::MAX)
}

/// Run until SIGTERM or SIGINT; `Ok` once everything in flight is done, or
/// the drain bound has passed.
pub fn serve(opts: Options) -> Result<(), String> {
    let signals = block_signals()?;
    fixed_mmap_threshold();
    if let Some(MetricsAddr::Unix(path)) = &opts.metrics {
        // Checked before anything binds: never remove what is not ours.
        prepare_socket_path(path)?;
    }
    let (listener, owned) = listen(&opts.socket)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("socket: {e}"))?;
    let host = Host::new()
        .pooled(pooled_calls(opts.max_concurrent))
        .traced(opts.otlp_endpoint.is_some())
        .with_trust_policy(opts.trust_policy.clone());
    host.warm().map_err(|e| e.to_string())?;
    let metrics = Metrics::with(&opts.extra_metrics);
    let traces = match opts.otlp_endpoint.clone() {
        Some(e) => Some(
            wasm_cni_engine::trace::Exporter::start(e, metrics.span_counts())
                .map_err(|e| format!("cannot start the trace exporter: {e}"))?,
        ),
        None => None,
    };
    let shared = Arc::new(Shared {
        metrics,
        traces,
        slots: Arc::new(Slots::new(opts.max_concurrent.max(1), memory_budget(&opts))),
        turns: Turns::default(),
        conns: Conns::default(),
        // Wasm runs on a request thread's stack (1 MiB at most) above the
        // host's own frames.
        workers: Workers::new(
            "wasm-cni-request",
            8 << 20,
            opts.max_concurrent.clamp(1, KEEP_IDLE_THREADS),
            KEEP_THREADS_FOR,
        ),
        host,
        stopping: AtomicBool::new(false),
        opts,
    });
    let (wake_read, wake_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
    spawn_signal_thread(signals, wake_write)?;
    if let Some(addr) = shared.opts.metrics.clone() {
        let last = Arc::new(Mutex::new(None));
        if let Some(check) = shared.opts.ready_check.clone() {
            let (s, last) = (shared.clone(), last.clone());
            std::thread::Builder::new()
                .name("wasm-cni-readiness".into())
                .spawn(move || readiness_loop(&s, &*check.0, &last))
                .map_err(|e| format!("starting the readiness thread: {e}"))?;
        }
        let (s, r) = (shared.clone(), shared.clone());
        metrics::serve(
            addr,
            metrics::Pages {
                metrics: Box::new(move || s.metrics.render()),
                ready: Box::new(move || ready(&r, &last)),
            },
        )?;
    }
    let on = match owned {
        true => shared.opts.socket.display().to_string(),
        false => "the socket systemd passed".to_string(),
    };
    tracing::info!(event = "start", socket = on.as_str(), "listening on {on}");
    accept_loop(&shared, &listener, &wake_read);
    shared.stopping.store(true, Ordering::SeqCst);
    drop(listener);
    if owned {
        let _ = fs::remove_file(&shared.opts.socket);
    }
    // Requests still arriving are cut off, queued ones answered "try
    // again later"; those running finish, within the drain bound.
    shared.conns.cut_readers();
    shared.slots.wake_all();
    tracing::info!(
        event = "stopping",
        in_flight = shared.slots.busy(),
        "stopping: finishing the requests in flight"
    );
    let drain = shared.opts.drain_timeout;
    if shared.slots.wait_idle_until(Instant::now() + drain) {
        tracing::info!(event = "stop", "stopped");
    } else {
        tracing::warn!(
            event = "stop",
            in_flight = shared.slots.busy(),
            "stopped with requests still in flight: the drain bound of {} ms passed (their pending records let DEL and GC clean up)",
            drain.as_millis()
        );
    }
    Ok(())
}

/// The memory requests may use together: the daemon's limit (its own
/// option, else its cgroup's) less what it keeps for itself. Said in the
/// log, since it decides how many requests run at once.
fn memory_budget(opts: &Options) -> Option<u64> {
    let limit = match opts.memory_limit {
        Some(l) => Some((l, "--memory-limit".to_string())),
        None => admission::cgroup_memory_limit(),
    };
    let Some((limit, from)) = limit else {
        tracing::info!(
            event = "memory",
            "memory: no limit (no --memory-limit, no cgroup limit): requests are bounded by \
             --max-concurrent alone"
        );
        return None;
    };
    let budget = limit.saturating_sub(admission::DAEMON_RESERVE_BYTES);
    if budget == 0 {
        tracing::warn!(
            event = "memory",
            limit,
            "memory: limit {} MiB ({from}) leaves nothing for requests beside the daemon's own \
             {} MiB: every request is answered code 11",
            limit >> 20,
            admission::DAEMON_RESERVE_BYTES >> 20
        );
        return Some(0);
    }
    tracing::info!(
        event = "memory",
        limit,
        budget,
        "memory: limit {} MiB ({from}); {} MiB for requests, admitted by what their plugins \
         may use",
        limit >> 20,
        budget >> 20
    );
    Some(budget)
}

/// The latest readiness check: when it ended, and what it said.
type LastCheck = Mutex<Option<(Instant, Result<(), String>)>>;

fn readiness_loop(
    shared: &Shared,
    check: &(dyn Fn() -> Result<(), String> + Send + Sync),
    last: &LastCheck,
) {
    let mut said = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        let outcome = check();
        // Said once per change, not every few seconds.
        if said.as_ref() != Some(&outcome) {
            match &outcome {
                Ok(()) => tracing::info!(event = "ready", "ready"),
                Err(cause) => tracing::warn!(event = "not-ready", "not ready: {cause}"),
            }
            said = Some(outcome.clone());
        }
        if let Ok(mut l) = last.lock() {
            *l = Some((Instant::now(), outcome));
        }
        std::thread::sleep(READY_EVERY);
    }
}

/// `/readyz`: from the latest check, never running one.
fn ready(shared: &Shared, last: &LastCheck) -> Result<String, String> {
    if shared.stopping.load(Ordering::SeqCst) {
        return Err("stopping: finishing the requests in flight".into());
    }
    if shared.opts.ready_check.is_none() {
        return Ok("ready: listening".into());
    }
    let last = last
        .lock()
        .map_err(|_| "the readiness state is poisoned".to_string())?;
    match &*last {
        None => Err("not ready: the first check has not finished".into()),
        Some((at, _)) if at.elapsed() > READY_EVERY * 3 => Err(format!(
            "not ready: the readiness check has not finished for {} s",
            at.elapsed().as_secs()
        )),
        Some((at, Ok(()))) => Ok(format!(
            "ready: checked {} ms ago",
            at.elapsed().as_millis()
        )),
        Some((_, Err(cause))) => Err(format!("not ready: {cause}")),
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener, wake: &OwnedFd) {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds = [
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                log::error(format_args!("daemon: poll: {e}"));
                return;
            }
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(shared, stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn(format_args!("daemon: accept: {e}"));
                    break;
                }
            }
        }
    }
}

/// Check a new connection's peer and give it a thread of its own to send
/// its request on. Nothing here waits: a peer that connects and sends
/// nothing holds a connection (within its bound), never a request slot.
fn admit(shared: &Arc<Shared>, stream: UnixStream) {
    // Refusals are written without waiting (they fit the socket's buffer).
    let _ = stream.set_nonblocking(true);
    let (uid, gid, pid) = match peer_credentials(&stream) {
        Ok(c) => c,
        Err(e) => return refuse(shared, &stream, "peer", format!("no peer credentials: {e}")),
    };
    let allowed =
        uid == 0 || shared.opts.allow_uids.contains(&uid) || shared.opts.allow_gids.contains(&gid);
    if !allowed {
        return refuse(
            shared,
            &stream,
            "peer",
            format!("peer pid {pid} uid {uid} gid {gid} is not root and not allowed (--allow-uid, --allow-gid)"),
        );
    }
    let guard = match shared.conns.admit(shared, uid, &stream) {
        Ok(g) => g,
        Err(why) => return refuse(shared, &stream, "busy", why),
    };
    let s = shared.clone();
    let spawned = shared.workers.run(move |ready| {
        let peer = Peer {
            uid,
            gid,
            pid,
            netns: None,
            dirs: s.opts.peer_dirs.clone(),
        };
        handle(&s, stream, peer, guard, ready);
    });
    if let Err(e) = spawned {
        log::error(format_args!("daemon: cannot start a request thread: {e}"));
    }
}

/// The peer's (uid, gid, pid) as the kernel recorded them at connect. The
/// pid is 0 for a peer outside this process's pid namespace: a daemon in a
/// pod (its own pid namespace) sees every runtime that way. It only names
/// the peer in logs; the decision is the uid's and gid's (a peer in a user
/// namespace not mapped here shows as the overflow uid, and is refused).
fn peer_credentials(stream: &UnixStream) -> std::io::Result<(u32, u32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a valid, writable ucred and `len` its size; the
    // kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(std::io::Error::other("a short SO_PEERCRED answer"));
    }
    Ok((cred.uid, cred.gid, u32::try_from(cred.pid).unwrap_or(0)))
}

/// Why a connection got no service: counted, logged, and told to the peer
/// if it listens.
fn refuse(shared: &Shared, stream: &UnixStream, reason: &'static str, detail: String) {
    shared.metrics.refused(reason);
    tracing::warn!(event = "refused", reason, "refused a connection: {detail}");
    let e = CniError::new(ErrorCode::Internal, format!("wasm-cni daemon: {detail}"));
    answer(stream, e, None);
}

/// Send an error answer, waiting at most a second for the peer to take it.
fn answer(stream: &UnixStream, e: CniError, cni_version: Option<&str>) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = Response {
        exit_code: 1,
        stdout: e.to_json(cni_version),
        stderr: String::new(),
    }
    .write(&mut &*stream);
}

/// Write an answer, counting this thread as waiting for the next
/// connection as it goes: once the peer reads it, it may call again at
/// once, and what is left here is freeing and a trace handed to its thread.
/// That holds only while the write cannot wait for the reader, so it is
/// tried without waiting first; a reader too slow to take it all (or a
/// failure) takes the count back before anything waits on it, so on an
/// error the thread is never left counted (an undo may follow).
fn send_answer(stream: &UnixStream, bytes: &[u8], ready: &Ready) -> io::Result<()> {
    use rustix::net::{send, SendFlags};
    ready.now();
    let sent = match send(stream, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
        Ok(n) => n,
        Err(rustix::io::Errno::AGAIN) => 0,
        Err(e) => {
            ready.revoke();
            return Err(e.into());
        }
    };
    if sent == bytes.len() {
        return Ok(());
    }
    ready.revoke();
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    io::Write::write_all(&mut &*stream, &bytes[sent..])
}

/// CPU time (user + system) this thread has used.
fn thread_cpu() -> Duration {
    // The thread's CPU clock, not getrusage(RUSAGE_THREAD): that reads the
    // scheduler's runtime as of its last update (a tick or a switch), so a
    // request that ran a few hundred microseconds without either read as
    // 0 or as a whole tick.
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec, which the call fills.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Whether the client closed its end: it gave up (its runtime got "try
/// again later"), so what it asked must not be started, or must be undone.
fn client_gone(stream: &UnixStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        // HUP: both directions shut (a client only shuts its writing side
        // once its request is sent, and keeps reading for the answer).
        Ok(_) => fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR),
        Err(_) => false,
    }
}

/// How long a request whose client said nothing of its patience waits for
/// a slot.
const MAX_ADMISSION_WAIT: Duration = Duration::from_secs(60);

/// What a request is read through: most requests fit whole (a config and
/// its prevResult); a larger part is read straight into its own buffer.
const REQUEST_BUFFER: usize = 8 << 10;

/// One connection, one request: read it, admit it, run it, answer it.
fn handle(shared: &Shared, stream: UnixStream, mut peer: Peer, guard: ConnGuard, ready: &Ready) {
    let started = Instant::now();
    let cpu_started = thread_cpu();
    // Nonblocking was the listener's; this thread waits.
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let Some(request) = receive(shared, &stream, &mut peer, &guard, started) else {
        return;
    };
    let head = Head::read(request.env, &request.stdin, request.wait_ms, started);
    let admit_by = head.start_by.unwrap_or(started + MAX_ADMISSION_WAIT);
    let _slot = match shared.slots.take(head.need, admit_by, &shared.stopping) {
        Ok(slot) => slot,
        Err(refused) => {
            let e = slot_refused(shared, &head, refused, started);
            return answer(&stream, e, head.cni_version.as_deref());
        }
    };
    let turn = head.attachment().map(|k| shared.turns.enter(k));
    if head.verb == "GC" {
        shared.turns.settle(&head.network);
    }
    match still_wanted(shared, &stream, &head, started) {
        Ok(()) => {}
        Err(Some(e)) => return answer(&stream, e, head.cni_version.as_deref()),
        Err(None) => return,
    }
    let serving = shared.metrics.serving();
    let (out, logged) = log::capture(head.level, || {
        edge::run_for(
            &shared.host,
            head.vars.clone(),
            &mut request.stdin.as_slice(),
            Some(&peer),
        )
    });
    drop(serving);
    let ran = Ran {
        out,
        logged,
        took: started.elapsed(),
        cpu: thread_cpu().saturating_sub(cpu_started),
        ended: std::time::SystemTime::now(),
    };
    deliver(shared, &stream, ready, &head, ran, &request.stdin, &peer);
    drop(turn);
}

/// Read the request and the namespace descriptor it announces, under the
/// read deadline; a request that cannot be read is refused here and counted
/// by why.
fn receive(
    shared: &Shared,
    stream: &UnixStream,
    peer: &mut Peer,
    guard: &ConnGuard,
    started: Instant,
) -> Option<Request> {
    let uid = peer.uid;
    let (read, fds) = read_request(stream, started + shared.opts.read_timeout);
    shared.conns.read_done(guard.id);
    let request = match read {
        Ok(r) => r,
        Err(_) if shared.stopping.load(Ordering::SeqCst) => {
            refuse(
                shared,
                stream,
                "stopping",
                format!("uid {uid}: the daemon is stopping"),
            );
            return None;
        }
        Err(e) if e.is_timeout() => {
            let ms = shared.opts.read_timeout.as_millis();
            let detail = format!(
                "the request took too long: uid {uid} sent no whole request within {ms} ms"
            );
            refuse(shared, stream, "timeout", detail);
            return None;
        }
        Err(e) => {
            let reason = match &e {
                WireError::TooLarge { .. } => "too_large",
                WireError::Io(_) => "truncated",
                _ => "malformed",
            };
            refuse(
                shared,
                stream,
                reason,
                format!("bad request from uid {uid}: {e}"),
            );
            return None;
        }
    };
    match announced_descriptor(&request, fds) {
        Ok(fd) => peer.netns = fd.map(Arc::new),
        Err(why) => {
            refuse(
                shared,
                stream,
                "malformed",
                format!("bad request from uid {uid}: {why}"),
            );
            return None;
        }
    }
    Some(request)
}

/// What the daemon itself reads of a request, before and around running it.
/// The chain parses the config again, as a per-invocation call would.
struct Head {
    /// The environment as forwarded (what a runtime may set for CNI).
    vars: Vec<(String, String)>,
    verb: String,
    level: Level,
    cni_version: Option<String>,
    network: String,
    /// Past this instant the client would give up before the chain could
    /// finish: such a request is not started.
    start_by: Option<Instant>,
    /// What its plugins may use at once, for admission.
    need: u64,
}

impl Head {
    fn read(
        env: Vec<(String, String)>,
        stdin: &[u8],
        wait_ms: Option<u32>,
        started: Instant,
    ) -> Head {
        let vars: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| wire::forwarded(k))
            .collect();
        let var = |k: &str| lookup(&vars, k);
        let verb = var("CNI_COMMAND").unwrap_or_default().to_string();
        let level = var("WASM_CNI_LOG")
            .and_then(Level::parse)
            .unwrap_or(log::DEFAULT_LEVEL);
        let conf = serde_json::from_slice::<Value>(stdin).unwrap_or_default();
        let text = |k: &str| conf.get(k).and_then(Value::as_str).map(str::to_string);
        let start_by = wait_ms.map(|w| {
            let budget = client::budget_of(&conf);
            started + Duration::from_millis(u64::from(w)).saturating_sub(budget)
        });
        Head {
            verb,
            level,
            cni_version: text("cniVersion"),
            network: text("name").unwrap_or_default(),
            start_by,
            need: admission::request_bytes(&conf),
            vars,
        }
    }

    fn var(&self, k: &str) -> Option<&str> {
        lookup(&self.vars, k)
    }

    /// The attachment whose requests run one at a time, in arrival order.
    fn attachment(&self) -> Option<(String, String, String)> {
        match self.verb.as_str() {
            "ADD" | "DEL" | "CHECK" => Some((
                self.network.clone(),
                self.var("CNI_CONTAINERID").unwrap_or_default().to_string(),
                self.var("CNI_IFNAME").unwrap_or_default().to_string(),
            )),
            _ => None,
        }
    }

    fn stopping(&self) -> CniError {
        let code = match self.verb.as_str() {
            "STATUS" => ErrorCode::StatusUnavailable,
            _ => ErrorCode::TryAgainLater,
        };
        CniError::new(code, "the wasm-cni daemon is shutting down")
    }
}

/// The value of `k` in a forwarded environment.
fn lookup<'a>(vars: &'a [(String, String)], k: &str) -> Option<&'a str> {
    vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

/// The answer to a request that got no slot, counted by why.
fn slot_refused(shared: &Shared, head: &Head, refused: Refused, started: Instant) -> CniError {
    match refused {
        Refused::Stopping => {
            shared.metrics.refused("stopping");
            head.stopping()
        }
        Refused::TooLarge { need, budget } => {
            shared.metrics.refused("memory");
            CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "the wasm-cni daemon cannot run this request: its plugins may use {} MiB \
                     at once (the largest chain entry with its IPAM: memoryBytes, a copy of \
                     maxResultBytes and the host's share), more than the {} MiB it has for \
                     requests; lower their wasm.memoryBytes or raise the daemon's memory limit",
                    need.div_ceil(1 << 20),
                    budget >> 20
                ),
            )
        }
        Refused::Late {
            need,
            held,
            busy,
            budget,
        } => {
            shared.metrics.refused("late");
            let full = match budget {
                Some(b) if busy < shared.opts.max_concurrent => format!(
                    "its plugins may use {} MiB, and the {busy} requests in flight hold {} of \
                     the {} MiB it has for requests",
                    need.div_ceil(1 << 20),
                    held.div_ceil(1 << 20),
                    b >> 20
                ),
                _ => format!("{busy} requests were in flight, --max-concurrent"),
            };
            let when = if head.start_by.is_some() {
                "before its client would give up"
            } else {
                "within the daemon's wait for a slot"
            };
            CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "the wasm-cni daemon could not start the request {when} (it waited {} ms \
                     for a slot: {full})",
                    started.elapsed().as_millis()
                ),
            )
        }
    }
}

/// Whether a request that waited for a slot or its turn should still start:
/// `Err(Some)` to answer with, `Err(None)` when nobody is left to answer.
fn still_wanted(
    shared: &Shared,
    stream: &UnixStream,
    head: &Head,
    started: Instant,
) -> Result<(), Option<CniError>> {
    if client_gone(stream) {
        shared.metrics.refused("abandoned");
        tracing::warn!(
            event = "abandoned",
            verb = head.verb.as_str(),
            container_id = head.var("CNI_CONTAINERID").unwrap_or_default(),
            "not started: the client went away while the request waited"
        );
        return Err(None);
    }
    if head.start_by.is_some_and(|t| Instant::now() > t) {
        shared.metrics.refused("late");
        return Err(Some(CniError::new(
            ErrorCode::TryAgainLater,
            format!(
                "the wasm-cni daemon could not start the request before its client would give up (it waited {} ms for a slot or for another request on the same attachment)",
                started.elapsed().as_millis()
            ),
        )));
    }
    if shared.stopping.load(Ordering::SeqCst) {
        shared.metrics.refused("stopping");
        return Err(Some(head.stopping()));
    }
    Ok(())
}

/// A request the chain ran: its outcome, what it logged, what it cost.
struct Ran {
    out: Outcome,
    logged: String,
    took: Duration,
    cpu: Duration,
    ended: std::time::SystemTime,
}

/// Count, log and send the answer, then trace it; an ADD whose answer could
/// not be delivered is undone, still in its attachment's turn.
fn deliver(
    shared: &Shared,
    stream: &UnixStream,
    ready: &Ready,
    head: &Head,
    ran: Ran,
    stdin: &[u8],
    peer: &Peer,
) {
    let Ran {
        out,
        logged,
        took,
        cpu,
        ended,
    } = ran;
    // The trace is built once the answer is out (the caller does not wait
    // for it); what it needs of the answer is taken now.
    let traced_error = shared
        .traces
        .as_ref()
        .and_then(|_| wasm_cni_engine::trace::error_of(out.exit_code, &out.stdout));
    // Counted and logged before the answer goes out: a client holding its
    // answer (or a test, or an operator's script) finds both already there.
    shared.metrics.observe(&out.report, took);
    request_log(&out, took, cpu);
    let sent = if client_gone(stream) {
        Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the client went away",
        ))
    } else {
        let bytes = Response {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: logged,
        }
        .encode();
        send_answer(stream, &bytes, ready)
    };
    if let Some(traces) = &shared.traces {
        let start = ended - took;
        if let Some(t) = wasm_cni_engine::trace::of_request(
            &head.vars,
            &out.report,
            start,
            ended,
            traced_error.as_deref(),
        ) {
            traces.submit(t);
        }
    }
    if let Err(e) = sent {
        // Its runtime took the ADD as failed: undo it now (still in this
        // attachment's turn), so that nothing stays that nobody asked for.
        let undo = head.verb == "ADD" && out.exit_code == 0;
        tracing::warn!(
            event = "undelivered",
            container_id = out.report.container_id.as_str(),
            error = %e,
            undo,
            "the answer could not be delivered{}",
            if undo { "; undoing the ADD" } else { "" }
        );
        if undo {
            undo_add(shared, &head.vars, stdin, peer);
        }
    }
}

/// DEL what an ADD whose answer never reached its client made.
fn undo_add(shared: &Shared, vars: &[(String, String)], stdin: &[u8], peer: &Peer) {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| match k.as_str() {
            "CNI_COMMAND" => (k.clone(), "DEL".to_string()),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let (out, _) = log::capture(Level::Warn, || {
        edge::run_for(&shared.host, vars, &mut &stdin[..], Some(peer))
    });
    shared.metrics.observe(&out.report, Duration::ZERO);
    tracing::info!(
        event = "undone",
        container_id = out.report.container_id.as_str(),
        outcome = if out.exit_code == 0 { "ok" } else { "error" },
        "the undelivered ADD was deleted"
    );
}

/// A peer's request, read under `deadline`, and the descriptors that came
/// with any of the bytes read. Buffered: a request comes in two reads (its
/// header with the namespace's descriptor, then the rest), not a read and
/// a timeout set per field; a part larger than the buffer is read straight
/// into its own.
fn read_request(
    stream: &UnixStream,
    deadline: Instant,
) -> (Result<Request, WireError>, Vec<OwnedFd>) {
    let mut reader = PeerReader {
        stream,
        deadline,
        fds: Vec::new(),
    };
    let read = Request::read(&mut StackBuffered::new(&mut reader));
    (read, reader.fds)
}

/// `BufReader`'s reading over a buffer on the request thread's stack. As a
/// heap buffer it was a request's first large allocation, at which glibc
/// consolidates the small blocks the last request freed: 3 % of a request
/// thread's time under 16 IPAM clients (measured in host/bench/results/findings.md).
struct StackBuffered<R> {
    inner: R,
    buf: [u8; REQUEST_BUFFER],
    /// The unread bytes are `buf[pos..len]`.
    pos: usize,
    len: usize,
}

impl<R: io::Read> StackBuffered<R> {
    fn new(inner: R) -> Self {
        StackBuffered {
            inner,
            buf: [0; REQUEST_BUFFER],
            pos: 0,
            len: 0,
        }
    }
}

impl<R: io::Read> io::Read for StackBuffered<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len {
            // A part at least as large as the buffer goes straight to its
            // own, as `BufReader` does.
            if out.len() >= self.buf.len() {
                return self.inner.read(out);
            }
            let got = self.inner.read(&mut self.buf)?;
            (self.pos, self.len) = (0, got.min(self.buf.len()));
        }
        let unread = self.buf.get(self.pos..self.len).unwrap_or_default();
        let n = out.len().min(unread.len());
        out[..n].copy_from_slice(&unread[..n]);
        self.pos += n;
        Ok(n)
    }
}

/// The request's namespace: one descriptor exactly when the request
/// announces one. Any other count (a descriptor sent after the request
/// included) is refused, never taken for the namespace.
fn announced_descriptor(
    request: &Request,
    mut fds: Vec<OwnedFd>,
) -> Result<Option<OwnedFd>, String> {
    if fds.len() > 1 || request.netns_fd != (fds.len() == 1) {
        return Err(format!(
            "{} descriptor(s) passed, {} announced",
            fds.len(),
            u8::from(request.netns_fd)
        ));
    }
    Ok(fds.pop())
}

/// Reads a peer's request under a deadline that the read timeout shrinks
/// to (a peer trickling a byte at a time still meets it), collecting the
/// descriptors that come with it (`SCM_RIGHTS`, close-on-exec).
struct PeerReader<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
    fds: Vec<OwnedFd>,
}

impl Read for PeerReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request took too long",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match recvmsg(
                self.stream,
                &mut [io::IoSliceMut::new(buf)],
                &mut cmsg,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(r) => break r,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                self.fds.extend(fds);
            }
        }
        Ok(got.bytes)
    }
}

/// One line per request: verb, network, container id, ifname, outcome,
/// total time and time per plugin.
fn request_log(out: &Outcome, took: Duration, cpu: Duration) {
    let r = &out.report;
    let verb = r.command.map_or("?", Command::as_str);
    let ms = |d: Duration| (d.as_secs_f64() * 1e5).round() / 100.0;
    let steps: Vec<String> = r
        .steps
        .iter()
        .map(|s| {
            let abort = s.abort.map(|a| format!(" ({a})")).unwrap_or_default();
            format!("{} {} {:.1} ms{abort}", s.plugin, s.verb, ms(s.duration))
        })
        .collect();
    let outcome = if r.error_code.is_none() {
        "ok"
    } else {
        "error"
    };
    tracing::info!(
        event = "request",
        verb,
        network = r.network.as_str(),
        container_id = r.container_id.as_str(),
        ifname = r.ifname.as_str(),
        outcome,
        code = r.error_code.unwrap_or(0),
        ms = ms(took),
        cpu_ms = ms(cpu),
        steps = steps.join(", ").as_str(),
        "served"
    );
}

/// The daemon's own log on stderr (the journal under systemd): `tracing`
/// events at the level `WASM_CNI_LOG` names (default `info`: one line per
/// request), as text or, with `--json-log`, one JSON object per line for
/// log shippers. What a request logs still goes back to its client.
pub fn init_log(json: bool) {
    use tracing_subscriber::filter::LevelFilter;
    let level = match log::level_from_env().unwrap_or(Level::Info) {
        Level::Error => LevelFilter::ERROR,
        Level::Warn => LevelFilter::WARN,
        Level::Info => LevelFilter::INFO,
        Level::Debug => LevelFilter::DEBUG,
    };
    let fmt = tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(false);
    let set = if json {
        fmt.json().flatten_event(true).try_init()
    } else {
        fmt.try_init()
    };
    if set.is_ok() {
        log::route_to_tracing();
    }
}

type Key = (String, String, String);

/// Requests for one attachment, one at a time, in arrival order: tickets
/// are numbered across all attachments, and each attachment serves its
/// queue front first. The numbering also tells a GC which requests came
/// before it ([`Turns::settle`]).
#[derive(Default)]
struct Turns {
    queues: Mutex<Queues>,
    turn: Condvar,
}

#[derive(Default)]
struct Queues {
    issued: u64,
    waiting: HashMap<Key, VecDeque<u64>>,
}

struct Turn<'a> {
    turns: &'a Turns,
    key: Key,
}

impl Turns {
    fn enter(&self, key: Key) -> Turn<'_> {
        let Ok(mut queues) = self.queues.lock() else {
            return Turn { turns: self, key };
        };
        let ticket = queues.issued;
        queues.issued += 1;
        queues
            .waiting
            .entry(key.clone())
            .or_default()
            .push_back(ticket);
        while queues
            .waiting
            .get(&key)
            .is_some_and(|q| q.front() != Some(&ticket))
        {
            queues = self.turn.wait(queues).unwrap_or_else(|p| p.into_inner());
        }
        Turn { turns: self, key }
    }

    /// Wait until every request on `network` that took its ticket before
    /// this call has ended, its undo included. A GC that swept while a
    /// killed client's ADD still ran would return before that ADD
    /// committed and was undone, so its caller would find the store still
    /// changing after it. Later requests do not hold it up.
    fn settle(&self, network: &str) {
        let Ok(mut queues) = self.queues.lock() else {
            return;
        };
        let before = queues.issued;
        while queues
            .waiting
            .iter()
            .any(|(k, q)| k.0 == network && q.front().is_some_and(|&t| t < before))
        {
            queues = self.turn.wait(queues).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Ok(mut queues) = self.turns.queues.lock() {
            if let Some(q) = queues.waiting.get_mut(&self.key) {
                q.pop_front();
                if q.is_empty() {
                    queues.waiting.remove(&self.key);
                }
            }
        }
        self.turns.turn.notify_all();
    }
}

/// The open connections: how many, per peer uid, and those still sending
/// their request (cut off when the daemon stops).
#[derive(Default)]
struct Conns {
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    total: usize,
    per_uid: HashMap<u32, usize>,
    next: u64,
    reading: HashMap<u64, UnixStream>,
}

/// One admitted connection, counted until dropped.
struct ConnGuard {
    shared: Arc<Shared>,
    id: u64,
    uid: u32,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.conns.state.lock() {
            st.total = st.total.saturating_sub(1);
            if let Some(n) = st.per_uid.get_mut(&self.uid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    st.per_uid.remove(&self.uid);
                }
            }
            st.reading.remove(&self.id);
        }
    }
}

impl Conns {
    /// Count a new connection of `uid`, within the bounds: every peer
    /// together, and each non-root peer on its own (root is the runtime:
    /// it could stop the daemon anyway).
    fn admit(
        &self,
        shared: &Arc<Shared>,
        uid: u32,
        stream: &UnixStream,
    ) -> Result<ConnGuard, String> {
        let Ok(mut st) = self.state.lock() else {
            return Err("connection table poisoned".into());
        };
        let (max, per_peer) = (
            shared.opts.max_connections,
            shared.opts.max_peer_connections,
        );
        if st.total >= max {
            return Err(format!(
                "{max} connections are open (--max-connections); uid {uid} refused"
            ));
        }
        let mine = st.per_uid.get(&uid).copied().unwrap_or(0);
        if uid != 0 && mine >= per_peer {
            return Err(format!(
                "uid {uid} holds {mine} connections already (--max-peer-connections)"
            ));
        }
        st.total += 1;
        *st.per_uid.entry(uid).or_insert(0) += 1;
        st.next += 1;
        let id = st.next;
        if let Ok(clone) = stream.try_clone() {
            st.reading.insert(id, clone);
        }
        Ok(ConnGuard {
            shared: shared.clone(),
            id,
            uid,
        })
    }

    /// The connection's request is read (or failed to read).
    fn read_done(&self, id: u64) {
        if let Ok(mut st) = self.state.lock() {
            st.reading.remove(&id);
        }
    }

    /// End every read in progress (the daemon stops): the readers see the
    /// end of their stream at once.
    fn cut_readers(&self) {
        if let Ok(st) = self.state.lock() {
            for s in st.reading.values() {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
        }
    }
}

/// The listening socket: systemd's, or one made at `path` (with its
/// directory) for this process to remove when it stops.
fn listen(path: &Path) -> Result<(UnixListener, bool), String> {
    if let Some(l) = systemd_socket()? {
        return Ok((l, false));
    }
    prepare_socket_path(path)?;
    let listener =
        UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("restricting {}: {e}", path.display()))?;
    Ok((listener, true))
}

/// Make `path` ready for a socket of this daemon: its directory exists
/// (made 0700 if it did not), is owned by the daemon's user and writable by
/// no one else (or someone else could put their own socket there), and
/// nothing is at `path` but a stale socket nobody listens on, which is
/// removed. Anything else at `path`, or a directory others may write, is
/// left alone and refused.
pub(crate) fn prepare_socket_path(path: &Path) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| format!("{}: no directory", path.display()))?;
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by this daemon (uid {me})",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others (mode {:o}): a socket there could be replaced; use a directory of the daemon's own",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(format!("another daemon is listening on {}", path.display()));
            }
            // Left by a daemon that died: nobody answers on it.
            fs::remove_file(path).map_err(|e| format!("removing stale {}: {e}", path.display()))?;
        }
        Ok(_) => return Err(format!("{} exists and is not a socket", path.display())),
        Err(_) => {}
    }
    Ok(())
}

/// The socket systemd passed (`LISTEN_FDS=1` for this pid, fd 3), if any.
fn systemd_socket() -> Result<Option<UnixListener>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let mine = pid.and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    match (mine, fds.as_deref()) {
        (true, Some("1")) => {}
        (true, Some(n)) => return Err(format!("systemd passed {n} sockets; expected 1")),
        _ => return Ok(None),
    }
    // SAFETY: systemd's protocol hands this process fd 3, open and
    // listening, for it alone; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    let is_socket = rustix::fs::fstat(&fd)
        .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket)
        .unwrap_or(false);
    if !is_socket {
        return Err("LISTEN_FDS: fd 3 is not a socket".into());
    }
    // systemd passes it inheritable; the daemon's children (the compile
    // child, native plugins) must not get the runtime's socket.
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| format!("LISTEN_FDS: fd 3: {e}"))?;
    Ok(Some(UnixListener::from(fd)))
}

/// Block SIGTERM and SIGINT in this thread and every thread it starts from
/// now on (a signal thread waits for them): call it before starting a
/// thread of your own beside the daemon, or a SIGTERM may end the process
/// there instead of draining.
pub fn block_signals() -> Result<libc::sigset_t, String> {
    // SAFETY: the sigset is initialised by sigemptyset before any other use,
    // and pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(format!("blocking signals: errno {rc}"));
        }
        Ok(set)
    }
}

fn spawn_signal_thread(set: libc::sigset_t, wake: OwnedFd) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wasm-cni-signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid, initialised signal set and `sig` a
            // valid place for the answer.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc == 0 {
                let _ = rustix::io::write(wake.as_fd(), b"x");
                return;
            }
        })
        .map(drop)
        .map_err(|e| format!("starting the signal thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_too_slow_for_its_answer_holds_up_no_other_connection() {
        // What a peer controls: how fast it reads its answer. What it must
        // not gain: holding the next peer's connection behind its own.
        let w = Workers::new("t", 1 << 20, 4, Duration::from_secs(30));
        let (mine, theirs) = UnixStream::pair().unwrap();
        let (small, small_peer) = UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<&str>();
        let tx2 = tx.clone();
        w.run(move |ready| {
            // A small answer goes in one write, and the thread counts as
            // waiting.
            send_answer(&small, b"answer", ready).unwrap();
            // Far over any socket buffer, and nobody reads it yet.
            let big = vec![7u8; 8 << 20];
            tx2.send("writing").unwrap();
            let sent = send_answer(&mine, &big, ready);
            tx2.send(if sent.is_ok() { "written" } else { "failed" })
                .unwrap();
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "writing");
        let mut got = [0u8; 6];
        io::Read::read_exact(&mut &small_peer, &mut got).unwrap();
        assert_eq!(&got, b"answer");
        std::thread::sleep(Duration::from_millis(100));
        w.run(move |_| tx.send("next").unwrap()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(3)).unwrap(),
            "next",
            "the next connection waited behind a slow reader"
        );
        // The slow reader still gets all of its answer.
        let mut all = Vec::new();
        io::Read::read_to_end(&mut (&theirs).take(8 << 20), &mut all).unwrap();
        assert_eq!(all.len(), 8 << 20);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "written");
    }

    /// `bytes` on `s`, `fd` riding on the first of them.
    fn send_with(s: &UnixStream, bytes: &[u8], fd: Option<&OwnedFd>) {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        let fds = fd.map(|f| [f.as_fd()]);
        if let Some(fds) = &fds {
            assert!(cmsg.push(SendAncillaryMessage::ScmRights(fds)));
        }
        let n = sendmsg(
            s,
            &[io::IoSlice::new(bytes)],
            &mut cmsg,
            SendFlags::NOSIGNAL,
        )
        .unwrap();
        io::Write::write_all(&mut &*s, &bytes[n..]).unwrap();
    }

    fn request(stdin_len: usize, netns_fd: bool) -> Request {
        Request {
            env: vec![("CNI_COMMAND".into(), "ADD".into())],
            stdin: (0..stdin_len).map(|i| b'a' + (i % 26) as u8).collect(),
            netns_fd,
            wait_ms: Some(5000),
        }
    }

    /// Whatever the sizes of the reads under it and of the parts read
    /// from it, the stack buffer hands on the bytes in order, each once.
    #[test]
    fn the_stack_buffer_reads_like_a_bufreader() {
        struct Chunks<'a>(&'a [u8], usize);
        impl io::Read for Chunks<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                self.1 = self.1 % 4093 + 977;
                let n = out.len().min(self.0.len()).min(self.1);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let data: Vec<u8> = (0..5 * REQUEST_BUFFER as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut r = StackBuffered::new(Chunks(&data, 0));
        let (mut got, mut part) = (Vec::new(), 1);
        loop {
            // Parts of 1 byte to past the buffer, straddling its edges.
            let mut out = vec![0; part];
            let n = io::Read::read(&mut r, &mut out).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&out[..n]);
            part = part * 7 % (REQUEST_BUFFER + 3000) + 1;
        }
        assert_eq!(got, data);
    }

    // What a peer controls here: how it splits and times its request's
    // bytes, and which descriptors ride on which of them. What it must not
    // gain: more time than the read deadline by trickling, a part read
    // wrong across the buffer's edge, or a descriptor it did not announce
    // taken for its namespace (one sent after the request included).
    #[test]
    fn a_buffered_request_is_read_whole_in_its_deadline_with_only_its_own_descriptor() {
        let ns = || OwnedFd::from(fs::File::open("/proc/self/ns/net").unwrap());
        let deadline = || Instant::now() + Duration::from_secs(5);

        // Split in pieces of 1 to 7 bytes, the descriptor on the first, a
        // stdin past the buffer: read whole.
        let sent = request(3 * REQUEST_BUFFER + 5, true);
        let bytes = sent.encode();
        let (mine, theirs) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            let fd = ns();
            let (mut at, mut step) = (0, 1);
            while at < bytes.len() {
                let end = (at + step).min(bytes.len());
                send_with(&theirs, &bytes[at..end], (at == 0).then_some(&fd));
                (at, step) = (end, step % 7 + 1);
            }
            theirs
        });
        let (read, fds) = read_request(&mine, deadline());
        let got = read.unwrap();
        assert_eq!(got, sent);
        assert!(announced_descriptor(&got, fds).unwrap().is_some());
        drop(writer.join().unwrap());

        // A byte every 20 ms under a 200 ms deadline: refused at the
        // deadline, however many bytes were still coming.
        let bytes = request(64, false).encode();
        let (mine, theirs) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            for b in &bytes {
                if io::Write::write_all(&mut &theirs, &[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let started = Instant::now();
        let (read, _) = read_request(&mine, Instant::now() + Duration::from_millis(200));
        assert!(read.unwrap_err().is_timeout());
        let took = started.elapsed();
        assert!(took < Duration::from_millis(600), "{took:?}");
        drop(mine);
        writer.join().unwrap();

        // A request without a descriptor, then more bytes with one: the
        // buffer may read past the request, and what rides there is
        // refused, not taken for the namespace.
        let (mine, theirs) = UnixStream::pair().unwrap();
        send_with(&theirs, &request(10, false).encode(), None);
        send_with(&theirs, b"trailing", Some(&ns()));
        let (read, fds) = read_request(&mine, deadline());
        let got = read.unwrap();
        assert_eq!(fds.len(), 1, "the buffer read on into the trailing bytes");
        let refused = announced_descriptor(&got, fds).unwrap_err();
        assert!(
            refused.contains("1 descriptor(s) passed, 0 announced"),
            "{refused}"
        );

        // Announced and brought, then another descriptor (not a namespace)
        // after the request: the one taken is the request's own. (A read
        // ends at the bytes a descriptor came with, so the later one is
        // never received; were it received, the count would refuse both.)
        let (mine, theirs) = UnixStream::pair().unwrap();
        let null = OwnedFd::from(fs::File::open("/dev/null").unwrap());
        send_with(&theirs, &request(10, true).encode(), Some(&ns()));
        send_with(&theirs, b"more", Some(&null));
        let (read, fds) = read_request(&mine, deadline());
        let taken = announced_descriptor(&read.unwrap(), fds).unwrap().unwrap();
        let id = |m: fs::Metadata| (m.dev(), m.ino());
        assert_eq!(
            id(fs::File::from(taken).metadata().unwrap()),
            id(fs::metadata("/proc/self/ns/net").unwrap())
        );

        // Announced and not brought.
        let (mine, theirs) = UnixStream::pair().unwrap();
        send_with(&theirs, &request(10, true).encode(), None);
        let (read, fds) = read_request(&mine, deadline());
        assert!(announced_descriptor(&read.unwrap(), fds).is_err());
    }

    // A request's logged CPU is what its thread ran, also when no tick or
    // switch came in between: getrusage read 0 for most of a daemon's
    // sub-millisecond requests.
    #[test]
    fn a_requests_cpu_time_counts_what_ran_since_the_last_tick() {
        let mut short = Vec::new();
        for _ in 0..20 {
            let start = thread_cpu();
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_micros(300) {
                std::hint::spin_loop();
            }
            short.push(thread_cpu().saturating_sub(start));
        }
        short.sort();
        // The median: a spin that was preempted reads less CPU than wall.
        let median = short[short.len() / 2];
        assert!(
            median >= Duration::from_micros(200) && median < Duration::from_millis(3),
            "{short:?}"
        );
    }

    #[test]
    fn turns_for_one_attachment_are_taken_in_arrival_order() {
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let key = || ("net".to_string(), "c1".to_string(), "eth0".to_string());
        let first = turns.enter(key());
        let mut threads = Vec::new();
        for i in 0..5 {
            let (turns, order) = (turns.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                let _t = turns.enter(key());
                order.lock().unwrap().push(i);
            }));
            // Arrival order: each takes its ticket before the next starts.
            std::thread::sleep(Duration::from_millis(20));
        }
        // Another attachment is not held up.
        drop(turns.enter(("net".into(), "c2".into(), "eth0".into())));
        drop(first);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(turns.queues.lock().unwrap().waiting.is_empty());
    }

    #[test]
    fn a_gc_waits_for_its_networks_earlier_requests_only() {
        let turns = Arc::new(Turns::default());
        let key = |net: &str, c: &str| (net.to_string(), c.to_string(), "eth0".to_string());
        let earlier = turns.enter(key("net", "c1"));
        let elsewhere = turns.enter(key("other", "c1"));
        let t = turns.clone();
        let gc = std::thread::spawn(move || t.settle("net"));
        std::thread::sleep(Duration::from_millis(30));
        // A request after the GC, on a free attachment of its network,
        // neither waits for it nor holds it up.
        drop(turns.enter(key("net", "c2")));
        let later = turns.enter(key("net", "c3"));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!gc.is_finished(), "the GC did not wait for c1");
        drop(earlier);
        gc.join().unwrap();
        // Still held: another network's request and a later one.
        drop((later, elsewhere));
        assert!(turns.queues.lock().unwrap().waiting.is_empty());
    }
}
