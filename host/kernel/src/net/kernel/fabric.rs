//! [`Fabric`] on the kernel: routes marked with [`ROUTE_PROTOCOL`], VXLAN
//! devices named [`VTEP_PREFIX`]`*`, and the permanent neighbour and
//! forwarding entries on them, over the namespace's rtnetlink socket; the
//! masquerade in its own nf_tables table.

use netlink_packet_route::address::AddressFlags;
use netlink_packet_route::link::{InfoVxlan, LinkFlags as NlLinkFlags};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::RouteFlags;
use std::collections::BTreeSet;

use wasm_cni_model::fabric::{
    Connected, Fabric, Layout, Masquerade, PeerRoute, Vtep, VxlanPeer, NAT_TABLE, ROUTE_PROTOCOL,
    VTEP_PREFIX,
};

use super::*;
use crate::filter::kernel::ClusterNat;

/// The node's fabric in one namespace (the daemon's own, or a test's).
pub struct KernelFabric {
    net: KernelNet,
    ns: NsId,
    /// nf_tables, opened when first needed.
    nat: Option<ClusterNat>,
}

/// A link as a dump reports it: what the fabric needs of it.
struct Dumped {
    name: String,
    up: bool,
    mtu: u32,
    mac: [u8; 6],
    vxlan: Option<Vec<InfoVxlan>>,
}

impl KernelFabric {
    pub fn open(ns: NsRef<'_>) -> Result<Self, NetError> {
        let mut net = KernelNet::new();
        let ns = net.open(ns)?;
        Ok(KernelFabric { net, ns, nat: None })
    }

    fn nat(&mut self) -> Result<&mut ClusterNat, NetError> {
        if self.nat.is_none() {
            let fd = self.net.ns(self.ns)?.fd.as_fd();
            let nat = ClusterNat::open(fd).map_err(|e| io_err("netfilter socket", &e))?;
            self.nat = Some(nat);
        }
        self.nat
            .as_mut()
            .ok_or_else(|| NetError::NotFound("netfilter socket".into()))
    }

    fn sock(&mut self) -> Result<&mut NlSocket, NetError> {
        self.net.sock(self.ns)
    }

    fn link_dump(&mut self) -> Result<HashMap<u32, Dumped>, NetError> {
        let mut req = LinkMessage::default();
        req.attributes.push(without_stats());
        let all = self
            .sock()?
            .dump(RouteNetlinkMessage::GetLink(req))
            .map_err(kerr("listing links"))?;
        let mut out = HashMap::new();
        for m in all {
            let RouteNetlinkMessage::NewLink(m) = m else {
                continue;
            };
            let mut d = Dumped {
                name: String::new(),
                up: m.header.flags.contains(NlLinkFlags::Up),
                mtu: 0,
                mac: [0; 6],
                vxlan: None,
            };
            for a in &m.attributes {
                match a {
                    LinkAttribute::IfName(n) => d.name = n.clone(),
                    LinkAttribute::Mtu(v) => d.mtu = *v,
                    LinkAttribute::Address(a) if a.len() == 6 => d.mac.copy_from_slice(a),
                    LinkAttribute::LinkInfo(info) => {
                        for i in info {
                            if let NlLinkInfo::Data(InfoData::Vxlan(v)) = i {
                                d.vxlan = Some(v.clone());
                            }
                        }
                    }
                    _ => {}
                }
            }
            out.insert(m.header.index, d);
        }
        Ok(out)
    }

    /// Every address of the namespace: link index, address with prefix,
    /// global scope.
    fn addr_dump(&mut self) -> Result<Vec<(u32, IpNet, bool)>, NetError> {
        let all = self
            .sock()?
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .map_err(kerr("listing addresses"))?;
        let mut out = Vec::new();
        for m in all {
            let RouteNetlinkMessage::NewAddress(m) = m else {
                continue;
            };
            if let Some(ip) = own_address(&m) {
                if let Ok(net) = ip_net(ip, m.header.prefix_len) {
                    let global = m.header.scope == AddressScope::Universe;
                    out.push((m.header.index, net, global));
                }
            }
        }
        Ok(out)
    }

    /// Our devices, by index: a vxlan named `VTEP_PREFIX*`.
    fn ours(links: &HashMap<u32, Dumped>) -> impl Iterator<Item = (u32, &Dumped)> {
        links
            .iter()
            .filter(|(_, d)| d.vxlan.is_some() && d.name.starts_with(VTEP_PREFIX))
            .map(|(i, d)| (*i, d))
    }

    fn index(&mut self, name: &str) -> Result<u32, NetError> {
        self.net.index_of(self.ns, name)
    }

