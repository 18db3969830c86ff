//! From the cluster's Node objects to this node's [`Layout`]: a route to
//! every other Node's pod CIDR, direct where its InternalIP is on a subnet
//! this node is attached to, through a VXLAN tunnel where not.
//!
//! The scope rule: a Node adds routes to its own pod CIDRs and nothing
//! else, and only when that CIDR is one a node could be given. A Node is
//! refused, with a reason, and adds nothing, when a CIDR of it
//! * is not a CIDR, or is wider than [`PodCidrBounds`] (a default route),
//!   or in a range that is no node's to give (loopback, link-local,
//!   multicast);
//! * overlaps this node's own pod CIDR, a subnet this node is attached to,
//!   or the CIDR of a Node created before it (so a new Node takes nothing
//!   from those already routed);
//! * holds a Node's InternalIP (routing it would cut the way to that node);
//! * has no InternalIP of its family, or that address is this node's own,
//!   an older Node's, inside a pod CIDR, or not a unicast address.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use wasm_cni_model::fabric::{
    vtep_mac, vtep_name, vxlan_overhead, Connected, Layout, Masquerade, PeerRoute, Vtep, VxlanPeer,
};
use wasm_cni_model::net::IpNetFamily;

use crate::node::Node;

/// How routes to other nodes are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Direct where the peer shares a subnet with this node, VXLAN where not.
    #[default]
    Auto,
    /// Direct only: a peer on no shared subnet is refused.
    Direct,
    /// VXLAN to every peer.
    Vxlan,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "direct" => Ok(Mode::Direct),
            "vxlan" => Ok(Mode::Vxlan),
            _ => Err(format!("{s:?}: the mode is auto, direct or vxlan")),
        }
    }
}

/// How wide a pod CIDR an API object may give a node. Whoever can write a
/// Node's `spec.podCIDRs` is not thereby root on every node: `0.0.0.0/0` or
/// `128.0.0.0/1` there would route half of IPv4 into one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCidrBounds {
    pub v4: u8,
    pub v6: u8,
}

impl PodCidrBounds {
    /// A /16 of IPv4 (65 534 pods) and a /48 of IPv6 per node: wider than
    /// any node is given (Kubernetes' default node masks are /24 and /64).
    pub const DEFAULT: PodCidrBounds = PodCidrBounds { v4: 16, v6: 48 };

    /// `net` is a pod CIDR a node may route to its pods: no wider than
    /// the bound, and in no range that is not a node's to give out
    /// (unspecified, loopback, link-local, multicast, reserved).
    pub fn check(&self, net: &IpNet) -> Result<(), String> {
        let (min, family) = match net {
            IpNet::V4(_) => (self.v4, "IPv4"),
            IpNet::V6(_) => (self.v6, "IPv6"),
        };
        if net.prefix_len() < min {
            return Err(format!(
                "{net} is wider than a /{min}, the widest {family} pod CIDR a node takes \
                 (--min-pod-cidr-prefix-v4/-v6)"
            ));
        }
        for range in special(net) {
            if range.contains(net) || net.contains(&range) {
                return Err(format!("{net} is in {range}, not a range for pods"));
            }
        }
        Ok(())
    }
}

fn special(like: &IpNet) -> Vec<IpNet> {
    let ranges: &[&str] = match like {
        IpNet::V4(_) => &[
            "0.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "224.0.0.0/4",
            "240.0.0.0/4",
        ],
        IpNet::V6(_) => &["::/8", "fe80::/10", "ff00::/8"],
    };
    ranges.iter().filter_map(|r| r.parse().ok()).collect()
}

/// What the operator chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// This node's name (its Node object).
    pub node: String,
    pub mode: Mode,
    pub vni: u32,
    pub port: u16,
    pub bounds: PodCidrBounds,
    /// SNAT this node's pods' traffic to anywhere but the cluster's pod
    /// CIDRs to the node's address.
    pub masquerade: bool,
}

