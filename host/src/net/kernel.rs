//! [`Net`] on the real kernel: rtnetlink over one blocking socket per opened
//! namespace (netlink-sys + netlink-packet-route, no async runtime).
//!
//! A netlink socket, a `/proc/sys/net` file and a tun device all belong to
//! the network namespace of the thread that opened them. So for each
//! namespace the host keeps an `O_CLOEXEC` fd, and whenever something must
//! be opened inside it, the calling thread `setns`es into it, opens it and
//! `setns`es back before returning (see [`in_netns`]). Only host code runs
//! in between, and a thread that cannot go back aborts the process, so no
//! guest code ever runs in the wrong namespace.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // the one place allowed

mod socket;
pub(crate) use socket::ext_ack_text;

use std::collections::HashMap;
use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use netlink_packet_core::{DefaultNla, Nla, NLM_F_REPLACE};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoMacVtap, InfoPortData,
    InfoPortKind, InfoVeth, InfoVlan, IpVlanMode as NlIpVlanMode, LinkAttribute, LinkFlags,
    LinkInfo as NlLinkInfo, LinkMessage, MacVlanMode as NlMacVlanMode,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterU32Option, TcHandle, TcHeader, TcMessage, TcMirror,
    TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

use self::socket::{NlError, NlSocket};
use super::{
    broadcast_v4, check_link_name, check_route, check_sysctl_key, default_net, format_mac, ip_net,
    parse_mac, IpNet, IpNetFamily, IpvlanMode, LinkChange, LinkInfo, MacvlanMode, Net, NetError,
    NsId, NsRef, Qdisc, RateLimit, Route, Tbf, DEFAULT_TICKS_PER_US, INGRESS_HANDLE, RT_SCOPE_LINK,
    RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, TBF_HANDLE, TC_H_INGRESS, TC_H_ROOT,
};

/// `TCA_TBF_PARMS` and `TCA_TBF_RATE64` (`linux/pkt_sched.h`).
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const ETH_P_ALL: u16 = 0x0003;

/// `struct tc_tbf_qopt`: rate and peak rate (`struct tc_ratespec`, 12
/// bytes each, the rate in its last four), limit, buffer, mtu.
fn tbf_qopt(t: &Tbf) -> Vec<u8> {
    let mut v = vec![0u8; 36];
    let rate = u32::try_from(t.rate).unwrap_or(u32::MAX);
    v[8..12].copy_from_slice(&rate.to_ne_bytes());
    v[24..28].copy_from_slice(&t.limit.to_ne_bytes());
    v[28..32].copy_from_slice(&t.buffer.to_ne_bytes());
    v
}

fn tbf_from_options(opts: &[TcOption]) -> Option<Tbf> {
    // netlink-packet-route keeps the options of a kind it does not know as
    // one attribute: the whole `TCA_OPTIONS` nest.
    let mut attrs: Vec<(u16, Vec<u8>)> = Vec::new();
    for o in opts {
        let TcOption::Other(nla) = o else { continue };
        let mut buf = vec![0u8; nla.value_len()];
        nla.emit_value(&mut buf);
        if nla.kind() & 0x3fff == TCA_OPTIONS {
            let mut rest = buf.as_slice();
            while rest.len() >= 4 {
                let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
                let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
                if len < 4 || len > rest.len() {
                    break;
                }
                attrs.push((kind, rest[4..len].to_vec()));
                rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
            }
        } else {
            attrs.push((nla.kind() & 0x3fff, buf));
        }
    }
    let mut parms = None;
    let mut rate64 = None;
    for (kind, v) in attrs {
        match kind {
            TCA_TBF_PARMS if v.len() >= 36 => parms = Some(v),
            TCA_TBF_RATE64 if v.len() >= 8 => {
                rate64 = v[..8].try_into().ok().map(u64::from_ne_bytes);
            }
            _ => {}
        }
    }
    let p = parms?;
    let u = |i: usize| u32::from_ne_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    Some(Tbf {
        rate: rate64.unwrap_or(u64::from(u(8))),
        limit: u(24),
        buffer: u(28),
    })
}

