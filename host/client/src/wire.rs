//! The daemon's wire format, one request and one response per connection
//! over a unix stream socket. Binary framing with lengths up front, so
//! that a peer can neither make the daemon guess where a message ends nor
//! make it buffer without bound:
//!
//! ```text
//! request:  "WCNQ" u8:2 u8:flags u32:wait-ms u32:env-len env u32:stdin-len stdin
//!           "WCNQ" u8:1 u32:env-len env u32:stdin-len stdin       (clients before 2)
//! response: "WCNS" u8:1 i32:exit-code u32:stdout-len stdout u32:stderr-len stderr
//! ```
//!
//! Integers are big-endian. `env` is a JSON array of `[KEY, VALUE]` pairs
//! (the `CNI_*` variables and `WASM_CNI_LOG`, nothing else: JSON, so that
//! any value crosses unchanged), `stdin` the runtime's stdin as it came;
//! `stdout` is what the client prints, `stderr` the log lines the request
//! produced at the client's log level.
//!
//! Flag [`FLAG_NETNS_FD`]: the container's network namespace, which the
//! client opened itself, comes with the request's first bytes as an
//! `SCM_RIGHTS` descriptor; the daemon never opens `CNI_NETNS` by path for
//! such a request. `wait-ms` is how long the client waits for the answer
//! (0: not said), so that the daemon never starts what the client will have
//! given up on.

use std::io::{self, Read, Write};

/// The request version this side writes; version 1 is still read.
pub const VERSION: u8 = 2;
/// The response version (unchanged since 1).
pub const RESPONSE_VERSION: u8 = 1;
/// A network-namespace descriptor accompanies the request.
pub const FLAG_NETNS_FD: u8 = 1;
const REQUEST_MAGIC: &[u8; 4] = b"WCNQ";
const RESPONSE_MAGIC: &[u8; 4] = b"WCNS";

/// The environment of a request: far more than CNI ever needs.
pub const MAX_ENV_BYTES: usize = 64 << 10;
/// The runtime's stdin: a network config with a prevResult, with room.
pub const MAX_STDIN_BYTES: usize = 4 << 20;
/// A response: the result (bounded per plugin) and the request's logs.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Whether a variable crosses to the daemon: CNI's, the log level, and the
/// runtime's W3C trace context (libcni sets it for every plugin).
pub fn forwarded(key: &str) -> bool {
    key.starts_with("CNI_") || matches!(key, "WASM_CNI_LOG" | "TRACEPARENT" | "TRACESTATE")
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    /// The client passes the container's namespace as a descriptor.
    pub netns_fd: bool,
    /// How long the client waits for the answer, if it said.
    pub wait_ms: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("not a wasm-cni message")]
    Magic,
    #[error("wire version {0} (this side speaks 1 and {VERSION})")]
    Version(u8),
    #[error("unknown flags {0:#04x}")]
    Flags(u8),
    #[error("{what} of {len} bytes is over the limit of {max}")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("the environment is not a JSON list of [KEY, VALUE] strings")]
    Env,
    #[error("the output is not UTF-8")]
    Output,
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl WireError {
    /// The peer went away, or was too slow for the read deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, WireError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let env = serde_json::to_string(&self.env).unwrap_or_else(|_| "[]".into());
        let mut out = Vec::with_capacity(18 + env.len() + self.stdin.len());
        out.extend_from_slice(REQUEST_MAGIC);
        out.push(VERSION);
        out.push(if self.netns_fd { FLAG_NETNS_FD } else { 0 });
        out.extend_from_slice(&self.wait_ms.unwrap_or(0).to_be_bytes());
        put_bytes(&mut out, env.as_bytes());
        put_bytes(&mut out, &self.stdin);
        out
    }

    /// Read one request, refusing oversized parts before reading them.
    pub fn read(r: &mut impl Read) -> Result<Self, WireError> {
        let version = header(r, REQUEST_MAGIC, &[1, VERSION])?;
        let (mut netns_fd, mut wait_ms) = (false, None);
        if version >= 2 {
            let mut head = [0u8; 5];
            r.read_exact(&mut head)?;
            if head[0] & !FLAG_NETNS_FD != 0 {
                return Err(WireError::Flags(head[0]));
            }
            netns_fd = head[0] & FLAG_NETNS_FD != 0;
            let wait = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
            wait_ms = (wait != 0).then_some(wait);
        }
        let env = bytes(r, "the environment", MAX_ENV_BYTES)?;
        let pairs: Vec<(String, String)> =
            serde_json::from_slice(&env).map_err(|_| WireError::Env)?;
        // What a process environment could not hold, no request holds.
        let bad = |k: &str, v: &str| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0');
        if pairs.iter().any(|(k, v)| bad(k, v)) {
            return Err(WireError::Env);
        }
        let stdin = bytes(r, "stdin", MAX_STDIN_BYTES)?;
        Ok(Request {
            env: pairs,
            stdin,
            netns_fd,
            wait_ms,
        })
    }
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17 + self.stdout.len() + self.stderr.len());
        out.extend_from_slice(RESPONSE_MAGIC);
        out.push(RESPONSE_VERSION);
        out.extend_from_slice(&self.exit_code.to_be_bytes());
        put_bytes(&mut out, self.stdout.as_bytes());
        put_bytes(&mut out, self.stderr.as_bytes());
        out
    }

    pub fn read(r: &mut impl Read) -> Result<Self, WireError> {
        header(r, RESPONSE_MAGIC, &[RESPONSE_VERSION])?;
        let mut code = [0u8; 4];
        r.read_exact(&mut code)?;
        let stdout = bytes(r, "the output", MAX_RESPONSE_BYTES)?;
        let stderr = bytes(r, "the log", MAX_RESPONSE_BYTES)?;
        Ok(Response {
            exit_code: i32::from_be_bytes(code),
            stdout: String::from_utf8(stdout).map_err(|_| WireError::Output)?,
            stderr: String::from_utf8(stderr).map_err(|_| WireError::Output)?,
        })
    }

    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())?;
        w.flush()
    }
}

