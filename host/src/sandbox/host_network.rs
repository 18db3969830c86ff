//! `cni:plugin/network`: kernel operations on the plugin's behalf. Every
//! request goes through [`policy::Grants`] first; a refusal changes
//! nothing, is logged with the plugin's name, and reaches the plugin as
//! `net-error.refused`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use wasmtime::component::Resource;

use super::bindings::cni::plugin::network::{
    Address, Host, HostNetns, Link, LinkSettings, MacvlanMode as WitMode, NetError as WitError,
    RouteSpec,
};
use super::policy::{Grants, Side};
use super::state::Ctx;
use crate::log;
use crate::net::{self, IpNet, LinkChange, LinkInfo, MacvlanMode, Net, NetError, NsId, NsRef};

/// A namespace handle held in the store's resource table.
pub struct NetnsHandle {
    side: Side,
    id: NsId,
}

/// Links an attachment created, per side: shared by every step of the
/// chain and kept in the attachment record, so later calls (and GC) know
/// what belongs to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreatedLinks {
    pub node: BTreeSet<String>,
    pub container: BTreeSet<String>,
}

/// What a call may reach through the network import.
#[derive(Clone)]
pub struct NetAccess {
    pub backend: Arc<Mutex<Box<dyn Net>>>,
    /// CNI_NETNS, if the runtime passed one.
    pub container_path: Option<PathBuf>,
    pub ifname: String,
    /// Node links the plugin's config names (`bridge`, `master`).
    pub config_named: BTreeSet<String>,
    /// The config names no `master`: like the reference macvlan, the
    /// plugin may then use the node's default-route link as a macvlan or
    /// macvtap master (and for nothing else).
    pub default_master: bool,
    pub created: Arc<Mutex<CreatedLinks>>,
}

type R<T> = wasmtime::Result<Result<T, WitError>>;

fn to_wit(e: NetError) -> WitError {
    match e {
        NetError::Exists(m) => WitError::Exists(m),
        NetError::NotFound(m) => WitError::NotFound(m),
        NetError::Invalid(m) => WitError::Invalid(m),
        NetError::Kernel { errno, msg } => WitError::Kernel((errno, msg)),
    }
}

fn mode_from_wit(m: WitMode) -> MacvlanMode {
    match m {
        WitMode::Bridge => MacvlanMode::Bridge,
        WitMode::Private => MacvlanMode::Private,
        WitMode::Vepa => MacvlanMode::Vepa,
        WitMode::Passthru => MacvlanMode::Passthru,
    }
}

fn link_to_wit(l: LinkInfo) -> Link {
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
            MacvlanMode::Bridge => WitMode::Bridge,
            MacvlanMode::Private => WitMode::Private,
            MacvlanMode::Vepa => WitMode::Vepa,
            MacvlanMode::Passthru => WitMode::Passthru,
        }),
    }
}

fn parse_ip(s: &str, what: &str) -> Result<IpAddr, NetError> {
    s.parse()
        .map_err(|_| NetError::Invalid(format!("{what}: {s:?} is not an IP address")))
}

fn route_from_wit(r: &RouteSpec) -> Result<net::Route, NetError> {
    Ok(net::Route {
        dst: r.dst.parse()?,
        gw: r.gw.as_deref().map(|g| parse_ip(g, "gw")).transpose()?,
        dev: r.dev.clone(),
        src: r.src.as_deref().map(|s| parse_ip(s, "src")).transpose()?,
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    })
}

