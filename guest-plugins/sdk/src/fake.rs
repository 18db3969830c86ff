//! An in-memory [`Host`] for native unit tests: two namespaces (node and
//! container) in the host's own kernel model (`wasm-cni-model`'s
//! `MemoryNet`, the one the host's `plugin test` and its own tests run
//! against, checked against the kernel by one suite), a scripted IPAM
//! delegate, a store, filter rules, and the host's policy.
//!
//! The kernel model is the host's: veth peers die together, an address
//! gets its subnet route when its link is up, a route needs its link up
//! and its gateway reachable, a duplicate address or route is `Exists`, an
//! unknown sysctl is `NotFound`, errors carry the kernel's (positive)
//! errno. The fake adds only what a unit test needs around it: a
//! container namespace the runtime can delete, failure injection
//! ([`FakeHost::fail_next`]), and setup that bypasses the policy.
//!
//! The policy is the host's own (`wasm-cni-model`'s `policy`, what the host
//! runs): each `Ops` call and each filter call asks it the questions the
//! host's imports ask before acting, and confirms what a grant rests on
//! against the live links as the host does (`wasm-cni-model`'s `live`), so
//! a plugin the host would refuse fails its unit test the same way, in the
//! host's words. What it grants comes from where the host takes it: the
//! config of the last request built with [`FakeHost::request`] (the links
//! it names — `bridge`, `master`, `vm.parent`, the bridge plugin's `cni0` —
//! a tap's `owner` and `group`, passthru, a VM's `vm`, the port mappings),
//! the links created through `Ops` (the attachment's own, by name and
//! identity), and the attachment's own addresses (what the fake's IPAM
//! handed out, a prevResult given to [`FakeHost::request_with_prev`], or
//! [`FakeHost::own_network`]). One difference: the fake does not know which
//! verb a plugin function serves, so it grants what ADD may do (the host
//! refuses node-side changes during DEL, and every change during CHECK),
//! and it does not count the host's caps on what one verb makes (8 links,
//! 16 node addresses and routes, 8 tc objects, 32 filter rules and 2 per
//! port mapping), which a test's ADD/DEL cycles would add up.
//!
//! Setup and inspection methods on [`FakeHost`] bypass the policy.

#![allow(clippy::missing_panics_doc)]

pub mod suite;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::rc::Rc;

use crate::error::CniError;
use crate::filter::{FilterError, Protocol, Rule};
use crate::host::{Host, Level, StoreEntry, StoreError};
use crate::net::{
    IpvlanMode, Link, LinkSettings, MacvlanMode, NetError, NetResult, Ops, Qdisc, RateLimit,
    RouteSpec, MAIN_TABLE,
};
use crate::types::{Attachment, CniResult, IpConfig, Request, Route};

// The host's own kernel model and policy (the wasm-cni-model crate the host
// runs), asked the same questions the host asks before each import acts:
// the fake has neither rules nor a kernel of its own.
use wasm_cni_model::filter::{Proto, Rule as HostRule};
use wasm_cni_model::live;
use wasm_cni_model::net::{
    self as host_net, IpvlanMode as HostIpvlan, LinkChange, LinkId, LinkInfo,
    MacvlanMode as HostMode, MemoryNet, Net, NsId as HostNs,
};
use wasm_cni_model::policy::{Ask, ConfigGrants, FilterNeed, FilterOp, Grants, PortGrant, Side};
use wasm_cni_model::Command;

/// The netns path the fake's requests carry.
pub const NETNS_PATH: &str = "/var/run/netns/fake";

/// An abbreviated IPAM result: `(address, gateway)` pairs and route
/// destinations.
pub fn ipam_result(ips: &[(&str, Option<&str>)], routes: &[&str]) -> CniResult {
    CniResult {
        interfaces: Vec::new(),
        ips: ips
            .iter()
            .map(|(a, g)| IpConfig {
                address: (*a).into(),
                gateway: g.map(Into::into),
                interface: None,
            })
            .collect(),
        routes: routes
            .iter()
            .map(|d| Route {
                dst: (*d).into(),
                ..Route::default()
            })
            .collect(),
        dns: None,
    }
}

/// A config text `{"cniVersion":…,"name":…,"type":…}` followed by `extra`
/// (`"key":value` members, comma-separated; may be empty).
pub fn netconf(cni_version: &str, name: &str, plugin_type: &str, extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { "," };
    format!(
        r#"{{"cniVersion":"{cni_version}","name":"{name}","type":"{plugin_type}"{sep}{extra}}}"#
    )
}

/// `extra` (as for [`netconf`]) preceded by `"ipam":{"type":<ipam_type>}`.
pub fn with_ipam_type(ipam_type: &str, extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { "," };
    format!(r#""ipam":{{"type":"{ipam_type}"}}{sep}{extra}"#)
}

/// Which namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsId {
    Node,
    Container,
}

impl NsId {
    fn index(self) -> usize {
        match self {
            Self::Node => 0,
            Self::Container => 1,
        }
    }

    /// Which namespace this is, in the policy's terms.
    fn side(self) -> Side {
        match self {
            Self::Node => Side::Node,
            Self::Container => Side::Container,
        }
    }

    /// Its handle in the kernel model: the node is the model's current
    /// namespace, the container the first one added.
    fn host(self) -> HostNs {
        HostNs(self.index() as u32)
    }

    fn of(side: Side) -> NsId {
        match side {
            Side::Node => Self::Node,
            Side::Container => Self::Container,
        }
    }
}

fn host_mode(mode: MacvlanMode) -> HostMode {
    match mode {
        MacvlanMode::Bridge => HostMode::Bridge,
        MacvlanMode::Private => HostMode::Private,
        MacvlanMode::Vepa => HostMode::Vepa,
        MacvlanMode::Passthru => HostMode::Passthru,
    }
}

fn host_ipvlan(mode: IpvlanMode) -> HostIpvlan {
    match mode {
        IpvlanMode::L2 => HostIpvlan::L2,
        IpvlanMode::L3 => HostIpvlan::L3,
        IpvlanMode::L3s => HostIpvlan::L3s,
    }
}

/// The model's link as the `network` import reports it.
fn link_of(l: LinkInfo) -> Link {
    Link {
        index: l.index,
        name: l.name,
        kind: l.kind,
        mac: l.mac,
        mtu: l.mtu,
        up: l.up,
        oper_up: l.oper_up,
        master: l.master,
        peer_index: l.peer_index,
        promisc: l.promisc,
        allmulti: l.allmulti,
        txqlen: l.txqlen,
        macvlan_mode: l.macvlan_mode.map(|m| match m {
            HostMode::Bridge => MacvlanMode::Bridge,
            HostMode::Private => MacvlanMode::Private,
            HostMode::Vepa => MacvlanMode::Vepa,
            HostMode::Passthru => MacvlanMode::Passthru,
        }),
        vlan_id: l.vlan_id,
        ipvlan_mode: l.ipvlan_mode.map(|m| match m {
            HostIpvlan::L2 => IpvlanMode::L2,
            HostIpvlan::L3 => IpvlanMode::L3,
            HostIpvlan::L3s => IpvlanMode::L3s,
        }),
    }
}

/// The model's error as the `network` import reports it.
fn err(e: host_net::NetError) -> NetError {
    match e {
        host_net::NetError::Exists(m) => NetError::Exists(m),
        host_net::NetError::NotFound(m) => NetError::NotFound(m),
        host_net::NetError::Invalid(m) => NetError::Invalid(m),
        host_net::NetError::Kernel { errno, msg } => NetError::Kernel(errno, msg),
    }
}

/// A route as the host's `network` import reads it (the same words for
/// what does not parse).
fn host_route(r: &RouteSpec) -> NetResult<host_net::Route> {
    let ip = |s: &str, what: &str| {
        s.parse::<IpAddr>()
            .map_err(|_| NetError::Invalid(format!("{what}: {s:?} is not an IP address")))
    };
    Ok(host_net::Route {
        dst: host_net::parse_cidr(&r.dst).map_err(err)?,
        gw: r.gw.as_deref().map(|g| ip(g, "gw")).transpose()?,
        dev: r.dev.clone(),
        src: r.src.as_deref().map(|s| ip(s, "src")).transpose()?,
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    })
}

