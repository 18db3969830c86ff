//! Kernel networking effects, as semantic verbs.
//!
//! [`Net`] is what the host side of `cni:plugin/network` calls once its policy
//! layer has allowed a request. It speaks in links, addresses, routes and
//! sysctls, never in netlink messages, so it has two interchangeable
//! backends: the host's `KernelNet` (rtnetlink over a synchronous socket per
//! namespace) and, for tests, the rootless harness and plugin authors' unit
//! tests, [`MemoryNet`] (feature `memory`), a model of the kernel rules
//! plugins depend on. One behavioural suite (the host's `net::tests`) runs
//! against both.
//!
//! Errors keep the kernel's meaning: `EEXIST` is [`NetError::Exists`];
//! `ENOENT`, `ENODEV`, `ESRCH` and `EADDRNOTAVAIL` (what the kernel returns
//! for a missing address) are [`NetError::NotFound`]; `EINVAL` and `ERANGE`
//! are [`NetError::Invalid`], since the kernel says the request itself is
//! wrong (the errno is kept in the text); anything else is
//! [`NetError::Kernel`]. Arguments that can be checked without the kernel
//! (names, MACs, CIDRs, sysctl keys) are checked first and are `Invalid`.

#[cfg(feature = "memory")]
mod memory;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "memory")]
pub use memory::MemoryNet;

/// A namespace opened by a backend. Only meaningful to the backend that
/// issued it; opening the same namespace twice yields the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NsId(pub u32);

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum NetError {
    #[error("already exists: {0}")]
    Exists(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("kernel error {errno}: {msg}")]
    Kernel { errno: i32, msg: String },
}

impl NetError {
    /// Classify an errno as described in the module docs.
    pub fn from_errno(errno: i32, msg: impl Into<String>) -> Self {
        let msg = msg.into();
        match errno {
            libc::EEXIST => NetError::Exists(msg),
            libc::ENOENT | libc::ENODEV | libc::ESRCH | libc::EADDRNOTAVAIL => {
                NetError::NotFound(msg)
            }
            libc::EINVAL | libc::ERANGE => NetError::Invalid(format!("{msg} (errno {errno})")),
            _ => NetError::Kernel { errno, msg },
        }
    }

    /// The errno behind a `Kernel` error, if that is what this is.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MacvlanMode {
    Bridge,
    Private,
    Vepa,
    Passthru,
}

/// The ipvlan modes (`IPVLAN_MODE_*`): l2 switches frames among the
/// slaves of one master, l3 routes at the master, l3s adds netfilter on the
/// slaves' traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpvlanMode {
    L2,
    L3,
    L3s,
}

/// What a backend reports about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` (`veth`, `bridge`, `macvlan`, `macvtap`, `tun`, ...),
    /// or `device` for links without one (`lo`, physical NICs).
    pub kind: String,
    /// `aa:bb:cc:dd:ee:ff`, lowercase; empty for links without one.
    pub mac: String,
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// `IFF_RUNNING`: up, with carrier (or an operstate of "unknown", as `lo`).
    /// The kernel applies carrier changes asynchronously (linkwatch), so this
    /// may lag a change on the link or its peer by a few milliseconds.
    pub oper_up: bool,
    pub master: Option<u32>,
    /// For a veth: the peer's ifindex, in the peer's namespace.
    pub peer_index: Option<u32>,
    /// `IFF_PROMISC` as set by a user, not the kernel's internal counter (a
    /// bridge port is promiscuous without this being set).
    pub promisc: bool,
    pub allmulti: bool,
    pub txqlen: u32,
    pub macvlan_mode: Option<MacvlanMode>,
    /// For an 802.1Q vlan: its id.
    pub vlan_id: Option<u16>,
    pub ipvlan_mode: Option<IpvlanMode>,
}

/// What identifies a link within its namespace beyond its name: ifindexes
/// are not reused until the namespace's counter wraps, and the kind guards
/// even against that.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId {
    pub index: u32,
    pub kind: String,
}

impl LinkInfo {
    pub fn id(&self) -> LinkId {
        LinkId {
            index: self.index,
            kind: self.kind.clone(),
        }
    }
}

