//! The node's part of the cluster network, as semantic verbs: routes to the
//! pod CIDRs of other nodes, VXLAN tunnel endpoints, and each endpoint's
//! unicast peers.
//!
//! [`Fabric`] has a kernel backend (`wasm_cni_kernel::fabric::KernelFabric`)
//! and, with feature `memory`, [`MemoryFabric`]; one suite checks both.
//! Everything a backend makes is marked as wasm-cni's own, and
//! [`Fabric::observe`] reports only what is so marked:
//! * routes by their protocol, [`ROUTE_PROTOCOL`] (`ip route` shows
//!   `proto 157`), in the main table;
//! * tunnel devices by kind `vxlan` and a name starting [`VTEP_PREFIX`];
//! * peers (forwarding and neighbour entries) by living on such a device;
//! * the masquerade of pod traffic leaving the cluster by its nf_tables
//!   table, `inet` [`NAT_TABLE`], each rule's comment saying what it is.
//!
//! [`reconcile`] turns what a backend observes into a wanted [`Layout`]
//! by removing what is marked and not wanted and adding what is missing. It
//! never names anything it did not observe as its own, so an operator's
//! route, a device of another plugin or a route another daemon holds is
//! never changed: a wanted route whose destination is taken by one is a
//! conflict, reported and left alone.

#[cfg(feature = "memory")]
mod memory;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

use crate::net::NetError;

#[cfg(feature = "memory")]
pub use memory::MemoryFabric;

/// The route protocol number (`rtm_protocol`) that marks a route as cluster
/// mode's own. Unassigned in iproute2's `rt_protos`; BGP daemons use
/// 186-192, Calico 80.
pub const ROUTE_PROTOCOL: u8 = 157;

/// The start of every tunnel device's name; the family follows (`wcni-vx4`,
/// `wcni-vx6`).
pub const VTEP_PREFIX: &str = "wcni-vx";

/// What VXLAN adds to a packet: outer IPv4 or IPv6 header, UDP, VXLAN and
/// the inner Ethernet header.
pub fn vxlan_overhead(underlay: IpAddr) -> u32 {
    match underlay {
        IpAddr::V4(_) => 20 + 8 + 8 + 14,
        IpAddr::V6(_) => 40 + 8 + 8 + 14,
    }
}

/// The tunnel device for one family.
pub fn vtep_name(v6: bool) -> String {
    format!("{VTEP_PREFIX}{}", if v6 { 6 } else { 4 })
}

/// The MAC of a node's tunnel endpoint, derived from its underlay address
/// so that every node computes every peer's MAC without publishing it
/// anywhere (cluster mode writes nothing to the API): locally administered,
/// unicast, and different for different addresses but by a hash collision.
pub fn vtep_mac(underlay: IpAddr) -> [u8; 6] {
    let bytes = match underlay {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let digest = Sha256::digest([b"wasm-cni vtep ".as_slice(), &bytes].concat());
    let mut mac = [0u8; 6];
    mac[0] = 0x0a;
    mac[1..].copy_from_slice(&digest[..5]);
    mac
}

/// A route to another node's pod CIDR: `dst via via dev dev [onlink]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerRoute {
    pub dst: IpNet,
    pub via: IpAddr,
    pub dev: String,
    /// The gateway is a peer's tunnel endpoint, not on any connected subnet.
    pub onlink: bool,
}

impl fmt::Display for PeerRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} via {} dev {}", self.dst, self.via, self.dev)?;
        if self.onlink {
            f.write_str(" onlink")?;
        }
        Ok(())
    }
}

/// This node's VXLAN tunnel endpoint for one family.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vtep {
    pub name: String,
    pub vni: u32,
    /// UDP destination port.
    pub port: u16,
    /// The node's underlay address (its InternalIP) and the link it is on.
    pub local: IpAddr,
    pub uplink: String,
    pub mac: [u8; 6],
    /// The endpoint's own address on the device, as a host route (/32,
    /// /128): the first address of the node's pod CIDR of the family.
    pub addr: IpAddr,
    pub mtu: u32,
}

/// Another node's tunnel endpoint, as this node's device knows it: a
/// permanent neighbour entry (`vtep` is at `mac`) and a forwarding entry
/// (`mac` is behind `remote`, the peer's underlay address).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VxlanPeer {
    pub dev: String,
    pub vtep: IpAddr,
    pub mac: [u8; 6],
    pub remote: IpAddr,
}

/// An address on a link of the node that cluster mode does not own: where
/// peers can be reached directly, and what no Node's pod CIDR may cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    pub link: String,
    /// The address with its prefix (`192.168.1.5/24`).
    pub addr: IpNet,
    pub mtu: u32,
}

/// Traffic from this node's pods in `pods` to anywhere but `except` (the
/// cluster's pod CIDRs of that family) and multicast leaves with the node's
/// address: pod to pod and node to pod is never NATed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Masquerade {
    pub pods: IpNet,
    pub except: BTreeSet<IpNet>,
}