fn route_of(r: host_net::Route) -> RouteSpec {
    RouteSpec {
        dst: r.dst.to_string(),
        gw: r.gw.map(|g| g.to_string()),
        dev: r.dev,
        src: r.src.map(|s| s.to_string()),
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    }
}

/// How a tap device was created (what `Link` does not report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapInfo {
    pub multi_queue: bool,
    pub owner: Option<u32>,
    pub group: Option<u32>,
}

struct Failure {
    op: String,
    arg: String,
    error: NetError,
}

/// Sysctls the fake's namespaces hold beyond the model's defaults, as a
/// node has them (`kernel.hostname` to show a key outside `net.` is
/// refused even for reading).
const EXTRA_SYSCTLS: &[(&str, &str)] = &[
    ("net.core.somaxconn", "4096"),
    ("kernel.hostname", "fake"),
    ("net.ipv4.conf.all.log_martians", "0"),
    ("net.ipv4.conf.default.log_martians", "0"),
    ("net.ipv6.conf.default.enhanced_dad", "1"),
    ("net.ipv6.conf.default.keep_addr_on_down", "0"),
    ("net.ipv6.conf.default.ndisc_notify", "0"),
];

struct World {
    /// The kernel: the node is its current namespace, the container one
    /// added at [`NETNS_PATH`].
    net: MemoryNet,
    /// The runtime has not deleted the container namespace.
    container_alive: bool,
    /// Links created through `Ops` (the attachment's own), per side, by
    /// name and identity, as the host's ledger records them.
    created: [BTreeMap<String, LinkId>; 2],
    attachment: Attachment,
    /// What the config of the last request built grants, as the host
    /// derives it.
    config: ConfigGrants,
    /// The same config's `runtimeConfig.portMappings`.
    ports: Vec<PortGrant>,
    /// Links the test declares config-named ([`FakeHost::allow_node_link`]).
    named: Vec<String>,
    policy: bool,
    /// Networks of the attachment's own addresses: what its IPAM handed
    /// out (as the host learns them), and what the test declares.
    own_nets: Vec<host_net::IpNet>,
    ipam_result: Option<CniResult>,
    ipam_errors: BTreeMap<String, CniError>,
    ipam_calls: Vec<String>,
    ipam_allocated: bool,
    store_values: BTreeMap<String, String>,
    store_entries: Vec<StoreEntry>,
    store_error: Option<StoreError>,
    now: u64,
    logs: Vec<(Level, String)>,
    failures: Vec<Failure>,
    /// The attachment's filter rules, in the order added.
    filter_rules: Vec<Rule>,
    /// The next filter call fails with this.
    filter_error: Option<FilterError>,
}

/// Setup the model refused: a test's own mistake, so it fails loudly.
#[allow(clippy::panic)]
fn setup<T>(what: &str, r: Result<T, host_net::NetError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("fake host setup: {what}: {e}"),
    }
}

impl World {
    fn new(ifname: &str) -> Self {
        let mut net = MemoryNet::new();
        let container = net.add_namespace(NETNS_PATH);
        debug_assert_eq!(container, NsId::Container.host());
        let (node, cont) = (NsId::Node.host(), NsId::Container.host());
        for ns in [node, cont] {
            for (k, v) in EXTRA_SYSCTLS {
                setup("sysctl", net.define_sysctl(ns, k, v));
            }
            // `lo` predates the per-link defaults defined above.
            for (k, v) in EXTRA_SYSCTLS {
                if let Some(leaf) = k.strip_prefix("net.ipv6.conf.default.") {
                    setup(
                        "sysctl",
                        net.define_sysctl(ns, &format!("net.ipv6.conf.lo.{leaf}"), v),
                    );
                }
                if let Some(leaf) = k.strip_prefix("net.ipv4.conf.default.") {
                    setup(
                        "sysctl",
                        net.define_sysctl(ns, &format!("net.ipv4.conf.lo.{leaf}"), v),
                    );
                }
            }
        }
        let up = LinkChange {
            up: Some(true),
            ..LinkChange::default()
        };
        setup("lo up", net.set_link(node, "lo", &up));
        setup("ens3", net.add_device(node, "ens3", 1500, None));
        let addr = setup("address", host_net::parse_cidr("192.168.1.10/24"));
        setup("address", net.add_address(node, "ens3", &addr));
        let default = host_net::Route {
            gw: Some(IpAddr::from([192, 168, 1, 1])),
            dev: Some("ens3".into()),
            ..host_net::Route::to(setup("route", host_net::parse_cidr("0.0.0.0/0")))
        };
        setup("default route", net.add_route(node, &default));
        Self {
            net,
            container_alive: true,
            created: [BTreeMap::new(), BTreeMap::new()],
            attachment: Attachment {
                container_id: "ctr1".into(),
                ifname: ifname.into(),
            },
            config: ConfigGrants::default(),
            ports: Vec::new(),
            named: Vec::new(),
            policy: true,
            own_nets: Vec::new(),
            ipam_result: None,
            ipam_errors: BTreeMap::new(),
            ipam_calls: Vec::new(),
            ipam_allocated: false,
            store_values: BTreeMap::new(),
            store_entries: Vec::new(),
            store_error: None,
            now: 1_700_000_000_000,
            logs: Vec::new(),
            failures: Vec::new(),
            filter_rules: Vec::new(),
            filter_error: None,
        }
    }

    fn check_failure(&mut self, op: &str, arg: &str) -> NetResult<()> {
        if let Some(pos) = self
            .failures
            .iter()
            .position(|f| f.op == op && (f.arg.is_empty() || arg.contains(&f.arg)))
        {
            return Err(self.failures.remove(pos).error);
        }
        Ok(())
    }

    fn alive(&self, id: NsId) -> NetResult<()> {
        if id == NsId::Node || self.container_alive {
            Ok(())
        } else {
            Err(NetError::NotFound("network namespace is gone".into()))
        }
    }

    /// What the host's policy grants this attachment now: the config of
    /// the last request, the links created through `Ops`, the networks of
    /// its own addresses. The verb is ADD's: the fake does not know which
    /// verb a plugin function serves.
    fn grants(&self) -> Grants {
        Grants {
            command: Command::Add,
            ifname: self.attachment.ifname.clone(),
            config: self.config_grants(),
            created_node: self.created[0].clone(),
            created_container: self.created[1].clone(),
            own_nets: self.own_nets.clone(),
            ports: self.ports.clone(),
        }
    }

    /// What the config of the last request grants, with the links the test
    /// named by hand.
    fn config_grants(&self) -> ConfigGrants {
        let mut config = self.config.clone();
        config.named.extend(self.named.iter().cloned());
        config
    }