/// Changes for [`Net::set_link`]; `None` leaves a setting alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkChange {
    pub up: Option<bool>,
    pub mtu: Option<u32>,
    pub mac: Option<String>,
    /// A bridge in the same namespace; `""` releases the link from its master.
    pub master: Option<String>,
    pub promisc: Option<bool>,
    pub allmulti: Option<bool>,
    pub txqlen: Option<u32>,
    /// Bridge-port hairpin mode; the link must have a bridge master (after
    /// `master` above is applied).
    pub hairpin: Option<bool>,
}

/// An address with a prefix length, the address keeping its host bits:
/// `10.1.2.3/24`, `fd00::1/64` (the `ipnet` crate's; parse with
/// [`parse_cidr`]).
pub use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Checks the prefix length against the family.
pub fn ip_net(addr: IpAddr, prefix: u8) -> Result<IpNet, NetError> {
    IpNet::new(addr, prefix)
        .map_err(|_| NetError::Invalid(format!("prefix length {prefix} is too long for {addr}")))
}

/// Parses `addr/prefix` as Go's `net.ParseCIDR` does (what plugins and
/// the reference plugins write; see [`crate::cidr::parse`]).
pub fn parse_cidr(s: &str) -> Result<IpNet, NetError> {
    crate::cidr::parse(s)
        .ok_or_else(|| NetError::Invalid(format!("{s:?} is not an address/prefix")))
}

/// The family of a prefix, as `IpAddr` tells it.
pub trait IpNetFamily {
    fn is_ipv4(&self) -> bool;
    fn is_ipv6(&self) -> bool;
}

impl IpNetFamily for IpNet {
    fn is_ipv4(&self) -> bool {
        matches!(self, IpNet::V4(_))
    }

    fn is_ipv6(&self) -> bool {
        matches!(self, IpNet::V6(_))
    }
}

/// A host prefix: `/32` or `/128`.
pub fn host_net(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}

/// The whole address space of `addr`'s family: `0.0.0.0/0` or `::/0`.
pub fn default_net(addr: &IpAddr) -> IpNet {
    match addr {
        IpAddr::V4(_) => IpNet::V4(Ipv4Net::default()),
        IpAddr::V6(_) => IpNet::V6(Ipv6Net::default()),
    }
}

/// The broadcast address `ip addr add ... brd +` would set: IPv4 with a
/// prefix of at most 30 (a /31 or /32 has none, RFC 3021).
pub fn broadcast_v4(net: &IpNet) -> Option<Ipv4Addr> {
    match net {
        IpNet::V4(n) if n.prefix_len() <= 30 => Some(n.broadcast()),
        _ => None,
    }
}

/// A unicast route. In requests, `None` means "the default" (see
/// [`Net::add_route`]); in [`Net::routes`] answers every field the kernel
/// reports is filled in, `table` and `scope` always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    /// Output link, by name, in the same namespace.
    pub dev: Option<String>,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    /// 0 universe, 253 link, 254 host.
    pub scope: Option<u8>,
}

