//! The host's policy, probed from inside the sandbox in real namespaces:
//! what a plugin may touch is the attachment's own, and what is refused
//! changes nothing.
//!
//! What a plugin controls, and what it must not gain: the links, sysctls,
//! namespaces and state scopes it names (nothing but the attachment's); a
//! link's name (a link is known by name, ifindex and kind); the verb it
//! acts in (links are created during ADD only, DEL and GC leave none); the
//! uplink as a macvlan master; a tap's owner; the result it writes (and so
//! the runtime's prevResult at DEL and the record GC reads: no node-side
//! grant from it, only IPAM answers grant node addresses); which address a
//! hairpin rule names (the host's own `route_localnet` only on the
//! attachment's links, put back when the last attachment relying on it
//! goes); filter rules for what is not the attachment's; and network access
//! from an IPAM plugin (none).

mod wasi_probe;
use wasi_probe::WasiProbe;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::{
    add, del, entry, everything, files, foreign_links, fx_net, hostile, hostile_with, identity,
    refused, sandbox_with, world, Attack, SLACK,
};
use wasm_cni_tests::{fixture, is_root, sh, Invocation, Netns, Pod, Sandbox};

fn sysctl(ns: &Netns, key: &str) -> String {
    ns.exec(&["sysctl", "-n", key]).trim().to_string()
}

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
fn links_that_are_not_the_attachments_cannot_be_deleted() {
    let Some((sb, pod)) = hostile("hdel") else {
        return;
    };
    foreign_links(&pod);
    // Another attachment, made the ordinary way: a veth `eth3` in the
    // container with `vvictim0` in the node, both recorded as its own.
    sb.install(&fixture("fx-net"), "fx-net");
    let victim = sb.conf(
        "1.1.0",
        "hdel",
        json!([{"type": "fx-net", "strict": true, "ops": [
            {"op": "create-veth", "name": "eth3", "peer": "vvictim0", "peer-ns": "node"}
        ]}]),
    );
    pod.run(Invocation::new("ADD").id("victim").ifname("eth3"), &victim)
        .assert_ok();
    for (ns, name, why) in [
        ("node", "lo", "may not delete \"lo\" in the node namespace"),
        (
            "node",
            "other0",
            "may not delete \"other0\" in the node namespace",
        ),
        (
            "node",
            "vvictim0",
            "may not delete \"vvictim0\" in the node namespace",
        ),
        (
            "container",
            "eth3",
            "may not delete \"eth3\" in the container namespace",
        ),
        (
            "container",
            "eth1",
            "may not delete \"eth1\" in the container namespace",
        ),
        (
            "container",
            "lo",
            "may not delete \"lo\" in the container namespace",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hdel",
            json!([entry(
                "fx-hostile",
                "delete",
                json!({"ns": ns, "link": name})
            )]),
        );
        let out = Attack::new(999, &["delete: refused", why]).run(&sb, &pod, &conf, add("thief"));
        // The host says so itself, whatever the plugin reports.
        assert!(
            out.stderr.contains("plugin fx-hostile: refused"),
            "{}",
            out.stderr
        );
    }
    pod.run(Invocation::new("DEL").id("victim").ifname("eth3"), &victim)
        .assert_ok();
}

#[test]
fn sysctls_outside_net_or_of_other_interfaces_are_refused() {
    let Some((sb, pod)) = hostile("hsys") else {
        return;
    };
    foreign_links(&pod);
    // Were the policy to fail, writing the current hostname back would still
    // change nothing outside the test.
    let hostname = sh(&["sysctl", "-n", "kernel.hostname"]).trim().to_string();
    for (ns, key, value, why) in [
        (
            "container",
            "kernel.hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "node",
            "kernel.hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "container",
            "net.ipv4.conf.eth0/../../../kernel/hostname",
            hostname.as_str(),
            "is outside net.",
        ),
        (
            "node",
            "net.ipv4.conf.other0.forwarding",
            "1",
            "does not belong to this attachment",
        ),
        (
            "node",
            "net.ipv4.conf.all.rp_filter",
            "0",
            "would change every interface of the node",
        ),
        ("node", "net.core.somaxconn", "7", "is a node-wide setting"),
        (
            "container",
            "net.ipv4.conf.eth1.arp_notify",
            "1",
            "does not belong to this attachment",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "hsys",
            json!([entry(
                "fx-hostile",
                "sysctl",
                json!({"ns": ns, "key": key, "value": value})
            )]),
        );
        Attack::new(999, &["sysctl: refused", why]).run(&sb, &pod, &conf, add("c1"));
    }
}

