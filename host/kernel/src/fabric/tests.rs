//! The suite both fabric backends pass: the kernel's in a throwaway
//! namespace (as root), the model's in memory. Each node here has an
//! uplink `up0` (`192.168.50.2/24`, `fd50::2/64`) and, as an operator's
//! own, a route to `10.99.0.0/24` and a bridge named like a tunnel
//! (`wcni-vx9`): what cluster mode does not own must come through every
//! reconcile as it was.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::*;
use crate::net::tests::support::{require_root, Netns};
use crate::net::{NetError, NsRef};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `shrink` below the most the uplink (MTU 1500) allows.
fn vtep(v6: bool, shrink: u32) -> Vtep {
    let (local, addr) = if v6 {
        (ip("fd50::2"), ip("fd00:10:244:1::"))
    } else {
        (ip("192.168.50.2"), ip("10.244.1.0"))
    };
    Vtep {
        name: vtep_name(v6),
        vni: 7,
        port: 4789,
        local,
        uplink: "up0".into(),
        mac: vtep_mac(local),
        addr,
        mtu: 1500 - vxlan_overhead(local) - shrink,
    }
}

fn peer(v6: bool, n: u8) -> (VxlanPeer, PeerRoute) {
    let (remote, vtep_ip, dst) = if v6 {
        (
            ip(&format!("fd60::{n}")),
            ip(&format!("fd00:10:244:{n}::")),
            format!("fd00:10:244:{n}::/64"),
        )
    } else {
        (
            ip(&format!("192.168.60.{n}")),
            ip(&format!("10.244.{n}.0")),
            format!("10.244.{n}.0/24"),
        )
    };
    let p = VxlanPeer {
        dev: vtep_name(v6),
        vtep: vtep_ip,
        mac: vtep_mac(remote),
        remote,
    };
    let r = PeerRoute {
        dst: dst.parse().unwrap(),
        via: vtep_ip,
        dev: vtep_name(v6),
        onlink: true,
    };
    (p, r)
}

fn direct(dst: &str, via: &str) -> PeerRoute {
    PeerRoute {
        dst: dst.parse().unwrap(),
        via: ip(via),
        dev: "up0".into(),
        onlink: false,
    }
}

/// Two peers per family behind tunnels, and one node reached directly.
fn layout(shrink: u32) -> Layout {
    let mut l = Layout {
        vteps: BTreeMap::new(),
        ..Layout::default()
    };
    for v6 in [false, true] {
        let v = vtep(v6, shrink);
        l.vteps.insert(v.name.clone(), v);
        for n in [2, 3] {
            let (p, r) = peer(v6, n);
            l.peers.insert(p);
            l.routes.insert(r);
        }
    }
    l.routes.insert(direct("10.244.9.0/24", "192.168.50.9"));
    l.routes.insert(direct("fd00:10:244:9::/64", "fd50::9"));
    for (pods, except) in [
        (
            "10.244.1.0/24",
            ["10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"],
        ),
        (
            "fd00:10:244:1::/64",
            [
                "fd00:10:244:1::/64",
                "fd00:10:244:2::/64",
                "fd00:10:244:3::/64",
            ],
        ),
    ] {
        l.masquerade.insert(Masquerade {
            pods: pods.parse().unwrap(),
            except: except.iter().map(|e| e.parse().unwrap()).collect(),
        });
    }
    l
}

fn suite(f: &mut dyn Fabric) {
    let connected = f.connected().unwrap();
    let addrs: Vec<String> = connected
        .iter()
        .map(|c| format!("{} {}", c.link, c.addr))
        .collect();
    assert_eq!(addrs, ["up0 192.168.50.2/24", "up0 fd50::2/64"]);
    assert!(connected.iter().all(|c| c.mtu == 1500));
    assert_eq!(f.observe().unwrap(), Layout::default());

    // From nothing to a layout, and then nothing more to do.
    let want = layout(0);
    let done = reconcile(f, &want).unwrap();
    assert_eq!(done.failed, Vec::<String>::new());
    assert_eq!((done.added, done.removed), (2 + 4 + 6 + 2, 0));
    assert_eq!(f.observe().unwrap(), want);
    assert!(reconcile(f, &want).unwrap().is_noop());
    // The tunnels are not places to reach peers directly.
    assert_eq!(f.connected().unwrap(), connected);

    // A destination an operator holds is a conflict: reported, left as it
    // is, and everything else is applied.
    let mut clash = want.clone();
    clash.routes.insert(direct("10.99.0.0/24", "192.168.50.7"));
    // A node gone: its CIDR is no longer the cluster's.
    clash.masquerade = clash
        .masquerade
        .iter()
        .map(|m| Masquerade {
            except: m
                .except
                .iter()
                .filter(|e| !e.to_string().contains("2.0/24"))
                .copied()
                .collect(),
            ..m.clone()
        })
        .collect();
    let (p4, r4) = peer(false, 2);
    clash.routes.remove(&r4);
    clash.peers.remove(&p4);
    let done = reconcile(f, &clash).unwrap();
    assert_eq!(done.removed, 3, "{done:?}");
    assert_eq!(done.failed.len(), 1, "{done:?}");
    assert!(done.failed[0].contains("10.99.0.0/24"), "{done:?}");
    let mut got = clash.clone();
    got.routes.retain(|r| r.dst.to_string() != "10.99.0.0/24");
    assert_eq!(f.observe().unwrap(), got);

    // A tunnel whose settings change is made again, its peers with it.
    let smaller = layout(50);
    let done = reconcile(f, &smaller).unwrap();
    assert!(done.failed.is_empty(), "{done:?}");
    assert_eq!(f.observe().unwrap(), smaller);

    // A peer moved to another underlay address: its entry follows.
    let mut moved = smaller.clone();
    let (p3, _) = peer(false, 3);
    moved.peers.remove(&p3);
    moved.peers.insert(VxlanPeer {
        remote: ip("192.168.60.33"),
        mac: vtep_mac(ip("192.168.60.33")),
        ..p3
    });
    assert!(reconcile(f, &moved).unwrap().failed.is_empty());
    assert_eq!(f.observe().unwrap(), moved);

    // Bad requests are refused before anything is made.
    let mut stray = vtep(false, 0);
    stray.name = "eth-x".into();
    assert!(matches!(f.add_vtep(&stray), Err(NetError::Invalid(_))));
    assert!(f.del_vtep("up0").is_err());
    assert!(f.del_vtep("wcni-vx9").is_err());
    // A gateway on no subnet of the device.
    assert!(f
        .add_route(&direct("10.244.8.0/24", "192.168.70.1"))
        .is_err());

    // Nothing wanted: everything of ours goes, nothing else does.
    let done = reconcile(f, &Layout::default()).unwrap();
    assert!(done.failed.is_empty(), "{done:?}");
    assert_eq!(f.observe().unwrap(), Layout::default());
    assert_eq!(f.connected().unwrap(), connected);
}