    /// Asks the host's policy each question, as the host does before an
    /// import acts, and confirms a grant that rests on a link the
    /// attachment created against the live link (forgetting one that is
    /// gone or replaced); the first refusal is the answer, in the host's
    /// words.
    fn ask(&mut self, asks: &[Ask<'_>]) -> NetResult<()> {
        if !self.policy {
            return Ok(());
        }
        let grants = self.grants();
        let created = &mut self.created;
        let guarded = live::guard(
            asks,
            &grants,
            &mut self.net,
            |net, side, ns, name, id| confirm_created(net, created, side, ns, name, id),
            |_, _| {},
        );
        match guarded {
            Ok(()) => Ok(()),
            Err(live::Stop::Missing(name)) => Err(NetError::NotFound(format!("link {name:?}"))),
            Err(live::Stop::Refused(why)) => Err(NetError::Refused(why)),
            Err(live::Stop::Lapsed(e)) => Err(err(e)),
        }
    }

    /// [`confirm_created`] of this world's links.
    fn verify_created(&mut self, side: Side, ns: HostNs, name: &str, id: &LinkId) -> NetResult<()> {
        confirm_created(&mut self.net, &mut self.created, side, ns, name, id).map_err(err)
    }

    /// Records a link created through `Ops` as the attachment's own.
    fn record_created(&mut self, id: NsId, link: &LinkInfo) {
        self.created[id.index()].insert(link.name.clone(), link.id());
    }

    /// The policy's question for adding (`add`) or deleting `route` in
    /// `id`, and the route in the model's terms when it is allowed. The
    /// host refuses a route that names no device.
    fn ask_route(&mut self, id: NsId, route: &RouteSpec, add: bool) -> NetResult<host_net::Route> {
        let Some(dev) = route.dev.clone() else {
            return Err(NetError::Refused("a route must name its device".into()));
        };
        let r = host_route(route)?;
        self.ask(&[Ask::Route(id.side(), id.host(), &dev, &r.dst, r.table, add)])?;
        Ok(r)
    }

    /// Every route of `id`'s namespace, as the model stores it.
    fn all_routes(&self, id: NsId) -> Vec<host_net::Route> {
        match self.alive(id) {
            Ok(()) => self.net.all_routes(id.host()).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }
}

/// [`live::verify_created`], forgetting a link that is no longer the
/// attachment's, as the host's ledger does.
fn confirm_created(
    net: &mut dyn host_net::Net,
    created: &mut [BTreeMap<String, LinkId>; 2],
    side: Side,
    ns: HostNs,
    name: &str,
    id: &LinkId,
) -> Result<(), host_net::NetError> {
    let live = live::verify_created(net, side, ns, name, id);
    if let Err(host_net::NetError::NotFound(_)) = &live {
        created[NsId::of(side).index()].remove(name);
    }
    live
}

/// The fake host. Clones share one world.
#[derive(Clone)]
pub struct FakeHost {
    world: Rc<RefCell<World>>,
}

/// A namespace handle of a [`FakeHost`].
#[derive(Clone)]
pub struct FakeNs {
    world: Rc<RefCell<World>>,
    id: NsId,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self::new("eth0")
    }
}

impl FakeHost {
    /// A node namespace with `lo` (up) and `ens3` (192.168.1.10/24, default
    /// route via 192.168.1.1) and a container namespace with `lo` (down, no
    /// address until it is up, as a new namespace has it); the attachment
    /// is (`ctr1`, `ifname`).
    pub fn new(ifname: &str) -> Self {
        Self {
            world: Rc::new(RefCell::new(World::new(ifname))),
        }
    }

    /// [`FakeHost::new`] for `eth0` whose IPAM delegate returns
    /// [`ipam_result`]`(ips, routes)`.
    pub fn with_ipam_result(ips: &[(&str, Option<&str>)], routes: &[&str]) -> Self {
        let host = Self::new("eth0");
        host.set_ipam_result(ipam_result(ips, routes));
        host
    }

    pub fn ns(&self, id: NsId) -> FakeNs {
        FakeNs {
            world: Rc::clone(&self.world),
            id,
        }
    }

    /// A request for the fake's attachment with `config` (JSON text). The
    /// fake grants what the host would grant that config (the links it
    /// names, a VM's tap owner, passthru, the port mappings) until the next
    /// request is built.
    pub fn request(&self, config: &str) -> Request {
        let mut w = self.world.borrow_mut();
        let parsed = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(config);
        if let Ok(map) = parsed {
            let plugin_type = map.get("type").and_then(|t| t.as_str()).unwrap_or("");
            w.config = ConfigGrants::from_config(plugin_type, &map);
            w.ports = PortGrant::from_config(config);
        }
        Request {
            container_id: w.attachment.container_id.clone(),
            ifname: w.attachment.ifname.clone(),
            netns: Some(NETNS_PATH.into()),
            args: Vec::new(),
            config: config.into(),
            prev_result: None,
        }
    }

    /// [`FakeHost::request`] with `prev` as its prevResult. Its addresses
    /// become the attachment's own, as the host takes the runtime's
    /// prevResult at ADD.
    pub fn request_with_prev(&self, config: &str, prev: &CniResult) -> Request {
        for ip in &prev.ips {
            self.own_network(&ip.address);
        }
        let mut req = self.request(config);
        req.prev_result = Some(prev.clone());
        req
    }

    // ------------------------------------------------------------ setup

    /// Declares `cidr` (an address with its prefix, as a result's `ips`
    /// carry it) the attachment's own, as the host does for what its IPAM
    /// hands out and for the runtime's prevResult (both of which the fake
    /// does already): filter rules may name the address, node-side
    /// addresses and routes may lie in its network.
    pub fn own_network(&self, cidr: &str) {
        if let Ok(net) = host_net::parse_cidr(cidr) {
            self.world.borrow_mut().own_nets.push(net);
        }
    }

    /// Counts `name` among the links the config names, as if it did: the
    /// node link may be changed, a container-side bridge used as a master.
    /// Requests built here already grant what their config names
    /// (`bridge`, `master`, `vm.parent`, the bridge plugin's `cni0`).
    pub fn allow_node_link(&self, name: &str) {
        self.world.borrow_mut().named.push(name.into());
    }

    /// [`FakeHost::allow_node_link`], for a bridge in the container
    /// namespace (usable as a master there, and for nothing else).
    pub fn allow_container_bridge(&self, name: &str) {
        self.allow_node_link(name);
    }

    /// Turns the host policy off.
    pub fn disable_policy(&self) {
        self.world.borrow_mut().policy = false;
    }

    /// Adds a link of `kind`, up, as someone other than the plugin made it
    /// (no policy), returning its index: a `bridge` takes ports, any other
    /// kind is a plain link (a `veth` without a peer here).
    pub fn add_link(&self, id: NsId, name: &str, kind: &str, mtu: u32) -> u32 {
        let mut w = self.world.borrow_mut();
        setup("add_link", w.net.add_link(id.host(), name, kind, mtu, None)).index
    }

    /// Adds an address (no policy); its subnet route comes with it when the
    /// link is up.
    pub fn add_address(&self, id: NsId, link: &str, cidr: &str) {
        let mut w = self.world.borrow_mut();
        let addr = setup("address", host_net::parse_cidr(cidr));
        setup("add_address", w.net.add_address(id.host(), link, &addr));
    }

    /// Adds a route (no policy); the kernel's rules still hold (its link
    /// up, its gateway reachable).
    pub fn add_route(&self, id: NsId, route: RouteSpec) {
        let mut w = self.world.borrow_mut();
        let r = host_route(&route).map_err(|e| host_net::NetError::Invalid(e.to_string()));
        let r = setup("route", r);
        setup("add_route", w.net.add_route(id.host(), &r));
    }

    /// Adds a default route (`0.0.0.0/0` or `::/0`, by `gw`'s family) via
    /// `gw` on `dev`, no policy.
    pub fn add_default_route(&self, id: NsId, dev: &str, gw: &str) {
        let dst = if gw.contains(':') {
            "::/0"
        } else {
            "0.0.0.0/0"
        };
        self.add_route(
            id,
            RouteSpec {
                dst: dst.into(),
                gw: Some(gw.into()),
                dev: Some(dev.into()),
                ..RouteSpec::default()
            },
        );
    }

    /// Removes every route to `dst` (no policy), in any table.
    pub fn remove_route(&self, id: NsId, dst: &str) {
        let mut w = self.world.borrow_mut();
        let Ok(dst) = host_net::parse_cidr(dst) else {
            return;
        };
        for r in w.all_routes(id).into_iter().filter(|r| r.dst == dst) {
            let _ = w.net.del_route(id.host(), &r);
        }
    }

    /// Sets a sysctl as the kernel would (a forwarding switch sets every
    /// link's too), or defines one the model does not know; no policy.
    pub fn set_sysctl(&self, id: NsId, key: &str, value: &str) {
        let mut w = self.world.borrow_mut();
        let set = match w.net.sysctl_get(id.host(), key) {
            Ok(_) => w.net.sysctl_set(id.host(), key, value),
            Err(_) => w.net.define_sysctl(id.host(), key, value),
        };
        setup("set_sysctl", set);
    }

    /// Deletes a link without policy (as an administrator would).
    pub fn delete_link(&self, id: NsId, name: &str) {
        let _ = self.world.borrow_mut().net.delete_link(id.host(), name);
    }

    /// Removes an address without policy.
    pub fn remove_address(&self, id: NsId, link: &str, cidr: &str) {
        let mut w = self.world.borrow_mut();
        if let Ok(addr) = host_net::parse_cidr(cidr) {
            let _ = w.net.del_address(id.host(), link, &addr);
        }
    }