#[test]
fn no_namespace_but_the_attachments_is_reachable() {
    let Some((sb, pod)) = hostile("hns") else {
        return;
    };
    // The runtime (or a hostile config) names the node's own namespace as
    // the container's: the host refuses to hand it out as one.
    let conf = sb.conf(
        "1.1.0",
        "hns",
        json!([entry("fx-hostile", "container-netns", json!({}))]),
    );
    let inv = add("c1").netns(pod.node.path());
    let attack = Attack::new(
        999,
        &["container-netns: refused", "is the node's own namespace"],
    );
    pod.run(Invocation::new("STATUS"), &conf).assert_ok();
    let before = world(&sb, &pod);
    // Through the node's own daemon in daemon mode, as a runtime's call.
    let out = inv.run_in(Some(&pod.node.name), &pod.conf(&conf));
    assert_eq!(out.error_code(), attack.code, "{out:?}");
    for needle in attack.cause {
        assert!(out.error_msg().contains(needle), "{}", out.error_msg());
    }
    assert_eq!(before, world(&sb, &pod));
    // A plugin names a namespace by handle only, and handles come from
    // `container-netns` and `node-netns`; a forged one is below.
    let probe = WasiProbe::new(&sb);
    let conf = probe.conf(&sb, "hns", 2, false);
    Attack {
        plugin: "wasi-probe",
        ..Attack::new(999, &["trapped", "unknown handle index 5"])
    }
    .run(&sb, &pod, &conf, add("c1"));
}

#[test]
fn another_networks_or_plugins_state_is_out_of_reach() {
    let Some((sb, pod)) = hostile("hstate") else {
        return;
    };
    sb.install(&fixture("fx-hostile"), "fx-victim");
    let keys = json!(["10.5.0.2", "10.5.0.3"]);
    // The same keys held in two other scopes: this plugin on another
    // network, and another plugin on this network.
    for (network, plugin) in [("victimnet", "fx-hostile"), ("hstate", "fx-victim")] {
        let conf = sb.conf(
            "1.1.0",
            network,
            json!([entry(plugin, "none", json!({"keys": keys}))]),
        );
        pod.run(add("victim"), &conf).assert_ok();
    }
    assert_eq!(
        files(&sb.state_dir())
            .keys()
            .filter(|p| p.starts_with("store"))
            .count(),
        2
    );
    // The thief lists its scope (empty), tries to release the keys (GC
    // only), reserves them in its own scope, then traps: nothing commits.
    let conf = sb.conf(
        "1.1.0",
        "hstate",
        json!([entry("fx-hostile", "steal-state", json!({"keys": keys}))]),
    );
    Attack::new(999, &["trapped", "unreachable"]).run(&sb, &pod, &conf, add("thief"));
}

