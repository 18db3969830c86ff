//! Traces of CNI calls. The runtime's W3C trace context comes in as
//! `TRACEPARENT`/`TRACESTATE` (libcni sets them for every plugin it
//! executes; the thin client forwards them to the daemon); out go OTLP/HTTP
//! protobuf spans: one for the call, a child per plugin call (an IPAM
//! delegate under the plugin that delegated), with the verb, network,
//! attachment, plugin, outcome and CNI code as attributes.
//!
//! Exporting never holds up a call: a per-invocation process hands its
//! spans to a detached child of itself and exits; the daemon queues them
//! for one exporter thread, and drops (and counts) what does not fit or
//! what the collector refuses or does not take within 2 s. Only `http://`
//! endpoints with an IP address or `localhost` (a node-local collector; the
//! static binary resolves no names).
//!
//! Hand-written messages for the part of `opentelemetry/proto` used here
//! (trace, common, resource; `ExportTraceServiceRequest`), field numbers
//! as in the protos.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::chain::StepReport;
use crate::edge::Report;
use wasm_cni_base::fsutil::random;

/// How long one export may take: connect, send, read the status.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// The argument a detached exporter child is started with.
pub const CHILD_COMMAND: &str = "__export-spans";

/// A W3C `traceparent`: version 00's fields (a later version's first
/// fields, as the spec asks of a reader that knows only 00).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub sampled: bool,
}

impl TraceParent {
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let b = text.as_bytes();
        if b.len() < 55 || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let version = hex::<1>(&text[0..2])?[0];
        if version == 0xff || (version == 0 && b.len() != 55) {
            return None;
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let trace_id = hex::<16>(&text[3..35])?;
        let parent_id = hex::<8>(&text[36..52])?;
        let flags = hex::<1>(&text[53..55])?[0];
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            sampled: flags & 1 == 1,
        })
    }
}

/// Lowercase hex only, as the spec requires.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in s.as_bytes().chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// `tracestate` as given, when it is what the spec allows (at most 512
/// printable ASCII characters); otherwise none is passed on.
fn trace_state(text: &str) -> String {
    let ok = text.len() <= 512 && text.bytes().all(|c| (0x20..0x7f).contains(&c));
    if ok {
        text.to_string()
    } else {
        String::new()
    }
}

/// Where spans go, from the environment the way OpenTelemetry SDKs read
/// it: none when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`;
/// else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
pub fn endpoint_from_env(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none") {
        return None;
    }
    if let Some(e) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|e| !e.is_empty()) {
        return Some(e);
    }
    var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .filter(|e| !e.is_empty())
        .map(|e| format!("{}/v1/traces", e.trim_end_matches('/')))
}

/// An OTLP/HTTP endpoint this host can reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url:?}: only http:// OTLP endpoints (a collector on the node)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/v1/traces"),
        };
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (h, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{url:?}: bad address"))?;
                match after.strip_prefix(':') {
                    Some(p) => (h, p),
                    None if after.is_empty() => (h, "4318"),
                    None => return Err(format!("{url:?}: bad address")),
                }
            }
            None => authority.rsplit_once(':').unwrap_or((authority, "4318")),
        };
        let ip = match host {
            "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
            other => other
                .parse()
                .map_err(|_| format!("{url:?}: the host must be an IP address or localhost"))?,
        };
        let port: u16 = port.parse().map_err(|_| format!("{url:?}: bad port"))?;
        let addr = SocketAddr::new(ip, port);
        if path.bytes().any(|c| !(0x21..0x7f).contains(&c)) {
            return Err(format!("{url:?}: bad path"));
        }
        Ok(Endpoint {
            addr,
            host: authority.to_string(),
            path: path.to_string(),
        })
    }
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub span_id: [u8; 8],
    pub parent_id: [u8; 8],
    pub name: String,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
    pub events: Vec<Event>,
    /// `Some(message)`: the span failed.
    pub error: Option<String>,
}

/// Something that happened at a point in a span (a policy refusal).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub at: SystemTime,
    pub name: &'static str,
    pub attributes: Vec<(&'static str, Value)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
}

/// A call's spans, all of one trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    pub trace_state: String,
    pub spans: Vec<Span>,
}

