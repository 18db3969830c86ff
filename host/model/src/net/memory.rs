//! [`Net`] in memory: a model of the kernel rules plugins depend on, for
//! tests and the rootless harness. Where it and the kernel share behaviour,
//! the same suite (`net::tests`) checks both.
//!
//! Modelled, as the kernel does it:
//! * every namespace has `lo` (index 1, down, MTU 65536); bringing it up adds
//!   `127.0.0.1/8` and `::1/128`. Link names are unique per namespace,
//!   ifindexes are allocated per namespace.
//! * veth peers: created and deleted together, `peer_index` across
//!   namespaces; a veth has carrier only while both ends are up.
//! * bridges: a master must be a bridge in the same namespace; `lo` cannot
//!   be a port (`Invalid`), nor can a bridge (`ELOOP`) or a macvlan's lower
//!   (`EBUSY`). A bridge whose MTU nobody set follows its smallest port (1500
//!   without ports). A bridge has carrier without ports or with a running port.
//! * macvlan/macvtap: the master must exist and not be `lo` or a bridge port;
//!   MTU at most the master's; passthru takes the master's MAC and excludes
//!   any other macvlan on that master (`EINVAL`). Deleting the master deletes
//!   them. They have carrier when the master runs.
//! * vlan: on any master but `lo` (`EOPNOTSUPP`), one per id and master
//!   (`Exists`), id at most 4094, the master's MAC; it may sit on a bridge
//!   port and its master may become one.
//! * ipvlan: the master must be an ethernet link (not `lo`, not an ipvlan),
//!   not a bridge port and not a macvlan master (`EBUSY`, and the reverse);
//!   the master's MAC. The mode is the master's: creating one in a new mode
//!   switches every ipvlan on that master, as the kernel does.
//! * vlans, ipvlans, macvlans: MTU at most the master's, carrier when the
//!   master runs, deleted with their master.
//! * taps never have carrier (no process attached).
//! * MTU bounds 68..=65535 (tap 65521, `lo` 65536); MACs must be unicast and
//!   non-zero.
//! * addresses: IPv4 `Exists` on the same address and prefix, IPv6 on the
//!   same address, per link. An up link gets the kernel's subnet route for
//!   each address (IPv4: scope link, `src` the address; IPv6: metric 256).
//!   Bringing a link down removes every route through it and its IPv6
//!   addresses (`keep_addr_on_down` is 0); bringing it up restores the subnet
//!   routes. Deleting a link drops its addresses and routes.
//! * routes: the output link must exist (`NotFound`) and be up (`ENETDOWN`).
//!   A gateway must be covered by a directly connected route (no gateway, on
//!   the given link if any) in the route's table or main, else `ENETUNREACH`
//!   (IPv4) / `EHOSTUNREACH` (IPv6); an IPv6 link-local gateway needs only a
//!   link. An IPv4 destination with host bits set is `Invalid`; IPv6 ones are
//!   truncated. `src` must be an address of the namespace. `Exists` on the
//!   same destination and priority in the same table.
//! * sysctls: a per-namespace map holding a few keys with their kernel
//!   defaults (`net.ipv4.ip_forward`, `net.ipv{4,6}.conf.{all,default,IF}.*`
//!   for forwarding, `rp_filter`, `proxy_arp`, `arp_notify`, `arp_ignore`,
//!   `arp_announce`, `route_localnet`, `disable_ipv6`, `accept_ra`,
//!   `accept_dad`);
//!   other keys are `NotFound` until [`MemoryNet::define_sysctl`] adds them.
//!   Values must be integers. `ip_forward` and `conf.all.forwarding` are one
//!   switch that also sets every link's, as in the kernel. (A real new
//!   namespace copies the node's current IPv4 `conf` values; here every
//!   namespace starts from the kernel defaults.)
//!
//! * a bridge whose MAC nobody set takes its lowest port's MAC, and the
//!   zero MAC once its last port leaves; setting its MAC ends that.
//!
//! Not modelled: IPv6 link-local addresses and their routes, DAD, the local
//! routing table, rp_filter semantics, multipath.

