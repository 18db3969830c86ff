//! Kernel backend checks the memory model cannot answer, verified against
//! iproute2 and procfs inside the test's own namespaces.

use std::os::fd::AsFd;
use std::path::Path;

use serde_json::Value;

use crate::net::{IpNet, KernelNet, LinkChange, MacvlanMode, Net, NetError, NsRef, Route};

use super::support::{require_root, KernelEnv, Netns};

fn cidr(s: &str) -> IpNet {
    crate::net::parse_cidr(s).unwrap()
}

fn up() -> LinkChange {
    LinkChange {
        up: Some(true),
        ..LinkChange::default()
    }
}

/// The netns inode of the calling thread.
fn thread_netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

#[test]
fn open_refuses_what_is_not_a_netns() {
    require_root!();
    let ns = Netns::new("open");
    let mut net = KernelNet::new();
    let missing = net.open(NsRef::Path(Path::new("/run/netns/wcni-no-such-namespace")));
    assert!(matches!(missing, Err(NetError::NotFound(_))), "{missing:?}");
    let file = std::env::temp_dir().join(format!("wcni-not-a-netns-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let regular = net.open(NsRef::Path(&file));
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(regular, Err(NetError::NotFound(_))), "{regular:?}");
    let uts = net.open(NsRef::Path(Path::new("/proc/self/ns/uts")));
    assert!(matches!(uts, Err(NetError::NotFound(_))), "{uts:?}");

    // One namespace, one handle, however it is named.
    let a = net.open(NsRef::Path(&ns.path)).unwrap();
    assert_eq!(net.open(NsRef::Path(&ns.path)).unwrap(), a);
    let node = net.open(NsRef::Current).unwrap();
    assert_eq!(
        net.open(NsRef::Path(Path::new("/proc/self/ns/net")))
            .unwrap(),
        node
    );
    assert!(net.same_ns(a, a) && !net.same_ns(a, node));
}

/// A daemon's peer controls the descriptor it passes: it may be anything
/// open, and closed by the peer at once. It must open nothing but a network
/// namespace, and keep it open as long as the handle.
#[test]
fn a_descriptor_opens_its_namespace_and_nothing_else() {
    require_root!();
    let ns = Netns::new("openfd");
    let mut net = KernelNet::new();
    let regular = std::fs::File::open("/proc/self/status").unwrap();
    let got = net.open(NsRef::Fd(regular.as_fd()));
    assert!(matches!(got, Err(NetError::NotFound(_))), "{got:?}");
    let uts = std::fs::File::open("/proc/self/ns/uts").unwrap();
    let got = net.open(NsRef::Fd(uts.as_fd()));
    assert!(matches!(got, Err(NetError::NotFound(_))), "{got:?}");

    let passed = std::fs::File::open(&ns.path).unwrap();
    let by_fd = net.open(NsRef::Fd(passed.as_fd())).unwrap();
    drop(passed);
    assert_eq!(net.open(NsRef::Path(&ns.path)).unwrap(), by_fd);
    let node = net.open(NsRef::Current).unwrap();
    assert!(!net.same_ns(by_fd, node));
    // The handle outlives the caller's descriptor: links are made in the
    // namespace passed, not wherever that number now points.
    let hole = std::fs::File::open("/proc/self/ns/net").unwrap();
    net.create_veth(by_fd, "wfd0", "wfd1", by_fd, None, None)
        .unwrap();
    drop(hole);
    let links = ns.exec(&["ip", "-o", "link", "show", "wfd0"]);
    assert!(links.contains("wfd0"), "{links}");
}

#[test]
fn a_lookup_leaves_the_counters_out_and_a_missing_link_keeps_the_socket_in_step() {
    require_root!();
    let mut env = KernelEnv::new("lookup");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    assert_eq!(env.net.lookup_carries_counters(a, "wv0"), Ok(false));
    // A lookup is answered without an ack: a miss is its error alone, and
    // the next lookups and changes on the socket get their own answers.
    for _ in 0..3 {
        let miss = env.net.link_by_name(a, "wv-none");
        assert!(matches!(miss, Err(NetError::NotFound(_))), "{miss:?}");
        assert_eq!(env.net.link_by_name(a, "wv0").unwrap().name, "wv0");
        env.net.set_link(a, "wv0", &up()).unwrap();
    }
    assert!(env.net.link_by_name(a, "wv0").unwrap().up);
}

#[test]
fn address_and_route_dumps_bring_back_the_one_link_only() {
    require_root!();
    // A node with many links: what one link's dump costs must not grow
    // with the others (every pod's veth on a full node).
    let mut env = KernelEnv::new("dumps");
    let (a, b) = (env.a, env.b);
    for i in 0..12u8 {
        let name = format!("wd{i}");
        env.net
            .create_veth(a, &name, &format!("wp{i}"), b, None, None)
            .unwrap();
        env.net.set_link(a, &name, &up()).unwrap();
        env.net
            .add_address(a, &name, &cidr(&format!("10.77.{i}.1/24")))
            .unwrap();
        let mut route = Route::to(cidr(&format!("10.78.{i}.0/24")));
        route.dev = Some(name.clone());
        env.net.add_route(a, &route).unwrap();
    }
    let index = env.net.link_by_name(a, "wd3").unwrap().index;
    let dumped = env.net.dumped_links(a, "wd3").unwrap();
    // Its address and its two routes (the subnet's and the one added), at
    // least; nothing of the other eleven links.
    assert!(dumped.len() >= 3, "{dumped:?}");
    assert!(
        dumped.iter().all(|i| *i == index),
        "{dumped:?} (wd3 is {index})"
    );
    let addrs = env.net.addresses(a, "wd3").unwrap();
    assert!(addrs.contains(&cidr("10.77.3.1/24")), "{addrs:?}");
    assert!(addrs.iter().all(|n| !n.to_string().starts_with("10.77.4.")));
    let routes = env.net.routes(a, "wd3", None).unwrap();
    assert!(
        routes.iter().any(|r| r.dst == cidr("10.78.3.0/24")),
        "{routes:?}"
    );
    assert!(
        routes.iter().all(|r| r.dev.as_deref() == Some("wd3")),
        "{routes:?}"
    );
}

#[test]
fn the_calling_thread_never_changes_namespace() {
    require_root!();
    let before = thread_netns();
    let mut env = KernelEnv::new("thread");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    env.net
        .create_tap(a, "wtap0", None, None, false, None, None)
        .unwrap();
    env.net
        .sysctl_set(a, "net.ipv4.conf.wv0.rp_filter", "1")
        .unwrap();
    env.net.sysctl_get(b, "net.ipv4.ip_forward").unwrap();
    assert_eq!(thread_netns(), before);
}

#[test]
fn threads_share_one_handle_on_their_home_and_each_returns_to_its_own() {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    require_root!();
    let away = Netns::new("away");
    let elsewhere = Netns::new("elsewhere");
    let away_ino = std::fs::metadata(&away.path).unwrap().ino();
    let home = thread_netns();
    // Threads at home hold no handle of their own: a daemon keeps its
    // request threads, and their handles would add up.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = away.path.clone();
            std::thread::spawn(move || {
                let f = std::fs::File::open(&path).unwrap();
                let inside = crate::net::in_netns(f.as_fd(), || Ok(thread_netns())).unwrap();
                (inside, thread_netns(), crate::net::kernel::home_is_shared())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), (away_ino, home, true));
    }
    // A thread that lives in another namespace goes back there, not to the
    // namespace the shared handle names.
    let (path, there) = (away.path.clone(), elsewhere.path.clone());
    let (own, after, shared) = std::thread::spawn(move || {
        let e = std::fs::File::open(&there).unwrap();
        // The test puts the thread there itself, as a thread started there
        // would be.
        #[allow(clippy::disallowed_methods)]
        rustix::thread::move_into_link_name_space(
            e.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        let own = thread_netns();
        let f = std::fs::File::open(&path).unwrap();
        crate::net::in_netns(f.as_fd(), || Ok(())).unwrap();
        (own, thread_netns(), crate::net::kernel::home_is_shared())
    })
    .join()
    .unwrap();
    assert_ne!(own, home);
    assert_eq!((after, shared), (own, false));
}

/// Drop every capability of the calling thread (capabilities are per
/// thread): `setns` then fails with EPERM.
fn drop_thread_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let none = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a version-3 header and two data words, both
    // alive and laid out as the kernel's structs.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, none.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

// Asked into its own namespace, a thread stays where it is: with no
// capabilities a move (`setns`) is refused, so only a thread that makes
// none gets `f` run. Asked elsewhere, it still moves (and here is refused).
#[test]
fn a_thread_asked_into_its_own_namespace_makes_no_move() {
    use std::os::fd::AsFd;
    require_root!();
    let away = Netns::new("ownns");
    let path = away.path.clone();
    let (own, elsewhere) = std::thread::spawn(move || {
        let own = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
        let other = std::fs::File::open(&path).unwrap();
        drop_thread_capabilities();
        let at_home = crate::net::in_netns(own.as_fd(), || Ok(thread_netns()));
        let away = crate::net::in_netns(other.as_fd(), || Ok(thread_netns()));
        (
            at_home.map_err(|e| e.to_string()),
            away.map_err(|e| e.raw_os_error()),
        )
    })
    .join()
    .unwrap();
    assert_eq!(own, Ok(thread_netns()));
    assert_eq!(elsewhere, Err(Some(libc::EPERM)));
}

#[test]
fn veth_as_iproute2_sees_it() {
    require_root!();
    let mut env = KernelEnv::new("veth");
    let (a, b) = (env.a, env.b);
    let va = env
        .net
        .create_veth(a, "wv0", "wv1", b, Some(1400), Some("02:11:22:33:44:55"))
        .unwrap();
    let ja = &env.ns_a.ip_json(&["-d", "link", "show", "dev", "wv0"])[0];
    assert_eq!(ja["ifindex"], Value::from(va.index));
    assert_eq!(ja["mtu"], 1400);
    assert_eq!(ja["address"], "02:11:22:33:44:55");
    assert_eq!(ja["linkinfo"]["info_kind"], "veth");
    let jb = &env.ns_b.ip_json(&["-d", "link", "show", "dev", "wv1"])[0];
    assert_eq!(jb["mtu"], 1400);
    assert_eq!(Some(jb["ifindex"].as_u64().unwrap() as u32), va.peer_index);
    assert_eq!(ja["link_index"], jb["ifindex"]);
}

#[test]
fn hairpin_as_iproute2_sees_it() {
    require_root!();
    let mut env = KernelEnv::new("hairpin");
    let (a, b) = (env.a, env.b);
    env.net.ensure_bridge(a, "wbr0", None).unwrap();
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    let hairpin = |on| LinkChange {
        master: Some("wbr0".into()),
        hairpin: Some(on),
        ..LinkChange::default()
    };
    env.net.set_link(a, "wv0", &hairpin(true)).unwrap();
    let j = &env.ns_a.ip_json(&["-d", "link", "show", "dev", "wv0"])[0];
    assert_eq!(j["master"], "wbr0");
    assert_eq!(j["linkinfo"]["info_slave_kind"], "bridge");
    assert_eq!(j["linkinfo"]["info_slave_data"]["hairpin"], true);
    let bridge = env
        .ns_a
        .exec(&["bridge", "-d", "link", "show", "dev", "wv0"]);
    assert!(bridge.contains("hairpin on"), "{bridge}");
    env.net.set_link(a, "wv0", &hairpin(false)).unwrap();
    let j = &env.ns_a.ip_json(&["-d", "link", "show", "dev", "wv0"])[0];
    assert_eq!(j["linkinfo"]["info_slave_data"]["hairpin"], false);
}

#[test]
fn macvlan_lands_in_target_only() {
    require_root!();
    let mut env = KernelEnv::new("macvlan");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wm0", "wp0", a, None, None).unwrap();
    for (name, mode, tap, word) in [
        ("mv0", MacvlanMode::Private, false, "private"),
        ("mt0", MacvlanMode::Vepa, true, "vepa"),
    ] {
        env.net
            .create_macvlan(a, name, "wm0", mode, None, None, b, tap)
            .unwrap();
        let j = &env.ns_b.ip_json(&["-d", "link", "show", "dev", name])[0];
        assert_eq!(
            j["linkinfo"]["info_kind"],
            if tap { "macvtap" } else { "macvlan" }
        );
        assert_eq!(j["linkinfo"]["info_data"]["mode"], word);
        let in_a = env.ns_a.ip_json(&["link", "show"]);
        assert!(in_a.as_array().unwrap().iter().all(|l| l["ifname"] != name));
    }
}

#[test]
fn tap_is_persistent_and_owned() {
    require_root!();
    let mut env = KernelEnv::new("tap");
    let a = env.a;
    env.net
        .create_tap(a, "wtap0", Some(1400), None, true, Some(1000), Some(1001))
        .unwrap();
    // The creating fd is long closed: the device stays because it persists.
    let j = &env.ns_a.ip_json(&["-d", "link", "show", "dev", "wtap0"])[0];
    assert_eq!(j["mtu"], 1400);
    assert_eq!(j["linkinfo"]["info_kind"], "tun");
    let data = &j["linkinfo"]["info_data"];
    assert_eq!(
        (&data["type"], &data["persist"], &data["multi_queue"]),
        (&"tap".into(), &true.into(), &true.into())
    );
    assert_eq!(&data["pi"], &Value::from(false));
    let owner = env.ns_a.exec(&[
        "cat",
        "/sys/class/net/wtap0/owner",
        "/sys/class/net/wtap0/group",
    ]);
    assert_eq!(
        owner.split_whitespace().collect::<Vec<_>>(),
        ["1000", "1001"]
    );
    env.net
        .create_tap(a, "wtap1", None, None, false, None, None)
        .unwrap();
    let owner = env.ns_a.exec(&["cat", "/sys/class/net/wtap1/owner"]);
    assert_eq!(owner.trim(), "-1", "no owner");
}

#[test]
fn addresses_as_iproute2_sees_them() {
    require_root!();
    let mut env = KernelEnv::new("addr");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    for n in [
        "10.1.2.3/24",
        "10.1.3.1/30",
        "10.1.4.1/31",
        "10.1.5.1/32",
        "fd00::1/64",
    ] {
        env.net.add_address(a, "wv0", &cidr(n)).unwrap();
    }
    env.net.set_link(a, "lo", &up()).unwrap();
    env.net.add_address(a, "lo", &cidr("127.0.0.2/8")).unwrap();
    let j = &env.ns_a.ip_json(&["addr", "show", "dev", "wv0"])[0]["addr_info"];
    let info = |local: &str| {
        j.as_array()
            .unwrap()
            .iter()
            .find(|x| x["local"] == local)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(info("10.1.2.3")["broadcast"], "10.1.2.255");
    assert_eq!(info("10.1.2.3")["prefixlen"], 24);
    assert_eq!(info("10.1.3.1")["broadcast"], "10.1.3.3");
    assert_eq!(info("10.1.4.1")["broadcast"], Value::Null);
    assert_eq!(info("10.1.5.1")["broadcast"], Value::Null);
    assert_eq!(info("fd00::1")["prefixlen"], 64);
    assert_eq!(info("10.1.2.3")["scope"], "global");
    let lo = &env.ns_a.ip_json(&["addr", "show", "dev", "lo"])[0]["addr_info"];
    let lo2 = lo
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["local"] == "127.0.0.2")
        .unwrap();
    assert_eq!(lo2["scope"], "host");
    // What the backend lists is what iproute2 lists.
    let ours: Vec<String> = env
        .net
        .addresses(a, "wv0")
        .unwrap()
        .iter()
        .map(|n| n.to_string())
        .collect();
    let theirs: Vec<String> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|x| format!("{}/{}", x["local"].as_str().unwrap(), x["prefixlen"]))
        .collect();
    assert_eq!(ours, theirs);
}