/// The spans of one served call: the call under the runtime's span (a new
/// trace without one), and each plugin call under it, a delegate under its
/// plugin. `None` when the runtime's context says not sampled.
pub fn of_call(
    traceparent: Option<&str>,
    tracestate: Option<&str>,
    report: &Report,
    start: SystemTime,
    end: SystemTime,
    error: Option<&str>,
) -> Option<Trace> {
    let parent = traceparent.and_then(TraceParent::parse);
    if parent.is_some_and(|p| !p.sampled) {
        return None;
    }
    let trace_id = parent.map_or_else(random::<16>, |p| p.trace_id);
    let root_id = random::<8>();
    let verb = report.command.map_or("unknown", |c| c.as_str());
    let mut attributes = vec![
        ("cni.command", Value::Str(verb.to_string())),
        ("cni.network", Value::Str(report.network.clone())),
    ];
    if !report.container_id.is_empty() {
        attributes.push(("cni.container_id", Value::Str(report.container_id.clone())));
    }
    if !report.ifname.is_empty() {
        attributes.push(("cni.ifname", Value::Str(report.ifname.clone())));
    }
    if let Some(code) = report.error_code {
        attributes.push(("cni.error_code", Value::Int(i64::from(code))));
    }
    let mut spans = vec![Span {
        span_id: root_id,
        parent_id: parent.map_or([0; 8], |p| p.parent_id),
        name: format!("CNI {verb}"),
        start,
        end,
        attributes,
        events: Vec::new(),
        error: error
            .map(str::to_string)
            .or_else(|| report.error_code.map(|c| format!("CNI error code {c}"))),
    }];
    // Steps are reported as they end: a delegate before the plugin that
    // called it. A step whose time lies within another's is its child.
    let steps: Vec<(&StepReport, [u8; 8])> =
        report.steps.iter().map(|s| (s, random::<8>())).collect();
    for (i, (step, id)) in steps.iter().enumerate() {
        let step_end = step.started + step.duration;
        let parent = steps
            .iter()
            .enumerate()
            .filter(|(j, (other, _))| {
                *j != i
                    && other.index == step.index
                    && other.started <= step.started
                    && other.started + other.duration >= step_end
                    && other.duration > step.duration
            })
            .min_by_key(|(_, (other, _))| other.duration)
            .map_or(root_id, |(_, (_, pid))| *pid);
        let mut attributes = vec![
            ("cni.plugin", Value::Str(step.plugin.clone())),
            ("cni.command", Value::Str(step.verb.to_string())),
            ("cni.chain_index", Value::Int(step.index as i64)),
        ];
        if let Some(cause) = step.abort {
            attributes.push(("wasm_cni.abort", Value::Str(cause.to_string())));
        }
        if let Some(d) = &step.digest {
            attributes.push(("wasm_cni.component.sha256", Value::Str(d.clone())));
        }
        // The host's work for the plugin: each kernel, packet-filter or
        // store operation a child; each refusal by the policy an event.
        let mut events = Vec::new();
        for w in &step.host_work {
            if w.refused {
                events.push(Event {
                    at: w.started,
                    name: "refused by the host's policy",
                    attributes: vec![
                        ("wasm_cni.host", Value::Str(w.kind.to_string())),
                        ("wasm_cni.reason", Value::Str(w.what.clone())),
                    ],
                });
                continue;
            }
            spans.push(Span {
                span_id: random::<8>(),
                parent_id: *id,
                name: format!("{} {}", w.kind, w.what),
                start: w.started,
                end: w.started + w.took,
                attributes: vec![("wasm_cni.host", Value::Str(w.kind.to_string()))],
                events: Vec::new(),
                error: None,
            });
        }
        spans.push(Span {
            span_id: *id,
            parent_id: parent,
            name: format!("{} {}", step.plugin, step.verb),
            start: step.started,
            end: step_end,
            attributes,
            events,
            error: step.abort.map(|c| format!("stopped by the host: {c}")),
        });
    }
    Some(Trace {
        trace_id,
        trace_state: tracestate.map(trace_state).unwrap_or_default(),
        spans,
    })
}

