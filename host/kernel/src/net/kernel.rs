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

mod fabric;
mod ops;
mod socket;
mod tap;
pub use fabric::KernelFabric;
pub(crate) use socket::ext_ack_text;

use std::collections::HashMap;
use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use netlink_packet_core::{DefaultNla, Nla, NLM_F_REPLACE};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoMacVtap, InfoPortData,
    InfoPortKind, InfoVeth, InfoVlan, IpVlanMode as NlIpVlanMode, LinkAttribute, LinkExtentMask,
    LinkFlags, LinkInfo as NlLinkInfo, LinkMessage, MacVlanMode as NlMacVlanMode,
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
        Ok(in_netns_as(ns.fd.as_fd(), ns.key, f))
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
        mut msg: LinkMessage,
        what: &str,
    ) -> Result<LinkMessage, NetError> {
        msg.attributes.push(without_stats());
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

    /// Every address of link `index`: the kernel filters by the index
    /// (strict checking), and so do callers, for kernels that cannot.
    fn address_dump(
        &mut self,
        ns: NsId,
        index: u32,
        what: &str,
    ) -> Result<Vec<RouteNetlinkMessage>, NetError> {
        let mut req = AddressMessage::default();
        req.header.index = index;
        self.sock(ns)?
            .dump(RouteNetlinkMessage::GetAddress(req))
            .map_err(kerr(what))
    }

    /// Every route of `family` through link `index`, in any table: filtered
    /// as [`Self::address_dump`] is. The table is left to the caller: a
    /// table the kernel does not have is an error to a filtered dump, and
    /// no routes to the caller.
    fn route_dump(
        &mut self,
        ns: NsId,
        family: AddressFamily,
        index: u32,
        what: &str,
    ) -> Result<Vec<RouteNetlinkMessage>, NetError> {
        let mut req = RouteMessage::default();
        req.header.address_family = family;
        req.attributes.push(RouteAttribute::Oif(index));
        self.sock(ns)?
            .dump(RouteNetlinkMessage::GetRoute(req))
            .map_err(kerr(what))
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
///
/// A thread asked into its own namespace runs `f` where it is: a process
/// in the node's namespace (a daemon, a per-invocation call) does most of
/// the node side's work there, and each move was two `setns`.
pub(crate) fn in_netns<T>(fd: BorrowedFd<'_>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let target = rustix::fs::fstat(fd)?;
    in_netns_as(fd, (target.st_dev, target.st_ino), f)
}

/// [`in_netns`] for a namespace whose (device, inode) `key` the caller
/// took from `fd` already.
fn in_netns_as<T>(
    fd: BorrowedFd<'_>,
    key: (u64, u64),
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    HOME.with(|home| {
        let home = match home.get() {
            Some(h) => h,
            None => {
                let found = Home::find()?;
                home.get_or_init(|| found)
            }
        };
        if key == home.key() {
            return f();
        }
        move_into_link_name_space(fd, Some(LinkNameSpaceType::Network))?;
        let back = GoBack(home.fd());
        let out = f();
        drop(back);
        out
    })
}

thread_local! {
    /// The thread's own namespace. Threads only ever leave it inside
    /// `in_netns`, which always brings them back, so it stays valid.
    static HOME: std::cell::OnceCell<Home> = const { std::cell::OnceCell::new() };
}

#[cfg(test)]
impl KernelNet {
    /// The links that what the address and route dumps of `name` bring
    /// back belong to, as the kernel sent them (tests).
    pub(crate) fn dumped_links(&mut self, ns: NsId, name: &str) -> Result<Vec<u32>, NetError> {
        let index = self.index_of(ns, name)?;
        let mut out = Vec::new();
        for m in self.address_dump(ns, index, name)? {
            if let RouteNetlinkMessage::NewAddress(m) = m {
                out.push(m.header.index);
            }
        }
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            for m in self.route_dump(ns, family, index, name)? {
                if let RouteNetlinkMessage::NewRoute(m) = m {
                    out.extend(m.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Oif(i) => Some(*i),
                        _ => None,
                    }));
                }
            }
        }
        Ok(out)
    }

    /// Whether the kernel's answer to a lookup of `name` carried IPv6's
    /// counters (tests).
    pub(crate) fn lookup_carries_counters(
        &mut self,
        ns: NsId,
        name: &str,
    ) -> Result<bool, NetError> {
        use netlink_packet_route::link::{AfSpecInet6, AfSpecUnspec};
        let m = self.get_link(ns, name)?;
        let specs = m.attributes.iter().filter_map(|a| match a {
            LinkAttribute::AfSpecUnspec(specs) => Some(specs),
            _ => None,
        });
        Ok(specs.flatten().any(|spec| match spec {
            AfSpecUnspec::Inet6(v) => v
                .iter()
                .any(|x| matches!(x, AfSpecInet6::Stats(_) | AfSpecInet6::Icmp6Stats(_))),
            _ => false,
        }))
    }
}

