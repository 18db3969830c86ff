//! The daemon's metrics, in the OpenMetrics text format Prometheus scrapes
//! (`prometheus-client`), served on `GET /metrics` when the daemon is given
//! `--metrics`: on a unix socket (`unix:PATH`, unreachable from any pod)
//! or on a TCP address (`tcp:127.0.0.1:PORT`; loopback of the node's
//! namespace, which hostNetwork pods share: choose the unix socket unless
//! the scraper needs TCP).
//!
//! * `wasm_cni_requests_total{verb,outcome,code}` and
//!   `wasm_cni_request_duration_seconds{verb}`: every request;
//! * `wasm_cni_plugin_aborts_total{plugin,cause}`: plugins the host
//!   stopped (trap, deadline, memory, host calls, result size, arguments
//!   size, store busy);
//! * `wasm_cni_refused_connections_total{reason}`: peers cut off (not
//!   allowed, too slow, malformed or oversized requests);
//! * `wasm_cni_ipam_addresses{network,plugin,state}`: allocated,
//!   quarantined and free addresses, read from the state of every state
//!   directory the daemon has served, at scrape time;
//! * `wasm_cni_plugin_duration_seconds{plugin,verb}`: each plugin call of a
//!   chain, IPAM delegates included (where a slow pod start went);
//! * `wasm_cni_spans_exported_total`, `wasm_cni_spans_dropped_total`: trace
//!   spans the collector took, and those dropped;
//! * `wasm_cni_requests_in_flight`, `wasm_cni_start_time_seconds` and
//!   `wasm_cni_build_info{version}`: what the daemon is doing now, since
//!   when, and which build it is.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use wasm_cni_base::log;
use wasm_cni_engine::edge::Report;
use wasm_cni_store::admin::{self, State};
use wasm_cni_store::DiskStore;

type Labels = Vec<(&'static str, String)>;

/// Where metrics are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsAddr {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::str::FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.starts_with('/') {
                return Ok(MetricsAddr::Unix(PathBuf::from(p)));
            }
        } else if let Some(a) = s.strip_prefix("tcp:") {
            if let Ok(addr) = a.parse() {
                return Ok(MetricsAddr::Tcp(addr));
            }
        }
        Err(format!(
            "{s:?}: expected unix:/ABSOLUTE/PATH or tcp:ADDRESS:PORT"
        ))
    }
}

pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    aborts: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
    addresses: Family<Labels, Gauge>,
    plugin_durations: Family<Labels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    spans_exported: Counter,
    spans_dropped: Counter,
    /// Plugin names used as labels so far: bounded, so that a daemon peer
    /// naming ever new plugin types (an image entry's type is its choice)
    /// cannot grow the daemon's series without end.
    plugin_labels: Mutex<BTreeSet<String>>,
    /// State directories seen in requests, for the IPAM gauges.
    state_dirs: Mutex<BTreeSet<PathBuf>>,
}

/// Distinct `plugin` label values: far more plugin types than a node runs.
const MAX_PLUGIN_LABELS: usize = 128;