mod ops;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use super::{
    check_link_name, check_route, check_sysctl_key, format_mac, parse_mac, IpNet, IpNetFamily,
    Ipv4Net, Ipv6Net, IpvlanMode, LinkChange, LinkInfo, MacvlanMode, Net, NetError, NsId, NsRef,
    Qdisc, RateLimit, Route, INGRESS_HANDLE, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
    TBF_HANDLE, TC_H_INGRESS, TC_H_ROOT,
};

const LO: u32 = 1;
const V6_DEFAULT_METRIC: u32 = 1024;
const V6_KERNEL_METRIC: u32 = 256;

pub struct MemoryNet {
    nss: Vec<MemNs>,
    paths: HashMap<PathBuf, NsId>,
    mac_seq: u32,
}

struct MemNs {
    links: BTreeMap<u32, MemLink>,
    next_index: u32,
    routes: Vec<MemRoute>,
    sysctls: BTreeMap<String, String>,
}

#[derive(Clone)]
struct MemLink {
    info: LinkInfo,
    addrs: Vec<IpNet>,
    /// veth: the peer's namespace and index.
    peer: Option<(NsId, u32)>,
    /// macvlan/macvtap/vlan/ipvlan: the master's namespace and index.
    lower: Option<(NsId, u32)>,
    hairpin: bool,
    /// Bridge: MTU set explicitly, so it no longer follows its ports.
    mtu_by_user: bool,
    /// Bridge: MAC set explicitly (`NET_ADDR_SET`), so it no longer follows
    /// its ports.
    mac_by_user: bool,
    owner: Option<u32>,
    group: Option<u32>,
    /// tap: made multi-queue.
    multi_queue: bool,
    /// The qdiscs set on it (a link starts with none listed).
    qdiscs: Vec<Qdisc>,
    /// Where its ingress is redirected to (an index of its namespace).
    redirect: Option<u32>,
}

#[derive(Clone)]
struct MemRoute {
    /// Normalised: `table`, `scope` always set; `dev` unset (see `oif`).
    route: Route,
    oif: u32,
    kernel: bool,
}

fn slot(id: NsId) -> usize {
    id.0 as usize
}

fn not_found(what: impl Into<String>) -> NetError {
    NetError::NotFound(what.into())
}

fn errno(errno: i32, msg: impl Into<String>) -> NetError {
    NetError::Kernel {
        errno,
        msg: msg.into(),
    }
}

fn invalid(msg: impl Into<String>) -> NetError {
    NetError::Invalid(msg.into())
}

impl Default for MemoryNet {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryNet {
    /// A model with only the node namespace (`NsRef::Current`).
    pub fn new() -> Self {
        let mut net = MemoryNet {
            nss: Vec::new(),
            paths: HashMap::new(),
            mac_seq: 0,
        };
        net.nss.push(MemNs::new());
        net
    }

    /// Make a namespace available at `path` for [`Net::open`], as `ip netns
    /// add` would.
    pub fn add_namespace(&mut self, path: impl Into<PathBuf>) -> NsId {
        let path = path.into();
        if let Some(id) = self.paths.get(&path) {
            return *id;
        }
        let id = NsId(self.nss.len() as u32);
        self.nss.push(MemNs::new());
        self.paths.insert(path, id);
        id
    }

    /// Add (or overwrite) a sysctl the model does not know by default.
    pub fn define_sysctl(&mut self, ns: NsId, key: &str, value: &str) -> Result<(), NetError> {
        check_sysctl_key(key)?;
        self.ns_mut(ns)?
            .sysctls
            .insert(key.to_string(), value.trim().to_string());
        Ok(())
    }