/// A Node that adds nothing, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    pub node: String,
    pub why: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: {}", self.node, self.why)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub layout: Layout,
    pub refused: Vec<Refusal>,
    /// Every pod CIDR routed or local: what pod traffic may reach without
    /// NAT.
    pub cluster_cidrs: BTreeSet<IpNet>,
}

/// The layout `nodes` justify on the node `s.node`, with `connected` its
/// addresses.
pub fn plan(s: &Settings, nodes: &BTreeMap<String, Node>, connected: &[Connected]) -> Plan {
    let mut out = Plan::default();
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    let me = nodes.get(&s.node);

    // Each Node's own faults first.
    let mut valid: BTreeMap<&str, Vec<IpNet>> = BTreeMap::new();
    for (name, n) in nodes {
        let checked = n.cidrs.clone().and_then(|cidrs| {
            for c in &cidrs {
                s.bounds.check(c)?;
                // This node's own CIDR is on its bridge.
                if *name == s.node {
                    continue;
                }
                if let Some(link) = connected
                    .iter()
                    .find(|l| l.addr.trunc().contains(c) || c.contains(&l.addr.trunc()))
                {
                    return Err(format!(
                        "{c} overlaps {} on {}, a network this node is attached to",
                        link.addr.trunc(),
                        link.link
                    ));
                }
            }
            Ok(cidrs)
        });
        match checked {
            Ok(cidrs) => {
                valid.insert(name, cidrs);
            }
            Err(why) => {
                refused.insert(name.clone(), why);
            }
        }
    }
    // This node's own, only if it passed: a Node of its own that is too
    // wide masquerades nothing and tunnels nowhere.
    let my_cidrs: Vec<IpNet> = valid.get(s.node.as_str()).cloned().unwrap_or_default();
    // Then what Nodes share: a CIDR that overlaps, an InternalIP. The Node
    // made first keeps its own (the API server sets `creationTimestamp`; no
    // client can), so a new Node takes nothing from those already there;
    // this node comes before any other.
    let mut order: Vec<&str> = valid.keys().copied().collect();
    order.sort_by_key(|name| {
        let created = nodes.get(*name).and_then(|n| n.created.clone());
        (
            *name != s.node,
            created.is_none(),
            created,
            name.to_string(),
        )
    });
    let mut kept: Vec<&str> = Vec::new();
    for name in order {
        let clash = kept.iter().find_map(|k| {
            valid[name].iter().find_map(|x| {
                valid[k]
                    .iter()
                    .find(|y| x.contains(*y) || y.contains(x))
                    .map(|y| format!("{x} overlaps {y} of node {k}, which was there first"))
            })
        });
        let ips = |n: &str| nodes.get(n).map_or(&[][..], |n| &n.internal_ips[..]);
        let clash = clash.or_else(|| {
            kept.iter().find_map(|k| {
                let (mine, theirs) = (ips(name), ips(k));
                if let Some(ip) = mine.iter().find(|ip| theirs.contains(ip)) {
                    return Some(format!(
                        "InternalIP {ip} is node {k}'s, which was there first"
                    ));
                }
                // Routing a CIDR that holds a node's address would cut the
                // way to that node.
                let held = valid[name]
                    .iter()
                    .find_map(|c| theirs.iter().find(|ip| c.contains(*ip)).map(|ip| (c, ip)));
                if let Some((c, ip)) = held {
                    return Some(format!("{c} holds {ip}, an InternalIP of node {k}"));
                }
                let inside = valid[k]
                    .iter()
                    .find_map(|c| mine.iter().find(|ip| c.contains(*ip)).map(|ip| (c, ip)));
                inside.map(|(c, ip)| format!("InternalIP {ip} is inside {c}, node {k}'s pod CIDR"))
            })
        });
        match clash {
            Some(why) => {
                refused.insert(name.to_string(), why);
            }
            None => kept.push(name),
        }
    }
    let mine: Vec<IpAddr> = connected.iter().map(|c| c.addr.addr()).collect();
    let all_cidrs: Vec<IpNet> = kept.iter().flat_map(|k| valid[k].iter().copied()).collect();

    for name in kept.iter().filter(|k| **k != s.node) {
        let (Some(n), Some(cidrs)) = (nodes.get(*name), valid.get(name)) else {
            continue;
        };
        let mut routes = Vec::new();
        let mut peers = Vec::new();
        let mut fault = None;
        for c in cidrs {
            let step = route_to(s, n, c, connected, &my_cidrs, me, &mine, &all_cidrs);
            match step {
                Ok((r, p)) => {
                    routes.push(r);
                    peers.extend(p);
                }
                Err(why) => {
                    fault = Some(why);
                    break;
                }
            }
        }
        match fault {
            Some(why) => {
                refused.insert(name.to_string(), why);
            }
            None => {
                for r in routes {
                    out.cluster_cidrs.insert(r.dst);
                    out.layout.routes.insert(r);
                }
                for (p, v) in peers {
                    out.layout.peers.insert(p);
                    out.layout.vteps.insert(v.name.clone(), v);
                }
            }
        }
    }
    out.cluster_cidrs.extend(my_cidrs.iter().copied());
    if s.masquerade {
        for pods in &my_cidrs {
            let except = out
                .cluster_cidrs
                .iter()
                .filter(|c| c.is_ipv4() == pods.is_ipv4())
                .copied()
                .collect();
            out.layout.masquerade.insert(Masquerade {
                pods: *pods,
                except,
            });
        }
    }
    out.refused = refused
        .into_iter()
        .map(|(node, why)| Refusal { node, why })
        .collect();
    out
}

