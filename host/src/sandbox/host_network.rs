//! `cni:plugin/network`: kernel operations on the plugin's behalf. Every
//! request goes through [`policy::Grants`] first; a refusal changes
//! nothing, is logged with the plugin's name, and reaches the plugin as
//! `net-error.refused`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::Resource;

use super::bindings::cni::plugin::network::{
    Address, Host, HostNetns, IpvlanMode as WitIpvlanMode, Link, LinkSettings,
    MacvlanMode as WitMode, NetError as WitError, Qdisc as WitQdisc, RateLimit as WitRateLimit,
    RouteSpec,
};
use super::fail::NetFail;
use super::live;
use super::policy::{describe, Ask, Basis, ConfigGrants, Grants, PortGrant, Side};
use super::state::Ctx;
use crate::cni::Command;
use crate::filter::{Filter, Rule, Tag};
use crate::log;
use crate::net::{
    self, IpNet, IpvlanMode, LinkChange, LinkId, LinkInfo, MacvlanMode, Net, NetError, NsId, NsRef,
    RateLimit,
};

/// A namespace handle held in the store's resource table.
pub struct NetnsHandle {
    side: Side,
    id: NsId,
}

/// Links an attachment created, per side, by name with their identity:
/// shared by every step of the chain and kept in the attachment record, so
/// later calls (and GC) know what belongs to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreatedLinks {
    pub node: BTreeMap<String, LinkId>,
    pub container: BTreeMap<String, LinkId>,
}

impl CreatedLinks {
    pub fn side(&self, side: Side) -> &BTreeMap<String, LinkId> {
        match side {
            Side::Node => &self.node,
            Side::Container => &self.container,
        }
    }

    pub fn side_mut(&mut self, side: Side) -> &mut BTreeMap<String, LinkId> {
        match side {
            Side::Node => &mut self.node,
            Side::Container => &mut self.container,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.node.is_empty() && self.container.is_empty()
    }
}

/// How to take back one change a plugin made during ADD.
#[derive(Debug, Clone, PartialEq)]
pub enum Undo {
    /// Delete the address if `added`, else add it back.
    Address {
        link: String,
        addr: IpNet,
        added: bool,
    },
    /// Delete the route if `added`, else add it back.
    Route { route: net::Route, added: bool },
    /// Write `old` back, if the key still holds `new`.
    Sysctl {
        key: String,
        old: String,
        new: String,
    },
    /// Apply `restore` (the settings before) if the link is still the one
    /// that was changed.
    Link {
        name: String,
        index: u32,
        restore: LinkChange,
    },
    /// Delete the bridge `ensure-bridge` created, if it is still that
    /// bridge and has no ports.
    Bridge { name: String, id: LinkId },
}

/// One change an ADD made to something it did not create (changes to its
/// own links go with the links).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub side: Side,
    /// In the node namespace, on a link the config names or a node-wide
    /// switch: other attachments may depend on it.
    pub shared: bool,
    pub undo: Undo,
}

/// The running account of one attachment's effects, across the steps of
/// its chain.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub created: CreatedLinks,
    /// What the ADD changed, in order (empty for other verbs).
    pub changes: Vec<Change>,
    /// Networks of the attachment's own addresses: what its IPAM handed out
    /// during this ADD, and what the runtime's prevResult carried.
    pub own_nets: Vec<IpNet>,
    /// Filter rules this ADD added (those a retried ADD found in place are
    /// not listed): what a failed ADD removes.
    pub filter_added: Vec<Rule>,
    /// What this verb made, against [`super::limits::caps`].
    pub made: Made,
}

/// Counts of what one verb of an attachment made, for its caps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Made {
    pub links: usize,
    pub node_addresses_and_routes: usize,
    pub tc: usize,
}

