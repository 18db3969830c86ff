//! What an operator watches.
//!
//! Metrics: a real Prometheus (Debian's) scrapes a daemon that served ADDs,
//! DELs, a plugin the host stopped and a malformed peer, and answers every
//! query of the Grafana dashboard shipped in `host/deploy/dashboards/` with
//! data, so no panel of it is a typo.
//!
//! Traces: a stand-in OpenTelemetry collector (`tests/fixtures/otlp-receiver.py`,
//! which parses every request with the official protos from PyPI's
//! `opentelemetry-proto`) receives a chain's spans under the runtime's
//! `TRACEPARENT`, per invocation and through the daemon; a collector that
//! is down, hangs or answers 500 neither fails nor holds up a call, and the
//! daemon counts the spans it dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{
    fixture, is_root, plugin, python_venv, workspace_root, Daemon, Invocation, Netns, Output, Pod,
    Sandbox, TempDir,
};

const METRICS: &str = "127.0.0.1:19751";
const PROMETHEUS: &str = "127.0.0.1:19090";

/// Prometheus in the node's namespace, scraping the daemon every second,
/// its data in a temporary directory; killed on drop.
struct Prometheus {
    child: Child,
    _dir: TempDir,
}

impl Prometheus {
    fn start(node: &Netns) -> Prometheus {
        let dir = TempDir::new("prom");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: wasm-cni\n    static_configs:\n      - targets: ['{METRICS}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &node.name, "prometheus"])
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={PROMETHEUS}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package `prometheus`)");
        Prometheus { child, _dir: dir }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET` an HTTP API path inside `node`, its body parsed as JSON.
fn api(node: &Netns, path: &str, query: Option<&str>) -> Value {
    let url = format!("http://{PROMETHEUS}{path}");
    let mut args = vec!["curl", "-sS", "--max-time", "5", "-G", &url];
    let q;
    if let Some(query) = query {
        q = format!("query={query}");
        args.extend(["--data-urlencode", &q]);
    }
    let body = node.exec(&args);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The dashboard's queries with Grafana's variables as a dashboard would
/// fill them (every node, a one-minute rate window).
fn dashboard_queries() -> Vec<(String, String)> {
    let path = wasm_cni_tests::workspace_root().join("host/deploy/dashboards/wasm-cni.json");
    let dash: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*");
            out.push((panel["title"].as_str().unwrap().to_string(), expr));
        }
    }
    out
}

#[test]
fn prometheus_answers_every_dashboard_panel_from_a_live_daemon() {
    if !is_root("observability") {
        return;
    }
    let node = Netns::new("obs");
    let sb = Sandbox::new("obs");
    sb.install(&plugin("host-local"), "host-local");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    let daemon = Daemon::start(&node.name, &["--metrics", &format!("tcp:{METRICS}")]);
    let prometheus = Prometheus::start(&node);
    let conf = daemon.conf(
        &sb.conf(
            "1.1.0",
            "obsnet",
            json!([{"type": "host-local", "ipam": {"type": "host-local", "subnet": "10.95.0.0/24", "reuseIPWait": 1}}]),
        ),
        "require",
    );
    let spin = daemon.conf(
        &sb.conf(
            "1.1.0",
            "obsspin",
            json!([{"type": "fx-hostile", "attack": "spin", "wasm": {"deadlineMs": 100}}]),
        ),
        "require",
    );
    let ctr = Netns::new("obsc");
    let call = |verb: &str, id: &str, conf: &Value| {
        Invocation::new(verb)
            .id(id)
            .netns(ctr.path())
            .run_in(Some(&node.name), conf)
    };
    // Load over several scrapes, so that rates have two samples.
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(5) {
        let id = format!("o{round}");
        call("ADD", &id, &conf).assert_ok();
        call("DEL", &id, &conf).assert_ok();
        round += 1;
    }
    call("ADD", "kept", &conf).assert_ok();
    assert_eq!(call("ADD", "s1", &spin).error_code(), 999);
    // A peer that sends garbage is refused (`malformed`).
    node.exec(&[
        "python3",
        "-c",
        "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
         s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n' * 4); s.shutdown(1); s.recv(64)",
        daemon.socket.to_str().unwrap(),
    ]);
    // Two more scrapes after the last event.
    std::thread::sleep(Duration::from_millis(3500));

    let waited = Instant::now();
    while api(&node, "/api/v1/query", Some("up"))["data"]["result"]
        .as_array()
        .is_none_or(|r| r.is_empty())
    {
        assert!(waited.elapsed() < Duration::from_secs(20), "no scrape");
        std::thread::sleep(Duration::from_millis(200));
    }
    let up = api(&node, "/api/v1/query", Some("up"));
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
    let nodes = api(
        &node,
        "/api/v1/label/instance/values",
        Some("wasm_cni_build_info"),
    );
    assert_eq!(nodes["data"], json!([METRICS]), "{nodes}");

    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "{queries:?}");
    for (panel, expr) in queries {
        let r = api(&node, "/api/v1/query", Some(&expr));
        assert_eq!(r["status"], "success", "{panel}: {expr}: {r}");
        let series = r["data"]["result"].as_array().cloned().unwrap_or_default();
        assert!(!series.is_empty(), "{panel}: no data for {expr}");
    }
    // And the values behind two panels are the ones served.
    let ok = api(
        &node,
        "/api/v1/query",
        Some(r#"sum(wasm_cni_requests_total{verb="ADD",outcome="ok"})"#),
    );
    assert_eq!(
        ok["data"]["result"][0]["value"][1],
        json!((round + 1).to_string()),
        "{ok}"
    );
    let allocated = api(
        &node,
        "/api/v1/query",
        Some(r#"wasm_cni_ipam_addresses{network="obsnet",state="allocated"}"#),
    );
    assert_eq!(
        allocated["data"]["result"][0]["value"][1], "1",
        "{allocated}"
    );
    call("DEL", "kept", &conf).assert_ok();
    drop(prometheus);
}

/// PyPI's `opentelemetry-proto` in a virtualenv under target/, made on
/// first use.
fn otlp_python() -> std::path::PathBuf {
    python_venv("otlp-proto", "opentelemetry-proto==1.45.2").join("bin/python")
}

/// The stand-in collector on 127.0.0.1:`port` of `node`; killed on drop.
struct Collector {
    child: Child,
    dir: TempDir,
}

impl Collector {
    fn start(node: &Netns, port: u16, mode: &str) -> Collector {
        let dir = TempDir::new("otlp");
        let script = workspace_root().join("tests/fixtures/otlp-receiver.py");
        let child = Command::new("ip")
            .args(["netns", "exec", &node.name])
            .arg(otlp_python())
            .arg(script)
            .arg(port.to_string())
            .arg(dir.join("spans.jsonl"))
            .arg(mode)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("receiver.log")).unwrap())
            .spawn()
            .expect("otlp-receiver.py");
        let c = Collector { child, dir };
        let started = Instant::now();
        while !node.try_exec(&["bash", "-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{port}")]) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the collector did not listen: {}",
                std::fs::read_to_string(c.dir.join("receiver.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("spans.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The spans of `trace`, once `n` of them arrived (10 s at most).
    fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let spans: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["traceId"] == trace)
                .collect();
            if spans.len() >= n {
                return spans;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{} of {n} spans of {trace}: {spans:?}\n{}",
                spans.len(),
                std::fs::read_to_string(self.dir.join("receiver.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn traceparent(trace: &str, parent: &str, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {spans:?}"))
}

/// The tree a bridge + host-local call makes under the runtime's span.
fn assert_chain_trace(spans: &[Value], verb: &str, parent: &str, id: &str) {
    let root = by_name(spans, &format!("CNI {verb}"));
    assert_eq!(root["parentSpanId"], parent, "{root}");
    assert_eq!(root["attributes"]["cni.command"], verb);
    assert_eq!(root["attributes"]["cni.network"], "trnet");
    assert_eq!(root["attributes"]["cni.container_id"], id);
    assert_eq!(root["attributes"]["cni.ifname"], "eth0");
    assert_eq!(root["status"]["code"], 1, "{root}");
    assert_eq!(root["resource"]["service.name"], "wasm-cni");
    assert_eq!(root["path"], "/v1/traces");
    assert_eq!(root["contentType"], "application/x-protobuf");
    let bridge = by_name(spans, &format!("bridge {verb}"));
    assert_eq!(bridge["parentSpanId"], root["spanId"]);
    assert_eq!(bridge["attributes"]["cni.plugin"], "bridge");
    let ipam = by_name(spans, &format!("host-local {verb}"));
    assert_eq!(ipam["parentSpanId"], bridge["spanId"], "{spans:?}");
    for s in [bridge, ipam] {
        assert!(s["start"].as_u64() >= root["start"].as_u64(), "{s}");
        assert!(s["end"].as_u64() <= root["end"].as_u64(), "{s}");
    }
}

fn tracing_node(tag: &str) -> (Sandbox, Pod) {
    let sb = Sandbox::new(tag);
    sb.install(&plugin("bridge"), "bridge");
    sb.install(&plugin("host-local"), "host-local");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    sb.install(&fixture("fx-net"), "fx-net");
    (sb, Pod::new(tag))
}

fn bridge_conf(sb: &Sandbox, bridge: &str) -> Value {
    sb.conf(
        "1.1.0",
        "trnet",
        json!([{"type": "bridge", "bridge": bridge,
                "ipam": {"type": "host-local", "subnet": "10.96.0.0/24"}}]),
    )
}

const TRACE_A: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_B: &str = "5ca03a4688c45eb7b4df030e1f1f5847";
const TRACE_C: &str = "6db14b5799d56fc8c5e0141f20206958";
const TRACE_D: &str = "7ec25c68aae670d9d6f1252031317a69";
const TRACE_E: &str = "8fd36d79bbf781eae7023631424287b7";
const RUNTIME_SPAN: &str = "00f067aa0ba902b7";

#[test]
fn a_chain_call_arrives_as_one_trace_under_the_runtimes_span() {
    if !is_root("traces") {
        return;
    }
    let (sb, pod) = tracing_node("trc");
    let collector = Collector::start(&pod.node, 14318, "ok");
    let conf = bridge_conf(&sb, "trbr0");

    // Per invocation: the runtime's environment names the collector.
    let tp = traceparent(TRACE_A, RUNTIME_SPAN, true);
    pod.run(
        Invocation::new("ADD")
            .id("t1")
            .env("TRACEPARENT", &tp)
            .env("TRACESTATE", "vendor=opaque")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:14318"),
        &conf,
    )
    .assert_ok();
    let spans = collector.trace(TRACE_A, 3);
    assert_chain_trace(&spans, "ADD", RUNTIME_SPAN, "t1");
    assert!(spans.iter().all(|s| s["traceState"] == "vendor=opaque"));
    // The host's work, under the plugin it was done for: the kernel's for
    // bridge, the store's for host-local; each plugin's component digest.
    let bridge = by_name(&spans, "bridge ADD");
    let ipam = by_name(&spans, "host-local ADD");
    let under = |parent: &Value, kind: &str| -> Vec<String> {
        spans
            .iter()
            .filter(|s| {
                s["parentSpanId"] == parent["spanId"] && s["attributes"]["wasm_cni.host"] == kind
            })
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    let netlink = under(bridge, "netlink");
    assert!(
        netlink.iter().any(|n| n.starts_with("netlink create ")),
        "{netlink:?}"
    );
    assert!(
        under(ipam, "store")
            .iter()
            .any(|n| n.contains("trnet/host-local")),
        "{spans:?}"
    );
    for s in [bridge, ipam] {
        let digest = s["attributes"]["wasm_cni.component.sha256"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(digest.len(), 64, "{s}");
    }
    // Disabled the standard way: nothing.
    let off = traceparent(TRACE_D, RUNTIME_SPAN, true);
    pod.run(
        Invocation::new("CHECK")
            .id("t1")
            .env("TRACEPARENT", &off)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:14318")
            .env("OTEL_SDK_DISABLED", "true"),
        &conf,
    )
    .assert_ok();

    // Through the daemon: the daemon's endpoint, whatever the call's
    // environment or config says (a peer does not choose where the daemon
    // connects).
    let daemon = Daemon::start(
        &pod.node.name,
        &[
            "--otlp-endpoint",
            "http://127.0.0.1:14318",
            "--metrics",
            "tcp:127.0.0.1:19753",
        ],
    );
    let mut dconf = daemon.conf(&conf, "require");
    dconf["tracing"] = json!({"endpoint": "http://127.0.0.1:1"});
    let tp = traceparent(TRACE_B, RUNTIME_SPAN, true);
    pod.run(
        Invocation::new("DEL")
            .id("t1")
            .env("TRACEPARENT", &tp)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
        &dconf,
    )
    .assert_ok();
    assert_chain_trace(&collector.trace(TRACE_B, 3), "DEL", RUNTIME_SPAN, "t1");

    // Not sampled by the runtime: no spans. The daemon exports in order,
    // so once a later call's spans are in, these would have been too.
    let unsampled = traceparent(TRACE_D, RUNTIME_SPAN, false);
    pod.run(
        Invocation::new("STATUS").env("TRACEPARENT", &unsampled),
        &dconf,
    )
    .assert_ok();
    // A plugin the host stops: the error on the call and on the plugin.
    let spin = daemon.conf(
        &sb.conf(
            "1.1.0",
            "trspin",
            json!([{"type": "fx-hostile", "attack": "spin", "wasm": {"deadlineMs": 100}}]),
        ),
        "require",
    );
    let tp = traceparent(TRACE_C, RUNTIME_SPAN, true);
    let out = pod.run(
        Invocation::new("ADD").id("t2").env("TRACEPARENT", &tp),
        &spin,
    );
    assert_eq!(out.error_code(), 999);
    let spans = collector.trace(TRACE_C, 2);
    let root = by_name(&spans, "CNI ADD");
    assert_eq!(root["status"]["code"], 2, "{root}");
    assert!(root["status"]["message"]
        .as_str()
        .unwrap()
        .contains("deadline"));
    assert_eq!(root["attributes"]["cni.error_code"], 999);
    let plugin = by_name(&spans, "fx-hostile ADD");
    assert_eq!(plugin["attributes"]["wasm_cni.abort"], "deadline");
    assert_eq!(plugin["status"]["code"], 2);
    // A request the host's policy refuses: an event on the plugin's span.
    let mut net = daemon.conf(
        &sb.conf(
            "1.1.0",
            "trpol",
            json!([{"type": "fx-net", "strict": true, "ops": [],
                    "checkOps": [{"op": "create-veth", "ns": "node", "name": "trz0",
                                  "peer": "trz1", "peer-ns": "node"}]}]),
        ),
        "require",
    );
    pod.run(Invocation::new("ADD").id("t3"), &net).assert_ok();
    let tp = traceparent(TRACE_E, RUNTIME_SPAN, true);
    let out = pod.run(
        Invocation::new("CHECK").id("t3").env("TRACEPARENT", &tp),
        &net,
    );
    assert_eq!(out.error_code(), 999, "{out:?}");
    let spans = collector.trace(TRACE_E, 2);
    let check = by_name(&spans, "fx-net CHECK");
    let event = &check["events"][0];
    assert_eq!(event["name"], "refused by the host's policy", "{check}");
    assert!(
        event["attributes"]["wasm_cni.reason"]
            .as_str()
            .unwrap()
            .contains("links are created during ADD only"),
        "{event}"
    );
    net["chain"][0]["checkOps"] = json!([]);
    pod.run(Invocation::new("DEL").id("t3"), &net).assert_ok();
    assert!(
        collector.spans().iter().all(|s| s["traceId"] != TRACE_D),
        "unsampled or disabled calls were exported"
    );
    let page = pod
        .node
        .exec(&["curl", "-sS", "http://127.0.0.1:19753/metrics"]);
    assert!(page.contains("wasm_cni_spans_exported_total "), "{page}");
    assert!(page.contains("wasm_cni_spans_dropped_total 0"), "{page}");
}

/// `wasm_cni_spans_dropped_total` as the daemon reports it.
fn dropped(node: &Netns, port: u16) -> u64 {
    let page = node.exec(&["curl", "-sS", &format!("http://127.0.0.1:{port}/metrics")]);
    page.lines()
        .find_map(|l| l.strip_prefix("wasm_cni_spans_dropped_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no dropped counter in {page}"))
}

#[test]
fn a_collector_down_hanging_or_failing_never_fails_or_holds_up_a_call() {
    if !is_root("traces down") {
        return;
    }
    let (sb, pod) = tracing_node("trd");
    let conf = bridge_conf(&sb, "trbr1");
    let tp = traceparent(TRACE_A, RUNTIME_SPAN, true);
    let cycle = |conf: &Value, id: &str, extra: &[(&'static str, &'static str)]| -> Duration {
        let mut slowest = Duration::ZERO;
        for verb in ["ADD", "DEL"] {
            let mut inv = Invocation::new(verb).id(id).env("TRACEPARENT", &tp);
            for (k, v) in extra {
                inv = inv.env(k, v);
            }
            let out: Output = pod.run(inv, conf);
            out.assert_ok();
            slowest = slowest.max(out.elapsed);
        }
        slowest
    };
    // Nothing listens on 14319 (down), 14320 hangs, 14321 answers 500.
    let _hang = Collector::start(&pod.node, 14320, "hang");
    let _fail = Collector::start(&pod.node, 14321, "fail");
    // Per invocation the export is a detached child: the call never waits
    // for the collector (the export takes up to 2 s when it hangs).
    for port in ["14319", "14320", "14321"] {
        let endpoint: &'static str = Box::leak(format!("http://127.0.0.1:{port}").into_boxed_str());
        let slowest = cycle(
            &conf,
            &format!("p{port}"),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)],
        );
        assert!(slowest < Duration::from_millis(1500), "{port}: {slowest:?}");
    }
    // Through the daemon: counted as dropped.
    for (port, metrics) in [(14319u16, 19754u16), (14320, 19755), (14321, 19756)] {
        let daemon = Daemon::start(
            &pod.node.name,
            &[
                "--otlp-endpoint",
                &format!("http://127.0.0.1:{port}"),
                "--metrics",
                &format!("tcp:127.0.0.1:{metrics}"),
            ],
        );
        let dconf = daemon.conf(&conf, "require");
        for i in 0..3 {
            let slowest = cycle(&dconf, &format!("d{port}{i}"), &[]);
            assert!(slowest < Duration::from_millis(1500), "{port}: {slowest:?}");
        }
        // The exporter gives each batch 2 s.
        let started = Instant::now();
        while dropped(&pod.node, metrics) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{port}: nothing dropped"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(daemon);
    }
}
