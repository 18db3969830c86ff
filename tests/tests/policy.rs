//! The host's policy, probed from inside the sandbox with the scripted
//! `fx-net` plugin in real namespaces: what is refused changes nothing.

use serde_json::{json, Value};
use wasm_cni_tests::{fixture, is_root, Invocation, Pod, Sandbox};

fn setup(tag: &str) -> (Sandbox, Pod) {
    let sb = Sandbox::new(tag);
    sb.install(&fixture("fx-net"), "fx-net");
    (sb, Pod::new(tag))
}

/// Outcomes per op, from the `<index>:<outcome>` interface names.
fn outcomes(out: &wasm_cni_tests::Output) -> Vec<String> {
    out.assert_ok();
    out.json()["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["name"]
                .as_str()
                .unwrap()
                .split_once(':')
                .unwrap()
                .1
                .to_string()
        })
        .collect()
}

fn conf(sb: &Sandbox, extra: Value) -> Value {
    let mut entry = json!({"type": "fx-net"});
    for (k, v) in extra.as_object().unwrap() {
        entry[k] = v.clone();
    }
    sb.conf("1.1.0", "polnet", json!([entry]))
}

#[test]
fn foreign_links_are_refused_and_nothing_changes() {
    if !is_root("foreign_links_are_refused_and_nothing_changes") {
        return;
    }
    let (sb, pod) = setup("pol");
    // Links that belong to someone else: a node veth pair, and a container
    // interface of another attachment.
    pod.node.exec(&[
        "ip", "link", "add", "other0", "type", "veth", "peer", "other1",
    ]);
    pod.ctr
        .exec(&["ip", "link", "add", "eth1", "type", "veth", "peer", "eth2"]);
    let before = (pod.node.snapshot(), pod.ctr.snapshot());
    let ops = json!([
        {"op":"delete","ns":"node","name":"lo"},
        {"op":"mtu","ns":"node","name":"other0","mtu":1400},
        {"op":"delete","ns":"node","name":"other0"},
        {"op":"add-address","ns":"node","link":"other0","cidr":"10.99.0.1/24"},
        {"op":"delete","name":"eth1"},
        {"op":"up","name":"eth2"},
        {"op":"create-veth","name":"eth1x","peer":"vethp","peer-ns":"node"},
        {"op":"add-route","dst":"10.98.0.0/24","dev":"eth1"},
        {"op":"add-route","dst":"10.98.0.0/24"},
        {"op":"set-sysctl","key":"kernel.hostname","value":"pwned"},
        {"op":"set-sysctl","ns":"node","key":"net.ipv4.conf.all.rp_filter","value":"0"},
        {"op":"set-sysctl","ns":"node","key":"net.core.somaxconn","value":"1"},
        {"op":"set-sysctl","key":"net.ipv4.conf.eth1.arp_notify","value":"1"},
        {"op":"macvlan","ns":"node","master":"other0","name":"eth0"},
        {"op":"ensure-bridge","ns":"node","name":"br-evil"},
        {"op":"master","ns":"node","name":"other0","master":"br-evil"}
    ]);
    let out = pod.run(Invocation::new("ADD"), &conf(&sb, json!({"ops": ops})));
    let got = outcomes(&out);
    assert!(
        got.iter().all(|o| o == "refused"),
        "{got:?}\n{}",
        out.stderr
    );
    // Each refusal is logged with the plugin's name.
    assert!(
        out.stderr.contains("plugin fx-net: refused"),
        "{}",
        out.stderr
    );
    assert_eq!(before, (pod.node.snapshot(), pod.ctr.snapshot()));
}

#[test]
fn what_belongs_to_the_attachment_is_allowed() {
    if !is_root("what_belongs_to_the_attachment_is_allowed") {
        return;
    }
    let (sb, pod) = setup("own");
    pod.node
        .exec(&["ip", "link", "add", "br-cfg", "type", "bridge"]);
    let ops = json!([
        {"op":"create-veth","name":"eth0","peer":"vethown01","peer-ns":"node"},
        {"op":"up","name":"eth0"},
        {"op":"add-address","link":"eth0","cidr":"10.97.0.2/24"},
        {"op":"add-route","dst":"10.96.0.0/24","dev":"eth0","gw":"10.97.0.1"},
        {"op":"set-sysctl","key":"net.ipv4.conf.eth0.arp_notify","value":"1"},
        {"op":"set-sysctl","key":"net.core.somaxconn","value":"1000"},
        {"op":"ensure-bridge","ns":"node","name":"br-cfg"},
        {"op":"master","ns":"node","name":"vethown01","master":"br-cfg"},
        {"op":"up","ns":"node","name":"vethown01"},
        {"op":"set-sysctl","ns":"node","key":"net.ipv4.ip_forward","value":"1"},
        {"op":"get-sysctl","ns":"node","key":"net.core.somaxconn"},
        {"op":"list-links","ns":"node"}
    ]);
    let c = conf(
        &sb,
        json!({"bridge": "br-cfg", "ops": ops,
               "delOps": [{"op":"delete","ns":"node","name":"vethown01"}]}),
    );
    let out = pod.run(Invocation::new("ADD"), &c);
    let got = outcomes(&out);
    assert!(got.iter().all(|o| o == "ok"), "{got:?}\n{}", out.stderr);
    let veth = pod.node.link("vethown01").expect("node side exists");
    assert_eq!(veth["master"], "br-cfg");
    assert_eq!(
        pod.ctr.exec(&["sysctl", "-n", "net.core.somaxconn"]).trim(),
        "1000"
    );
    assert_eq!(
        pod.node
            .exec(&["sysctl", "-n", "net.ipv4.ip_forward"])
            .trim(),
        "1"
    );
    // DEL may delete the node link the attachment created (the host
    // recorded it); its veth peer in the container goes with it.
    pod.run(Invocation::new("DEL"), &c).assert_ok();
    assert!(pod.node.link("vethown01").is_none());
    assert!(pod.ctr.link("eth0").is_none());
}