/// [`of_call`] for a served request, its trace context read from the
/// request's environment.
pub fn of_request(
    vars: &[(String, String)],
    report: &Report,
    start: SystemTime,
    end: SystemTime,
    error: Option<&str>,
) -> Option<Trace> {
    let var = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    of_call(
        var("TRACEPARENT"),
        var("TRACESTATE"),
        report,
        start,
        end,
        error,
    )
}

/// The message of a failed call's CNI error (what it printed), for its
/// span's status.
pub fn error_of(exit_code: i32, stdout: &str) -> Option<String> {
    (exit_code != 0)
        .then(|| serde_json::from_str::<serde_json::Value>(stdout).ok())
        .flatten()
        .and_then(|e| e["msg"].as_str().map(str::to_string))
}

// --- protobuf ------------------------------------------------------------

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    varint(out, v);
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// common.v1.KeyValue { key = 1; AnyValue value = 2 }, AnyValue
/// { string_value = 1; int_value = 3 }.
fn key_value(k: &str, v: &Value) -> Vec<u8> {
    let mut any = Vec::new();
    match v {
        Value::Str(s) => bytes_field(&mut any, 1, s.as_bytes()),
        Value::Int(i) => varint_field(&mut any, 3, *i as u64),
    }
    let mut kv = Vec::new();
    bytes_field(&mut kv, 1, k.as_bytes());
    bytes_field(&mut kv, 2, &any);
    kv
}

/// trace.v1.Span.
fn span(trace: &Trace, s: &Span) -> Vec<u8> {
    let mut out = Vec::new();
    bytes_field(&mut out, 1, &trace.trace_id);
    bytes_field(&mut out, 2, &s.span_id);
    if !trace.trace_state.is_empty() {
        bytes_field(&mut out, 3, trace.trace_state.as_bytes());
    }
    if s.parent_id != [0; 8] {
        bytes_field(&mut out, 4, &s.parent_id);
    }
    bytes_field(&mut out, 5, s.name.as_bytes());
    // SPAN_KIND_INTERNAL: the runtime's span is the one that crossed a
    // process boundary as far as a trace viewer cares.
    varint_field(&mut out, 6, 1);
    fixed64(&mut out, 7, nanos(s.start));
    fixed64(&mut out, 8, nanos(s.end));
    for (k, v) in &s.attributes {
        bytes_field(&mut out, 9, &key_value(k, v));
    }
    // Span.Event { time_unix_nano = 1; name = 2; attributes = 3 }.
    for e in &s.events {
        let mut ev = Vec::new();
        fixed64(&mut ev, 1, nanos(e.at));
        bytes_field(&mut ev, 2, e.name.as_bytes());
        for (k, v) in &e.attributes {
            bytes_field(&mut ev, 3, &key_value(k, v));
        }
        bytes_field(&mut out, 11, &ev);
    }
    // Status { message = 2; code = 3 }: OK = 1, ERROR = 2.
    let mut status = Vec::new();
    match &s.error {
        Some(m) => {
            bytes_field(&mut status, 2, m.as_bytes());
            varint_field(&mut status, 3, 2);
        }
        None => varint_field(&mut status, 3, 1),
    }
    bytes_field(&mut out, 15, &status);
    out
}