impl Route {
    /// A route to `dst` with nothing else set.
    pub fn to(dst: IpNet) -> Self {
        Route {
            dst,
            gw: None,
            dev: None,
            src: None,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// A token-bucket limit, as the bandwidth plugin configures one: `rate` in
/// bits per second, `burst` in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub rate: u64,
    pub burst: u64,
}

/// The kernel parameters of a `tbf` qdisc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Bytes per second.
    pub rate: u64,
    /// The bucket, in scheduler ticks.
    pub buffer: u32,
    /// Bytes that may queue.
    pub limit: u32,
}

/// The latency the reference bandwidth plugin sizes its queues for.
pub const TBF_LATENCY_MS: u64 = 25;

impl RateLimit {
    /// The tbf the reference bandwidth plugin makes for this limit, with
    /// `ticks_per_us` scheduler ticks per microsecond (`/proc/net/psched`):
    /// rate and burst in bytes, the bucket as the time the burst takes at
    /// the rate, the queue limit as 25 ms at the rate plus the burst.
    pub fn tbf(&self, ticks_per_us: f64) -> Result<Tbf, NetError> {
        if self.rate == 0 || self.burst == 0 {
            return Err(NetError::Invalid(format!(
                "rate limit {} bit/s, burst {} bit: both must be positive",
                self.rate, self.burst
            )));
        }
        let rate = self.rate / 8;
        let burst = u32::try_from(self.burst / 8)
            .map_err(|_| NetError::Invalid(format!("burst {} bit: at most 4 GiB", self.burst)))?;
        if rate == 0 {
            return Err(NetError::Invalid(format!(
                "rate {} bit/s is less than a byte per second",
                self.rate
            )));
        }
        // As the reference computes them (Go float64 arithmetic, truncated).
        let us = (f64::from(burst) * 1e6 / rate as f64) as u32;
        let buffer = (f64::from(us) * ticks_per_us) as u32;
        let latency_us = 1e6 * (TBF_LATENCY_MS as f64 / 1000.0);
        let limit = ((rate as f64 * latency_us / 1e6) as u32).saturating_add(burst);
        Ok(Tbf {
            rate,
            buffer,
            limit,
        })
    }
}

/// A queueing discipline of a link, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    /// `tbf`, `ingress`, `noqueue`, ...
    pub kind: String,
    pub handle: u32,
    pub parent: u32,
    pub tbf: Option<Tbf>,
}

/// Handles as `tc` writes them: `1:` is 0x10000.
pub const TC_H_ROOT: u32 = 0xffff_ffff;
pub const TC_H_INGRESS: u32 = 0xffff_fff1;
pub const TBF_HANDLE: u32 = 0x0001_0000;
pub const INGRESS_HANDLE: u32 = 0xffff_0000;

/// Which namespace to open.
#[derive(Debug, Clone, Copy)]
pub enum NsRef<'a> {
    /// The namespace the host process runs in (the node's).
    Current,
    /// A namespace file such as `/run/netns/NAME` or `/proc/PID/ns/net`.
    Path(&'a Path),
    /// A namespace already open, such as the one a daemon's peer opened
    /// with its own credentials: nothing is looked up by name.
    Fd(BorrowedFd<'a>),
}

/// A container namespace held for the length of a call: a file to open, or
/// a descriptor already open. Shown in errors without the descriptor's
/// number, which means nothing to the reader.
#[derive(Debug, Clone)]
pub enum NsSource {
    Path(PathBuf),
    Fd(Arc<OwnedFd>),
}

impl NsSource {
    pub fn as_ref(&self) -> NsRef<'_> {
        match self {
            NsSource::Path(p) => NsRef::Path(p),
            NsSource::Fd(fd) => NsRef::Fd(fd.as_fd()),
        }
    }
}

impl fmt::Display for NsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NsSource::Path(p) => write!(f, "{}", p.display()),
            NsSource::Fd(_) => f.write_str("the namespace the daemon's peer passed"),
        }
    }
}

pub const RT_TABLE_MAIN: u32 = 254;
pub const RT_SCOPE_UNIVERSE: u8 = 0;
pub const RT_SCOPE_LINK: u8 = 253;
pub const RT_SCOPE_HOST: u8 = 254;

/// Kernel networking effects on opened namespaces. Every method addresses a
/// namespace by an [`NsId`] from [`Net::open`] and links by name within it.
pub trait Net: Send {
    /// The in-memory model behind this backend, if it is one (for
    /// `plugin test`, which inspects and changes the model between calls).
    #[cfg(feature = "memory")]
    fn as_memory(&mut self) -> Option<&mut MemoryNet> {
        None
    }

