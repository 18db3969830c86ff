//! `wasm-cni probe`: the DaemonSet's liveness and readiness, asked of the
//! daemon alone.

use std::time::Duration;

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum ProbeKind {
    Live,
    Ready,
}

#[derive(clap::Args)]
pub(super) struct ProbeArgs {
    what: ProbeKind,
    /// The daemon's metrics listener, as given to `daemon --metrics`.
    #[arg(long, value_name = "ADDR", default_value = wasm_cni_daemon::DEFAULT_METRICS_SOCKET)]
    metrics: wasm_cni_daemon::MetricsAddr,
    /// The whole exchange's bound.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    timeout_ms: u64,
}

/// `wasm-cni probe`: the page's text on stdout, 0 when the daemon said 200.
pub(super) fn probe(a: &ProbeArgs) -> Result<i32, String> {
    let path = match a.what {
        ProbeKind::Live => "/healthz",
        ProbeKind::Ready => "/readyz",
    };
    let within = Duration::from_millis(a.timeout_ms);
    let (code, body) = wasm_cni_daemon::scrape::fetch(&a.metrics, path, within)?;
    println!("{}", wasm_cni_base::text::Shown(body.trim_end()));
    Ok(if code == 200 { 0 } else { 1 })
}
