//! The chain executor (`wasm_cni_engine::chain`) against the in-memory backends:
//! which plugin gets which verb in which order, and what a failed ADD, a
//! failed DEL and a GC over several attachments leave in the kernel model
//! and the records. Real components (`fx-net`), no root, no namespaces.
//!
//! Each verb on an attachment owns its ledger (`chain::Operation`); these
//! tests also hold that nothing of one attachment's ledger reaches the
//! next one's teardown.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use wasm_cni_engine::chain::{Attachment, Executor};
use wasm_cni_engine::sandbox::Runtime;
use wasm_cni_kernel::net::{MemoryNet, Net, NsRef};
use wasm_cni_protocol::{config, Command};
use wasm_cni_store::state::{AttachmentRecords, MemoryRecords};
use wasm_cni_store::MemoryStore;
use wasm_cni_tests::{fixture, Sandbox};

const NETWORK: &str = "exec";

/// One node: a kernel model, records and a store that the executors of
/// successive verbs share, as successive calls share the kernel and the
/// state directory.
struct Node {
    sb: Sandbox,
    runtime: Arc<Runtime>,
    net: Arc<Mutex<Box<dyn Net>>>,
    records: Arc<MemoryRecords>,
    store: Arc<MemoryStore>,
}

impl Node {
    fn new(name: &str, pods: &[&str]) -> Node {
        let sb = Sandbox::new(name);
        sb.install(&fixture("fx-net"), "fx-net");
        let runtime = Arc::new(Runtime::new(&sb.plugin_dir(), None).unwrap());
        let mut net = MemoryNet::new();
        for pod in pods {
            net.add_namespace(netns(pod));
        }
        Node {
            sb,
            runtime,
            net: Arc::new(Mutex::new(Box::new(net))),
            records: Arc::default(),
            store: Arc::default(),
        }
    }

    /// An executor for `command` on this node, the config's top-level keys
    /// `extra` added.
    fn exec(&self, command: Command, chain: &Value, extra: Value) -> Executor {
        let mut conf = self.sb.conf("1.1.0", NETWORK, chain.clone());
        if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        let conf = config::parse(conf.to_string().as_bytes(), command).unwrap();
        Executor::new(
            self.runtime.clone(),
            Arc::new(conf),
            self.records.clone(),
            self.store.clone(),
            Box::new(MemoryNet::new()),
        )
        .with_shared(self.net.clone(), None)
    }

    /// Whether the node namespace has a link of this name.
    fn has_link(&self, name: &str) -> bool {
        let mut net = self.net.lock().unwrap();
        let node = net.open(NsRef::Current).unwrap();
        net.link_by_name(node, name).is_ok()
    }

    /// Give the pod's namespace its CNI_IFNAME (a veth whose peer stays
    /// there too): as if the runtime or an earlier plugin had made it.
    fn add_eth0(&self, pod: &str) {
        let mut net = self.net.lock().unwrap();
        let path = netns(pod);
        let ns = net.open(NsRef::Path(path.as_ref())).unwrap();
        net.create_veth(ns, "eth0", "peer0", ns, None, None)
            .unwrap();
    }

    /// The container IDs with a record.
    fn recorded(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .records
            .list(NETWORK)
            .unwrap()
            .into_iter()
            .map(|r| r.container_id)
            .collect();
        ids.sort();
        ids
    }
}

fn netns(pod: &str) -> String {
    format!("/run/netns/{pod}")
}

fn pod(id: &str) -> Attachment {
    Attachment {
        container_id: id.into(),
        ifname: "eth0".into(),
        netns: Some(netns(id)),
        ..Attachment::default()
    }
}

/// An `fx-net` step that makes a veth pair of fresh names in the node
/// namespace (links the host records as the attachment's), then does `more`.
fn veth_step(prefix: &str, more: Value) -> Value {
    let mut step = json!({
        "type": "fx-net",
        "strict": true,
        "ops": [{"op": "create-veth", "ns": "node", "peer-ns": "node",
                 "name": format!("{prefix}{{cid}}"), "peer": format!("{prefix}p{{cid}}")}],
    });
    if let (Some(s), Some(m)) = (step.as_object_mut(), more.as_object()) {
        s.extend(m.clone());
    }
    step
}

/// The plugin calls an executor made, as (chain index, verb).
fn calls(exec: &Executor) -> Vec<(usize, &'static str)> {
    exec.steps().iter().map(|s| (s.index, s.verb)).collect()
}