fn duration_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    #[cfg(test)]
    pub fn new() -> Self {
        Self::with(&crate::ExtraMetrics::default())
    }

    pub fn with(extra: &crate::ExtraMetrics) -> Self {
        let mut registry = Registry::with_prefix("wasm_cni");
        let requests = Family::<Labels, Counter>::default();
        let durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let aborts = Family::<Labels, Counter>::default();
        let refused = Family::<Labels, Counter>::default();
        let addresses = Family::<Labels, Gauge>::default();
        let plugin_durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let in_flight = Gauge::default();
        let start_time = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        start_time.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
        let build = prometheus_client::metrics::info::Info::new(vec![(
            "version",
            env!("CARGO_PKG_VERSION").to_string(),
        )]);
        registry.register(
            "requests",
            "CNI requests served, by verb and outcome",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Wall time of a request, from accept to answer",
            durations.clone(),
        );
        registry.register(
            "plugin_aborts",
            "Plugin calls the host stopped, by plugin and cause",
            aborts.clone(),
        );
        registry.register(
            "refused_connections",
            "Connections cut off without service, by reason",
            refused.clone(),
        );
        registry.register(
            "ipam_addresses",
            "Addresses in the IPAM state, by network, plugin and state",
            addresses.clone(),
        );
        registry.register(
            "plugin_duration_seconds",
            "Wall time of one plugin call, by plugin and verb (IPAM delegates apart)",
            plugin_durations.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Requests being served now",
            in_flight.clone(),
        );
        registry.register(
            "start_time_seconds",
            "When the daemon started, in seconds since the Unix epoch",
            start_time,
        );
        registry.register("build", "The daemon's version", build);
        let spans_exported = Counter::default();
        let spans_dropped = Counter::default();
        registry.register(
            "spans_exported",
            "Trace spans the OTLP collector accepted",
            spans_exported.clone(),
        );
        registry.register(
            "spans_dropped",
            "Trace spans dropped: the export queue full, or the collector down, slow or refusing",
            spans_dropped.clone(),
        );
        for (name, help, g) in &extra.gauges {
            registry.register(*name, *help, g.clone());
        }
        for (name, help, c) in &extra.counters {
            registry.register(*name, *help, c.clone());
        }
        Metrics {
            registry,
            requests,
            durations,
            aborts,
            refused,
            addresses,
            plugin_durations,
            in_flight,
            plugin_labels: Mutex::new(BTreeSet::new()),
            spans_exported,
            spans_dropped,
            state_dirs: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn observe(&self, report: &Report, took: Duration) {
        let verb = report.command.map_or("unknown", |c| c.as_str()).to_string();
        let (outcome, code) = match report.error_code {
            None => ("ok", "0".to_string()),
            Some(c) => ("error", c.to_string()),
        };
        self.requests
            .get_or_create(&vec![
                ("verb", verb.clone()),
                ("outcome", outcome.to_string()),
                ("code", code),
            ])
            .inc();
        self.durations
            .get_or_create(&vec![("verb", verb)])
            .observe(took.as_secs_f64());
        for step in &report.steps {
            let plugin = self.plugin_label(&step.plugin);
            self.plugin_durations
                .get_or_create(&vec![
                    ("plugin", plugin.clone()),
                    ("verb", step.verb.to_string()),
                ])
                .observe(step.duration.as_secs_f64());
            if let Some(cause) = step.abort {
                self.aborts
                    .get_or_create(&vec![("plugin", plugin), ("cause", cause.to_string())])
                    .inc();
            }
        }
        if let (Some(dir), Ok(mut dirs)) = (&report.state_dir, self.state_dirs.lock()) {
            if !dirs.contains(dir) {
                dirs.insert(dir.clone());
            }
        }
    }

    /// The counters a trace exporter reports to.
    pub fn span_counts(&self) -> wasm_cni_engine::trace::Counts {
        let (exported, dropped) = (self.spans_exported.clone(), self.spans_dropped.clone());
        wasm_cni_engine::trace::Counts {
            exported: std::sync::Arc::new(move |n| {
                exported.inc_by(n);
            }),
            dropped: std::sync::Arc::new(move |n| {
                dropped.inc_by(n);
            }),
        }
    }

    /// `name`, or `other` once [`MAX_PLUGIN_LABELS`] others are in use.
    fn plugin_label(&self, name: &str) -> String {
        let Ok(mut seen) = self.plugin_labels.lock() else {
            return "other".into();
        };
        if seen.contains(name) {
            return name.to_string();
        }
        if seen.len() >= MAX_PLUGIN_LABELS {
            return "other".into();
        }
        seen.insert(name.to_string());
        name.to_string()
    }

    /// Counts a request as in flight until the guard drops.
    pub fn serving(&self) -> InFlight<'_> {
        self.in_flight.inc();
        InFlight(&self.in_flight)
    }

    pub fn refused(&self, reason: &'static str) {
        self.refused
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// The whole exposition, IPAM gauges read now.
    pub fn render(&self) -> String {
        self.addresses.clear();
        let dirs: Vec<PathBuf> = self
            .state_dirs
            .lock()
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        let now = wasm_cni_store::state::now_ms();
        for dir in dirs {
            let store = DiskStore::new(&dir.join("store"));
            // A scope another call holds is skipped this time, not waited for.
            let deadline = Instant::now() + Duration::from_millis(100);
            let Ok(views) = admin::list_by(&store, None, now, Some(deadline)) else {
                continue;
            };
            for v in views {
                for (state, name) in [
                    (State::Allocated, "allocated"),
                    (State::Quarantined, "quarantined"),
                    (State::Free, "free"),
                ] {
                    self.addresses
                        .get_or_create(&vec![
                            ("network", v.network.clone()),
                            ("plugin", v.plugin.clone()),
                            ("state", name.to_string()),
                        ])
                        .set(v.count(state) as i64);
                }
            }
        }
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            let _ = writeln!(out, "# encoding failed");
        }
        out
    }
}

pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Scrape connections served at once. A new one beyond them evicts the
/// oldest that has not sent its whole request: a scraper sends its request
/// at once, so stalled connections cannot crowd it out.
const MAX_SCRAPES: usize = 64;
/// The whole exchange of one connection (request head in, answer out).
const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);
/// A request head larger than this is answered as it stands.
const MAX_HEAD: usize = 8 << 10;

/// What the metrics listener serves: `GET /metrics` (the exposition),
/// `GET /healthz` (the process answers) and `GET /readyz` (`Ok`: 200 with
/// the text; `Err`: 503 with the cause). Both closures must answer from
/// what is already known: they run in the one thread that serves every
/// peer of the listener, so work per request would be work a scraper
/// could make the daemon do.
pub struct Pages {
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    pub ready: Box<dyn Fn() -> Result<String, String> + Send + Sync>,
}

/// How often a daemon tries again to listen where it could not.
pub const REBIND_EVERY: Duration = Duration::from_secs(5);

/// Serve the metrics and probe pages at `addr`, from a thread of their own.
///
/// An address it cannot listen on does not stop the daemon: CNI requests
/// do not depend on it. A TCP port in particular can be taken first by any
/// local user; the daemon says so (naming the port's owner), serves CNI
/// all the same, and tries again every [`REBIND_EVERY`] until it has the
/// address. Clients that must know they reach the daemon check its owner
/// (`scrape`), and the kubelet's probes use the root-only unix socket. The
/// socket at a `unix:` address was checked by the caller
/// ([`super::prepare_socket_path`]).
pub fn serve(addr: MetricsAddr, pages: Pages) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wasm-cni-metrics".into())
        .spawn(move || {
            let listener = bind_until_bound(&addr);
            event_loop(&listener, &pages)
        })
        .map(drop)
        .map_err(|e| format!("starting the metrics thread: {e}"))
}

fn bind_until_bound(addr: &MetricsAddr) -> Listener {
    let mut said = false;
    loop {
        match bind(addr) {
            Ok(l) => {
                if said {
                    tracing::info!(
                        event = "metrics",
                        "metrics: listening on {} now",
                        show(addr)
                    );
                }
                return l;
            }
            Err(e) if !said => {
                let holder = match addr {
                    MetricsAddr::Tcp(a) => super::scrape::listening_uid(*a)
                        .map(|uid| format!(" (held by uid {uid})"))
                        .unwrap_or_default(),
                    MetricsAddr::Unix(_) => String::new(),
                };
                tracing::warn!(
                    event = "metrics",
                    "metrics: cannot listen on {}: {e}{holder}; CNI requests are served as \
                     ever, /metrics, /healthz and /readyz are not until it can: trying again \
                     every {} s",
                    show(addr),
                    REBIND_EVERY.as_secs()
                );
                said = true;
            }
            Err(_) => {}
        }
        std::thread::sleep(REBIND_EVERY);
    }
}

fn show(addr: &MetricsAddr) -> String {
    match addr {
        MetricsAddr::Unix(p) => format!("unix:{}", p.display()),
        MetricsAddr::Tcp(a) => format!("tcp:{a}"),
    }
}

fn bind(addr: &MetricsAddr) -> Result<Listener, String> {
    let listener = match addr {
        MetricsAddr::Unix(path) => {
            let l = UnixListener::bind(path).map_err(|e| e.to_string())?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
            Listener::Unix(l)
        }
        MetricsAddr::Tcp(a) => Listener::Tcp(TcpListener::bind(a).map_err(|e| e.to_string())?),
    };
    listener.set_nonblocking().map_err(|e| e.to_string())?;
    Ok(listener)
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Unix(l) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
    }

    fn accept(&self) -> io::Result<Stream> {
        let s = match self {
            Listener::Unix(l) => Stream::Unix(l.accept()?.0),
            Listener::Tcp(l) => Stream::Tcp(l.accept()?.0),
        };
        s.set_nonblocking()?;
        Ok(s)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Unix(l) => l.as_fd(),
            Listener::Tcp(l) => l.as_fd(),
        }
    }
}