    /// The runtime deleted the container namespace: its links go, and so do
    /// the node-side peers of its veths.
    pub fn remove_container_netns(&self) {
        let mut w = self.world.borrow_mut();
        w.net.remove_namespace(Path::new(NETNS_PATH));
        w.container_alive = false;
    }

    /// The next `op` (an `Ops` method name) whose main argument contains
    /// `arg` ("" for any) fails with `error`, once.
    pub fn fail_next(&self, op: &str, arg: &str, error: NetError) {
        self.world.borrow_mut().failures.push(Failure {
            op: op.into(),
            arg: arg.into(),
            error,
        });
    }

    /// What `ipam_add` returns.
    pub fn set_ipam_result(&self, result: CniResult) {
        self.world.borrow_mut().ipam_result = Some(result);
    }

    /// Makes IPAM verb `verb` ("add", "del", "check", "status", "gc") fail.
    pub fn set_ipam_error(&self, verb: &str, error: CniError) {
        self.world
            .borrow_mut()
            .ipam_errors
            .insert(verb.into(), error);
    }

    /// Sets the clock `store_now` reads (ms since the epoch); entries
    /// reserved from now on carry it.
    pub fn set_now(&self, ms: u64) {
        self.world.borrow_mut().now = ms;
    }

    /// Makes every store call fail.
    pub fn set_store_error(&self, error: StoreError) {
        self.world.borrow_mut().store_error = Some(error);
    }

    // ------------------------------------------------------- inspection

    pub fn link(&self, id: NsId, name: &str) -> Option<Link> {
        let mut w = self.world.borrow_mut();
        w.alive(id).ok()?;
        w.net.link_by_name(id.host(), name).ok().map(link_of)
    }

    pub fn link_names(&self, id: NsId) -> Vec<String> {
        let mut w = self.world.borrow_mut();
        if w.alive(id).is_err() {
            return Vec::new();
        }
        w.net
            .links(id.host())
            .unwrap_or_default()
            .into_iter()
            .map(|l| l.name)
            .collect()
    }

    /// The name of the first node link named `veth…` (the node end of a
    /// veth pair), or `""` if there is none.
    pub fn node_veth(&self) -> String {
        self.link_names(NsId::Node)
            .into_iter()
            .find(|n| n.starts_with("veth"))
            .unwrap_or_default()
    }

    pub fn addresses(&self, id: NsId, link: &str) -> Vec<String> {
        let mut w = self.world.borrow_mut();
        if w.alive(id).is_err() {
            return Vec::new();
        }
        w.net
            .addresses(id.host(), link)
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Routes as `dst [via gw] dev D [src S] [scope N] [table T]` strings,
    /// as the kernel stores them (IPv6 routes have no scope).
    pub fn routes(&self, id: NsId) -> Vec<String> {
        self.world
            .borrow()
            .all_routes(id)
            .into_iter()
            .map(|r| {
                let mut s = r.dst.to_string();
                if let Some(gw) = &r.gw {
                    s.push_str(&format!(" via {gw}"));
                }
                s.push_str(&format!(" dev {}", r.dev.as_deref().unwrap_or("?")));
                if let Some(src) = &r.src {
                    s.push_str(&format!(" src {src}"));
                }
                if let Some(sc) = r.scope.filter(|s| *s != 0) {
                    s.push_str(&format!(" scope {sc}"));
                }
                if let Some(t) = r.table.filter(|t| *t != MAIN_TABLE) {
                    s.push_str(&format!(" table {t}"));
                }
                s
            })
            .collect()
    }

    pub fn sysctl(&self, id: NsId, key: &str) -> Option<String> {
        let mut w = self.world.borrow_mut();
        w.alive(id).ok()?;
        w.net.sysctl_get(id.host(), key).ok()
    }

    /// How tap `name` was created (`None` if it is not a tap).
    pub fn tap(&self, id: NsId, name: &str) -> Option<TapInfo> {
        let mut w = self.world.borrow_mut();
        w.alive(id).ok()?;
        let link = w.net.link_by_name(id.host(), name).ok()?;
        if link.kind != "tun" {
            return None;
        }
        let (owner, group) = w.net.tap_owner(id.host(), name).ok()?;
        let multi_queue = w.net.tap_multi_queue(id.host(), name).ok()?;
        Some(TapInfo {
            multi_queue,
            owner,
            group,
        })
    }

    pub fn hairpin(&self, id: NsId, name: &str) -> Option<bool> {
        let w = self.world.borrow();
        w.alive(id).ok()?;
        w.net.hairpin(id.host(), name).ok()
    }

    pub fn ipam_calls(&self) -> Vec<String> {
        self.world.borrow().ipam_calls.clone()
    }

    /// Whether an IPAM allocation is held (add succeeded, no del since).
    pub fn ipam_allocated(&self) -> bool {
        self.world.borrow().ipam_allocated
    }

    pub fn store_value(&self, name: &str) -> Option<String> {
        self.world.borrow().store_values.get(name).cloned()
    }

    /// The attachment's filter rules, as the plugin left them.
    pub fn filter_rules(&self) -> Vec<Rule> {
        self.world.borrow().filter_rules.clone()
    }

    /// Put rules in place, as an earlier ADD would have.
    pub fn set_filter_rules(&self, rules: Vec<Rule>) {
        self.world.borrow_mut().filter_rules = rules;
    }

    /// Make the next filter call fail with `e`.
    pub fn fail_filter(&self, e: FilterError) {
        self.world.borrow_mut().filter_error = Some(e);
    }

    pub fn logs(&self) -> Vec<(Level, String)> {
        self.world.borrow().logs.clone()
    }

    /// Everything observable in both namespaces (the model's dump: links
    /// with their settings, addresses and qdiscs, routes, changed sysctls),
    /// for before/after comparisons.
    pub fn snapshot(&self) -> String {
        let w = self.world.borrow();
        let mut out = String::new();
        for id in [NsId::Node, NsId::Container] {
            let alive = w.alive(id).is_ok();
            out.push_str(&format!("{id:?} alive={alive}\n"));
            if alive {
                for line in w.net.dump(id.host()) {
                    out.push_str(&format!("  {line}\n"));
                }
            }
        }
        out
    }
}

impl Host for FakeHost {
    type Ns = FakeNs;

    fn container_netns(&self) -> Result<FakeNs, NetError> {
        self.world.borrow().alive(NsId::Container)?;
        Ok(self.ns(NsId::Container))
    }

    fn node_netns(&self) -> Result<FakeNs, NetError> {
        Ok(self.ns(NsId::Node))
    }

    fn ipam_add(&self) -> Result<CniResult, CniError> {
        let mut w = self.world.borrow_mut();
        w.ipam_calls.push("add".into());
        if let Some(e) = w.ipam_errors.get("add") {
            return Err(e.clone());
        }
        let result = w
            .ipam_result
            .clone()
            .ok_or_else(|| CniError::internal("fake: no IPAM result configured"))?;
        w.ipam_allocated = true;
        // What the IPAM hands out is the attachment's own, as for the host.
        let nets = result
            .ips
            .iter()
            .filter_map(|ip| host_net::parse_cidr(&ip.address).ok());
        w.own_nets.extend(nets);
        Ok(result)
    }

    fn ipam_del(&self) -> Result<(), CniError> {
        let mut w = self.world.borrow_mut();
        w.ipam_calls.push("del".into());
        if let Some(e) = w.ipam_errors.get("del") {
            return Err(e.clone());
        }
        w.ipam_allocated = false;
        Ok(())
    }

    fn ipam_check(&self) -> Result<(), CniError> {
        self.ipam_simple("check")
    }

    fn ipam_status(&self) -> Result<(), CniError> {
        self.ipam_simple("status")
    }

    fn ipam_gc(&self) -> Result<(), CniError> {
        self.ipam_simple("gc")
    }