#[test]
fn a_late_del_cannot_delete_links_of_the_current_attachment() {
    if !is_root("a_late_del_cannot_delete_links_of_the_current_attachment") {
        return;
    }
    let (sb, pod) = setup("late");
    let c = conf(
        &sb,
        json!({"ops": [{"op":"create-veth","name":"eth0","peer":"vethlate1","peer-ns":"node"}],
               "delOps": [{"op":"delete","ns":"node","name":"vethlate1"}]}),
    );
    pod.run(Invocation::new("ADD").id("newer"), &c).assert_ok();
    // A DEL for another container id has no record, so the node link is
    // not its to delete.
    let late = pod.run(Invocation::new("DEL").id("older"), &c);
    assert_eq!(late.error_code(), 999, "{late:?}");
    assert!(
        late.error_msg().contains("may not delete"),
        "{}",
        late.error_msg()
    );
    assert!(pod.node.link("vethlate1").is_some());
    pod.run(Invocation::new("DEL").id("newer"), &c).assert_ok();
    assert!(pod.node.link("vethlate1").is_none());
}

#[test]
fn the_node_namespace_cannot_pose_as_the_container() {
    if !is_root("the_node_namespace_cannot_pose_as_the_container") {
        return;
    }
    let (sb, pod) = setup("self");
    let c = conf(&sb, json!({"ops": [{"op":"list-links"}]}));
    let out = Invocation::new("ADD")
        .netns(pod.node.path())
        .run_in(Some(&pod.node.name), &pod.conf(&c));
    assert_eq!(outcomes(&out), ["refused"]);
    // A namespace that does not exist is "not found", which DEL tolerates.
    let out = Invocation::new("ADD")
        .netns("/run/netns/does-not-exist-wcni")
        .run_in(Some(&pod.node.name), &pod.conf(&c));
    assert_eq!(outcomes(&out), ["not-found"]);
}

