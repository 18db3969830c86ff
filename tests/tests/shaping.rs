//! The bandwidth plugin end to end: bridge + host-local + bandwidth in
//! namespaces of the test's own. The tc objects wasm-cni makes are the
//! reference plugin's (kinds and parameters), measured throughput in each
//! direction is the configured rate (±25 %), and DEL leaves nothing.

use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use wasm_cni_tests::{daemon_mode, is_root, plugin, Daemon, Invocation, Netns, Sandbox, TempDir};

const PROBE: &str = env!("CARGO_BIN_EXE_wasm-cni-probe");
const REFERENCE_DIR: &str = "/usr/lib/cni";

const INGRESS_RATE: u64 = 20_000_000;
const EGRESS_RATE: u64 = 10_000_000;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(ns: &Netns, port: u16) -> Server {
    Server(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, PROBE, "serve", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the probe server"),
    )
}

/// Bits per second the receiver saw for `verb` (`push` or `pull`) of `n`
/// bytes between `ns` and the server at `addr`.
fn rate(ns: &Netns, verb: &str, addr: &str, port: u16, n: u64) -> f64 {
    for _ in 0..20 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                PROBE,
                verb,
                addr,
                &port.to_string(),
                &n.to_string(),
            ])
            .output()
            .unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{verb} to {addr}:{port} never worked");
}

fn chain(k: u8, data_dir: &str) -> Vec<Value> {
    vec![
        json!({"type":"bridge","bridge":format!("cnib{k}"),"isGateway":true,
               "ipam":{"type":"host-local","dataDir":data_dir,
                       "ranges":[[{"subnet":format!("10.{k}.0.0/24")}]]}}),
        json!({"type":"bandwidth","ingressRate":INGRESS_RATE,"ingressBurst":200_000,
               "egressRate":EGRESS_RATE,"egressBurst":100_000}),
    ]
}

/// The tc objects on the pod's host veth and on the ifb, with device names
/// replaced by roles, as comparable JSON.
fn tc_objects(node: &Netns, result: &Value) -> Value {
    let ifaces = result["interfaces"].as_array().unwrap();
    let veth = ifaces[1]["name"].as_str().unwrap().to_string();
    let ifb = ifaces
        .iter()
        .filter_map(|i| i["name"].as_str())
        .find(|n| n.starts_with("bwp"))
        .expect("an ifb in the result")
        .to_string();
    let qdiscs = |dev: &str| -> Vec<Value> {
        let v: Value =
            serde_json::from_str(&node.exec(&["tc", "-j", "qdisc", "show", "dev", dev])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|q| {
                let mut q = q.clone();
                q.as_object_mut().unwrap().remove("refcnt");
                q["dev"] = json!("DEV");
                q
            })
            .collect()
    };
    let filters = node.exec(&["tc", "filter", "show", "dev", &veth, "ingress"]);
    // The first action is what the filter does (the reference's Go library
    // appends a second, unreachable, mirred action after a stolen one).
    let first_action = filters
        .lines()
        .find(|l| l.contains("action order 1:"))
        .unwrap_or_default()
        .replace(&ifb, "IFB");
    let head = filters
        .lines()
        .find(|l| l.contains("flowid"))
        .map(|l| l.split(" fh ").next().unwrap_or(l).to_string())
        .unwrap_or_default();
    json!({
        "ifb": ifb,
        "veth": qdiscs(&veth),
        "ifbQdiscs": qdiscs(&ifb),
        "filter": head,
        "flowid": filters.contains("*flowid 1:1"),
        "action": first_action.trim(),
    })
}

fn reference(
    node: &Netns,
    pod: &Netns,
    command: &str,
    chain: &[Value],
    prev: Option<&Value>,
) -> Option<Value> {
    let order: Vec<&Value> = if command == "DEL" {
        chain.iter().rev().collect()
    } else {
        chain.iter().collect()
    };
    let mut prev = prev.cloned();
    for entry in order {
        let mut c = entry.clone();
        c["name"] = json!("shapenet");
        c["cniVersion"] = json!("1.0.0");
        if let Some(p) = &prev {
            c["prevResult"] = p.clone();
        }
        let ty = c["type"].as_str().unwrap().to_string();
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &node.name,
                &format!("{REFERENCE_DIR}/{ty}"),
            ])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "ctr1")
            .env("CNI_NETNS", pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", REFERENCE_DIR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(c.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "reference {command} {ty}: {out:?}");
        if command == "ADD" {
            prev = Some(serde_json::from_slice(&out.stdout).unwrap());
        }
    }
    prev
}

#[test]
fn bandwidth_limits_like_the_reference_and_leaves_nothing() {
    if !is_root("bandwidth_limits_like_the_reference_and_leaves_nothing") {
        return;
    }
    // The reference's objects, in namespaces of their own.
    let want = {
        let node = Netns::new("shrn");
        let pod = Netns::new("shrp");
        let dir = TempDir::new("shref");
        let c = chain(73, &dir.path().to_string_lossy());
        let result = reference(&node, &pod, "ADD", &c, None).unwrap();
        let objects = tc_objects(&node, &result);
        reference(&node, &pod, "DEL", &c, Some(&result));
        objects
    };

    let node = Netns::new("shwn");
    let pod = Netns::new("shwp");
    let sb = Sandbox::new("shape");
    for p in ["bridge", "host-local", "bandwidth"] {
        sb.install(&plugin(p), p);
    }
    let daemon = daemon_mode().then(|| Daemon::start(&node.name, &[]));
    let mut conf = sb.conf(
        "1.0.0",
        "shapenet",
        json!(chain(73, &sb.dir.join("ipam").to_string_lossy())),
    );
    if let Some(d) = &daemon {
        conf = d.conf(&conf, "require");
    }
    let run = |command: &str, conf: &Value| {
        Invocation::new(command)
            .netns(pod.path())
            .run_in(Some(&node.name), conf)
    };
    let out = run("ADD", &conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(
        tc_objects(&node, &result),
        want,
        "tc objects differ from the reference's"
    );
    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    run("CHECK", &check).assert_ok();

    let _server = serve(&node, 5001);
    let pulled = rate(&pod, "pull", "10.73.0.1", 5001, INGRESS_RATE / 8 * 2);
    let pushed = rate(&pod, "push", "10.73.0.1", 5001, EGRESS_RATE / 8 * 2);
    for (what, got, configured) in [
        ("ingress", pulled, INGRESS_RATE),
        ("egress", pushed, EGRESS_RATE),
    ] {
        let ratio = got / configured as f64;
        eprintln!("{what}: {got:.0} bit/s for a limit of {configured} ({ratio:.3})");
        assert!(
            (0.75..=1.25).contains(&ratio),
            "{what}: {got:.0} bit/s for a limit of {configured} ({ratio:.2})"
        );
    }

    run("DEL", &conf).assert_ok();
    let ifb = want["ifb"].as_str().unwrap();
    assert!(node.link(ifb).is_none(), "the ifb is left after DEL");
    let links = node.exec(&["ip", "-o", "link", "show"]);
    assert!(!links.contains("veth"), "{links}");
}