impl Made {
    /// What the questions `asks` would add.
    fn of(asks: &[Ask<'_>]) -> Made {
        let mut m = Made::default();
        for a in asks {
            match a {
                Ask::Create(..)
                | Ask::CreateTap(..)
                | Ask::CreateMacvlan(..)
                | Ask::CreateStacked(..)
                | Ask::CreateIfb(..) => m.links += 1,
                Ask::Address(Side::Node, _, _, _, true) | Ask::Route(Side::Node, .., true) => {
                    m.node_addresses_and_routes += 1
                }
                Ask::Shape(..) => m.tc += 1,
                _ => {}
            }
        }
        m
    }

    /// Why `self` plus `more` is over a cap, if it is.
    fn over(&self, more: &Made) -> Option<String> {
        use super::limits::caps;
        let checks = [
            (self.links + more.links, caps::LINKS, "links"),
            (
                self.node_addresses_and_routes + more.node_addresses_and_routes,
                caps::NODE_ADDRESSES_AND_ROUTES,
                "addresses and routes in the node namespace",
            ),
            (self.tc + more.tc, caps::TC, "traffic-control objects"),
        ];
        checks
            .iter()
            .find(|(n, cap, _)| n > cap)
            .map(|(_, cap, what)| {
                format!(
                    "an attachment may make at most {cap} {what} (the host's cap per attachment)"
                )
            })
    }

    fn add(&mut self, more: &Made) {
        self.links += more.links;
        self.node_addresses_and_routes += more.node_addresses_and_routes;
        self.tc += more.tc;
    }
}

/// Told the created links whenever they change during ADD, so that the
/// executor can persist them before the ADD ends (a crash then leaves a
/// record of what to clean up).
pub type OnCreated = Arc<dyn Fn(&CreatedLinks) + Send + Sync>;

/// What a call may reach through the network import.
#[derive(Clone)]
pub struct NetAccess {
    pub backend: Arc<Mutex<Box<dyn Net>>>,
    /// CNI_NETNS, if the runtime passed one.
    pub container_path: Option<PathBuf>,
    pub ifname: String,
    pub command: Command,
    pub config: ConfigGrants,
    pub ledger: Arc<Mutex<Ledger>>,
    pub on_created: Option<OnCreated>,
    /// `runtimeConfig.portMappings` of the plugin's config.
    pub ports: Vec<PortGrant>,
    /// Packet filtering, for interface and meta plugins.
    pub filter: Option<FilterAccess>,
}

/// Names the attachment a tag belongs to, for errors (`container X ifname
/// Y of network Z`), if the host still has its record.
pub type Holder = Arc<dyn Fn(&Tag) -> Option<String> + Send + Sync>;

/// What the `filter` import works with.
#[derive(Clone)]
pub struct FilterAccess {
    pub backend: Arc<Mutex<Box<dyn Filter>>>,
    /// The attachment's owner tag, written into every rule.
    pub tag: Tag,
    pub holder: Holder,
}

type R<T> = Result<T, NetFail>;

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
        vlan_id: l.vlan_id,
        ipvlan_mode: l.ipvlan_mode.map(|m| match m {
            IpvlanMode::L2 => WitIpvlanMode::L2,
            IpvlanMode::L3 => WitIpvlanMode::L3,
            IpvlanMode::L3s => WitIpvlanMode::L3s,
        }),
    }
}

fn parse_ip(s: &str, what: &str) -> Result<IpAddr, NetError> {
    s.parse()
        .map_err(|_| NetError::Invalid(format!("{what}: {s:?} is not an IP address")))
}