#[test]
fn routes_as_iproute2_sees_them() {
    require_root!();
    let mut env = KernelEnv::new("route");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    env.net.set_link(a, "wv0", &up()).unwrap();
    env.net.add_address(a, "wv0", &cidr("10.1.2.3/24")).unwrap();
    env.net.add_address(a, "wv0", &cidr("fd00::1/64")).unwrap();
    let r = |dst: &str| Route {
        dev: Some("wv0".into()),
        ..Route::to(cidr(dst))
    };
    env.net.add_route(a, &r("10.8.0.0/24")).unwrap();
    env.net
        .add_route(
            a,
            &Route {
                gw: Some("10.1.2.1".parse().unwrap()),
                priority: Some(50),
                ..r("10.9.0.0/24")
            },
        )
        .unwrap();
    env.net
        .add_route(
            a,
            &Route {
                table: Some(100),
                mtu: Some(1300),
                ..r("10.7.0.0/24")
            },
        )
        .unwrap();
    env.net.add_route(a, &r("fd08::/64")).unwrap();

    let main = env.ns_a.ip_json(&["-d", "route", "show", "table", "main"]);
    let get = |j: &Value, dst: &str| {
        j.as_array()
            .unwrap()
            .iter()
            .find(|x| x["dst"] == dst)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let linked = get(&main, "10.8.0.0/24");
    assert_eq!(
        (&linked["protocol"], &linked["scope"], &linked["dev"]),
        (&"boot".into(), &"link".into(), &"wv0".into())
    );
    let via = get(&main, "10.9.0.0/24");
    assert_eq!(
        (&via["gateway"], &via["metric"], &via["scope"]),
        (&"10.1.2.1".into(), &50.into(), &"global".into())
    );
    let subnet = get(&main, "10.1.2.0/24");
    assert_eq!(
        (&subnet["protocol"], &subnet["prefsrc"]),
        (&"kernel".into(), &"10.1.2.3".into())
    );
    let t100 = env.ns_a.ip_json(&["route", "show", "table", "100"]);
    assert_eq!(get(&t100, "10.7.0.0/24")["metrics"][0]["mtu"], 1300);
    let v6 = env
        .ns_a
        .ip_json(&["-d", "-6", "route", "show", "table", "main"]);
    let r6 = get(&v6, "fd08::/64");
    assert_eq!(
        (&r6["protocol"], &r6["metric"]),
        (&"boot".into(), &1024.into())
    );
}

#[test]
fn sysctl_changes_only_the_namespace() {
    require_root!();
    let read_node = || std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let node_before = read_node();
    let mut env = KernelEnv::new("sysctl");
    let a = env.a;
    let current = env.net.sysctl_get(a, "net.ipv4.ip_forward").unwrap();
    let flipped = if current == "1" { "0" } else { "1" };
    env.net
        .sysctl_set(a, "net.ipv4.ip_forward", flipped)
        .unwrap();
    assert_eq!(
        env.ns_a
            .exec(&["sysctl", "-n", "net.ipv4.ip_forward"])
            .trim(),
        flipped
    );
    assert_eq!(
        env.ns_b
            .exec(&["sysctl", "-n", "net.ipv4.ip_forward"])
            .trim(),
        current
    );
    assert_eq!(
        read_node(),
        node_before,
        "the node's own value is untouched"
    );
    env.net
        .sysctl_set(a, "net.ipv6.conf.all.forwarding", "1")
        .unwrap();
    assert_eq!(
        env.ns_a
            .exec(&["sysctl", "-n", "net.ipv6.conf.all.forwarding"])
            .trim(),
        "1"
    );
}

#[test]
fn errors_carry_the_kernels_words() {
    require_root!();
    let mut env = KernelEnv::new("errtext");
    let (a, b) = (env.a, env.b);
    env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    match env.net.set_link(
        a,
        "wv0",
        &LinkChange {
            mtu: Some(67),
            ..LinkChange::default()
        },
    ) {
        Err(NetError::Invalid(msg)) => {
            assert!(
                msg.to_lowercase().contains("mtu") && msg.contains("errno 22"),
                "{msg}"
            )
        }
        other => unreachable!("{other:?}"),
    }
    env.net.set_link(a, "wv0", &up()).unwrap();
    let unreachable = Route {
        gw: Some("10.99.0.1".parse().unwrap()),
        ..Route::to(cidr("10.9.0.0/24"))
    };
    match env.net.add_route(a, &unreachable) {
        Err(NetError::Kernel { errno, msg }) => {
            assert_eq!(errno, libc::ENETUNREACH);
            assert!(msg.contains("gateway"), "{msg}");
        }
        other => unreachable!("{other:?}"),
    }
}

#[test]
fn dumps_span_many_messages() {
    require_root!();
    let mut env = KernelEnv::new("dump");
    let a = env.a;
    for i in 0..100 {
        env.net
            .create_veth(a, &format!("wd{i}a"), &format!("wd{i}b"), a, None, None)
            .unwrap();
    }
    env.net.set_link(a, "wd0a", &up()).unwrap();
    for i in 0..300u32 {
        let addr = format!("10.{}.{}.1/32", 100 + i / 250, i % 250);
        env.net.add_address(a, "wd0a", &cidr(&addr)).unwrap();
        let dst = format!("10.200.{}.{}/32", i / 250, i % 250);
        env.net
            .add_route(
                a,
                &Route {
                    dev: Some("wd0a".into()),
                    ..Route::to(cidr(&dst))
                },
            )
            .unwrap();
    }
    let links = env.net.links(a).unwrap();
    assert_eq!(links.len(), 201);
    let counted = env
        .ns_a
        .ip_json(&["link", "show"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(links.len(), counted);
    assert_eq!(env.net.addresses(a, "wd0a").unwrap().len(), 300);
    assert_eq!(env.net.routes(a, "wd0a", None).unwrap().len(), 300);
    // Each request still gets its own answer afterwards.
    assert_eq!(env.net.link_by_name(a, "wd99b").unwrap().name, "wd99b");
}

/// Changes go to a link by the index last seen; a link replaced behind the
/// backend's back (deleted, and another made under its name) is looked up
/// again, and the change lands on the new link, never fails.
#[test]
fn a_link_replaced_by_someone_else_is_looked_up_again() {
    require_root!();
    let mut env = KernelEnv::new("reidx");
    let (a, b) = (env.a, env.b);
    let first = env.net.create_veth(a, "wv0", "wv1", b, None, None).unwrap();
    env.net.set_link(a, "wv0", &up()).unwrap();
    env.ns_a.exec(&["ip", "link", "del", "wv0"]);
    env.ns_a
        .exec(&["ip", "link", "add", "wv0", "type", "bridge"]);
    let second = env.ns_a.ip_json(&["link", "show", "dev", "wv0"])[0]["ifindex"]
        .as_u64()
        .unwrap() as u32;
    assert_ne!(first.index, second);
    env.net.add_address(a, "wv0", &cidr("10.9.9.1/24")).unwrap();
    let after = env.net.set_link(a, "wv0", &up()).unwrap();
    assert_eq!(after.index, second);
    assert_eq!(after.kind, "bridge");
    let addrs = env.ns_a.exec(&["ip", "-o", "addr", "show", "dev", "wv0"]);
    assert!(addrs.contains("10.9.9.1/24"), "{addrs}");
}