/// The nf_tables table cluster mode owns (family `inet`).
pub const NAT_TABLE: &str = "wasm_cni_cluster";

/// Everything of cluster mode's own on a node, observed or wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub vteps: BTreeMap<String, Vtep>,
    pub peers: BTreeSet<VxlanPeer>,
    pub routes: BTreeSet<PeerRoute>,
    pub masquerade: BTreeSet<Masquerade>,
}

impl Layout {
    pub fn is_empty(&self) -> bool {
        self.vteps.is_empty()
            && self.peers.is_empty()
            && self.routes.is_empty()
            && self.masquerade.is_empty()
    }
}

/// The node's fabric. Every call works in the backend's one namespace (the
/// node's).
pub trait Fabric: Send {
    /// The in-memory model behind this backend, if it is one.
    #[cfg(feature = "memory")]
    fn as_memory(&mut self) -> Option<&mut MemoryFabric> {
        None
    }

    /// Every global-scope address on an up link that is not a tunnel
    /// device of ours (nor `lo`).
    fn connected(&mut self) -> Result<Vec<Connected>, NetError>;
    /// What is marked as cluster mode's (see the module docs), and nothing
    /// else.
    fn observe(&mut self) -> Result<Layout, NetError>;
    /// `Exists` if the table has a route to `dst` (ours or not).
    fn add_route(&mut self, r: &PeerRoute) -> Result<(), NetError>;
    /// Delete our route to `r.dst`; `NotFound` if we have none.
    fn del_route(&mut self, r: &PeerRoute) -> Result<(), NetError>;
    /// Create the device, with its address, up. `Exists` if the name is
    /// taken.
    fn add_vtep(&mut self, v: &Vtep) -> Result<(), NetError>;
    /// Delete one of our devices (with its peers and the routes through
    /// it); `NotFound` unless `name` is one.
    fn del_vtep(&mut self, name: &str) -> Result<(), NetError>;
    fn add_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError>;
    fn del_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError>;
    /// Make the masquerade exactly `m`, at once (no packet sees half of
    /// it); empty removes cluster mode's table.
    fn set_masquerade(&mut self, m: &BTreeSet<Masquerade>) -> Result<(), NetError>;
}

/// What one [`reconcile`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub added: usize,
    pub removed: usize,
    /// What could not be done, with why; the rest was done regardless.
    pub failed: Vec<String>,
}

impl Changes {
    pub fn is_noop(&self) -> bool {
        self.added == 0 && self.removed == 0 && self.failed.is_empty()
    }
}

/// Make the backend's own layout `want`, changing only what differs.
/// Every step is tried: one failure (a route whose destination an operator
/// holds) leaves the rest applied and is reported in [`Changes::failed`].
pub fn reconcile(f: &mut dyn Fabric, want: &Layout) -> Result<Changes, NetError> {
    let mut have = f.observe()?;
    let mut done = Changes::default();
    let mut failed = Vec::new();
    let mut record = |what: String, r: Result<(), NetError>| -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                failed.push(format!("{what}: {e}"));
                false
            }
        }
    };
    // A device whose settings changed is made again: its peers and routes
    // go with it and are added back below.
    let stale: Vec<String> = have
        .vteps
        .iter()
        .filter(|(name, v)| want.vteps.get(*name) != Some(v))
        .map(|(name, _)| name.clone())
        .collect();
    for name in stale {
        if record(format!("deleting {name}"), f.del_vtep(&name)) {
            done.removed += 1;
            have.vteps.remove(&name);
            have.peers.retain(|p| p.dev != name);
            have.routes.retain(|r| r.dev != name);
        }
    }
    for (name, v) in &want.vteps {
        if !have.vteps.contains_key(name) && record(format!("creating {name}"), f.add_vtep(v)) {
            done.added += 1;
        }
    }
    for r in have.routes.difference(&want.routes) {
        if record(format!("deleting route {r}"), f.del_route(r)) {
            done.removed += 1;
        }
    }
    for p in have.peers.difference(&want.peers) {
        if record(
            format!("deleting peer {} on {}", p.vtep, p.dev),
            f.del_peer(p),
        ) {
            done.removed += 1;
        }
    }
    for p in want.peers.difference(&have.peers) {
        if record(
            format!("adding peer {} on {}", p.vtep, p.dev),
            f.add_peer(p),
        ) {
            done.added += 1;
        }
    }
    for r in want.routes.difference(&have.routes) {
        if record(format!("adding route {r}"), f.add_route(r)) {
            done.added += 1;
        }
    }
    if have.masquerade != want.masquerade
        && record("masquerade".into(), f.set_masquerade(&want.masquerade))
    {
        done.added += want.masquerade.difference(&have.masquerade).count();
        done.removed += have.masquerade.difference(&want.masquerade).count();
    }
    done.failed = failed;
    Ok(done)
}