/// This node's tunnel endpoint for a family: its address is the first of
/// this node's pod CIDR, its underlay this node's InternalIP, on the link
/// that holds it.
fn vtep_for(
    s: &Settings,
    me: Option<&Node>,
    my_cidrs: &[IpNet],
    connected: &[Connected],
    v6: bool,
) -> Result<Vtep, String> {
    let family = if v6 { "IPv6" } else { "IPv4" };
    let cidr = my_cidrs
        .iter()
        .find(|c| c.is_ipv6() == v6)
        .ok_or_else(|| format!("this node has no {family} pod CIDR for a tunnel endpoint"))?;
    let local = me
        .into_iter()
        .flat_map(|n| n.internal_ips.iter())
        .find(|ip| ip.is_ipv6() == v6)
        .ok_or_else(|| format!("this node has no {family} InternalIP to tunnel from"))?;
    let uplink = connected
        .iter()
        .find(|c| c.addr.addr() == *local)
        .ok_or_else(|| format!("this node's InternalIP {local} is on none of its links"))?;
    Ok(Vtep {
        name: vtep_name(v6),
        vni: s.vni,
        port: s.port,
        local: *local,
        uplink: uplink.link.clone(),
        mac: vtep_mac(*local),
        addr: cidr.network(),
        mtu: uplink.mtu.saturating_sub(vxlan_overhead(*local)),
    })
}

