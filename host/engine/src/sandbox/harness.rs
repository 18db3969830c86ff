//! The host side of a plugin call without a plugin: every import a component
//! can reach, called directly with whatever arguments the caller chooses,
//! against the in-memory backends. The fuzzers (`host/fuzz`) feed it
//! arbitrary sequences of calls and then ask [`ImportHarness::check`] and
//! [`ImportHarness::finish`] whether the policy held: nothing that does not
//! belong to the attachment changed, in either namespace or in the store.
//!
//! The scene: a node namespace with `lo`, a foreign veth pair
//! `other0`/`other1`, an `uplink` carrying the default route, and the
//! host-side end `veth9` of another attachment; a container namespace with
//! `lo` and that other attachment's `eth9`. The call is for attachment
//! (`fuzz-cid`, `eth0`) of network `fuzznet` by plugin `fx`, whose config
//! names the bridge `cni0`. Its store scope already holds another
//! attachment's live and released entries, and two other scopes exist (the
//! same plugin on another network, another plugin on this one).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arbitrary::Arbitrary;
use wasmtime::component::Resource;

use super::bindings::cni::plugin::files::Host as FilesHost;
use super::bindings::cni::plugin::filter::{
    Host as FilterHost, MacSpoofCheck as WitMacSpoof, Masquerade as WitMasquerade,
    PortMap as WitPortMap, Protocol as WitProtocol, Rule as WitRule,
};
use super::bindings::cni::plugin::ipam::Host as IpamHost;
use super::bindings::cni::plugin::log::{Host as LogHost, Level};
use super::bindings::cni::plugin::network::{
    Address, Host as NetworkHost, HostNetns, IpvlanMode, LinkSettings, MacvlanMode,
    RateLimit as WitRateLimit, RouteSpec,
};
use super::bindings::cni::plugin::store::Host as StoreHost;
use super::fail::{split, Fail};
use super::host_network::NetnsHandle;
use super::limits::MemoryCap;
use super::policy::ConfigGrants;
use super::policy::PortGrant;
use super::state::Ctx;
use super::{CniResultWit, FilterAccess, IpamOp, Ledger, NetAccess, Services, StoreAccess};
use wasm_cni_kernel::filter::{Filter, MemoryFilter, Owned, Proto, Rule, Tag};
use wasm_cni_kernel::net::{
    self, IpNet, IpNetFamily, LinkInfo, MemoryNet, Net, NsId, NsRef, NsSource, Route,
};
use wasm_cni_protocol::{CniError, Command, ErrorCode};
use wasm_cni_store::{Entry, MemoryStore, Owner, Scope, ScopeData, StateStore};

const CONTAINER: &str = "/run/netns/fuzz-ctr";
const NETWORK: &str = "fuzznet";
const PLUGIN: &str = "fx";
/// The one file the call's config names (`ipam.resolvConf`); it does not
/// exist, so reading it is an I/O error, but it is not refused.
const CONFIG_FILE: &str = "/nonexistent/wasm-cni-harness/resolv.conf";
/// The attachment's own address (as its IPAM would have handed it out):
/// node-side addresses and routes must lie in its network.
const OWN_ADDRESS: &str = "10.1.0.5/24";
/// The tap owner the call's config names.
const TAP_OWNER: u32 = 1000;

/// Links that belong to someone else, per side.
const FOREIGN_NODE: &[&str] = &["lo", "other0", "other1", "uplink", "veth9"];
const FOREIGN_CONTAINER: &[&str] = &["eth9"];
/// Sysctls no call may change: another link's, and node-wide ones outside
/// the forwarding switches (which also set every link's forwarding key, so
/// per-link `forwarding` keys are not listed).
const NODE_SYSCTLS: &[&str] = &[
    "net.ipv4.conf.other0.rp_filter",
    "net.ipv4.conf.uplink.proxy_arp",
    "net.ipv6.conf.other0.accept_ra",
    "net.ipv4.conf.all.rp_filter",
    "net.ipv4.conf.default.proxy_arp",
    "net.ipv6.conf.default.disable_ipv6",
];
const CONTAINER_SYSCTLS: &[&str] = &["net.ipv4.conf.eth9.rp_filter"];

