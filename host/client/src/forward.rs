//! One CNI call, through the daemon or to the caller's `local` engine: the
//! mode and socket come from the config (`daemon`, `daemonSocket`), and a
//! per-invocation run happens only for `"off"` (the default), or for
//! `"prefer"` when no daemon listens.
//!
//! Once a request is sent the client never falls back to running the chain
//! itself: the daemon may be doing it, and two runs of one ADD would race.
//! A daemon that does not answer in time is "try again later" (11); one that
//! went away mid-call (the connection closed unanswered) is tried once more.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::wire::{self, Request, Response};
use crate::{code, error_json};

/// A plugin's deadline unless its `wasm.deadlineMs` says otherwise (the
/// engine's default; a test in the engine keeps the two equal).
pub const DEFAULT_DEADLINE_MS: u64 = 10_000;

/// What the client logs: a level (`error`, `warn`, `info`, `debug`) and a
/// line; the caller decides where it goes.
pub type Log<'a> = &'a dyn Fn(&'static str, &str);

/// A CNI error the client answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    pub code: u32,
    pub msg: String,
}

impl ClientError {
    fn new(code: u32, msg: impl Into<String>) -> Self {
        ClientError {
            code,
            msg: msg.into(),
        }
    }
}

/// Set by the thin client on the engine it hands a call to after waiting
/// for the daemon in vain, so that the engine does not wait again.
pub const WAITED_VAR: &str = "WASM_CNI_DAEMON_WAITED";

/// Where the daemon listens unless the config says `daemonSocket`.
pub const DEFAULT_SOCKET: &str = "/run/wasm-cni/daemon.sock";

/// How long a `require` call waits for a daemon that is not listening
/// (restarting, being upgraded) unless the config says `daemonWaitMs`.
pub const DEFAULT_WAIT_MS: u64 = 5_000;

/// `daemon` in the `wasm-cni` plugin config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run the chain in this process (the default).
    Off,
    /// Use the daemon when one answers, else run in-process with a warning.
    Prefer,
    /// Use the daemon; when none listens, wait for one a bounded time
    /// (`daemonWaitMs`), then fail with code 11 (DEL: run in-process).
    Require,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "prefer" => Some(Mode::Prefer),
            "require" => Some(Mode::Require),
            _ => None,
        }
    }
}

/// What the client needs from stdin, and nothing more.
struct Peek {
    mode: Mode,
    socket: PathBuf,
    cni_version: Option<String>,
    /// How long the chain may take: every plugin's and IPAM delegate's
    /// deadline, summed.
    budget: Duration,
    /// How long `require` waits for a daemon to listen: `daemonWaitMs`,
    /// never more than `budget`.
    connect_wait: Duration,
}

/// How long the chain of a request's config (parsed) may take: every
/// plugin's and IPAM delegate's deadline, summed (the default when there is
/// no chain).
pub fn budget_of(conf: &Value) -> Duration {
    let Value::Object(conf) = conf else {
        return Duration::from_millis(DEFAULT_DEADLINE_MS);
    };
    budget(conf)
}

fn budget(conf: &serde_json::Map<String, Value>) -> Duration {
    let deadline = |v: Option<&Value>| {
        v.and_then(|w| w.get("deadlineMs"))
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_DEADLINE_MS)
    };
    let ms = conf
        .get("chain")
        .and_then(Value::as_array)
        .map(|chain| {
            chain
                .iter()
                .map(|e| {
                    let ipam = e.get("ipam").map_or(0, |i| deadline(i.get("wasm")));
                    deadline(e.get("wasm")).saturating_add(ipam)
                })
                .fold(0u64, u64::saturating_add)
        })
        .unwrap_or(DEFAULT_DEADLINE_MS);
    Duration::from_millis(ms)
}