#[test]
fn a_link_is_known_by_more_than_its_name() {
    let Some((sb, pod)) = hostile_with("hid", &["fx-net"]) else {
        return;
    };
    let node_veth = |x: &str, y: &str| json!({"op": "create-veth", "ns": "node", "name": x, "peer": y, "peer-ns": "node"});
    // The attack as reported: veth vx0<->vy0 in the node, then vy0 deleted,
    // which takes vx0 along. The record then lists neither.
    let a = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(
            json!([node_veth("vx0", "vy0"), {"op": "delete", "ns": "node", "name": "vy0"}]),
            json!({})
        )]),
    );
    pod.run(add("a1"), &a).assert_ok();
    let rec = files(&sb.state_dir());
    let rec = String::from_utf8_lossy(&rec[std::path::Path::new("networks/hid/a1:eth0.json")]);
    assert!(!rec.contains("vx0") && !rec.contains("vy0"), "{rec}");
    // Another network then makes its own vx0, a bridge.
    let b = sb.conf(
        "1.1.0",
        "hid-other",
        json!([fx_net(
            json!([{"op": "ensure-bridge", "ns": "node", "name": "vx0"},
                   {"op": "up", "ns": "node", "name": "vx0"}]),
            json!({"bridge": "vx0"})
        )]),
    );
    pod.run(add("b1"), &b).assert_ok();
    let theirs = identity(&pod, "vx0");
    // The first attachment's DEL goes for vx0: refused, it is not its own
    // (and DEL changes nothing in the node but deleting what it created).
    let mut greedy = a.clone();
    greedy["chain"][0]["delOps"] = json!([{"op": "delete", "ns": "node", "name": "vx0"}]);
    let out = pod.run(Invocation::new("DEL").id("a1"), &greedy);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert!(
        out.error_msg().contains("not created for this attachment"),
        "{out:?}"
    );
    assert_eq!(identity(&pod, "vx0"), theirs);
    pod.run(Invocation::new("DEL").id("a1"), &a).assert_ok();
    assert_eq!(identity(&pod, "vx0"), theirs);

    // With the name still recorded: a2 keeps vx1<->vy1; then both go and
    // someone else's bridge takes the name vx1.
    let keep = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(json!([node_veth("vx1", "vy1")]), json!({}))]),
    );
    let replace = |dev: &str| {
        pod.node.exec(&["ip", "link", "del", dev]);
        pod.node.exec(&["ip", "link", "add", dev, "type", "bridge"]);
        identity(&pod, dev)
    };
    pod.run(add("a2"), &keep).assert_ok();
    let theirs = replace("vx1");
    let mut greedy = keep.clone();
    greedy["chain"][0]["delOps"] = json!([{"op": "delete", "ns": "node", "name": "vx1"}]);
    let out = pod.run(Invocation::new("DEL").id("a2"), &greedy);
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert!(
        out.error_msg()
            .contains("is no longer the one this attachment created"),
        "{out:?}"
    );
    assert_eq!(identity(&pod, "vx1"), theirs);
    // DEL itself removes what the attachment created, and only that.
    pod.run(Invocation::new("DEL").id("a2"), &keep).assert_ok();
    assert_eq!(identity(&pod, "vx1"), theirs);

    // GC of a stale attachment whose link was replaced: the same.
    let stale = sb.conf(
        "1.1.0",
        "hid",
        json!([fx_net(json!([node_veth("vx2", "vy2")]), json!({}))]),
    );
    pod.run(add("a3"), &stale).assert_ok();
    let theirs = replace("vx2");
    let mut gc = stale.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    pod.run(Invocation::new("GC"), &gc).assert_ok();
    assert_eq!(identity(&pod, "vx2"), theirs);
    assert!(!sb.state_dir().join("networks/hid/a3:eth0.json").exists());
    pod.run(Invocation::new("DEL").id("b1"), &b).assert_ok();
}

