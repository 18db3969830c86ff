//! The kernel-networking verbs plugins use, as a trait ([`Ops`]) over a
//! network namespace handle. [`crate::guest`] implements it once for the WIT
//! `netns` resource; [`crate::fake`] implements it in memory for native
//! tests. The types mirror the WIT `network` interface.

use std::fmt;

use crate::error::CniError;

/// What went wrong in a namespace operation (WIT `net-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetError {
    /// The link, address or route already exists.
    Exists(String),
    /// No such link, address, route, sysctl or namespace.
    NotFound(String),
    /// The host's policy does not allow this for the attachment.
    Refused(String),
    /// Bad argument.
    Invalid(String),
    /// Any other kernel failure: errno and description.
    Kernel(i32, String),
}

impl NetError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }

    pub fn is_exists(&self) -> bool {
        matches!(self, Self::Exists(_))
    }

    /// A code-999 CNI error `"{context}: {self}"`.
    pub fn into_cni(self, context: impl fmt::Display) -> CniError {
        CniError::internal(format!("{context}: {self}"))
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exists(m) => write!(f, "already exists: {m}"),
            Self::NotFound(m) => write!(f, "not found: {m}"),
            Self::Refused(m) => write!(f, "refused by host policy: {m}"),
            Self::Invalid(m) => write!(f, "invalid argument: {m}"),
            Self::Kernel(errno, m) => write!(f, "kernel error {errno}: {m}"),
        }
    }
}

impl std::error::Error for NetError {}

/// Result of a namespace operation.
pub type NetResult<T> = Result<T, NetError>;

/// A macvlan's (or macvtap's) mode (WIT `macvlan-mode`).
pub use crate::guest::bindings::cni::plugin::network::MacvlanMode;

/// The reference's default.
impl Default for MacvlanMode {
    fn default() -> Self {
        Self::Bridge
    }
}

impl MacvlanMode {
    /// The reference's `modeFromString`: `""` means bridge.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "bridge" => Some(Self::Bridge),
            "private" => Some(Self::Private),
            "vepa" => Some(Self::Vepa),
            "passthru" => Some(Self::Passthru),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bridge => "bridge",
            Self::Private => "private",
            Self::Vepa => "vepa",
            Self::Passthru => "passthru",
        }
    }
}

/// An ipvlan master's mode (WIT `ipvlan-mode`), shared by all its ipvlans.
pub use crate::guest::bindings::cni::plugin::network::IpvlanMode;

/// The reference's default.
impl Default for IpvlanMode {
    fn default() -> Self {
        Self::L2
    }
}

impl IpvlanMode {
    /// The reference's `modeFromString`: `""` means l2.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "l2" => Some(Self::L2),
            "l3" => Some(Self::L3),
            "l3s" => Some(Self::L3s),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::L2 => "l2",
            Self::L3 => "l3",
            Self::L3s => "l3s",
        }
    }
}

/// What `describe` reports about a link: the contract's own record, so
/// that a guest reads it as the host sent it, unconverted.
pub use crate::guest::bindings::cni::plugin::network::Link;

/// A route (WIT `route-spec`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteSpec {
    /// CIDR destination; `0.0.0.0/0` or `::/0` for default.
    pub dst: String,
    pub gw: Option<String>,
    /// Output link by name.
    pub dev: Option<String>,
    /// Preferred source address.
    pub src: Option<String>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    /// 0 universe, 253 link, 254 host.
    pub scope: Option<u8>,
}

/// Route scopes.
pub mod scope {
    pub const UNIVERSE: u8 = 0;
    pub const LINK: u8 = 253;
    pub const HOST: u8 = 254;
}

/// The main routing table.
pub const MAIN_TABLE: u32 = 254;

/// Changes for `set_link`; `None` leaves a field unchanged (WIT
/// `link-settings`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkSettings {
    pub up: Option<bool>,
    pub mtu: Option<u32>,
    pub mac: Option<String>,
    /// Enslave to this bridge (same namespace); empty to release.
    pub master: Option<String>,
    pub promisc: Option<bool>,
    pub allmulti: Option<bool>,
    pub txqlen: Option<u32>,
    /// Bridge-port hairpin mode.
    pub hairpin: Option<bool>,
}

impl LinkSettings {
    pub fn up() -> Self {
        Self {
            up: Some(true),
            ..Self::default()
        }
    }

    pub fn down() -> Self {
        Self {
            up: Some(false),
            ..Self::default()
        }
    }
}

/// The verbs plugins need on one network namespace.
/// A token-bucket limit (WIT `rate-limit`): bits per second, bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RateLimit {
    pub rate: u64,
    pub burst: u64,
}