    /// A physical-like link (an uplink) in `ns`, up, as a node has one.
    pub fn add_device(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: u32,
        mac: Option<&str>,
    ) -> Result<LinkInfo, NetError> {
        self.add_link(ns, name, "device", mtu, mac)
    }

    /// A link of `kind` in `ns`, up, as someone other than the plugin made
    /// it (test setup): a `bridge` takes ports and keeps its MTU, any other
    /// kind is a plain link of that name (a `veth` without a peer, a
    /// `macvlan` without a master).
    pub fn add_link(
        &mut self,
        ns: NsId,
        name: &str,
        kind: &str,
        mtu: u32,
        mac: Option<&str>,
    ) -> Result<LinkInfo, NetError> {
        self.name_free(ns, name)?;
        if let Some(m) = mac {
            parse_mac(m)?;
        }
        let mut link = self.new_link(name, kind, mtu, mac);
        link.mtu_by_user = true;
        link.mac_by_user = mac.is_some();
        let i = self.insert(ns, link)?;
        self.set_up((ns, i), true);
        self.info((ns, i))
    }

    /// Delete the namespace at `path` as `ip netns del` and the last
    /// process leaving it would: its links go (a veth's peer elsewhere
    /// with it) and the path no longer opens. False if there was none.
    pub fn remove_namespace(&mut self, path: &std::path::Path) -> bool {
        let Some(id) = self.paths.remove(path) else {
            return false;
        };
        let links: Vec<u32> = self.nss[slot(id)].links.keys().copied().collect();
        for index in links {
            self.remove((id, index));
        }
        self.nss[slot(id)] = MemNs::new();
        true
    }

    /// What the namespace `ns` holds, one line per fact, equal when the
    /// kernel would look the same: links with their settings, addresses and
    /// qdiscs, routes, and the sysctls that differ from a fresh namespace's.
    pub fn dump(&self, ns: NsId) -> Vec<String> {
        let fresh = MemNs::new();
        let mut out = Vec::new();
        if let Some(n) = self.nss.get(slot(ns)) {
            for l in n.links.values() {
                let i = &l.info;
                let master = i
                    .master
                    .and_then(|m| n.links.get(&m))
                    .map_or("-", |m| m.info.name.as_str());
                let addrs: Vec<String> = l.addrs.iter().map(ToString::to_string).collect();
                out.push(format!(
                    "link {} {} {} mtu {} {} master {} promisc {} allmulti {} txqlen {} hairpin {} mac {} addrs [{}] qdiscs {:?} redirect {:?}",
                    i.index,
                    i.name,
                    i.kind,
                    i.mtu,
                    if i.up { "up" } else { "down" },
                    master,
                    i.promisc,
                    i.allmulti,
                    i.txqlen,
                    l.hairpin,
                    i.mac,
                    addrs.join(" "),
                    l.qdiscs,
                    l.redirect,
                ));
            }
            for r in &n.routes {
                out.push(format!(
                    "route {:?} oif {} kernel {}",
                    r.route, r.oif, r.kernel
                ));
            }
            for (k, v) in &n.sysctls {
                if fresh.sysctls.get(k) != Some(v) {
                    out.push(format!("sysctl {k} = {v}"));
                }
            }
        }
        out
    }

    /// Bridge-port hairpin mode of a link, which [`LinkInfo`] does not carry.
    pub fn hairpin(&self, ns: NsId, name: &str) -> Result<bool, NetError> {
        let n = self.ns_ref(ns)?;
        Ok(n.links[&n.index_of(name)?].hairpin)
    }

    /// Owner and group of a tap device.
    pub fn tap_owner(&self, ns: NsId, name: &str) -> Result<(Option<u32>, Option<u32>), NetError> {
        let n = self.ns_ref(ns)?;
        let l = &n.links[&n.index_of(name)?];
        Ok((l.owner, l.group))
    }

    /// Whether a tap device was made multi-queue.
    pub fn tap_multi_queue(&self, ns: NsId, name: &str) -> Result<bool, NetError> {
        let n = self.ns_ref(ns)?;
        Ok(n.links[&n.index_of(name)?].multi_queue)
    }