/// collector.trace.v1.ExportTraceServiceRequest with one ResourceSpans
/// (`service.name` wasm-cni, the node's host name) of these traces.
pub fn encode(traces: &[Trace]) -> Vec<u8> {
    let mut resource = Vec::new();
    bytes_field(
        &mut resource,
        1,
        &key_value("service.name", &Value::Str("wasm-cni".into())),
    );
    if let Some(host) = host_name() {
        bytes_field(&mut resource, 1, &key_value("host.name", &Value::Str(host)));
    }
    let mut scope = Vec::new();
    bytes_field(&mut scope, 1, b"wasm-cni");
    bytes_field(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
    let mut scope_spans = Vec::new();
    bytes_field(&mut scope_spans, 1, &scope);
    for t in traces {
        for s in &t.spans {
            bytes_field(&mut scope_spans, 2, &span(t, s));
        }
    }
    let mut resource_spans = Vec::new();
    bytes_field(&mut resource_spans, 1, &resource);
    bytes_field(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::new();
    bytes_field(&mut request, 1, &resource_spans);
    request
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

// --- export --------------------------------------------------------------

/// POST one request body; `Ok` when the collector answered 2xx in time.
pub fn post(endpoint: &Endpoint, body: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&endpoint.addr, EXPORT_TIMEOUT)
        .map_err(|e| format!("{}: {e}", endpoint.addr))?;
    let deadline = std::time::Instant::now() + EXPORT_TIMEOUT;
    let left = || deadline.saturating_duration_since(std::time::Instant::now());
    let set = |s: &TcpStream| -> Result<(), String> {
        let t = left();
        if t.is_zero() {
            return Err("timed out".into());
        }
        s.set_write_timeout(Some(t)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(t)).map_err(|e| e.to_string())
    };
    set(&s)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        endpoint.host,
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .map_err(|e| format!("sending: {e}"))?;
    set(&s)?;
    // The status line is all that matters; never more than a few KiB read.
    let mut reply = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        set(&s)?;
        match s.read(&mut reply[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(format!("reading the answer: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&reply[..got]);
    match line.split_whitespace().nth(1) {
        Some(code) if code.starts_with('2') && code.len() == 3 => Ok(()),
        Some(code) => Err(format!("the collector answered {code}")),
        None => Err("no HTTP answer".into()),
    }
}

/// Traces the daemon's exporter holds before dropping new ones.
const QUEUE: usize = 1024;
/// Traces per request to the collector.
const BATCH: usize = 64;

/// How an exporter reports what became of spans (the daemon's counters).
#[derive(Clone)]
pub struct Counts {
    pub exported: std::sync::Arc<dyn Fn(u64) + Send + Sync>,
    pub dropped: std::sync::Arc<dyn Fn(u64) + Send + Sync>,
}

/// The daemon's exporter: traces queue for one thread that posts them in
/// batches. What does not fit in the queue, or what the collector refuses
/// or does not take within [`EXPORT_TIMEOUT`], is dropped and counted; a
/// request only ever pays for a `try_send`.
pub struct Exporter {
    tx: std::sync::mpsc::SyncSender<Trace>,
    counts: Counts,
}

impl Exporter {
    pub fn start(endpoint: Endpoint, counts: Counts) -> std::io::Result<Exporter> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Trace>(QUEUE);
        let c = counts.clone();
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let mut last_error = String::new();
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(t) => batch.push(t),
                            Err(_) => break,
                        }
                    }
                    let n: u64 = batch.iter().map(|t| t.spans.len() as u64).sum();
                    match post(&endpoint, &encode(&batch)) {
                        Ok(()) => {
                            (c.exported)(n);
                            last_error.clear();
                        }
                        Err(e) => {
                            (c.dropped)(n);
                            // Said once per change, not once per batch.
                            if e != last_error {
                                wasm_cni_base::log::warn(format_args!(
                                    "traces to {}{}: {e}; dropping spans until it answers",
                                    endpoint.addr, endpoint.path
                                ));
                                last_error = e;
                            }
                        }
                    }
                }
            })?;
        Ok(Exporter { tx, counts })
    }

    pub fn submit(&self, trace: Trace) {
        let n = trace.spans.len() as u64;
        if self.tx.try_send(trace).is_err() {
            (self.counts.dropped)(n);
        }
    }
}

/// Hand `body` to a detached child of this executable that posts it, so
/// that this process (and the runtime waiting for it) does not wait.
pub fn export_detached(endpoint: &str, body: &[u8]) {
    use std::process::{Command, Stdio};
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    let child = Command::new(me)
        .arg(CHILD_COMMAND)
        .arg(endpoint)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(body);
        }
        // Not waited for: it outlives this process and is reparented.
        std::mem::forget(child);
    }
}

