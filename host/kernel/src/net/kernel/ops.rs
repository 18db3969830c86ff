//! The [`Net`] verbs on the kernel: each one request (or a few) over the
//! namespace's rtnetlink socket, `/proc/sys/net` for sysctls, `/dev/net/tun`
//! for taps.

// The backend's own helpers and message builders, and what they import.
use super::*;

impl Net for KernelNet {
    fn open(&mut self, ns: NsRef<'_>) -> Result<NsId, NetError> {
        let (opened, shown) = match ns {
            NsRef::Current => (
                File::open("/proc/self/ns/net"),
                "/proc/self/ns/net".to_string(),
            ),
            NsRef::Path(p) => (File::open(p), p.display().to_string()),
            // A descriptor of its own, kept as long as the namespace's
            // handle: the caller's may close first.
            NsRef::Fd(fd) => (
                fd.try_clone_to_owned().map(File::from),
                "the namespace descriptor passed".to_string(),
            ),
        };
        let file = opened.map_err(|e| io_err(format!("namespace {shown}"), &e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_err(format!("namespace {shown}"), &e))?;
        let key = (meta.dev(), meta.ino());
        if let Some(i) = self.namespaces.iter().position(|n| n.key == key) {
            return Ok(NsId(i as u32));
        }
        let fd = OwnedFd::from(file);
        // setns refuses anything but a network namespace file with EINVAL.
        let sock =
            in_netns_as(fd.as_fd(), key, NlSocket::new).map_err(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => {
                    NetError::NotFound(format!("{shown} is not a network namespace"))
                }
                _ => io_err(format!("namespace {shown}"), &e),
            })?;
        let id = u32::try_from(self.namespaces.len())
            .map_err(|_| NetError::Invalid("too many namespaces".into()))?;
        self.namespaces.push(Namespace { fd, key, sock });
        Ok(NsId(id))
    }

    fn same_ns(&self, a: NsId, b: NsId) -> bool {
        let key = |id: NsId| self.namespaces.get(id.0 as usize).map(|n| n.key);
        matches!((key(a), key(b)), (Some(x), Some(y)) if x == y)
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
        let mac = mac.map(parse_mac).transpose()?;
        let peer_fd = self.raw_fd(peer_ns)?;
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(peer_name.to_string()));
        peer.attributes.push(LinkAttribute::NetNsFd(peer_fd));
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            peer.attributes.push(LinkAttribute::Mtu(mtu));
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = mac {
            msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            NlLinkInfo::Kind(InfoKind::Veth),
            NlLinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        self.new_link(ns, msg, &format!("create veth {name} (peer {peer_name})"))?;
        self.link_by_name(ns, name)
    }