    /// Every route of `ns`, each table, in the order they were added, with
    /// its device named.
    pub fn all_routes(&self, ns: NsId) -> Result<Vec<Route>, NetError> {
        let n = self.ns_ref(ns)?;
        Ok(n.routes
            .iter()
            .map(|r| Route {
                dev: n.links.get(&r.oif).map(|l| l.info.name.clone()),
                ..r.route.clone()
            })
            .collect())
    }

    fn ns_ref(&self, id: NsId) -> Result<&MemNs, NetError> {
        self.nss
            .get(id.0 as usize)
            .ok_or_else(|| not_found(format!("namespace handle {}", id.0)))
    }

    fn ns_mut(&mut self, id: NsId) -> Result<&mut MemNs, NetError> {
        self.nss
            .get_mut(id.0 as usize)
            .ok_or_else(|| not_found(format!("namespace handle {}", id.0)))
    }

    fn link(&self, at: (NsId, u32)) -> Option<&MemLink> {
        self.nss.get(slot(at.0))?.links.get(&at.1)
    }

    fn link_mut(&mut self, at: (NsId, u32)) -> Option<&mut MemLink> {
        self.nss.get_mut(slot(at.0))?.links.get_mut(&at.1)
    }

    fn next_mac(&mut self) -> String {
        self.mac_seq += 1;
        let [a, b, c, d] = self.mac_seq.to_be_bytes();
        // Locally administered, unicast, like the kernel's random MACs.
        format_mac(&[0x02, 0x57, a, b, c, d])
    }

    /// What the kernel would report as `IFF_RUNNING`.
    fn oper_up(&self, at: (NsId, u32)) -> bool {
        self.link(at).is_some_and(|l| l.info.up && self.carrier(at))
    }

    fn carrier(&self, at: (NsId, u32)) -> bool {
        let Some(l) = self.link(at) else { return false };
        match l.info.kind.as_str() {
            "veth" => l.info.up && l.peer.and_then(|p| self.link(p)).is_some_and(|p| p.info.up),
            "bridge" => {
                let ports: Vec<u32> = self.nss[slot(at.0)]
                    .links
                    .values()
                    .filter(|p| p.info.master == Some(at.1))
                    .map(|p| p.info.index)
                    .collect();
                ports.is_empty() || ports.iter().any(|p| self.oper_up((at.0, *p)))
            }
            "macvlan" | "macvtap" | "vlan" | "ipvlan" => {
                l.lower.is_some_and(|lower| self.oper_up(lower))
            }
            "tun" => false,
            _ => true,
        }
    }

    fn info(&self, at: (NsId, u32)) -> Result<LinkInfo, NetError> {
        let l = self
            .link(at)
            .ok_or_else(|| not_found(format!("link index {}", at.1)))?;
        let mut info = l.info.clone();
        info.oper_up = self.oper_up(at);
        Ok(info)
    }

    fn info_by_name(&self, ns: NsId, name: &str) -> Result<LinkInfo, NetError> {
        let index = self.ns_ref(ns)?.index_of(name)?;
        self.info((ns, index))
    }

    fn name_free(&self, ns: NsId, name: &str) -> Result<(), NetError> {
        check_link_name(name)?;
        if self.ns_ref(ns)?.find(name).is_some() {
            return Err(NetError::Exists(format!("link {name}")));
        }
        Ok(())
    }

    /// Insert a new link with the next index of `ns`; also creates its
    /// per-link sysctls.
    fn insert(&mut self, ns: NsId, mut link: MemLink) -> Result<u32, NetError> {
        let n = self.ns_mut(ns)?;
        let index = n.next_index;
        n.next_index += 1;
        link.info.index = index;
        n.add_link_sysctls(&link.info.name);
        n.links.insert(index, link);
        Ok(index)
    }