    fn store_reserve(&self, key: &str) -> Result<bool, StoreError> {
        let mut w = self.world.borrow_mut();
        w.store_ok()?;
        if w.store_entries
            .iter()
            .any(|e| e.key == key && e.released_at.is_none())
        {
            return Ok(false);
        }
        let (owner, now) = (w.attachment.clone(), w.now);
        w.store_entries.push(StoreEntry {
            key: key.into(),
            owner,
            allocated_at: now,
            released_at: None,
        });
        Ok(true)
    }

    fn store_release_by_owner(&self) -> Result<Vec<String>, StoreError> {
        let mut w = self.world.borrow_mut();
        w.store_ok()?;
        let (owner, now) = (w.attachment.clone(), w.now);
        let mut released = Vec::new();
        for e in &mut w.store_entries {
            if e.owner == owner && e.released_at.is_none() {
                e.released_at = Some(now);
                released.push(e.key.clone());
            }
        }
        Ok(released)
    }

    fn store_release(&self, key: &str) -> Result<bool, StoreError> {
        let mut w = self.world.borrow_mut();
        w.store_ok()?;
        let now = w.now;
        let mut any = false;
        for e in &mut w.store_entries {
            if e.key == key && e.released_at.is_none() {
                e.released_at = Some(now);
                any = true;
            }
        }
        Ok(any)
    }

    fn store_get_by_owner(&self) -> Result<Vec<String>, StoreError> {
        let w = self.world.borrow();
        w.store_ok()?;
        Ok(w.store_entries
            .iter()
            .filter(|e| e.owner == w.attachment && e.released_at.is_none())
            .map(|e| e.key.clone())
            .collect())
    }

    fn store_list(&self) -> Result<Vec<StoreEntry>, StoreError> {
        let w = self.world.borrow();
        w.store_ok()?;
        Ok(w.store_entries.clone())
    }

    fn store_now(&self) -> u64 {
        self.world.borrow().now
    }

    fn store_get_value(&self, name: &str) -> Result<Option<String>, StoreError> {
        let w = self.world.borrow();
        w.store_ok()?;
        Ok(w.store_values.get(name).cloned())
    }

    fn store_set_value(&self, name: &str, value: Option<&str>) -> Result<(), StoreError> {
        let mut w = self.world.borrow_mut();
        w.store_ok()?;
        match value {
            Some(v) => w.store_values.insert(name.into(), v.into()),
            None => w.store_values.remove(name),
        };
        Ok(())
    }

    fn filter_add(&self, rules: &[Rule]) -> Result<(), FilterError> {
        let mut w = self.world.borrow_mut();
        if let Some(e) = w.filter_error.take() {
            return Err(e);
        }
        w.ask_filter(rules, FilterOp::Add)?;
        for r in rules {
            if !w.filter_rules.contains(r) {
                w.filter_rules.push(r.clone());
            }
        }
        Ok(())
    }

    fn filter_check(&self, rules: &[Rule]) -> Result<(), FilterError> {
        let mut w = self.world.borrow_mut();
        if let Some(e) = w.filter_error.take() {
            return Err(e);
        }
        w.ask_filter(rules, FilterOp::Check)?;
        match rules.iter().find(|r| !w.filter_rules.contains(r)) {
            Some(r) => Err(FilterError::Missing(format!("rule {r}"))),
            None => Ok(()),
        }
    }

    fn filter_remove(&self, rules: &[Rule]) -> Result<(), FilterError> {
        let mut w = self.world.borrow_mut();
        if let Some(e) = w.filter_error.take() {
            return Err(e);
        }
        w.ask_filter(rules, FilterOp::Remove)?;
        w.filter_rules.retain(|r| !rules.contains(r));
        Ok(())
    }

    fn log(&self, level: Level, message: &str) {
        self.world.borrow_mut().logs.push((level, message.into()));
    }
}

impl World {
    /// Asks the host's policy about each rule, as the host's `filter`
    /// import does, confirming on the live links what a grant rests on.
    fn ask_filter(&mut self, rules: &[Rule], op: FilterOp) -> Result<(), FilterError> {
        let parsed = rules.iter().map(host_rule).collect::<Result<Vec<_>, _>>()?;
        if !self.policy {
            return Ok(());
        }
        let grants = self.grants();
        for rule in &parsed {
            let need = grants.filter(rule, op).map_err(FilterError::Refused)?;
            self.confirm(need).map_err(FilterError::Refused)?;
        }
        Ok(())
    }

    /// What the host confirms on the live links before a filter grant
    /// holds.
    fn confirm(&mut self, need: FilterNeed) -> Result<(), String> {
        let node = NsId::Node.host();
        match need {
            FilterNeed::Nothing => Ok(()),
            FilterNeed::Created(name, id) => self
                .verify_created(Side::Node, node, &name, &id)
                .map_err(|e| e.to_string()),
            FilterNeed::PortOf(bridge) => {
                live::confirm_port_of(&mut self.net, node, &bridge, &self.created[0])
            }
        }
    }

