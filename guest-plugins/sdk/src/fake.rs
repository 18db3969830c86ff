//! An in-memory [`Host`] for native unit tests: two namespaces (node and
//! container) with links, addresses, routes and sysctls that behave like the
//! kernel where plugins can tell the difference (veth peers die together,
//! addresses add their connected route, a gateway must be reachable, a
//! duplicate address or route is `Exists`, an unknown sysctl is `NotFound`),
//! a scripted IPAM delegate, a store, and the host's policy.
//!
//! The policy is the host's own (`wasm-cni-model`'s `policy`, what the host
//! runs): each `Ops` call and each filter call asks it the questions the
//! host's imports ask before acting, so a plugin the host would refuse fails
//! its unit test the same way, in the host's words. What it grants comes from where the host
//! takes it: the config of the last request built with
//! [`FakeHost::request`] (the links it names — `bridge`, `master`,
//! `vm.parent`, the bridge plugin's `cni0` — a tap's `owner` and `group`,
//! passthru, a VM's `vm`, the port mappings), the links created through
//! `Ops` (the attachment's own), and the attachment's own addresses (what
//! the fake's IPAM handed out, a prevResult given to
//! [`FakeHost::request_with_prev`], or [`FakeHost::own_network`]). One difference: the fake does not know which
//! verb a plugin function serves, so it grants what ADD may do (the host
//! refuses node-side changes during DEL, and every change during CHECK).
//!
//! Setup and inspection methods on [`FakeHost`] bypass the policy.

#![allow(clippy::missing_panics_doc)]

pub mod suite;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::rc::Rc;

use crate::error::CniError;
use crate::filter::{FilterError, Protocol, Rule};
use crate::host::{Host, Level, StoreEntry, StoreError};
use crate::ip::{parse_cidr, parse_ip, IpNet, IpNetExt};
use crate::net::{
    scope, IpvlanMode, Link, LinkSettings, MacvlanMode, NetError, NetResult, Ops, Qdisc, RateLimit,
    RouteSpec, MAIN_TABLE,
};
use crate::types::{Attachment, CniResult, IpConfig, Request, Route};

// The host's own policy (the wasm-cni-model crate the host runs), asked the
// same questions the host asks before each import acts: the fake has no
// rules of its own.
use wasm_cni_model::filter::{Proto, Rule as HostRule};
use wasm_cni_model::net::{self as host_net, LinkId, MacvlanMode as HostMode, NsId as HostNs};
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

    /// The handle the policy's questions carry.
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

#[derive(Clone, Debug)]
struct FakeLink {
    link: Link,
    addresses: Vec<IpNet>,
    hairpin: bool,
    /// For a bridge: its MAC was set explicitly, so it no longer follows
    /// its lowest port MAC (the kernel's `NET_ADDR_SET`).
    mac_set: bool,
    /// For a veth: the namespace and index of the peer.
    peer: Option<(NsId, u32)>,
    /// For a tap: how it was created.
    tap: Option<TapInfo>,
    /// The root tbf's limit, if one is set.
    rate_limit: Option<RateLimit>,
    /// Where its ingress is redirected, if it is.
    redirect: Option<String>,
}

/// How a tap device was created (what `Link` does not report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapInfo {
    pub multi_queue: bool,
    pub owner: Option<u32>,
    pub group: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct NsState {
    alive: bool,
    links: Vec<FakeLink>,
    /// Normalized: `dev` and `table` always set, `dst` a network.
    routes: Vec<RouteSpec>,
    sysctls: BTreeMap<String, String>,
    /// Links created through `Ops` (the attachment's own).
    created: Vec<String>,
}

impl NsState {
    fn find(&self, name: &str) -> Option<usize> {
        self.links.iter().position(|l| l.link.name == name)
    }

    fn find_index(&self, index: u32) -> Option<usize> {
        self.links.iter().position(|l| l.link.index == index)
    }
}

struct Failure {
    op: String,
    arg: String,
    error: NetError,
}