    /// Open a network namespace. `NotFound` if the path does not exist or is
    /// not a network namespace.
    fn open(&mut self, ns: NsRef<'_>) -> Result<NsId, NetError>;
    /// Whether two handles name the same kernel namespace.
    fn same_ns(&self, a: NsId, b: NsId) -> bool;

    /// Create a veth pair: `name` in `ns`, `peer_name` in `peer_ns`. `mtu`
    /// applies to both ends, `mac` to `name`. Returns the link in `ns`.
    fn create_veth(
        &mut self,
        ns: NsId,
        name: &str,
        peer_name: &str,
        peer_ns: NsId,
        mtu: Option<u32>,
        mac: Option<&str>,
    ) -> Result<LinkInfo, NetError>;
    /// Create a bridge, or return the existing bridge of that name as it is
    /// (its MTU is not changed). `Exists` if `name` is another kind of link.
    fn ensure_bridge(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: Option<u32>,
    ) -> Result<LinkInfo, NetError>;
    /// Create a macvlan (`tap`: macvtap) on `master`, a link of `ns`; it is
    /// created directly in `target` as `name`, so `name` may exist in `ns`.
    /// Without `mtu` it inherits the master's. Returns the link in `target`.
    #[allow(clippy::too_many_arguments)]
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
    ) -> Result<LinkInfo, NetError>;
    /// Create an 802.1Q vlan `vlan_id` on `master`, a link of `ns`, directly
    /// in `target` as `name` (as [`Net::create_macvlan`]). `Exists` if
    /// `master` already has a vlan of that id.
    #[allow(clippy::too_many_arguments)]
    fn create_vlan(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: NsId,
    ) -> Result<LinkInfo, NetError>;
    /// Create an ipvlan on `master` directly in `target` as `name`; it has
    /// its master's MAC. A master carries ipvlans of one mode only.
    fn create_ipvlan(
        &mut self,
        ns: NsId,
        name: &str,
        master: &str,
        mode: IpvlanMode,
        mtu: Option<u32>,
        target: NsId,
    ) -> Result<LinkInfo, NetError>;
    /// Create a persistent tap device (kind `tun`), optionally multi-queue and
    /// owned by a uid/gid. `Exists` if the name is taken.
    #[allow(clippy::too_many_arguments)]
    fn create_tap(
        &mut self,
        ns: NsId,
        name: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> Result<LinkInfo, NetError>;

    fn link_by_name(&mut self, ns: NsId, name: &str) -> Result<LinkInfo, NetError>;
    fn link_by_index(&mut self, ns: NsId, index: u32) -> Result<LinkInfo, NetError>;
    fn links(&mut self, ns: NsId) -> Result<Vec<LinkInfo>, NetError>;
    /// Apply `change`; returns the link afterwards. Not atomic: a failure may
    /// leave earlier settings applied, as with `ip link set`.
    fn set_link(&mut self, ns: NsId, name: &str, change: &LinkChange)
        -> Result<LinkInfo, NetError>;
    /// Delete a link (a veth takes its peer along). `NotFound` if absent.
    fn delete_link(&mut self, ns: NsId, name: &str) -> Result<(), NetError>;

    /// Add an address; an IPv4 one gets the broadcast `brd +` would give it.
    /// `Exists` if present.
    fn add_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError>;
    /// `NotFound` if the link has no such address (prefix included).
    fn del_address(&mut self, ns: NsId, link: &str, addr: &IpNet) -> Result<(), NetError>;
    /// Every address of the link, both families, every scope (so `lo`'s
    /// `127.0.0.1/8` and IPv6 link-local `fe80::` addresses are included).
    fn addresses(&mut self, ns: NsId, link: &str) -> Result<Vec<IpNet>, NetError>;

    /// Add a route with `ip route add` semantics: without `gw` the scope is
    /// link (IPv4) unless given; the table is main unless given; protocol
    /// boot; an IPv6 route without `priority` gets the kernel's 1024. Needs
    /// `dev` or `gw`. `Exists` if the same destination and priority is
    /// already in the table.
    fn add_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError>;
    /// Delete the first route that matches `dst` and table, and whichever of
    /// `gw`, `dev`, `priority`, `scope` are given. `NotFound` if none does.
    fn del_route(&mut self, ns: NsId, route: &Route) -> Result<(), NetError>;
    /// Unicast routes whose output link is `link` in table `table` (main by
    /// default), both families, including the kernel's own subnet routes.
    /// Multipath routes are not reported.
    fn routes(&mut self, ns: NsId, link: &str, table: Option<u32>) -> Result<Vec<Route>, NetError>;
    /// The link the namespace would send traffic for `dst` out of (a route
    /// lookup); `None` when it has no route there.
    fn route_dev(&mut self, ns: NsId, dst: &IpAddr) -> Result<Option<String>, NetError>;

    /// Read a sysctl of the namespace, dotted form (`net.ipv4.ip_forward`);
    /// the value is trimmed.
    fn sysctl_get(&mut self, ns: NsId, key: &str) -> Result<String, NetError>;
    fn sysctl_set(&mut self, ns: NsId, key: &str, value: &str) -> Result<(), NetError>;

    /// Create an `ifb` device (up), to shape what another link receives.
    fn create_ifb(&mut self, ns: NsId, name: &str, mtu: Option<u32>) -> Result<LinkInfo, NetError>;
    /// Make the root qdisc of `link` the tbf for `limit` (handle `1:`),
    /// replacing whatever root qdisc it had.
    fn set_rate_limit(&mut self, ns: NsId, link: &str, limit: &RateLimit) -> Result<(), NetError>;
    /// Send everything `link` receives out of `to` instead: an `ingress`
    /// qdisc on `link` with a match-all u32 filter (priority 1, every
    /// protocol) whose mirred action redirects to `to`'s egress.
    fn redirect_ingress(&mut self, ns: NsId, link: &str, to: &str) -> Result<(), NetError>;
    /// The qdiscs of `link`.
    fn qdiscs(&mut self, ns: NsId, link: &str) -> Result<Vec<Qdisc>, NetError>;
    /// Scheduler ticks per microsecond, for [`RateLimit::tbf`].
    fn ticks_per_us(&self) -> f64 {
        DEFAULT_TICKS_PER_US
    }
}

/// What `/proc/net/psched` says on every kernel since 2.6.x with
/// high-resolution timers: 1000 ns per 64-ns tick.
pub const DEFAULT_TICKS_PER_US: f64 = 15.625;

/// The kernel's `dev_valid_name`: 1 to 15 bytes, not `.` or `..`, no `/`,
/// `:` or whitespace.
pub fn check_link_name(name: &str) -> Result<(), NetError> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
    if ok {
        Ok(())
    } else {
        Err(NetError::Invalid(format!(
            "{name:?} is not a valid link name"
        )))
    }
}