enum Stream {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Stream {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(true),
            Stream::Tcp(s) => s.set_nonblocking(true),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One scrape connection: reading its request head, then writing the
/// answer; gone at its deadline either way.
struct Scrape {
    stream: Stream,
    deadline: Instant,
    head: Vec<u8>,
    /// The answer and how much of it is sent.
    out: Option<(Vec<u8>, usize)>,
}

impl Scrape {
    /// Read what is there; once the head is complete (or the peer stops
    /// sending), make the answer. `false`: done with this connection.
    fn on_readable(&mut self, pages: &Pages) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    self.head.extend_from_slice(&buf[..n]);
                    if complete(&self.head) || self.head.len() >= MAX_HEAD {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        self.out = Some((response(&self.head, pages).into_bytes(), 0));
        self.on_writable()
    }

    /// Send what the socket takes. `false`: done with this connection.
    fn on_writable(&mut self) -> bool {
        let Some((out, sent)) = &mut self.out else {
            return true;
        };
        while *sent < out.len() {
            match self.stream.write(&out[*sent..]) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if e.kind() != io::ErrorKind::BrokenPipe {
                        log::debug(format_args!("metrics: {e}"));
                    }
                    return false;
                }
            }
        }
        false
    }
}

fn complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// Every scrape connection is served by one poll loop: nothing one peer
/// does (connect and send nothing, trickle bytes, not read the answer)
/// holds up another beyond its own deadline.
fn event_loop(listener: &Listener, pages: &Pages) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut scrapes: Vec<Scrape> = Vec::new();
    loop {
        let now = Instant::now();
        scrapes.retain(|s| s.deadline > now);
        let wait = scrapes
            .iter()
            .map(|s| s.deadline.saturating_duration_since(now))
            .min();
        let (ready, accept) = {
            let mut fds = Vec::with_capacity(scrapes.len() + 1);
            fds.push(PollFd::from_borrowed_fd(listener.fd(), PollFlags::IN));
            for s in &scrapes {
                let want = if s.out.is_some() {
                    PollFlags::OUT
                } else {
                    PollFlags::IN
                };
                fds.push(PollFd::from_borrowed_fd(s.stream.fd(), want));
            }
            let timeout = wait.map(|w| Timespec {
                tv_sec: w.as_secs() as i64,
                tv_nsec: i64::from(w.subsec_nanos()),
            });
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    log::error(format_args!("metrics: poll: {e}"));
                    return;
                }
            }
            let ready: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
            (ready, !fds[0].revents().is_empty())
        };
        let mut keep = Vec::with_capacity(scrapes.len());
        for (mut s, ready) in scrapes.drain(..).zip(ready) {
            let alive = match (ready, s.out.is_some()) {
                (false, _) => true,
                (true, false) => s.on_readable(pages),
                (true, true) => s.on_writable(),
            };
            if alive {
                keep.push(s);
            }
        }
        scrapes = keep;
        if !accept {
            continue;
        }
        loop {
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut s = Scrape {
                stream,
                deadline: Instant::now() + SCRAPE_DEADLINE,
                head: Vec::new(),
                out: None,
            };
            // A scraper's request is usually there as soon as it connects:
            // served now, it is never among those evicted below.
            if !s.on_readable(pages) {
                continue;
            }
            if scrapes.len() >= MAX_SCRAPES {
                // The oldest still sending its request goes; if all are
                // being answered, the newcomer is closed (they finish
                // within their deadline).
                match scrapes
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.out.is_none())
                    .min_by_key(|(_, s)| s.deadline)
                    .map(|(i, _)| i)
                {
                    Some(i) => drop(scrapes.swap_remove(i)),
                    None => continue,
                }
            }
            scrapes.push(s);
        }
    }
}