fn route_to_wit(r: net::Route) -> RouteSpec {
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

/// A policy question asked before acting.
enum Ask<'a> {
    Read,
    Create(Side, &'a str),
    Change(Side, &'a str),
    /// Use as a bridge master.
    Enslave(Side, &'a str),
    Delete(Side, &'a str),
    Sysctl(Side, &'a str, bool),
}

impl Ctx {
    /// Log a refusal with the plugin's name and build the error it gets.
    fn refuse(&self, why: String) -> WitError {
        log::warn(format_args!("plugin {}: refused: {why}", self.plugin));
        WitError::Refused(why)
    }

    fn access(&self) -> Result<&NetAccess, WitError> {
        self.net.as_ref().ok_or_else(|| {
            WitError::Refused("this plugin has no network access in this call".into())
        })
    }

    fn handle(&self, r: &Resource<NetnsHandle>) -> wasmtime::Result<(Side, NsId)> {
        let h = self.table.get(r)?;
        Ok((h.side, h.id))
    }

    fn grants(&self, access: &NetAccess) -> Grants {
        let created = access.created.lock().map(|c| c.clone()).unwrap_or_default();
        Grants {
            ifname: access.ifname.clone(),
            config_named: access.config_named.clone(),
            created_node: created.node,
            created_container: created.container,
        }
    }

    /// Ask the policy each question, then run `op` on the backend.
    fn act<T>(
        &mut self,
        asks: &[Ask<'_>],
        op: impl FnOnce(&mut dyn Net) -> Result<T, NetError>,
    ) -> R<T> {
        self.charge()?;
        let access = match self.access() {
            Ok(a) => a.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let grants = self.grants(&access);
        for ask in asks {
            let verdict = match *ask {
                Ask::Read => Ok(()),
                Ask::Create(side, n) => grants.create(side, n),
                Ask::Change(side, n) => grants.change(side, n),
                Ask::Enslave(side, n) => grants.enslave(side, n),
                Ask::Delete(side, n) => grants.delete(side, n),
                Ask::Sysctl(side, k, write) => grants.sysctl(side, k, write),
            };
            if let Err(why) = verdict {
                return Ok(Err(self.refuse(why)));
            }
        }
        let mut backend = match access.backend.lock() {
            Ok(b) => b,
            Err(_) => return Err(wasmtime::Error::msg("network backend poisoned")),
        };
        Ok(op(backend.as_mut()).map_err(to_wit))
    }

    fn record_created(&self, side: Side, name: &str) {
        if let Some(a) = &self.net {
            if let Ok(mut c) = a.created.lock() {
                match side {
                    Side::Node => c.node.insert(name.to_string()),
                    Side::Container => c.container.insert(name.to_string()),
                };
            }
        }
    }

    fn forget_created(&self, side: Side, name: &str) {
        if let Some(a) = &self.net {
            if let Ok(mut c) = a.created.lock() {
                match side {
                    Side::Node => c.node.remove(name),
                    Side::Container => c.container.remove(name),
                };
            }
        }
    }

    fn open_ns(&mut self, side: Side) -> R<Resource<NetnsHandle>> {
        self.charge()?;
        let access = match self.access() {
            Ok(a) => a.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let opened = {
            let mut net = match access.backend.lock() {
                Ok(b) => b,
                Err(_) => return Err(wasmtime::Error::msg("network backend poisoned")),
            };
            let node = net.open(NsRef::Current);
            match side {
                Side::Node => node,
                Side::Container => match &access.container_path {
                    None => Err(NetError::NotFound(
                        "the runtime passed no container namespace".into(),
                    )),
                    Some(path) => node.and_then(|node| {
                        let id = net.open(NsRef::Path(path))?;
                        if net.same_ns(id, node) {
                            // A runtime bug or a hostile config: never let
                            // "container" operations land on the node.
                            Err(NetError::Invalid(format!(
                                "{} is the node's own namespace",
                                path.display()
                            )))
                        } else {
                            Ok(id)
                        }
                    }),
                },
            }
        };
        match opened {
            Ok(id) => Ok(Ok(self.table.push(NetnsHandle { side, id })?)),
            Err(NetError::Invalid(why)) => Ok(Err(self.refuse(why))),
            Err(e) => Ok(Err(to_wit(e))),
        }
    }
}

impl Host for Ctx {
    fn container_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.open_ns(Side::Container)
    }

    fn node_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.open_ns(Side::Node)
    }
}

impl HostNetns for Ctx {
    fn create_veth(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        peer_name: String,
        peer_ns: Resource<NetnsHandle>,
        mtu: Option<u32>,
        mac: Option<String>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let (peer_side, peer_id) = self.handle(&peer_ns)?;
        let asks = [Ask::Create(side, &name), Ask::Create(peer_side, &peer_name)];
        let out = self.act(&asks, |net| {
            net.create_veth(id, &name, &peer_name, peer_id, mtu, mac.as_deref())
        })?;
        if out.is_ok() {
            self.record_created(side, &name);
            self.record_created(peer_side, &peer_name);
        }
        Ok(out.map(link_to_wit))
    }

    fn ensure_bridge(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        mtu: Option<u32>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        // In the node a bridge is shared by attachments: only the one the
        // config names (or one of the attachment's own), never recorded as
        // this attachment's. In the container it is a link like any other:
        // only CNI_IFNAME, and recorded, so that nothing the attachment
        // made there is unaccounted for.
        let ask = match side {
            Side::Node => Ask::Change(side, &name),
            Side::Container => Ask::Create(side, &name),
        };
        let out = self.act(&[ask], |net| net.ensure_bridge(id, &name, mtu))?;
        if out.is_ok() && side == Side::Container {
            self.record_created(side, &name);
        }
        Ok(out.map(link_to_wit))
    }

    fn create_macvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.macvlan(ns, name, master, mode, mtu, mac, target, false)
    }

    fn create_macvtap(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.macvlan(ns, name, master, mode, mtu, mac, target, true)
    }

    fn create_tap(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        mtu: Option<u32>,
        mac: Option<String>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let out = self.act(&[Ask::Create(side, &name)], |net| {
            net.create_tap(id, &name, mtu, mac.as_deref(), multi_queue, owner, group)
        })?;
        if out.is_ok() {
            self.record_created(side, &name);
        }
        Ok(out.map(link_to_wit))
    }

    fn link_by_name(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        Ok(self
            .act(&[Ask::Read], |net| net.link_by_name(id, &name))?
            .map(link_to_wit))
    }

    fn link_by_index(&mut self, ns: Resource<NetnsHandle>, index: u32) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        Ok(self
            .act(&[Ask::Read], |net| net.link_by_index(id, index))?
            .map(link_to_wit))
    }

    fn list_links(&mut self, ns: Resource<NetnsHandle>) -> R<Vec<Link>> {
        let (_, id) = self.handle(&ns)?;
        Ok(self
            .act(&[Ask::Read], |net| net.links(id))?
            .map(|v| v.into_iter().map(link_to_wit).collect()))
    }

    fn set_link(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        settings: LinkSettings,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let master = settings.master.clone().unwrap_or_default();
        let mut asks = vec![Ask::Change(side, &name)];
        if !master.is_empty() {
            asks.push(Ask::Enslave(side, &master));
        }
        let change = LinkChange {
            up: settings.up,
            mtu: settings.mtu,
            mac: settings.mac,
            master: settings.master,
            promisc: settings.promisc,
            allmulti: settings.allmulti,
            txqlen: settings.txqlen,
            hairpin: settings.hairpin,
        };
        Ok(self
            .act(&asks, |net| net.set_link(id, &name, &change))?
            .map(link_to_wit))
    }

    fn delete_link(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let out = self.act(&[Ask::Delete(side, &name)], |net| {
            net.delete_link(id, &name)
        })?;
        if out.is_ok() || matches!(out, Err(WitError::NotFound(_))) {
            self.forget_created(side, &name);
        }
        Ok(out)
    }

    fn add_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Change(side, &link)], |net| {
            net.add_address(id, &link, &address.cidr.parse::<IpNet>()?)
        })
    }

    fn del_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Change(side, &link)], |net| {
            net.del_address(id, &link, &address.cidr.parse::<IpNet>()?)
        })
    }

    fn list_addresses(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<Address>> {
        let (_, id) = self.handle(&ns)?;
        Ok(self
            .act(&[Ask::Read], |net| net.addresses(id, &link))?
            .map(|v| {
                v.into_iter()
                    .map(|a| Address {
                        cidr: a.to_string(),
                    })
                    .collect()
            }))
    }

    fn add_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        self.route(ns, route, true)
    }

    fn del_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        self.route(ns, route, false)
    }

    fn list_routes(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        table: Option<u32>,
    ) -> R<Vec<RouteSpec>> {
        let (_, id) = self.handle(&ns)?;
        Ok(self
            .act(&[Ask::Read], |net| net.routes(id, &link, table))?
            .map(|v| v.into_iter().map(route_to_wit).collect()))
    }

    fn get_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String) -> R<String> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, &key, false)], |net| {
            net.sysctl_get(id, &key)
        })
    }

    fn set_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String, value: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, &key, true)], |net| {
            net.sysctl_set(id, &key, &value)
        })
    }

    fn drop(&mut self, ns: Resource<NetnsHandle>) -> wasmtime::Result<()> {
        self.table.delete(ns)?;
        Ok(())
    }
}