/// The detached child: read the body, post it once, exit 0 or 1.
pub fn child_main() -> i32 {
    let Some(url) = std::env::args().nth(2) else {
        return 2;
    };
    let Ok(endpoint) = url.parse::<Endpoint>() else {
        return 2;
    };
    let mut body = Vec::new();
    if std::io::stdin()
        .take(16 << 20)
        .read_to_end(&mut body)
        .is_err()
    {
        return 1;
    }
    match post(&endpoint, &body) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_cni_protocol::Command;

    #[test]
    fn traceparent_is_read_as_w3c_specifies() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(ok).unwrap();
        assert_eq!(p.trace_id[0], 0x4b);
        assert_eq!(p.parent_id[7], 0xb7);
        assert!(p.sampled);
        assert!(
            !TraceParent::parse(&ok.replace("-01", "-00"))
                .unwrap()
                .sampled
        );
        // A later version may append fields after its first four.
        assert!(TraceParent::parse(&format!("01{}-extra", &ok[2..])).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // No panic on any prefix of hostile input.
        let hostile = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01é-éé";
        for (i, _) in hostile.char_indices() {
            let _ = TraceParent::parse(&hostile[..i]);
        }
        assert_eq!(trace_state("vendor=x"), "vendor=x");
        assert_eq!(trace_state(&"a".repeat(513)), "");
        assert_eq!(trace_state("a=\n"), "");
    }

    #[test]
    fn endpoints_come_from_the_standard_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(endpoint_from_env(env(&[])), None);
        assert_eq!(
            endpoint_from_env(env(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://127.0.0.1:4318/"
            )])),
            Some("http://127.0.0.1:4318/v1/traces".into())
        );
        assert_eq!(
            endpoint_from_env(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/t"),
            ])),
            Some("http://127.0.0.1:9/t".into())
        );
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(Box::new([
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                off,
            ]));
            assert_eq!(endpoint_from_env(env(pairs)), None, "{off:?}");
        }
        let e: Endpoint = "http://localhost:4318/v1/traces".parse().unwrap();
        assert_eq!(e.addr, "127.0.0.1:4318".parse().unwrap());
        let e: Endpoint = "http://[::1]:4318".parse().unwrap();
        assert_eq!((e.addr.port(), e.path.as_str()), (4318, "/v1/traces"));
        let e: Endpoint = "http://10.0.0.1".parse().unwrap();
        assert_eq!(e.addr.port(), 4318);
        for bad in [
            "https://127.0.0.1:4318",
            "http://collector.svc:4318",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:4318/a b",
            "127.0.0.1:4318",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_delegate_nests_under_the_plugin_that_called_it() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ms = |n| Duration::from_millis(n);
        let step = |plugin: &str, index, start, dur| StepReport {
            index,
            plugin: plugin.into(),
            verb: "ADD",
            started: t0 + ms(start),
            duration: ms(dur),
            abort: None,
            digest: None,
            host_work: Vec::new(),
        };
        let report = Report {
            command: Some(Command::Add),
            network: "n".into(),
            container_id: "c".into(),
            ifname: "eth0".into(),
            // Reported as they end: the delegate first.
            steps: vec![
                step("host-local", 0, 2, 3),
                step("bridge", 0, 1, 6),
                step("portmap", 1, 8, 1),
            ],
            ..Report::default()
        };
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = of_call(Some(parent), Some("v=1"), &report, t0, t0 + ms(10), None).unwrap();
        assert_eq!(t.trace_id, TraceParent::parse(parent).unwrap().trace_id);
        let by_name = |n: &str| t.spans.iter().find(|s| s.name == n).unwrap();
        let root = by_name("CNI ADD");
        assert_eq!(
            root.parent_id,
            TraceParent::parse(parent).unwrap().parent_id
        );
        assert_eq!(by_name("bridge ADD").parent_id, root.span_id);
        assert_eq!(
            by_name("host-local ADD").parent_id,
            by_name("bridge ADD").span_id
        );
        assert_eq!(by_name("portmap ADD").parent_id, root.span_id);
        let unsampled = parent.replace("-01", "-00");
        assert!(of_call(Some(&unsampled), None, &report, t0, t0, None).is_none());
        // No context: a trace of its own.
        let own = of_call(None, None, &report, t0, t0, None).unwrap();
        assert_ne!(own.trace_id, [0; 16]);
        assert_eq!(own.spans[0].parent_id, [0; 8]);
        assert!(!encode(&[t, own]).is_empty());
    }
}