/// The port mappings the plugin's config grants; 9090 is another
/// attachment's already (a clash, see `foreign_rules`).
pub const PORT_MAPPINGS: &str = r#"{"runtimeConfig":{"portMappings":[
    {"hostPort":8080,"containerPort":80,"protocol":"tcp"},
    {"hostPort":9090,"containerPort":80,"protocol":"tcp"},
    {"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"192.168.9.1"}]}}"#;

/// Another attachment's rules, there before the call: they must stay.
fn foreign_rules() -> (Tag, Vec<Rule>) {
    let other: std::net::IpAddr = std::net::Ipv4Addr::new(10, 1, 0, 77).into();
    (
        Tag::new(NETWORK, "other-cid", "eth0"),
        vec![
            Rule::Masquerade {
                source: other,
                except: Vec::new(),
            },
            Rule::PortMap {
                proto: Proto::Tcp,
                host_ip: None,
                host_port: 9090,
                dst: other,
                dst_port: 80,
            },
            Rule::AllowForward { addr: other },
        ],
    )
}

/// A namespace handle argument: one the harness was given by
/// `container-netns`/`node-netns` (by position, modulo how many), or a raw
/// table index no call returned (the canonical ABI makes that impossible
/// for a real component; the host must still not misbehave).
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Handle {
    Issued(usize),
    Forged(u32),
}

/// One import call with its arguments: the list of every import a
/// component can call, and the one the fuzzer draws its calls from (the
/// `Arbitrary` derive, arguments biased by [`draw`] towards the scene's
/// names, addresses and keys). A new import is a new variant here or in
/// the group it belongs to, and its arm in that group's dispatch
/// ([`ImportHarness::call`]); nothing else lists them.
#[derive(Debug, Clone, Arbitrary)]
pub enum Import {
    Log(u8, String),
    ContainerNetns,
    NodeNetns,
    DropNetns(Handle),
    /// A `create-*` method of a namespace handle.
    Create(Handle, Create),
    /// A method of a namespace handle on its links: find, list, set, delete.
    Link(Handle, LinkCall),
    /// A method of a namespace handle on addresses, routes, sysctls and
    /// queueing.
    Config(Handle, ConfigCall),
    Store(StoreCall),
    ReadConfigFile(String),
    Ipam(u8),
    /// `filter.add` (0), `check` (1) or `remove` (2).
    Filter(u8, Vec<FilterRule>),
}

/// The `create-*` methods of `netns`.
#[derive(Debug, Clone, Arbitrary)]
pub enum Create {
    Veth {
        #[arbitrary(with = draw::name)]
        name: String,
        #[arbitrary(with = draw::name)]
        peer: String,
        peer_ns: Handle,
        mtu: Option<u32>,
        mac: Option<String>,
    },
    Bridge {
        #[arbitrary(with = draw::name)]
        name: String,
        mtu: Option<u32>,
    },
    Macvlan {
        #[arbitrary(with = draw::name)]
        name: String,
        #[arbitrary(with = draw::name)]
        master: String,
        mode: u8,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Handle,
        tap: bool,
    },
    Vlan {
        #[arbitrary(with = draw::name)]
        name: String,
        #[arbitrary(with = draw::name)]
        master: String,
        vlan_id: u16,
        mtu: Option<u32>,
        target: Handle,
    },
    Ipvlan {
        #[arbitrary(with = draw::name)]
        name: String,
        #[arbitrary(with = draw::name)]
        master: String,
        mode: u8,
        mtu: Option<u32>,
        target: Handle,
    },
    Tap {
        #[arbitrary(with = draw::name)]
        name: String,
        mtu: Option<u32>,
        mac: Option<String>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    },
    Ifb(#[arbitrary(with = draw::name)] String, Option<u32>),
}

/// The methods of `netns` on its links, but creation.
#[derive(Debug, Clone, Arbitrary)]
pub enum LinkCall {
    ByName(#[arbitrary(with = draw::name)] String),
    ByIndex(u32),
    List,
    Set {
        #[arbitrary(with = draw::name)]
        name: String,
        up: Option<bool>,
        mtu: Option<u32>,
        mac: Option<String>,
        #[arbitrary(with = draw::opt_name)]
        master: Option<String>,
        promisc: Option<bool>,
        allmulti: Option<bool>,
        txqlen: Option<u32>,
        hairpin: Option<bool>,
    },
    Delete(#[arbitrary(with = draw::name)] String),
}

/// The methods of `netns` on what a link carries and the namespace's
/// settings: addresses, routes, sysctls, queueing.
#[derive(Debug, Clone, Arbitrary)]
pub enum ConfigCall {
    AddAddress(
        #[arbitrary(with = draw::name)] String,
        #[arbitrary(with = draw::text)] String,
    ),
    DelAddress(
        #[arbitrary(with = draw::name)] String,
        #[arbitrary(with = draw::text)] String,
    ),
    ListAddresses(#[arbitrary(with = draw::name)] String),
    AddRoute(RouteArgs),
    DelRoute(RouteArgs),
    ListRoutes(#[arbitrary(with = draw::name)] String, Option<u32>),
    GetSysctl(#[arbitrary(with = draw::sysctl)] String),
    SetSysctl(#[arbitrary(with = draw::sysctl)] String, String),
    LimitRate(#[arbitrary(with = draw::name)] String, u64, u64),
    RedirectIngress(
        #[arbitrary(with = draw::name)] String,
        #[arbitrary(with = draw::name)] String,
    ),
    ListQdiscs(#[arbitrary(with = draw::name)] String),
}

/// The `store` interface.
#[derive(Debug, Clone, Arbitrary)]
pub enum StoreCall {
    Reserve(#[arbitrary(with = draw::store_key)] String),
    ReleaseByOwner,
    Release(#[arbitrary(with = draw::store_key)] String),
    GetByOwner,
    List,
    Lookup(#[arbitrary(with = draw::store_keys)] Vec<String>),
    Span(
        #[arbitrary(with = draw::store_key)] String,
        #[arbitrary(with = draw::store_key)] String,
    ),
    BlocksOfOtherNodes,
    Now,
    GetValue(#[arbitrary(with = draw::store_key)] String),
    SetValue(#[arbitrary(with = draw::store_key)] String, Option<String>),
}

/// A `filter.rule`, its addresses as text.
#[derive(Debug, Clone)]
pub enum FilterRule {
    Masquerade(String, Vec<String>),
    PortMap {
        protocol: u8,
        host_ip: Option<String>,
        host_port: u16,
        address: String,
        port: u16,
    },
    Hairpin(String),
    Forward(String),
    Isolate(String),
    MacSpoof(String, String),
}

impl FilterRule {
    fn to_wit(&self) -> WitRule {
        match self.clone() {
            FilterRule::Masquerade(source, except) => {
                WitRule::Masquerade(WitMasquerade { source, except })
            }
            FilterRule::PortMap {
                protocol,
                host_ip,
                host_port,
                address,
                port,
            } => WitRule::PortMap(WitPortMap {
                protocol: match protocol % 3 {
                    0 => WitProtocol::Tcp,
                    1 => WitProtocol::Udp,
                    _ => WitProtocol::Sctp,
                },
                host_ip,
                host_port,
                address,
                port,
            }),
            FilterRule::Hairpin(a) => WitRule::HairpinMasquerade(a),
            FilterRule::Forward(a) => WitRule::AllowForward(a),
            FilterRule::Isolate(b) => WitRule::IsolateBridge(b),
            FilterRule::MacSpoof(link, mac) => WitRule::MacSpoofCheck(WitMacSpoof { link, mac }),
        }
    }
}

/// How the fuzzer draws an import's arguments: mostly the scene's link
/// names, addresses, sysctl keys and store keys (so that calls get past
/// "not found" to the policy), a few fresh names, sometimes anything.
pub mod draw {
    use arbitrary::{Arbitrary, Result, Unstructured};

    use super::FilterRule;

    /// The scene's links (both sides), the bridge the config names, and
    /// the attachment's CNI_IFNAME.
    const NAMES: &[&str] = &[
        "eth0", "lo", "other0", "other1", "uplink", "veth9", "eth9", "cni0",
    ];
    const CIDRS: &[&str] = &[
        "10.1.0.2/24",
        "10.9.0.9/24",
        "192.0.2.10/24",
        "192.0.2.0/24",
        "0.0.0.0/0",
        "fd00::2/64",
        "::/0",
    ];
    const IPS: &[&str] = &["10.1.0.1", "192.0.2.1", "10.9.0.1", "fd00::1"];
    /// Seeded keys of this scope and of others.
    const STORE_KEYS: &[&str] = &["10.1.0.2", "10.1.0.3", "10.2.0.2", "10.3.0.2", "last"];
    const GLOBAL_KEYS: &[&str] = &[
        "net.ipv4.ip_forward",
        "net.ipv6.conf.all.forwarding",
        "net.core.somaxconn",
        "kernel.hostname",
    ];
    const SETTINGS: &[&str] = &[
        "forwarding",
        "rp_filter",
        "proxy_arp",
        "accept_ra",
        "arp_notify",
        "disable_ipv6",
    ];

    fn one_of(u: &mut Unstructured<'_>, list: &[&str]) -> Result<String> {
        Ok((*u.choose(list)?).to_string())
    }

    /// A link name: the scene's, one of four fresh ones, or anything.
    pub fn name(u: &mut Unstructured<'_>) -> Result<String> {
        match u.int_in_range(0..=9u8)? {
            0..=7 => one_of(u, NAMES),
            8 => Ok(format!("vfz{}", u.int_in_range(0..=3u8)?)),
            _ => String::arbitrary(u),
        }
    }

    /// `draw`'s value or none, half and half.
    fn maybe(
        u: &mut Unstructured<'_>,
        draw: fn(&mut Unstructured<'_>) -> Result<String>,
    ) -> Result<Option<String>> {
        Ok(if bool::arbitrary(u)? {
            Some(draw(u)?)
        } else {
            None
        })
    }

    pub fn opt_name(u: &mut Unstructured<'_>) -> Result<Option<String>> {
        maybe(u, name)
    }

    /// An address or network: the scene's, or anything.
    pub fn text(u: &mut Unstructured<'_>) -> Result<String> {
        match u.int_in_range(0..=2u8)? {
            0 => one_of(u, CIDRS),
            1 => one_of(u, IPS),
            _ => String::arbitrary(u),
        }
    }

    pub fn opt_text(u: &mut Unstructured<'_>) -> Result<Option<String>> {
        maybe(u, text)
    }

    pub fn store_key(u: &mut Unstructured<'_>) -> Result<String> {
        if bool::arbitrary(u)? {
            one_of(u, STORE_KEYS)
        } else {
            String::arbitrary(u)
        }
    }

    /// Keys for one `lookup`: a few, or past the host's bound.
    pub fn store_keys(u: &mut Unstructured<'_>) -> Result<Vec<String>> {
        if u8::arbitrary(u)? == 0 {
            let key = store_key(u)?;
            return Ok(vec![key; crate::sandbox::host_store::MAX_LOOKUP_KEYS + 1]);
        }
        let n = u8::arbitrary(u)? % 8;
        (0..n).map(|_| store_key(u)).collect()
    }

    /// A sysctl key: a node-wide one, `net.ipv{4,6}.{conf,neigh}.<link
    /// name|all|default>.<setting>`, or anything.
    pub fn sysctl(u: &mut Unstructured<'_>) -> Result<String> {
        match u.int_in_range(0..=2u8)? {
            0 => one_of(u, GLOBAL_KEYS),
            1 => {
                let iface = match u.int_in_range(0..=2u8)? {
                    0 => "all".to_string(),
                    1 => "default".to_string(),
                    _ => name(u)?,
                };
                Ok(format!(
                    "net.ipv{}.{}.{iface}.{}",
                    if bool::arbitrary(u)? { 6 } else { 4 },
                    if bool::arbitrary(u)? { "neigh" } else { "conf" },
                    one_of(u, SETTINGS)?
                ))
            }
            _ => String::arbitrary(u),
        }
    }

    /// An address a filter rule names: the attachment's own, another
    /// attachment's, the node's, or any text.
    fn rule_address(u: &mut Unstructured<'_>) -> Result<String> {
        match u.int_in_range(0..=3u8)? {
            0 => Ok("10.1.0.5".into()),
            1 => Ok("10.1.0.77".into()),
            2 => Ok("192.168.9.1".into()),
            _ => text(u),
        }
    }

    impl<'a> Arbitrary<'a> for FilterRule {
        fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
            Ok(match u.int_in_range(0..=6u8)? {
                0 => {
                    let except = (0..u.int_in_range(0..=3u8)?)
                        .map(|_| text(u))
                        .collect::<Result<_>>()?;
                    FilterRule::Masquerade(rule_address(u)?, except)
                }
                1 => FilterRule::PortMap {
                    protocol: u8::arbitrary(u)?,
                    host_ip: maybe(u, rule_address)?,
                    host_port: u16::arbitrary(u)?,
                    address: rule_address(u)?,
                    port: u16::arbitrary(u)?,
                },
                // One of the mappings the config grants (`PORT_MAPPINGS`).
                2 => {
                    let udp = bool::arbitrary(u)?;
                    FilterRule::PortMap {
                        protocol: u8::from(udp),
                        host_ip: udp.then(|| "192.168.9.1".into()),
                        host_port: if udp { 5353 } else { 8080 },
                        address: rule_address(u)?,
                        port: if udp { 53 } else { 80 },
                    }
                }
                3 => FilterRule::Hairpin(rule_address(u)?),
                4 => FilterRule::Forward(rule_address(u)?),
                5 => FilterRule::Isolate(name(u)?),
                _ => FilterRule::MacSpoof(name(u)?, String::arbitrary(u)?),
            })
        }
    }
}

/// `route-spec` fields.
#[derive(Debug, Clone, Default, Arbitrary)]
pub struct RouteArgs {
    #[arbitrary(with = draw::text)]
    pub dst: String,
    #[arbitrary(with = draw::opt_text)]
    pub gw: Option<String>,
    #[arbitrary(with = draw::opt_name)]
    pub dev: Option<String>,
    #[arbitrary(with = draw::opt_text)]
    pub src: Option<String>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
}

impl RouteArgs {
    fn to_wit(&self) -> RouteSpec {
        RouteSpec {
            dst: self.dst.clone(),
            gw: self.gw.clone(),
            dev: self.dev.clone(),
            src: self.src.clone(),
            mtu: self.mtu,
            advmss: self.advmss,
            priority: self.priority,
            table: self.table,
            scope: self.scope,
        }
    }
}

struct HarnessServices {
    store: StoreAccess,
    net: NetAccess,
}

impl Services for HarnessServices {
    fn ipam(
        &self,
        op: IpamOp,
        _deadline: std::time::Instant,
    ) -> Result<Option<CniResultWit>, CniError> {
        Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!("no IPAM delegate in the harness ({op:?})"),
        ))
    }
    fn store(&self) -> Option<StoreAccess> {
        Some(self.store.clone())
    }
    fn net(&self) -> Option<NetAccess> {
        Some(self.net.clone())
    }
}

/// What must not change, captured after setting the scene.
#[derive(Debug, PartialEq, Eq)]
struct Protected {
    links: Vec<(String, LinkInfo, Vec<IpNet>, Vec<Route>)>,
    sysctls: Vec<(String, String)>,
}

pub struct ImportHarness {
    ctx: Ctx,
    net: Arc<Mutex<Box<dyn Net>>>,
    filter: Arc<Mutex<Box<dyn Filter>>>,
    store: Arc<dyn StateStore>,
    ledger: Arc<Mutex<Ledger>>,
    node: NsId,
    container: NsId,
    command: Command,
    owner: Owner,
    /// Table indices `container-netns`/`node-netns` returned.
    handles: Vec<u32>,
    protected: Protected,
    /// Every scope and its data before the call.
    scopes_before: Vec<(Scope, ScopeData)>,
    /// The port mappings the plugin's config lists (its rule cap).
    ports: usize,
}

/// One call of the `store` interface.
fn store_call(c: &mut Ctx, op: StoreCall) -> wasmtime::Result<String> {
    match op {
        StoreCall::Reserve(key) => split(StoreHost::reserve(c, key)).map(|r| format!("{r:?}")),
        StoreCall::ReleaseByOwner => {
            split(StoreHost::release_by_owner(c)).map(|r| format!("{r:?}"))
        }
        StoreCall::Release(key) => split(StoreHost::release(c, key)).map(|r| format!("{r:?}")),
        StoreCall::GetByOwner => split(StoreHost::get_by_owner(c)).map(|r| format!("{r:?}")),
        StoreCall::List => {
            split(StoreHost::list(c)).map(|r| format!("{} entries", r.map_or(0, |v| v.len())))
        }
        StoreCall::Lookup(keys) => split(StoreHost::lookup(c, keys)).map(|r| format!("{r:?}")),
        StoreCall::Span(first, last) => {
            split(StoreHost::span(c, first, last)).map(|r| format!("{r:?}"))
        }
        StoreCall::BlocksOfOtherNodes => {
            split(StoreHost::blocks_of_other_nodes(c)).map(|r| format!("{r:?}"))
        }
        StoreCall::Now => StoreHost::now(c).map(|r| r.to_string()),
        StoreCall::GetValue(name) => split(StoreHost::get_value(c, name)).map(|r| format!("{r:?}")),
        StoreCall::SetValue(name, value) => {
            split(StoreHost::set_value(c, name, value)).map(|r| format!("{r:?}"))
        }
    }
}

fn other_owner() -> Owner {
    Owner {
        container_id: "other-cid".into(),
        ifname: "eth9".into(),
    }
}

fn scope(network: &str, plugin: &str) -> Scope {
    Scope {
        network: network.into(),
        plugin: plugin.into(),
        data_dir: None,
    }
}

fn seeded(prefix: &str) -> ScopeData {
    let mut d = ScopeData::default();
    d.entries.insert(
        format!("{prefix}.2"),
        Entry {
            owner: other_owner(),
            allocated_at: 1,
            released_at: None,
            node: None,
        },
    );
    d.entries.insert(
        format!("{prefix}.3"),
        Entry {
            owner: other_owner(),
            allocated_at: 1,
            released_at: Some(2),
            node: None,
        },
    );
    d.values.insert("last".into(), format!("{prefix}.2"));
    d
}

/// Name a setup step in its error.
fn e<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |err| format!("harness setup: {what}: {err}")
}

fn setup_net() -> Result<(MemoryNet, NsId, NsId), String> {
    let mut net = MemoryNet::new();
    let ctr = net.add_namespace(CONTAINER);
    let node = net.open(NsRef::Current).map_err(e("node"))?;
    net.create_veth(node, "other0", "other1", node, None, None)
        .map_err(e("other0"))?;
    net.create_tap(node, "uplink", None, None, false, None, None)
        .map_err(e("uplink"))?;
    let up = wasm_cni_kernel::net::LinkChange {
        up: Some(true),
        ..Default::default()
    };
    net.set_link(node, "uplink", &up).map_err(e("uplink up"))?;
    let addr = net::parse_cidr("192.0.2.10/24").map_err(e("address"))?;
    net.add_address(node, "uplink", &addr)
        .map_err(e("uplink address"))?;
    let default = Route {
        gw: Some("192.0.2.1".parse().map_err(e("gateway"))?),
        dev: Some("uplink".into()),
        ..Route::to(net::parse_cidr("0.0.0.0/0").map_err(e("route"))?)
    };
    // Taps have no carrier, so the model may refuse a gateway route; the
    // default route is then simply absent, which changes nothing below.
    let _ = net.add_route(node, &default);
    net.create_veth(ctr, "eth9", "veth9", node, None, None)
        .map_err(e("eth9"))?;
    net.set_link(ctr, "eth9", &up).map_err(e("eth9 up"))?;
    let addr = net::parse_cidr("10.9.0.9/24").map_err(e("address"))?;
    net.add_address(ctr, "eth9", &addr)
        .map_err(e("eth9 address"))?;
    Ok((net, node, ctr))
}

impl ImportHarness {
    /// A call for `command` with `host_call_budget` imports.
    pub fn new(command: Command, host_call_budget: u64) -> Result<Self, String> {
        Self::on_store(command, host_call_budget, Arc::new(MemoryStore::default()))
    }

    /// [`ImportHarness::new`] on `store`: its scopes are seeded only where
    /// they are empty, so that a second call sees what the first left.
    pub fn on_store(
        command: Command,
        host_call_budget: u64,
        store: Arc<dyn StateStore>,
    ) -> Result<Self, String> {
        let (memory_net, node, container) = setup_net()?;
        let net: Arc<Mutex<Box<dyn Net>>> = Arc::new(Mutex::new(Box::new(memory_net)));
        let mut scopes_before = Vec::new();
        for (s, prefix) in [
            (scope(NETWORK, PLUGIN), "10.1.0"),
            (scope("othernet", PLUGIN), "10.2.0"),
            (scope(NETWORK, "host-local"), "10.3.0"),
        ] {
            let mut t = store.begin(&s).map_err(|e| e.to_string())?;
            if *t.data() == ScopeData::default() {
                *t.data() = seeded(prefix);
            }
            let before = t.data().clone();
            t.commit().map_err(|e| e.to_string())?;
            scopes_before.push((s, before));
        }
        let attachment = matches!(command, Command::Add | Command::Del | Command::Check);
        let owner = if attachment {
            Owner {
                container_id: "fuzz-cid".into(),
                ifname: "eth0".into(),
            }
        } else {
            Owner {
                container_id: String::new(),
                ifname: String::new(),
            }
        };
        let ledger = Arc::new(Mutex::new(Ledger {
            own_nets: vec![net::parse_cidr(OWN_ADDRESS).map_err(e("own address"))?],
            ..Ledger::default()
        }));
        let mut memory_filter = MemoryFilter::new();
        let (other, rules) = foreign_rules();
        memory_filter
            .add(&other, &rules)
            .map_err(|e| format!("seeding rules: {e}"))?;
        let filter: Arc<Mutex<Box<dyn Filter>>> = Arc::new(Mutex::new(Box::new(memory_filter)));
        let services = HarnessServices {
            store: StoreAccess {
                backend: store.clone(),
                scope: scope(NETWORK, PLUGIN),
                owner: owner.clone(),
                command,
            },
            net: NetAccess {
                backend: net.clone(),
                container: Some(NsSource::Path(PathBuf::from(CONTAINER))),
                ifname: "eth0".into(),
                command,
                config: ConfigGrants {
                    named: BTreeSet::from(["cni0".to_string()]),
                    default_master: true,
                    passthru: false,
                    tap_owner: Some(TAP_OWNER),
                    tap_group: None,
                    vm_node: false,
                },
                ledger: ledger.clone(),
                on_created: None,
                ports: PortGrant::from_config(PORT_MAPPINGS),
                filter: Some(FilterAccess {
                    backend: filter.clone(),
                    tag: Tag::new(NETWORK, &owner.container_id, &owner.ifname),
                    holder: Arc::new(|_| None),
                }),
            },
        };
        let mut ctx = Ctx::new(
            PLUGIN,
            // Room for a scope at its quota, as the host holds it: the
            // store's own bound is what these calls meet first.
            MemoryCap::new(4 * super::host_store::MAX_SCOPE_BYTES as u64),
            host_call_budget,
            std::time::Instant::now() + std::time::Duration::from_secs(3600),
            3_600_000,
            Arc::new(services),
        );
        ctx.config_files = vec![CONFIG_FILE.to_string()];
        let mut h = ImportHarness {
            ctx,
            net,
            filter,
            store,
            ledger,
            node,
            container,
            command,
            owner,
            handles: Vec::new(),
            protected: Protected {
                links: Vec::new(),
                sysctls: Vec::new(),
            },
            scopes_before,
            ports: PortGrant::from_config(PORT_MAPPINGS).len(),
        };
        h.protected = h.protected_now()?;
        Ok(h)
    }

    fn protected_now(&self) -> Result<Protected, String> {
        let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
        let mut links = Vec::new();
        for (ns, names) in [
            (self.node, FOREIGN_NODE),
            (self.container, FOREIGN_CONTAINER),
        ] {
            for name in names {
                let info = net
                    .link_by_name(ns, name)
                    .map_err(|e| format!("{name}: {e}"))?;
                let addrs = net
                    .addresses(ns, name)
                    .map_err(|e| format!("{name}: {e}"))?;
                let routes = net
                    .routes(ns, name, None)
                    .map_err(|e| format!("{name}: {e}"))?;
                links.push((name.to_string(), info, addrs, routes));
            }
        }
        let mut sysctls = Vec::new();
        for (ns, keys) in [
            (self.node, NODE_SYSCTLS),
            (self.container, CONTAINER_SYSCTLS),
        ] {
            for key in keys {
                let v = net.sysctl_get(ns, key).map_err(|e| format!("{key}: {e}"))?;
                sysctls.push((key.to_string(), v));
            }
        }
        Ok(Protected { links, sysctls })
    }

    fn handle(&self, h: Handle) -> u32 {
        match h {
            Handle::Issued(i) if !self.handles.is_empty() => self.handles[i % self.handles.len()],
            // Nothing issued yet: an index that was never handed out.
            Handle::Issued(i) => 1_000 + (i % 1_000) as u32,
            Handle::Forged(rep) => rep,
        }
    }

    fn ns(&self, h: Handle) -> Resource<NetnsHandle> {
        Resource::new_borrow(self.handle(h))
    }

    /// Make one import call. `Ok` carries the answer the plugin would get
    /// (a WIT value, possibly an error variant), `Err` the trap it would
    /// suffer.
    pub fn call(&mut self, import: Import) -> Result<String, String> {
        let c = &mut self.ctx;
        let out: wasmtime::Result<String> = match import {
            Import::Log(level, msg) => {
                let level = match level % 4 {
                    0 => Level::Error,
                    1 => Level::Warn,
                    2 => Level::Info,
                    _ => Level::Debug,
                };
                LogHost::log(c, level, msg).map(|()| "logged".into())
            }
            Import::ContainerNetns => self.issue(NetworkHost::container_netns),
            Import::NodeNetns => self.issue(NetworkHost::node_netns),
            Import::DropNetns(h) => {
                let rep = self.handle(h);
                self.handles.retain(|r| *r != rep);
                HostNetns::drop(&mut self.ctx, Resource::new_own(rep)).map(|()| "dropped".into())
            }
            Import::Create(ns, op) => self.create(ns, op),
            Import::Link(ns, op) => self.link(ns, op),
            Import::Config(ns, op) => self.config(ns, op),
            Import::Store(op) => store_call(c, op),
            Import::ReadConfigFile(path) => {
                split(FilesHost::read_config_file(c, path)).map(|r| format!("{r:?}"))
            }
            Import::Ipam(op) => match op % 5 {
                0 => IpamHost::add(c).map(|r| format!("{r:?}")),
                1 => IpamHost::del(c).map(|r| format!("{r:?}")),
                2 => IpamHost::check(c).map(|r| format!("{r:?}")),
                3 => IpamHost::status(c).map(|r| format!("{r:?}")),
                _ => IpamHost::gc(c).map(|r| format!("{r:?}")),
            },
            Import::Filter(op, rules) => {
                let rules: Vec<WitRule> = rules.iter().map(FilterRule::to_wit).collect();
                let r = match op % 3 {
                    0 => split(FilterHost::add(c, rules)),
                    1 => split(FilterHost::check(c, rules)),
                    _ => split(FilterHost::remove(c, rules)),
                };
                r.map(|r| format!("{r:?}"))
            }
        };
        out.map_err(|e| format!("{e:#}"))
    }

    /// `container-netns` or `node-netns`: the handle it issues is kept for
    /// the calls that follow.
    fn issue<E: std::fmt::Debug>(
        &mut self,
        open: fn(&mut Ctx) -> Result<Resource<NetnsHandle>, Fail<E>>,
    ) -> wasmtime::Result<String> {
        match split(open(&mut self.ctx))? {
            Ok(res) => {
                let rep = res.rep();
                self.handles.push(rep);
                Ok(format!("handle {rep}"))
            }
            Err(e) => Ok(format!("{e:?}")),
        }
    }

    fn create(&mut self, ns: Handle, op: Create) -> wasmtime::Result<String> {
        let a = self.ns(ns);
        match op {
            Create::Veth {
                name,
                peer,
                peer_ns,
                mtu,
                mac,
            } => {
                let b = self.ns(peer_ns);
                split(HostNetns::create_veth(
                    &mut self.ctx,
                    a,
                    name,
                    peer,
                    b,
                    mtu,
                    mac,
                ))
                .map(|r| format!("{r:?}"))
            }
            Create::Bridge { name, mtu } => {
                split(HostNetns::ensure_bridge(&mut self.ctx, a, name, mtu))
                    .map(|r| format!("{r:?}"))
            }
            Create::Macvlan {
                name,
                master,
                mode,
                mtu,
                mac,
                target,
                tap,
            } => {
                let t = self.ns(target);
                let mode = match mode % 4 {
                    0 => MacvlanMode::Bridge,
                    1 => MacvlanMode::Private,
                    2 => MacvlanMode::Vepa,
                    _ => MacvlanMode::Passthru,
                };
                let make = if tap {
                    HostNetns::create_macvtap
                } else {
                    HostNetns::create_macvlan
                };
                split(make(&mut self.ctx, a, name, master, mode, mtu, mac, t))
                    .map(|r| format!("{r:?}"))
            }
            Create::Vlan {
                name,
                master,
                vlan_id,
                mtu,
                target,
            } => {
                let t = self.ns(target);
                split(HostNetns::create_vlan(
                    &mut self.ctx,
                    a,
                    name,
                    master,
                    vlan_id,
                    mtu,
                    t,
                ))
                .map(|r| format!("{r:?}"))
            }
            Create::Ipvlan {
                name,
                master,
                mode,
                mtu,
                target,
            } => {
                let t = self.ns(target);
                let mode = match mode % 3 {
                    0 => IpvlanMode::L2,
                    1 => IpvlanMode::L3,
                    _ => IpvlanMode::L3s,
                };
                split(HostNetns::create_ipvlan(
                    &mut self.ctx,
                    a,
                    name,
                    master,
                    mode,
                    mtu,
                    t,
                ))
                .map(|r| format!("{r:?}"))
            }
            Create::Tap {
                name,
                mtu,
                mac,
                multi_queue,
                owner,
                group,
            } => split(HostNetns::create_tap(
                &mut self.ctx,
                a,
                name,
                mtu,
                mac,
                multi_queue,
                owner,
                group,
            ))
            .map(|r| format!("{r:?}")),
            Create::Ifb(name, mtu) => {
                split(HostNetns::create_ifb(&mut self.ctx, a, name, mtu)).map(|r| format!("{r:?}"))
            }
        }
    }

    fn link(&mut self, ns: Handle, op: LinkCall) -> wasmtime::Result<String> {
        let a = self.ns(ns);
        let c = &mut self.ctx;
        match op {
            LinkCall::ByName(name) => {
                split(HostNetns::link_by_name(c, a, name)).map(|r| format!("{r:?}"))
            }
            LinkCall::ByIndex(index) => {
                split(HostNetns::link_by_index(c, a, index)).map(|r| format!("{r:?}"))
            }
            LinkCall::List => split(HostNetns::list_links(c, a)).map(|r| format!("{r:?}")),
            LinkCall::Set {
                name,
                up,
                mtu,
                mac,
                master,
                promisc,
                allmulti,
                txqlen,
                hairpin,
            } => {
                let settings = LinkSettings {
                    up,
                    mtu,
                    mac,
                    master,
                    promisc,
                    allmulti,
                    txqlen,
                    hairpin,
                };
                split(HostNetns::set_link(c, a, name, settings)).map(|r| format!("{r:?}"))
            }
            LinkCall::Delete(name) => {
                split(HostNetns::delete_link(c, a, name)).map(|r| format!("{r:?}"))
            }
        }
    }

    fn config(&mut self, ns: Handle, op: ConfigCall) -> wasmtime::Result<String> {
        let a = self.ns(ns);
        let c = &mut self.ctx;
        match op {
            ConfigCall::AddAddress(link, cidr) => {
                split(HostNetns::add_address(c, a, link, Address { cidr }))
                    .map(|r| format!("{r:?}"))
            }
            ConfigCall::DelAddress(link, cidr) => {
                split(HostNetns::del_address(c, a, link, Address { cidr }))
                    .map(|r| format!("{r:?}"))
            }
            ConfigCall::ListAddresses(link) => {
                split(HostNetns::list_addresses(c, a, link)).map(|r| format!("{r:?}"))
            }
            ConfigCall::AddRoute(route) => {
                split(HostNetns::add_route(c, a, route.to_wit())).map(|r| format!("{r:?}"))
            }
            ConfigCall::DelRoute(route) => {
                split(HostNetns::del_route(c, a, route.to_wit())).map(|r| format!("{r:?}"))
            }
            ConfigCall::ListRoutes(link, table) => {
                split(HostNetns::list_routes(c, a, link, table)).map(|r| format!("{r:?}"))
            }
            ConfigCall::GetSysctl(key) => {
                split(HostNetns::get_sysctl(c, a, key)).map(|r| format!("{r:?}"))
            }
            ConfigCall::SetSysctl(key, value) => {
                split(HostNetns::set_sysctl(c, a, key, value)).map(|r| format!("{r:?}"))
            }
            ConfigCall::LimitRate(link, rate, burst) => split(HostNetns::limit_rate(
                c,
                a,
                link,
                WitRateLimit { rate, burst },
            ))
            .map(|r| format!("{r:?}")),
            ConfigCall::RedirectIngress(link, to) => {
                split(HostNetns::redirect_ingress(c, a, link, to)).map(|r| format!("{r:?}"))
            }
            ConfigCall::ListQdiscs(link) => {
                split(HostNetns::list_qdiscs(c, a, link)).map(|r| format!("{r:?}"))
            }
        }
    }

    /// The namespace half of the policy: links, addresses, routes and
    /// sysctls of others are as they were, and every link now present that
    /// was not there before is recorded as the attachment's (or is the
    /// config's bridge).
    pub fn check(&self) -> Result<(), String> {
        let now = self.protected_now()?;
        if now != self.protected {
            return Err(format!(
                "a foreign link or sysctl changed:\nbefore {:#?}\nafter {now:#?}",
                self.protected
            ));
        }
        let ledger = self
            .ledger
            .lock()
            .map(|c| c.clone())
            .map_err(|_| "poisoned".to_string())?;
        let created = ledger.created.clone();
        let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
        for (ns, foreign, mine, extra) in [
            (self.node, FOREIGN_NODE, &created.node, Some("cni0")),
            (self.container, FOREIGN_CONTAINER, &created.container, None),
        ] {
            for l in net.links(ns).map_err(|e| e.to_string())? {
                // Recorded links are known by identity, not just by name.
                let mine = mine.get(&l.name) == Some(&l.id());
                let known = l.name == "lo"
                    || foreign.contains(&l.name.as_str())
                    || mine
                    || extra == Some(l.name.as_str());
                if !known {
                    return Err(format!("link {} exists but is nobody's", l.name));
                }
            }
        }
        // Foreign links keep their qdiscs: only the attachment's are shaped.
        for (ns, names) in [
            (self.node, FOREIGN_NODE),
            (self.container, FOREIGN_CONTAINER),
        ] {
            for name in names {
                let q = net.qdiscs(ns, name).map_err(|e| e.to_string())?;
                if !q.is_empty() {
                    return Err(format!("foreign link {name} got qdiscs {q:?}"));
                }
            }
        }
        self.check_filter(&ledger)?;
        // Nothing beyond the attachment's caps, whatever it asked.
        use super::limits::caps;
        let made = ledger.made;
        if made.links > caps::LINKS
            || made.node_addresses_and_routes > caps::NODE_ADDRESSES_AND_ROUTES
            || made.tc > caps::TC
            || ledger.filter_added.len() > caps::RULES + caps::RULES_PER_PORT_MAPPING * self.ports
        {
            return Err(format!(
                "past the attachment's caps: {made:?}, {} rules",
                ledger.filter_added.len()
            ));
        }
        // What the attachment put on node links stays inside its networks:
        // no address or route the node's own traffic could follow.
        let inside = |n: &IpNet| {
            ledger.own_nets.iter().any(|own| {
                own.is_ipv4() == n.is_ipv4()
                    && own.prefix_len() <= n.prefix_len()
                    && own.contains(&n.addr())
            })
        };
        for l in net.links(self.node).map_err(|e| e.to_string())? {
            if FOREIGN_NODE.contains(&l.name.as_str()) {
                continue;
            }
            for a in net
                .addresses(self.node, &l.name)
                .map_err(|e| e.to_string())?
            {
                if !inside(&a) && !a.addr().is_loopback() {
                    return Err(format!(
                        "node address {a} on {} is not the attachment's",
                        l.name
                    ));
                }
            }
            for r in net
                .routes(self.node, &l.name, None)
                .map_err(|e| e.to_string())?
            {
                if !inside(&r.dst) {
                    return Err(format!(
                        "node route {} via {} is not the attachment's",
                        r.dst, l.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The filter half: the other attachment's rules are all there, and
    /// every other rule is the attachment's, for its own address, its
    /// configured ports and links it created.
    fn check_filter(&self, ledger: &Ledger) -> Result<(), String> {
        let mut filter = self.filter.lock().map_err(|_| "poisoned".to_string())?;
        let (other, rules) = foreign_rules();
        let present = filter.present(&other, &rules).map_err(|e| e.to_string())?;
        if present.iter().any(|p| !p) {
            return Err(format!("another attachment's rules went: {present:?}"));
        }
        let mine = Tag::new(NETWORK, &self.owner.container_id, &self.owner.ifname);
        let own = OWN_ADDRESS.split('/').next().unwrap_or_default();
        let grants = PortGrant::from_config(PORT_MAPPINGS);
        for entry in filter.list().map_err(|e| e.to_string())? {
            let Some(o) = Owned::parse(&entry.comment) else {
                return Err(format!("a rule without an owner: {entry:?}"));
            };
            if o.tag == other {
                continue;
            }
            if o.tag != mine {
                return Err(format!("a rule of someone else: {entry:?}"));
            }
            let words: Vec<&str> = o.text.split(' ').collect();
            let addr_of = |w: &str| {
                let w = w.rsplit_once(':').map_or(w, |(a, _)| a);
                w.trim_start_matches('[').trim_end_matches(']').to_string()
            };
            let ok = match words.as_slice() {
                ["masq", src, ..] | ["hairpin", src] | ["forward", src] => *src == own,
                ["dnat", _, _, dst] => {
                    addr_of(dst) == own
                        && o.claim().is_some_and(|c| {
                            grants.iter().any(|g| {
                                g.proto == c.proto
                                    && g.host_port == c.port
                                    && g.host_ip == c.host_ip
                            })
                        })
                }
                ["isolate", _] => !ledger.created.node.is_empty(),
                ["macspoof", link, _] => ledger.created.node.contains_key(*link),
                _ => false,
            };
            if !ok {
                return Err(format!("rule {:?} is not the attachment's to make", o.text));
            }
        }
        Ok(())
    }

    /// End the call as the runtime does (commit only if `commit`), then
    /// check the store half of the policy: other scopes are untouched, and
    /// another attachment's live entries are released only by GC and never
    /// taken over.
    pub fn finish(mut self, commit: bool) -> Result<(), String> {
        if let Some(txn) = self.ctx.txn.take() {
            if commit {
                txn.commit().map_err(|e| e.to_string())?;
            }
        }
        for (s, before) in &self.scopes_before {
            let mut t = self.store.begin(s).map_err(|e| e.to_string())?;
            let after = t.data().clone();
            let own = s.network == NETWORK && s.plugin == PLUGIN;
            if !own || !commit {
                if &after != before {
                    return Err(format!("scope {s:?} changed: {after:?}"));
                }
                continue;
            }
            for (key, e) in &before.entries {
                if !e.is_live() {
                    continue;
                }
                let Some(now) = after.entries.get(key) else {
                    return Err(format!("{key}: another owner's live entry vanished"));
                };
                let released_by_gc = self.command == Command::Gc && now.released_at.is_some();
                if now != e && !released_by_gc {
                    return Err(format!("{key}: another owner's live entry became {now:?}"));
                }
            }
            for (key, e) in &after.entries {
                if e.owner != self.owner && before.entries.get(key) != Some(e) {
                    let released_by_gc = self.command == Command::Gc
                        && before.entries.get(key).map(|b| &b.owner) == Some(&e.owner);
                    if !released_by_gc {
                        return Err(format!("{key}: written for {:?}", e.owner));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veth(name: &str, peer: &str) -> Import {
        Import::Create(
            Handle::Issued(0),
            Create::Veth {
                name: name.into(),
                peer: peer.into(),
                peer_ns: Handle::Issued(1),
                mtu: None,
                mac: None,
            },
        )
    }

    /// A call whose plugin makes no WASI call makes no WASI context (each
    /// seeds a random generator); the first WASI call makes the deny-all
    /// one and, like every WASI call, is charged to the call's budget.
    #[test]
    fn the_wasi_context_is_made_at_the_first_wasi_call() {
        use wasmtime_wasi::WasiView;
        let mut h = ImportHarness::new(Command::Add, 2).unwrap();
        h.call(Import::NodeNetns).unwrap();
        h.call(Import::Log(1, "x".into())).unwrap();
        assert!(h.ctx.wasi.is_none());
        let before = h.ctx.host_calls_left;
        let _ = WasiView::ctx(&mut h.ctx);
        assert!(h.ctx.wasi.is_some());
        assert_eq!(h.ctx.host_calls_left, before.saturating_sub(1));
    }

    /// The import a call's `Debug` names: `Link::Set`, `Store::Now`, `Log`.
    fn kind_of(debug: &str) -> String {
        let word =
            |s: &str| -> String { s.chars().take_while(char::is_ascii_alphanumeric).collect() };
        let outer = word(debug);
        let inner = match outer.as_str() {
            // After the namespace handle.
            "Create" | "Link" | "Config" => debug.split_once("), ").map(|(_, r)| word(r)),
            "Store" => debug.strip_prefix("Store(").map(word),
            _ => None,
        };
        match inner {
            Some(inner) => format!("{outer}::{inner}"),
            None => outer,
        }
    }

    /// What the fuzzer does, in short and from fixed bytes: calls drawn
    /// from the import list reach most imports, many get past "not found"
    /// to an answer, and the policy holds after each.
    #[test]
    fn drawn_calls_reach_the_imports_and_the_policy_holds() {
        use arbitrary::{Arbitrary, Unstructured};
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut kinds = BTreeSet::new();
        let mut answered = 0;
        for round in 0..300 {
            let bytes: Vec<u8> = (0..256)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 32) as u8
                })
                .collect();
            let mut u = Unstructured::new(&bytes);
            let mut h = ImportHarness::new(Command::Add, 1_000).unwrap();
            // Namespace handles first, as a plugin would get them.
            h.call(Import::ContainerNetns).unwrap();
            h.call(Import::NodeNetns).unwrap();
            while let Ok(import) = Import::arbitrary(&mut u) {
                let debug = format!("{import:?}");
                let kind = kind_of(&debug);
                // Calls that name a link: answered only when the name is
                // one of the scene's.
                let names_something = matches!(
                    kind.as_str(),
                    "Link::ByName" | "Config::ListAddresses" | "Link::Set"
                );
                kinds.insert(kind);
                if h.call(import).is_ok_and(|out| out.starts_with("Ok(")) && names_something {
                    answered += 1;
                }
                h.check()
                    .unwrap_or_else(|why| panic!("after {debug}: {why}"));
                if u.is_empty() {
                    break;
                }
            }
            h.finish(round % 2 == 0).unwrap();
        }
        // All 41 kinds, and 17 link lookups answered, when written (calls
        // are drawn by group, then within it); with link names drawn as any
        // string instead, none is.
        assert!(kinds.len() >= 39, "{} kinds drawn: {kinds:?}", kinds.len());
        assert!(answered >= 8, "{answered} link lookups answered");
    }

    #[test]
    fn the_scene_holds_and_refusals_change_nothing() {
        let mut h = ImportHarness::new(Command::Add, 1_000).unwrap();
        h.call(Import::ContainerNetns).unwrap();
        h.call(Import::NodeNetns).unwrap();
        let out = h.call(veth("eth0", "vethfz0")).unwrap();
        assert!(out.starts_with("Ok("), "{out}");
        for attack in [
            Import::Link(Handle::Issued(1), LinkCall::Delete("other0".into())),
            Import::Link(Handle::Issued(1), LinkCall::Delete("lo".into())),
            Import::Link(Handle::Issued(0), LinkCall::Delete("eth9".into())),
            Import::Config(
                Handle::Issued(1),
                ConfigCall::SetSysctl("net.ipv4.conf.other0.rp_filter".into(), "0".into()),
            ),
            Import::Config(
                Handle::Issued(0),
                ConfigCall::SetSysctl("kernel.hostname".into(), "x".into()),
            ),
        ] {
            let out = h.call(attack).unwrap();
            assert!(out.starts_with("Err(NetError::Refused("), "{out}");
        }
        // Not there at all: not found, as a second DEL expects, not refused.
        let out = h
            .call(Import::Link(
                Handle::Issued(1),
                LinkCall::Delete("nosuch0".into()),
            ))
            .unwrap();
        assert!(out.starts_with("Err(NetError::NotFound("), "{out}");
        let out = h
            .call(Import::Link(Handle::Forged(77), LinkCall::List))
            .unwrap_err();
        assert!(out.contains("resource not present"), "{out}");
        h.call(Import::Store(StoreCall::Reserve("10.1.0.9".into())))
            .unwrap();
        h.check().unwrap();
        h.finish(true).unwrap();
    }

    /// Found by the `host_imports` fuzzer: `ensure-bridge` in the container
    /// created CNI_IFNAME without recording it as the attachment's (and
    /// allowed any link the plugin could change, `lo` included).
    #[test]
    fn a_container_bridge_is_recorded_and_only_for_the_ifname() {
        let mut h = ImportHarness::new(Command::Add, 100).unwrap();
        h.call(Import::ContainerNetns).unwrap();
        let bridge = |name: &str| {
            Import::Create(
                Handle::Issued(0),
                Create::Bridge {
                    name: name.into(),
                    mtu: None,
                },
            )
        };
        let out = h.call(bridge("eth0")).unwrap();
        assert!(out.starts_with("Ok("), "{out}");
        h.check().unwrap();
        for other in ["lo", "eth1"] {
            let out = h.call(bridge(other)).unwrap();
            assert!(out.starts_with("Err(NetError::Refused("), "{out}");
        }
        h.check().unwrap();
        h.finish(true).unwrap();
    }

    /// One ADD made 1 200 ifbs (and DEL took 25 s), or thousands of rules
    /// in the node's shared chains: each attachment has caps, and what is
    /// refused beyond them changes nothing.
    #[test]
    fn an_attachment_stays_within_its_caps() {
        use super::super::limits::caps;
        let mut h = ImportHarness::new(Command::Add, 10_000).unwrap();
        h.call(Import::ContainerNetns).unwrap();
        h.call(Import::NodeNetns).unwrap();
        let mut made = 0;
        for i in 0..3 * caps::LINKS {
            let out = h
                .call(Import::Create(
                    Handle::Issued(1),
                    Create::Ifb(format!("ifbcap{i}"), None),
                ))
                .unwrap();
            if out.starts_with("Ok(") {
                made += 1;
            } else {
                assert!(out.contains("at most 8 links"), "{out}");
                assert!(out.starts_with("Err(NetError::Refused("), "{out}");
            }
            h.check().unwrap();
        }
        assert_eq!(made, caps::LINKS);
        // Rules: the same source with other exceptions is another rule.
        let own = "10.1.0.5";
        let mut added = 0;
        for i in 0..2 * caps::RULES {
            let rule = FilterRule::Masquerade(own.into(), vec![format!("10.9.{i}.0/24")]);
            let out = h.call(Import::Filter(0, vec![rule])).unwrap();
            if out.starts_with("Ok(") {
                added += 1;
            } else {
                assert!(out.contains("an attachment may add at most"), "{out}");
            }
        }
        let cap = caps::RULES + caps::RULES_PER_PORT_MAPPING * h.ports;
        assert_eq!(added, cap);
        h.check().unwrap();
        h.finish(true).unwrap();
    }

    /// DEL and GC add nothing to the node, whatever the result they tear
    /// down says the attachment's addresses are.
    #[test]
    fn del_adds_nothing_to_the_node() {
        let mut h = ImportHarness::new(Command::Del, 1_000).unwrap();
        h.call(Import::NodeNetns).unwrap();
        let route = |dst: &str| {
            Import::Config(
                Handle::Issued(0),
                ConfigCall::AddRoute(RouteArgs {
                    dst: dst.into(),
                    dev: Some("cni0".into()),
                    ..RouteArgs::default()
                }),
            )
        };
        for attack in [
            route("0.0.0.0/1"),
            route("10.1.0.0/24"),
            Import::Config(
                Handle::Issued(0),
                ConfigCall::AddAddress("cni0".into(), "10.1.0.1/24".into()),
            ),
        ] {
            let out = h.call(attack.clone()).unwrap();
            assert!(
                out.contains("only ADD changes the node"),
                "{attack:?}: {out}"
            );
            h.check().unwrap();
        }
        h.finish(true).unwrap();
    }

    /// Without a bound on the scope, one call could make the host write
    /// `hostCallBudget` values of 64 KiB each (650 MB by default).
    #[test]
    fn a_scope_cannot_outgrow_its_bound() {
        let mut h = ImportHarness::new(Command::Add, 10_000).unwrap();
        let big = "v".repeat(64 << 10);
        let mut refused_at = None;
        for i in 0..1_000 {
            let out = h
                .call(Import::Store(StoreCall::SetValue(
                    format!("k{i}"),
                    Some(big.clone()),
                )))
                .unwrap();
            if out.contains("Refused") {
                assert!(out.contains("more than"), "{out}");
                refused_at = Some(i);
                break;
            }
        }
        let n = refused_at.expect("refused before 1000 values");
        assert!(n * (64 << 10) <= super::super::host_store::MAX_SCOPE_BYTES);
        // Shrinking is always allowed, and makes room again.
        let out = h
            .call(Import::Store(StoreCall::SetValue("k0".into(), None)))
            .unwrap();
        assert_eq!(out, "Ok(())");
        let out = h
            .call(Import::Store(StoreCall::SetValue("k0".into(), Some(big))))
            .unwrap();
        assert_eq!(out, "Ok(())");
        h.finish(true).unwrap();
    }

    /// What a plugin makes the host keep of its scope counts against its
    /// memory limit, as its own memory does: a daemon admits calls by that
    /// limit.
    #[test]
    fn a_scope_counts_against_the_calls_memory() {
        let mut h = ImportHarness::new(Command::Add, 10_000).unwrap();
        h.ctx.memory = MemoryCap::new(4 << 20);
        let big = "v".repeat(64 << 10);
        let mut stopped = None;
        for i in 0..100 {
            match h.call(Import::Store(StoreCall::SetValue(
                format!("k{i}"),
                Some(big.clone()),
            ))) {
                Ok(out) => assert_eq!(out, "Ok(())", "{i}"),
                Err(trap) => {
                    stopped = Some((i, trap));
                    break;
                }
            }
        }
        let (i, trap) = stopped.expect("a 6 MiB scope under a 4 MiB limit");
        assert!(
            trap.contains("memory limit of 4194304 bytes exceeded"),
            "{trap}"
        );
        // Three bytes held per byte stored: about 21 values of 64 KiB.
        assert!((18..=21).contains(&i), "{i}");
    }

    /// The bound holds across calls on disk, where a call starts counting
    /// from the file's length: a plugin that spreads its writes over many
    /// calls gains nothing.
    #[test]
    fn a_scope_on_disk_keeps_its_bound_across_calls() {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = Gone(std::env::temp_dir().join(format!("wasm-cni-bound-{}", std::process::id())));
        let store: Arc<dyn StateStore> = Arc::new(wasm_cni_store::DiskStore::new(&dir.0));
        let big = "v".repeat(64 << 10);
        let mut h = ImportHarness::on_store(Command::Add, 10_000, store.clone()).unwrap();
        let mut filled = 0;
        loop {
            let out = h
                .call(Import::Store(StoreCall::SetValue(
                    format!("k{filled}"),
                    Some(big.clone()),
                )))
                .unwrap();
            if out.contains("Refused") {
                break;
            }
            filled += 1;
            assert!(filled < 1_000, "never refused");
        }
        h.finish(true).unwrap();
        // The next call, from the file: refused at once, then room again
        // once it frees some.
        let mut h = ImportHarness::on_store(Command::Add, 10_000, store).unwrap();
        let out = h
            .call(Import::Store(StoreCall::SetValue(
                "next".into(),
                Some(big.clone()),
            )))
            .unwrap();
        assert!(out.contains("more than"), "{out}");
        let out = h
            .call(Import::Store(StoreCall::SetValue("k0".into(), None)))
            .unwrap();
        assert_eq!(out, "Ok(())");
        let out = h
            .call(Import::Store(StoreCall::SetValue("next".into(), Some(big))))
            .unwrap();
        assert_eq!(out, "Ok(())");
        h.finish(true).unwrap();
    }

    /// `lookup` and `span` (0.2.1) read: the plugin controls the keys and
    /// the bounds. It must not see another scope's entries, make the host
    /// build an answer of unbounded size, or change anything.
    #[test]
    fn lookup_and_span_read_the_own_scope_only_and_bounded() {
        let mut h = ImportHarness::new(Command::Add, 10_000).unwrap();
        // 10.2.0.2 and 10.3.0.2 live in other scopes (another network, the
        // same network's host-local): not here.
        let keys = ["10.1.0.2", "10.2.0.2", "10.3.0.2", "10.1.0.3"].map(String::from);
        let out = h
            .call(Import::Store(StoreCall::Lookup(keys.to_vec())))
            .unwrap();
        assert!(out.starts_with("Ok([Some("), "{out}");
        assert_eq!(out.matches("Some(Entry").count(), 2, "{out}");
        assert!(
            out.contains("10.1.0.2") && out.contains("10.1.0.3"),
            "{out}"
        );
        assert!(!out.contains("10.2.0") && !out.contains("10.3.0"), "{out}");
        let out = h
            .call(Import::Store(StoreCall::Span(
                "10.0.0.0".into(),
                "10.255.255.255".into(),
            )))
            .unwrap();
        assert!(
            out.contains("entries: 2, released: 1") && out.contains("10.1.0.3"),
            "{out}"
        );
        let bound = super::super::host_store::MAX_LOOKUP_KEYS;
        let out = h
            .call(Import::Store(StoreCall::Lookup(vec![
                "10.1.0.2".into();
                bound + 1
            ])))
            .unwrap();
        assert!(
            out.contains("Refused") && out.contains("at most 1024"),
            "{out}"
        );
        let out = h
            .call(Import::Store(StoreCall::Lookup(vec![
                "10.1.0.2".into();
                bound
            ])))
            .unwrap();
        assert_eq!(out.matches("Some(Entry").count(), bound);
        let long = "x".repeat(1 << 20);
        let out = h
            .call(Import::Store(StoreCall::Lookup(vec![long.clone()])))
            .unwrap();
        assert!(
            out.contains("invalid key") && out.len() < 200,
            "{}",
            out.len()
        );
        for (first, last, why) in [
            ("10.1.0.9", "10.1.0.1", "is empty"),
            ("10.1.0.1", "::1", "mixes address families"),
            ("10.1.0.1", "last", "not an IP address"),
            (long.as_str(), "10.1.0.1", "not an IP address"),
        ] {
            let out = h
                .call(Import::Store(StoreCall::Span(first.into(), last.into())))
                .unwrap();
            assert!(out.contains("Refused") && out.contains(why), "{out}");
            assert!(out.len() < 300, "{}", out.len());
        }
        h.check().unwrap();
        h.finish(true).unwrap();
    }

    /// `blocks-of-other-nodes` (0.2.2): the plugin passes nothing and gets
    /// the store's fact about its own scope, read under its lock. Asking
    /// changes nothing, is charged like any import, and is the empty list
    /// for a store of one node.
    #[test]
    fn blocks_of_other_nodes_are_the_stores_fact_and_change_nothing() {
        /// A store shared by nodes, as the etcd store's transactions
        /// report it: another node claimed 10.1.0.64/26 of this scope.
        struct Shared(MemoryStore);
        struct SharedTxn(Box<dyn wasm_cni_store::Txn>, bool);
        impl wasm_cni_store::Txn for SharedTxn {
            fn data(&mut self) -> &mut ScopeData {
                self.0.data()
            }
            fn commit(self: Box<Self>) -> wasm_cni_store::StoreResult<()> {
                self.0.commit()
            }
            fn others_blocks(&self) -> Vec<String> {
                if self.1 {
                    vec!["10.1.0.64/26".into()]
                } else {
                    Vec::new()
                }
            }
        }
        impl StateStore for Shared {
            fn begin_by(
                &self,
                scope: &Scope,
                deadline: Option<std::time::Instant>,
            ) -> wasm_cni_store::StoreResult<Box<dyn wasm_cni_store::Txn>> {
                let mine = scope.plugin == PLUGIN && scope.network == NETWORK;
                Ok(Box::new(SharedTxn(self.0.begin_by(scope, deadline)?, mine)))
            }
            fn scopes(&self, network: &str) -> wasm_cni_store::StoreResult<Vec<String>> {
                self.0.scopes(network)
            }
            fn networks(&self) -> wasm_cni_store::StoreResult<Vec<String>> {
                self.0.networks()
            }
        }
        let shared = Arc::new(Shared(MemoryStore::default()));
        let mut h = ImportHarness::on_store(Command::Add, 3, shared.clone()).unwrap();
        let before = h.call(Import::Store(StoreCall::List)).unwrap();
        let out = h
            .call(Import::Store(StoreCall::BlocksOfOtherNodes))
            .unwrap();
        assert_eq!(out, r#"Ok(["10.1.0.64/26"])"#);
        assert_eq!(h.call(Import::Store(StoreCall::List)).unwrap(), before);
        let why = h
            .call(Import::Store(StoreCall::BlocksOfOtherNodes))
            .unwrap_err();
        assert!(why.contains("budget"), "{why}");
        h.finish(false).unwrap();
        // A store of one node has none to tell.
        let mut h = ImportHarness::new(Command::Add, 10).unwrap();
        assert_eq!(
            h.call(Import::Store(StoreCall::BlocksOfOtherNodes))
                .unwrap(),
            "Ok([])"
        );
        h.finish(true).unwrap();
    }

    /// Rules and shaping for what is the attachment's pass; for another's
    /// address, an ungranted port, a foreign link or a clash with another
    /// attachment's port they are refused and change nothing.
    #[test]
    fn filter_and_shaping_stay_inside_the_attachment() {
        let mut h = ImportHarness::new(Command::Add, 1_000).unwrap();
        h.call(Import::ContainerNetns).unwrap();
        h.call(Import::NodeNetns).unwrap();
        let out = h.call(veth("eth0", "vethfz0")).unwrap();
        assert!(out.starts_with("Ok("), "{out}");
        let map = |host_port, address: &str, port| FilterRule::PortMap {
            protocol: 0,
            host_ip: None,
            host_port,
            address: address.into(),
            port,
        };
        let own = "10.1.0.5";
        for ok in [
            Import::Filter(
                0,
                vec![FilterRule::Masquerade(
                    own.into(),
                    vec!["10.1.0.0/24".into()],
                )],
            ),
            Import::Filter(0, vec![map(8080, own, 80), FilterRule::Forward(own.into())]),
            Import::Filter(
                0,
                vec![FilterRule::MacSpoof(
                    "vethfz0".into(),
                    "02:00:00:00:00:05".into(),
                )],
            ),
            Import::Filter(1, vec![FilterRule::Forward(own.into())]),
            Import::Config(
                Handle::Issued(1),
                ConfigCall::LimitRate("vethfz0".into(), 1_000_000, 100_000),
            ),
        ] {
            let out = h.call(ok.clone()).unwrap();
            assert!(!out.contains("Err"), "{ok:?}: {out}");
            h.check().unwrap();
        }
        for attack in [
            // Another attachment's address, or the node's.
            Import::Filter(0, vec![FilterRule::Masquerade("10.1.0.77".into(), vec![])]),
            Import::Filter(0, vec![FilterRule::Forward("192.168.9.1".into())]),
            // A port the config does not map; one mapped to another port.
            Import::Filter(0, vec![map(22, own, 22)]),
            Import::Filter(0, vec![map(8080, own, 81)]),
            // A node link the attachment did not create.
            Import::Filter(
                0,
                vec![FilterRule::MacSpoof(
                    "other0".into(),
                    "02:00:00:00:00:05".into(),
                )],
            ),
            Import::Config(
                Handle::Issued(1),
                ConfigCall::LimitRate("other0".into(), 1_000, 1_000),
            ),
            Import::Config(
                Handle::Issued(1),
                ConfigCall::RedirectIngress("uplink".into(), "vethfz0".into()),
            ),
            Import::Create(Handle::Issued(0), Create::Ifb("ifbfz".into(), None)),
        ] {
            let out = h.call(attack.clone()).unwrap();
            assert!(out.contains("Refused("), "{attack:?}: {out}");
            h.check().unwrap();
        }
        // The other attachment's 9090 is taken: a clash, not a takeover.
        let mut h2 = ImportHarness::new(Command::Add, 100).unwrap();
        let out = h2
            .call(Import::Filter(0, vec![map(9090, own, 80)]))
            .unwrap();
        assert!(out.contains("PortTaken("), "{out}");
        h2.check().unwrap();
        h.finish(true).unwrap();
    }

    /// The checks fail when a rule is not the attachment's: the property
    /// the fuzzer relies on holds for real.
    #[test]
    fn a_foreign_rule_fails_the_check() {
        let h = ImportHarness::new(Command::Add, 100).unwrap();
        let stranger = Tag::new(NETWORK, "stranger", "eth0");
        let rule = Rule::AllowForward {
            addr: "10.1.0.5".parse().unwrap(),
        };
        h.filter.lock().unwrap().add(&stranger, &[rule]).unwrap();
        let why = h.check().unwrap_err();
        assert!(why.contains("someone else"), "{why}");
        let (other, rules) = foreign_rules();
        let mut f = h.filter.lock().unwrap();
        f.remove_all(&stranger).unwrap();
        f.remove(&other, &rules[..1]).unwrap();
        drop(f);
        let why = h.check().unwrap_err();
        assert!(why.contains("another attachment"), "{why}");
    }

    #[test]
    fn the_budget_ends_the_call() {
        let mut h = ImportHarness::new(Command::Add, 2).unwrap();
        h.call(Import::Store(StoreCall::Now)).unwrap();
        h.call(Import::Store(StoreCall::Now)).unwrap();
        let why = h.call(Import::Store(StoreCall::Now)).unwrap_err();
        assert!(why.contains("budget"), "{why}");
        h.finish(false).unwrap();
    }
}
