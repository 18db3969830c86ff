//! The thin client: what `wasm-cni` does when a runtime runs it for a
//! network whose config says `"daemon": "prefer"` or `"require"`. It reads
//! only the keys it needs to find the daemon, forwards the `CNI_*`
//! variables, `WASM_CNI_LOG` and stdin over the socket, and prints exactly
//! what the daemon answers, with its exit code. No engine, no component, no
//! plugin config: a per-invocation run happens only for `"off"` (the
//! default), or for `"prefer"` when no daemon listens.
//!
//! Once a request is sent the client never falls back to running the chain
//! itself: the daemon may be doing it, and two runs of one ADD would race.
//! A daemon that does not answer in time is "try again later" (11).

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::wire::{self, Request, Response};
use crate::cni::{CniError, ErrorCode};
use crate::edge;
use crate::sandbox::limits::DEFAULT_DEADLINE_MS;

/// Where the daemon listens unless the config says `daemonSocket`.
pub const DEFAULT_SOCKET: &str = "/run/wasm-cni/daemon.sock";

/// `daemon` in the `wasm-cni` plugin config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run the chain in this process (the default).
    Off,
    /// Use the daemon when one answers, else run in-process with a warning.
    Prefer,
    /// Use the daemon; when none answers, fail at once with code 11.
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
}

/// How long the chain of a request's config may take: every plugin's and
/// IPAM delegate's deadline, summed (the default when there is no chain).
pub fn budget_of(stdin: &[u8]) -> Duration {
    let Ok(Value::Object(conf)) = serde_json::from_slice::<Value>(stdin) else {
        return Duration::from_millis(DEFAULT_DEADLINE_MS);
    };
    budget(&conf)
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

fn peek(stdin: &[u8]) -> Result<Peek, (CniError, Option<String>)> {
    // Anything unparsable is the edge's to report, in-process.
    let Ok(Value::Object(conf)) = serde_json::from_slice::<Value>(stdin) else {
        return Ok(Peek {
            mode: Mode::Off,
            socket: PathBuf::new(),
            cni_version: None,
            budget: Duration::ZERO,
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
                CniError::new(
                    ErrorCode::InvalidConfig,
                    format!("daemon: {s:?} is not one of \"off\", \"prefer\", \"require\""),
                ),
                cni_version.clone(),
            )
        })?,
        Some(_) => {
            return Err((
                CniError::new(ErrorCode::InvalidConfig, "daemon must be a string"),
                cni_version,
            ))
        }
    };
    let socket = match conf.get("daemonSocket") {
        None | Some(Value::Null) => PathBuf::from(DEFAULT_SOCKET),
        Some(Value::String(s)) if s.starts_with('/') => PathBuf::from(s),
        Some(_) => {
            return Err((
                CniError::new(
                    ErrorCode::InvalidConfig,
                    "daemonSocket must be an absolute path",
                ),
                cni_version,
            ))
        }
    };
    Ok(Peek {
        mode,
        socket,
        cni_version,
        budget: budget(&conf),
    })
}

/// How long past the chain's own budget the client waits: the daemon may
/// queue the request behind another for the same attachment.
const SLACK: Duration = Duration::from_secs(10);

fn reply(e: CniError, cni_version: Option<&str>) -> Response {
    crate::log::error(format_args!("{e}"));
    Response {
        exit_code: 1,
        stdout: e.to_json(cni_version),
        stderr: String::new(),
    }
}