    fn route_msg(&mut self, r: &PeerRoute) -> Result<RouteMessage, NetError> {
        let index = self.index(&r.dev)?;
        let mut msg = RouteMessage::default();
        let h = &mut msg.header;
        h.address_family = family_of(&r.dst.addr());
        h.destination_prefix_length = r.dst.prefix_len();
        h.table = RT_TABLE_MAIN as u8;
        h.protocol = RouteProtocol::from(ROUTE_PROTOCOL);
        h.scope = RouteScope::Universe;
        h.kind = RouteType::Unicast;
        if r.onlink {
            h.flags = RouteFlags::Onlink;
        }
        let a = &mut msg.attributes;
        a.push(RouteAttribute::Destination(RouteAddress::from(
            r.dst.trunc().addr(),
        )));
        a.push(RouteAttribute::Table(RT_TABLE_MAIN));
        a.push(RouteAttribute::Gateway(RouteAddress::from(r.via)));
        a.push(RouteAttribute::Oif(index));
        Ok(msg)
    }

    fn neigh(
        &mut self,
        dev: u32,
        family: AddressFamily,
    ) -> Result<Vec<NeighbourMessage>, NetError> {
        // The kernel filters a neighbour dump by an attribute, and a
        // forwarding-table dump by the header's port (a strict check refuses
        // anything else).
        let mut req = NeighbourMessage::default();
        req.header.family = family;
        if family == AddressFamily::Bridge {
            req.header.ifindex = dev;
        } else {
            req.attributes.push(NeighbourAttribute::IfIndex(dev));
        }
        let all = self
            .sock()?
            .dump(RouteNetlinkMessage::GetNeighbour(req))
            .map_err(kerr("listing neighbours"))?;
        Ok(all
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewNeighbour(n)
                    if n.header.ifindex == dev && n.header.state == NeighbourState::Permanent =>
                {
                    Some(n)
                }
                _ => None,
            })
            .collect())
    }

    fn peer_msgs(&mut self, p: &VxlanPeer) -> Result<[NeighbourMessage; 2], NetError> {
        let index = self.index(&p.dev)?;
        let mut neigh = NeighbourMessage::default();
        neigh.header.family = family_of(&p.vtep);
        neigh.header.ifindex = index;
        neigh.header.state = NeighbourState::Permanent;
        neigh.header.kind = RouteType::Unicast;
        neigh
            .attributes
            .push(NeighbourAttribute::Destination(neigh_addr(p.vtep)));
        neigh
            .attributes
            .push(NeighbourAttribute::LinkLayerAddress(p.mac.to_vec()));
        let mut fdb = NeighbourMessage::default();
        fdb.header.family = AddressFamily::Bridge;
        fdb.header.ifindex = index;
        fdb.header.state = NeighbourState::Permanent;
        fdb.header.flags = NeighbourFlags::Own;
        fdb.attributes
            .push(NeighbourAttribute::LinkLayerAddress(p.mac.to_vec()));
        fdb.attributes
            .push(NeighbourAttribute::Destination(neigh_addr(p.remote)));
        Ok([neigh, fdb])
    }
}

fn family_of(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn neigh_addr(ip: IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    }
}

fn neigh_ip(m: &NeighbourMessage) -> Option<IpAddr> {
    m.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        // A forwarding entry's (family bridge) is not parsed by family.
        NeighbourAttribute::Destination(NeighbourAddress::Other(raw)) => match raw.len() {
            4 => <[u8; 4]>::try_from(raw.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(raw.as_slice()).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    })
}

fn neigh_mac(m: &NeighbourMessage) -> Option<[u8; 6]> {
    m.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(l) => <[u8; 6]>::try_from(l.as_slice()).ok(),
        _ => None,
    })
}

fn unspecified(like: &IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::from([0u8; 4]),
        IpAddr::V6(_) => IpAddr::from([0u16; 8]),
    }
}

impl Fabric for KernelFabric {
    fn connected(&mut self) -> Result<Vec<Connected>, NetError> {
        let links = self.link_dump()?;
        let mut out = Vec::new();
        for (index, net, global) in self.addr_dump()? {
            let Some(link) = links.get(&index) else {
                continue;
            };
            let ours = link.vxlan.is_some() && link.name.starts_with(VTEP_PREFIX);
            if global && link.up && !ours && link.name != "lo" {
                out.push(Connected {
                    link: link.name.clone(),
                    addr: net,
                    mtu: link.mtu,
                });
            }
        }
        out.sort_by(|a, b| (&a.link, a.addr).cmp(&(&b.link, b.addr)));
        Ok(out)
    }

