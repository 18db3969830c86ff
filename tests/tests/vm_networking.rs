//! VM networking with tap and macvtap instead of veth, through the real
//! binary and components in real namespaces: the `tap` plugin (a persistent
//! tap device as the pod interface, optionally a port of a bridge inside the
//! pod) and the `macvtap` plugin (a macvtap of a node uplink, created
//! straight into the pod). Everything lives in throwaway namespaces that are
//! deleted on drop, also when a test fails.

use serde_json::{json, Value};
use wasm_cni_tests::{is_root, plugin, Invocation, Netns, Pod, Sandbox};

fn sandbox(tag: &str) -> Sandbox {
    let sb = Sandbox::new(tag);
    for p in ["tap", "macvtap", "static"] {
        sb.install(&plugin(p), p);
    }
    sb
}

fn static_ipam(address: &str, gateway: &str) -> Value {
    json!({"type":"static","addresses":[{"address":address,"gateway":gateway}],
           "routes":[{"dst":"0.0.0.0/0"}]})
}

/// A `/sys/class/net/<dev>/<attr>` value inside the namespace.
fn sys(ns: &Netns, dev: &str, attr: &str) -> String {
    ns.exec(&["cat", &format!("/sys/class/net/{dev}/{attr}")])
        .trim()
        .to_string()
}

/// Link names, addresses and routes: what a plugin may leave behind, without
/// the bridge timers `ip -d` prints (they tick).
fn layout(ns: &Netns) -> String {
    let mut out = ns.exec(&["ip", "-o", "link", "show"]);
    out += &ns.exec(&["ip", "-o", "addr", "show"]);
    out += &ns.exec(&["ip", "route", "show", "table", "all"]);
    out += &ns.exec(&["ip", "-6", "route", "show", "table", "all"]);
    out
}