    /// The master of a stacked link to be created as `name` in `target`,
    /// with the checks every kind shares: the names, and an MTU within the
    /// master's.
    fn upper_master(
        &self,
        ns: NsId,
        name: &str,
        master: &str,
        mtu: Option<u32>,
        target: NsId,
    ) -> Result<((NsId, u32), LinkInfo), NetError> {
        check_link_name(name)?;
        self.ns_ref(target)?;
        let mi = self.ns_ref(ns)?.index_of(master)?;
        let m = self.info((ns, mi))?;
        self.name_free(target, name)?;
        if let Some(v) = mtu {
            if !(68..=65535).contains(&v) || v > m.mtu {
                return Err(invalid(format!("MTU {v} is out of range 68..={}", m.mtu)));
            }
        }
        Ok(((ns, mi), m))
    }

    fn new_link(&mut self, name: &str, kind: &str, mtu: u32, mac: Option<&str>) -> MemLink {
        let mac = match mac {
            Some(m) => m.to_ascii_lowercase(),
            None => self.next_mac(),
        };
        MemLink {
            info: LinkInfo {
                index: 0,
                name: name.to_string(),
                kind: kind.to_string(),
                mac,
                mtu,
                up: false,
                oper_up: false,
                master: None,
                peer_index: None,
                promisc: false,
                allmulti: false,
                txqlen: 1000,
                macvlan_mode: None,
                vlan_id: None,
                ipvlan_mode: None,
            },
            addrs: Vec::new(),
            peer: None,
            lower: None,
            hairpin: false,
            mtu_by_user: false,
            mac_by_user: false,
            owner: None,
            group: None,
            multi_queue: false,
            qdiscs: Vec::new(),
            redirect: None,
        }
    }

    /// Remove a link and everything that goes with it: its veth peer, the
    /// macvlans on it, its addresses and routes, bridge membership.
    fn remove(&mut self, at: (NsId, u32)) {
        let Some(link) = self.nss[slot(at.0)].links.remove(&at.1) else {
            return;
        };
        let n = &mut self.nss[slot(at.0)];
        n.routes.retain(|r| r.oif != at.1);
        n.remove_link_sysctls(&link.info.name);
        let mut ports = Vec::new();
        for l in n.links.values_mut() {
            if l.info.master == Some(at.1) {
                l.info.master = None;
                l.hairpin = false;
                ports.push(l.info.index);
            }
        }
        if let Some(master) = link.info.master {
            self.bridge_follow((at.0, master));
        }
        if let Some(peer) = link.peer {
            self.remove(peer);
        }
        let uppers: Vec<(NsId, u32)> = self
            .all_links()
            .filter(|(_, l)| l.lower == Some(at))
            .map(|(ns, l)| (ns, l.info.index))
            .collect();
        for u in uppers {
            self.remove(u);
        }
    }

    fn all_links(&self) -> impl Iterator<Item = (NsId, &MemLink)> {
        self.nss
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.links.values().map(move |l| (NsId(i as u32), l)))
    }

    /// A bridge follows its ports: their MTU and their MAC.
    fn bridge_follow(&mut self, br: (NsId, u32)) {
        self.bridge_mtu_follow(br);
        self.bridge_mac_follow(br);
    }

    /// A bridge whose MAC nobody set takes its lowest port's, and the zero
    /// MAC once its last port leaves (a new bridge keeps its random one
    /// until its first port), as the kernel's
    /// `br_stp_recalculate_bridge_id`.
    fn bridge_mac_follow(&mut self, br: (NsId, u32)) {
        let n = &self.nss[slot(br.0)];
        let Some(bridge) = n.links.get(&br.1) else {
            return;
        };
        if bridge.info.kind != "bridge" || bridge.mac_by_user {
            return;
        }
        let mac = n
            .links
            .values()
            .filter(|l| l.info.master == Some(br.1))
            .map(|l| l.info.mac.clone())
            .min()
            .unwrap_or_else(|| format_mac(&[0; 6]));
        if let Some(b) = self.link_mut(br) {
            b.info.mac = mac;
        }
    }