fn route_from_wit(r: &RouteSpec) -> Result<net::Route, NetError> {
    Ok(net::Route {
        dst: net::parse_cidr(&r.dst)?,
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

/// What an allowed operation learns before acting: whether to journal a
/// change (an ADD changing something it did not create), and where. One
/// entry per question asked, in order; the first names what the operation
/// changes.
#[derive(Debug, Clone, Default)]
struct Journal {
    asks: Vec<Option<(Side, bool)>>,
}

impl Journal {
    /// The change to record for the operation's own target, if any.
    fn change(&self, undo: Undo) -> Option<Change> {
        self.change_of(0, undo)
    }

    /// The change to record for what question `i` was about, if any.
    fn change_of(&self, i: usize, undo: Undo) -> Option<Change> {
        let (side, on) = (*self.asks.get(i)?)?;
        on.then_some(Change {
            side,
            // The node's links a config names are shared by attachments.
            shared: side == Side::Node,
            undo,
        })
    }

    /// Whether the operation's target is journaled.
    fn on(&self) -> bool {
        self.on_at(0)
    }

    /// Whether what question `i` was about is journaled.
    fn on_at(&self, i: usize) -> bool {
        matches!(self.asks.get(i), Some(Some((_, true))))
    }
}

impl Ctx {
    /// Log a refusal with the plugin's name and build the error it gets.
    pub(super) fn refuse(&self, why: String) -> WitError {
        log::warn(format_args!("plugin {}: refused: {why}", self.plugin));
        WitError::Refused(why)
    }

    pub(super) fn access(&self) -> Result<&NetAccess, WitError> {
        self.net.as_ref().ok_or_else(|| {
            WitError::Refused("this plugin has no network access in this call".into())
        })
    }

    fn handle(&self, r: &Resource<NetnsHandle>) -> wasmtime::Result<(Side, NsId)> {
        let h = self.table.get(r)?;
        Ok((h.side, h.id))
    }

    pub(super) fn grants(&self, access: &NetAccess) -> Grants {
        let ledger = access.ledger.lock().map(|l| l.clone()).unwrap_or_default();
        Grants {
            command: access.command,
            ifname: access.ifname.clone(),
            config: access.config.clone(),
            created_node: ledger.created.node,
            created_container: ledger.created.container,
            own_nets: ledger.own_nets,
            ports: access.ports.clone(),
        }
    }

    /// Ask the policy each question (checking every grant that rests on a
    /// link the attachment created against the live link), then run `op`
    /// on the backend. `op` gets how to journal its change and returns it.
    fn act<T>(
        &mut self,
        asks: &[Ask<'_>],
        op: impl FnOnce(&mut dyn Net, &Journal) -> Result<(T, Vec<Change>), NetError>,
    ) -> R<T> {
        self.charge()?;
        if asks.iter().any(|a| !matches!(a, Ask::Read)) {
            self.acted = true;
        }
        let access = self.access()?.clone();
        let grants = self.grants(&access);
        let mut backend = match access.backend.lock() {
            Ok(b) => b,
            Err(_) => return Err(wasmtime::Error::msg("network backend poisoned").into()),
        };
        let mut journal = Journal::default();
        for ask in asks {
            let basis = match ask.verdict(&grants) {
                Ok(b) => b,
                // Deleting what is not there is "not found", whoever asks: a
                // second DEL that deletes its link by name (the attachment,
                // and with it the grant, is gone) sees what it can handle.
                // Listing links tells the same, so nothing leaks.
                Err(why) => match ask {
                    Ask::Delete(_, ns, name)
                        if matches!(
                            backend.link_by_name(*ns, name),
                            Err(NetError::NotFound(_))
                        ) =>
                    {
                        return Err(WitError::NotFound(format!("link {name:?}")).into())
                    }
                    _ => {
                        self.record("netlink", || why.clone(), Instant::now(), true);
                        return Err(self.refuse(why).into());
                    }
                },
            };
            let place = ask.place();
            if let (Basis::Created(name, id), Some((side, ns))) = (&basis, place) {
                let key = (side, ns, name.clone(), id.index);
                if !self.verified.contains(&key) {
                    if let Err(e) = verify_created(backend.as_mut(), &access, side, ns, name, id) {
                        log::warn(format_args!("plugin {}: {e}", self.plugin));
                        return Err(to_wit(e).into());
                    }
                    // Checked once per call: the plugin's own deletes clear
                    // this (a veth takes its peer along).
                    self.verified.insert(key);
                }
            }
            let add = access.command == Command::Add;
            journal
                .asks
                .push(place.map(|(side, _)| (side, add && basis == Basis::Granted)));
        }
        // Within the attachment's caps, counted before acting: a refused
        // request changes nothing.
        let more = Made::of(asks);
        let made = access.ledger.lock().map(|l| l.made).unwrap_or_default();
        if let Some(why) = made.over(&more) {
            let why = format!("{}: {why}", describe(asks));
            self.record("netlink", || why.clone(), Instant::now(), true);
            return Err(self.refuse(why).into());
        }
        if self.inject(|| describe(asks)) {
            return Err(WitError::Kernel((
                super::faults::ENOMEM,
                "Cannot allocate memory (injected)".into(),
            ))
            .into());
        }
        let started = Instant::now();
        let done = op(backend.as_mut(), &journal);
        self.record(
            "netlink",
            || describe(asks).trim_start_matches("network ").to_string(),
            started,
            false,
        );
        match done {
            Ok((value, changes)) => {
                if let Ok(mut l) = access.ledger.lock() {
                    l.changes.extend(changes);
                    l.made.add(&more);
                }
                Ok(value)
            }
            Err(e) => Err(to_wit(e).into()),
        }
    }

    /// Record a link this call created, by name and identity.
    fn record_created(&self, side: Side, link: &LinkInfo) {
        self.update_created(|c| {
            c.side_mut(side).insert(link.name.clone(), link.id());
        });
    }

    fn forget_created(&self, side: Side, name: &str) {
        self.update_created(|c| {
            c.side_mut(side).remove(name);
        });
    }

    fn update_created(&self, f: impl FnOnce(&mut CreatedLinks)) {
        let Some(a) = &self.net else { return };
        let created = match a.ledger.lock() {
            Ok(mut l) => {
                f(&mut l.created);
                l.created.clone()
            }
            Err(_) => return,
        };
        if let Some(persist) = &a.on_created {
            persist(&created);
        }
    }

    fn open_ns(&mut self, side: Side) -> R<Resource<NetnsHandle>> {
        self.charge()?;
        let access = self.access()?.clone();
        let opened = {
            let mut net = match access.backend.lock() {
                Ok(b) => b,
                Err(_) => return Err(wasmtime::Error::msg("network backend poisoned").into()),
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
            Ok(id) => Ok(self
                .table
                .push(NetnsHandle { side, id })
                .map_err(wasmtime::Error::from)?),
            Err(NetError::Invalid(why)) => Err(self.refuse(why).into()),
            Err(e) => Err(to_wit(e).into()),
        }
    }
}

/// [`live::verify_created`], forgetting a link that is no longer the
/// attachment's.
pub(super) fn verify_created(
    net: &mut dyn Net,
    access: &NetAccess,
    side: Side,
    ns: NsId,
    name: &str,
    id: &LinkId,
) -> Result<(), NetError> {
    let live = live::verify_created(net, side, ns, name, id);
    if let Err(NetError::NotFound(_)) = &live {
        if let Ok(mut l) = access.ledger.lock() {
            l.created.side_mut(side).remove(name);
        }
    }
    live
}

/// `new` asks for a value other than `old`.
fn differs<T: PartialEq>(new: &Option<T>, old: &T) -> bool {
    new.as_ref().is_some_and(|n| n != old)
}

/// The settings `change` would alter on `before`, as they are: what puts
/// the link back. Hairpin cannot be read back and is left out (it applies
/// to bridge ports, which are the attachment's own veths).
fn restore_of(net: &mut dyn Net, ns: NsId, before: &LinkInfo, change: &LinkChange) -> LinkChange {
    let master_name = |net: &mut dyn Net, m: Option<u32>| match m {
        Some(i) => net.link_by_index(ns, i).map(|l| l.name).unwrap_or_default(),
        None => String::new(),
    };
    LinkChange {
        up: differs(&change.up, &before.up).then_some(before.up),
        mtu: differs(&change.mtu, &before.mtu).then_some(before.mtu),
        mac: change
            .mac
            .as_ref()
            .filter(|m| !m.eq_ignore_ascii_case(&before.mac) && !before.mac.is_empty())
            .map(|_| before.mac.clone()),
        master: change
            .master
            .as_ref()
            .map(|_| master_name(net, before.master)),
        promisc: differs(&change.promisc, &before.promisc).then_some(before.promisc),
        allmulti: differs(&change.allmulti, &before.allmulti).then_some(before.allmulti),
        txqlen: differs(&change.txqlen, &before.txqlen).then_some(before.txqlen),
        hairpin: None,
    }
}

impl Host for Ctx {
    fn convert_net_error(&mut self, e: NetFail) -> wasmtime::Result<WitError> {
        e.into_wit()
    }

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
        let out = self.act(&asks, |net, _| {
            let link = net.create_veth(id, &name, &peer_name, peer_id, mtu, mac.as_deref())?;
            let peer = net.link_by_name(peer_id, &peer_name);
            Ok(((link, peer), Vec::new()))
        });
        out.map(|(link, peer)| {
            // Both ends in one update (one write of the pending record).
            self.update_created(|c| {
                c.side_mut(side).insert(link.name.clone(), link.id());
                match &peer {
                    Ok(peer) => {
                        c.side_mut(peer_side).insert(peer.name.clone(), peer.id());
                    }
                    // Created a moment ago: only a concurrent delete explains
                    // this, and then there is nothing left to own.
                    Err(e) => log::warn(format_args!("veth peer {peer_name} vanished: {e}")),
                }
            });
            link_to_wit(link)
        })
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
        // made there is unaccounted for. Either way, during ADD only.
        let asks = Ask::ensure_bridge(side, id, &name);
        let out = match side {
            Side::Node => self.act(&asks, |net, journal| {
                let existed = net.link_by_name(id, &name).is_ok();
                let bridge = net.ensure_bridge(id, &name, mtu)?;
                let undo = match existed {
                    true => None,
                    false => journal.change(Undo::Bridge {
                        name: name.clone(),
                        id: bridge.id(),
                    }),
                };
                Ok((bridge, undo.into_iter().collect()))
            }),
            Side::Container => {
                let out = self.act(&asks, |net, _| {
                    Ok((net.ensure_bridge(id, &name, mtu)?, Vec::new()))
                });
                if let Ok(link) = &out {
                    self.record_created(side, link);
                }
                out
            }
        };
        out.map(link_to_wit)
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

    fn create_vlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        vlan_id: u16,
        mtu: Option<u32>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.upper(ns, &name, &master, target, Upper::Vlan, |net, at, to| {
            net.create_vlan(at, &name, &master, vlan_id, mtu, to)
        })
    }

    fn create_ipvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitIpvlanMode,
        mtu: Option<u32>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        let mode = match mode {
            WitIpvlanMode::L2 => IpvlanMode::L2,
            WitIpvlanMode::L3 => IpvlanMode::L3,
            WitIpvlanMode::L3s => IpvlanMode::L3s,
        };
        self.upper(ns, &name, &master, target, Upper::Ipvlan, |net, at, to| {
            net.create_ipvlan(at, &name, &master, mode, mtu, to)
        })
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
        let out = self.act(&[Ask::CreateTap(side, &name, owner, group)], |net, _| {
            let link = net.create_tap(id, &name, mtu, mac.as_deref(), multi_queue, owner, group)?;
            Ok((link, Vec::new()))
        });
        if let Ok(link) = &out {
            self.record_created(side, link);
        }
        out.map(link_to_wit)
    }

    fn link_by_name(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.link_by_name(id, &name)?, Vec::new()))
        })
        .map(link_to_wit)
    }

    fn link_by_index(&mut self, ns: Resource<NetnsHandle>, index: u32) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.link_by_index(id, index)?, Vec::new()))
        })
        .map(link_to_wit)
    }

    fn list_links(&mut self, ns: Resource<NetnsHandle>) -> R<Vec<Link>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| Ok((net.links(id)?, Vec::new())))
            .map(|v| v.into_iter().map(link_to_wit).collect())
    }

    fn set_link(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        settings: LinkSettings,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let master = settings.master.clone().unwrap_or_default();
        let asks = Ask::set_link(side, id, &name, &master);
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
        self.act(&asks, |net, journal| {
            let restore = match journal.on() {
                true => {
                    let before = net.link_by_name(id, &name)?;
                    Some((before.index, restore_of(net, id, &before, &change)))
                }
                false => None,
            };
            // A bridge without a MAC of its own takes its ports': when
            // the port goes, the bridge's MAC must come back too.
            let bridge = match journal.on_at(1) {
                true => net.link_by_name(id, &master).ok(),
                false => None,
            };
            let after = net.set_link(id, &name, &change)?;
            let mut undo: Vec<Change> = bridge
                .filter(|b| {
                    b.mac
                        != net
                            .link_by_index(id, b.index)
                            .map(|l| l.mac)
                            .unwrap_or_default()
                })
                .and_then(|b| {
                    journal.change_of(
                        1,
                        Undo::Link {
                            name: b.name,
                            index: b.index,
                            restore: LinkChange {
                                mac: Some(b.mac),
                                ..LinkChange::default()
                            },
                        },
                    )
                })
                .into_iter()
                .collect();
            undo.extend(
                restore
                    .filter(|(_, r)| *r != LinkChange::default())
                    .and_then(|(index, restore)| {
                        journal.change(Undo::Link {
                            name: name.clone(),
                            index,
                            restore,
                        })
                    }),
            );
            Ok((after, undo))
        })
        .map(link_to_wit)
    }

    fn delete_link(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let out = self.act(&[Ask::Delete(side, id, &name)], |net, _| {
            Ok((net.delete_link(id, &name)?, Vec::new()))
        });
        self.verified.clear();
        if out.is_ok() || matches!(out, Err(NetFail::Plugin(WitError::NotFound(_)))) {
            self.forget_created(side, &name);
        }
        out
    }

    fn add_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        self.address(ns, link, address, true)
    }

    fn del_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        self.address(ns, link, address, false)
    }

    fn list_addresses(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<Address>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.addresses(id, &link)?, Vec::new()))
        })
        .map(|v| {
            v.into_iter()
                .map(|a| Address {
                    cidr: a.to_string(),
                })
                .collect()
        })
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
        self.act(&[Ask::Read], |net, _| {
            Ok((net.routes(id, &link, table)?, Vec::new()))
        })
        .map(|v| v.into_iter().map(route_to_wit).collect())
    }

    fn get_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String) -> R<String> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, id, &key, false)], |net, _| {
            Ok((net.sysctl_get(id, &key)?, Vec::new()))
        })
    }

    fn set_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String, value: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, id, &key, true)], |net, journal| {
            let old = match journal.on() {
                true => Some(net.sysctl_get(id, &key)?),
                false => None,
            };
            net.sysctl_set(id, &key, &value)?;
            let undo = old.filter(|old| *old != value.trim()).and_then(|old| {
                journal.change(Undo::Sysctl {
                    key: key.clone(),
                    old,
                    new: value.trim().to_string(),
                })
            });
            Ok(((), undo.into_iter().collect()))
        })
    }

    fn create_ifb(&mut self, ns: Resource<NetnsHandle>, name: String, mtu: Option<u32>) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let out = self.act(&[Ask::CreateIfb(side, &name)], |net, _| {
            Ok((net.create_ifb(id, &name, mtu)?, Vec::new()))
        });
        if let Ok(link) = &out {
            self.record_created(side, link);
        }
        out.map(link_to_wit)
    }

    fn limit_rate(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        limit: WitRateLimit,
    ) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let limit = RateLimit {
            rate: limit.rate,
            burst: limit.burst,
        };
        self.act(&[Ask::Shape(side, id, &link)], |net, _| {
            Ok((net.set_rate_limit(id, &link, &limit)?, Vec::new()))
        })
    }

    fn has_rate_limit(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        limit: WitRateLimit,
    ) -> R<bool> {
        let (_, id) = self.handle(&ns)?;
        let limit = RateLimit {
            rate: limit.rate,
            burst: limit.burst,
        };
        self.act(&[Ask::Read], |net, _| {
            let want = limit.tbf(net.ticks_per_us())?;
            let root = net
                .qdiscs(id, &link)?
                .into_iter()
                .find(|q| q.parent == net::TC_H_ROOT);
            Ok((
                root.is_some_and(|q| q.kind == "tbf" && q.tbf == Some(want)),
                Vec::new(),
            ))
        })
    }

    fn redirect_ingress(&mut self, ns: Resource<NetnsHandle>, link: String, to: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(
            &[Ask::Shape(side, id, &link), Ask::Shape(side, id, &to)],
            |net, _| Ok((net.redirect_ingress(id, &link, &to)?, Vec::new())),
        )
    }

    fn list_qdiscs(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<WitQdisc>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.qdiscs(id, &link)?, Vec::new()))
        })
        .map(|qs| {
            qs.into_iter()
                .map(|q| WitQdisc {
                    kind: q.kind,
                    handle: q.handle,
                    parent: q.parent,
                    tbf_rate: q.tbf.map(|t| t.rate),
                    tbf_buffer: q.tbf.map(|t| t.buffer),
                    tbf_limit: q.tbf.map(|t| t.limit),
                })
                .collect()
        })
    }

    fn drop(&mut self, ns: Resource<NetnsHandle>) -> wasmtime::Result<()> {
        self.charge()?;
        self.table.delete(ns)?;
        Ok(())
    }
}

