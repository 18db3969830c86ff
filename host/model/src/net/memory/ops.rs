//! The [`Net`] verbs on the model, each applying the kernel rules the
//! module doc lists.

// The model's state and helpers, and what they import.
use super::*;

impl Net for MemoryNet {
    fn as_memory(&mut self) -> Option<&mut MemoryNet> {
        Some(self)
    }

    fn open(&mut self, ns: NsRef<'_>) -> Result<NsId, NetError> {
        match ns {
            NsRef::Current => Ok(NsId(0)),
            NsRef::Path(p) => self
                .paths
                .get(p)
                .copied()
                .ok_or_else(|| not_found(format!("namespace {}", p.display()))),
            // The model's namespaces have names, never descriptors.
            NsRef::Fd(_) => Err(not_found("a namespace descriptor (the model has none)")),
        }
    }

    fn same_ns(&self, a: NsId, b: NsId) -> bool {
        a == b && (a.0 as usize) < self.nss.len()
    }

    fn create_veth(
        &mut self,
        ns: NsId,
        name: &str,
        peer_name: &str,
        peer_ns: NsId,
        mtu: Option<u32>,
        mac: Option<&str>,
    ) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        check_link_name(peer_name)?;
        if let Some(m) = mac {
            parse_mac(m)?;
        }
        self.ns_ref(peer_ns)?;
        self.name_free(ns, name)?;
        self.name_free(peer_ns, peer_name)?;
        if ns == peer_ns && name == peer_name {
            return Err(NetError::Exists(format!("link {name}")));
        }
        if let Some(m) = mtu {
            if !(68..=65535).contains(&m) {
                return Err(invalid(format!("MTU {m} is out of range 68..=65535")));
            }
        }
        let mtu = mtu.unwrap_or(1500);
        let a = self.new_link(name, "veth", mtu, mac);
        let b = self.new_link(peer_name, "veth", mtu, None);
        let ia = self.insert(ns, a)?;
        let ib = self.insert(peer_ns, b)?;
        if let Some(l) = self.link_mut((ns, ia)) {
            l.peer = Some((peer_ns, ib));
            l.info.peer_index = Some(ib);
        }
        if let Some(l) = self.link_mut((peer_ns, ib)) {
            l.peer = Some((ns, ia));
            l.info.peer_index = Some(ia);
        }
        self.info((ns, ia))
    }

    fn ensure_bridge(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: Option<u32>,
    ) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        if let Some(i) = self.ns_ref(ns)?.find(name) {
            let info = self.info((ns, i))?;
            if info.kind != "bridge" {
                return Err(NetError::Exists(format!(
                    "{name} is a {} link, not a bridge",
                    info.kind
                )));
            }
            return Ok(info);
        }
        if let Some(m) = mtu {
            if !(68..=65535).contains(&m) {
                return Err(invalid(format!("MTU {m} is out of range 68..=65535")));
            }
        }
        // An MTU given at creation does not count as set by the user: the
        // kernel assigns it directly, so ports still pull it down.
        let link = self.new_link(name, "bridge", mtu.unwrap_or(1500), None);
        let i = self.insert(ns, link)?;
        self.info((ns, i))
    }

    fn create_macvlan(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: NsId,
        tap: bool,
    ) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        if let Some(m) = mac {
            parse_mac(m)?;
        }
        self.ns_ref(target)?;
        let mi = self.ns_ref(ns)?.index_of(master)?;
        let lower = (ns, mi);
        let m = self.info(lower)?;
        if mi == LO {
            return Err(invalid(format!(
                "{master} cannot be a macvlan master (errno 22)"
            )));
        }
        if m.master.is_some() {
            return Err(errno(libc::EBUSY, format!("{master} is a bridge port")));
        }
        let uppers: Vec<&MemLink> = self
            .all_links()
            .map(|(_, l)| l)
            .filter(|l| l.lower == Some(lower))
            .collect();
        if uppers.iter().any(|l| l.info.kind == "ipvlan") {
            return Err(errno(libc::EBUSY, format!("{master} is an ipvlan master")));
        }
        let passthru = uppers
            .iter()
            .any(|l| l.info.macvlan_mode == Some(MacvlanMode::Passthru));
        if passthru || (mode == MacvlanMode::Passthru && !uppers.is_empty()) {
            return Err(invalid(format!(
                "{master}: a passthru macvlan excludes any other (errno 22)"
            )));
        }
        self.name_free(target, name)?;
        if let Some(v) = mtu {
            if !(68..=65535).contains(&v) || v > m.mtu {
                return Err(invalid(format!("MTU {v} is out of range 68..={}", m.mtu)));
            }
        }
        let mac = match (mode, mac) {
            (_, Some(mac)) => Some(mac.to_string()),
            (MacvlanMode::Passthru, None) => Some(m.mac.clone()),
            _ => None,
        };
        let kind = if tap { "macvtap" } else { "macvlan" };
        let mut link = self.new_link(name, kind, mtu.unwrap_or(m.mtu), mac.as_deref());
        link.lower = Some(lower);
        link.info.macvlan_mode = Some(mode);
        if tap {
            link.info.txqlen = 500;
        }
        let i = self.insert(target, link)?;
        self.info((target, i))
    }

    fn create_vlan(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: NsId,
    ) -> Result<LinkInfo, NetError> {
        if vlan_id > 4094 {
            return Err(invalid(format!(
                "vlan id {vlan_id} is out of range [0, 4094]"
            )));
        }
        let (lower, m) = self.upper_master(ns, name, master, mtu, target)?;
        if lower.1 == LO {
            return Err(errno(
                libc::EOPNOTSUPP,
                format!("VLANs not supported on {master}"),
            ));
        }
        if self
            .all_links()
            .any(|(_, l)| l.lower == Some(lower) && l.info.vlan_id == Some(vlan_id))
        {
            return Err(NetError::Exists(format!("vlan {vlan_id} on {master}")));
        }
        let mut link = self.new_link(name, "vlan", mtu.unwrap_or(m.mtu), Some(&m.mac));
        link.lower = Some(lower);
        link.info.vlan_id = Some(vlan_id);
        let i = self.insert(target, link)?;
        self.info((target, i))
    }

    fn create_ipvlan(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        mode: IpvlanMode,
        mtu: Option<u32>,
        target: NsId,
    ) -> Result<LinkInfo, NetError> {
        let (lower, m) = self.upper_master(ns, name, master, mtu, target)?;
        if lower.1 == LO || m.kind == "ipvlan" {
            return Err(invalid(format!(
                "{master} cannot be an ipvlan master (errno 22)"
            )));
        }
        if m.master.is_some() {
            return Err(errno(libc::EBUSY, format!("{master} is a bridge port")));
        }
        let uppers: Vec<(NsId, u32)> = self
            .all_links()
            .filter(|(_, l)| l.lower == Some(lower) && l.info.kind == "ipvlan")
            .map(|(n, l)| (n, l.info.index))
            .collect();
        if self.all_links().any(|(_, l)| {
            l.lower == Some(lower) && matches!(l.info.kind.as_str(), "macvlan" | "macvtap")
        }) {
            return Err(errno(libc::EBUSY, format!("{master} is a macvlan master")));
        }
        // The mode belongs to the master's port: as in the kernel, a new
        // ipvlan's mode becomes that of every ipvlan on the master.
        for u in uppers {
            if let Some(l) = self.link_mut(u) {
                l.info.ipvlan_mode = Some(mode);
            }
        }
        let mut link = self.new_link(name, "ipvlan", mtu.unwrap_or(m.mtu), Some(&m.mac));
        link.lower = Some(lower);
        link.info.ipvlan_mode = Some(mode);
        let i = self.insert(target, link)?;
        self.info((target, i))
    }

    fn create_tap(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> Result<LinkInfo, NetError> {
        if let Some(m) = mac {
            parse_mac(m)?;
        }
        self.name_free(ns, name)?;
        if let Some(m) = mtu {
            if !(68..=65521).contains(&m) {
                return Err(invalid(format!("MTU {m} is out of range 68..=65521")));
            }
        }
        let mut link = self.new_link(name, "tun", mtu.unwrap_or(1500), mac);
        link.owner = owner;
        link.group = group;
        link.multi_queue = multi_queue;
        let i = self.insert(ns, link)?;
        self.info((ns, i))
    }

    fn link_by_name(&mut self, ns: NsId, name: &str) -> Result<LinkInfo, NetError> {
        self.info_by_name(ns, name)
    }

    fn link_by_index(&mut self, ns: NsId, index: u32) -> Result<LinkInfo, NetError> {
        self.ns_ref(ns)?;
        self.info((ns, index))
    }

    fn links(&mut self, ns: NsId) -> Result<Vec<LinkInfo>, NetError> {
        let indexes: Vec<u32> = self.ns_ref(ns)?.links.keys().copied().collect();
        indexes.into_iter().map(|i| self.info((ns, i))).collect()
    }

    fn set_link(
        &mut self,
        ns: NsId,
        name: &str,
        change: &LinkChange,
    ) -> Result<LinkInfo, NetError> {
        let index = self.ns_ref(ns)?.index_of(name)?;
        let at = (ns, index);
        if let Some(m) = &change.mac {
            parse_mac(m)?;
        }
        // Check everything first, so a refused change changes nothing.
        if let Some(mtu) = change.mtu {
            self.check_mtu(at, mtu)?;
        }
        let new_master = match change.master.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(br) => {
                let bi = self
                    .ns_ref(ns)?
                    .index_of(br)
                    .map_err(|_| not_found(format!("master {br}")))?;
                let b = self.info((ns, bi))?;
                if b.kind != "bridge" {
                    return Err(invalid(format!(
                        "master {br} is a {} link, not a bridge",
                        b.kind
                    )));
                }
                let me = self.info(at)?;
                if index == LO {
                    return Err(invalid("lo cannot be a bridge port (errno 22)"));
                }
                if me.kind == "bridge" {
                    return Err(errno(libc::ELOOP, "Can not enslave a bridge to a bridge"));
                }
                // A vlan's lower may be a port; macvlan and ipvlan masters
                // hold the receive hook a bridge port needs.
                if self.all_links().any(|(_, l)| {
                    l.lower == Some(at)
                        && matches!(l.info.kind.as_str(), "macvlan" | "macvtap" | "ipvlan")
                }) {
                    return Err(errno(libc::EBUSY, format!("{name} is a macvlan master")));
                }
                Some(Some(bi))
            }
        };
        if change.hairpin.is_some() {
            let master = match new_master {
                Some(m) => m,
                None => self.info(at)?.master,
            };
            let is_bridge =
                master.is_some_and(|m| self.link((ns, m)).is_some_and(|b| b.info.kind == "bridge"));
            if !is_bridge {
                return Err(invalid(format!(
                    "hairpin on {name}: the link is not a bridge port"
                )));
            }
        }

        let old_master = self.info(at)?.master;
        if let Some(mtu) = change.mtu {
            let kind = self.info(at)?.kind;
            if let Some(l) = self.link_mut(at) {
                l.info.mtu = mtu;
                if kind == "bridge" {
                    l.mtu_by_user = true;
                }
            }
            // Macvlans above may not exceed their master's new MTU.
            let uppers: Vec<(NsId, u32)> = self
                .all_links()
                .filter(|(_, l)| l.lower == Some(at) && l.info.mtu > mtu)
                .map(|(n, l)| (n, l.info.index))
                .collect();
            for u in uppers {
                if let Some(l) = self.link_mut(u) {
                    l.info.mtu = mtu;
                }
            }
        }
        if let Some(l) = self.link_mut(at) {
            if let Some(m) = &change.mac {
                l.info.mac = m.to_ascii_lowercase();
                if l.info.kind == "bridge" {
                    l.mac_by_user = true;
                }
            }
            if let Some(p) = change.promisc {
                l.info.promisc = p;
            }
            if let Some(a) = change.allmulti {
                l.info.allmulti = a;
            }
            if let Some(q) = change.txqlen {
                l.info.txqlen = q;
            }
            if let Some(m) = new_master {
                if l.info.master != m {
                    l.hairpin = false;
                }
                l.info.master = m;
            }
            if let Some(h) = change.hairpin {
                l.hairpin = h;
            }
        }
        if let Some(up) = change.up {
            self.set_up(at, up);
        }
        for m in [old_master, self.info(at)?.master].into_iter().flatten() {
            self.bridge_follow((ns, m));
        }
        self.info(at)
    }

    fn delete_link(&mut self, ns: NsId, name: &str) -> Result<(), NetError> {
        let index = self.ns_ref(ns)?.index_of(name)?;
        if index == LO {
            return Err(errno(libc::EOPNOTSUPP, "lo cannot be deleted"));
        }
        self.remove((ns, index));
        Ok(())
    }

    fn add_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError> {
        let n = self.ns_mut(ns)?;
        let index = n.index_of(link)?;
        let l = n
            .links
            .get_mut(&index)
            .ok_or_else(|| not_found(format!("link {link}")))?;
        let dup = l.addrs.iter().any(|a| {
            a.addr() == addr.addr()
                && (addr.addr().is_ipv6() || a.prefix_len() == addr.prefix_len())
        });
        if dup {
            return Err(NetError::Exists(format!("address {addr} on {link}")));
        }
        l.addrs.push(*addr);
        if l.info.up {
            n.add_subnet_route(index, addr, index == LO);
        }
        Ok(())
    }

    fn del_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError> {
        let n = self.ns_mut(ns)?;
        let index = n.index_of(link)?;
        let l = n
            .links
            .get_mut(&index)
            .ok_or_else(|| not_found(format!("link {link}")))?;
        let before = l.addrs.len();
        l.addrs.retain(|a| a != addr);
        if l.addrs.len() == before {
            return Err(not_found(format!("address {addr} on {link}")));
        }
        let net = addr.trunc();
        let still = l.addrs.iter().any(|a| a.trunc() == net);
        if !still {
            n.routes
                .retain(|r| !(r.kernel && r.oif == index && r.route.dst == net));
        }
        Ok(())
    }

    fn addresses(&mut self, ns: NsId, link: &str) -> Result<Vec<IpNet>, NetError> {
        let n = self.ns_ref(ns)?;
        let index = n.index_of(link)?;
        let mut addrs = n.links[&index].addrs.clone();
        // The kernel dumps IPv4 before IPv6.
        addrs.sort_by_key(|a| a.is_ipv6());
        Ok(addrs)
    }

    fn add_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError> {
        let new = self.normalise_route(ns, route)?;
        let n = self.ns_mut(ns)?;
        let clash = n.routes.iter().any(|r| {
            r.route.dst == new.route.dst
                && r.route.table == new.route.table
                && r.route.priority == new.route.priority
        });
        if clash {
            return Err(NetError::Exists(format!("route to {}", route.dst)));
        }
        n.routes.push(new);
        Ok(())
    }

    fn del_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError> {
        check_route(route, false)?;
        let n = self.ns_mut(ns)?;
        let v4 = route.dst.is_ipv4();
        let dst = if v4 { route.dst } else { route.dst.trunc() };
        let table = match route.table {
            None | Some(0) => RT_TABLE_MAIN,
            Some(t) => t,
        };
        let dev = route.dev.as_deref().map(|d| n.index_of(d)).transpose()?;
        let pos = n.routes.iter().position(|r| {
            r.route.dst == dst
                && r.route.table == Some(table)
                && route.gw.is_none_or(|g| r.route.gw == Some(g))
                && dev.is_none_or(|d| r.oif == d)
                && route
                    .priority
                    .is_none_or(|p| p == 0 || r.route.priority == Some(p))
                && (!v4 || route.scope.is_none_or(|s| r.route.scope == Some(s)))
        });
        match pos {
            Some(i) => {
                n.routes.remove(i);
                Ok(())
            }
            None => Err(not_found(format!("route to {}", route.dst))),
        }
    }

    fn routes(&mut self, ns: NsId, link: &str, table: Option<u32>) -> Result<Vec<Route>, NetError> {
        let n = self.ns_ref(ns)?;
        let index = n.index_of(link)?;
        let table = table.unwrap_or(RT_TABLE_MAIN);
        let mut out: Vec<Route> = n
            .routes
            .iter()
            .filter(|r| r.oif == index && r.route.table == Some(table))
            .map(|r| Route {
                dev: Some(link.to_string()),
                ..r.route.clone()
            })
            .collect();
        out.sort_by_key(|r| r.dst.is_ipv6());
        Ok(out)
    }

    fn route_dev(&mut self, ns: NsId, dst: &IpAddr) -> Result<Option<String>, NetError> {
        let n = self.ns_ref(ns)?;
        let best = n
            .routes
            .iter()
            .filter(|r| r.route.table == Some(RT_TABLE_MAIN) && r.route.dst.contains(dst))
            .max_by_key(|r| r.route.dst.prefix_len());
        Ok(best
            .and_then(|r| n.links.get(&r.oif))
            .map(|l| l.info.name.clone()))
    }

    fn create_ifb(&mut self, ns: NsId, name: &str, mtu: Option<u32>) -> Result<LinkInfo, NetError> {
        self.name_free(ns, name)?;
        // ifb has no MTU bounds (min_mtu = max_mtu = 0 in the kernel), and
        // the MTU is part of the one creating message.
        let link = self.new_link(name, "ifb", mtu.unwrap_or(1500), None);
        let i = self.insert(ns, link)?;
        self.set_up((ns, i), true);
        self.info((ns, i))
    }

    fn set_rate_limit(&mut self, ns: NsId, link: &str, limit: &RateLimit) -> Result<(), NetError> {
        let tbf = limit.tbf(self.ticks_per_us())?;
        let index = self.ns_ref(ns)?.index_of(link)?;
        if let Some(l) = self.link_mut((ns, index)) {
            l.qdiscs.retain(|q| q.parent != TC_H_ROOT);
            l.qdiscs.push(Qdisc {
                kind: "tbf".into(),
                handle: TBF_HANDLE,
                parent: TC_H_ROOT,
                tbf: Some(tbf),
            });
        }
        Ok(())
    }

    fn redirect_ingress(&mut self, ns: NsId, link: &str, to: &str) -> Result<(), NetError> {
        let n = self.ns_ref(ns)?;
        let (index, target) = (n.index_of(link)?, n.index_of(to)?);
        let Some(l) = self.link_mut((ns, index)) else {
            return Err(not_found(format!("link {link}")));
        };
        if l.qdiscs.iter().any(|q| q.parent == TC_H_INGRESS) {
            return Err(NetError::Exists(format!("ingress qdisc on {link}")));
        }
        l.qdiscs.push(Qdisc {
            kind: "ingress".into(),
            handle: INGRESS_HANDLE,
            parent: TC_H_INGRESS,
            tbf: None,
        });
        l.redirect = Some(target);
        Ok(())
    }

    fn qdiscs(&mut self, ns: NsId, link: &str) -> Result<Vec<Qdisc>, NetError> {
        let n = self.ns_ref(ns)?;
        let index = n.index_of(link)?;
        Ok(n.links
            .get(&index)
            .map(|l| l.qdiscs.clone())
            .unwrap_or_default())
    }

    fn sysctl_get(&mut self, ns: NsId, key: &str) -> Result<String, NetError> {
        check_sysctl_key(key)?;
        self.ns_ref(ns)?
            .sysctls
            .get(key)
            .cloned()
            .ok_or_else(|| not_found(format!("sysctl {key}")))
    }

    fn sysctl_set(&mut self, ns: NsId, key: &str, value: &str) -> Result<(), NetError> {
        check_sysctl_key(key)?;
        let n = self.ns_mut(ns)?;
        if !n.sysctls.contains_key(key) {
            return Err(not_found(format!("sysctl {key}")));
        }
        let v: i64 = value.trim().parse().map_err(|_| {
            invalid(format!(
                "sysctl {key}: {value:?} is not a number (errno 22)"
            ))
        })?;
        let v = v.to_string();
        match key {
            "net.ipv4.ip_forward" | "net.ipv4.conf.all.forwarding" => n.set_forwarding(true, &v),
            "net.ipv6.conf.all.forwarding" => n.set_forwarding(false, &v),
            _ => {
                n.sysctls.insert(key.to_string(), v);
            }
        }
        Ok(())
    }
}