/// Parse `aa:bb:cc:dd:ee:ff` (either case). Multicast and all-zero addresses
/// are refused: no Ethernet device accepts them.
pub fn parse_mac(mac: &str) -> Result<[u8; 6], NetError> {
    let bad = |why: &str| NetError::Invalid(format!("MAC {mac:?}: {why}"));
    let mut out = [0u8; 6];
    let mut parts = mac.split(':');
    for byte in &mut out {
        let p = parts.next().ok_or_else(|| bad("expected six octets"))?;
        if p.len() != 2 {
            return Err(bad("each octet is two hex digits"));
        }
        *byte = u8::from_str_radix(p, 16).map_err(|_| bad("not hex"))?;
    }
    if parts.next().is_some() {
        return Err(bad("expected six octets"));
    }
    if out[0] & 1 == 1 {
        return Err(bad("multicast address"));
    }
    if out == [0; 6] {
        return Err(bad("all-zero address"));
    }
    Ok(out)
}

pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A sysctl key in dotted form: components of `[A-Za-z0-9_-]`, separated by
/// single dots. That excludes `/`, `..` and any path trick, and also links
/// whose names contain a dot (sysctl(8) would need its `/` form for those).
pub fn check_sysctl_key(key: &str) -> Result<(), NetError> {
    let ok = !key.is_empty()
        && key.split('.').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(NetError::Invalid(format!("{key:?} is not a sysctl key")))
    }
}

/// Checks shared by both backends before a route request. A route to add
/// needs a next hop; one to delete may be named by its destination alone.
pub fn check_route(route: &Route, add: bool) -> Result<(), NetError> {
    if add && route.gw.is_none() && route.dev.is_none() {
        return Err(NetError::Invalid(format!(
            "route to {} needs a gateway or a device",
            route.dst
        )));
    }
    let v4 = route.dst.is_ipv4();
    for ip in route.gw.iter().chain(route.src.iter()) {
        if ip.is_ipv4() != v4 {
            return Err(NetError::Invalid(format!(
                "route to {}: {ip} is of the other address family",
                route.dst
            )));
        }
    }
    if let Some(dev) = &route.dev {
        check_link_name(dev)?;
    }
    Ok(())
}