    fn store_ok(&self) -> Result<(), StoreError> {
        match &self.store_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl FakeHost {
    fn ipam_simple(&self, verb: &str) -> Result<(), CniError> {
        let mut w = self.world.borrow_mut();
        w.ipam_calls.push(verb.into());
        match w.ipam_errors.get(verb) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl FakeNs {
    /// Runs `f` on the world after the liveness and failure-injection
    /// checks.
    fn with<T>(
        &self,
        op: &str,
        arg: &str,
        f: impl FnOnce(&mut World, NsId) -> NetResult<T>,
    ) -> NetResult<T> {
        let mut w = self.world.borrow_mut();
        w.alive(self.id)?;
        w.check_failure(op, arg)?;
        f(&mut w, self.id)
    }

    /// A link stacked on `master` (a link here), created in `target`: the
    /// host's stacked-link questions, then `create` on the model; the link
    /// becomes the attachment's.
    fn upper(
        &self,
        op: &str,
        name: &str,
        master: &str,
        target: &Self,
        made: Ask<'_>,
        create: impl FnOnce(&mut MemoryNet, HostNs, HostNs) -> Result<LinkInfo, host_net::NetError>,
    ) -> NetResult<Link> {
        let target_id = target.id;
        self.with(op, name, |w, id| {
            w.alive(target_id)?;
            let default = live::carries_default_route(&mut w.net, id.host(), master);
            let asks = Ask::stacked(
                made,
                &w.config_grants(),
                id.side(),
                id.host(),
                master,
                || default,
            );
            w.ask(&asks)?;
            let link = create(&mut w.net, id.host(), target_id.host()).map_err(err)?;
            w.record_created(target_id, &link);
            Ok(link_of(link))
        })
    }
}

/// A rule in the host's terms, checked as the host's `filter` import checks
/// it (the same words for what does not parse).
fn host_rule(r: &Rule) -> Result<HostRule, FilterError> {
    let ip = |s: &str, what: &str| {
        s.parse::<IpAddr>()
            .map_err(|_| FilterError::Invalid(format!("{what}: {s:?} is not an IP address")))
    };
    Ok(match r {
        Rule::Masquerade { source, except } => HostRule::Masquerade {
            source: ip(source, "masquerade source")?,
            except: except
                .iter()
                .map(|e| {
                    host_net::parse_cidr(e)
                        .map_err(|e| FilterError::Invalid(format!("masquerade exception: {e}")))
                })
                .collect::<Result<_, _>>()?,
        },
        Rule::PortMap {
            protocol,
            host_ip,
            host_port,
            address,
            port,
        } => HostRule::PortMap {
            proto: match protocol {
                Protocol::Tcp => Proto::Tcp,
                Protocol::Udp => Proto::Udp,
                Protocol::Sctp => Proto::Sctp,
            },
            host_ip: host_ip
                .as_deref()
                .map(|h| ip(h, "port map host-ip"))
                .transpose()?,
            host_port: *host_port,
            dst: ip(address, "port map address")?,
            dst_port: *port,
        },
        Rule::HairpinMasquerade(a) => HostRule::HairpinMasquerade {
            dst: ip(a, "hairpin address")?,
        },
        Rule::AllowForward(a) => HostRule::AllowForward {
            addr: ip(a, "forward address")?,
        },
        Rule::IsolateBridge(b) => HostRule::IsolateBridge { bridge: b.clone() },
        Rule::MacSpoofCheck { link, mac } => HostRule::MacSpoofCheck {
            mac: host_net::parse_mac(mac).map_err(|e| FilterError::Invalid(e.to_string()))?,
            link: link.clone(),
        },
    })
}

/// The host's `network` import over the host's kernel model: each call
/// asks the questions the host's import asks, then does what the host's
/// backend does, with the same conversions at the boundary.
impl Ops for FakeNs {
    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_ns: &Self,
        mtu: Option<u32>,
        mac: Option<&str>,
    ) -> NetResult<Link> {
        let peer_id = peer_ns.id;
        self.with("create_veth", name, |w, id| {
            w.alive(peer_id)?;
            w.ask(&[
                Ask::Create(id.side(), name),
                Ask::Create(peer_id.side(), peer_name),
            ])?;
            let link = w
                .net
                .create_veth(id.host(), name, peer_name, peer_id.host(), mtu, mac)
                .map_err(err)?;
            w.record_created(id, &link);
            if let Ok(peer) = w.net.link_by_name(peer_id.host(), peer_name) {
                w.record_created(peer_id, &peer);
            }
            Ok(link_of(link))
        })
    }

    fn ensure_bridge(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        self.with("ensure_bridge", name, |w, id| {
            w.ask(&Ask::ensure_bridge(id.side(), id.host(), name))?;
            let bridge = w.net.ensure_bridge(id.host(), name, mtu).map_err(err)?;
            // In the container a bridge is the attachment's, as any link
            // made there; in the node it is shared and never is.
            if id == NsId::Container {
                w.record_created(id, &bridge);
            }
            Ok(link_of(bridge))
        })
    }

    fn create_macvlan(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link> {
        let made = Ask::CreateMacvlan(target.id.side(), name, host_mode(mode));
        self.upper(
            "create_macvlan",
            name,
            master,
            target,
            made,
            |net, at, to| {
                net.create_macvlan(at, name, master, host_mode(mode), mtu, mac, to, false)
            },
        )
    }

    fn create_macvtap(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link> {
        let made = Ask::CreateMacvlan(target.id.side(), name, host_mode(mode));
        self.upper(
            "create_macvtap",
            name,
            master,
            target,
            made,
            |net, at, to| net.create_macvlan(at, name, master, host_mode(mode), mtu, mac, to, true),
        )
    }

    fn create_vlan(
        &self,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link> {
        let made = Ask::CreateStacked(target.id.side(), name, "vlan");
        self.upper("create_vlan", name, master, target, made, |net, at, to| {
            net.create_vlan(at, name, master, vlan_id, mtu, to)
        })
    }

    fn create_ipvlan(
        &self,
        name: &str,
        master: &str,
        mode: IpvlanMode,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link> {
        let made = Ask::CreateStacked(target.id.side(), name, "ipvlan");
        self.upper(
            "create_ipvlan",
            name,
            master,
            target,
            made,
            |net, at, to| net.create_ipvlan(at, name, master, host_ipvlan(mode), mtu, to),
        )
    }

    fn create_tap(
        &self,
        name: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> NetResult<Link> {
        self.with("create_tap", name, |w, id| {
            w.ask(&[Ask::CreateTap(id.side(), name, owner, group)])?;
            let link = w
                .net
                .create_tap(id.host(), name, mtu, mac, multi_queue, owner, group)
                .map_err(err)?;
            w.record_created(id, &link);
            Ok(link_of(link))
        })
    }

    fn link_by_name(&self, name: &str) -> NetResult<Link> {
        self.with("link_by_name", name, |w, id| {
            w.net
                .link_by_name(id.host(), name)
                .map(link_of)
                .map_err(err)
        })
    }

    fn link_by_index(&self, index: u32) -> NetResult<Link> {
        self.with("link_by_index", &index.to_string(), |w, id| {
            w.net
                .link_by_index(id.host(), index)
                .map(link_of)
                .map_err(err)
        })
    }

    fn list_links(&self) -> NetResult<Vec<Link>> {
        self.with("list_links", "", |w, id| {
            let links = w.net.links(id.host()).map_err(err)?;
            Ok(links.into_iter().map(link_of).collect())
        })
    }

    fn set_link(&self, name: &str, s: &LinkSettings) -> NetResult<Link> {
        self.with("set_link", name, |w, id| {
            let master = s.master.as_deref().unwrap_or("");
            w.ask(&Ask::set_link(id.side(), id.host(), name, master))?;
            let change = LinkChange {
                up: s.up,
                mtu: s.mtu,
                mac: s.mac.clone(),
                master: s.master.clone(),
                promisc: s.promisc,
                allmulti: s.allmulti,
                txqlen: s.txqlen,
                hairpin: s.hairpin,
            };
            w.net
                .set_link(id.host(), name, &change)
                .map(link_of)
                .map_err(err)
        })
    }

    fn delete_link(&self, name: &str) -> NetResult<()> {
        self.with("delete_link", name, |w, id| {
            w.ask(&[Ask::Delete(id.side(), id.host(), name)])?;
            let out = w.net.delete_link(id.host(), name).map_err(err);
            if out.is_ok() || matches!(out, Err(NetError::NotFound(_))) {
                w.created[id.index()].remove(name);
            }
            out
        })
    }

    fn add_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        self.with("add_address", cidr, |w, id| {
            let addr = host_net::parse_cidr(cidr).map_err(err)?;
            w.ask(&[Ask::Address(id.side(), id.host(), link, &addr, true)])?;
            w.net.add_address(id.host(), link, &addr).map_err(err)
        })
    }

    fn del_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        self.with("del_address", cidr, |w, id| {
            let addr = host_net::parse_cidr(cidr).map_err(err)?;
            w.ask(&[Ask::Address(id.side(), id.host(), link, &addr, false)])?;
            w.net.del_address(id.host(), link, &addr).map_err(err)
        })
    }

    fn list_addresses(&self, link: &str) -> NetResult<Vec<String>> {
        self.with("list_addresses", link, |w, id| {
            let addrs = w.net.addresses(id.host(), link).map_err(err)?;
            Ok(addrs.iter().map(ToString::to_string).collect())
        })
    }

    fn add_route(&self, route: &RouteSpec) -> NetResult<()> {
        self.with("add_route", &route.dst, |w, id| {
            let r = w.ask_route(id, route, true)?;
            w.net.add_route(id.host(), &r).map_err(err)
        })
    }

    fn del_route(&self, route: &RouteSpec) -> NetResult<()> {
        self.with("del_route", &route.dst, |w, id| {
            let r = w.ask_route(id, route, false)?;
            w.net.del_route(id.host(), &r).map_err(err)
        })
    }

    fn list_routes(&self, link: &str, table: Option<u32>) -> NetResult<Vec<RouteSpec>> {
        self.with("list_routes", link, |w, id| {
            let routes = w.net.routes(id.host(), link, table).map_err(err)?;
            Ok(routes.into_iter().map(route_of).collect())
        })
    }

    fn get_sysctl(&self, key: &str) -> NetResult<String> {
        self.with("get_sysctl", key, |w, id| {
            w.ask(&[Ask::Sysctl(id.side(), id.host(), key, false)])?;
            w.net.sysctl_get(id.host(), key).map_err(err)
        })
    }

    fn set_sysctl(&self, key: &str, value: &str) -> NetResult<()> {
        self.with("set_sysctl", key, |w, id| {
            w.ask(&[Ask::Sysctl(id.side(), id.host(), key, true)])?;
            w.net.sysctl_set(id.host(), key, value).map_err(err)
        })
    }

    fn create_ifb(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        self.with("create_ifb", name, |w, id| {
            w.ask(&[Ask::CreateIfb(id.side(), name)])?;
            let link = w.net.create_ifb(id.host(), name, mtu).map_err(err)?;
            w.record_created(id, &link);
            Ok(link_of(link))
        })
    }

    fn limit_rate(&self, link: &str, limit: RateLimit) -> NetResult<()> {
        self.with("limit_rate", link, |w, id| {
            w.ask(&[Ask::Shape(id.side(), id.host(), link)])?;
            let limit = host_net::RateLimit {
                rate: limit.rate,
                burst: limit.burst,
            };
            w.net.set_rate_limit(id.host(), link, &limit).map_err(err)
        })
    }

    fn has_rate_limit(&self, link: &str, limit: RateLimit) -> NetResult<bool> {
        self.with("has_rate_limit", link, |w, id| {
            let limit = host_net::RateLimit {
                rate: limit.rate,
                burst: limit.burst,
            };
            let want = limit.tbf(w.net.ticks_per_us()).map_err(err)?;
            let root = w
                .net
                .qdiscs(id.host(), link)
                .map_err(err)?
                .into_iter()
                .find(|q| q.parent == host_net::TC_H_ROOT);
            Ok(root.is_some_and(|q| q.kind == "tbf" && q.tbf == Some(want)))
        })
    }

    fn redirect_ingress(&self, link: &str, to: &str) -> NetResult<()> {
        self.with("redirect_ingress", link, |w, id| {
            w.ask(&[
                Ask::Shape(id.side(), id.host(), link),
                Ask::Shape(id.side(), id.host(), to),
            ])?;
            w.net.redirect_ingress(id.host(), link, to).map_err(err)
        })
    }

    fn list_qdiscs(&self, link: &str) -> NetResult<Vec<Qdisc>> {
        self.with("list_qdiscs", link, |w, id| {
            let qdiscs = w.net.qdiscs(id.host(), link).map_err(err)?;
            Ok(qdiscs
                .into_iter()
                .map(|q| Qdisc {
                    kind: q.kind,
                    handle: q.handle,
                    parent: q.parent,
                    tbf_rate: q.tbf.map(|t| t.rate),
                    tbf_buffer: q.tbf.map(|t| t.buffer),
                    tbf_limit: q.tbf.map(|t| t.limit),
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_peers_die_together_and_with_the_namespace() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        let l = c
            .create_veth("eth0", "veth01", &n, Some(1400), Some("02:00:00:00:00:01"))
            .unwrap();
        assert_eq!(
            (l.kind.as_str(), l.mtu, l.mac.as_str()),
            ("veth", 1400, "02:00:00:00:00:01")
        );
        let peer = n.link_by_name("veth01").unwrap();
        assert_eq!(l.peer_index, Some(peer.index));
        assert_eq!(peer.peer_index, Some(l.index));
        assert!(c
            .create_veth("eth0", "veth02", &n, None, None)
            .unwrap_err()
            .is_exists());
        c.delete_link("eth0").unwrap();
        assert!(n.link_by_name("veth01").unwrap_err().is_not_found());

        c.create_veth("eth0", "veth01", &n, None, None).unwrap();
        host.remove_container_netns();
        assert!(n.link_by_name("veth01").unwrap_err().is_not_found());
        assert!(host.container_netns().is_err());
        assert!(c.link_by_name("lo").unwrap_err().is_not_found());
    }

    /// A rule the fake used to skip while the host enforced it: node-side
    /// addresses and routes lie in the attachment's own networks (what its
    /// IPAM handed out), node routes go to the main table, no route goes to
    /// the kernel's own tables. A plugin test that breaks it now fails here
    /// as the plugin would fail on a node, with the host's words.
    #[test]
    fn node_addresses_and_routes_stay_in_the_attachments_networks() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        host.allow_node_link("cni0");
        n.ensure_bridge("cni0", None).unwrap();
        let route = |dst: &str, dev: &str, table: Option<u32>| RouteSpec {
            dst: dst.into(),
            dev: Some(dev.into()),
            table,
            ..RouteSpec::default()
        };
        let refusal = |r: NetResult<()>| match r {
            Err(NetError::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        let why = refusal(n.add_address("cni0", "10.22.0.1/24"));
        assert_eq!(
            why,
            "address 10.22.0.1/24 on \"cni0\" in the node namespace is outside the \
             attachment's networks []"
        );
        refusal(n.add_route(&route("10.22.0.5/32", "cni0", None)));

        host.set_ipam_result(ipam_result(&[("10.22.0.5/24", Some("10.22.0.1"))], &[]));
        host.ipam_add().unwrap();
        n.set_link("cni0", &LinkSettings::up()).unwrap();
        n.add_address("cni0", "10.22.0.1/24").unwrap();
        n.add_route(&route("10.22.0.5/32", "cni0", None)).unwrap();
        let why = refusal(n.add_route(&route("10.99.0.0/24", "cni0", None)));
        assert!(
            why.ends_with("outside the attachment's networks [10.22.0.0/24]"),
            "{why}"
        );
        let why = refusal(n.add_route(&route("10.22.0.6/32", "cni0", Some(100))));
        assert_eq!(
            why,
            "route to 10.22.0.6/32: in the node namespace only the main table (254), not 100"
        );

        // The container namespace is the attachment's own: any table but
        // the kernel's.
        c.create_veth("eth0", "veth01", &n, None, None).unwrap();
        c.set_link("eth0", &LinkSettings::up()).unwrap();
        c.add_address("eth0", "10.22.0.5/24").unwrap();
        c.add_route(&route("10.50.0.0/24", "eth0", Some(100)))
            .unwrap();
        let why = refusal(c.add_route(&route("10.51.0.0/24", "eth0", Some(255))));
        assert_eq!(why, "route to 10.51.0.0/24: table 255 is the kernel's own");
        // A prevResult's address is the attachment's too, once declared.
        host.own_network("10.60.0.7/16");
        n.add_route(&route("10.60.1.0/24", "cni0", None)).unwrap();
    }

    #[test]
    fn policy_limits_the_attachment() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        let refused = |r: NetResult<()>| matches!(r, Err(NetError::Refused(_)));
        assert!(matches!(
            c.create_veth("eth1", "v1", &n, None, None),
            Err(NetError::Refused(_))
        ));
        assert!(refused(n.set_link("ens3", &LinkSettings::up()).map(drop)));
        assert!(refused(n.delete_link("ens3")));
        assert!(refused(c.delete_link("lo")));
        assert!(refused(n.ensure_bridge("cni0", None).map(drop)));
        assert!(refused(
            n.create_macvlan("eth0", "ens3", MacvlanMode::Bridge, None, None, &c)
                .map(drop)
        ));
        assert!(refused(n.set_sysctl("net.ipv4.conf.ens3.arp_notify", "1")));
        assert!(refused(n.set_sysctl("net.ipv4.conf.all.rp_filter", "1")));
        assert!(refused(n.set_sysctl("net.core.somaxconn", "1")));
        assert!(matches!(
            n.get_sysctl("kernel.hostname"),
            Err(NetError::Refused(_))
        ));
        n.get_sysctl("net.core.somaxconn").unwrap();
        n.set_sysctl("net.ipv4.ip_forward", "1").unwrap();
        c.set_sysctl("net.core.somaxconn", "1").unwrap();
        c.set_sysctl("net.ipv4.conf.all.log_martians", "1").unwrap();
        host.allow_node_link("ens3");
        host.allow_node_link("cni0");
        n.set_link("ens3", &LinkSettings::up()).unwrap();
        assert!(refused(n.delete_link("ens3")));
        n.ensure_bridge("cni0", None).unwrap();
        assert!(
            refused(n.delete_link("cni0")),
            "a bridge never becomes the attachment's"
        );
        n.create_macvlan("eth0", "ens3", MacvlanMode::Bridge, None, None, &c)
            .unwrap();
        c.delete_link("eth0").unwrap();
        assert!(c
            .set_sysctl("net.ipv4.nope", "1")
            .unwrap_err()
            .is_not_found());
    }

    #[test]
    fn taps_macvtaps_and_container_bridges() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        assert!(matches!(
            c.create_tap("eth1", None, None, false, None, None),
            Err(NetError::Refused(_))
        ));
        let tap = || {
            c.create_tap(
                "eth0",
                Some(9000),
                Some("02:00:00:00:00:05"),
                true,
                Some(107),
                None,
            )
        };
        // The host's rule: a tap's owner is the one the config names.
        assert!(matches!(tap(), Err(NetError::Refused(_))));
        host.request(&netconf("1.1.0", "vm", "tap", r#""owner":107"#));
        let l = tap().unwrap();
        assert_eq!(
            (l.kind.as_str(), l.mtu, l.mac.as_str()),
            ("tun", 9000, "02:00:00:00:00:05")
        );
        let info = TapInfo {
            multi_queue: true,
            owner: Some(107),
            group: None,
        };
        assert_eq!(host.tap(NsId::Container, "eth0"), Some(info));
        assert!(c
            .create_tap("eth0", None, None, false, None, None)
            .unwrap_err()
            .is_exists());
        // A container-side bridge: a master only once the config names it.
        host.add_link(NsId::Container, "br0", "bridge", 1500);
        let to_br0 = LinkSettings {
            master: Some("br0".into()),
            ..LinkSettings::default()
        };
        assert!(matches!(
            c.set_link("eth0", &to_br0),
            Err(NetError::Refused(_))
        ));
        host.allow_container_bridge("br0");
        let l = c.set_link("eth0", &to_br0).unwrap();
        assert_eq!(l.master, host.link(NsId::Container, "br0").map(|b| b.index));
        assert!(matches!(
            c.set_link("br0", &LinkSettings::up()),
            Err(NetError::Refused(_))
        ));
        assert!(matches!(c.delete_link("br0"), Err(NetError::Refused(_))));
        c.delete_link("eth0").unwrap();

        assert!(matches!(
            n.create_macvtap("eth0", "ens3", MacvlanMode::Vepa, None, None, &c),
            Err(NetError::Refused(_))
        ));
        host.allow_node_link("ens3");
        let l = n
            .create_macvtap("eth0", "ens3", MacvlanMode::Vepa, None, None, &c)
            .unwrap();
        assert_eq!(
            (l.kind.as_str(), l.macvlan_mode, l.txqlen),
            ("macvtap", Some(MacvlanMode::Vepa), 500)
        );
        assert_eq!(host.link_names(NsId::Node), ["lo", "ens3"]);
    }

    /// Rules the fake once skipped and the host always applied: now both
    /// ask one policy, so each refusal here is the host's, in its words.
    #[test]
    fn the_fake_refuses_what_the_host_refuses() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        let refused = |r: NetResult<Link>| match r {
            Err(NetError::Refused(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        // A request's config grants what it names, as the host derives it:
        // the master it names, and passthru only when it asks for it.
        host.request(&netconf("1.1.0", "n", "macvlan", r#""master":"ens3""#));
        let why = refused(n.create_macvlan("eth0", "ens3", MacvlanMode::Passthru, None, None, &c));
        assert!(why.contains("passthru"), "{why}");
        // A macvlan on the node is a VM's, and only when the config says so.
        let why = refused(n.create_macvlan("mv0", "ens3", MacvlanMode::Bridge, None, None, &n));
        assert!(why.contains("container namespace"), "{why}");
        n.create_macvlan("eth0", "ens3", MacvlanMode::Bridge, None, None, &c)
            .unwrap();
        // An ifb in the container, a second interface there.
        let why = refused(c.create_ifb("eth0", None));
        assert!(why.contains("node namespace only"), "{why}");
        let why = refused(c.create_veth("eth1", "veth9", &n, None, None));
        assert!(why.contains("eth1"), "{why}");
        // A node-wide sysctl that is not a forwarding switch, a key outside
        // `net.`, reading included.
        let set = n.set_sysctl("net.ipv4.conf.all.rp_filter", "1");
        assert!(matches!(set, Err(NetError::Refused(_))), "{set:?}");
        n.set_sysctl("net.ipv4.ip_forward", "1").unwrap();
        let get = c.get_sysctl("kernel.hostname");
        assert!(matches!(get, Err(NetError::Refused(_))), "{get:?}");
        // A route with no device, which the host cannot place.
        let route = RouteSpec {
            dst: "10.9.0.0/16".into(),
            gw: Some("10.1.2.1".into()),
            ..RouteSpec::default()
        };
        let r = c.add_route(&route);
        assert!(matches!(r, Err(NetError::Refused(_))), "{r:?}");
        // Deleting what is not there is "not found", as the host says it,
        // before whether it was the attachment's.
        assert!(c.delete_link("nothing").unwrap_err().is_not_found());
        assert!(matches!(n.delete_link("ens3"), Err(NetError::Refused(_))));

        // Filter rules: only for the attachment's own addresses, only the
        // port mappings the runtime asked for, and what does not parse is
        // invalid before anything is asked.
        host.request(&netconf(
            "1.1.0",
            "n",
            "portmap",
            r#""runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80}]}"#,
        ));
        host.own_network("10.1.2.5/24");
        let map = |host_port| Rule::PortMap {
            protocol: Protocol::Tcp,
            host_ip: None,
            host_port,
            address: "10.1.2.5".into(),
            port: 80,
        };
        host.filter_add(&[map(8080)]).unwrap();
        let e = host.filter_add(&[map(8081)]).unwrap_err();
        assert!(matches!(e, FilterError::Refused(_)), "{e:?}");
        let masq = |source: &str| Rule::Masquerade {
            source: source.into(),
            except: Vec::new(),
        };
        let e = host.filter_add(&[masq("10.1.2.6")]).unwrap_err();
        assert!(
            matches!(&e, FilterError::Refused(why) if why.contains("not an address of this attachment")),
            "{e:?}"
        );
        let e = host.filter_add(&[masq("10.1.2")]).unwrap_err();
        assert!(matches!(e, FilterError::Invalid(_)), "{e:?}");
        host.filter_add(&[masq("10.1.2.5")]).unwrap();
        assert_eq!(host.filter_rules(), [map(8080), masq("10.1.2.5")]);
    }

    #[test]
    fn addresses_and_routes_behave_like_the_kernel() {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        c.create_veth("eth0", "v1", &n, None, None).unwrap();
        c.add_address("eth0", "10.0.0.2/24").unwrap();
        assert!(c
            .add_address("eth0", "10.0.0.2/24")
            .unwrap_err()
            .is_exists());
        // The subnet route comes when the link is up, as in the kernel.
        assert!(host.routes(NsId::Container).is_empty());
        c.set_link("eth0", &LinkSettings::up()).unwrap();
        assert_eq!(
            host.routes(NsId::Container),
            ["10.0.0.0/24 dev eth0 src 10.0.0.2 scope 253"]
        );
        let via = |dst: &str, gw: &str| RouteSpec {
            dst: dst.into(),
            gw: Some(gw.into()),
            dev: Some("eth0".into()),
            ..RouteSpec::default()
        };
        assert!(matches!(
            c.add_route(&via("0.0.0.0/0", "10.9.0.1")),
            Err(NetError::Kernel(101, _))
        ));
        c.add_route(&via("0.0.0.0/0", "10.0.0.1")).unwrap();
        assert!(c
            .add_route(&via("0.0.0.0/0", "10.0.0.1"))
            .unwrap_err()
            .is_exists());
        c.del_address("eth0", "10.0.0.2/24").unwrap();
        assert_eq!(
            host.routes(NsId::Container),
            ["0.0.0.0/0 via 10.0.0.1 dev eth0"]
        );
        host.fail_next("add_address", "", NetError::Kernel(-1, "boom".into()));
        assert!(c.add_address("eth0", "10.0.0.3/24").is_err());
        c.add_address("eth0", "10.0.0.3/24").unwrap();
    }

    #[test]
    fn store_reserves_per_owner_with_the_clock() {
        let host = FakeHost::new("eth0");
        host.set_now(5);
        assert!(host.store_reserve("10.0.0.2").unwrap());
        assert!(!host.store_reserve("10.0.0.2").unwrap());
        assert_eq!(host.store_get_by_owner().unwrap(), ["10.0.0.2"]);
        host.set_now(9);
        assert_eq!(host.store_now(), 9);
        assert_eq!(host.store_release_by_owner().unwrap(), ["10.0.0.2"]);
        let e = &host.store_list().unwrap()[0];
        assert_eq!((e.allocated_at, e.released_at), (5, Some(9)));
        host.store_set_value("last", Some("10.0.0.2")).unwrap();
        assert_eq!(
            host.store_get_value("last").unwrap().as_deref(),
            Some("10.0.0.2")
        );
        host.set_store_error(StoreError::Io("ro".into()));
        assert!(host.store_reserve("x").is_err());
    }
}
