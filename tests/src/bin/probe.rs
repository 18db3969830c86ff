//! `wasm-cni-probe`: the traffic end of the integration tests, run inside
//! the tests' namespaces with `ip netns exec`.
//!
//! * `serve PORT`: a TCP server on every address (IPv4 and IPv6). Each
//!   connection sends one line: `peer` (answered with the source address
//!   the server saw, to tell masqueraded traffic), `push N` (then N bytes;
//!   answered `got N in SECS`), or `pull N` (answered with N bytes).
//! * `peer ADDR PORT`: print what the server saw as our address.
//! * `push ADDR PORT N` / `pull ADDR PORT N`: move N bytes and print the
//!   rate the receiver saw, in bits per second.
//!
//! Exit status 0 on success, 1 when the connection fails (within 2 s), 2
//! on bad usage.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn usage() -> ! {
    eprintln!(
        "usage: wasm-cni-probe serve PORT | peer ADDR PORT | push ADDR PORT N | pull ADDR PORT N"
    );
    std::process::exit(2)
}

fn num<T: std::str::FromStr>(s: Option<&String>) -> T {
    s.and_then(|s| s.parse().ok()).unwrap_or_else(|| usage())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(num(args.get(1))),
        Some(verb @ ("peer" | "push" | "pull")) => {
            let addr: IpAddr = num(args.get(1));
            let port: u16 = num(args.get(2));
            let n: u64 = if verb == "peer" { 0 } else { num(args.get(3)) };
            client(verb, SocketAddr::new(addr, port), n)
        }
        _ => usage(),
    };
    if let Err(e) = result {
        eprintln!("wasm-cni-probe: {e}");
        std::process::exit(1);
    }
}

fn serve(port: u16) -> std::io::Result<()> {
    // `[::]` takes IPv4 too (bindv6only is 0 in a fresh namespace).
    let listener = TcpListener::bind(("::", port))?;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || {
            let _ = answer(conn);
        });
    }
    Ok(())
}

fn answer(conn: TcpStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    let peer = conn.peer_addr()?.ip();
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let mut out = conn;
    match (
        words.next(),
        words.next().and_then(|n| n.parse::<u64>().ok()),
    ) {
        (Some("peer"), _) => writeln!(out, "{peer}")?,
        (Some("push"), Some(n)) => {
            let start = Instant::now();
            let got = std::io::copy(&mut reader.take(n), &mut std::io::sink())?;
            writeln!(out, "{}", rate(got, start.elapsed()))?;
        }
        (Some("pull"), Some(n)) => {
            std::io::copy(&mut std::io::repeat(0).take(n), &mut out)?;
        }
        _ => writeln!(out, "?")?,
    }
    out.shutdown(Shutdown::Write)
}

fn rate(bytes: u64, took: Duration) -> String {
    let secs = took.as_secs_f64().max(1e-6);
    format!("{:.0}", bytes as f64 * 8.0 / secs)
}

fn client(verb: &str, to: SocketAddr, n: u64) -> std::io::Result<()> {
    let mut conn = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    writeln!(conn, "{verb} {n}")?;
    match verb {
        "push" => {
            std::io::copy(&mut std::io::repeat(0).take(n), &mut conn)?;
            conn.shutdown(Shutdown::Write)?;
            let mut reply = String::new();
            conn.read_to_string(&mut reply)?;
            print!("{reply}");
        }
        "pull" => {
            conn.shutdown(Shutdown::Write)?;
            let start = Instant::now();
            let got = std::io::copy(&mut conn, &mut std::io::sink())?;
            if got != n {
                return Err(std::io::Error::other(format!("got {got} of {n} bytes")));
            }
            println!("{}", rate(got, start.elapsed()));
        }
        _ => {
            conn.shutdown(Shutdown::Write)?;
            let mut reply = String::new();
            conn.read_to_string(&mut reply)?;
            if reply.is_empty() {
                return Err(std::io::Error::other("no answer"));
            }
            print!("{reply}");
        }
    }
    Ok(())
}