    fn observe(&mut self) -> Result<Layout, NetError> {
        let links = self.link_dump()?;
        let addrs = self.addr_dump()?;
        let mut layout = Layout::default();
        let ours: Vec<(u32, String)> = Self::ours(&links)
            .map(|(i, d)| (i, d.name.clone()))
            .collect();
        for (index, d) in Self::ours(&links) {
            let mut v = Vtep {
                name: d.name.clone(),
                vni: 0,
                port: 0,
                local: IpAddr::from([0u8; 4]),
                uplink: String::new(),
                mac: d.mac,
                addr: IpAddr::from([0u8; 4]),
                mtu: d.mtu,
            };
            for i in d.vxlan.iter().flatten() {
                match i {
                    InfoVxlan::Id(id) => v.vni = *id,
                    InfoVxlan::Port(p) => v.port = *p,
                    InfoVxlan::Local(a) => v.local = IpAddr::V4(*a),
                    InfoVxlan::Local6(a) => v.local = IpAddr::V6(*a),
                    InfoVxlan::Link(l) => {
                        v.uplink = links.get(l).map(|u| u.name.clone()).unwrap_or_default()
                    }
                    _ => {}
                }
            }
            if let Some((_, net, _)) = addrs
                .iter()
                .find(|(i, n, _)| *i == index && n.prefix_len() == n.max_prefix_len())
            {
                v.addr = net.addr();
            }
            layout.vteps.insert(v.name.clone(), v);
        }
        let names: HashMap<u32, String> = links.iter().map(|(i, d)| (*i, d.name.clone())).collect();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut req = RouteMessage::default();
            req.header.address_family = family;
            req.header.table = RT_TABLE_MAIN as u8;
            let dumped = self
                .sock()?
                .dump(RouteNetlinkMessage::GetRoute(req))
                .map_err(kerr("listing routes"))?;
            for m in dumped {
                let RouteNetlinkMessage::NewRoute(m) = m else {
                    continue;
                };
                if u8::from(m.header.protocol) != ROUTE_PROTOCOL {
                    continue;
                }
                if let Some(r) = peer_route(&m, &names) {
                    layout.routes.insert(r);
                }
            }
        }
        for (index, name) in ours {
            let mut fdb: HashMap<[u8; 6], IpAddr> = HashMap::new();
            for m in self.neigh(index, AddressFamily::Bridge)? {
                if let (Some(mac), Some(ip)) = (neigh_mac(&m), neigh_ip(&m)) {
                    fdb.insert(mac, ip);
                }
            }
            let like = layout
                .vteps
                .get(&name)
                .map(|v| v.local)
                .unwrap_or(IpAddr::from([0u8; 4]));
            let mut seen = Vec::new();
            for family in [AddressFamily::Inet, AddressFamily::Inet6] {
                for m in self.neigh(index, family)? {
                    let (Some(ip), Some(mac)) = (neigh_ip(&m), neigh_mac(&m)) else {
                        continue;
                    };
                    let remote = fdb.get(&mac).copied().unwrap_or(unspecified(&like));
                    seen.push(mac);
                    layout.peers.insert(VxlanPeer {
                        dev: name.clone(),
                        vtep: ip,
                        mac,
                        remote,
                    });
                }
            }
            // A forwarding entry without its neighbour is still ours to
            // remove.
            for (mac, remote) in fdb {
                if !seen.contains(&mac) {
                    layout.peers.insert(VxlanPeer {
                        dev: name.clone(),
                        vtep: unspecified(&remote),
                        mac,
                        remote,
                    });
                }
            }
        }
        layout.masquerade = self.nat()?.observe().map_err(|e| {
            NetError::from_errno(e.errno, format!("listing {NAT_TABLE}: {}", e.msg))
        })?;
        Ok(layout)
    }

    fn set_masquerade(&mut self, m: &BTreeSet<Masquerade>) -> Result<(), NetError> {
        self.nat()?
            .apply(m)
            .map_err(|e| NetError::from_errno(e.errno, format!("table {NAT_TABLE}: {}", e.msg)))
    }

    fn add_route(&mut self, r: &PeerRoute) -> Result<(), NetError> {
        let msg = self.route_msg(r)?;
        self.sock()?
            .ack(
                RouteNetlinkMessage::NewRoute(msg),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .map_err(kerr(format!("route {r}")))
    }

    fn del_route(&mut self, r: &PeerRoute) -> Result<(), NetError> {
        // The protocol is part of the match: the kernel deletes only a
        // route of ours.
        let mut msg = self.route_msg(r)?;
        msg.header.kind = RouteType::Unspec;
        msg.header.flags = RouteFlags::empty();
        msg.attributes
            .retain(|a| !matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::Oif(_)));
        self.sock()?
            .ack(RouteNetlinkMessage::DelRoute(msg), 0)
            .map_err(kerr(format!("route {r}")))
    }

    fn add_vtep(&mut self, v: &Vtep) -> Result<(), NetError> {
        check_link_name(&v.name)?;
        if !v.name.starts_with(VTEP_PREFIX) {
            return Err(NetError::Invalid(format!(
                "{}: a tunnel device's name starts {VTEP_PREFIX}",
                v.name
            )));
        }
        let uplink = self.index(&v.uplink)?;
        let local = match v.local {
            IpAddr::V4(a) => InfoVxlan::Local(a),
            IpAddr::V6(a) => InfoVxlan::Local6(a),
        };
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(v.name.clone()));
        msg.attributes.push(LinkAttribute::Address(v.mac.to_vec()));
        msg.attributes.push(LinkAttribute::Mtu(v.mtu));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            NlLinkInfo::Kind(InfoKind::Vxlan),
            NlLinkInfo::Data(InfoData::Vxlan(vec![
                InfoVxlan::Id(v.vni),
                local,
                InfoVxlan::Link(uplink),
                InfoVxlan::Port(v.port),
                // Peers are known from the API, never learned from packets.
                InfoVxlan::Learning(false),
            ])),
        ]));
        self.net
            .new_link(self.ns, msg, &format!("create vxlan {}", v.name))?;
        // Nothing half-made is left: a device without its address is gone.
        let finish = |me: &mut Self| -> Result<(), NetError> {
            let index = me.index(&v.name)?;
            let prefix = if v.addr.is_ipv4() { 32 } else { 128 };
            let mut addr = addr_msg(index, &ip_net(v.addr, prefix)?, true);
            // A tentative address cannot be a source: no DAD on a tunnel
            // whose peers are all known.
            addr.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
            me.sock()?
                .ack(
                    RouteNetlinkMessage::NewAddress(addr),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .map_err(kerr(format!("address {} on {}", v.addr, v.name)))?;
            let change = LinkChange {
                up: Some(true),
                ..LinkChange::default()
            };
            me.net.set_link(me.ns, &v.name, &change).map(|_| ())
        };
        finish(self).inspect_err(|_| {
            let _ = self.net.delete_link(self.ns, &v.name);
        })
    }

    fn del_vtep(&mut self, name: &str) -> Result<(), NetError> {
        let links = self.link_dump()?;
        if !Self::ours(&links).any(|(_, d)| d.name == name) {
            return Err(NetError::NotFound(format!("tunnel device {name}")));
        }
        self.net.delete_link(self.ns, name)
    }

    fn add_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError> {
        let [neigh, fdb] = self.peer_msgs(p)?;
        let what = format!("peer {} on {}", p.vtep, p.dev);
        // The device is ours: an entry on it the kernel made (an ARP
        // attempt) is replaced.
        let flags = NLM_F_CREATE | NLM_F_REPLACE;
        self.sock()?
            .ack(RouteNetlinkMessage::NewNeighbour(fdb), flags)
            .map_err(kerr(&what))?;
        self.sock()?
            .ack(RouteNetlinkMessage::NewNeighbour(neigh), flags)
            .map_err(kerr(&what))
    }

    fn del_peer(&mut self, p: &VxlanPeer) -> Result<(), NetError> {
        let [neigh, fdb] = self.peer_msgs(p)?;
        let what = format!("peer {} on {}", p.vtep, p.dev);
        let mut found = false;
        for (msg, present) in [
            (neigh, !p.vtep.is_unspecified()),
            (fdb, !p.remote.is_unspecified()),
        ] {
            if !present {
                continue;
            }
            match self
                .sock()?
                .ack(RouteNetlinkMessage::DelNeighbour(msg), 0)
                .map_err(kerr(&what))
            {
                Ok(()) => found = true,
                Err(NetError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if !found {
            return Err(NetError::NotFound(what));
        }
        Ok(())
    }
}

/// A route of ours as a [`PeerRoute`]: unicast, with a gateway and one
/// output link.
fn peer_route(m: &RouteMessage, names: &HashMap<u32, String>) -> Option<PeerRoute> {
    let mut table = u32::from(m.header.table);
    let (mut dst, mut via, mut oif) = (None, None, None);
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(d) => dst = route_ip(d),
            RouteAttribute::Gateway(g) => via = route_ip(g),
            RouteAttribute::Oif(i) => oif = Some(*i),
            _ => {}
        }
    }
    if table != RT_TABLE_MAIN {
        return None;
    }
    let via = via?;
    let dst = dst.unwrap_or(unspecified(&via));
    Some(PeerRoute {
        dst: ip_net(dst, m.header.destination_prefix_length).ok()?,
        via,
        dev: names.get(&oif?)?.clone(),
        onlink: m.header.flags.contains(RouteFlags::Onlink),
    })
}