struct World {
    ns: [NsState; 2],
    next_index: u32,
    next_mac: u32,
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
    own_nets: Vec<IpNet>,
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

const IPV4_LEAVES: &[(&str, &str)] = &[
    ("arp_notify", "0"),
    ("forwarding", "0"),
    ("rp_filter", "0"),
    ("log_martians", "0"),
    ("route_localnet", "0"),
];
const IPV6_LEAVES: &[(&str, &str)] = &[
    ("disable_ipv6", "0"),
    ("accept_dad", "1"),
    ("enhanced_dad", "1"),
    ("keep_addr_on_down", "0"),
    ("accept_ra", "1"),
    ("ndisc_notify", "0"),
    ("forwarding", "0"),
];

fn per_link_keys(name: &str) -> Vec<(String, &'static str)> {
    let name = name.replace('.', "/");
    let mut keys = Vec::new();
    for (leaf, v) in IPV4_LEAVES {
        keys.push((format!("net.ipv4.conf.{name}.{leaf}"), *v));
    }
    for (leaf, v) in IPV6_LEAVES {
        keys.push((format!("net.ipv6.conf.{name}.{leaf}"), *v));
    }
    keys
}

impl World {
    fn new(ifname: &str) -> Self {
        let mut world = Self {
            ns: [NsState::default(), NsState::default()],
            next_index: 1,
            next_mac: 1,
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
        };
        for id in [NsId::Node, NsId::Container] {
            let ns = &mut world.ns[id.index()];
            ns.alive = true;
            for (k, v) in [
                ("net.ipv4.ip_forward", "0"),
                ("net.ipv6.conf.all.forwarding", "0"),
                ("net.ipv6.conf.all.disable_ipv6", "0"),
                ("net.ipv6.conf.default.disable_ipv6", "0"),
                ("net.ipv4.conf.all.log_martians", "0"),
                ("net.ipv4.conf.all.arp_notify", "0"),
                ("net.core.somaxconn", "4096"),
                ("kernel.hostname", "fake"),
            ] {
                ns.sysctls.insert(k.into(), v.into());
            }
        }
        world.new_link(NsId::Node, "lo", "loopback", 65536, true);
        world.new_link(NsId::Container, "lo", "loopback", 65536, false);
        for id in [NsId::Node, NsId::Container] {
            for a in ["127.0.0.1/8", "::1/128"] {
                if let (Some(i), Ok(net)) = (world.ns[id.index()].find("lo"), parse_cidr(a)) {
                    world.ns[id.index()].links[i].addresses.push(net);
                }
            }
        }
        world.new_link(NsId::Node, "ens3", "device", 1500, true);
        world.raw_address(NsId::Node, "ens3", "192.168.1.10/24");
        world.ns[0].routes.push(RouteSpec {
            dst: "0.0.0.0/0".into(),
            gw: Some("192.168.1.1".into()),
            dev: Some("ens3".into()),
            table: Some(MAIN_TABLE),
            ..RouteSpec::default()
        });
        world
    }

    fn mac(&mut self) -> String {
        let n = self.next_mac;
        self.next_mac += 1;
        format!("02:fa:00:00:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff)
    }

    fn new_link(&mut self, id: NsId, name: &str, kind: &str, mtu: u32, up: bool) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        let mac = if kind == "loopback" {
            "00:00:00:00:00:00".to_string()
        } else {
            self.mac()
        };
        let ns = &mut self.ns[id.index()];
        ns.links.push(FakeLink {
            link: Link {
                index,
                name: name.into(),
                kind: kind.into(),
                mac,
                mtu,
                up,
                oper_up: up,
                txqlen: 1000,
                ..Link::default()
            },
            addresses: Vec::new(),
            hairpin: false,
            mac_set: false,
            peer: None,
            tap: None,
            rate_limit: None,
            redirect: None,
        });
        for (k, v) in per_link_keys(name) {
            ns.sysctls.insert(k, v.into());
        }
        index
    }

    fn raw_address(&mut self, id: NsId, link: &str, cidr: &str) {
        let Ok(net) = parse_cidr(cidr) else {
            return;
        };
        let ns = &mut self.ns[id.index()];
        if let Some(i) = ns.find(link) {
            ns.links[i].addresses.push(net);
            if net.prefix_len() < net.family().bits() {
                ns.routes.push(RouteSpec {
                    dst: net.trunc().to_string(),
                    dev: Some(link.into()),
                    src: Some(net.addr().to_string()),
                    scope: Some(scope::LINK),
                    table: Some(MAIN_TABLE),
                    ..RouteSpec::default()
                });
            }
        }
    }