#[test]
fn only_add_creates_links_and_del_and_gc_leave_none() {
    let Some((sb, pod)) = hostile_with("hverb", &["fx-net"]) else {
        return;
    };
    let create = json!([{"op": "create-veth", "ns": "node", "name": "vz0", "peer": "vz1", "peer-ns": "node"}]);
    let base = sb.conf("1.1.0", "hverb", json!([fx_net(json!([]), json!({}))]));
    pod.run(add("c1"), &base).assert_ok();
    for (verb, key) in [
        ("CHECK", "checkOps"),
        ("DEL", "delOps"),
        ("STATUS", "statusOps"),
        ("GC", "gcOps"),
    ] {
        let mut conf = base.clone();
        conf["chain"][0][key] = create.clone();
        conf["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
        let before = world(&sb, &pod);
        let out = pod.run(Invocation::new(verb).id("c1"), &conf);
        // STATUS answers any failure as 50 (its cause's code in details).
        let code = if verb == "STATUS" { 50 } else { 999 };
        assert_eq!(out.error_code(), code, "{verb}: {out:?}");
        assert!(
            out.error_msg()
                .contains("links are created during ADD only"),
            "{verb}: {}",
            out.error_msg()
        );
        assert!(pod.node.link("vz0").is_none(), "{verb} left a link");
        assert_eq!(before, world(&sb, &pod), "{verb}");
    }
    pod.run(Invocation::new("DEL").id("c1"), &base).assert_ok();

    // What ADD created goes with DEL, whether the plugin's DEL knows of it
    // or not: a pod veth and a node-only pair.
    let before = world(&sb, &pod);
    let littering = sb.conf(
        "1.1.0",
        "hverb",
        json!([fx_net(
            json!([{"op": "create-veth", "name": "eth0", "peer": "vw0", "peer-ns": "node"},
                   {"op": "create-veth", "ns": "node", "name": "vw1", "peer": "vw2", "peer-ns": "node"},
                   {"op": "up", "ns": "node", "name": "vw1"}]),
            json!({})
        )]),
    );
    pod.run(add("c2"), &littering).assert_ok();
    assert!(pod.node.link("vw1").is_some());
    pod.run(Invocation::new("DEL").id("c2"), &littering)
        .assert_ok();
    assert_eq!(before, world(&sb, &pod));
    // And with GC, for an attachment the runtime forgot.
    pod.run(add("c3"), &littering).assert_ok();
    let mut gc = littering.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    pod.run(Invocation::new("GC"), &gc).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

#[test]
fn the_uplink_cannot_be_taken_over() {
    let Some((sb, pod)) = hostile_with("hup", &["fx-net"]) else {
        return;
    };
    // The node's uplink: the link that carries its address and default route.
    sb.install(&fixture("fx-net"), "macvlan");
    pod.node.exec(&[
        "ip", "link", "add", "uplink0", "type", "veth", "peer", "uplink1",
    ]);
    for dev in ["uplink0", "uplink1"] {
        pod.node.exec(&["ip", "link", "set", dev, "up"]);
    }
    pod.node
        .exec(&["ip", "addr", "add", "192.0.2.10/24", "dev", "uplink0"]);
    pod.node.exec(&[
        "ip",
        "route",
        "add",
        "default",
        "via",
        "192.0.2.1",
        "dev",
        "uplink0",
    ]);
    let macvlan = |plugin: &str, mode: &str, target: &str, name: &str| {
        let mut e = fx_net(
            json!([{"op": "macvlan", "ns": "node", "master": "uplink0", "mode": mode,
                    "target": target, "name": name}]),
            json!({}),
        );
        e["type"] = json!(plugin);
        sb.conf("1.1.0", "hup", json!([e]))
    };
    // A plugin whose type does not default to the uplink may not use it.
    refused("fx-net", &["does not belong to this attachment"]).run(
        &sb,
        &pod,
        &macvlan("fx-net", "bridge", "container", "eth0"),
        add("c1"),
    );
    // A macvlan-type plugin may, but not in passthru mode unless its config
    // asks for it, and not into the node namespace.
    refused("macvlan", &["passthru mode takes the master over"]).run(
        &sb,
        &pod,
        &macvlan("macvlan", "passthru", "container", "eth0"),
        add("c1"),
    );
    refused("macvlan", &["goes into the container namespace only"]).run(
        &sb,
        &pod,
        &macvlan("macvlan", "bridge", "node", "mvx0"),
        add("c1"),
    );
    // The ordinary case still works, and leaves nothing after DEL.
    let before = world(&sb, &pod);
    let ok = macvlan("macvlan", "bridge", "container", "eth0");
    pod.run(add("c1"), &ok).assert_ok();
    assert!(pod.ctr.link("eth0").is_some());
    pod.run(Invocation::new("DEL").id("c1"), &ok).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

#[test]
fn taps_belong_in_the_container_with_the_owner_the_config_names() {
    let Some((sb, pod)) = hostile_with("htap", &["fx-net"]) else {
        return;
    };
    let tap = |ns: &str, name: &str, owner: Value, group: Value| {
        let mut op = json!({"op": "tap", "ns": ns, "name": name});
        if !owner.is_null() {
            op["owner"] = owner;
        }
        if !group.is_null() {
            op["group"] = group;
        }
        sb.conf(
            "1.1.0",
            "htap",
            json!([fx_net(json!([op]), json!({"owner": 1000}))]),
        )
    };
    for (conf, why) in [
        (
            tap("node", "tapx0", Value::Null, Value::Null),
            "taps are made in the container namespace only",
        ),
        (
            tap("container", "eth0", json!(0), Value::Null),
            "owner 0 is not the one the config names",
        ),
        (
            tap("container", "eth0", Value::Null, json!(5)),
            "group 5 is not the one the config names",
        ),
    ] {
        refused("fx-net", &[why]).run(&sb, &pod, &conf, add("c1"));
    }
    let before = world(&sb, &pod);
    let ok = tap("container", "eth0", json!(1000), Value::Null);
    pod.run(add("c1"), &ok).assert_ok();
    assert_eq!(
        pod.ctr.link("eth0").unwrap()["linkinfo"]["info_kind"],
        "tun"
    );
    pod.run(Invocation::new("DEL").id("c1"), &ok).assert_ok();
    assert_eq!(before, world(&sb, &pod));
}

#[test]
fn a_result_the_plugin_wrote_grants_nothing_on_the_node() {
    let Some((sb, pod)) = sandbox_with("tb1", &["fx-net"], &[]) else {
        return;
    };
    // The plugin's result claims the whole IPv4 space and the node's LAN
    // gateway; its DEL, CHECK and GC then go for the node's routing.
    let lie = json!({"ips": [{"address": "0.0.0.0/1"}, {"address": "128.0.0.0/1"},
                              {"address": "192.168.77.1/24"}]});
    let grab = json!([
        {"op": "add-route", "ns": "node", "dst": "0.0.0.0/1", "dev": "tbbr1"},
        {"op": "add-route", "ns": "node", "dst": "128.0.0.0/1", "dev": "tbbr1"},
        {"op": "add-address", "ns": "node", "link": "tbbr1", "cidr": "192.168.77.1/24"}
    ]);
    let entry = json!({"type": "fx-net", "bridge": "tbbr1", "strict": true,
        "ops": [{"op": "ensure-bridge", "ns": "node", "name": "tbbr1"},
                {"op": "up", "ns": "node", "name": "tbbr1"}],
        "result": lie, "delOps": grab, "checkOps": grab, "gcOps": grab,
        "wasm": {"deadlineMs": 2000}});
    let conf = sb.conf("1.1.0", "tbnet1", json!([entry]));
    let out = pod.run(add("c1"), &conf);
    out.assert_ok();
    // The lie is in the record the host keeps (and in what the runtime
    // would pass back as prevResult): it is what DEL and GC read.
    assert_eq!(out.json()["ips"][0]["address"], "0.0.0.0/1");
    let before = everything(&sb, &pod, &[]);
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = out.json();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    for (verb, c, why) in [
        ("DEL", &conf, "only ADD changes the node"),
        ("DEL", &with_prev, "only ADD changes the node"),
        ("CHECK", &with_prev, "it only reads"),
        ("GC", &gc, "only ADD changes the node"),
    ] {
        let started = Instant::now();
        let out = pod.run(Invocation::new(verb).id("c1"), c);
        assert_eq!(out.error_code(), 999, "{verb}: {out:?}");
        assert!(out.error_msg().contains(why), "{verb}: {}", out.error_msg());
        assert!(started.elapsed() < Duration::from_millis(2000) + SLACK);
        assert_eq!(
            before,
            everything(&sb, &pod, &[]),
            "{verb} changed the node"
        );
    }
    // The node routes nothing new through the bridge.
    let routes = pod.node.exec(&["ip", "route", "show", "table", "all"]);
    assert!(
        !routes.contains("0.0.0.0/1") && !routes.contains("128.0.0.0/1"),
        "{routes}"
    );
    // A plain DEL still cleans up.
    let mut plain = conf.clone();
    plain["chain"][0]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.ends_with("Ops") || k == "ops");
    pod.run(del("c1"), &plain).assert_ok();
}

#[test]
fn only_ipam_answers_grant_node_addresses_during_add() {
    let Some((sb, pod)) = sandbox_with("tb1b", &["fx-net"], &["host-local"]) else {
        return;
    };
    // The host saw host-local hand out 10.71.0.2/24: a gateway inside it on
    // the config's bridge is the attachment's; a /1 is not, whatever the
    // plugin's result will say.
    let entry = json!({"type": "fx-net", "bridge": "tbbr1b",
        "ipam": {"type": "host-local", "subnet": "10.71.0.0/24",
                 "dataDir": sb.dir.join("ipam").to_string_lossy()},
        "ops": [{"op": "ensure-bridge", "ns": "node", "name": "tbbr1b"},
                {"op": "ipam-add"},
                {"op": "add-address", "ns": "node", "link": "tbbr1b", "cidr": "10.71.0.1/24"},
                {"op": "add-route", "ns": "node", "dst": "0.0.0.0/1", "dev": "tbbr1b"}],
        "result": {"ips": [{"address": "0.0.0.0/1"}]}});
    let conf = sb.conf("1.1.0", "tbnet1b", json!([entry]));
    let out = pod.run(add("c1"), &conf);
    let names: Vec<String> = out.json()["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["0:ok", "1:ok", "2:ok", "3:refused"],
        "{}",
        out.stderr
    );
    pod.run(del("c1"), &conf).assert_ok();
}

#[test]
fn route_localnet_only_on_the_attachments_links_and_put_back() {
    let Some((sb, pod)) = sandbox_with("tb2", &["fx-net"], &["host-local", "bridge", "portmap"])
    else {
        return;
    };
    // The node's uplink, with the default route: where an address nobody
    // routes goes.
    pod.node
        .exec(&["ip", "link", "add", "up2", "type", "veth", "peer", "up2p"]);
    pod.node
        .exec(&["ip", "addr", "add", "192.168.72.1/24", "dev", "up2"]);
    pod.node.exec(&["ip", "link", "set", "up2", "up"]);
    pod.node.exec(&["ip", "link", "set", "up2p", "up"]);
    pod.node
        .exec(&["ip", "route", "add", "default", "via", "192.168.72.2"]);
    let uplink_key = "net.ipv4.conf.up2.route_localnet";
    assert_eq!(sysctl(&pod.node, uplink_key), "0");

    // A plugin whose hairpin rule names its own address, which the node
    // routes through the uplink.
    let ipam = |subnet: &str, dir: &str| {
        json!({"type": "host-local", "subnet": subnet,
               "dataDir": sb.dir.join(dir).to_string_lossy()})
    };
    let sneaky = sb.conf(
        "1.1.0",
        "tbnet2",
        json!([{"type": "fx-net", "strict": true, "ipam": ipam("10.72.0.0/24", "ipam-a"),
                "ops": [{"op": "ipam-add"},
                        {"op": "filter-add", "rules": [{"hairpin": "10.72.0.2"}]}]}]),
    );
    let before = everything(&sb, &pod, &[uplink_key]);
    pod.run(add("s1"), &sneaky).assert_ok();
    assert_eq!(sysctl(&pod.node, uplink_key), "0", "the uplink was changed");
    pod.run(del("s1"), &sneaky).assert_ok();
    assert_eq!(before, everything(&sb, &pod, &[uplink_key]));

    // The real thing: bridge + portmap. route_localnet goes on the bridge
    // the config names, stays while any pod relies on it, and goes back
    // with the last.
    let pod2 = Netns::new("tb2c");
    let bridge_key = "net.ipv4.conf.tbbr2.route_localnet";
    let conf = |port: u16| {
        let mut c = sb.conf(
            "1.0.0",
            "tbpm2",
            json!([{"type": "bridge", "bridge": "tbbr2", "isGateway": true,
                    "ipam": ipam("10.73.0.0/24", "ipam-b")},
                   {"type": "portmap", "capabilities": {"portMappings": true}}]),
        );
        c["capabilities"] = json!({"portMappings": true});
        c["runtimeConfig"] =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]});
        c
    };
    let on_pod2 = |inv: Invocation<'_>, c: &Value| {
        inv.netns(pod2.path())
            .run_in(Some(&pod.node.name), &pod.conf(c))
    };
    pod.run(add("p1"), &conf(18081)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "1");
    on_pod2(add("p2"), &conf(18082)).assert_ok();
    pod.run(del("p1"), &conf(18081)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "1", "p2 still relies on it");
    on_pod2(del("p2"), &conf(18082)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "0", "not put back");
    assert_eq!(sysctl(&pod.node, uplink_key), "0");
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