fn peek(stdin: &[u8]) -> Result<Peek, (ClientError, Option<String>)> {
    // Anything unparsable is the edge's to report, in-process.
    let Ok(Value::Object(conf)) = serde_json::from_slice::<Value>(stdin) else {
        return Ok(Peek {
            mode: Mode::Off,
            socket: PathBuf::new(),
            cni_version: None,
            budget: Duration::ZERO,
            connect_wait: Duration::ZERO,
        });
    };
    let cni_version = conf
        .get("cniVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mode = match conf.get("daemon") {
        None | Some(Value::Null) => Mode::Off,
        Some(Value::String(s)) => Mode::parse(s).ok_or_else(|| {
            (
                ClientError::new(
                    code::INVALID_CONFIG,
                    format!("daemon: {s:?} is not one of \"off\", \"prefer\", \"require\""),
                ),
                cni_version.clone(),
            )
        })?,
        Some(_) => {
            return Err((
                ClientError::new(code::INVALID_CONFIG, "daemon must be a string"),
                cni_version,
            ))
        }
    };
    let socket = match conf.get("daemonSocket") {
        None | Some(Value::Null) => PathBuf::from(DEFAULT_SOCKET),
        Some(Value::String(s)) if s.starts_with('/') => PathBuf::from(s),
        Some(_) => {
            return Err((
                ClientError::new(
                    code::INVALID_CONFIG,
                    "daemonSocket must be an absolute path",
                ),
                cni_version,
            ))
        }
    };
    // Written by the operator, but a typo must not turn into a hang or an
    // instant failure: anything but a whole number of ms is refused.
    let wait_ms = match conf.get("daemonWaitMs") {
        None | Some(Value::Null) => DEFAULT_WAIT_MS,
        Some(v) => v.as_u64().ok_or_else(|| {
            (
                ClientError::new(
                    code::INVALID_CONFIG,
                    format!("daemonWaitMs must be a whole number of milliseconds, not {v}"),
                ),
                cni_version.clone(),
            )
        })?,
    };
    let budget = budget(&conf);
    Ok(Peek {
        mode,
        socket,
        cni_version,
        budget,
        connect_wait: Duration::from_millis(wait_ms).min(budget),
    })
}

/// How long past the chain's own budget the client waits: the daemon may
/// queue the request behind another for the same attachment.
const SLACK: Duration = Duration::from_secs(10);

fn reply(log: Log<'_>, e: ClientError, cni_version: Option<&str>) -> Response {
    log("error", &e.msg);
    Response {
        exit_code: 1,
        stdout: error_json(e.code, &e.msg, cni_version),
        stderr: String::new(),
    }
}

/// Why a call goes to the engine rather than to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// The network does not use the daemon (`"off"`, the default), or the
    /// call needs none (VERSION, an unknown verb).
    Off,
    /// `"prefer"`, and no daemon answers: what the engine warns about
    /// when it runs the chain itself (a client that hands the call to an
    /// engine process leaves it to that engine, which looks again).
    NoDaemon(String),
}