fn flags(link: &Value) -> Vec<String> {
    link["flags"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn addresses(ns: &Netns, dev: &str) -> Vec<String> {
    let v: Value =
        serde_json::from_str(&ns.exec(&["ip", "-j", "addr", "show", "dev", dev])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// Waits for the kernel to finish tearing down a deleted namespace's links.
fn gone(ns: &Netns, dev: &str) -> bool {
    for _ in 0..100 {
        if ns.link(dev).is_none() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn tap_on_a_pod_bridge_with_static_ipam() {
    if !is_root("tap_on_a_pod_bridge_with_static_ipam") {
        return;
    }
    let sb = sandbox("tap");
    let pod = Pod::new("tap");
    // A bridge inside the pod (the VM side of a pod network), with its MAC
    // and MTU set so that its ports do not change them.
    pod.ctr.exec(&[
        "ip",
        "link",
        "add",
        "vmbr0",
        "address",
        "02:00:00:00:0b:01",
        "mtu",
        "1500",
        "type",
        "bridge",
    ]);
    pod.ctr.exec(&["ip", "link", "set", "vmbr0", "up"]);
    let conf = sb.conf(
        "1.0.0",
        "tapnet",
        json!([{"type":"tap","mtu":1400,"mac":"02:00:00:00:0a:05","multiQueue":true,
                "owner":1000,"group":1001,"bridge":"vmbr0",
                "ipam":static_ipam("10.212.0.5/24","10.212.0.1")}]),
    );
    let node_before = pod.node.snapshot();
    let ctr_before = layout(&pod.ctr);

    let out = pod.run(Invocation::new("ADD"), &conf);
    out.assert_ok();
    let r = out.json();
    assert_eq!(
        r["interfaces"],
        json!([{"name":"eth0","mac":"02:00:00:00:0a:05","sandbox":pod.ctr.path()}])
    );
    assert_eq!(
        r["ips"],
        json!([{"interface":0,"address":"10.212.0.5/24","gateway":"10.212.0.1"}])
    );

    // A persistent multi-queue tap named eth0, with its MTU, MAC, owner and
    // group, a port of the pod's bridge, up.
    let l = pod.ctr.link("eth0").expect("eth0 in the pod");
    assert_eq!(l["linkinfo"]["info_kind"], "tun");
    let data = &l["linkinfo"]["info_data"];
    assert_eq!(
        (&data["type"], &data["persist"], &data["multi_queue"]),
        (&json!("tap"), &json!(true), &json!(true))
    );
    assert_eq!(
        (&l["mtu"], &l["address"]),
        (&json!(1400), &json!("02:00:00:00:0a:05"))
    );
    assert_eq!(l["master"], "vmbr0");
    assert!(flags(&l).contains(&"UP".to_string()), "{l}");
    assert_eq!(sys(&pod.ctr, "eth0", "owner"), "1000");
    assert_eq!(sys(&pod.ctr, "eth0", "group"), "1001");
    let tun_flags = u32::from_str_radix(
        sys(&pod.ctr, "eth0", "tun_flags").trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_ne!(tun_flags & 0x0100, 0, "IFF_MULTI_QUEUE in {tun_flags:#x}");

    // Static IPAM: the address, the default route, arp_notify.
    assert_eq!(addresses(&pod.ctr, "eth0"), ["10.212.0.5/24"]);
    let routes = pod.ctr.exec(&["ip", "route", "show"]);
    assert!(
        routes.contains("default via 10.212.0.1 dev eth0"),
        "{routes}"
    );
    assert_eq!(
        pod.ctr
            .exec(&["sysctl", "-n", "net.ipv4.conf.eth0.arp_notify"])
            .trim(),
        "1"
    );
    assert_eq!(pod.node.snapshot(), node_before, "the node is untouched");

    pod.run(Invocation::new("CHECK"), &conf).assert_ok();

    pod.run(Invocation::new("DEL"), &conf).assert_ok();
    assert!(pod.ctr.link("eth0").is_none(), "the tap is gone");
    assert!(pod.ctr.link("vmbr0").is_some(), "the pod's bridge stays");
    assert_eq!(layout(&pod.ctr), ctr_before);
    pod.run(Invocation::new("DEL"), &conf).assert_ok();
    assert_eq!(pod.node.snapshot(), node_before);
}

#[test]
fn tap_l2_check_and_del_after_the_namespace_is_gone() {
    if !is_root("tap_l2_check_and_del_after_the_namespace_is_gone") {
        return;
    }
    let sb = sandbox("tapl2");
    let pod = Pod::new("tl2");
    let conf = sb.conf("1.1.0", "tapl2", json!([{"type":"tap"}]));
    let before = (pod.node.snapshot(), pod.ctr.snapshot());

    // What a component cannot do is refused up front, changing nothing.
    let selinux = sb.conf(
        "1.1.0",
        "tapl2",
        json!([{"type":"tap","selinuxContext":"system_u:system_r:svirt_t:s0"}]),
    );
    let out = pod.run(Invocation::new("ADD"), &selinux);
    assert_eq!(out.error_code(), 2, "{out:?}");
    assert!(
        out.error_msg().contains("selinuxContext"),
        "{}",
        out.error_msg()
    );
    let bad_mtu = sb.conf("1.1.0", "tapl2", json!([{"type":"tap","mtu":70000}]));
    assert_eq!(pod.run(Invocation::new("ADD"), &bad_mtu).error_code(), 7);
    assert_eq!((pod.node.snapshot(), pod.ctr.snapshot()), before);

    let out = pod.run(Invocation::new("ADD"), &conf);
    out.assert_ok();
    assert_eq!(out.json()["interfaces"][0]["sandbox"], pod.ctr.path());
    assert!(out.json()["ips"].as_array().is_none_or(Vec::is_empty));
    let l = pod.ctr.link("eth0").expect("eth0 in the pod");
    assert_eq!(l["linkinfo"]["info_kind"], "tun");
    assert_eq!(l["linkinfo"]["info_data"]["multi_queue"], false);
    assert_eq!(l["mtu"], 1500);
    assert!(flags(&l).contains(&"UP".to_string()), "{l}");
    assert_eq!(sys(&pod.ctr, "eth0", "owner"), "-1", "no owner");
    pod.run(Invocation::new("CHECK"), &conf).assert_ok();

    // A second ADD of the same interface fails and leaves it alone.
    let again = pod.run(Invocation::new("ADD").id("ctr2"), &conf);
    assert_ne!(again.code, 0, "{again:?}");
    assert!(pod.ctr.link("eth0").is_some());

    // The runtime deleted the namespace (and the tap with it) first.
    let path = pod.ctr.path();
    wasm_cni_tests::sh(&["ip", "netns", "del", &pod.ctr.name]);
    for id in ["ctr1", "ctr1", "ctr2"] {
        Invocation::new("DEL")
            .id(id)
            .netns(path.clone())
            .run_in(Some(&pod.node.name), &conf)
            .assert_ok();
    }
    assert_eq!(pod.node.snapshot(), before.0);
}

/// The macvtap parent: a veth standing in for the node's NIC.
fn uplink(pod: &Pod) {
    pod.node.exec(&[
        "ip", "link", "add", "uplink0", "type", "veth", "peer", "uplink1",
    ]);
    pod.node.exec(&["ip", "link", "set", "uplink0", "up"]);
    pod.node.exec(&["ip", "link", "set", "uplink1", "up"]);
}

#[test]
fn macvtap_on_a_named_master_with_static_ipam() {
    if !is_root("macvtap_on_a_named_master_with_static_ipam") {
        return;
    }
    let sb = sandbox("mvt");
    let pod = Pod::new("mvt");
    uplink(&pod);
    let conf = sb.conf(
        "1.0.0",
        "mvtnet",
        json!([{"type":"macvtap","master":"uplink0","mode":"vepa","mtu":1400,
                "mac":"02:00:00:00:0c:05","ipam":static_ipam("10.213.0.5/24","10.213.0.1")}]),
    );
    let node_before = pod.node.snapshot();
    let ctr_before = pod.ctr.snapshot();

    let out = pod.run(Invocation::new("ADD"), &conf);
    out.assert_ok();
    let r = out.json();
    assert_eq!(
        r["interfaces"],
        json!([{"name":"eth0","mac":"02:00:00:00:0c:05","sandbox":pod.ctr.path()}])
    );
    assert_eq!(r["ips"][0]["address"], "10.213.0.5/24");
    let l = pod.ctr.link("eth0").expect("eth0 in the pod");
    assert_eq!(l["linkinfo"]["info_kind"], "macvtap");
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "vepa");
    assert_eq!(
        (&l["mtu"], &l["address"]),
        (&json!(1400), &json!("02:00:00:00:0c:05"))
    );
    assert_eq!(l["txqlen"], 1000, "the master's queue length (kubevirt)");
    assert!(flags(&l).contains(&"UP".to_string()), "{l}");
    assert_eq!(addresses(&pod.ctr, "eth0"), ["10.213.0.5/24"]);
    let routes = pod.ctr.exec(&["ip", "route", "show"]);
    assert!(
        routes.contains("default via 10.213.0.1 dev eth0"),
        "{routes}"
    );
    let node_links = pod.node.exec(&["ip", "-o", "link", "show"]);
    assert!(
        !node_links.contains("eth0"),
        "nothing new on the node: {node_links}"
    );

    pod.run(Invocation::new("CHECK"), &conf).assert_ok();
    pod.run(Invocation::new("DEL"), &conf).assert_ok();
    assert!(pod.ctr.link("eth0").is_none());
    pod.run(Invocation::new("DEL"), &conf).assert_ok();
    assert_eq!(pod.ctr.snapshot(), ctr_before);
    assert_eq!(pod.node.snapshot(), node_before);

    // Every mode, L2 only.
    for mode in ["bridge", "private", "passthru"] {
        let conf = sb.conf(
            "1.1.0",
            "mvtl2",
            json!([{"type":"macvtap","master":"uplink0","mode":mode}]),
        );
        pod.run(Invocation::new("ADD").id(mode), &conf).assert_ok();
        let l = pod.ctr.link("eth0").expect("eth0 in the pod");
        assert_eq!(
            (
                &l["linkinfo"]["info_kind"],
                &l["linkinfo"]["info_data"]["mode"]
            ),
            (&json!("macvtap"), &json!(mode))
        );
        pod.run(Invocation::new("CHECK").id(mode), &conf)
            .assert_ok();
        pod.run(Invocation::new("DEL").id(mode), &conf).assert_ok();
    }
    assert_eq!(pod.ctr.snapshot(), ctr_before);
    assert_eq!(pod.node.snapshot(), node_before);
}

/// Without `master` the plugin picks the node's default-route link, as the
/// reference does, and the host grants that link (and no other: policy.rs
/// shows an unnamed link refused). With no default route there is nothing
/// to pick: a clean error, nothing changed.
#[test]
fn macvtap_without_master_uses_the_default_route_link() {
    if !is_root("macvtap_without_master_uses_the_default_route_link") {
        return;
    }
    let sb = sandbox("mvtd");
    let pod = Pod::new("mvd");
    uplink(&pod);
    pod.node
        .exec(&["ip", "addr", "add", "10.214.0.2/24", "dev", "uplink0"]);
    let conf = sb.conf("1.1.0", "mvtd", json!([{"type":"macvtap"}]));
    let before = (pod.node.snapshot(), pod.ctr.snapshot());
    let out = pod.run(Invocation::new("ADD"), &conf);
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!((pod.node.snapshot(), pod.ctr.snapshot()), before);
    pod.run(Invocation::new("DEL"), &conf).assert_ok();

    for route in [
        &["ip", "route", "add", "default", "dev", "uplink0"][..],
        &[
            "ip",
            "route",
            "replace",
            "default",
            "via",
            "10.214.0.1",
            "dev",
            "uplink0",
        ][..],
    ] {
        pod.node.exec(route);
        let before = (pod.node.snapshot(), pod.ctr.snapshot());
        pod.run(Invocation::new("ADD"), &conf).assert_ok();
        let l = pod.ctr.link("eth0").expect("eth0 in the pod");
        assert_eq!(
            (
                &l["linkinfo"]["info_kind"],
                &l["linkinfo"]["info_data"]["mode"]
            ),
            (&json!("macvtap"), &json!("bridge"))
        );
        pod.run(Invocation::new("CHECK"), &conf).assert_ok();
        pod.run(Invocation::new("DEL"), &conf).assert_ok();
        assert!(gone(&pod.ctr, "eth0"));
        assert_eq!((pod.node.snapshot(), pod.ctr.snapshot()), before);
    }
}

/// `vm` on bridge and ptp (rkt's stage1-kvm ask, and what a hypervisor on
/// the node needs): where the veth pair would be, a tap on the node — a
/// port of the bridge, or routed to by ptp — owned by the hypervisor's
/// user; the address is reserved and reported for the tap, configured on no
/// link (the guest sets it); the pod namespace is left alone; DEL removes
/// the tap and releases the address.
#[test]
fn vm_taps_on_the_node_for_bridge_and_ptp() {
    if !is_root("vm_taps_on_the_node_for_bridge_and_ptp") {
        return;
    }
    let sb = Sandbox::new("vmtap");
    for p in ["bridge", "ptp", "host-local"] {
        sb.install(&plugin(p), p);
    }
    let pod = Pod::new("vmt");
    let ctr_before = layout(&pod.ctr);
    for (net, entry) in [
        (
            "vmbr",
            json!({"type":"bridge","bridge":"vmtbr0","isGateway":true,
                   "vm":{"interface":"tap","owner":107,"group":108,"multiQueue":true},
                   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.214.0.0/24"}]]}}),
        ),
        (
            "vmptp",
            json!({"type":"ptp","vm":{"interface":"tap","owner":107},
                   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.215.0.0/24"}]]}}),
        ),
    ] {
        let conf = sb.conf("1.1.0", net, json!([entry]));
        let out = pod.run(Invocation::new("ADD"), &conf);
        out.assert_ok();
        let r = out.json();
        let ifaces = r["interfaces"].as_array().unwrap();
        let tap_index = r["ips"][0]["interface"].as_u64().unwrap() as usize;
        let tap = ifaces[tap_index]["name"].as_str().unwrap().to_string();
        assert!(tap.starts_with("tap"), "{r}");
        assert!(ifaces[tap_index].get("sandbox").is_none(), "{r}");
        let address = r["ips"][0]["address"].as_str().unwrap().to_string();
        let ip = address.split('/').next().unwrap();

        let l = pod.node.link(&tap).expect("the tap on the node");
        assert_eq!(l["linkinfo"]["info_kind"], "tun");
        assert_eq!(l["linkinfo"]["info_data"]["persist"], true);
        assert_eq!(sys(&pod.node, &tap, "owner"), "107");
        assert!(flags(&l).contains(&"UP".to_string()), "{l}");
        // Reserved, not configured: on no link of the node nor the pod.
        let node_addrs = pod.node.exec(&["ip", "-o", "addr", "show"]);
        assert!(!node_addrs.contains(&format!(" {ip}/")), "{node_addrs}");
        assert_eq!(layout(&pod.ctr), ctr_before, "the pod is untouched");
        if net == "vmbr" {
            assert_eq!(l["master"], "vmtbr0");
            assert_eq!(sys(&pod.node, &tap, "group"), "108");
            assert_eq!(addresses(&pod.node, "vmtbr0"), ["10.214.0.1/24"]);
        } else {
            let routes = pod.node.exec(&["ip", "route", "show", "dev", &tap]);
            assert!(routes.contains(&format!("{ip} scope link")), "{routes}");
            assert_eq!(addresses(&pod.node, &tap), ["10.215.0.1/32"]);
        }
        pod.run(Invocation::new("CHECK"), &conf).assert_ok();
        let store =
            std::fs::read_to_string(sb.state_dir().join(format!("store/{net}/host-local.json")))
                .unwrap_or_default();
        assert!(store.contains(ip), "the address is held while the VM runs");
        pod.run(Invocation::new("DEL"), &conf).assert_ok();
        assert!(pod.node.link(&tap).is_none(), "{tap} left behind");
        pod.run(Invocation::new("DEL"), &conf).assert_ok();
    }
    assert_eq!(layout(&pod.ctr), ctr_before);
}