#[test]
fn ipam_plugins_get_no_network_access() {
    // fx delegates IPAM to fx-net, which then tries the kernel: as a
    // delegate it has no network capability at all.
    let sb = Sandbox::new("ipamnonet");
    sb.install(&fixture("fx-net"), "fx-net");
    sb.install(&fixture("fx"), "fx");
    let c = sb.conf(
        "1.1.0",
        "ipamnet",
        json!([{"type":"fx","tag":"main","callIpam":true,"ipam":{"type":"fx-net"},
                "ops":[{"op":"list-links","ns":"node"},{"op":"delete","ns":"node","name":"lo"}]}]),
    );
    let out = Invocation::new("ADD").run(&c);
    out.assert_ok();
    let names: Vec<_> = out.json()["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["0:refused", "1:refused", "main"]);
}

/// The rules of wasm-cni's tables as nft lists them (its tables stay, empty,
/// once made).
fn wasm_tables(ns: &wasm_cni_tests::Netns) -> String {
    let all = ns.exec(&["nft", "list", "ruleset"]);
    let mut out = String::new();
    let mut inside = false;
    for line in all.lines() {
        if line.starts_with("table ") {
            inside = line.contains("wasm_cni");
        }
        if inside && line.contains("comment \"wasm-cni ") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn filter_rules_for_what_is_not_the_attachments_are_refused() {
    if !is_root("filter_rules_for_what_is_not_the_attachments_are_refused") {
        return;
    }
    let (sb, pod) = setup("polf");
    for p in ["bridge", "static", "portmap"] {
        sb.install(&wasm_cni_tests::plugin(p), p);
    }
    // Attachment A: a pod on bridge cnipf with ipMasq and port 8080.
    let a_ns = wasm_cni_tests::Netns::new("polfa");
    let mut a_conf = sb.conf(
        "1.1.0",
        "polnet",
        json!([{"type":"bridge","bridge":"cnipf","isGateway":true,"ipMasq":true,
                "ipam":{"type":"static","addresses":[{"address":"10.66.0.5/24","gateway":"10.66.0.1"}]}},
               {"type":"portmap","capabilities":{"portMappings":true}}]),
    );
    a_conf["runtimeConfig"] =
        json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]});
    let a = Invocation::new("ADD")
        .id("ctrA")
        .netns(a_ns.path())
        .run_in(Some(&pod.node.name), &pod.conf(&a_conf));
    a.assert_ok();
    let a_veth = a.json()["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let before = wasm_tables(&pod.node);
    assert!(before.contains("dport 8080"), "{before}");

    // Attachment B: the scripted plugin, with an address and port 8080 of
    // its own config, trying A's.
    let rule = |r: Value| json!({"op":"filter-add","rules":[r]});
    let b_conf = |ops: Value, strict: bool| {
        let mut c = conf(
            &sb,
            json!({"ops": ops, "strict": strict, "capabilities": {"portMappings": true},
                   "ipam":{"type":"static","addresses":[{"address":"10.66.0.9/24"}]}}),
        );
        c["runtimeConfig"] =
            json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]});
        pod.conf(&c)
    };
    let ops = json!([
        {"op":"ipam-add"},
        rule(json!({"masquerade":{"source":"10.66.0.5","except":[]}})),
        rule(json!({"port-map":{"host-port":9090,"address":"10.66.0.9","port":80}})),
        rule(json!({"port-map":{"host-port":8080,"address":"10.66.0.9","port":80}})),
        rule(json!({"port-map":{"host-port":8080,"address":"10.66.0.5","port":80}})),
        rule(json!({"macspoof":{"link":a_veth,"mac":"02:00:00:00:00:01"}})),
        rule(json!({"isolate":"cnipf"})),
        rule(json!({"forward":"10.66.0.5"})),
        // Removing A's rule by its words: allowed, and it removes nothing
        // (a removal only ever matches the attachment's own rules).
        {"op":"filter-remove","rules":[{"masquerade":{"source":"10.66.0.5","except":["10.66.0.0/24"]}}]},
        {"op":"filter-check","rules":[{"forward":"10.66.0.9"}]},
        rule(json!({"forward":"10.66.0.9"})),
    ]);
    let out = pod.run(
        Invocation::new("ADD").id("ctrB"),
        &b_conf(ops.clone(), false),
    );
    assert_eq!(
        outcomes(&out),
        [
            "ok",
            "refused",
            "refused",
            "exists",
            "refused",
            "refused",
            "refused",
            "refused",
            "ok",
            "not-found",
            "ok"
        ],
        "{}",
        out.stderr
    );
    // A's rules are untouched; B's own forward rules were added.
    let during = wasm_tables(&pod.node);
    for line in before.lines().filter(|l| l.contains("comment")) {
        assert!(
            during.contains(line),
            "A's rule {line:?} changed:\n{during}"
        );
    }
    assert!(during.contains("ip saddr 10.66.0.9"), "{during}");
    pod.run(Invocation::new("DEL").id("ctrB"), &b_conf(ops, false))
        .assert_ok();
    assert_eq!(wasm_tables(&pod.node), before);

    // The taken port names who holds it.
    let taken = pod.run(
        Invocation::new("ADD").id("ctrB"),
        &b_conf(
            json!([{"op":"ipam-add"},
                   rule(json!({"port-map":{"host-port":8080,"address":"10.66.0.9","port":80}}))]),
            true,
        ),
    );
    assert_eq!(taken.error_code(), 999);
    let msg = taken.error_msg();
    assert!(
        msg.contains("tcp port 8080 (IPv4) is already mapped to container ctrA (eth0) of network"),
        "{msg}"
    );
    assert!(msg.contains("container ctrB (eth0)"), "{msg}");
    // A failed ADD takes back the rules it added.
    let failed = pod.run(
        Invocation::new("ADD").id("ctrB"),
        &b_conf(
            json!([{"op":"ipam-add"}, rule(json!({"forward":"10.66.0.9"}))]),
            false,
        )
        .as_object()
        .map(|o| {
            let mut o = o.clone();
            o["chain"][0]["end"] = json!("fail");
            Value::Object(o)
        })
        .unwrap(),
    );
    assert_eq!(failed.error_code(), 999);
    assert_eq!(wasm_tables(&pod.node), before);
    Invocation::new("DEL")
        .id("ctrA")
        .netns(a_ns.path())
        .run_in(Some(&pod.node.name), &pod.conf(&a_conf))
        .assert_ok();
    assert_eq!(wasm_tables(&pod.node), "");
}