/// The kinds of link stacked on a master.
#[derive(Clone, Copy)]
enum Upper {
    Macvlan(MacvlanMode),
    Vlan,
    Ipvlan,
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
        let mode = mode_from_wit(mode);
        self.upper(
            ns,
            &name,
            &master,
            target,
            Upper::Macvlan(mode),
            |net, at, to| {
                net.create_macvlan(at, &name, &master, mode, mtu, mac.as_deref(), to, tap)
            },
        )
    }

    /// A link stacked on `master` (a link of `ns`), created in `target`:
    /// the master is the plugin's to use only if its config names it, or it
    /// is the default-route link and the plugin's type and config allow that.
    fn upper(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: &str,
        master: &str,
        target: Resource<NetnsHandle>,
        kind: Upper,
        create: impl FnOnce(&mut dyn Net, NsId, NsId) -> Result<LinkInfo, NetError>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let (target_side, target_id) = self.handle(&target)?;
        let made = match kind {
            Upper::Macvlan(mode) => Ask::CreateMacvlan(target_side, name, mode),
            Upper::Vlan => Ask::CreateStacked(target_side, name, "vlan"),
            Upper::Ipvlan => Ask::CreateStacked(target_side, name, "ipvlan"),
        };
        let asks = match self.access() {
            Ok(access) => Ask::stacked(made, &access.config, side, id, master, || {
                self.carries_default_route(id, master)
            }),
            // Refused by `act` below, naming why.
            Err(_) => vec![made],
        };
        let out = self.act(&asks, |net, _| {
            Ok((create(net, id, target_id)?, Vec::new()))
        });
        if let Ok(link) = &out {
            self.record_created(target_side, link);
        }
        out.map(link_to_wit)
    }

    /// Whether `master` carries the node's default route.
    fn carries_default_route(&self, node: NsId, master: &str) -> bool {
        let Some(access) = &self.net else {
            return false;
        };
        let Ok(mut net) = access.backend.lock() else {
            return false;
        };
        live::carries_default_route(net.as_mut(), node, master)
    }

    fn address(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        address: Address,
        add: bool,
    ) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let addr = match net::parse_cidr(&address.cidr) {
            Ok(a) => a,
            Err(e) => {
                self.charge()?;
                return Err(to_wit(e).into());
            }
        };
        self.act(
            &[Ask::Address(side, id, &link, &addr, add)],
            |net, journal| {
                if add {
                    net.add_address(id, &link, &addr)?;
                } else {
                    net.del_address(id, &link, &addr)?;
                }
                let undo = journal.change(Undo::Address {
                    link: link.clone(),
                    addr,
                    added: add,
                });
                Ok(((), undo.into_iter().collect()))
            },
        )
    }

    fn route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec, add: bool) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let Some(dev) = route.dev.clone() else {
            self.charge()?;
            return Err(self.refuse("a route must name its device".into()).into());
        };
        let r = match route_from_wit(&route) {
            Ok(r) => r,
            Err(e) => {
                self.charge()?;
                return Err(to_wit(e).into());
            }
        };
        let ask = Ask::Route(side, id, &dev, &r.dst, r.table, add);
        self.act(&[ask], |net, journal| {
            if add {
                net.add_route(id, &r)?;
            } else {
                net.del_route(id, &r)?;
            }
            let undo = journal.change(Undo::Route {
                route: r.clone(),
                added: add,
            });
            Ok(((), undo.into_iter().collect()))
        })
    }
}