/// Ticks per microsecond from `/proc/net/psched` (`t2us us2t clock_res`),
/// as the Go netlink library reads it.
fn read_psched() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/net/psched") else {
        return DEFAULT_TICKS_PER_US;
    };
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| u64::from_str_radix(w, 16).ok())
        .collect();
    match v.as_slice() {
        [t2us, us2t, res, ..] if *us2t != 0 => {
            let clock_factor = *res as f64 / 1e6;
            *t2us as f64 / *us2t as f64 * clock_factor
        }
        _ => DEFAULT_TICKS_PER_US,
    }
}

pub struct KernelNet {
    namespaces: Vec<Namespace>,
    /// Link indexes by (namespace, name), as last seen: a change addressed
    /// by index needs no lookup first (an index names one link for its
    /// life, so a stale entry fails, never hits another link; see
    /// [`KernelNet::with_index`]). Forgotten on every delete.
    names: HashMap<(u32, String), u32>,
}

struct Namespace {
    fd: OwnedFd,
    /// `(st_dev, st_ino)` of the namespace file: the namespace's identity.
    key: (u64, u64),
    sock: NlSocket,
}

impl Default for KernelNet {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelNet {
    /// Creates a link stacked on `master` (a link of `ns`) straight in
    /// `target` as `name`, so `name` never has to be free in `ns` and nothing
    /// is left behind half-moved. Without `mtu` it inherits the master's.
    #[allow(clippy::too_many_arguments)]
    fn create_upper(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: NsId,
        info: Vec<NlLinkInfo>,
        kind: &str,
    ) -> Result<LinkInfo, NetError> {
        check_link_name(name)?;
        let mac = mac.map(parse_mac).transpose()?;
        let target_fd = self.raw_fd(target)?;
        let master_index = match self.names.get(&(ns.0, master.to_string())) {
            Some(&i) => i,
            None => self.index_of(ns, master)?,
        };
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(LinkAttribute::Link(master_index));
        msg.attributes.push(LinkAttribute::NetNsFd(target_fd));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = mac {
            msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(info));
        self.new_link(ns, msg, &format!("create {kind} {name} on {master}"))?;
        self.link_by_name(target, name)
    }

    pub fn new() -> Self {
        KernelNet {
            namespaces: Vec::new(),
            names: HashMap::new(),
        }
    }

    fn remember(&mut self, ns: NsId, m: &LinkMessage) {
        for a in &m.attributes {
            if let LinkAttribute::IfName(name) = a {
                self.names.insert((ns.0, name.clone()), m.header.index);
            }
        }
    }

    /// Run `f` with the index of `name`: the one last seen if any (and, if
    /// that link has gone meanwhile, once more with a fresh lookup), else a
    /// fresh one.
    fn with_index<T>(
        &mut self,
        ns: NsId,
        name: &str,
        mut f: impl FnMut(&mut Self, u32) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        if let Some(&index) = self.names.get(&(ns.0, name.to_string())) {
            match f(self, index) {
                Err(NetError::NotFound(_)) => {
                    self.names.remove(&(ns.0, name.to_string()));
                }
                done => return done,
            }
        }
        let index = self.index_of(ns, name)?;
        f(self, index)
    }

    fn ns(&mut self, id: NsId) -> Result<&mut Namespace, NetError> {
        self.namespaces
            .get_mut(id.0 as usize)
            .ok_or_else(|| NetError::NotFound(format!("namespace handle {}", id.0)))
    }

    fn sock(&mut self, id: NsId) -> Result<&mut NlSocket, NetError> {
        Ok(&mut self.ns(id)?.sock)
    }

    fn raw_fd(&mut self, id: NsId) -> Result<i32, NetError> {
        Ok(self.ns(id)?.fd.as_raw_fd())
    }

    /// Run `f` inside namespace `id`.
    fn in_ns<T>(
        &mut self,
        id: NsId,
        f: impl FnOnce() -> io::Result<T>,
    ) -> Result<io::Result<T>, NetError> {
        let ns = self.ns(id)?;
        Ok(in_netns(ns.fd.as_fd(), f))
    }

    fn get_link(&mut self, ns: NsId, name: &str) -> Result<LinkMessage, NetError> {
        check_link_name(name)?;
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link_msg(ns, msg, &format!("link {name}"))
    }