    /// A bridge whose MTU nobody set takes its smallest port's (1500 without
    /// ports), as the kernel's `br_mtu_auto_adjust`.
    fn bridge_mtu_follow(&mut self, br: (NsId, u32)) {
        let n = &self.nss[slot(br.0)];
        let Some(bridge) = n.links.get(&br.1) else {
            return;
        };
        if bridge.info.kind != "bridge" || bridge.mtu_by_user {
            return;
        }
        let mtu = n
            .links
            .values()
            .filter(|l| l.info.master == Some(br.1))
            .map(|l| l.info.mtu)
            .min()
            .unwrap_or(1500);
        if let Some(b) = self.link_mut(br) {
            b.info.mtu = mtu;
        }
    }

    fn check_mtu(&self, at: (NsId, u32), mtu: u32) -> Result<(), NetError> {
        let Some(l) = self.link(at) else {
            return Err(not_found("link"));
        };
        if l.info.kind == "ifb" {
            return Ok(());
        }
        let max = match l.info.kind.as_str() {
            "tun" => 65521,
            _ if at.1 == LO => 65536,
            _ => 65535,
        };
        if mtu < 68 {
            return Err(invalid(format!(
                "MTU {mtu} is less than the device minimum 68"
            )));
        }
        if mtu > max {
            return Err(invalid(format!(
                "MTU {mtu} is greater than the device maximum {max}"
            )));
        }
        if let Some(lower) = l.lower.and_then(|lw| self.link(lw)) {
            if mtu > lower.info.mtu {
                return Err(invalid(format!(
                    "MTU {mtu} is greater than the master's {}",
                    lower.info.mtu
                )));
            }
        }
        Ok(())
    }