/// Serve one CNI invocation: through the daemon, or with `local` (the engine,
/// in this process or another).
pub fn run(
    vars: Vec<(String, String)>,
    stdin: Vec<u8>,
    local: impl FnOnce(Local, Vec<(String, String)>, Vec<u8>) -> Response,
    log: Log<'_>,
) -> Response {
    let command = vars
        .iter()
        .find(|(k, _)| k == "CNI_COMMAND")
        .map(|(_, v)| v.clone());
    let command = command.as_deref();
    let peeked = match command {
        // VERSION needs no daemon, and an unknown verb is the edge's error.
        Some("ADD" | "DEL" | "CHECK" | "STATUS" | "GC") => peek(&stdin),
        _ => Ok(Peek {
            mode: Mode::Off,
            socket: PathBuf::new(),
            cni_version: None,
            budget: Duration::ZERO,
            connect_wait: Duration::ZERO,
        }),
    };
    let peek = match peeked {
        Ok(p) => p,
        Err((e, version)) => return reply(log, e, version.as_deref()),
    };
    if peek.mode == Mode::Off {
        return local(Local::Off, vars, stdin);
    }
    // STATUS is a question about now; everything else may wait out a
    // daemon's restart.
    let connect_wait = match (peek.mode, command) {
        // The thin client waited already before it handed this call over.
        _ if std::env::var_os(WAITED_VAR).is_some() => Duration::ZERO,
        (Mode::Require, Some(c)) if c != "STATUS" => peek.connect_wait,
        _ => Duration::ZERO,
    };
    let stream = match connect(&peek.socket, connect_wait) {
        Ok(s) => s,
        Err(e) if peek.mode == Mode::Prefer => {
            let why = format!(
                "no daemon at {} ({e}); running in-process",
                peek.socket.display()
            );
            return local(Local::NoDaemon(why), vars, stdin);
        }
        // DEL with no daemon after the wait (the daemon uninstalled, or down
        // for longer): this process runs it. Nothing was sent, so no daemon
        // runs it too, and the state is on disk, ordered by the same locks:
        // pods stay deletable without the daemon.
        Err(e) if command == Some("DEL") => {
            let why = format!(
                "no daemon at {} ({e}); running DEL in-process",
                peek.socket.display()
            );
            return local(Local::NoDaemon(why), vars, stdin);
        }
        Err(e) => {
            // STATUS asks whether ADD can be served: not without the daemon.
            let code = match command {
                Some("STATUS") => code::STATUS_UNAVAILABLE,
                _ => code::TRY_AGAIN_LATER,
            };
            return reply(
                log,
                ClientError::new(
                    code,
                    format!(
                        "the wasm-cni daemon is not reachable at {}: {e}{}",
                        peek.socket.display(),
                        if connect_wait.is_zero() {
                            String::new()
                        } else {
                            format!(" (waited {} ms)", connect_wait.as_millis())
                        }
                    ),
                ),
                peek.cni_version.as_deref(),
            );
        }
    };
    let env: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| wire::forwarded(k))
        .collect();
    // The namespace goes as a descriptor this client opened with its own
    // credentials, in its own mount namespace: the daemon never opens a
    // path on a peer's behalf (and may not even see it).
    let netns = open_netns(command, &env, log);
    let wait = peek.budget + SLACK;
    let request = Request {
        env,
        stdin,
        netns_fd: netns.is_some(),
        wait_ms: Some(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX)),
    };
    let mut outcome = exchange(stream, &request, netns.as_ref(), wait);
    // The daemon went away mid-call (killed, crashed, OOM): the connection
    // closed with no answer, so no daemon is still running it, and what it
    // did is on disk under the attachment's locks. One more try through the
    // daemon (the restarted one) is then safe: DEL, CHECK, STATUS and GC can
    // be repeated, and an ADD that may be half done is undone first, by a
    // DEL of the same attachment, as a runtime does after a failed ADD.
    // Once only: a request that took the daemon down twice is not sent again.
    if let Err(Failure::Lost(why) | Failure::Unread(why)) = &outcome {
        log(
            "warn",
            &format!(
                "the wasm-cni daemon at {} went away mid-call ({why}); trying once more",
                peek.socket.display()
            ),
        );
        outcome = once_more(
            &peek.socket,
            connect_wait,
            command,
            &request,
            netns.as_ref(),
            wait,
        );
    }
    match outcome {
        Ok(r) => r,
        Err(Failure::Lost(why) | Failure::Unread(why) | Failure::Other(why)) => reply(
            log,
            ClientError::new(
                code::TRY_AGAIN_LATER,
                format!(
                    "the wasm-cni daemon at {} gave no answer: {why}",
                    peek.socket.display()
                ),
            ),
            peek.cni_version.as_deref(),
        ),
    }
}

/// Why an exchange with the daemon gave no answer.
#[derive(Debug)]
enum Failure {
    /// The connection closed before a whole answer: the daemon is gone.
    Lost(String),
    /// The daemon's side closed with the request not read in full (the
    /// kernel says so with a reset rather than an end of stream): a daemon
    /// stopping, or one that exited with this connection still waiting to
    /// be accepted. Nothing of the request ran, so it may always be sent
    /// again.
    Unread(String),
    /// Anything else (a deadline, a message that is not the daemon's):
    /// the daemon may still be at work, so nothing is sent again.
    Other(String),
}

/// How many times a request the daemon did not read is sent again.
const UNREAD_RESENDS: u32 = 3;