/// The route to one CIDR of Node `n`, and the tunnel peer it needs.
#[allow(clippy::too_many_arguments)]
fn route_to(
    s: &Settings,
    n: &Node,
    c: &IpNet,
    connected: &[Connected],
    my_cidrs: &[IpNet],
    me: Option<&Node>,
    mine: &[IpAddr],
    all_cidrs: &[IpNet],
) -> Result<(PeerRoute, Option<(VxlanPeer, Vtep)>), String> {
    let v6 = c.is_ipv6();
    let family = if v6 { "IPv6" } else { "IPv4" };
    let ip = *n
        .internal_ips
        .iter()
        .find(|ip| ip.is_ipv6() == v6)
        .ok_or_else(|| format!("no {family} InternalIP to reach {c} through"))?;
    let unicast = match ip {
        IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local())
        }
        IpAddr::V6(a) => {
            !(a.is_unspecified() || a.is_loopback() || a.is_multicast())
                && (a.segments()[0] & 0xffc0) != 0xfe80
        }
    };
    if !unicast {
        return Err(format!("InternalIP {ip} is not a unicast address"));
    }
    if mine.contains(&ip) {
        return Err(format!("InternalIP {ip} is this node's own address"));
    }
    if let Some(p) = all_cidrs.iter().chain(my_cidrs).find(|p| p.contains(&ip)) {
        return Err(format!("InternalIP {ip} is inside pod CIDR {p}"));
    }
    let shared = connected.iter().find(|l| l.addr.trunc().contains(&ip));
    let tunnel = match (s.mode, shared) {
        (Mode::Vxlan, _) | (Mode::Auto, None) => true,
        (Mode::Direct, None) => {
            return Err(format!(
                "InternalIP {ip} is on no subnet this node is attached to (mode direct)"
            ))
        }
        (_, Some(_)) => false,
    };
    if !tunnel {
        let link = shared.map(|l| l.link.clone()).unwrap_or_default();
        let r = PeerRoute {
            dst: *c,
            via: ip,
            dev: link,
            onlink: false,
        };
        return Ok((r, None));
    }
    let v = vtep_for(s, me, my_cidrs, connected, v6)?;
    let peer = VxlanPeer {
        dev: v.name.clone(),
        vtep: c.network(),
        mac: vtep_mac(ip),
        remote: ip,
    };
    let r = PeerRoute {
        dst: *c,
        via: c.network(),
        dev: v.name.clone(),
        onlink: true,
    };
    Ok((r, Some((peer, v))))
}

/// The largest MTU this node's pods may have in `mode`: that of the link
/// holding the node's InternalIPs (the smallest, if they are on different
/// links), less the tunnel's encapsulation of the widest underlay unless
/// every peer is reached directly. `auto` counts the tunnel too: a peer on
/// another subnet may join later, and a pod's MTU is fixed at its ADD.
pub fn pod_mtu(
    mode: Mode,
    connected: &[Connected],
    internal_ips: &[IpAddr],
) -> Result<u32, String> {
    if internal_ips.is_empty() {
        return Err("the Node has no InternalIP".into());
    }
    let mut uplink = u32::MAX;
    for ip in internal_ips {
        let link = connected
            .iter()
            .find(|c| c.addr.addr() == *ip)
            .ok_or_else(|| {
                format!("no link of this host holds the Node's InternalIP {ip} (run on the node's network)")
            })?;
        uplink = uplink.min(link.mtu);
    }
    let overhead = match mode {
        Mode::Direct => 0,
        Mode::Auto | Mode::Vxlan => internal_ips
            .iter()
            .map(|ip| vxlan_overhead(*ip))
            .max()
            .unwrap_or(0),
    };
    // IPv6 needs 1280 on every link; IPv4's 576 is what every host must take.
    let floor = if internal_ips.iter().any(IpAddr::is_ipv6) {
        1280
    } else {
        576
    };
    match uplink.checked_sub(overhead) {
        Some(mtu) if mtu >= floor => Ok(mtu),
        _ => Err(format!(
            "the uplink's MTU {uplink} leaves pods less than {floor} after {overhead} bytes of tunnel"
        )),
    }
}

#[cfg(test)]
mod tests {
    //! The Node objects are the attacker's here: each hostile Node must add
    //! nothing and change nothing another Node justifies.

    use super::*;
    use wasm_cni_model::fabric::{reconcile, MemoryFabric};

    fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> Node {
        Node {
            name: name.into(),
            created: Some("2026-12-07T09:00:00Z".into()),
            cidrs: Ok(cidrs.iter().map(|c| c.parse().unwrap()).collect()),
            internal_ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
        }
    }

