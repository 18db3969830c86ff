//! The engine as its own thin client: when a runtime executes the full
//! `wasm-cni` for a network whose config says `"daemon": "prefer"` or
//! `"require"`, it forwards the call exactly as `wasm-cni-client` does
//! (`wasm_cni_client::forward`), and runs in this process what the client
//! would hand to the engine.
//!
//! Once a request is sent the client never falls back to running the chain
//! itself: the daemon may be doing it, and two runs of one ADD would race.
//! A daemon that does not answer in time is "try again later" (11).

use wasm_cni_client::forward;
pub use wasm_cni_client::forward::{budget_of, Mode, DEFAULT_SOCKET};
use wasm_cni_client::wire::Response;

use wasm_cni_base::log::{self, Level};
use wasm_cni_engine::edge;

/// Serve one CNI invocation: through the daemon, or in-process.
pub fn run(vars: Vec<(String, String)>, stdin: Vec<u8>) -> Response {
    run_keeping(vars, stdin, &mut None)
}

/// [`run`], handing an in-process run's host (its engine, components,
/// sockets and kept scopes) to `spent` instead of dropping it. A process
/// that exits next leaves them to the kernel, which unmaps the whole
/// address space at once: freeing them one by one was about 6 % of a
/// per-invocation ADD+DEL's CPU, before its answer went out.
pub fn run_keeping(
    vars: Vec<(String, String)>,
    stdin: Vec<u8>,
    spent: &mut Option<edge::Host>,
) -> Response {
    forward::run(
        vars,
        stdin,
        |why, vars, stdin| in_process(why, vars, stdin, spent),
        &line,
    )
}

fn in_process(
    why: forward::Local,
    vars: Vec<(String, String)>,
    stdin: Vec<u8>,
    spent: &mut Option<edge::Host>,
) -> Response {
    if let forward::Local::NoDaemon(why) = why {
        log::log(Level::Warn, "", &why);
    }
    // Without an endpoint, tracing costs nothing more than this look.
    let traced = trace_endpoint(&vars, &stdin).map(|e| (e, vars.clone()));
    let started = std::time::SystemTime::now();
    let host = spent.insert(edge::Host::new().traced(traced.is_some()));
    let out = edge::run_on(host, vars, &mut stdin.as_slice());
    if let Some((endpoint, vars)) = traced {
        export(&endpoint, &vars, &out, started);
    }
    Response {
        exit_code: out.exit_code,
        stdout: out.stdout,
        stderr: String::new(),
    }
}

/// Where this call's spans go: the config's `tracing.endpoint`, else the
/// OpenTelemetry variables of the runtime's environment; none when
/// `OTEL_SDK_DISABLED=true`. Nothing is parsed when nothing asks for it.
fn trace_endpoint(vars: &[(String, String)], stdin: &[u8]) -> Option<String> {
    let var = |k: &str| super::lookup(vars, k).map(str::to_string);
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    let from_config = stdin
        .windows(9)
        .any(|w| w == b"\"tracing\"")
        .then(|| serde_json::from_slice::<serde_json::Value>(stdin).ok())
        .flatten()
        .and_then(|c| c["tracing"]["endpoint"].as_str().map(str::to_string));
    let endpoint = from_config.or_else(|| wasm_cni_engine::trace::endpoint_from_env(var))?;
    match endpoint.parse::<wasm_cni_engine::trace::Endpoint>() {
        Ok(_) => Some(endpoint),
        Err(e) => {
            log::log(Level::Warn, "", format!("tracing: {e}; no spans exported"));
            None
        }
    }
}

/// Hand the call's spans to a detached exporter: this process exits as
/// soon as it has answered.
fn export(
    endpoint: &str,
    vars: &[(String, String)],
    out: &edge::Outcome,
    started: std::time::SystemTime,
) {
    let error = wasm_cni_engine::trace::error_of(out.exit_code, &out.stdout);
    let now = std::time::SystemTime::now();
    if let Some(trace) =
        wasm_cni_engine::trace::of_request(vars, &out.report, started, now, error.as_deref())
    {
        wasm_cni_engine::trace::export_detached(
            endpoint,
            &wasm_cni_engine::trace::encode(&[trace]),
        );
    }
}

/// The client's lines go where the engine's go.
fn line(level: &'static str, text: &str) {
    let level = Level::parse(level).unwrap_or(Level::Warn);
    log::log(level, "", text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_budgets_with_the_engines_default_deadline() {
        assert_eq!(
            forward::DEFAULT_DEADLINE_MS,
            wasm_cni_engine::sandbox::limits::DEFAULT_DEADLINE_MS
        );
    }

    #[test]
    fn errors_print_alike() {
        let e = wasm_cni_protocol::CniError::new(
            wasm_cni_protocol::ErrorCode::TryAgainLater,
            "a <b> & c",
        );
        assert_eq!(
            wasm_cni_client::error_json(11, "a <b> & c", Some("1.1.0")),
            e.to_json(Some("1.1.0"))
        );
    }

    #[test]
    fn prefer_without_a_daemon_runs_in_process_saying_so() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-client-{}", std::process::id()));
        let conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","daemon":"prefer","daemonSocket":"{}/none.sock","chain":[{{"type":"x"}}]}}"#,
            dir.display()
        );
        let vars = vec![("CNI_COMMAND".to_string(), "ADD".to_string())];
        let (out, logged) = log::capture(Level::Warn, || run(vars, conf.into_bytes()));
        assert!(
            logged.starts_with("wasm-cni warn: no daemon at"),
            "{logged}"
        );
        // In-process, which here fails on the environment.
        assert!(out.stdout.contains("\"code\": 4"), "{}", out.stdout);
    }

    #[test]
    fn an_in_process_run_hands_its_host_over_and_a_forwarded_one_has_none() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-spent-{}", std::process::id()));
        let conf = |mode: &str| {
            format!(
                r#"{{"cniVersion":"1.0.0","name":"n","daemon":"{mode}","daemonSocket":"{}/none.sock","daemonWaitMs":0,"chain":[{{"type":"x"}}]}}"#,
                dir.display()
            )
            .into_bytes()
        };
        let vars = || vec![("CNI_COMMAND".to_string(), "ADD".to_string())];
        let mut spent = None;
        let (out, _) = log::capture(Level::Warn, || run_keeping(vars(), conf("off"), &mut spent));
        assert_eq!(out.exit_code, 1, "{}", out.stdout);
        assert!(spent.is_some(), "the in-process host was dropped");
        // `require` without a daemon ends in the client; no host is made.
        let mut spent = None;
        let (out, _) = log::capture(Level::Warn, || {
            run_keeping(vars(), conf("require"), &mut spent)
        });
        assert!(out.stdout.contains("\"code\": 11"), "{}", out.stdout);
        assert!(spent.is_none());
    }
}