    fn set_up(&mut self, at: (NsId, u32), up: bool) {
        let Some(l) = self.link_mut(at) else { return };
        if l.info.up == up {
            return;
        }
        l.info.up = up;
        let loopback = at.1 == LO;
        if up && loopback {
            for a in [
                IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::LOCALHOST, 8)),
                IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128)),
            ] {
                if !l.addrs.contains(&a) {
                    l.addrs.push(a);
                }
            }
        }
        if !up {
            l.addrs.retain(IpNetFamily::is_ipv4);
        }
        let addrs = l.addrs.clone();
        let n = &mut self.nss[slot(at.0)];
        if up {
            for a in &addrs {
                n.add_subnet_route(at.1, a, loopback);
            }
        } else {
            n.routes.retain(|r| r.oif != at.1);
        }
    }

    /// Find the link a gateway is reached through: a directly connected
    /// route covering it, in `table` or main, on `dev` if given.
    fn gateway_link(
        &self,
        ns: NsId,
        gw: &IpAddr,
        dev: Option<u32>,
        table: u32,
    ) -> Result<u32, NetError> {
        if let IpAddr::V6(v6) = gw {
            if v6.is_unicast_link_local() {
                return dev.ok_or_else(|| invalid(format!("gateway {gw} needs a device")));
            }
        }
        let n = self.ns_ref(ns)?;
        let hit = n.routes.iter().find(|r| {
            let t = r.route.table.unwrap_or(RT_TABLE_MAIN);
            (t == table || t == RT_TABLE_MAIN)
                && r.route.gw.is_none()
                && r.route.dst.contains(gw)
                && dev.is_none_or(|d| d == r.oif)
                && (!gw.is_ipv4() || r.route.scope.unwrap_or(0) >= RT_SCOPE_LINK)
        });
        match hit {
            Some(r) => Ok(r.oif),
            None if gw.is_ipv4() => Err(errno(libc::ENETUNREACH, "Nexthop has invalid gateway")),
            None => Err(errno(libc::EHOSTUNREACH, "No route to host")),
        }
    }

    /// `route` as the kernel would store it, or the kernel's refusal.
    fn normalise_route(&self, ns: NsId, route: &Route) -> Result<MemRoute, NetError> {
        check_route(route, true)?;
        let n = self.ns_ref(ns)?;
        let v4 = route.dst.is_ipv4();
        let dst = if v4 {
            if route.dst.trunc() != route.dst {
                return Err(invalid("Invalid prefix for given prefix length (errno 22)"));
            }
            route.dst
        } else {
            route.dst.trunc()
        };
        let table = match route.table {
            None | Some(0) => RT_TABLE_MAIN,
            Some(t) => t,
        };
        let dev = route.dev.as_deref().map(|d| n.index_of(d)).transpose()?;
        let oif = match (route.gw, dev) {
            (Some(gw), dev) => self.gateway_link(ns, &gw, dev, table)?,
            (None, Some(dev)) => dev,
            (None, None) => return Err(invalid("route needs a gateway or a device")),
        };
        if !n.links.get(&oif).is_some_and(|l| l.info.up) {
            return Err(errno(libc::ENETDOWN, "Nexthop device is not up"));
        }
        if let Some(src) = route.src {
            if !n
                .links
                .values()
                .any(|l| l.addrs.iter().any(|a| a.addr() == src))
            {
                return Err(invalid(format!("Invalid prefsrc address {src} (errno 22)")));
            }
        }
        let priority = match (v4, route.priority) {
            (true, Some(0)) | (true, None) => None,
            (false, Some(0)) | (false, None) => Some(V6_DEFAULT_METRIC),
            (_, p) => p,
        };
        let scope = match (v4, route.scope) {
            (false, _) => RT_SCOPE_UNIVERSE,
            (true, Some(s)) => s,
            (true, None) if route.gw.is_none() => RT_SCOPE_LINK,
            (true, None) => RT_SCOPE_UNIVERSE,
        };
        Ok(MemRoute {
            route: Route {
                dst,
                gw: route.gw,
                dev: None,
                src: route.src,
                mtu: route.mtu,
                advmss: route.advmss,
                priority,
                table: Some(table),
                scope: Some(scope),
            },
            oif,
            kernel: false,
        })
    }
}