/// Whether the calling thread's home is the shared handle's (tests).
#[cfg(test)]
pub(crate) fn home_is_shared() -> bool {
    HOME.with(|h| matches!(h.get(), Some(Home::Shared(_))))
}

/// A thread's own network namespace, as a descriptor.
enum Home {
    /// The namespace [`SHARED_HOME`] holds: one descriptor for every thread
    /// at home there. A daemon's request threads live long and wait between
    /// connections; each holding a descriptor of its own would show as
    /// descriptors that grow with the threads kept.
    Shared(&'static (OwnedFd, u64, u64)),
    /// A namespace of its own (a thread started elsewhere), with its
    /// (device, inode).
    Own(OwnedFd, (u64, u64)),
}

/// The namespace of the first thread that needed its home, with its
/// (device, inode).
static SHARED_HOME: std::sync::OnceLock<(OwnedFd, u64, u64)> = std::sync::OnceLock::new();

impl Home {
    const OWN: &'static str = "/proc/thread-self/ns/net";

    fn find() -> io::Result<Home> {
        let shared = match SHARED_HOME.get() {
            Some(s) => s,
            None => {
                let own = File::open(Self::OWN)?;
                let meta = own.metadata()?;
                // Another thread may have set it meanwhile: compared below
                // like any other.
                let _ = SHARED_HOME.set((OwnedFd::from(own), meta.dev(), meta.ino()));
                SHARED_HOME
                    .get()
                    .ok_or_else(|| io::Error::other("no shared namespace handle"))?
            }
        };
        let meta = std::fs::metadata(Self::OWN)?;
        if (meta.dev(), meta.ino()) == (shared.1, shared.2) {
            return Ok(Home::Shared(shared));
        }
        // The thread is where `meta` found it: it moves only in `in_netns`.
        let own = OwnedFd::from(File::open(Self::OWN)?);
        Ok(Home::Own(own, (meta.dev(), meta.ino())))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Home::Own(fd, _) => fd.as_fd(),
            Home::Shared(s) => s.0.as_fd(),
        }
    }

    /// The namespace's (device, inode), as `stat` gives them.
    fn key(&self) -> (u64, u64) {
        match self {
            Home::Own(_, key) => *key,
            Home::Shared(s) => (s.1, s.2),
        }
    }
}

/// Moves the thread back into its namespace when dropped, also when `f`
/// panics.
struct GoBack<'a>(BorrowedFd<'a>);

impl Drop for GoBack<'_> {
    fn drop(&mut self) {
        if move_into_link_name_space(self.0, Some(LinkNameSpaceType::Network)).is_err() {
            // Guest code would next run in another namespace than the one it
            // was given: stop here instead.
            wasm_cni_base::log::error(format_args!(
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

/// The link's own address in an address message: IFA_LOCAL is the address
/// itself; IFA_ADDRESS is the peer on a point-to-point link, and the only
/// one IPv6 reports.
fn own_address(m: &AddressMessage) -> Option<IpAddr> {
    let (mut local, mut address) = (None, None);
    for a in &m.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            _ => {}
        }
    }
    local.or(address)
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

/// Asks the kernel to leave IPv6's counters out of a link's answer: nothing
/// here reads them, and they are a quarter of a veth's reply (1 124 bytes
/// rather than 1 492) to fill, copy and parse. Kernels that predate the
/// flag ignore it.
fn without_stats() -> LinkAttribute {
    LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])
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