impl Ctx {
    #[allow(clippy::too_many_arguments)]
    fn macvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
        tap: bool,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let (target_side, target_id) = self.handle(&target)?;
        // The master is the plugin's to use only if its config names it, or
        // it is the default-route link and the config names none.
        let named = self
            .access()
            .map(|a| self.grants(a).change(side, &master).is_ok())
            .unwrap_or(false);
        let default_ok = !named && side == Side::Node && self.is_default_master(id, &master);
        let mut asks = vec![Ask::Create(target_side, &name)];
        if !default_ok {
            asks.push(Ask::Change(side, &master));
        }
        let out = self.act(&asks, |net| {
            net.create_macvlan(
                id,
                &name,
                &master,
                mode_from_wit(mode),
                mtu,
                mac.as_deref(),
                target_id,
                tap,
            )
        })?;
        if out.is_ok() {
            self.record_created(target_side, &name);
        }
        Ok(out.map(link_to_wit))
    }

    /// Whether the config lets `master` be used by default: it names no
    /// master and `master` carries the node's default route.
    fn is_default_master(&self, node: NsId, master: &str) -> bool {
        let Some(access) = &self.net else {
            return false;
        };
        if !access.default_master {
            return false;
        }
        let Ok(mut net) = access.backend.lock() else {
            return false;
        };
        net.routes(node, master, None)
            .map(|routes| routes.iter().any(|r| r.dst.prefix == 0))
            .unwrap_or(false)
    }

    fn route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec, add: bool) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let Some(dev) = route.dev.clone() else {
            self.charge()?;
            return Ok(Err(self.refuse("a route must name its device".into())));
        };
        self.act(&[Ask::Change(side, &dev)], |net| {
            let r = route_from_wit(&route)?;
            if add {
                net.add_route(id, &r)
            } else {
                net.del_route(id, &r)
            }
        })
    }
}