    fn describe(&self, id: NsId, i: usize) -> Link {
        let ns = &self.ns[id.index()];
        let l = &ns.links[i];
        let mut link = l.link.clone();
        let peer_up = l.peer.is_none_or(|(pid, pindex)| {
            self.ns[pid.index()]
                .find_index(pindex)
                .is_some_and(|p| self.ns[pid.index()].links[p].link.up)
        });
        link.oper_up = link.up && peer_up;
        link
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
        if self.ns[id.index()].alive {
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
        let created = |id: NsId| {
            let ns = &self.ns[id.index()];
            ns.created
                .iter()
                .filter_map(|name| {
                    let link = &ns.links[ns.find(name)?].link;
                    let id = LinkId {
                        index: link.index,
                        kind: link.kind.clone(),
                    };
                    Some((name.clone(), id))
                })
                .collect()
        };
        Grants {
            command: Command::Add,
            ifname: self.attachment.ifname.clone(),
            config: self.config_grants(),
            created_node: created(NsId::Node),
            created_container: created(NsId::Container),
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
    /// import acts; the first refusal is the answer, in the host's words.
    fn ask(&self, asks: &[Ask<'_>]) -> NetResult<()> {
        if !self.policy {
            return Ok(());
        }
        let grants = self.grants();
        for ask in asks {
            if let Err(why) = ask.verdict(&grants) {
                // As the host: deleting what is not there is "not found",
                // whoever asks.
                if let Ask::Delete(side, _, name) = ask {
                    if self.ns[NsId::of(*side).index()].find(name).is_none() {
                        return Err(NetError::NotFound(format!("link {name:?}")));
                    }
                }
                return Err(NetError::Refused(why));
            }
        }
        Ok(())
    }

    /// The policy's question for adding (`add`) or deleting `route` in
    /// `id`; its device and destination when it is allowed. The host
    /// refuses a route that names no device.
    fn ask_route(&self, id: NsId, route: &RouteSpec, add: bool) -> NetResult<(String, IpNet)> {
        let dev = route
            .dev
            .clone()
            .ok_or_else(|| NetError::Refused("a route must name its device".into()))?;
        let dst = parse_cidr(&route.dst)
            .map_err(|_| NetError::Invalid(format!("invalid route dst {:?}", route.dst)))?;
        let ask = Ask::Route(id.side(), id.host(), &dev, &dst, route.table, add);
        self.ask(&[ask])?;
        Ok((dev, dst))
    }

    /// Whether `master` carries the namespace's default route.
    fn carries_default_route(&self, id: NsId, master: &str) -> bool {
        self.ns[id.index()].routes.iter().any(|r| {
            r.dev.as_deref() == Some(master)
                && parse_cidr(&r.dst).is_ok_and(|d| d.prefix_len() == 0)
        })
    }

    fn remove_link(&mut self, id: NsId, i: usize) {
        let ns = &mut self.ns[id.index()];
        let gone = ns.links.remove(i);
        let name = gone.link.name.clone();
        ns.routes
            .retain(|r| r.dev.as_deref() != Some(name.as_str()));
        let prefix_v4 = format!("net.ipv4.conf.{}.", name.replace('.', "/"));
        let prefix_v6 = format!("net.ipv6.conf.{}.", name.replace('.', "/"));
        ns.sysctls
            .retain(|k, _| !k.starts_with(&prefix_v4) && !k.starts_with(&prefix_v6));
        ns.created.retain(|c| *c != name);
        for l in &mut ns.links {
            if l.link.master == Some(gone.link.index) {
                l.link.master = None;
                l.hairpin = false;
            }
        }
        if let Some(bridge) = gone.link.master {
            self.follow_ports(id, bridge);
        }
        if let Some((pid, pindex)) = gone.peer {
            if let Some(p) = self.ns[pid.index()].find_index(pindex) {
                if let Some(peer) = self.ns[pid.index()].links.get_mut(p) {
                    peer.peer = None;
                }
                self.remove_link(pid, p);
            }
        }
    }

    /// A bridge whose MAC was never set takes the lowest MAC of its ports.
    fn follow_ports(&mut self, id: NsId, bridge_index: u32) {
        let ns = &mut self.ns[id.index()];
        let lowest = ns
            .links
            .iter()
            .filter(|l| l.link.master == Some(bridge_index))
            .map(|l| l.link.mac.clone())
            .min();
        if let (Some(b), Some(mac)) = (ns.find_index(bridge_index), lowest) {
            if ns.links[b].link.kind == "bridge" && !ns.links[b].mac_set {
                ns.links[b].link.mac = mac;
            }
        }
    }

    fn link_pos(&self, id: NsId, name: &str) -> NetResult<usize> {
        self.ns[id.index()]
            .find(name)
            .ok_or_else(|| NetError::NotFound(format!("link {name:?}")))
    }

    fn reachable(&self, id: NsId, dev: &str, gw: &IpAddr) -> bool {
        if let IpAddr::V6(v6) = gw {
            if v6.segments()[0] & 0xffc0 == 0xfe80 {
                return true;
            }
        }
        let ns = &self.ns[id.index()];
        let on_link = ns
            .find(dev)
            .is_some_and(|i| ns.links[i].addresses.iter().any(|a| a.contains(gw)));
        on_link
            || ns.routes.iter().any(|r| {
                r.dev.as_deref() == Some(dev)
                    && r.scope == Some(scope::LINK)
                    && parse_cidr(&r.dst).is_ok_and(|d| d.contains(gw))
            })
    }
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
    /// A node namespace with `lo` and `ens3` (192.168.1.10/24, default route
    /// via 192.168.1.1) and a container namespace with `lo` (down, holding
    /// 127.0.0.1/8 and ::1/128); the attachment is (`ctr1`, `ifname`).
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
        if let Ok(net) = parse_cidr(cidr) {
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

    /// Adds a link (no policy), returning its index.
    pub fn add_link(&self, id: NsId, name: &str, kind: &str, mtu: u32) -> u32 {
        self.world.borrow_mut().new_link(id, name, kind, mtu, true)
    }

    /// Adds an address (and its connected route), no policy.
    pub fn add_address(&self, id: NsId, link: &str, cidr: &str) {
        self.world.borrow_mut().raw_address(id, link, cidr);
    }

    /// Adds a route as-is (normalized), no policy.
    pub fn add_route(&self, id: NsId, route: RouteSpec) {
        let mut route = route;
        route.table.get_or_insert(MAIN_TABLE);
        self.world.borrow_mut().ns[id.index()].routes.push(route);
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

    pub fn remove_route(&self, id: NsId, dst: &str) {
        self.world.borrow_mut().ns[id.index()]
            .routes
            .retain(|r| r.dst != dst);
    }

    pub fn set_sysctl(&self, id: NsId, key: &str, value: &str) {
        self.world.borrow_mut().ns[id.index()]
            .sysctls
            .insert(key.into(), value.into());
    }

    /// Deletes a link without policy (as an administrator would).
    pub fn delete_link(&self, id: NsId, name: &str) {
        let mut w = self.world.borrow_mut();
        if let Some(i) = w.ns[id.index()].find(name) {
            w.remove_link(id, i);
        }
    }

    /// Removes an address without policy.
    pub fn remove_address(&self, id: NsId, link: &str, cidr: &str) {
        let mut w = self.world.borrow_mut();
        let ns = &mut w.ns[id.index()];
        if let (Some(i), Ok(net)) = (ns.find(link), parse_cidr(cidr)) {
            ns.links[i].addresses.retain(|a| *a != net);
        }
    }

    /// The runtime deleted the container namespace: its links go, and so do
    /// the node-side peers of its veths.
    pub fn remove_container_netns(&self) {
        let mut w = self.world.borrow_mut();
        while !w.ns[1].links.is_empty() {
            w.remove_link(NsId::Container, 0);
        }
        w.ns[1].alive = false;
        w.ns[1].routes.clear();
        w.ns[1].sysctls.clear();
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
        let w = self.world.borrow();
        w.ns[id.index()].find(name).map(|i| w.describe(id, i))
    }

    pub fn link_names(&self, id: NsId) -> Vec<String> {
        self.world.borrow().ns[id.index()]
            .links
            .iter()
            .map(|l| l.link.name.clone())
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
        let w = self.world.borrow();
        let ns = &w.ns[id.index()];
        ns.find(link)
            .map(|i| {
                ns.links[i]
                    .addresses
                    .iter()
                    .map(ToString::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Routes as `dst [via gw] dev D [src S] [scope N] [table T]` strings.
    pub fn routes(&self, id: NsId) -> Vec<String> {
        self.world.borrow().ns[id.index()]
            .routes
            .iter()
            .map(|r| {
                let mut s = r.dst.clone();
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
        self.world.borrow().ns[id.index()].sysctls.get(key).cloned()
    }

    /// How tap `name` was created (`None` if it is not a tap made by
    /// `create_tap`).
    pub fn tap(&self, id: NsId, name: &str) -> Option<TapInfo> {
        let w = self.world.borrow();
        let ns = &w.ns[id.index()];
        ns.find(name).and_then(|i| ns.links[i].tap)
    }

    pub fn hairpin(&self, id: NsId, name: &str) -> Option<bool> {
        let w = self.world.borrow();
        let ns = &w.ns[id.index()];
        ns.find(name).map(|i| ns.links[i].hairpin)
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

    /// Everything observable in both namespaces, for before/after
    /// comparisons.
    pub fn snapshot(&self) -> String {
        let mut out = String::new();
        for id in [NsId::Node, NsId::Container] {
            let w = self.world.borrow();
            let ns = &w.ns[id.index()];
            out.push_str(&format!("{id:?} alive={}\n", ns.alive));
            for (i, l) in ns.links.iter().enumerate() {
                let d = w.describe(id, i);
                out.push_str(&format!(
                    "  link {} {} mac={} mtu={} up={} master={:?} promisc={} allmulti={} txqlen={} hairpin={} addrs={:?}\n",
                    d.name, d.kind, d.mac, d.mtu, d.up, d.master, d.promisc, d.allmulti, d.txqlen, l.hairpin,
                    l.addresses.iter().map(ToString::to_string).collect::<Vec<_>>()
                ));
            }
            drop(w);
            for r in self.routes(id) {
                out.push_str(&format!("  route {r}\n"));
            }
            let w = self.world.borrow();
            for (k, v) in &w.ns[id.index()].sysctls {
                out.push_str(&format!("  sysctl {k}={v}\n"));
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
            .filter_map(|ip| parse_cidr(&ip.address).ok());
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
    /// import does, confirming on the fake's links what a grant rests on.
    fn ask_filter(&self, rules: &[Rule], op: FilterOp) -> Result<(), FilterError> {
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
    fn confirm(&self, need: FilterNeed) -> Result<(), String> {
        let node = &self.ns[NsId::Node.index()];
        match need {
            FilterNeed::Nothing => Ok(()),
            FilterNeed::Created(name, id) => match node.find(&name).map(|i| &node.links[i].link) {
                Some(l) if l.index == id.index && l.kind == id.kind => Ok(()),
                _ => Err(format!(
                    "link {name:?} this attachment created is gone from the node namespace"
                )),
            },
            FilterNeed::PortOf(bridge) => {
                let br = node
                    .find(&bridge)
                    .map(|i| node.links[i].link.index)
                    .ok_or_else(|| format!("not found: link {bridge:?}"))?;
                let port = node.created.iter().any(|c| {
                    node.find(c)
                        .is_some_and(|i| node.links[i].link.master == Some(br))
                });
                match port {
                    true => Ok(()),
                    false => Err(format!(
                        "{bridge:?} has no port this attachment created: only the attachment's own bridge may be isolated"
                    )),
                }
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

    /// A link of `kind` stacked on `master`, here, as `name` in `target`;
    /// `finish` sets what is particular to the kind (it sees the master).
    #[allow(clippy::too_many_arguments)]
    fn upper(
        &self,
        kind: &'static str,
        name: &str,
        master: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
        mode: Option<MacvlanMode>,
        finish: impl FnOnce(&mut Link, &Link),
    ) -> NetResult<Link> {
        let target_id = target.id;
        self.with(&format!("create_{kind}"), name, |w, id| {
            w.alive(target_id)?;
            let made = match mode {
                Some(mode) => Ask::CreateMacvlan(target_id.side(), name, host_mode(mode)),
                None => Ask::CreateStacked(target_id.side(), name, kind),
            };
            w.ask(&Ask::stacked(
                made,
                &w.config_grants(),
                id.side(),
                id.host(),
                master,
                || w.carries_default_route(id, master),
            ))?;
            check_name(name)?;
            let mac = check_mac(mac)?;
            let m = w.link_pos(id, master)?;
            let master_link = w.ns[id.index()].links[m].link.clone();
            let mtu = mtu.unwrap_or(master_link.mtu);
            if mtu > master_link.mtu {
                return Err(NetError::Kernel(
                    -22,
                    format!("mtu {mtu} greater than master's"),
                ));
            }
            if w.ns[target_id.index()].find(name).is_some() {
                return Err(NetError::Exists(format!("link {name:?}")));
            }
            w.new_link(target_id, name, kind, mtu, false);
            let ns = &mut w.ns[target_id.index()];
            let i = ns.links.len() - 1;
            ns.links[i].link.master = None;
            finish(&mut ns.links[i].link, &master_link);
            if let Some(mac) = mac {
                ns.links[i].link.mac = mac;
            }
            ns.created.push(name.into());
            Ok(w.describe(target_id, i))
        })
    }

    /// A macvlan or (`kind` "macvtap") macvtap.
    #[allow(clippy::too_many_arguments)]
    fn macvlan(
        &self,
        kind: &'static str,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link> {
        self.upper(kind, name, master, mtu, mac, target, Some(mode), |l, _| {
            l.macvlan_mode = Some(mode);
            if kind == "macvtap" {
                // The kernel's default for a macvtap.
                l.txqlen = 500;
            }
        })
    }
}

fn check_name(name: &str) -> NetResult<()> {
    if name.is_empty()
        || name.len() > 15
        || name.contains('/')
        || name.contains(char::is_whitespace)
    {
        return Err(NetError::Invalid(format!("invalid link name {name:?}")));
    }
    Ok(())
}

fn check_mac(mac: Option<&str>) -> NetResult<Option<String>> {
    mac.map(|m| {
        crate::mac::normalize(m).ok_or_else(|| NetError::Invalid(format!("invalid MAC {m:?}")))
    })
    .transpose()
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

fn check_mtu(mtu: u32) -> NetResult<()> {
    if !(68..=65535).contains(&mtu) {
        return Err(NetError::Kernel(-22, format!("invalid MTU {mtu}")));
    }
    Ok(())
}

fn route_matches(r: &RouteSpec, want: &RouteSpec, dst: &IpNet) -> bool {
    parse_cidr(&r.dst).is_ok_and(|d| d.trunc() == dst.trunc())
        && want.dev.as_ref().is_none_or(|d| r.dev.as_ref() == Some(d))
        && r.table.unwrap_or(MAIN_TABLE) == want.table.unwrap_or(MAIN_TABLE)
        && want.gw.as_ref().is_none_or(|g| r.gw.as_ref() == Some(g))
}

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
            check_name(name)?;
            check_name(peer_name)?;
            let mac = check_mac(mac)?;
            if let Some(m) = mtu {
                check_mtu(m)?;
            }
            if w.ns[id.index()].find(name).is_some() {
                return Err(NetError::Exists(format!("link {name:?}")));
            }
            if w.ns[peer_id.index()].find(peer_name).is_some() {
                return Err(NetError::Exists(format!("link {peer_name:?}")));
            }
            let mtu = mtu.unwrap_or(1500);
            let here = w.new_link(id, name, "veth", mtu, false);
            let there = w.new_link(peer_id, peer_name, "veth", mtu, false);
            let ns = &mut w.ns[id.index()];
            let i = ns.links.len() - 1;
            ns.links[i].peer = Some((peer_id, there));
            ns.links[i].link.peer_index = Some(there);
            if let Some(mac) = mac {
                ns.links[i].link.mac = mac;
            }
            ns.created.push(name.into());
            let pns = &mut w.ns[peer_id.index()];
            let p = pns.links.len() - 1;
            pns.links[p].peer = Some((id, here));
            pns.links[p].link.peer_index = Some(here);
            pns.created.push(peer_name.into());
            Ok(w.describe(id, w.ns[id.index()].links.len() - 1))
        })
    }

    fn ensure_bridge(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        self.with("ensure_bridge", name, |w, id| {
            w.ask(&Ask::ensure_bridge(id.side(), id.host(), name))?;
            check_name(name)?;
            if let Some(i) = w.ns[id.index()].find(name) {
                let kind = &w.ns[id.index()].links[i].link.kind;
                if kind != "bridge" {
                    return Err(NetError::Exists(format!("{name:?} exists and is a {kind}")));
                }
                return Ok(w.describe(id, i));
            }
            if let Some(m) = mtu {
                check_mtu(m)?;
            }
            w.new_link(id, name, "bridge", mtu.unwrap_or(1500), false);
            // In the container a bridge is the attachment's, as any link
            // made there; in the node it is shared and never is.
            if id == NsId::Container {
                w.ns[id.index()].created.push(name.into());
            }
            Ok(w.describe(id, w.ns[id.index()].links.len() - 1))
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
        self.macvlan("macvlan", name, master, mode, mtu, mac, target)
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
        self.macvlan("macvtap", name, master, mode, mtu, mac, target)
    }

    fn create_vlan(
        &self,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link> {
        if vlan_id > 4094 {
            return Err(NetError::Invalid(format!("vlan id {vlan_id}")));
        }
        self.upper("vlan", name, master, mtu, None, target, None, |l, m| {
            l.vlan_id = Some(vlan_id);
            l.mac.clone_from(&m.mac);
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
        self.upper("ipvlan", name, master, mtu, None, target, None, |l, m| {
            l.ipvlan_mode = Some(mode);
            l.mac.clone_from(&m.mac);
        })
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
            check_name(name)?;
            let mac = check_mac(mac)?;
            if let Some(m) = mtu {
                check_mtu(m)?;
            }
            if w.ns[id.index()].find(name).is_some() {
                return Err(NetError::Exists(format!("link {name:?}")));
            }
            w.new_link(id, name, "tun", mtu.unwrap_or(1500), false);
            let ns = &mut w.ns[id.index()];
            let i = ns.links.len() - 1;
            ns.links[i].tap = Some(TapInfo {
                multi_queue,
                owner,
                group,
            });
            if let Some(mac) = mac {
                ns.links[i].link.mac = mac;
            }
            ns.created.push(name.into());
            Ok(w.describe(id, i))
        })
    }

    fn link_by_name(&self, name: &str) -> NetResult<Link> {
        self.with("link_by_name", name, |w, id| {
            let i = w.link_pos(id, name)?;
            Ok(w.describe(id, i))
        })
    }

    fn link_by_index(&self, index: u32) -> NetResult<Link> {
        self.with("link_by_index", &index.to_string(), |w, id| {
            let i = w.ns[id.index()]
                .find_index(index)
                .ok_or_else(|| NetError::NotFound(format!("link index {index}")))?;
            Ok(w.describe(id, i))
        })
    }

    fn list_links(&self) -> NetResult<Vec<Link>> {
        self.with("list_links", "", |w, id| {
            Ok((0..w.ns[id.index()].links.len())
                .map(|i| w.describe(id, i))
                .collect())
        })
    }

    fn set_link(&self, name: &str, s: &LinkSettings) -> NetResult<Link> {
        self.with("set_link", name, |w, id| {
            let master = s.master.as_deref().unwrap_or("");
            w.ask(&Ask::set_link(id.side(), id.host(), name, master))?;
            let i = w.link_pos(id, name)?;
            let master = match s.master.as_deref() {
                None => None,
                Some("") => Some(None),
                Some(br) => {
                    let b = w.link_pos(id, br)?;
                    let bl = &w.ns[id.index()].links[b].link;
                    if bl.kind != "bridge" {
                        return Err(NetError::Invalid(format!("{br:?} is not a bridge")));
                    }
                    Some(Some(bl.index))
                }
            };
            let mac = check_mac(s.mac.as_deref())?;
            if let Some(m) = s.mtu {
                check_mtu(m)?;
            }
            let old_master = w.ns[id.index()].links[i].link.master;
            let l = &mut w.ns[id.index()].links[i];
            if let Some(m) = master {
                l.link.master = m;
                if m.is_none() {
                    l.hairpin = false;
                }
            }
            if let Some(h) = s.hairpin {
                if l.link.master.is_none() {
                    return Err(NetError::Kernel(
                        -95,
                        "hairpin needs a bridge master".into(),
                    ));
                }
                l.hairpin = h;
            }
            if let Some(v) = s.up {
                l.link.up = v;
            }
            if let Some(v) = s.mtu {
                l.link.mtu = v;
            }
            if let Some(v) = mac {
                l.link.mac = v;
                l.mac_set = true;
            }
            if let Some(v) = s.promisc {
                l.link.promisc = v;
            }
            if let Some(v) = s.allmulti {
                l.link.allmulti = v;
            }
            if let Some(v) = s.txqlen {
                l.link.txqlen = v;
            }
            let new_master = l.link.master;
            if let Some(old) = old_master.filter(|o| Some(*o) != new_master) {
                w.follow_ports(id, old);
            }
            if let Some(m) = new_master {
                w.follow_ports(id, m);
            }
            Ok(w.describe(id, i))
        })
    }

    fn delete_link(&self, name: &str) -> NetResult<()> {
        self.with("delete_link", name, |w, id| {
            w.ask(&[Ask::Delete(id.side(), id.host(), name)])?;
            let i = w.link_pos(id, name)?;
            w.remove_link(id, i);
            Ok(())
        })
    }

    fn add_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        self.with("add_address", cidr, |w, id| {
            let net = parse_cidr(cidr)
                .map_err(|_| NetError::Invalid(format!("invalid address {cidr:?}")))?;
            w.ask(&[Ask::Address(id.side(), id.host(), link, &net, true)])?;
            let i = w.link_pos(id, link)?;
            if w.ns[id.index()].links[i].addresses.contains(&net) {
                return Err(NetError::Exists(format!("address {cidr} on {link}")));
            }
            w.raw_address(id, link, cidr);
            Ok(())
        })
    }

    fn del_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        self.with("del_address", cidr, |w, id| {
            let net = parse_cidr(cidr)
                .map_err(|_| NetError::Invalid(format!("invalid address {cidr:?}")))?;
            w.ask(&[Ask::Address(id.side(), id.host(), link, &net, false)])?;
            let i = w.link_pos(id, link)?;
            let ns = &mut w.ns[id.index()];
            let before = ns.links[i].addresses.len();
            ns.links[i].addresses.retain(|a| *a != net);
            if ns.links[i].addresses.len() == before {
                return Err(NetError::NotFound(format!("address {cidr} on {link}")));
            }
            let network = net.trunc().to_string();
            let src = net.addr().to_string();
            ns.routes.retain(|r| {
                !(r.dst == network
                    && r.dev.as_deref() == Some(link)
                    && r.src.as_deref() == Some(src.as_str()))
            });
            Ok(())
        })
    }

    fn list_addresses(&self, link: &str) -> NetResult<Vec<String>> {
        self.with("list_addresses", link, |w, id| {
            let i = w.link_pos(id, link)?;
            Ok(w.ns[id.index()].links[i]
                .addresses
                .iter()
                .map(ToString::to_string)
                .collect())
        })
    }

    fn add_route(&self, route: &RouteSpec) -> NetResult<()> {
        self.with("add_route", &route.dst, |w, id| {
            let (dev, dst) = w.ask_route(id, route, true)?;
            w.link_pos(id, &dev)?;
            let gw = route
                .gw
                .as_deref()
                .map(|g| {
                    parse_ip(g).map_err(|_| NetError::Invalid(format!("invalid gateway {g:?}")))
                })
                .transpose()?;
            if let Some(gw) = &gw {
                if crate::ip::Family::of(gw) != dst.family() {
                    return Err(NetError::Invalid(
                        "gateway family differs from destination".into(),
                    ));
                }
                if route.scope != Some(scope::LINK) && !w.reachable(id, &dev, gw) {
                    return Err(NetError::Kernel(-101, "network is unreachable".into()));
                }
            }
            let table = route.table.unwrap_or(MAIN_TABLE);
            // The host's rule: same destination and priority in the table.
            let duplicate = w.ns[id.index()].routes.iter().any(|r| {
                r.dst == dst.trunc().to_string()
                    && r.table == Some(table)
                    && r.priority == route.priority
            });
            if duplicate {
                return Err(NetError::Exists(format!("route to {}", route.dst)));
            }
            let mut stored = route.clone();
            stored.dst = dst.trunc().to_string();
            stored.table = Some(table);
            stored.dev = Some(dev);
            stored.gw = gw.map(|g| g.to_string());
            w.ns[id.index()].routes.push(stored);
            Ok(())
        })
    }

    fn del_route(&self, route: &RouteSpec) -> NetResult<()> {
        self.with("del_route", &route.dst, |w, id| {
            let (_, dst) = w.ask_route(id, route, false)?;
            let ns = &mut w.ns[id.index()];
            let pos = ns
                .routes
                .iter()
                .position(|r| route_matches(r, route, &dst))
                .ok_or_else(|| NetError::NotFound(format!("route to {}", route.dst)))?;
            ns.routes.remove(pos);
            Ok(())
        })
    }

    fn list_routes(&self, link: &str, table: Option<u32>) -> NetResult<Vec<RouteSpec>> {
        self.with("list_routes", link, |w, id| {
            w.link_pos(id, link)?;
            let table = table.unwrap_or(MAIN_TABLE);
            Ok(w.ns[id.index()]
                .routes
                .iter()
                .filter(|r| r.dev.as_deref() == Some(link) && r.table == Some(table))
                .cloned()
                .collect())
        })
    }

    fn get_sysctl(&self, key: &str) -> NetResult<String> {
        self.with("get_sysctl", key, |w, id| {
            w.ask(&[Ask::Sysctl(id.side(), id.host(), key, false)])?;
            w.ns[id.index()]
                .sysctls
                .get(key)
                .cloned()
                .ok_or_else(|| NetError::NotFound(format!("sysctl {key}")))
        })
    }

    fn set_sysctl(&self, key: &str, value: &str) -> NetResult<()> {
        self.with("set_sysctl", key, |w, id| {
            w.ask(&[Ask::Sysctl(id.side(), id.host(), key, true)])?;
            let slot = w.ns[id.index()]
                .sysctls
                .get_mut(key)
                .ok_or_else(|| NetError::NotFound(format!("sysctl {key}")))?;
            *slot = value.trim().to_string();
            Ok(())
        })
    }

    fn create_ifb(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        self.with("create_ifb", name, |w, id| {
            w.ask(&[Ask::CreateIfb(id.side(), name)])?;
            check_name(name)?;
            if let Some(m) = mtu {
                check_mtu(m)?;
            }
            if w.ns[id.index()].find(name).is_some() {
                return Err(NetError::Exists(format!("link {name:?}")));
            }
            w.new_link(id, name, "ifb", mtu.unwrap_or(1500), true);
            let ns = &mut w.ns[id.index()];
            ns.created.push(name.to_string());
            Ok(ns.links[ns.links.len() - 1].link.clone())
        })
    }

    fn limit_rate(&self, link: &str, limit: RateLimit) -> NetResult<()> {
        self.with("limit_rate", link, |w, id| {
            w.ask(&[Ask::Shape(id.side(), id.host(), link)])?;
            if limit.rate == 0 || limit.burst == 0 {
                return Err(NetError::Invalid("rate and burst must be positive".into()));
            }
            let i = w.link_pos(id, link)?;
            w.ns[id.index()].links[i].rate_limit = Some(limit);
            Ok(())
        })
    }

    fn has_rate_limit(&self, link: &str, limit: RateLimit) -> NetResult<bool> {
        self.with("has_rate_limit", link, |w, id| {
            let i = w.link_pos(id, link)?;
            Ok(w.ns[id.index()].links[i].rate_limit == Some(limit))
        })
    }

    fn redirect_ingress(&self, link: &str, to: &str) -> NetResult<()> {
        self.with("redirect_ingress", link, |w, id| {
            w.ask(&[
                Ask::Shape(id.side(), id.host(), link),
                Ask::Shape(id.side(), id.host(), to),
            ])?;
            w.link_pos(id, to)?;
            let i = w.link_pos(id, link)?;
            let l = &mut w.ns[id.index()].links[i];
            if l.redirect.is_some() {
                return Err(NetError::Exists(format!("ingress qdisc on {link}")));
            }
            l.redirect = Some(to.to_string());
            Ok(())
        })
    }

    fn list_qdiscs(&self, link: &str) -> NetResult<Vec<Qdisc>> {
        self.with("list_qdiscs", link, |w, id| {
            let i = w.link_pos(id, link)?;
            let l = &w.ns[id.index()].links[i];
            let mut out = Vec::new();
            if let Some(r) = l.rate_limit {
                out.push(Qdisc {
                    kind: "tbf".into(),
                    handle: 0x1_0000,
                    parent: 0xffff_ffff,
                    tbf_rate: Some(r.rate / 8),
                    ..Qdisc::default()
                });
            }
            if l.redirect.is_some() {
                out.push(Qdisc {
                    kind: "ingress".into(),
                    handle: 0xffff_0000,
                    parent: 0xffff_fff1,
                    ..Qdisc::default()
                });
            }
            Ok(out)
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
            Err(NetError::Kernel(-101, _))
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