/// The retry after a lost connection: wait for the daemon as the first
/// connect did, undo an interrupted ADD, then send `request` again.
fn once_more(
    socket: &std::path::Path,
    connect_wait: Duration,
    command: Option<&str>,
    request: &Request,
    netns: Option<&OwnedFd>,
    wait: Duration,
) -> Result<Response, Failure> {
    let reconnect = || {
        connect(socket, connect_wait)
            .map_err(|e| Failure::Other(format!("it went away mid-call and is not back: {e}")))
    };
    // A daemon between stop and start can take a connection it never
    // reads (one in its backlog as it exits): sent again, a few times.
    let send = |request: &Request| {
        let mut unread = 0;
        loop {
            match exchange(reconnect()?, request, netns, wait) {
                Err(Failure::Unread(_)) if unread < UNREAD_RESENDS => unread += 1,
                other => return other,
            }
        }
    };
    if command == Some("ADD") {
        let mut del = request.clone();
        for (k, v) in &mut del.env {
            if k == "CNI_COMMAND" {
                *v = "DEL".into();
            }
        }
        let undone = send(&del).map_err(|f| match f {
            Failure::Lost(w) | Failure::Unread(w) | Failure::Other(w) => {
                Failure::Other(format!("undoing the interrupted ADD: {w}"))
            }
        })?;
        if undone.exit_code != 0 {
            return Err(Failure::Other(format!(
                "undoing the interrupted ADD: {}",
                undone.stdout.trim()
            )));
        }
    }
    send(request).map_err(|f| match f {
        Failure::Lost(w) | Failure::Unread(w) => Failure::Other(format!("it went away again: {w}")),
        other => other,
    })
}

/// Connect to the daemon, retrying for up to `wait` while nothing listens
/// (the socket is missing, or no one accepts on it: a daemon between stop
/// and start). Any other error (a permission, a path that is not a
/// socket) is final at once: waiting would not change it.
fn connect(socket: &std::path::Path, wait: Duration) -> std::io::Result<UnixStream> {
    use std::io::ErrorKind;
    let deadline = std::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(10);
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `CNI_NETNS`, opened for ADD, CHECK and DEL. One this client cannot
/// open goes without a descriptor: the daemon then does what a process of
/// the peer's own would find (for root, the path; for others, a namespace
/// that cannot be opened: DEL goes on without it, ADD and CHECK fail).
fn open_netns(command: Option<&str>, env: &[(String, String)], log: Log<'_>) -> Option<OwnedFd> {
    if !matches!(command, Some("ADD" | "CHECK" | "DEL")) {
        return None;
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "CNI_NETNS")
        .map(|(_, v)| v.as_str())
        .filter(|p| !p.is_empty())?;
    use rustix::fs::{open, Mode, OFlags};
    match open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => Some(fd),
        Err(e) => {
            log("debug", &format!("CNI_NETNS {path:?}: {e}"));
            None
        }
    }
}

