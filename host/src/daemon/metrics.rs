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
//!   stopped (trap, deadline, memory, host calls, result size, store busy);
//! * `wasm_cni_refused_connections_total{reason}`: peers cut off (not
//!   allowed, too slow, malformed or oversized requests);
//! * `wasm_cni_ipam_addresses{network,plugin,state}`: allocated,
//!   quarantined and free addresses, read from the state of every state
//!   directory the daemon has served, at scrape time.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
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

use crate::edge::Report;
use crate::log;
use crate::store::admin::{self, State};
use crate::store::DiskStore;

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
    /// State directories seen in requests, for the IPAM gauges.
    state_dirs: Mutex<BTreeSet<PathBuf>>,
}

fn duration_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("wasm_cni");
        let requests = Family::<Labels, Counter>::default();
        let durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let aborts = Family::<Labels, Counter>::default();
        let refused = Family::<Labels, Counter>::default();
        let addresses = Family::<Labels, Gauge>::default();
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
        Metrics {
            registry,
            requests,
            durations,
            aborts,
            refused,
            addresses,
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
            if let Some(cause) = step.abort {
                self.aborts
                    .get_or_create(&vec![
                        ("plugin", step.plugin.clone()),
                        ("cause", cause.to_string()),
                    ])
                    .inc();
            }
        }
        if let (Some(dir), Ok(mut dirs)) = (&report.state_dir, self.state_dirs.lock()) {
            if !dirs.contains(dir) {
                dirs.insert(dir.clone());
            }
        }
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
        let now = crate::state::now_ms();
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

/// Serve `GET /metrics` on `addr` from a thread of its own.
pub fn serve(
    addr: MetricsAddr,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> Result<(), String> {
    let render = std::sync::Arc::new(render);
    match addr {
        MetricsAddr::Unix(path) => {
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path)
                .map_err(|e| format!("metrics socket {}: {e}", path.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("metrics socket {}: {e}", path.display()))?;
            spawn(move || {
                for s in l.incoming().flatten() {
                    answer(s, &*render);
                }
            })
        }
        MetricsAddr::Tcp(a) => {
            let l = TcpListener::bind(a).map_err(|e| format!("metrics address {a}: {e}"))?;
            spawn(move || {
                for s in l.incoming().flatten() {
                    answer(s, &*render);
                }
            })
        }
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name("wasm-cni-metrics".into())
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("starting the metrics thread: {e}"))
}

trait Conn: Read + Write {
    fn timeouts(&self, d: Duration);
}

impl Conn for std::os::unix::net::UnixStream {
    fn timeouts(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
        let _ = self.set_write_timeout(Some(d));
    }
}

impl Conn for std::net::TcpStream {
    fn timeouts(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
        let _ = self.set_write_timeout(Some(d));
    }
}

/// One HTTP/1.1 exchange: the request head (at most 8 KiB, within 2 s),
/// then the exposition or 404, then close.
fn answer(mut s: impl Conn, render: &dyn Fn() -> String) {
    s.timeouts(Duration::from_secs(2));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8 << 10 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let target = line.split_whitespace().take(2).collect::<Vec<_>>();
    let response = match target.as_slice() {
        ["GET", "/metrics"] => {
            let body = render();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
    };
    if let Err(e) = s.write_all(response.as_bytes()) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            log::debug(format_args!("metrics: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::StepReport;
    use crate::cni::Command;

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
            duration: Duration::from_millis(1),
            abort: Some("deadline"),
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
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
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