/// The magic, then one of `versions`, which it returns.
fn header(r: &mut impl Read, magic: &[u8; 4], versions: &[u8]) -> Result<u8, WireError> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    if &head[..4] != magic {
        return Err(WireError::Magic);
    }
    if !versions.contains(&head[4]) {
        return Err(WireError::Version(head[4]));
    }
    Ok(head[4])
}

fn bytes(r: &mut impl Read, what: &'static str, max: usize) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(WireError::TooLarge { what, len, max });
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip() {
        let req = Request {
            env: vec![
                ("CNI_COMMAND".into(), "ADD".into()),
                ("CNI_ARGS".into(), "A=1;B=2".into()),
                // Found by the daemon_request fuzzer: line endings in a
                // value crossed as line breaks.
                ("CNI_IFNAME".into(), "eth0\r".into()),
                ("CNI_NETNS".into(), "/run/netns/a\nb".into()),
            ],
            stdin: b"{\"x\":1}\n\xff".to_vec(),
            netns_fd: true,
            wait_ms: Some(40_000),
        };
        assert_eq!(Request::read(&mut req.encode().as_slice()).unwrap(), req);
        // A client before version 2 (no flags, no wait) is still read.
        let mut v1 = b"WCNQ\x01".to_vec();
        put_bytes(&mut v1, br#"[["CNI_COMMAND","DEL"]]"#);
        put_bytes(&mut v1, b"{}");
        let old = Request::read(&mut v1.as_slice()).unwrap();
        assert_eq!(old.env, vec![("CNI_COMMAND".into(), "DEL".into())]);
        assert!(!old.netns_fd && old.wait_ms.is_none());
        // Flags this side does not know are refused, not ignored.
        let mut odd = req.encode();
        odd[5] = 0x81;
        assert!(matches!(
            Request::read(&mut odd.as_slice()),
            Err(WireError::Flags(0x81))
        ));
        let resp = Response {
            exit_code: 1,
            stdout: "{}".into(),
            stderr: "wasm-cni warn: x\n".into(),
        };
        assert_eq!(Response::read(&mut resp.encode().as_slice()).unwrap(), resp);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic_or_a_big_buffer() {
        assert!(matches!(
            Request::read(&mut &b"GET / HTTP/1.1\r\n"[..]),
            Err(WireError::Magic)
        ));
        assert!(matches!(
            Request::read(&mut &b"WCNQ\x09"[..]),
            Err(WireError::Version(9))
        ));
        // A length of 4 GiB is refused before anything is allocated.
        let mut huge = b"WCNQ\x01".to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            Request::read(&mut huge.as_slice()),
            Err(WireError::TooLarge { .. })
        ));
        // Truncated: an I/O error (unexpected EOF).
        let mut cut = Request {
            stdin: vec![1; 100],
            ..Request::default()
        }
        .encode();
        cut.truncate(50);
        assert!(matches!(
            Request::read(&mut cut.as_slice()),
            Err(WireError::Io(_))
        ));
        for bad in [
            &b"abc"[..],
            br#"[["","x"]]"#,
            br#"[["A=B","x"]]"#,
            br#"[["A","\u0000"]]"#,
        ] {
            let mut env = b"WCNQ\x01".to_vec();
            env.extend_from_slice(&(bad.len() as u32).to_be_bytes());
            env.extend_from_slice(bad);
            env.extend_from_slice(&0u32.to_be_bytes());
            assert!(
                matches!(Request::read(&mut env.as_slice()), Err(WireError::Env)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn only_cni_variables_and_the_log_level_cross() {
        assert!(forwarded("CNI_COMMAND") && forwarded("CNI_NETNS"));
        assert!(forwarded("WASM_CNI_LOG"));
        assert!(forwarded("TRACEPARENT") && forwarded("TRACESTATE"));
        // Where spans go is the daemon operator's choice, not a peer's.
        assert!(!forwarded("OTEL_EXPORTER_OTLP_ENDPOINT"));
        assert!(!forwarded("PATH") && !forwarded("HOME") && !forwarded("LD_PRELOAD"));
    }
}