    fn ensure_bridge(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: Option<u32>,
    ) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        let existing = match self.link_by_name(ns, name) {
            Ok(link) => Some(link),
            Err(NetError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let link = match existing {
            Some(link) => link,
            None => match self.create_bridge(ns, name, mtu) {
                // Lost a race with another creator: judge what is there now.
                Ok(()) | Err(NetError::Exists(_)) => self.link_by_name(ns, name)?,
                Err(e) => return Err(e),
            },
        };
        if link.kind != "bridge" {
            return Err(NetError::Exists(format!(
                "{name} is a {} link, not a bridge",
                link.kind
            )));
        }
        Ok(link)
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
        let mode = match mode {
            MacvlanMode::Bridge => NlMacVlanMode::Bridge,
            MacvlanMode::Private => NlMacVlanMode::Private,
            MacvlanMode::Vepa => NlMacVlanMode::Vepa,
            MacvlanMode::Passthru => NlMacVlanMode::Passthrough,
        };
        let info = if tap {
            vec![
                NlLinkInfo::Kind(InfoKind::MacVtap),
                NlLinkInfo::Data(InfoData::MacVtap(vec![InfoMacVtap::Mode(mode)])),
            ]
        } else {
            vec![
                NlLinkInfo::Kind(InfoKind::MacVlan),
                NlLinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(mode)])),
            ]
        };
        let kind = if tap { "macvtap" } else { "macvlan" };
        self.create_upper(ns, name, master, mtu, mac, target, info, kind)
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
            return Err(NetError::Invalid(format!(
                "vlan id {vlan_id} is out of range [0, 4094]"
            )));
        }
        let info = vec![
            NlLinkInfo::Kind(InfoKind::Vlan),
            NlLinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(vlan_id)])),
        ];
        self.create_upper(ns, name, master, mtu, None, target, info, "vlan")
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
        let mode = match mode {
            IpvlanMode::L2 => NlIpVlanMode::L2,
            IpvlanMode::L3 => NlIpVlanMode::L3,
            IpvlanMode::L3s => NlIpVlanMode::L3S,
        };
        let info = vec![
            NlLinkInfo::Kind(InfoKind::IpVlan),
            NlLinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
        ];
        self.create_upper(ns, name, master, mtu, None, target, info, "ipvlan")
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
        check_link_name(name)?;
        if let Some(mac) = mac {
            parse_mac(mac)?;
        }
        let ifname = name.to_string();
        self.in_ns(ns, move || tap::create(&ifname, multi_queue, owner, group))?
            .map_err(|e| match e.raw_os_error() {
                // IFF_TUN_EXCL: the name is taken (by a tap or anything else).
                Some(libc::EBUSY) => NetError::Exists(format!("link {name}")),
                _ => io_err(format!("create tap {name}"), &e),
            })?;
        if mtu.is_some() || mac.is_some() {
            let change = LinkChange {
                mtu,
                mac: mac.map(str::to_string),
                ..LinkChange::default()
            };
            if let Err(e) = self.set_link(ns, name, &change) {
                // Best effort: the caller asked for one tap with these
                // settings, not for a tap without them.
                let _ = self.delete_link(ns, name);
                return Err(e);
            }
        }
        self.link_by_name(ns, name)
    }

    fn link_by_name(&mut self, ns: NsId, name: &str) -> Result<LinkInfo, NetError> {
        Ok(link_info(&self.get_link(ns, name)?))
    }

    fn link_by_index(&mut self, ns: NsId, index: u32) -> Result<LinkInfo, NetError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        Ok(link_info(&self.get_link_msg(
            ns,
            msg,
            &format!("link index {index}"),
        )?))
    }

    fn links(&mut self, ns: NsId) -> Result<Vec<LinkInfo>, NetError> {
        let mut req = LinkMessage::default();
        req.attributes.push(without_stats());
        let all = self
            .sock(ns)?
            .dump(RouteNetlinkMessage::GetLink(req))
            .map_err(kerr("list links"))?;
        let mut out = Vec::new();
        for m in &all {
            if let RouteNetlinkMessage::NewLink(l) = m {
                self.remember(ns, l);
                out.push(link_info(l));
            }
        }
        Ok(out)
    }

    fn set_link(
        &mut self,
        ns: NsId,
        name: &str,
        change: &LinkChange,
    ) -> Result<LinkInfo, NetError> {
        let mac = change.mac.as_deref().map(parse_mac).transpose()?;
        let mut msg = LinkMessage::default();
        for (want, flag) in [
            (change.up, LinkFlags::Up),
            (change.promisc, LinkFlags::Promisc),
            (change.allmulti, LinkFlags::Allmulti),
        ] {
            if let Some(on) = want {
                msg.header.flags.set(flag, on);
                msg.header.change_mask |= flag;
            }
        }
        let a = &mut msg.attributes;
        if let Some(mtu) = change.mtu {
            a.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = mac {
            a.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(q) = change.txqlen {
            a.push(LinkAttribute::TxQueueLen(q));
        }
        match change.master.as_deref() {
            None => {}
            Some("") => msg.attributes.push(LinkAttribute::Controller(0)),
            Some(bridge) => {
                let br = self.link_by_name(ns, bridge).map_err(|e| match e {
                    NetError::NotFound(_) => NetError::NotFound(format!("master {bridge}")),
                    e => e,
                })?;
                if br.kind != "bridge" {
                    return Err(NetError::Invalid(format!(
                        "master {bridge} is a {} link, not a bridge",
                        br.kind
                    )));
                }
                msg.attributes.push(LinkAttribute::Controller(br.index));
            }
        }
        let index = self.with_index(ns, name, |net, index| {
            if !msg.attributes.is_empty() || !msg.header.change_mask.is_empty() {
                let mut msg = msg.clone();
                msg.header.index = index;
                net.sock(ns)?
                    .ack(RouteNetlinkMessage::SetLink(msg), 0)
                    .map_err(kerr(format!("set link {name}")))?;
            }
            Ok(index)
        })?;
        if let Some(on) = change.hairpin {
            self.set_hairpin(ns, index, name, on)?;
        }
        self.link_by_index(ns, index)
    }

    fn delete_link(&mut self, ns: NsId, name: &str) -> Result<(), NetError> {
        check_link_name(name)?;
        // A veth takes its peer along, in whatever namespace.
        self.names.clear();
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.sock(ns)?
            .ack(RouteNetlinkMessage::DelLink(msg), 0)
            .map_err(kerr(format!("link {name}")))
    }

    fn add_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError> {
        self.with_index(ns, link, |net, index| {
            net.sock(ns)?
                .ack(
                    RouteNetlinkMessage::NewAddress(addr_msg(index, addr, true)),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .map_err(kerr(format!("address {addr} on {link}")))
        })
    }

    fn del_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError> {
        self.with_index(ns, link, |net, index| {
            net.sock(ns)?
                .ack(
                    RouteNetlinkMessage::DelAddress(addr_msg(index, addr, false)),
                    0,
                )
                .map_err(kerr(format!("address {addr} on {link}")))
        })
    }

    fn addresses(&mut self, ns: NsId, link: &str) -> Result<Vec<IpNet>, NetError> {
        let index = self.index_of(ns, link)?;
        let all = self.address_dump(ns, index, &format!("list addresses of {link}"))?;
        let mut out = Vec::new();
        for m in all {
            let RouteNetlinkMessage::NewAddress(m) = m else {
                continue;
            };
            if m.header.index != index {
                continue;
            }
            if let Some(ip) = own_address(&m) {
                out.push(ip_net(ip, m.header.prefix_len)?);
            }
        }
        Ok(out)
    }

    fn add_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError> {
        self.route_op(ns, route, false)
    }

    fn del_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError> {
        self.route_op(ns, route, true)
    }

    fn routes(&mut self, ns: NsId, link: &str, table: Option<u32>) -> Result<Vec<Route>, NetError> {
        let index = self.index_of(ns, link)?;
        let table = table.unwrap_or(RT_TABLE_MAIN);
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let all = self.route_dump(ns, family, index, &format!("list routes of {link}"))?;
            for m in all {
                let RouteNetlinkMessage::NewRoute(m) = m else {
                    continue;
                };
                if let Some(r) = to_route(&m, index, table, link) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    fn route_dev(&mut self, ns: NsId, dst: &IpAddr) -> Result<Option<String>, NetError> {
        let mut req = RouteMessage::default();
        req.header.address_family = match dst {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        req.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
        req.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(*dst)));
        let reply = match self.sock(ns)?.get(RouteNetlinkMessage::GetRoute(req)) {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENETUNREACH || e.errno == libc::EHOSTUNREACH => {
                return Ok(None)
            }
            Err(e) => return Err(kerr(format!("route lookup of {dst}"))(e)),
        };
        let RouteNetlinkMessage::NewRoute(m) = reply else {
            return Err(unexpected(&reply));
        };
        let oif = m.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        });
        match oif {
            Some(i) => Ok(Some(self.link_by_index(ns, i)?.name)),
            None => Ok(None),
        }
    }

    fn create_ifb(&mut self, ns: NsId, name: &str, mtu: Option<u32>) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![NlLinkInfo::Kind(
                InfoKind::Ifb,
            )]));
        self.new_link(ns, msg, &format!("create ifb {name}"))?;
        self.link_by_name(ns, name)
    }

    fn set_rate_limit(&mut self, ns: NsId, link: &str, limit: &RateLimit) -> Result<(), NetError> {
        let tbf = limit.tbf(self.ticks_per_us())?;
        let mut opts = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            tbf_qopt(&tbf),
        ))];
        if tbf.rate >= 1 << 32 {
            opts.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                tbf.rate.to_ne_bytes().to_vec(),
            )));
        }
        self.with_index(ns, link, |net, index| {
            let mut msg = TcMessage::with_index(index as i32);
            msg.header.handle = TcHandle::from(TBF_HANDLE);
            msg.header.parent = TcHandle::from(TC_H_ROOT);
            msg.attributes = vec![
                TcAttribute::Kind("tbf".into()),
                TcAttribute::Options(opts.clone()),
            ];
            net.sock(ns)?
                .ack(
                    RouteNetlinkMessage::NewQueueDiscipline(msg),
                    NLM_F_CREATE | NLM_F_REPLACE,
                )
                .map_err(kerr(format!("tbf qdisc on {link}")))
        })
    }

    fn redirect_ingress(&mut self, ns: NsId, link: &str, to: &str) -> Result<(), NetError> {
        let target = self.index_of(ns, to)?;
        self.with_index(ns, link, |net, index| {
            let mut q = TcMessage::with_index(index as i32);
            q.header.handle = TcHandle::from(INGRESS_HANDLE);
            q.header.parent = TcHandle::from(TC_H_INGRESS);
            q.attributes = vec![TcAttribute::Kind("ingress".into())];
            net.sock(ns)?
                .ack(
                    RouteNetlinkMessage::NewQueueDiscipline(q),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .map_err(kerr(format!("ingress qdisc on {link}")))?;
            // tc filter add dev LINK parent ffff: protocol all prio 1 u32
            //   match u32 0 0 flowid 1:1 action mirred egress redirect dev TO
            let mut sel = TcU32Selector::default();
            sel.flags = TcU32SelectorFlags::Terminal;
            sel.nkeys = 1;
            sel.keys = vec![TcU32Key::default()];
            let mut generic = TcActionGeneric::default();
            generic.action = TcActionType::Stolen;
            let mut mirror = TcMirror::default();
            mirror.generic = generic;
            mirror.eaction = TcMirrorActionType::EgressRedir;
            mirror.ifindex = target;
            let mut action = TcAction::default();
            action.tab = 1;
            action.attributes = vec![
                TcActionAttribute::Kind("mirred".into()),
                TcActionAttribute::Options(vec![TcActionOption::Mirror(
                    TcActionMirrorOption::Parms(mirror),
                )]),
            ];
            let mut f = TcMessage::with_index(index as i32);
            f.header = TcHeader {
                index: index as i32,
                handle: TcHandle::UNSPEC,
                parent: TcHandle::from(INGRESS_HANDLE),
                info: (1u32 << 16) | u32::from(ETH_P_ALL.to_be()),
                ..TcHeader::default()
            };
            f.attributes = vec![
                TcAttribute::Kind("u32".into()),
                TcAttribute::Options(vec![
                    TcOption::U32(TcFilterU32Option::ClassId(TcHandle { major: 1, minor: 1 })),
                    TcOption::U32(TcFilterU32Option::Selector(sel)),
                    TcOption::U32(TcFilterU32Option::Action(vec![action])),
                ]),
            ];
            net.sock(ns)?
                .ack(
                    RouteNetlinkMessage::NewTrafficFilter(f),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .map_err(kerr(format!("redirect of {link} to {to}")))
        })
    }

    fn qdiscs(&mut self, ns: NsId, link: &str) -> Result<Vec<Qdisc>, NetError> {
        let index = self.index_of(ns, link)?;
        let all = self
            .sock(ns)?
            .dump(RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()))
            .map_err(kerr(format!("list qdiscs of {link}")))?;
        let mut out = Vec::new();
        for m in all {
            let RouteNetlinkMessage::NewQueueDiscipline(m) = m else {
                continue;
            };
            if m.header.index != index as i32 {
                continue;
            }
            let mut kind = String::new();
            let mut tbf = None;
            for a in &m.attributes {
                match a {
                    TcAttribute::Kind(k) => kind = k.clone(),
                    TcAttribute::Options(o) => tbf = tbf_from_options(o),
                    _ => {}
                }
            }
            out.push(Qdisc {
                tbf: if kind == "tbf" { tbf } else { None },
                kind,
                handle: u32::from(m.header.handle),
                parent: u32::from(m.header.parent),
            });
        }
        Ok(out)
    }

    fn ticks_per_us(&self) -> f64 {
        // The same for every namespace and for the process's life.
        static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        *TICKS.get_or_init(read_psched)
    }

    fn sysctl_get(&mut self, ns: NsId, key: &str) -> Result<String, NetError> {
        let path = Self::sysctl_path(key)?;
        let value = self
            .in_ns(ns, move || std::fs::read_to_string(path))?
            .map_err(|e| io_err(format!("sysctl {key}"), &e))?;
        Ok(value.trim().to_string())
    }

    fn sysctl_set(&mut self, ns: NsId, key: &str, value: &str) -> Result<(), NetError> {
        let path = Self::sysctl_path(key)?;
        let bytes = value.as_bytes().to_vec();
        self.in_ns(ns, move || {
            OpenOptions::new().write(true).open(path)?.write_all(&bytes)
        })?
        .map_err(|e| io_err(format!("sysctl {key}"), &e))
    }
}
