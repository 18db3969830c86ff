//! [`Fabric`] in memory, for the reconciler's tests and the planner's
//! property tests. Modelled as the kernel does it, where the suite in
//! `wasm_cni_kernel::fabric` checks both:
//! * a route needs its device (`NotFound`); one not `onlink` needs its
//!   gateway on a connected subnet of that device (`ENETUNREACH`); a
//!   destination held by any route, ours or another's, is `Exists`;
//! * a device name held by any link is `Exists`; its uplink must exist;
//! * deleting a device takes its peers and the routes through it along;
//! * only what cluster mode made is observed.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use super::{Connected, Fabric, Layout, Masquerade, PeerRoute, Vtep, VxlanPeer, VTEP_PREFIX};
use crate::net::NetError;

#[derive(Debug, Default, Clone)]
pub struct MemoryFabric {
    /// The node's own links and addresses.
    pub connected: Vec<Connected>,
    /// Links of others (an operator's, another plugin's).
    pub foreign_links: BTreeSet<String>,
    /// Routes of others, by destination and device.
    pub foreign_routes: BTreeMap<IpNet, String>,
    own: Layout,
}

impl MemoryFabric {
    pub fn new(connected: Vec<Connected>) -> Self {
        MemoryFabric {
            connected,
            ..MemoryFabric::default()
        }
    }

    fn link_exists(&self, name: &str) -> bool {
        self.connected.iter().any(|c| c.link == name)
            || self.foreign_links.contains(name)
            || self.own.vteps.contains_key(name)
    }
}

impl Fabric for MemoryFabric {
    fn as_memory(&mut self) -> Option<&mut MemoryFabric> {
        Some(self)
    }

    fn connected(&mut self) -> Result<Vec<Connected>, NetError> {
        Ok(self.connected.clone())
    }

    fn observe(&mut self) -> Result<Layout, NetError> {
        Ok(self.own.clone())
    }

    fn add_route(&mut self, r: &PeerRoute) -> Result<(), NetError> {
        if !self.link_exists(&r.dev) {
            return Err(NetError::NotFound(format!("link {}", r.dev)));
        }
        if self.foreign_routes.contains_key(&r.dst)
            || self.own.routes.iter().any(|o| o.dst == r.dst)
        {
            return Err(NetError::Exists(format!("route to {}", r.dst)));
        }
        let reachable = r.onlink
            || self
                .connected
                .iter()
                .any(|c| c.link == r.dev && c.addr.trunc().contains(&r.via));
        if !reachable {
            return Err(NetError::Kernel {
                errno: libc::ENETUNREACH,
                msg: format!("{} is not on a subnet of {}", r.via, r.dev),
            });
        }
        self.own.routes.insert(r.clone());
        Ok(())
    }

    fn del_route(&mut self, r: &PeerRoute) -> Result<(), NetError> {
        let before = self.own.routes.len();
        self.own.routes.retain(|o| o.dst != r.dst);
        if self.own.routes.len() == before {
            return Err(NetError::NotFound(format!("route to {}", r.dst)));
        }
        Ok(())
    }

    fn add_vtep(&mut self, v: &Vtep) -> Result<(), NetError> {
        if !v.name.starts_with(VTEP_PREFIX) {
            return Err(NetError::Invalid(format!(
                "{}: a tunnel device's name starts {VTEP_PREFIX}",
                v.name
            )));
        }
        if self.link_exists(&v.name) {
            return Err(NetError::Exists(format!("link {}", v.name)));
        }
        if !self.connected.iter().any(|c| c.link == v.uplink) {
            return Err(NetError::NotFound(format!("link {}", v.uplink)));
        }
        self.own.vteps.insert(v.name.clone(), v.clone());
        Ok(())
    }

    fn del_vtep(&mut self, name: &str) -> Result<(), NetError> {
        if self.own.vteps.remove(name).is_none() {
            return Err(NetError::NotFound(format!("tunnel device {name}")));
        }
        self.own.peers.retain(|p| p.dev != name);
        self.own.routes.retain(|r| r.dev != name);
        Ok(())
    }

    fn add_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError> {
        if !self.own.vteps.contains_key(&p.dev) {
            return Err(NetError::NotFound(format!("tunnel device {}", p.dev)));
        }
        if self
            .own
            .peers
            .iter()
            .any(|o| o.dev == p.dev && (o.vtep == p.vtep || o.mac == p.mac))
        {
            return Err(NetError::Exists(format!("peer {} on {}", p.vtep, p.dev)));
        }
        self.own.peers.insert(p.clone());
        Ok(())
    }

    fn set_masquerade(&mut self, m: &BTreeSet<Masquerade>) -> Result<(), NetError> {
        self.own.masquerade = m.clone();
        Ok(())
    }

    fn del_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError> {
        if !self.own.peers.remove(p) {
            return Err(NetError::NotFound(format!("peer {} on {}", p.vtep, p.dev)));
        }
        Ok(())
    }
}