    fn get_link_msg(
        &mut self,
        ns: NsId,
        msg: LinkMessage,
        what: &str,
    ) -> Result<LinkMessage, NetError> {
        match self
            .sock(ns)?
            .get(RouteNetlinkMessage::GetLink(msg))
            .map_err(kerr(what))?
        {
            RouteNetlinkMessage::NewLink(m) => {
                self.remember(ns, &m);
                Ok(m)
            }
            other => Err(unexpected(&other)),
        }
    }

    fn index_of(&mut self, ns: NsId, name: &str) -> Result<u32, NetError> {
        Ok(self.get_link(ns, name)?.header.index)
    }

    fn new_link(&mut self, ns: NsId, msg: LinkMessage, what: &str) -> Result<(), NetError> {
        self.sock(ns)?
            .ack(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(kerr(what))
    }

    fn create_bridge(&mut self, ns: NsId, name: &str, mtu: Option<u32>) -> Result<(), NetError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![NlLinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.new_link(ns, msg, &format!("create bridge {name}"))
    }

    fn set_hairpin(&mut self, ns: NsId, index: u32, name: &str, on: bool) -> Result<(), NetError> {
        let link = self.link_by_index(ns, index)?;
        let master_is_bridge = match link.master {
            Some(m) => self.link_by_index(ns, m)?.kind == "bridge",
            None => false,
        };
        if !master_is_bridge {
            return Err(NetError::Invalid(format!(
                "hairpin on {name}: the link is not a bridge port"
            )));
        }
        // Port settings are IFLA_INFO_SLAVE_DATA, which only RTM_NEWLINK (not
        // RTM_SETLINK) applies to an existing link, as `ip link set type
        // bridge_slave` does.
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            NlLinkInfo::PortKind(InfoPortKind::Bridge),
            NlLinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(
                on,
            )])),
        ]));
        self.sock(ns)?
            .ack(RouteNetlinkMessage::NewLink(msg), 0)
            .map_err(kerr(format!("hairpin on {name}")))
    }

    fn route_msg(&mut self, route: &Route, delete: bool) -> Result<RouteMessage, NetError> {
        check_route(route, !delete)?;
        let v4 = route.dst.is_ipv4();
        let table = route.table.unwrap_or(RT_TABLE_MAIN);
        let mut msg = RouteMessage::default();
        let h = &mut msg.header;
        h.address_family = if v4 {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        h.destination_prefix_length = route.dst.prefix_len();
        // Large table ids only fit RTA_TABLE; the header byte then says 0.
        h.table = u8::try_from(table).unwrap_or(0);
        // iproute2's defaults: `ip route del` matches any scope and protocol;
        // `ip route add` without a gateway makes an IPv4 route link-scoped.
        h.scope = RouteScope::from(match route.scope {
            Some(s) => s,
            None if !v4 => RT_SCOPE_UNIVERSE,
            None if delete => u8::from(RouteScope::NoWhere),
            None if route.gw.is_none() => RT_SCOPE_LINK,
            None => RT_SCOPE_UNIVERSE,
        });
        if !delete {
            h.protocol = RouteProtocol::Boot;
            h.kind = RouteType::Unicast;
        }
        let a = &mut msg.attributes;
        if route.dst.prefix_len() > 0 {
            a.push(RouteAttribute::Destination(RouteAddress::from(
                route.dst.addr(),
            )));
        }
        a.push(RouteAttribute::Table(table));
        if let Some(gw) = route.gw {
            a.push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        if let Some(p) = route.priority {
            a.push(RouteAttribute::Priority(p));
        }
        if !delete {
            if let Some(src) = route.src {
                a.push(RouteAttribute::PrefSource(RouteAddress::from(src)));
            }
            let mut metrics = Vec::new();
            if let Some(mtu) = route.mtu {
                metrics.push(RouteMetric::Mtu(mtu));
            }
            if let Some(mss) = route.advmss {
                metrics.push(RouteMetric::Advmss(mss));
            }
            if !metrics.is_empty() {
                a.push(RouteAttribute::Metrics(metrics));
            }
        }
        Ok(msg)
    }

    /// Add or delete `route`: through its device by the index last seen.
    fn route_op(&mut self, ns: NsId, route: &Route, delete: bool) -> Result<(), NetError> {
        let msg = self.route_msg(route, delete)?;
        let send = |net: &mut Self, msg: RouteMessage| {
            let (req, flags) = match delete {
                true => (RouteNetlinkMessage::DelRoute(msg), 0),
                false => (
                    RouteNetlinkMessage::NewRoute(msg),
                    NLM_F_CREATE | NLM_F_EXCL,
                ),
            };
            net.sock(ns)?
                .ack(req, flags)
                .map_err(kerr(format!("route to {}", route.dst)))
        };
        match &route.dev {
            Some(dev) => self.with_index(ns, dev, |net, index| {
                let mut msg = msg.clone();
                msg.attributes.push(RouteAttribute::Oif(index));
                send(net, msg)
            }),
            None => send(self, msg),
        }
    }

    fn sysctl_path(key: &str) -> Result<String, NetError> {
        check_sysctl_key(key)?;
        Ok(format!("/proc/sys/{}", key.replace('.', "/")))
    }
}

impl Net for KernelNet {
    fn open(&mut self, ns: NsRef<'_>) -> Result<NsId, NetError> {
        let path = match ns {
            NsRef::Current => Path::new("/proc/self/ns/net"),
            NsRef::Path(p) => p,
        };
        let shown = path.display();
        let file = File::open(path).map_err(|e| io_err(format!("namespace {shown}"), &e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_err(format!("namespace {shown}"), &e))?;
        let key = (meta.dev(), meta.ino());
        if let Some(i) = self.namespaces.iter().position(|n| n.key == key) {
            return Ok(NsId(i as u32));
        }
        let fd = OwnedFd::from(file);
        // setns refuses anything but a network namespace file with EINVAL.
        let sock = in_netns(fd.as_fd(), NlSocket::new).map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => NetError::NotFound(format!("{shown} is not a network namespace")),
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
        let all = self
            .sock(ns)?
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
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
        let all = self
            .sock(ns)?
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .map_err(kerr(format!("list addresses of {link}")))?;
        let mut out = Vec::new();
        for m in all {
            let RouteNetlinkMessage::NewAddress(m) = m else {
                continue;
            };
            if m.header.index != index {
                continue;
            }
            // IFA_LOCAL is the address itself; IFA_ADDRESS is the peer on a
            // point-to-point link, and the only one IPv6 reports.
            let mut local = None;
            let mut address = None;
            for a in &m.attributes {
                match a {
                    AddressAttribute::Local(ip) => local = Some(*ip),
                    AddressAttribute::Address(ip) => address = Some(*ip),
                    _ => {}
                }
            }
            if let Some(ip) = local.or(address) {
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
            let mut req = RouteMessage::default();
            req.header.address_family = family;
            let all = self
                .sock(ns)?
                .dump(RouteNetlinkMessage::GetRoute(req))
                .map_err(kerr(format!("list routes of {link}")))?;
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

/// Run `f` with the calling thread inside the network namespace `fd`, then
/// move the thread back to its own namespace; what `f` opened stays bound to
/// `fd`'s namespace. `f` is host code only (it opens a socket or a file), so
/// no guest code runs while the thread is away, and if the thread cannot be
/// moved back the process aborts rather than run anything in the wrong
/// namespace. Not re-entrant: the thread goes back to its own namespace, not
/// to an enclosing `in_netns`'s, so `f` must not call it (none does: each
/// opens one socket or file).
///
/// This replaced a short-lived thread per call: a clone, a stack mapping and
/// two cross-thread hand-offs each time, which on a loaded machine waited a
/// scheduler slice apiece (about 8 per bridge ADD).
pub(crate) fn in_netns<T>(fd: BorrowedFd<'_>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    thread_local! {
        /// The thread's own namespace. Threads only ever leave it inside
        /// `in_netns`, which always brings them back, so it stays valid.
        static HOME: std::cell::OnceCell<OwnedFd> = const { std::cell::OnceCell::new() };
    }
    HOME.with(|home| {
        let home = match home.get() {
            Some(h) => h,
            None => {
                let own = File::open("/proc/thread-self/ns/net")?;
                home.get_or_init(|| OwnedFd::from(own))
            }
        };
        move_into_link_name_space(fd, Some(LinkNameSpaceType::Network))?;
        let back = GoBack(home.as_fd());
        let out = f();
        drop(back);
        out
    })
}

/// Moves the thread back into its namespace when dropped, also when `f`
/// panics.
struct GoBack<'a>(BorrowedFd<'a>);

impl Drop for GoBack<'_> {
    fn drop(&mut self) {
        if move_into_link_name_space(self.0, Some(LinkNameSpaceType::Network)).is_err() {
            // Guest code would next run in another namespace than the one it
            // was given: stop here instead.
            crate::log::error(format_args!(
                "cannot return to the host's network namespace: aborting"
            ));
            std::process::abort();
        }
    }
}

fn kerr(what: impl Display) -> impl FnOnce(NlError) -> NetError {
    move |e| NetError::from_errno(e.errno, format!("{what}: {}", e.msg))
}

fn io_err(what: impl Display, e: &io::Error) -> NetError {
    NetError::from_errno(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("{what}: {e}"),
    )
}

fn unexpected(m: &RouteNetlinkMessage) -> NetError {
    NetError::Kernel {
        errno: libc::EPROTO,
        msg: format!("unexpected netlink reply (type {})", m.message_type()),
    }
}

fn addr_msg(index: u32, addr: &IpNet, add: bool) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.index = index;
    msg.header.prefix_len = addr.prefix_len();
    msg.header.family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    // iproute2 gives 127.0.0.0/8 host scope; the kernel derives IPv6 scope.
    if let IpAddr::V4(a) = addr.addr() {
        if a.is_loopback() {
            msg.header.scope = AddressScope::Host;
        }
    }
    msg.attributes.push(AddressAttribute::Local(addr.addr()));
    msg.attributes.push(AddressAttribute::Address(addr.addr()));
    if add {
        if let Some(brd) = broadcast_v4(addr) {
            msg.attributes.push(AddressAttribute::Broadcast(brd));
        }
    }
    msg
}

fn link_info(m: &LinkMessage) -> LinkInfo {
    let flags = m.header.flags;
    let mut info = LinkInfo {
        index: m.header.index,
        name: String::new(),
        kind: "device".into(),
        mac: String::new(),
        mtu: 0,
        up: flags.contains(LinkFlags::Up),
        oper_up: flags.contains(LinkFlags::Running),
        master: None,
        peer_index: None,
        promisc: flags.contains(LinkFlags::Promisc),
        allmulti: flags.contains(LinkFlags::Allmulti),
        txqlen: 0,
        macvlan_mode: None,
        vlan_id: None,
        ipvlan_mode: None,
    };
    let mut lower = None;
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => info.name = n.clone(),
            LinkAttribute::Address(b) => info.mac = format_mac(b),
            LinkAttribute::Mtu(v) => info.mtu = *v,
            LinkAttribute::Controller(v) if *v != 0 => info.master = Some(*v),
            LinkAttribute::Link(v) => lower = Some(*v),
            LinkAttribute::TxQueueLen(v) => info.txqlen = *v,
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        NlLinkInfo::Kind(k) => info.kind = k.to_string(),
                        NlLinkInfo::Data(InfoData::MacVlan(v)) => {
                            info.macvlan_mode = v.iter().find_map(|x| match x {
                                InfoMacVlan::Mode(m) => macvlan_mode(*m),
                                _ => None,
                            })
                        }
                        NlLinkInfo::Data(InfoData::MacVtap(v)) => {
                            info.macvlan_mode = v.iter().find_map(|x| match x {
                                InfoMacVtap::Mode(m) => macvlan_mode(*m),
                                _ => None,
                            })
                        }
                        NlLinkInfo::Data(InfoData::Vlan(v)) => {
                            info.vlan_id = v.iter().find_map(|x| match x {
                                InfoVlan::Id(id) => Some(*id),
                                _ => None,
                            })
                        }
                        NlLinkInfo::Data(InfoData::IpVlan(v)) => {
                            info.ipvlan_mode = v.iter().find_map(|x| match x {
                                InfoIpVlan::Mode(NlIpVlanMode::L2) => Some(IpvlanMode::L2),
                                InfoIpVlan::Mode(NlIpVlanMode::L3) => Some(IpvlanMode::L3),
                                InfoIpVlan::Mode(NlIpVlanMode::L3S) => Some(IpvlanMode::L3s),
                                _ => None,
                            })
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if info.kind == "veth" {
        info.peer_index = lower;
    }
    info
}

fn macvlan_mode(m: NlMacVlanMode) -> Option<MacvlanMode> {
    match m {
        NlMacVlanMode::Bridge => Some(MacvlanMode::Bridge),
        NlMacVlanMode::Private => Some(MacvlanMode::Private),
        NlMacVlanMode::Vepa => Some(MacvlanMode::Vepa),
        NlMacVlanMode::Passthrough => Some(MacvlanMode::Passthru),
        _ => None,
    }
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some((*v4).into()),
        RouteAddress::Inet6(v6) => Some((*v6).into()),
        _ => None,
    }
}

/// The route `m` as a [`Route`], if it is a unicast route of `table` out of
/// link `index`.
fn to_route(m: &RouteMessage, index: u32, table: u32, link: &str) -> Option<Route> {
    if m.header.kind != RouteType::Unicast {
        return None;
    }
    let mut route_table = u32::from(m.header.table);
    let mut oif = None;
    let mut dst = None;
    let mut route = Route::to(default_net(&IpAddr::from([0u8; 4])));
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => route_table = *t,
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Destination(d) => dst = route_ip(d),
            RouteAttribute::Gateway(g) => route.gw = route_ip(g),
            RouteAttribute::PrefSource(s) => route.src = route_ip(s),
            RouteAttribute::Priority(p) => route.priority = Some(*p),
            RouteAttribute::Metrics(ms) => {
                for metric in ms {
                    match metric {
                        RouteMetric::Mtu(v) => route.mtu = Some(*v),
                        RouteMetric::Advmss(v) => route.advmss = Some(*v),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if route_table != table || oif != Some(index) {
        return None;
    }
    let unspecified = match m.header.address_family {
        AddressFamily::Inet => IpAddr::from([0u8; 4]),
        AddressFamily::Inet6 => IpAddr::from([0u16; 8]),
        _ => return None,
    };
    route.dst = ip_net(
        dst.unwrap_or(unspecified),
        m.header.destination_prefix_length,
    )
    .ok()?;
    route.dev = Some(link.to_string());
    route.table = Some(route_table);
    route.scope = Some(u8::from(m.header.scope));
    Some(route)
}

/// Persistent tap devices through `/dev/net/tun`, which rtnetlink cannot
/// create. Called on a thread inside the target namespace: a tun device is
/// created in the namespace of whoever opened `/dev/net/tun`.
mod tap {
    use std::fs::OpenOptions;
    use std::io;
    use std::os::fd::AsRawFd;

    /// `struct ifreq` as TUNSETIFF reads it: the name, then `ifr_flags` in
    /// the union, padded to the kernel's size.
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }

    const _: () = assert!(std::mem::size_of::<IfReq>() == std::mem::size_of::<libc::ifreq>());

    pub(super) fn create(
        name: &str,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> io::Result<()> {
        let tun = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let fd = tun.as_raw_fd();
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        // The caller checked the name: at most 15 bytes, so NUL-terminated.
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // TUN_EXCL: fail with EBUSY rather than attach to an existing device.
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_TUN_EXCL;
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        req.flags = flags as libc::c_short;
        // SAFETY: `fd` is an open /dev/net/tun; `req` is a live, initialised
        // ifreq-sized buffer the kernel reads (and writes the name back to)
        // during the call only.
        check(unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req as *mut IfReq) })?;
        if let Some(uid) = owner {
            // SAFETY: TUNSETOWNER takes its argument by value; no memory is
            // shared with the kernel.
            check(unsafe { libc::ioctl(fd, libc::TUNSETOWNER, libc::c_ulong::from(uid)) })?;
        }
        if let Some(gid) = group {
            // SAFETY: as above, TUNSETGROUP takes its argument by value.
            check(unsafe { libc::ioctl(fd, libc::TUNSETGROUP, libc::c_ulong::from(gid)) })?;
        }
        // Persistence last: if anything above failed, closing `tun` removes
        // the half-made device.
        // SAFETY: as above, TUNSETPERSIST takes its argument by value.
        check(unsafe { libc::ioctl(fd, libc::TUNSETPERSIST, 1 as libc::c_ulong) })?;
        Ok(())
    }

    fn check(rc: libc::c_int) -> io::Result<()> {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}