#[test]
fn a_failed_add_dels_what_ran_in_reverse_and_leaves_nothing() {
    // The host stopped the third plugin (a trap): it gets a DEL too. A
    // plugin that returned its error does not: it cleaned up after itself.
    for (end, dels) in [
        ("trap", vec![(2, "DEL"), (1, "DEL"), (0, "DEL")]),
        ("fail", vec![(1, "DEL"), (0, "DEL")]),
    ] {
        let node = Node::new("exec-rollback", &["c-roll"]);
        let chain = json!([
            veth_step("a", json!({})),
            veth_step("b", json!({})),
            {"type": "fx-net", "end": end},
        ]);
        let exec = node.exec(Command::Add, &chain, json!({}));
        let err = exec.add(&pod("c-roll")).unwrap_err();
        assert!(err.to_string().contains(end), "{end}: {err}");
        let mut want = vec![(0, "ADD"), (1, "ADD"), (2, "ADD")];
        want.extend(dels);
        assert_eq!(calls(&exec), want, "{end}");
        // fx-net's DEL deletes nothing: the host deleted what the ADD made.
        for link in ["aroll", "aproll", "broll", "bproll"] {
            assert!(!node.has_link(link), "{end}: {link} left behind");
        }
        assert!(node.recorded().is_empty(), "{end}: pending record left");
    }
}

#[test]
fn a_failed_del_keeps_record_and_links_and_a_retry_finishes() {
    let node = Node::new("exec-del", &["c-del1"]);
    // The second plugin's DEL brings CNI_IFNAME up, which is not there at
    // first.
    let chain = json!([
        veth_step("a", json!({})),
        veth_step("b", json!({"delOps": [{"op": "up", "name": "eth0"}]})),
    ]);
    let att = pod("c-del1");
    node.exec(Command::Add, &chain, json!({}))
        .add(&att)
        .unwrap();
    assert!(node.has_link("adel1") && node.has_link("bdel1"));

    let exec = node.exec(Command::Del, &chain, json!({}));
    let err = exec.del(&att).unwrap_err();
    assert!(err.to_string().contains("eth0"), "{err}");
    // Every plugin got its DEL, in reverse, the failure notwithstanding.
    assert_eq!(calls(&exec), [(1, "DEL"), (0, "DEL")]);
    // The record stays for the retry, and so does every link: the failed
    // plugin may still need them.
    assert_eq!(node.recorded(), ["c-del1"]);
    for link in ["adel1", "apdel1", "bdel1", "bpdel1"] {
        assert!(node.has_link(link), "{link} deleted after a failed DEL");
    }

    node.add_eth0("c-del1");
    node.exec(Command::Del, &chain, json!({}))
        .del(&att)
        .unwrap();
    assert!(node.recorded().is_empty());
    for link in ["adel1", "apdel1", "bdel1", "bpdel1"] {
        assert!(!node.has_link(link), "{link} left after the DEL");
    }
}

#[test]
fn gc_tears_down_each_stale_attachment_with_its_own_ledger() {
    let pods = ["gc01", "gc02", "gc03"];
    let node = Node::new("exec-gc", &pods);
    // DEL brings CNI_IFNAME up: it fails for the attachment whose
    // namespace has none.
    let chain = json!([veth_step(
        "a",
        json!({"delOps": [{"op": "up", "name": "eth0"}]})
    )]);
    for p in pods {
        node.exec(Command::Add, &chain, json!({}))
            .add(&pod(p))
            .unwrap();
    }
    node.add_eth0("gc02");
    node.add_eth0("gc03");

    let exec = node.exec(
        Command::Gc,
        &chain,
        json!({"cni.dev/valid-attachments": [{"containerID": "gc02", "ifname": "eth0"}]}),
    );
    let err = exec.gc().unwrap_err();
    assert!(err.to_string().contains("eth0"), "{err}");
    // gc01's DEL failed, gc03's ran, then every plugin's GC.
    assert_eq!(calls(&exec), [(0, "DEL"), (0, "DEL"), (0, "GC")]);
    // gc01: its DEL failed, so its record and its links stay for the next
    // GC. Had its ledger reached gc03's teardown, the host would have
    // deleted them there.
    assert!(node.has_link("agc01") && node.has_link("apgc01"));
    // gc02 is valid: untouched. gc03 is gone, links and record.
    assert!(node.has_link("agc02") && node.has_link("apgc02"));
    assert!(!node.has_link("agc03") && !node.has_link("apgc03"));
    assert_eq!(node.recorded(), ["gc01", "gc02"]);
}