impl MemNs {
    fn new() -> Self {
        let mut ns = MemNs {
            links: BTreeMap::new(),
            next_index: LO + 1,
            routes: Vec::new(),
            sysctls: BTreeMap::new(),
        };
        for (k, v) in [
            ("net.ipv4.ip_forward", "0"),
            ("net.ipv4.conf.all.forwarding", "0"),
            ("net.ipv4.conf.default.forwarding", "0"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            ("net.ipv4.conf.all.proxy_arp", "0"),
            ("net.ipv4.conf.default.proxy_arp", "0"),
            ("net.ipv6.conf.all.forwarding", "0"),
            ("net.ipv6.conf.default.forwarding", "0"),
            ("net.ipv6.conf.all.disable_ipv6", "0"),
            ("net.ipv6.conf.default.disable_ipv6", "0"),
            ("net.ipv6.conf.all.accept_ra", "1"),
            ("net.ipv6.conf.default.accept_ra", "1"),
            // What tuning configs and portmap's hairpin commonly set.
            ("net.ipv4.conf.all.arp_notify", "0"),
            ("net.ipv4.conf.default.arp_notify", "0"),
            ("net.ipv4.conf.all.arp_ignore", "0"),
            ("net.ipv4.conf.default.arp_ignore", "0"),
            ("net.ipv4.conf.all.arp_announce", "0"),
            ("net.ipv4.conf.default.arp_announce", "0"),
            ("net.ipv4.conf.all.route_localnet", "0"),
            ("net.ipv4.conf.default.route_localnet", "0"),
            ("net.ipv6.conf.all.accept_dad", "1"),
            ("net.ipv6.conf.default.accept_dad", "1"),
        ] {
            ns.sysctls.insert(k.to_string(), v.to_string());
        }
        let lo = LinkInfo {
            index: LO,
            name: "lo".into(),
            kind: "device".into(),
            mac: format_mac(&[0; 6]),
            mtu: 65536,
            up: false,
            oper_up: false,
            master: None,
            peer_index: None,
            promisc: false,
            allmulti: false,
            txqlen: 1000,
            macvlan_mode: None,
            vlan_id: None,
            ipvlan_mode: None,
        };
        ns.add_link_sysctls("lo");
        ns.links.insert(
            LO,
            MemLink {
                info: lo,
                addrs: Vec::new(),
                peer: None,
                lower: None,
                hairpin: false,
                mtu_by_user: false,
                mac_by_user: false,
                owner: None,
                group: None,
                multi_queue: false,
                qdiscs: Vec::new(),
                redirect: None,
            },
        );
        ns
    }

    fn find(&self, name: &str) -> Option<u32> {
        self.links
            .values()
            .find(|l| l.info.name == name)
            .map(|l| l.info.index)
    }

    fn index_of(&self, name: &str) -> Result<u32, NetError> {
        check_link_name(name)?;
        self.find(name)
            .ok_or_else(|| not_found(format!("link {name}")))
    }

    /// Per-link sysctls start from the `default` ones, as in the kernel.
    fn add_link_sysctls(&mut self, name: &str) {
        for fam in ["ipv4", "ipv6"] {
            let prefix = format!("net.{fam}.conf.default.");
            let defaults: Vec<(String, String)> = self
                .sysctls
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
                .collect();
            for (leaf, v) in defaults {
                self.sysctls
                    .insert(format!("net.{fam}.conf.{name}.{leaf}"), v);
            }
        }
    }

    fn remove_link_sysctls(&mut self, name: &str) {
        let v4 = format!("net.ipv4.conf.{name}.");
        let v6 = format!("net.ipv6.conf.{name}.");
        self.sysctls
            .retain(|k, _| !k.starts_with(&v4) && !k.starts_with(&v6));
    }

    /// The kernel's route for an address's subnet, if it makes one.
    fn add_subnet_route(&mut self, oif: u32, a: &IpNet, loopback: bool) {
        // The kernel puts loopback's and /32 (/128) subnets in the local
        // table only, which is not modelled.
        if loopback || a.prefix_len() == if a.is_ipv4() { 32 } else { 128 } {
            return;
        }
        let dst = a.trunc();
        let exists = self.routes.iter().any(|r| {
            r.kernel && r.oif == oif && r.route.dst == dst && r.route.table == Some(RT_TABLE_MAIN)
        });
        if exists {
            return;
        }
        let v4 = a.is_ipv4();
        self.routes.push(MemRoute {
            route: Route {
                dst,
                gw: None,
                dev: None,
                src: if v4 { Some(a.addr()) } else { None },
                mtu: None,
                advmss: None,
                priority: if v4 { None } else { Some(V6_KERNEL_METRIC) },
                table: Some(RT_TABLE_MAIN),
                scope: Some(if v4 { RT_SCOPE_LINK } else { RT_SCOPE_UNIVERSE }),
            },
            oif,
            kernel: true,
        });
    }

    /// Apply a forwarding switch the way `devinet_sysctl_forward` does:
    /// `ip_forward` and `conf.all.forwarding` are the same switch, and
    /// turning it sets every link's (and `default`'s) too.
    fn set_forwarding(&mut self, v4: bool, value: &str) {
        let fam = if v4 { "ipv4" } else { "ipv6" };
        let prefix = format!("net.{fam}.conf.");
        for (k, v) in self.sysctls.iter_mut() {
            if k.starts_with(&prefix) && k.ends_with(".forwarding") {
                *v = value.to_string();
            }
        }
        if v4 {
            self.sysctls
                .insert("net.ipv4.ip_forward".into(), value.to_string());
        }
    }
}