    fn settings(mode: Mode) -> Settings {
        Settings {
            node: "a".into(),
            mode,
            vni: 1,
            port: 4789,
            bounds: PodCidrBounds::DEFAULT,
            masquerade: true,
        }
    }

    fn connected() -> Vec<Connected> {
        vec![
            Connected {
                link: "eth0".into(),
                addr: "192.168.1.1/24".parse().unwrap(),
                mtu: 1500,
            },
            Connected {
                link: "eth0".into(),
                addr: "fd01::1/64".parse().unwrap(),
                mtu: 1500,
            },
        ]
    }

    /// Node a (this one), b on the same LAN, c behind a router; dual-stack.
    fn cluster() -> BTreeMap<String, Node> {
        [
            node(
                "a",
                &["10.244.0.0/24", "fd00:10:244::/64"],
                &["192.168.1.1", "fd01::1"],
            ),
            node(
                "b",
                &["10.244.1.0/24", "fd00:10:244:1::/64"],
                &["192.168.1.2", "fd01::2"],
            ),
            node(
                "c",
                &["10.244.2.0/24", "fd00:10:244:2::/64"],
                &["192.168.2.3", "fd02::3"],
            ),
        ]
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect()
    }

    fn routes(p: &Plan) -> Vec<String> {
        p.layout.routes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_pod_cidr_is_no_wider_than_its_bound_and_in_no_special_range() {
        let b = PodCidrBounds::DEFAULT;
        for ok in [
            "10.244.3.0/24",
            "10.0.0.0/16",
            "fd00:10:244:3::/64",
            "2001:db8::/48",
        ] {
            assert_eq!(b.check(&ok.parse().unwrap()), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("0.0.0.0/0", "wider than a /16"),
            ("128.0.0.0/1", "wider than a /16"),
            ("10.0.0.0/8", "wider than a /16"),
            ("::/0", "wider than a /48"),
            ("fd00::/32", "wider than a /48"),
            ("127.0.0.0/24", "in 127.0.0.0/8"),
            ("169.254.1.0/24", "in 169.254.0.0/16"),
            ("224.1.0.0/24", "in 224.0.0.0/4"),
            ("0.0.0.0/24", "in 0.0.0.0/8"),
            ("fe80::/64", "in fe80::/10"),
            ("ff02::/64", "in ff00::/8"),
            ("::ffff:10.0.0.0/120", "in ::/8"),
        ] {
            let e = b.check(&bad.parse().unwrap()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let wide = PodCidrBounds { v4: 8, v6: 32 };
        assert_eq!(wide.check(&"10.0.0.0/8".parse().unwrap()), Ok(()));
        assert!(wide.check(&"0.0.0.0/0".parse().unwrap()).is_err());
    }

    #[test]
    fn auto_routes_directly_on_a_shared_subnet_and_tunnels_elsewhere() {
        let p = plan(&settings(Mode::Auto), &cluster(), &connected());
        assert_eq!(p.refused, vec![]);
        assert_eq!(
            routes(&p),
            [
                "10.244.1.0/24 via 192.168.1.2 dev eth0",
                "10.244.2.0/24 via 10.244.2.0 dev wcni-vx4 onlink",
                "fd00:10:244:1::/64 via fd01::2 dev eth0",
                "fd00:10:244:2::/64 via fd00:10:244:2:: dev wcni-vx6 onlink",
            ]
        );
        let v4 = &p.layout.vteps["wcni-vx4"];
        assert_eq!(
            (v4.mtu, v4.local.to_string(), v4.addr.to_string()),
            (1450, "192.168.1.1".into(), "10.244.0.0".into())
        );
        assert_eq!(p.layout.vteps["wcni-vx6"].mtu, 1430);
        assert_eq!(p.layout.peers.len(), 2);
        assert!(p
            .layout
            .peers
            .iter()
            .any(|x| x.remote.to_string() == "192.168.2.3"
                && x.mac == vtep_mac("192.168.2.3".parse().unwrap())));
        assert_eq!(p.cluster_cidrs.len(), 6);
        // Pods leave the cluster with the node's address, and reach every
        // pod CIDR with their own.
        let m: Vec<String> = p
            .layout
            .masquerade
            .iter()
            .map(|m| {
                format!(
                    "{} {:?}",
                    m.pods,
                    m.except.iter().map(ToString::to_string).collect::<Vec<_>>()
                )
            })
            .collect();
        assert_eq!(
            m,
            [
                r#"10.244.0.0/24 ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]"#,
                r#"fd00:10:244::/64 ["fd00:10:244::/64", "fd00:10:244:1::/64", "fd00:10:244:2::/64"]"#,
            ]
        );

        let all = plan(&settings(Mode::Vxlan), &cluster(), &connected());
        assert!(all.refused.is_empty());
        assert!(all.layout.routes.iter().all(|r| r.onlink));
        let direct = plan(&settings(Mode::Direct), &cluster(), &connected());
        assert_eq!(direct.refused.len(), 1);
        assert_eq!(direct.refused[0].node, "c");
        assert!(direct.layout.vteps.is_empty());
        assert_eq!(direct.layout.routes.len(), 2);
    }

    #[test]
    fn a_hostile_node_adds_nothing_and_takes_nothing_from_the_others() {
        let base = plan(&settings(Mode::Auto), &cluster(), &connected());
        let hostile: Vec<(Node, &str)> = vec![
            (
                node("x", &["0.0.0.0/0"], &["192.168.1.9"]),
                "wider than a /16",
            ),
            (
                node("x", &["128.0.0.0/1"], &["192.168.1.9"]),
                "wider than a /16",
            ),
            (node("x", &["::/0"], &["fd01::9"]), "wider than a /48"),
            (
                node("x", &["127.0.0.0/24"], &["192.168.1.9"]),
                "not a range for pods",
            ),
            (
                node("x", &["10.244.0.0/25"], &["192.168.1.9"]),
                "of node a, which was there first",
            ),
            (
                node("x", &["10.244.2.0/24"], &["192.168.1.9"]),
                "of node c, which was there first",
            ),
            (
                node("x", &["10.244.0.0/16"], &["192.168.1.9"]),
                "of node a, which was there first",
            ),
            (
                node("x", &["192.168.1.0/24"], &["192.168.1.9"]),
                "a network this node is attached to",
            ),
            (
                node("x", &["192.168.1.128/25"], &["192.168.1.9"]),
                "a network this node is attached to",
            ),
            (node("x", &["10.245.0.0/24"], &[]), "no IPv4 InternalIP"),
            (
                node("x", &["10.245.0.0/24"], &["fd01::9"]),
                "no IPv4 InternalIP",
            ),
            (
                node("x", &["10.245.0.0/24"], &["192.168.1.1"]),
                "is node a's",
            ),
            (
                node("x", &["10.245.0.0/24"], &["192.168.1.2"]),
                "is node b's",
            ),
            (
                node("x", &["192.168.2.0/24"], &["192.168.1.9"]),
                "an InternalIP of node c",
            ),
            (
                node("x", &["fd02::/64"], &["fd01::9"]),
                "an InternalIP of node c",
            ),
            (
                node("x", &["10.245.0.0/24"], &["127.0.0.1"]),
                "not a unicast",
            ),
            (
                node("x", &["10.245.0.0/24"], &["10.244.1.7"]),
                "inside 10.244.1.0/24, node b's pod CIDR",
            ),
            (
                node("x", &["10.245.0.0/24"], &["224.0.0.1"]),
                "not a unicast",
            ),
            (node("x", &["fd00:99::/64"], &["fe80::1"]), "not a unicast"),
            (
                Node {
                    name: "x".into(),
                    created: None,
                    cidrs: Err("spec.podCIDRs: \"nope\" is not a CIDR".into()),
                    internal_ips: vec!["192.168.1.9".parse().unwrap()],
                },
                "not a CIDR",
            ),
        ];
        for (mut x, why) in hostile {
            // Made after the others, as a new hostile Node is.
            x.created = Some("2026-12-07T11:00:00Z".into());
            let mut nodes = cluster();
            nodes.insert("x".into(), x.clone());
            let p = plan(&settings(Mode::Auto), &nodes, &connected());
            assert_eq!(p.layout, base.layout, "{x:?}");
            assert_eq!(p.refused.len(), 1, "{x:?}: {:?}", p.refused);
            assert_eq!(p.refused[0].node, "x");
            assert!(
                p.refused[0].why.contains(why),
                "{x:?}: {}",
                p.refused[0].why
            );
        }
    }

    #[test]
    fn nodes_that_collide_are_both_refused_and_this_node_keeps_its_own() {
        let mut nodes = cluster();
        let mut d = node("d", &["10.244.1.0/25"], &["192.168.1.4"]);
        d.created = Some("2026-12-07T10:00:00Z".into());
        nodes.insert("d".into(), d.clone());
        let p = plan(&settings(Mode::Auto), &nodes, &connected());
        let who: Vec<&str> = p.refused.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(who, ["d"]);
        assert!(routes(&p).contains(&"10.244.1.0/24 via 192.168.1.2 dev eth0".to_string()));
        // The older of two keeps its CIDR, whatever their names.
        d.created = Some("2026-12-07T08:00:00Z".into());
        nodes.insert("d".into(), d);
        let p = plan(&settings(Mode::Auto), &nodes, &connected());
        let who: Vec<&str> = p.refused.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(who, ["b"]);
        assert!(routes(&p).contains(&"10.244.1.0/25 via 192.168.1.4 dev eth0".to_string()));
        // A new Node claiming an older one's underlay address is refused.
        let mut nodes = cluster();
        let mut e = node("e", &["10.244.5.0/24"], &["192.168.1.2"]);
        e.created = Some("2026-12-07T10:00:00Z".into());
        nodes.insert("e".into(), e);
        let p = plan(&settings(Mode::Auto), &nodes, &connected());
        let who: Vec<&str> = p.refused.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(who, ["e"]);
        assert!(p.refused[0].why.contains("is node b's"), "{:?}", p.refused);
        // This node's own faults do not stop it routing to others directly.
        let mut nodes = cluster();
        nodes.insert("a".into(), node("a", &[], &["192.168.1.1"]));
        let p = plan(&settings(Mode::Auto), &nodes, &connected());
        assert!(routes(&p).contains(&"10.244.1.0/24 via 192.168.1.2 dev eth0".to_string()));
        let c: Vec<_> = p
            .refused
            .iter()
            .map(|r| (r.node.as_str(), r.why.contains("no IPv4 pod CIDR")))
            .collect();
        assert_eq!(c, [("c", true)]);
    }

    #[test]
    fn a_node_on_another_subnet_keeps_its_routes_when_a_node_claims_the_lan() {
        // Seen from c, which is not on 192.168.1.0/24: a new Node whose
        // CIDR is a and b's LAN would take the way to both.
        let mut s = settings(Mode::Auto);
        s.node = "c".into();
        let theirs: Vec<Connected> = ["192.168.2.3/24", "fd02::3/64"]
            .iter()
            .map(|a| Connected {
                link: "eth0".into(),
                addr: a.parse().unwrap(),
                mtu: 1500,
            })
            .collect();
        let base = plan(&s, &cluster(), &theirs);
        for cidr in ["192.168.1.0/25", "192.168.0.0/16"] {
            let mut nodes = cluster();
            let mut x = node("x", &[cidr], &["192.168.1.9"]);
            x.created = Some("2026-12-07T11:00:00Z".into());
            nodes.insert("x".into(), x);
            let p = plan(&s, &nodes, &theirs);
            assert_eq!(p.layout, base.layout, "{cidr}");
            let who: Vec<&str> = p.refused.iter().map(|r| r.node.as_str()).collect();
            assert_eq!(who, ["x"], "{cidr}: {:?}", p.refused);
        }
    }

    #[test]
    fn this_nodes_own_cidr_on_its_bridge_is_not_a_refusal() {
        let mut conn = connected();
        conn.push(Connected {
            link: "cni0".into(),
            addr: "10.244.0.1/24".parse().unwrap(),
            mtu: 1500,
        });
        let p = plan(&settings(Mode::Auto), &cluster(), &conn);
        assert_eq!(p.refused, vec![]);
        assert_eq!(p.layout.masquerade.len(), 2);
        // A wide one is still refused, and then masquerades nothing.
        let mut nodes = cluster();
        nodes.insert("a".into(), node("a", &["0.0.0.0/0"], &["192.168.1.1"]));
        let p = plan(&settings(Mode::Auto), &nodes, &conn);
        assert_eq!(p.refused[0].node, "a", "{:?}", p.refused);
        assert!(p.layout.masquerade.iter().all(|m| m.pods.prefix_len() > 0));
        assert!(routes(&p).contains(&"10.244.1.0/24 via 192.168.1.2 dev eth0".to_string()));
    }

    #[test]
    fn a_plan_applies_to_the_model_and_a_hostile_update_changes_nothing() {
        let mut f = MemoryFabric::new(connected());
        let good = plan(&settings(Mode::Auto), &cluster(), &f.connected.clone());
        assert!(reconcile(&mut f, &good.layout).unwrap().failed.is_empty());
        let mut nodes = cluster();
        nodes.insert("x".into(), node("x", &["0.0.0.0/0"], &["192.168.1.9"]));
        let bad = plan(&settings(Mode::Auto), &nodes, &f.connected.clone());
        assert!(reconcile(&mut f, &bad.layout).unwrap().is_noop());
    }

    #[test]
    fn a_pods_mtu_is_the_uplinks_less_the_widest_tunnel() {
        let link = |name: &str, addr: &str, mtu: u32| Connected {
            link: name.into(),
            addr: addr.parse().unwrap(),
            mtu,
        };
        let links = [
            link("eth0", "192.168.1.5/24", 1500),
            link("eth0", "fd00:1::5/64", 1500),
            link("jumbo", "10.9.0.5/24", 9000),
        ];
        let v4: IpAddr = "192.168.1.5".parse().unwrap();
        let v6: IpAddr = "fd00:1::5".parse().unwrap();
        assert_eq!(pod_mtu(Mode::Auto, &links, &[v4]), Ok(1450));
        assert_eq!(pod_mtu(Mode::Vxlan, &links, &[v4, v6]), Ok(1430));
        assert_eq!(pod_mtu(Mode::Direct, &links, &[v4, v6]), Ok(1500));
        // The smallest of the links that hold an InternalIP.
        let j: IpAddr = "10.9.0.5".parse().unwrap();
        assert_eq!(pod_mtu(Mode::Direct, &links, &[j, v4]), Ok(1500));
        assert_eq!(pod_mtu(Mode::Direct, &links, &[j]), Ok(9000));
        // An InternalIP that no link holds (a Node's lie, or the installer
        // off the node's network) is an error, not a guess.
        let far: IpAddr = "192.168.1.6".parse().unwrap();
        assert!(pod_mtu(Mode::Auto, &links, &[far])
            .unwrap_err()
            .contains("no link of this host holds"));
        assert!(pod_mtu(Mode::Auto, &links, &[]).is_err());
        // Too small a link to carry IPv6 through a tunnel.
        let small = [link("eth0", "fd00:1::5/64", 1330)];
        assert!(pod_mtu(Mode::Vxlan, &small, &[v6])
            .unwrap_err()
            .contains("less than 1280"));
        assert_eq!(pod_mtu(Mode::Direct, &small, &[v6]), Ok(1330));
    }
}