/// The answer to a request head: the exposition for `GET /metrics`, the
/// probes' pages, else 404. A query string is ignored (`/readyz?verbose`).
fn response(head: &[u8], pages: &Pages) -> String {
    let line = String::from_utf8_lossy(head);
    let target = line.split_whitespace().take(2).collect::<Vec<_>>();
    let path = |t: &str| t.split('?').next().unwrap_or_default().to_string();
    let text = |status: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    match target.as_slice() {
        ["GET", t] if path(t) == "/metrics" => {
            let body = (pages.metrics)();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        ["GET", t] if path(t) == "/healthz" => text("200 OK", "ok\n"),
        ["GET", t] if path(t) == "/readyz" => match (pages.ready)() {
            Ok(why) => text("200 OK", &format!("{why}\n")),
            Err(cause) => text("503 Service Unavailable", &format!("{cause}\n")),
        },
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_cni_engine::chain::StepReport;
    use wasm_cni_protocol::Command;

    #[test]
    fn requests_and_aborts_are_counted() {
        let m = Metrics::new();
        let mut r = Report {
            command: Some(Command::Add),
            network: "n".into(),
            ..Report::default()
        };
        m.observe(&r, Duration::from_millis(3));
        r.error_code = Some(11);
        r.steps.push(StepReport {
            index: 0,
            plugin: "bridge".into(),
            verb: "ADD",
            started: std::time::SystemTime::now(),
            duration: Duration::from_millis(1),
            abort: Some("deadline"),
            digest: None,
            host_work: Vec::new(),
        });
        m.observe(&r, Duration::from_millis(3));
        m.refused("peer");
        let text = m.render();
        for line in [
            r#"wasm_cni_requests_total{verb="ADD",outcome="ok",code="0"} 1"#,
            r#"wasm_cni_requests_total{verb="ADD",outcome="error",code="11"} 1"#,
            r#"wasm_cni_plugin_aborts_total{plugin="bridge",cause="deadline"} 1"#,
            r#"wasm_cni_refused_connections_total{reason="peer"} 1"#,
            r#"wasm_cni_request_duration_seconds_count{verb="ADD"} 2"#,
            r#"wasm_cni_plugin_duration_seconds_count{plugin="bridge",verb="ADD"} 1"#,
            "wasm_cni_requests_in_flight 0",
            "wasm_cni_build_info{version=",
            "wasm_cni_start_time_seconds ",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        let serving = m.serving();
        assert!(m.render().contains("wasm_cni_requests_in_flight 1"));
        drop(serving);
        assert!(m.render().contains("wasm_cni_requests_in_flight 0"));
    }

    #[test]
    fn a_peer_naming_ever_new_plugins_does_not_grow_the_series_without_end() {
        let m = Metrics::new();
        for i in 0..1000 {
            let r = Report {
                command: Some(Command::Add),
                steps: vec![StepReport {
                    index: 0,
                    plugin: format!("p{i}"),
                    verb: "ADD",
                    started: std::time::SystemTime::now(),
                    duration: Duration::from_millis(1),
                    abort: Some("trap"),
                    digest: None,
                    host_work: Vec::new(),
                }],
                ..Report::default()
            };
            m.observe(&r, Duration::from_millis(1));
        }
        let text = m.render();
        let series = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(
            series("wasm_cni_plugin_aborts_total{"),
            MAX_PLUGIN_LABELS + 1
        );
        assert_eq!(
            series("wasm_cni_plugin_duration_seconds_count{"),
            MAX_PLUGIN_LABELS + 1
        );
        assert!(text.contains(r#"wasm_cni_plugin_aborts_total{plugin="other",cause="trap"} 872"#));
    }

    #[test]
    fn the_probes_pages_answer_from_what_is_known() {
        let pages = |ready: Result<&'static str, &'static str>| Pages {
            metrics: Box::new(|| "# EOF\n".into()),
            ready: Box::new(move || ready.map(String::from).map_err(String::from)),
        };
        let get =
            |p: &Pages, path: &str| response(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes(), p);
        let up = pages(Ok("ready"));
        assert!(get(&up, "/healthz").starts_with("HTTP/1.1 200 OK"));
        assert!(get(&up, "/healthz").ends_with("\r\n\r\nok\n"));
        assert!(get(&up, "/readyz?verbose").starts_with("HTTP/1.1 200 OK"));
        let down = pages(Err("STATUS of k8s-pod-network: bridge: not found"));
        let r = get(&down, "/readyz");
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(r.ends_with("bridge: not found\n"), "{r}");
        // Liveness is the process answering, whatever readiness says.
        assert!(get(&down, "/healthz").starts_with("HTTP/1.1 200 OK"));
        for bad in [
            "POST /readyz HTTP/1.1\r\n\r\n",
            "GET /readyzz HTTP/1.1\r\n\r\n",
            "GET\r\n\r\n",
            "",
        ] {
            assert!(
                response(bad.as_bytes(), &down).starts_with("HTTP/1.1 404"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "unix:/run/x.sock".parse(),
            Ok(MetricsAddr::Unix("/run/x.sock".into()))
        );
        assert!(matches!(
            "tcp:127.0.0.1:9750".parse(),
            Ok(MetricsAddr::Tcp(_))
        ));
        assert!("unix:rel".parse::<MetricsAddr>().is_err());
        assert!("9750".parse::<MetricsAddr>().is_err());
    }
}