/// Send `bytes`, the first of them with `fd` attached (`SCM_RIGHTS`).
fn send(stream: &mut UnixStream, bytes: &[u8], fd: Option<&OwnedFd>) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let Some(fd) = fd else {
        return stream.write_all(bytes);
    };
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    if !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the descriptor"));
    }
    let n = loop {
        match sendmsg(
            &*stream,
            &[std::io::IoSlice::new(bytes)],
            &mut cmsg,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    stream.write_all(&bytes[n..])
}

fn exchange(
    mut stream: UnixStream,
    request: &Request,
    netns: Option<&OwnedFd>,
    wait: Duration,
) -> Result<Response, Failure> {
    use std::io::ErrorKind;
    let reset = |e: &std::io::Error| e.kind() == ErrorKind::ConnectionReset;
    let gone = |e: &std::io::Error| {
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
        )
    };
    stream
        .set_write_timeout(Some(wait))
        .and_then(|()| stream.set_read_timeout(Some(wait)))
        .map_err(|e| Failure::Other(e.to_string()))?;
    // A daemon that refuses this client answers before reading it all:
    // the answer, if there is one, says more than the broken pipe.
    let sent = send(&mut stream, &request.encode(), netns);
    // Tell the daemon the request is complete; the answer still comes back.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Through a buffer: the answer's five fields in one or two reads, not
    // a read each. Nothing follows the answer on this connection.
    let answer = Response::read(&mut std::io::BufReader::with_capacity(4096, &stream));
    match (answer, sent) {
        (Ok(r), _) => Ok(r),
        (Err(_), Err(e)) if reset(&e) => Err(Failure::Unread(format!("sending the request: {e}"))),
        (Err(_), Err(e)) if gone(&e) => Err(Failure::Lost(format!("sending the request: {e}"))),
        (Err(_), Err(e)) => Err(Failure::Other(format!("sending the request: {e}"))),
        (Err(e), Ok(())) if e.is_timeout() => Err(Failure::Other(format!(
            "no answer within {} ms",
            wait.as_millis()
        ))),
        (Err(wire::WireError::Io(e)), Ok(())) if reset(&e) => Err(Failure::Unread(e.to_string())),
        (Err(wire::WireError::Io(e)), Ok(())) if gone(&e) => Err(Failure::Lost(e.to_string())),
        (Err(e), Ok(())) => Err(Failure::Other(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_and_socket_come_from_the_config() {
        let p = peek(br#"{"cniVersion":"1.0.0","daemon":"require","daemonSocket":"/tmp/d.sock","chain":[{"type":"a","wasm":{"deadlineMs":500}},{"type":"b","ipam":{"type":"c"}}]}"#).unwrap();
        assert_eq!(p.mode, Mode::Require);
        assert_eq!(p.socket, PathBuf::from("/tmp/d.sock"));
        assert_eq!(
            p.budget,
            Duration::from_millis(500 + 2 * DEFAULT_DEADLINE_MS)
        );
        let p = peek(br#"{"cniVersion":"1.0.0","chain":[]}"#).unwrap();
        assert_eq!(p.mode, Mode::Off);
        assert_eq!(p.socket, PathBuf::from(DEFAULT_SOCKET));
        let (e, v) = peek(br#"{"cniVersion":"1.0.0","daemon":"maybe"}"#)
            .err()
            .unwrap();
        assert_eq!(e.code, 7);
        assert_eq!(v.as_deref(), Some("1.0.0"));
        assert!(peek(br#"{"daemon":"prefer","daemonSocket":"rel/d.sock"}"#).is_err());
        // Garbage goes to the edge, which reports it as it always does.
        assert_eq!(peek(b"{not json").unwrap().mode, Mode::Off);
    }

    #[test]
    fn a_daemon_that_is_down_is_try_again_later_at_once_or_local() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-client-{}", std::process::id()));
        let conf = |mode: &str| {
            format!(
                r#"{{"cniVersion":"1.0.0","name":"n","daemon":"{mode}","daemonSocket":"{}/none.sock","daemonWaitMs":0,"chain":[{{"type":"x"}}]}}"#,
                dir.display()
            )
            .into_bytes()
        };
        let vars = |cmd: &str| vec![("CNI_COMMAND".to_string(), cmd.to_string())];
        let lines = std::cell::RefCell::new(Vec::<String>::new());
        let log = |level: &'static str, line: &str| {
            lines.borrow_mut().push(format!("{level}: {line}"));
        };
        let local = |why: Local, _: Vec<(String, String)>, _: Vec<u8>| Response {
            exit_code: 0,
            stdout: match why {
                Local::Off => "local".into(),
                Local::NoDaemon(w) => format!("local: {w}"),
            },
            stderr: String::new(),
        };
        let started = std::time::Instant::now();
        let out = run(vars("ADD"), conf("require"), local, &log);
        // daemonWaitMs 0: 11 at once.
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(!out.stdout.contains("waited"), "{}", out.stdout);
        assert_eq!(out.exit_code, 1);
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);
        let started = std::time::Instant::now();
        let out = run(vars("STATUS"), conf("require"), local, &log);
        assert!(out.stdout.contains("\"code\": 50"), "{}", out.stdout);
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "STATUS never waits"
        );
        // prefer: the local engine, told why (it says so, once).
        let out = run(vars("ADD"), conf("prefer"), local, &log);
        assert!(
            out.stdout.starts_with("local: no daemon at"),
            "{}",
            out.stdout
        );
        assert!(
            !lines.borrow().iter().any(|l| l.contains("no daemon")),
            "the engine says it, not the client: {:?}",
            lines.borrow()
        );
        // off: local, without asking anyone.
        let out = run(vars("ADD"), conf("off"), local, &log);
        assert_eq!(out.stdout, "local");
    }

    /// `daemonWaitMs` is the operator's, but whatever it says, a call ends
    /// within the chain's budget, and a value that is not a whole number of
    /// milliseconds is refused rather than read as 0 or forever.
    #[test]
    fn daemon_wait_is_a_bounded_whole_number() {
        let conf = |wait: &str| {
            format!(
                r#"{{"cniVersion":"1.0.0","daemon":"require","daemonWaitMs":{wait},"chain":[{{"type":"a","wasm":{{"deadlineMs":300}}}}]}}"#
            )
        };
        for bad in ["-1", "1.5", "\"5000\"", "1e30", "true", "[]", "{}"] {
            let (e, _) = peek(conf(bad).as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert_eq!(e.code, code::INVALID_CONFIG, "{bad}");
            assert!(e.msg.contains("daemonWaitMs"), "{bad}: {}", e.msg);
        }
        let wait = |w: &str| peek(conf(w).as_bytes()).unwrap().connect_wait;
        assert_eq!(wait("0"), Duration::ZERO);
        assert_eq!(wait("120"), Duration::from_millis(120));
        // Never beyond the chain's own deadline.
        assert_eq!(wait("18446744073709551615"), Duration::from_millis(300));
        assert_eq!(wait("null"), Duration::from_millis(300));
        let default = peek(br#"{"daemon":"require","chain":[{"type":"a"}]}"#).unwrap();
        assert_eq!(default.connect_wait, Duration::from_millis(DEFAULT_WAIT_MS));
        let dir = std::env::temp_dir().join(format!("wasm-cni-wait-{}", std::process::id()));
        let stdin = format!(
            r#"{{"cniVersion":"1.0.0","daemon":"require","daemonSocket":"{}/none.sock","daemonWaitMs":18446744073709551615,"chain":[{{"type":"a","wasm":{{"deadlineMs":300}}}}]}}"#,
            dir.display()
        );
        let started = std::time::Instant::now();
        let out = run(
            vec![("CNI_COMMAND".into(), "CHECK".into())],
            stdin.clone().into_bytes(),
            |_, _, _| unreachable!("require runs only DEL locally"),
            &|_, _| {},
        );
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // DEL, after the same wait, runs here: pods stay deletable.
        let out = run(
            vec![("CNI_COMMAND".into(), "DEL".into())],
            stdin.into_bytes(),
            |why, _, _| Response {
                exit_code: 0,
                stdout: format!("{why:?}"),
                stderr: String::new(),
            },
            &|_, _| {},
        );
        assert!(
            out.stdout.contains("running DEL in-process"),
            "{}",
            out.stdout
        );
    }

    /// A daemon that starts listening while a `require` call waits gets the
    /// call: a restart is not a failed ADD.
    #[test]
    fn a_daemon_that_comes_back_within_the_wait_gets_the_call() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-back-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("d.sock");
        // A stale socket file with no one listening: refused, not missing.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let path = socket.clone();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            let _ = std::fs::remove_file(&path);
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let (mut s, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut req).unwrap();
            let answer = Response {
                exit_code: 0,
                stdout: "from the daemon".into(),
                stderr: String::new(),
            };
            s.write_all(&answer.encode()).unwrap();
        });
        let stdin = format!(
            r#"{{"cniVersion":"1.0.0","daemon":"require","daemonSocket":"{}","chain":[{{"type":"a"}}]}}"#,
            socket.display()
        );
        let started = std::time::Instant::now();
        let out = run(
            vec![("CNI_COMMAND".into(), "ADD".into())],
            stdin.into_bytes(),
            |_, _, _| unreachable!("require never runs locally"),
            &|_, _| {},
        );
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out.stdout, "from the daemon");
        assert!(started.elapsed() >= Duration::from_millis(400));
    }

    /// A daemon killed mid-call: the connection closes unanswered. The
    /// client waits for the restarted daemon and sends the call once more;
    /// an ADD is undone first (DEL of the same attachment). A daemon that
    /// goes away twice gets no third request, and one that answers
    /// something else is not sent the call again.
    #[test]
    fn a_daemon_that_dies_mid_call_gets_it_once_more() {
        use std::os::unix::net::UnixListener;
        let dir = std::env::temp_dir().join(format!("wasm-cni-lost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Serve `plan` connections in order: `Answer` answers, `Close`
        // reads the request and closes (a daemon killed mid-call), `Unread`
        // reads one byte of it and closes (a daemon stopping with the
        // connection in its backlog: the client sees a reset). Returns the
        // CNI_COMMAND of every request it read ("unread" for the others).
        #[derive(Clone, Copy, PartialEq)]
        enum Step {
            Answer,
            Close,
            Unread,
        }
        use Step::{Answer, Close, Unread};
        let serve = |name: &str, plan: Vec<Step>| {
            let socket = dir.join(name);
            let _ = std::fs::remove_file(&socket);
            let listener = UnixListener::bind(&socket).unwrap();
            listener.set_nonblocking(true).unwrap();
            let server = std::thread::spawn(move || {
                let mut seen = Vec::new();
                for answer in plan {
                    // A client that does not come back ends the plan (and
                    // fails the test) instead of hanging it.
                    let started = std::time::Instant::now();
                    let mut s = loop {
                        match listener.accept() {
                            Ok((s, _)) => break s,
                            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                                std::thread::sleep(Duration::from_millis(10))
                            }
                            Err(_) => return seen,
                        }
                    };
                    s.set_nonblocking(false).unwrap();
                    if answer == Unread {
                        std::io::Read::read_exact(&mut s, &mut [0u8]).unwrap();
                        seen.push("unread".to_string());
                        continue;
                    }
                    let req = Request::read(&mut s).unwrap();
                    let cmd = req.env.iter().find(|(k, _)| k == "CNI_COMMAND").unwrap();
                    seen.push(cmd.1.clone());
                    if answer == Answer {
                        let r = Response {
                            exit_code: 0,
                            stdout: format!("{} done", cmd.1),
                            stderr: String::new(),
                        };
                        s.write_all(&r.encode()).unwrap();
                    }
                }
                seen
            });
            (socket, server)
        };
        let call = |socket: &std::path::Path, cmd: &str| {
            let stdin = format!(
                r#"{{"cniVersion":"1.0.0","daemon":"require","daemonSocket":"{}","chain":[{{"type":"a"}}]}}"#,
                socket.display()
            );
            run(
                vec![("CNI_COMMAND".into(), cmd.into())],
                stdin.into_bytes(),
                |_, _, _| unreachable!("require never runs locally"),
                &|_, _| {},
            )
        };

        let (socket, server) = serve("add.sock", vec![Close, Answer, Answer]);
        let out = call(&socket, "ADD");
        assert_eq!(server.join().unwrap(), ["ADD", "DEL", "ADD"]);
        assert_eq!(out.stdout, "ADD done");

        let (socket, server) = serve("del.sock", vec![Close, Answer]);
        let out = call(&socket, "DEL");
        assert_eq!(server.join().unwrap(), ["DEL", "DEL"]);
        assert_eq!(out.stdout, "DEL done");

        let (socket, server) = serve("twice.sock", vec![Close, Close]);
        let out = call(&socket, "CHECK");
        assert_eq!(server.join().unwrap(), ["CHECK", "CHECK"]);
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);
        assert!(out.stdout.contains("went away again"), "{}", out.stdout);

        // A request the daemon never read ran nowhere: sent again, both the
        // undo and the ADD, however the first connection was lost.
        let (socket, server) = serve("unread.sock", vec![Unread, Unread, Answer, Unread, Answer]);
        let out = call(&socket, "ADD");
        assert_eq!(
            server.join().unwrap(),
            ["unread", "unread", "DEL", "unread", "ADD"]
        );
        assert_eq!(out.stdout, "ADD done");
        // But only a few times.
        let (socket, server) = serve("unread4.sock", vec![Close, Unread, Unread, Unread, Unread]);
        let out = call(&socket, "CHECK");
        assert_eq!(
            server.join().unwrap(),
            ["CHECK", "unread", "unread", "unread", "unread"]
        );
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);

        // An answer that is not the daemon's is not a lost connection: the
        // daemon may still be at work, so the request is not sent again.
        let socket = dir.join("garbled.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = Request::read(&mut s).unwrap();
            s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
            drop(s);
            listener.set_nonblocking(true).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            listener.accept().is_ok()
        });
        let out = call(&socket, "ADD");
        let again = server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.stdout.contains("not a wasm-cni message"),
            "{}",
            out.stdout
        );
        assert!(
            !again,
            "sent again after an answer that was not the daemon's"
        );
    }

    #[test]
    fn errors_print_as_the_engine_prints_them() {
        assert_eq!(
            error_json(11, "a <b>", Some("1.0.0")),
            "{\n    \"cniVersion\": \"1.0.0\",\n    \"code\": 11,\n    \"msg\": \"a \\u003cb\\u003e\"\n}"
        );
    }
}