#[test]
fn the_model_keeps_to_its_own() {
    let mut m = MemoryFabric::new(vec![
        Connected {
            link: "up0".into(),
            addr: "192.168.50.2/24".parse().unwrap(),
            mtu: 1500,
        },
        Connected {
            link: "up0".into(),
            addr: "fd50::2/64".parse().unwrap(),
            mtu: 1500,
        },
    ]);
    m.foreign_links.insert("wcni-vx9".into());
    m.foreign_routes
        .insert("10.99.0.0/24".parse().unwrap(), "up0".into());
    suite(&mut m);
    assert!(m
        .foreign_routes
        .contains_key(&"10.99.0.0/24".parse().unwrap()));
}

#[test]
fn the_kernel_keeps_to_its_own() {
    require_root!();
    let node = Netns::new("fabric");
    for cmd in [
        "ip link add up0 type veth peer name up0p",
        "ip link set up0p up",
        "ip link set up0 up",
        "ip addr add 192.168.50.2/24 dev up0",
        "ip addr add fd50::2/64 dev up0 nodad",
        "ip route add 10.99.0.0/24 via 192.168.50.1",
        "ip link add wcni-vx9 type bridge",
        "nft add table inet operator",
        "nft add chain inet operator post { type nat hook postrouting priority 100 ; }",
        "nft add rule inet operator post ip saddr 10.244.1.0/24 masquerade",
    ] {
        node.exec(&cmd.split(' ').collect::<Vec<_>>());
    }
    let before = |n: &Netns| {
        (
            n.exec(&["ip", "-d", "link", "show", "wcni-vx9"]),
            n.exec(&["ip", "route", "show", "10.99.0.0/24"]),
            n.exec(&["nft", "list", "table", "inet", "operator"]),
        )
    };
    let foreign = before(&node);
    let mut f = KernelFabric::open(NsRef::Path(&node.path)).unwrap();

    // What the kernel shows of a layout, as `ip` and `bridge` print it.
    reconcile(&mut f, &layout(0)).unwrap();
    let link = node.exec(&["ip", "-d", "link", "show", "wcni-vx4"]);
    for want in [
        "mtu 1450",
        "vxlan id 7",
        "local 192.168.50.2",
        "dev up0",
        "dstport 4789",
        "nolearning",
    ] {
        assert!(link.contains(want), "{want}: {link}");
    }
    let routes = node.exec(&["ip", "route", "show", "proto", "157"]);
    assert!(
        routes.contains("10.244.2.0/24 via 10.244.2.0 dev wcni-vx4 onlink"),
        "{routes}"
    );
    assert!(
        routes.contains("10.244.9.0/24 via 192.168.50.9 dev up0"),
        "{routes}"
    );
    let fdb = node.exec(&["bridge", "fdb", "show", "dev", "wcni-vx6"]);
    assert!(fdb.contains("dst fd60::3"), "{fdb}");
    let neigh = node.exec(&["ip", "neigh", "show", "dev", "wcni-vx4"]);
    assert!(neigh.contains("10.244.3.0 lladdr"), "{neigh}");
    assert!(neigh.contains("PERMANENT"), "{neigh}");
    let nat = node.exec(&["nft", "list", "table", "inet", NAT_TABLE]);
    for want in [
        "type nat hook postrouting priority srcnat; policy accept;",
        "ip saddr 10.244.1.0/24 ip daddr 10.244.2.0/24 return comment \"cluster-return 10.244.1.0/24 10.244.2.0/24\"",
        "ip saddr 10.244.1.0/24 ip daddr != 224.0.0.0/4 counter packets 0 bytes 0 masquerade",
        "ip6 saddr fd00:10:244:1::/64 ip6 daddr fd00:10:244:3::/64 return",
    ] {
        assert!(nat.contains(want), "{want}: {nat}");
    }
    reconcile(&mut f, &Layout::default()).unwrap();

    suite(&mut f);
    assert_eq!(before(&node), foreign);
    let left = node.exec(&["nft", "list", "tables"]);
    assert!(!left.contains(NAT_TABLE), "{left}");
}
