//! `cni:plugin/network`: kernel operations on the plugin's behalf. Every
//! request goes through [`policy::Grants`] first; a refusal changes
//! nothing, is logged with the plugin's name, and reaches the plugin as
//! `net-error.refused`.
//!
//! Here: what an attachment's ledger holds and the guard every import
//! passes ([`Ctx::act`]: the policy's questions, the live checks, the caps,
//! the budget, the journal, the trace). The import bodies, one per WIT
//! function, are in `imports.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::Resource;

use super::bindings::cni::plugin::network::NetError as WitError;
use super::fail::NetFail;
use super::live;
use super::policy::{describe, Ask, Basis, ConfigGrants, Grants, PortGrant, Side};
use super::state::Ctx;
use wasm_cni_base::log;
use wasm_cni_kernel::filter::{Filter, Rule, Tag};
use wasm_cni_kernel::net::{
    self, IpNet, LinkChange, LinkId, LinkInfo, Net, NetError, NsId, NsRef, NsSource,
};
use wasm_cni_protocol::Command;

mod imports;

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
    /// The container's namespace, if the runtime passed one: by name, or
    /// as the descriptor a daemon's peer opened.
    pub container: Option<NsSource>,
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
        let add = access.command == Command::Add;
        let verified = &mut self.verified;
        let guarded = live::guard(
            asks,
            &grants,
            backend.as_mut(),
            |net, side, ns, name, id| {
                // Checked once per call: the plugin's own deletes clear
                // this (a veth takes its peer along).
                let key = (side, ns, name.to_string(), id.index);
                if !verified.contains(&key) {
                    verify_created(net, &access, side, ns, name, id)?;
                    verified.insert(key);
                }
                Ok(())
            },
            |ask, basis| {
                journal.asks.push(
                    ask.place()
                        .map(|(side, _)| (side, add && *basis == Basis::Granted)),
                );
            },
        );
        match guarded {
            Ok(()) => {}
            Err(live::Stop::Missing(name)) => {
                return Err(WitError::NotFound(format!("link {name:?}")).into())
            }
            Err(live::Stop::Refused(why)) => {
                self.record("netlink", || why.clone(), Instant::now(), true);
                return Err(self.refuse(why).into());
            }
            Err(live::Stop::Lapsed(e)) => {
                log::warn(format_args!("plugin {}: {e}", self.plugin));
                return Err(to_wit(e).into());
            }
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
                Side::Container => match &access.container {
                    None => Err(NetError::NotFound(
                        "the runtime passed no container namespace".into(),
                    )),
                    Some(ns) => node.and_then(|node| {
                        let id = net.open(ns.as_ref())?;
                        if net.same_ns(id, node) {
                            // A runtime bug or a hostile config: never let
                            // "container" operations land on the node.
                            Err(NetError::Invalid(format!(
                                "{ns} is the node's own namespace"
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