/// A qdisc as listed (WIT `qdisc`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Qdisc {
    pub kind: String,
    pub handle: u32,
    pub parent: u32,
    /// tbf: bytes per second, bucket in ticks, queue limit in bytes.
    pub tbf_rate: Option<u64>,
    pub tbf_buffer: Option<u32>,
    pub tbf_limit: Option<u32>,
}

pub trait Ops {
    /// Creates a veth pair: `name` here, `peer_name` in `peer_ns`; `mac`
    /// applies to `name`. Returns the link created here.
    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_ns: &Self,
        mtu: Option<u32>,
        mac: Option<&str>,
    ) -> NetResult<Link>;
    /// Creates a bridge or returns the existing one (`Exists` if `name` is
    /// something else).
    fn ensure_bridge(&self, name: &str, mtu: Option<u32>) -> NetResult<Link>;
    /// Creates a macvlan on `master` (a link here) as `name` in `target`.
    fn create_macvlan(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link>;
    /// Same for a macvtap (a macvlan with a tap character device).
    fn create_macvtap(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link>;
    /// Creates an 802.1Q vlan `vlan_id` on `master` (a link here) as `name`
    /// in `target`, with the master's MAC.
    fn create_vlan(
        &self,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link>;
    /// Creates an ipvlan on `master` (a link here) as `name` in `target`,
    /// with the master's MAC; `mode` becomes that of every ipvlan on it.
    fn create_ipvlan(
        &self,
        name: &str,
        master: &str,
        mode: IpvlanMode,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link>;
    /// Creates a persistent tap device `name` here (via /dev/net/tun), owned
    /// by `owner`/`group` when given.
    fn create_tap(
        &self,
        name: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> NetResult<Link>;

    fn link_by_name(&self, name: &str) -> NetResult<Link>;
    fn link_by_index(&self, index: u32) -> NetResult<Link>;
    fn list_links(&self) -> NetResult<Vec<Link>>;
    fn set_link(&self, name: &str, settings: &LinkSettings) -> NetResult<Link>;
    fn delete_link(&self, name: &str) -> NetResult<()>;

    fn add_address(&self, link: &str, cidr: &str) -> NetResult<()>;
    fn del_address(&self, link: &str, cidr: &str) -> NetResult<()>;
    fn list_addresses(&self, link: &str) -> NetResult<Vec<String>>;

    fn add_route(&self, route: &RouteSpec) -> NetResult<()>;
    fn del_route(&self, route: &RouteSpec) -> NetResult<()>;
    /// Routes of the main table (or `table`) whose output link is `link`.
    fn list_routes(&self, link: &str, table: Option<u32>) -> NetResult<Vec<RouteSpec>>;

    /// Reads a sysctl of this namespace, dotted form.
    fn get_sysctl(&self, key: &str) -> NetResult<String>;
    fn set_sysctl(&self, key: &str, value: &str) -> NetResult<()>;

    /// An ifb device, up (node namespace only).
    fn create_ifb(&self, name: &str, mtu: Option<u32>) -> NetResult<Link>;
    /// A root tbf on `link` limiting what it sends (the reference
    /// bandwidth plugin's parameters).
    fn limit_rate(&self, link: &str, limit: RateLimit) -> NetResult<()>;
    /// Whether `link`'s root qdisc is the tbf `limit_rate` sets for `limit`.
    fn has_rate_limit(&self, link: &str, limit: RateLimit) -> NetResult<bool>;
    /// Redirect what `link` receives out of `to`.
    fn redirect_ingress(&self, link: &str, to: &str) -> NetResult<()>;
    fn list_qdiscs(&self, link: &str) -> NetResult<Vec<Qdisc>>;

    /// Sets the link up.
    fn set_up(&self, name: &str) -> NetResult<Link> {
        self.set_link(name, &LinkSettings::up())
    }

    /// Deletes a link; `Ok(false)` if it was already gone.
    fn delete_link_if_exists(&self, name: &str) -> NetResult<bool> {
        match self.delete_link(name) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every route of `table` (main by default) on every link of the
    /// namespace. Links whose routes cannot be listed (gone, refused) are
    /// skipped.
    fn all_routes(&self, table: Option<u32>) -> NetResult<Vec<RouteSpec>> {
        let mut routes = Vec::new();
        for link in self.list_links()? {
            if let Ok(mut found) = self.list_routes(&link.name, table) {
                for route in &mut found {
                    route.dev.get_or_insert_with(|| link.name.clone());
                }
                routes.append(&mut found);
            }
        }
        Ok(routes)
    }
}

/// Dotted sysctl key for a per-interface setting:
/// `net.<family>.conf.<ifname>.<leaf>`. Dots inside `ifname` (VLAN names
/// like `eth0.100`) become `/`, the sysctl(8) convention.
pub fn iface_sysctl(family: &str, ifname: &str, leaf: &str) -> String {
    format!("net.{family}.conf.{}.{leaf}", ifname.replace('.', "/"))
}