/// Serve one CNI invocation: through the daemon, or in-process.
pub fn run(vars: Vec<(String, String)>, stdin: Vec<u8>) -> Response {
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
        }),
    };
    let peek = match peeked {
        Ok(p) => p,
        Err((e, version)) => return reply(e, version.as_deref()),
    };
    if peek.mode == Mode::Off {
        return in_process(vars, stdin);
    }
    let stream = match UnixStream::connect(&peek.socket) {
        Ok(s) => s,
        Err(e) if peek.mode == Mode::Prefer => {
            crate::log::warn(format_args!(
                "no daemon at {} ({e}); running in-process",
                peek.socket.display()
            ));
            return in_process(vars, stdin);
        }
        Err(e) => {
            // STATUS asks whether ADD can be served: not without the daemon.
            let code = match command {
                Some("STATUS") => ErrorCode::StatusUnavailable,
                _ => ErrorCode::TryAgainLater,
            };
            return reply(
                CniError::new(
                    code,
                    format!(
                        "the wasm-cni daemon is not reachable at {}: {e}",
                        peek.socket.display()
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
    let netns = open_netns(command, &env);
    let wait = peek.budget + SLACK;
    let request = Request {
        env,
        stdin,
        netns_fd: netns.is_some(),
        wait_ms: Some(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX)),
    };
    match exchange(stream, &request, netns, wait) {
        Ok(r) => r,
        Err(why) => reply(
            CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "the wasm-cni daemon at {} gave no answer: {why}",
                    peek.socket.display()
                ),
            ),
            peek.cni_version.as_deref(),
        ),
    }
}

/// `CNI_NETNS`, opened for ADD, CHECK and DEL. One this client cannot
/// open goes without a descriptor: the daemon then does what a process of
/// the peer's own would find (for root, the path; for others, a namespace
/// that cannot be opened: DEL goes on without it, ADD and CHECK fail).
fn open_netns(command: Option<&str>, env: &[(String, String)]) -> Option<OwnedFd> {
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
            crate::log::debug(format_args!("CNI_NETNS {path:?}: {e}"));
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
    netns: Option<OwnedFd>,
    wait: Duration,
) -> Result<Response, String> {
    stream
        .set_write_timeout(Some(wait))
        .and_then(|()| stream.set_read_timeout(Some(wait)))
        .map_err(|e| e.to_string())?;
    // A daemon that refuses this client answers before reading it all:
    // the answer, if there is one, says more than the broken pipe.
    let sent = send(&mut stream, &request.encode(), netns.as_ref());
    drop(netns);
    // Tell the daemon the request is complete; the answer still comes back.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    match (Response::read(&mut stream), sent) {
        (Ok(r), _) => Ok(r),
        (Err(_), Err(e)) => Err(format!("sending the request: {e}")),
        (Err(e), Ok(())) if e.is_timeout() => {
            Err(format!("no answer within {} ms", wait.as_millis()))
        }
        (Err(e), Ok(())) => Err(e.to_string()),
    }
}

fn in_process(vars: Vec<(String, String)>, stdin: Vec<u8>) -> Response {
    let out = edge::run(vars, &mut stdin.as_slice());
    Response {
        exit_code: out.exit_code,
        stdout: out.stdout,
        stderr: String::new(),
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
    fn a_daemon_that_is_down_is_try_again_later_at_once_or_in_process() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-client-{}", std::process::id()));
        let conf = |mode: &str| {
            format!(
                r#"{{"cniVersion":"1.0.0","name":"n","daemon":"{mode}","daemonSocket":"{}/none.sock","chain":[{{"type":"x"}}]}}"#,
                dir.display()
            )
            .into_bytes()
        };
        let vars = |cmd: &str| vec![("CNI_COMMAND".to_string(), cmd.to_string())];
        let started = std::time::Instant::now();
        let out = run(vars("ADD"), conf("require"));
        assert!(started.elapsed() < Duration::from_millis(100));
        assert_eq!(out.exit_code, 1);
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);
        let out = run(vars("STATUS"), conf("require"));
        assert!(out.stdout.contains("\"code\": 50"), "{}", out.stdout);
        // prefer: in-process, which here fails on the environment, with the
        // warning first.
        let (out, log) =
            crate::log::capture(crate::log::Level::Warn, || run(vars("ADD"), conf("prefer")));
        assert!(log.starts_with("wasm-cni warn: no daemon at"), "{log}");
        assert!(out.stdout.contains("\"code\": 4"), "{}", out.stdout);
    }
}
