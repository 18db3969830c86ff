//! The host library end to end without root: real components run by the
//! real executor against the in-memory kernel model (`net::MemoryNet`) and
//! in-memory state. This is the harness plugin authors can use to test a
//! component without namespaces.

use std::sync::Arc;

use serde_json::json;
use wasm_cni_engine::chain::{Attachment, Executor};
use wasm_cni_engine::sandbox::Runtime;
use wasm_cni_kernel::net::{MemoryNet, NsRef};
use wasm_cni_protocol::{config, Command};
use wasm_cni_store::state::MemoryRecords;
use wasm_cni_store::MemoryStore;
use wasm_cni_tests::{plugin, Sandbox};

fn executor(sb: &Sandbox, command: Command, chain: serde_json::Value) -> Executor {
    let conf = sb.conf("1.1.0", "memnet", chain);
    let conf = config::parse(conf.to_string().as_bytes(), command).unwrap();
    let runtime = Runtime::new(&sb.plugin_dir(), None).unwrap();
    let mut net = MemoryNet::new();
    net.add_namespace("/run/netns/pod1");
    Executor::new(
        Arc::new(runtime),
        Arc::new(conf),
        Arc::new(MemoryRecords::default()),
        Arc::new(MemoryStore::default()),
        Box::new(net),
    )
}

fn pod() -> Attachment {
    Attachment {
        container_id: "ctr1".into(),
        ifname: "eth0".into(),
        netns: Some("/run/netns/pod1".into()),
        ..Attachment::default()
    }
}

#[test]
fn bridge_with_static_ipam_against_the_kernel_model() {
    let sb = Sandbox::new("rootless");
    sb.install(&plugin("bridge"), "bridge");
    sb.install(&plugin("static"), "static");
    let chain = json!([{"type":"bridge","bridge":"br9","isGateway":true,
        "ipam":{"type":"static","addresses":[{"address":"10.213.0.5/24","gateway":"10.213.0.1"}]}}]);
    let exec = executor(&sb, Command::Add, chain);
    let result = exec.add(&pod()).unwrap();
    let names: Vec<_> = result.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names[0], "br9");
    assert!(names[1].starts_with("veth"));
    assert_eq!(names[2], "eth0");
    assert_eq!(result.ips[0].address, "10.213.0.5/24");

    let net = exec.net();
    let mut net = net.lock().unwrap();
    let node = net.open(NsRef::Current).unwrap();
    let ctr = net.open(NsRef::Path("/run/netns/pod1".as_ref())).unwrap();
    let br = net.link_by_name(node, "br9").unwrap();
    assert_eq!(br.kind, "bridge");
    let gw: Vec<String> = net
        .addresses(node, "br9")
        .unwrap()
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(gw, ["10.213.0.1/24"]);
    let host_veth = net.link_by_name(node, names[1]).unwrap();
    assert_eq!(host_veth.master, Some(br.index));
    let eth0 = net.link_by_name(ctr, "eth0").unwrap();
    assert!(eth0.up);
    let addrs: Vec<String> = net
        .addresses(ctr, "eth0")
        .unwrap()
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(addrs, ["10.213.0.5/24"]);
    assert_eq!(net.sysctl_get(node, "net.ipv4.ip_forward").unwrap(), "1");
    drop(net);

    exec.check(&pod()).unwrap();
    exec.del(&pod()).unwrap();
    let net = exec.net();
    let mut net = net.lock().unwrap();
    assert!(net.link_by_name(ctr, "eth0").is_err());
    assert!(
        net.link_by_name(node, names[1]).is_err(),
        "the veth peer went too"
    );
    // The reference bridge keeps the bridge and its address.
    assert!(net.link_by_name(node, "br9").is_ok());
}
