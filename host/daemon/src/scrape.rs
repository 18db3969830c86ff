//! The client side of the daemon's metrics endpoint: `wasm-cni status` and
//! `wasm-cni probe` ask it for a page, and must know that what answers is
//! the daemon.
//!
//! What a local user controls here: any TCP port the daemon is not holding
//! (it may bind the metrics port first, or again while the daemon retries),
//! and what a listener it owns answers, byte by byte. What it must not
//! gain: figures or a verdict taken for the daemon's, or a `status` or a
//! probe held past its time. So the peer is checked before a byte of its
//! answer is believed — on a unix socket by its credentials
//! (`SO_PEERCRED`), on TCP by the owner of the socket that accepted the
//! connection (`/proc/net/tcp`, the kernel's word for the accepting
//! socket, which takes its listener's owner) — as root or the user asking,
//! and the whole exchange (connect, request, answer) has one deadline.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::MetricsAddr;

/// A page's size bound.
const MAX_REPLY: usize = 4 << 20;

/// `GET path` on the daemon's metrics endpoint at `addr`, within `within`
/// all told: the status code and the body.
pub fn fetch(addr: &MetricsAddr, path: &str, within: Duration) -> Result<(u16, String), String> {
    let deadline = Instant::now() + within;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let reply = match addr {
        MetricsAddr::Unix(p) => {
            let stream =
                connect_unix(p, deadline).map_err(|e| format!("metrics {}: {e}", p.display()))?;
            let (uid, pid) = peer_of_unix(&stream).map_err(|e| format!("metrics: {e}"))?;
            if !trusted_uid(uid) {
                return Err(format!(
                    "metrics {}: served by uid {uid} (pid {pid}), not by the daemon (root): \
                     refused",
                    p.display()
                ));
            }
            exchange(stream, request.as_bytes(), deadline)
        }
        MetricsAddr::Tcp(a) => {
            let left = deadline.saturating_duration_since(Instant::now());
            let stream = TcpStream::connect_timeout(a, left.max(Duration::from_millis(1)))
                .map_err(|e| format!("metrics {a}: {e}"))?;
            let local = stream.local_addr().map_err(|e| format!("metrics: {e}"))?;
            match accepting_uid(*a, local) {
                Some(uid) if trusted_uid(uid) => {}
                Some(uid) => {
                    return Err(format!(
                        "metrics {a}: served by uid {uid}, not by the daemon (root): refused \
                         (a local user holds the port; the daemon serves CNI without it and \
                         takes it back once it is free)"
                    ))
                }
                None => {
                    return Err(format!(
                        "metrics {a}: the kernel names no owner for the connection, so what \
                         answers cannot be told to be the daemon: refused"
                    ))
                }
            }
            exchange(stream, request.as_bytes(), deadline)
        }
    }
    .map_err(|e| format!("metrics: {e}"))?;
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or("metrics: not an HTTP reply")?;
    let status = head.lines().next().unwrap_or_default();
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("metrics: not an HTTP status line: {status:?}"))?;
    Ok((code, body.to_string()))
}

/// Root, or whoever asks (a daemon run by the same user, as in a test).
fn trusted_uid(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Send `request` and read the answer to its end, all by `deadline`.
fn exchange<S: Read + Write + Timed>(
    mut stream: S,
    request: &[u8],
    deadline: Instant,
) -> io::Result<Vec<u8>> {
    let left = |what: &str| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no whole answer within the deadline ({what})"),
            ))
        } else {
            Ok(left)
        }
    };
    stream.write_timeout(left("sending")?)?;
    stream.write_all(request)?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        stream.read_timeout(left("reading")?)?;
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(reply),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no whole answer within the deadline",
                ))
            }
            Err(e) => return Err(e),
        };
        if reply.len() + n > MAX_REPLY {
            return Err(io::Error::other(format!(
                "an answer over {MAX_REPLY} bytes"
            )));
        }
        reply.extend_from_slice(&buf[..n]);
    }
}

trait Timed {
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
}

impl Timed for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

impl Timed for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

/// Connect to a unix socket by `deadline`: a listener whose backlog is
/// full makes a blocking connect wait without end.
fn connect_unix(path: &std::path::Path, deadline: Instant) -> io::Result<UnixStream> {
    use rustix::net::{
        connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
    };
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    let mut pause = Duration::from_millis(1);
    loop {
        match connect(&fd, &addr) {
            Ok(()) => break,
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the listener took no connection within the deadline",
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The (uid, pid) the kernel recorded for the other end at connect.
fn peer_of_unix(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    Ok((
        cred.uid.as_raw(),
        u32::try_from(cred.pid.as_raw_nonzero().get()).unwrap_or(0),
    ))
}

/// The owner of the socket that accepted our connection from `local` to
/// `server`: its line in `/proc/net/tcp` (or `tcp6`) of this network
/// namespace, local end `server`, remote end `local`.
pub(crate) fn accepting_uid(server: SocketAddr, local: SocketAddr) -> Option<u32> {
    let file = match server {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let table = std::fs::read_to_string(file).ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (near, far, uid) = (f.get(1)?, f.get(2)?, f.get(7)?);
        (parse_socket(near)? == server && parse_socket(far)? == local)
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// The owner of a listening socket at `at` (exactly, or on the wildcard
/// address of its family), as `/proc/net/tcp` lists it: who holds a port.
pub(crate) fn listening_uid(at: SocketAddr) -> Option<u32> {
    let file = match at {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let table = std::fs::read_to_string(file).ok()?;
    let listeners: Vec<(SocketAddr, u32)> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // State 0A: LISTEN.
            if f.get(3) != Some(&"0A") {
                return None;
            }
            Some((parse_socket(f.get(1)?)?, f.get(7)?.parse().ok()?))
        })
        .filter(|(a, _)| a.port() == at.port())
        .collect();
    listeners
        .iter()
        .find(|(a, _)| *a == at)
        .or_else(|| listeners.iter().find(|(a, _)| a.ip().is_unspecified()))
        .map(|(_, uid)| *uid)
}

/// `0100007F:2616` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit
/// word of the address as the kernel printed it, in its own byte order.
fn parse_socket(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match words.as_slice() {
        [w] => IpAddr::from(w.to_ne_bytes()),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].into_iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::from(bytes)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_addresses_parse_as_the_kernel_prints_them() {
        // What this machine's kernel prints for its own sockets, read back.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(listening_uid(at), Some(me));
        let client = TcpStream::connect(at).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let local = client.local_addr().unwrap();
        assert_eq!(accepting_uid(at, local), Some(me));
        let v6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(v6) = v6 {
            assert_eq!(listening_uid(v6.local_addr().unwrap()), Some(me));
        }
        assert_eq!(parse_socket("nonsense"), None);
        assert_eq!(parse_socket("0100007F:zz"), None);
    }

    #[test]
    fn a_trickled_answer_ends_at_the_deadline_of_the_whole_exchange() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // A byte every 100 ms: each read is quick, the whole is not.
            for _ in 0..40 {
                if s.write_all(b"H").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let started = Instant::now();
        let e = fetch(
            &MetricsAddr::Tcp(at),
            "/metrics",
            Duration::from_millis(500),
        )
        .unwrap_err();
        let took = started.elapsed();
        assert!(e.contains("within the deadline"), "{e}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        server.join().unwrap();
    }
}
