//! What a plugin may do to the kernel for its attachment: the one choke
//! point every `network` import passes through before the host acts.
//!
//! * Verbs: links are created during ADD only; ADD and DEL may change and
//!   delete; CHECK, STATUS and GC only read.
//! * Container namespace: create only CNI_IFNAME; change or delete
//!   CNI_IFNAME, `lo` and links this attachment created; a bridge the
//!   plugin's config names (the reference tap's `bridge` lives there) may
//!   be used as a master, and for nothing else.
//! * Node namespace: create links under fresh names (they become the
//!   attachment's); change or enslave links the attachment created and
//!   links the plugin's own config names (`bridge`, `master`); delete only
//!   links the attachment created. Addresses added and routes added there
//!   must lie inside the networks of the attachment's own addresses (what
//!   its IPAM handed out), and routes go to the main table.
//! * A link the attachment created is known by name, ifindex and kind: the
//!   caller checks the live link against [`Basis::Created`] before acting.
//! * macvlan/macvtap go into the container namespace only (or the node's,
//!   when the config asks for a VM's link with `"vm"`); passthru mode
//!   (which takes the master over) only when the config says so; the
//!   node's default-route link is a master only for the plugin types that
//!   default to it, when their config names none. Taps are made in the
//!   container namespace (or the node's, for a `"vm"` config), owned by no
//!   one or by the owner and group the config names.
//! * Routes never go to the `local` (255), `default` (253) or unspecified
//!   (0) tables.
//! * Sysctls: keys under `net.` only. Per-interface keys (`net.ipv4.conf.X.…`
//!   and friends) only for links the plugin may change; in the node
//!   namespace, global keys only from a short list of forwarding switches.
//! * Reading is always allowed.
//! * Filter rules (`filter` import): added during ADD only, removed during
//!   ADD and DEL, checked always. Every address a rule names is one of the
//!   attachment's own; a port map is one the plugin's
//!   `runtimeConfig.portMappings` lists; bridge isolation only for the bridge
//!   a link of the attachment is a port of, a MAC check only on a node link
//!   the attachment created (both checked against the live links by the
//!   caller, see [`FilterNeed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::filter::{Proto, Rule};
use crate::net::{IpNet, LinkId, MacvlanMode, NsId, RT_TABLE_MAIN};
use crate::Command;

/// Which namespace a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Container,
    Node,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Container => "container",
            Side::Node => "node",
        }
    }
}

/// Node-side global sysctls a plugin may write: bridge and ptp turn on
/// forwarding, as the reference plugins do.
pub const NODE_GLOBAL_SYSCTLS: &[&str] = &["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"];

/// Sysctl subtrees keyed by interface name.
const PER_INTERFACE: &[&str] = &[
    "net.ipv4.conf.",
    "net.ipv6.conf.",
    "net.ipv4.neigh.",
    "net.ipv6.neigh.",
];

/// Routing tables no plugin writes: unspecified, `default` and `local` (the
/// kernel's own, which decides what the namespace itself answers for).
const RESERVED_TABLES: &[u32] = &[0, 253, 255];

/// Plugin types whose reference implementation uses the node's default-route
/// link as the master when the config names none.
pub const DEFAULT_MASTER_TYPES: &[&str] = &["macvlan", "macvtap", "ipvlan"];

/// What the plugin's own config grants, fixed for the call.
#[derive(Debug, Clone, Default)]
pub struct ConfigGrants {
    /// Links the config names (`bridge`, `master`): changeable in the node
    /// namespace; in the container namespace only usable as a bridge master.
    pub named: BTreeSet<String>,
    /// The plugin may use the node's default-route link as a master (its
    /// type defaults to it and the config names no `master`).
    pub default_master: bool,
    /// The config asks for `"mode": "passthru"`.
    pub passthru: bool,
    /// `owner` and `group` from the config (taps; `vm.owner`, `vm.group`
    /// for a VM's).
    pub tap_owner: Option<u32>,
    pub tap_group: Option<u32>,
    /// The config asks for a VM's tap or macvtap on the node (`"vm"`).
    pub vm_node: bool,
}

impl ConfigGrants {
    /// What a plugin's own config (its chain entry: `type` and the keys
    /// beside it) grants.
    pub fn from_config(plugin_type: &str, config: &Map<String, Value>) -> ConfigGrants {
        let text = |key: &str| config_str(config, key);
        // A VM's link on the node, and its owners, only as the config says.
        let vm = config.get("vm").and_then(Value::as_object);
        let id = |key: &str| {
            vm.and_then(|v| v.get(key))
                .or_else(|| config.get(key))
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        ConfigGrants {
            named: ConfigGrants::named_links(plugin_type, config),
            default_master: text("master").is_none() && DEFAULT_MASTER_TYPES.contains(&plugin_type),
            passthru: text("mode") == Some("passthru"),
            tap_owner: id("owner"),
            tap_group: id("group"),
            vm_node: vm.is_some(),
        }
    }

    /// The node links a plugin may change: the ones its own config names,
    /// under the keys the reference plugins use for them (`bridge`,
    /// `master`, a VM's `vm.parent`), or the reference default when the key
    /// is absent (bridge: `cni0`).
    pub fn named_links(plugin_type: &str, config: &Map<String, Value>) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = ["bridge", "master"]
            .iter()
            .filter_map(|k| config_str(config, k))
            .map(str::to_string)
            .collect();
        if plugin_type == "bridge" && config_str(config, "bridge").is_none() {
            out.insert("cni0".into());
        }
        let vm = config.get("vm").and_then(Value::as_object);
        if let Some(parent) = vm.and_then(|v| v.get("parent")).and_then(Value::as_str) {
            out.insert(parent.to_string());
        }
        out
    }
}

/// A non-empty string under `key` in a config.
fn config_str<'a>(config: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    config
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// What one plugin call may touch.
#[derive(Debug, Clone)]
pub struct Grants {
    pub command: Command,
    /// CNI_IFNAME.
    pub ifname: String,
    pub config: ConfigGrants,
    /// Links this attachment created, per side, with their identity.
    pub created_node: BTreeMap<String, LinkId>,
    pub created_container: BTreeMap<String, LinkId>,
    /// Networks of the attachment's own addresses.
    pub own_nets: Vec<IpNet>,
    /// `runtimeConfig.portMappings` of the plugin's config.
    pub ports: Vec<PortGrant>,
}

/// One entry of `runtimeConfig.portMappings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGrant {
    pub proto: Proto,
    /// `None` when absent, empty or unspecified (`0.0.0.0`, `::`).
    pub host_ip: Option<IpAddr>,
    pub host_port: u16,
    pub container_port: u16,
}

impl PortGrant {
    /// The entries of `runtimeConfig.portMappings` in a plugin's config
    /// (JSON). Entries that do not parse grant nothing (the plugin refuses
    /// them itself, naming them).
    pub fn from_config(config: &str) -> Vec<PortGrant> {
        serde_json::from_str::<Value>(config).map_or_else(|_| Vec::new(), |v| Self::from_value(&v))
    }

    /// The same, of the config before it is written out: the host builds
    /// each plugin's config as a value and grants from it, rather than
    /// parsing back what it just wrote.
    pub fn from_value(config: &Value) -> Vec<PortGrant> {
        let Some(list) = config
            .pointer("/runtimeConfig/portMappings")
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        list.iter().filter_map(PortGrant::parse).collect()
    }

    fn parse(v: &Value) -> Option<PortGrant> {
        let port = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
        };
        let proto = match v.get("protocol") {
            None | Some(Value::Null) => Proto::Tcp,
            Some(p) => Proto::parse(p.as_str()?)?,
        };
        let host_ip = match v.get("hostIP").and_then(Value::as_str) {
            None | Some("") => None,
            Some(s) => Some(s.parse::<IpAddr>().ok()?).filter(|ip| !ip.is_unspecified()),
        };
        Some(PortGrant {
            proto,
            host_ip,
            host_port: port("hostPort")?,
            container_port: port("containerPort")?,
        })
    }
}

/// What an allowed filter rule still needs the caller to confirm on the
/// live links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterNeed {
    Nothing,
    /// The node link of this name must still be the one the attachment
    /// created.
    Created(String, LinkId),
    /// The bridge must be the master of a node link the attachment created.
    PortOf(String),
}

/// What is being done with a filter rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOp {
    Add,
    Check,
    Remove,
}

/// Why an operation on a link is allowed. [`Basis::Created`] holds only if
/// the link of that name still is the one the attachment created: the
/// caller checks its identity before acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// CNI_IFNAME or `lo` in the container, a link the config names, or
    /// no link at all (a namespace-wide sysctl).
    Granted,
    /// The link of this name the attachment created.
    Created(String, LinkId),
}

pub type Verdict<T = ()> = Result<T, String>;

impl Grants {
    fn created(&self, side: Side) -> &BTreeMap<String, LinkId> {
        match side {
            Side::Container => &self.created_container,
            Side::Node => &self.created_node,
        }
    }

    /// Changes are for ADD (which makes them) and DEL (which undoes them);
    /// in the node namespace, for ADD only: DEL, CHECK and GC add nothing
    /// there, and what an attachment made there goes by what the host
    /// recorded (its links, its rules), never by what a plugin says it made.
    fn may_write(&self, side: Side, what: &str) -> Verdict {
        match (self.command, side) {
            (Command::Add, _) | (Command::Del, Side::Container) => Ok(()),
            (Command::Del, Side::Node) => Err(format!(
                "{what} in the node namespace is not allowed during DEL: only ADD changes the node, and the host removes what the attachment recorded"
            )),
            (c, _) => Err(format!(
                "{what} is not allowed during {}: it only reads",
                c.as_str()
            )),
        }
    }

    /// May the plugin create a link named `name` on `side`?
    pub fn create(&self, side: Side, name: &str) -> Verdict {
        if self.command != Command::Add {
            return Err(format!(
                "creating link {name:?} is not allowed during {}: links are created during ADD only",
                self.command.as_str()
            ));
        }
        match side {
            Side::Container if name == self.ifname => Ok(()),
            Side::Container => Err(format!(
                "may create only {:?} in the container namespace, not {name:?}",
                self.ifname
            )),
            // A fresh name cannot clash with anything (the kernel refuses
            // duplicates), so creation itself harms no one; it is recorded.
            Side::Node => Ok(()),
        }
    }

    /// A tap: in the container (for the VM there), or on the node when the
    /// config asks for a VM's (`"vm"`); owned by no one or as the config
    /// says.
    pub fn create_tap(
        &self,
        side: Side,
        name: &str,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> Verdict {
        self.create(side, name)?;
        if side == Side::Node && !self.config.vm_node {
            return Err(format!(
                "tap {name:?}: taps are made in the container namespace only, unless the config asks for a VM's (\"vm\")"
            ));
        }
        for (what, asked, configured) in [
            ("owner", owner, self.config.tap_owner),
            ("group", group, self.config.tap_group),
        ] {
            if asked.is_some() && asked != configured {
                return Err(format!(
                    "tap {name:?}: {what} {} is not the one the config names",
                    asked.map_or_else(String::new, |v| v.to_string())
                ));
            }
        }
        Ok(())
    }

    /// A macvlan or macvtap named `name` on `target`, in `mode`.
    pub fn create_macvlan(&self, target: Side, name: &str, mode: MacvlanMode) -> Verdict {
        self.create(target, name)?;
        if target != Side::Container && !self.config.vm_node {
            return Err(format!(
                "{name:?}: a macvlan or macvtap goes into the container namespace only, unless the config asks for a VM's (\"vm\")"
            ));
        }
        if mode == MacvlanMode::Passthru && !self.config.passthru {
            return Err(format!(
                "{name:?}: passthru mode takes the master over; the config must ask for it (\"mode\": \"passthru\")"
            ));
        }
        Ok(())
    }

    /// A vlan or ipvlan named `name` on `target`: the container's only (a
    /// VM takes a tap or a macvtap).
    pub fn create_stacked(&self, target: Side, name: &str, kind: &str) -> Verdict {
        self.create(target, name)?;
        if target != Side::Container {
            return Err(format!(
                "{name:?}: a {kind} goes into the container namespace only"
            ));
        }
        Ok(())
    }

    /// May the plugin change `name` (state, addresses, routes, master)?
    pub fn change(&self, side: Side, name: &str) -> Verdict<Basis> {
        self.may_write(side, &format!("changing link {name:?}"))?;
        self.reach(side, name)
    }

    /// Whether `name` is the attachment's, whatever the verb. A link the
    /// attachment recorded as created is its own only as that link, even
    /// CNI_IFNAME: a late DEL for an old container must not take the
    /// interface a newer container made under the same name in the same
    /// namespace.
    fn reach(&self, side: Side, name: &str) -> Verdict<Basis> {
        if let Some(id) = self.created(side).get(name) {
            return Ok(Basis::Created(name.to_string(), id.clone()));
        }
        let granted = match side {
            Side::Container => name == self.ifname || name == "lo",
            Side::Node => self.config.named.contains(name),
        };
        if granted {
            Ok(Basis::Granted)
        } else {
            Err(format!(
                "link {name:?} in the {} namespace does not belong to this attachment",
                side.as_str()
            ))
        }
    }

    /// May the plugin make `bridge` the master of a link it may change?
    /// Any bridge it may change, and in the container namespace also one
    /// its config names: joining a bridge adds a port and changes nothing
    /// else of it (the backend accepts only bridges as masters), and the
    /// name comes from the config, not from the plugin.
    pub fn enslave(&self, side: Side, bridge: &str) -> Verdict<Basis> {
        if side == Side::Container && self.config.named.contains(bridge) {
            self.may_write(side, &format!("using {bridge:?} as a master"))?;
            return Ok(Basis::Granted);
        }
        self.change(side, bridge)
            .map_err(|why| format!("may not use {bridge:?} as a master: {why}"))
    }

    /// May the plugin delete `name`?
    pub fn delete(&self, side: Side, name: &str) -> Verdict<Basis> {
        // Deleting what it created is how DEL undoes ADD, on either side.
        if self.command != Command::Del {
            self.may_write(side, &format!("deleting link {name:?}"))?;
        }
        if let Some(id) = self.created(side).get(name) {
            return Ok(Basis::Created(name.to_string(), id.clone()));
        }
        if side == Side::Container && name == self.ifname {
            return Ok(Basis::Granted);
        }
        Err(format!(
            "may not delete {name:?} in the {} namespace: not created for this attachment",
            side.as_str()
        ))
    }

    /// May the plugin add (`add`) or delete `addr` on `link`?
    pub fn address(&self, side: Side, link: &str, addr: &IpNet, add: bool) -> Verdict<Basis> {
        let basis = self.change(side, link)?;
        if add && side == Side::Node {
            self.own(&format!("address {addr} on {link:?}"), addr)?;
        }
        Ok(basis)
    }

    /// May the plugin add (`add`) or delete a route to `dst` through `dev`
    /// in `table`?
    pub fn route(
        &self,
        side: Side,
        dev: &str,
        dst: &IpNet,
        table: Option<u32>,
        add: bool,
    ) -> Verdict<Basis> {
        let table = table.unwrap_or(RT_TABLE_MAIN);
        if RESERVED_TABLES.contains(&table) {
            return Err(format!("route to {dst}: table {table} is the kernel's own"));
        }
        if side == Side::Node && table != RT_TABLE_MAIN {
            return Err(format!(
                "route to {dst}: in the node namespace only the main table ({RT_TABLE_MAIN}), not {table}"
            ));
        }
        let basis = self.change(side, dev)?;
        if add && side == Side::Node {
            self.own(&format!("route to {dst} via {dev:?}"), dst)?;
        }
        Ok(basis)
    }

    /// `net` must lie inside a network of one of the attachment's addresses:
    /// the node-side addresses and routes a plugin makes (a gateway on the
    /// bridge, ptp's host route) are for its own pod, never for the node's
    /// other traffic.
    fn own(&self, what: &str, net: &IpNet) -> Verdict {
        // Same family, and `net` lies wholly inside `own`.
        let inside = self.own_nets.iter().any(|own| own.contains(net));
        if inside {
            Ok(())
        } else {
            let owned: Vec<String> = self
                .own_nets
                .iter()
                .map(|n| n.trunc().to_string())
                .collect();
            Err(format!(
                "{what} in the node namespace is outside the attachment's networks [{}]",
                owned.join(", ")
            ))
        }
    }

    /// May the plugin shape `name` (qdiscs, filters)? Only a link the
    /// attachment created: its qdiscs then go with it, and no one else's
    /// traffic is shaped.
    pub fn shape(&self, side: Side, name: &str) -> Verdict<Basis> {
        self.may_write(side, &format!("shaping link {name:?}"))?;
        match self.created(side).get(name) {
            Some(id) => Ok(Basis::Created(name.to_string(), id.clone())),
            None => Err(format!(
                "may not shape {name:?} in the {} namespace: not created for this attachment",
                side.as_str()
            )),
        }
    }

    /// May the plugin add, check or remove `rule`?
    pub fn filter(&self, rule: &Rule, op: FilterOp) -> Verdict<FilterNeed> {
        match (op, self.command) {
            (FilterOp::Check, _) | (FilterOp::Add, Command::Add) => {}
            (FilterOp::Remove, Command::Add | Command::Del) => {}
            (FilterOp::Add, c) => {
                return Err(format!(
                    "adding rule {rule} is not allowed during {}: rules are added during ADD only",
                    c.as_str()
                ))
            }
            (FilterOp::Remove, c) => {
                return Err(format!(
                    "removing rule {rule} is not allowed during {}",
                    c.as_str()
                ))
            }
        }
        // Checking and removing reach only the attachment's own rules (the
        // backend matches its tag), whatever addresses they name; adding
        // names only addresses the host saw handed to the attachment.
        let own = |ip: &IpAddr| {
            if op != FilterOp::Add || self.own_nets.iter().any(|n| n.addr() == *ip) {
                Ok(())
            } else {
                let owned: Vec<String> =
                    self.own_nets.iter().map(|n| n.addr().to_string()).collect();
                Err(format!(
                    "rule {rule}: {ip} is not an address of this attachment [{}]",
                    owned.join(", ")
                ))
            }
        };
        match rule {
            Rule::Masquerade { source, .. } => own(source)?,
            Rule::HairpinMasquerade { dst } => own(dst)?,
            Rule::AllowForward { addr } => own(addr)?,
            Rule::PortMap {
                proto,
                host_ip,
                host_port,
                dst,
                dst_port,
            } => {
                own(dst)?;
                let granted = self.ports.iter().any(|g| {
                    g.proto == *proto
                        && g.host_port == *host_port
                        && g.container_port == *dst_port
                        && g.host_ip == *host_ip
                });
                // Removing and checking a mapping the config no longer lists
                // is fine: it is the attachment's own by its address.
                if !granted && op == FilterOp::Add {
                    return Err(format!(
                        "rule {rule}: not one of the runtimeConfig.portMappings of this plugin's config"
                    ));
                }
            }
            Rule::IsolateBridge { bridge } => return Ok(FilterNeed::PortOf(bridge.clone())),
            Rule::MacSpoofCheck { link, .. } => {
                return match self.created_node.get(link) {
                    Some(id) => Ok(FilterNeed::Created(link.clone(), id.clone())),
                    None => Err(format!(
                        "rule {rule}: {link:?} is not a node link this attachment created"
                    )),
                }
            }
        }
        Ok(FilterNeed::Nothing)
    }

    /// May the plugin read (`write` false) or write sysctl `key`? A grant
    /// on an interface the attachment created is returned as its basis.
    pub fn sysctl(&self, side: Side, key: &str, write: bool) -> Verdict<Basis> {
        if !key.starts_with("net.") || key.contains("..") || key.ends_with('.') {
            return Err(format!("sysctl {key:?} is outside net."));
        }
        if !write {
            return Ok(Basis::Granted);
        }
        self.may_write(side, &format!("writing sysctl {key:?}"))?;
        if let Some(rest) = PER_INTERFACE.iter().find_map(|p| key.strip_prefix(p)) {
            // The setting name has no dots, so the interface is what lies
            // between the subtree and the last dot.
            let Some((ifname, _setting)) = rest.rsplit_once('.') else {
                return Err(format!("sysctl {key:?} names no interface"));
            };
            if side == Side::Node && NODE_GLOBAL_SYSCTLS.contains(&key) {
                return Ok(Basis::Granted);
            }
            return match (side, ifname) {
                // The container namespace is the attachment's own.
                (Side::Container, "all" | "default") => Ok(Basis::Granted),
                (Side::Node, "all" | "default") => Err(format!(
                    "sysctl {key:?} would change every interface of the node"
                )),
                _ => self
                    .reach(side, ifname)
                    .map_err(|why| format!("sysctl {key:?}: {why}")),
            };
        }
        match side {
            Side::Container => Ok(Basis::Granted),
            Side::Node if NODE_GLOBAL_SYSCTLS.contains(&key) => Ok(Basis::Granted),
            Side::Node => Err(format!("sysctl {key:?} is a node-wide setting")),
        }
    }
}

/// A policy question asked before acting: every network import asks one
/// or more, in order, and acts only if all are answered yes. Questions
/// about a link carry the namespace, so that a grant resting on the
/// attachment having created the link can be checked against the live link.
#[derive(Debug, Clone, Copy)]
pub enum Ask<'a> {
    Read,
    Create(Side, &'a str),
    CreateTap(Side, &'a str, Option<u32>, Option<u32>),
    CreateMacvlan(Side, &'a str, MacvlanMode),
    /// A vlan or ipvlan (the kind).
    CreateStacked(Side, &'a str, &'static str),
    Change(Side, NsId, &'a str),
    /// Use as a bridge master.
    Enslave(Side, NsId, &'a str),
    Delete(Side, NsId, &'a str),
    Address(Side, NsId, &'a str, &'a IpNet, bool),
    Route(Side, NsId, &'a str, &'a IpNet, Option<u32>, bool),
    Sysctl(Side, NsId, &'a str, bool),
    /// Qdiscs and filters on a link.
    Shape(Side, NsId, &'a str),
    CreateIfb(Side, &'a str),
}

impl Ask<'_> {
    /// The policy's answer, and what it rests on.
    pub fn verdict(&self, g: &Grants) -> Verdict<Basis> {
        match *self {
            Ask::Read => Ok(Basis::Granted),
            Ask::Create(side, n) => g.create(side, n).map(|()| Basis::Granted),
            Ask::CreateTap(side, n, owner, group) => {
                g.create_tap(side, n, owner, group).map(|()| Basis::Granted)
            }
            Ask::CreateMacvlan(side, n, mode) => {
                g.create_macvlan(side, n, mode).map(|()| Basis::Granted)
            }
            Ask::CreateStacked(side, n, kind) => {
                g.create_stacked(side, n, kind).map(|()| Basis::Granted)
            }
            Ask::Change(side, _, n) => g.change(side, n),
            Ask::Enslave(side, _, n) => g.enslave(side, n),
            Ask::Delete(side, _, n) => g.delete(side, n),
            Ask::Address(side, _, link, addr, add) => g.address(side, link, addr, add),
            Ask::Route(side, _, dev, dst, table, add) => g.route(side, dev, dst, table, add),
            Ask::Sysctl(side, _, key, write) => g.sysctl(side, key, write),
            Ask::Shape(side, _, n) => g.shape(side, n),
            Ask::CreateIfb(side, n) => {
                g.create(side, n)?;
                match side {
                    Side::Node => Ok(Basis::Granted),
                    Side::Container => Err(format!(
                        "ifb {n:?}: ifbs are made in the node namespace only"
                    )),
                }
            }
        }
    }

    /// Where the link a grant rests on lives.
    pub fn place(&self) -> Option<(Side, NsId)> {
        match *self {
            Ask::Change(side, ns, _)
            | Ask::Enslave(side, ns, _)
            | Ask::Delete(side, ns, _)
            | Ask::Address(side, ns, ..)
            | Ask::Route(side, ns, ..)
            | Ask::Sysctl(side, ns, ..)
            | Ask::Shape(side, ns, _) => Some((side, ns)),
            _ => None,
        }
    }

    /// The questions an import that creates a link stacked on `master` (a
    /// link of `side`) asks: `create`, and whether the master is the
    /// plugin's to use, unless it is the node's default-route link and the
    /// plugin's type and config allow that (`default_route_link` tells
    /// whether `master` carries the node's default route; it is asked only
    /// then).
    pub fn stacked<'a>(
        create: Ask<'a>,
        config: &ConfigGrants,
        side: Side,
        ns: NsId,
        master: &'a str,
        default_route_link: impl FnOnce() -> bool,
    ) -> Vec<Ask<'a>> {
        let named = config.named.contains(master) && side == Side::Node;
        let default_ok =
            !named && side == Side::Node && config.default_master && default_route_link();
        let mut asks = vec![create];
        if !default_ok {
            asks.push(Ask::Change(side, ns, master));
        }
        asks
    }

    /// The questions of `ensure-bridge` on `side`: in the node a bridge is
    /// shared by attachments, so only the one the config names (or one of
    /// the attachment's own), and it never becomes the attachment's; in
    /// the container it is a link like any other (only CNI_IFNAME).
    pub fn ensure_bridge(side: Side, ns: NsId, name: &str) -> Vec<Ask<'_>> {
        match side {
            Side::Node => vec![Ask::Change(side, ns, name), Ask::Create(side, name)],
            Side::Container => vec![Ask::Create(side, name)],
        }
    }

    /// The questions of `set-link` on `name`, with `master` as given.
    pub fn set_link<'a>(side: Side, ns: NsId, name: &'a str, master: &'a str) -> Vec<Ask<'a>> {
        let mut asks = vec![Ask::Change(side, ns, name)];
        if !master.is_empty() {
            asks.push(Ask::Enslave(side, ns, master));
        }
        asks
    }
}

/// The call, for a fault report: `network create veth0 (node)`.
pub fn describe(asks: &[Ask<'_>]) -> String {
    let side = |s: &Side| s.as_str();
    let parts: Vec<String> = asks
        .iter()
        .map(|a| match a {
            Ask::Read => "read".to_string(),
            Ask::Create(s, n)
            | Ask::CreateTap(s, n, ..)
            | Ask::CreateMacvlan(s, n, _)
            | Ask::CreateStacked(s, n, _) => {
                format!("create {n} ({})", side(s))
            }
            Ask::Change(s, _, n) => format!("change {n} ({})", side(s)),
            Ask::Enslave(s, _, n) => format!("enslave to {n} ({})", side(s)),
            Ask::Delete(s, _, n) => format!("delete {n} ({})", side(s)),
            Ask::Address(s, _, n, a, add) => {
                format!(
                    "{} address {a} on {n} ({})",
                    if *add { "add" } else { "del" },
                    side(s)
                )
            }
            Ask::Route(s, _, n, d, _, add) => {
                format!(
                    "{} route {d} dev {n} ({})",
                    if *add { "add" } else { "del" },
                    side(s)
                )
            }
            Ask::Sysctl(s, _, k, w) => {
                format!("{} {k} ({})", if *w { "set" } else { "get" }, side(s))
            }
            Ask::Shape(s, _, n) => format!("shape {n} ({})", side(s)),
            Ask::CreateIfb(s, n) => format!("create ifb {n} ({})", side(s)),
        })
        .collect();
    format!("network {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(index: u32) -> LinkId {
        LinkId {
            index,
            kind: "veth".into(),
        }
    }

    fn grants(command: Command) -> Grants {
        Grants {
            command,
            ifname: "eth0".into(),
            config: ConfigGrants {
                named: ["cni0".to_string()].into(),
                tap_owner: Some(1000),
                ..ConfigGrants::default()
            },
            created_node: [("veth0123abcd".to_string(), id(7))].into(),
            created_container: BTreeMap::new(),
            own_nets: vec![
                crate::net::parse_cidr("10.1.2.5/24").unwrap(),
                crate::net::parse_cidr("fd00::5/64").unwrap(),
            ],
            ports: PortGrant::from_config(
                r#"{"runtimeConfig":{"portMappings":[
                    {"hostPort":8080,"containerPort":80,"protocol":"tcp"},
                    {"hostPort":5353,"containerPort":53,"protocol":"UDP","hostIP":"192.168.1.1"},
                    {"hostPort":0,"containerPort":53},
                    {"hostPort":9,"containerPort":9,"protocol":"icmp"},
                    {"hostPort":10,"containerPort":10,"hostIP":"0.0.0.0"}
                ]}}"#,
            ),
        }
    }

    fn config(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_config_grants_the_links_it_names_and_what_it_asks_for() {
        let c = ConfigGrants::from_config("bridge", &config(r#"{"type":"bridge"}"#));
        assert_eq!(
            c.named,
            ["cni0".to_string()].into(),
            "the reference default"
        );
        let c = ConfigGrants::from_config("bridge", &config(r#"{"bridge":"br9"}"#));
        assert_eq!(c.named, ["br9".to_string()].into());
        let c = ConfigGrants::from_config(
            "macvlan",
            &config(r#"{"master":"ens9","mode":"passthru","owner":1,"group":2}"#),
        );
        assert_eq!(c.named, ["ens9".to_string()].into());
        assert!(c.passthru && !c.default_master && !c.vm_node);
        assert_eq!((c.tap_owner, c.tap_group), (Some(1), Some(2)));
        // No master: the types that default to the default-route link may
        // use it; others may not. An empty string names nothing.
        let c = ConfigGrants::from_config("macvtap", &config(r#"{"master":""}"#));
        assert!(c.default_master && c.named.is_empty());
        let c = ConfigGrants::from_config("vlan", &config("{}"));
        assert!(!c.default_master);
        // A VM's: its parent is named, its owners win over the top level's,
        // and an id that is not a u32 grants nothing.
        let c = ConfigGrants::from_config(
            "tap",
            &config(r#"{"owner":1,"group":-1,"vm":{"parent":"br-vm","owner":5}}"#),
        );
        assert!(c.vm_node);
        assert_eq!(c.named, ["br-vm".to_string()].into());
        assert_eq!((c.tap_owner, c.tap_group), (Some(5), None));
    }

    #[test]
    fn a_stacked_link_asks_for_its_master_unless_it_is_the_granted_default() {
        let mut g = grants(Command::Add);
        g.config.named.insert("ens9".into());
        let ns = NsId(0);
        let create = Ask::CreateStacked(Side::Container, "eth0", "vlan");
        let verdicts = |asks: &[Ask<'_>], g: &Grants| -> Vec<bool> {
            asks.iter().map(|a| a.verdict(g).is_ok()).collect()
        };
        // A named master: asked, and granted.
        let asks = Ask::stacked(create, &g.config, Side::Node, ns, "ens9", || unreachable!());
        assert_eq!(verdicts(&asks, &g), [true, true]);
        // Another master: asked, and refused, whatever routes it carries
        // (the default is not granted to this config).
        let asks = Ask::stacked(create, &g.config, Side::Node, ns, "ens3", || true);
        assert_eq!(verdicts(&asks, &g), [true, false]);
        // Granted the default: the default-route link needs no grant, a
        // link without the default route still does.
        g.config.default_master = true;
        let asks = Ask::stacked(create, &g.config, Side::Node, ns, "ens3", || true);
        assert_eq!(verdicts(&asks, &g), [true]);
        let asks = Ask::stacked(create, &g.config, Side::Node, ns, "ens3", || false);
        assert_eq!(verdicts(&asks, &g), [true, false]);
        // A master in the container is never the node's default.
        let asks = Ask::stacked(create, &g.config, Side::Container, ns, "up0", || true);
        assert_eq!(verdicts(&asks, &g), [true, false]);
    }

    #[test]
    fn only_links_the_attachment_created_are_shaped() {
        let g = grants(Command::Add);
        assert_eq!(
            g.shape(Side::Node, "veth0123abcd"),
            Ok(Basis::Created("veth0123abcd".into(), id(7)))
        );
        assert!(g.shape(Side::Node, "cni0").is_err());
        assert!(g.shape(Side::Container, "eth0").is_err());
        assert!(grants(Command::Check)
            .shape(Side::Node, "veth0123abcd")
            .is_err());
    }

    #[test]
    fn port_grants_come_from_the_runtime_config() {
        let g = grants(Command::Add);
        assert_eq!(g.ports.len(), 3, "{:?}", g.ports);
        assert_eq!(g.ports[1].proto, Proto::Udp);
        assert_eq!(g.ports[2].host_ip, None);
        assert!(PortGrant::from_config("not json").is_empty());
        assert!(PortGrant::from_config(r#"{"runtimeConfig":{}}"#).is_empty());
    }

    #[test]
    fn filter_rules_name_only_the_attachments_own() {
        let g = grants(Command::Add);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let pm = |proto, host_ip: Option<&str>, hp, dst: &str, cp| Rule::PortMap {
            proto,
            host_ip: host_ip.map(ip),
            host_port: hp,
            dst: ip(dst),
            dst_port: cp,
        };
        let ok = [
            Rule::Masquerade {
                source: ip("10.1.2.5"),
                except: vec![crate::net::parse_cidr("10.1.2.0/24").unwrap()],
            },
            Rule::HairpinMasquerade { dst: ip("fd00::5") },
            Rule::AllowForward {
                addr: ip("10.1.2.5"),
            },
            pm(Proto::Tcp, None, 8080, "10.1.2.5", 80),
            pm(Proto::Tcp, None, 8080, "fd00::5", 80),
            pm(Proto::Udp, Some("192.168.1.1"), 5353, "10.1.2.5", 53),
        ];
        for r in &ok {
            assert_eq!(g.filter(r, FilterOp::Add), Ok(FilterNeed::Nothing), "{r}");
        }
        let refused = [
            // Another pod's address, on the same subnet.
            Rule::Masquerade {
                source: ip("10.1.2.6"),
                except: vec![],
            },
            Rule::HairpinMasquerade {
                dst: ip("10.1.2.1"),
            },
            Rule::AllowForward {
                addr: ip("0.0.0.0"),
            },
            pm(Proto::Tcp, None, 8080, "10.1.2.6", 80),
            // Not as the config lists it.
            pm(Proto::Tcp, None, 8081, "10.1.2.5", 80),
            pm(Proto::Tcp, None, 8080, "10.1.2.5", 81),
            pm(Proto::Udp, None, 8080, "10.1.2.5", 80),
            pm(Proto::Udp, None, 5353, "10.1.2.5", 53),
            pm(Proto::Udp, Some("192.168.1.2"), 5353, "10.1.2.5", 53),
            Rule::MacSpoofCheck {
                link: "cni0".into(),
                mac: [2, 0, 0, 0, 0, 1],
            },
        ];
        for r in &refused {
            assert!(g.filter(r, FilterOp::Add).is_err(), "{r}");
        }
        assert_eq!(
            g.filter(
                &Rule::MacSpoofCheck {
                    link: "veth0123abcd".into(),
                    mac: [2, 0, 0, 0, 0, 1]
                },
                FilterOp::Add
            ),
            Ok(FilterNeed::Created("veth0123abcd".into(), id(7)))
        );
        assert_eq!(
            g.filter(
                &Rule::IsolateBridge {
                    bridge: "br9".into()
                },
                FilterOp::Add
            ),
            Ok(FilterNeed::PortOf("br9".into()))
        );
        // Verbs: add in ADD, remove in ADD and DEL, check always.
        for command in [Command::Check, Command::Del, Command::Gc, Command::Status] {
            assert!(grants(command).filter(&ok[0], FilterOp::Add).is_err());
            assert!(grants(command).filter(&ok[0], FilterOp::Check).is_ok());
        }
        assert!(grants(Command::Del)
            .filter(&ok[0], FilterOp::Remove)
            .is_ok());
        assert!(grants(Command::Check)
            .filter(&ok[0], FilterOp::Remove)
            .is_err());
        // A mapping the config no longer lists may still be removed, and
        // removing or checking needs no address grant at all: the backend
        // only ever matches the attachment's own (tagged) rules, and DEL
        // has no grants from a result (its addresses are what the plugins
        // wrote).
        let gone = pm(Proto::Tcp, None, 9999, "10.1.2.5", 80);
        assert!(grants(Command::Del).filter(&gone, FilterOp::Remove).is_ok());
        let mut del = grants(Command::Del);
        del.own_nets.clear();
        assert!(del.filter(&refused[3], FilterOp::Remove).is_ok());
        assert!(del.filter(&ok[0], FilterOp::Check).is_ok());
        // Adding still needs the address handed to the attachment.
        let mut add = grants(Command::Add);
        add.own_nets.clear();
        assert!(add.filter(&ok[0], FilterOp::Add).is_err());
    }

    #[test]
    fn container_side() {
        let g = grants(Command::Add);
        assert!(g.create(Side::Container, "eth0").is_ok());
        assert!(g.create(Side::Container, "eth1").is_err());
        assert_eq!(g.change(Side::Container, "eth0"), Ok(Basis::Granted));
        assert!(g.change(Side::Container, "lo").is_ok());
        assert!(g.change(Side::Container, "eth1").is_err());
        assert!(g.delete(Side::Container, "eth0").is_ok());
        assert!(g.delete(Side::Container, "lo").is_err());
        assert!(g.delete(Side::Container, "eth1").is_err());
    }

    #[test]
    fn a_recorded_ifname_is_the_attachments_only_as_that_link() {
        let mut g = grants(Command::Del);
        g.created_container.insert("eth0".into(), id(3));
        let own = Basis::Created("eth0".into(), id(3));
        assert_eq!(g.change(Side::Container, "eth0"), Ok(own.clone()));
        assert_eq!(g.delete(Side::Container, "eth0"), Ok(own));
        // Unrecorded (a DEL without a record), it is granted by name.
        let g = grants(Command::Del);
        assert_eq!(g.delete(Side::Container, "eth0"), Ok(Basis::Granted));
    }

    #[test]
    fn node_side() {
        let g = grants(Command::Add);
        assert!(g.create(Side::Node, "vethnew").is_ok());
        assert_eq!(g.change(Side::Node, "cni0"), Ok(Basis::Granted));
        // A created link is granted as that link, to be checked.
        assert_eq!(
            g.change(Side::Node, "veth0123abcd"),
            Ok(Basis::Created("veth0123abcd".into(), id(7)))
        );
        assert!(g.change(Side::Node, "lo").is_err());
        assert!(g.change(Side::Node, "eth0").is_err());
        assert_eq!(
            g.delete(Side::Node, "veth0123abcd"),
            Ok(Basis::Created("veth0123abcd".into(), id(7)))
        );
        // Config-named links may be changed but never deleted.
        assert!(g.delete(Side::Node, "cni0").is_err());
        assert!(g.delete(Side::Node, "lo").is_err());
    }

    #[test]
    fn del_changes_nothing_in_the_node_but_deleting_what_it_created() {
        let g = grants(Command::Del);
        let net = |s: &str| crate::net::parse_cidr(s).unwrap();
        // Whatever networks it holds: DEL adds no node-side state at all.
        for (what, verdict) in [
            (
                "address",
                g.address(Side::Node, "cni0", &net("10.1.2.1/24"), true),
            ),
            (
                "address removal",
                g.address(Side::Node, "cni0", &net("10.1.2.1/24"), false),
            ),
            (
                "route",
                g.route(Side::Node, "cni0", &net("10.1.2.5/32"), None, true),
            ),
            (
                "route via its own link",
                g.route(Side::Node, "veth0123abcd", &net("10.1.2.5/32"), None, true),
            ),
            ("change", g.change(Side::Node, "cni0")),
            ("enslave", g.enslave(Side::Node, "cni0")),
            (
                "sysctl",
                g.sysctl(Side::Node, "net.ipv4.conf.cni0.route_localnet", true),
            ),
            (
                "forwarding",
                g.sysctl(Side::Node, "net.ipv4.ip_forward", true),
            ),
            ("shape", g.shape(Side::Node, "veth0123abcd")),
        ] {
            let e = verdict.err().unwrap_or_else(|| panic!("{what} allowed"));
            assert!(e.contains("only ADD changes the node"), "{what}: {e}");
        }
        // It deletes what the attachment created, and reads.
        assert!(g.delete(Side::Node, "veth0123abcd").is_ok());
        assert!(g.delete(Side::Node, "cni0").is_err());
        assert!(g.sysctl(Side::Node, "net.ipv4.ip_forward", false).is_ok());
        // The container namespace is the pod's own: DEL still undoes there.
        assert!(g.change(Side::Container, "eth0").is_ok());
    }

    #[test]
    fn only_add_creates_and_only_add_and_del_write() {
        for command in [Command::Check, Command::Del, Command::Gc, Command::Status] {
            let g = grants(command);
            let err = g.create(Side::Node, "vethnew").unwrap_err();
            assert!(err.contains("during ADD only"), "{err}");
            assert!(g.create(Side::Container, "eth0").is_err());
        }
        let del = grants(Command::Del);
        assert!(del.change(Side::Container, "eth0").is_ok());
        assert!(del.delete(Side::Node, "veth0123abcd").is_ok());
        assert!(del
            .sysctl(Side::Container, "net.ipv4.conf.eth0.arp_notify", true)
            .is_ok());
        for command in [Command::Check, Command::Gc, Command::Status] {
            let g = grants(command);
            assert!(g.change(Side::Container, "eth0").is_err());
            assert!(g.delete(Side::Container, "eth0").is_err());
            assert!(g.enslave(Side::Container, "cni0").is_err());
            assert!(g
                .sysctl(Side::Container, "net.ipv4.conf.eth0.arp_notify", true)
                .is_err());
            // Reading stays allowed.
            assert!(g.sysctl(Side::Node, "net.ipv4.ip_forward", false).is_ok());
        }
    }

    #[test]
    fn taps_only_in_the_container_with_the_configured_owner() {
        let g = grants(Command::Add);
        assert!(g.create_tap(Side::Container, "eth0", None, None).is_ok());
        assert!(g
            .create_tap(Side::Container, "eth0", Some(1000), None)
            .is_ok());
        assert!(g
            .create_tap(Side::Container, "eth0", Some(0), None)
            .is_err());
        assert!(g
            .create_tap(Side::Container, "eth0", None, Some(5))
            .is_err());
        assert!(g.create_tap(Side::Node, "tapx", None, None).is_err());
        // A VM's tap on the node only when the config asks, and still only
        // with its owners; a node macvtap likewise; passthru never implied.
        let mut vm = grants(Command::Add);
        vm.config.vm_node = true;
        assert!(vm.create_tap(Side::Node, "tapx", Some(1000), None).is_ok());
        assert!(vm.create_tap(Side::Node, "tapx", Some(0), None).is_err());
        assert!(vm
            .create_macvlan(Side::Node, "mvtx", MacvlanMode::Bridge)
            .is_ok());
        assert!(vm
            .create_macvlan(Side::Node, "mvtx", MacvlanMode::Passthru)
            .is_err());
        let mut del = grants(Command::Del);
        del.config.vm_node = true;
        assert!(del
            .create_tap(Side::Node, "tapx", Some(1000), None)
            .is_err());
    }

    #[test]
    fn macvlans_go_into_the_container_and_passthru_needs_the_config() {
        let mut g = grants(Command::Add);
        assert!(g
            .create_macvlan(Side::Container, "eth0", MacvlanMode::Bridge)
            .is_ok());
        assert!(g
            .create_macvlan(Side::Node, "mv0", MacvlanMode::Bridge)
            .is_err());
        assert!(g
            .create_macvlan(Side::Container, "eth0", MacvlanMode::Passthru)
            .is_err());
        g.config.passthru = true;
        assert!(g
            .create_macvlan(Side::Container, "eth0", MacvlanMode::Passthru)
            .is_ok());
    }

    #[test]
    fn vlans_and_ipvlans_go_into_the_container_during_add_only() {
        let mut g = grants(Command::Add);
        g.config.vm_node = true;
        for kind in ["vlan", "ipvlan"] {
            assert!(g.create_stacked(Side::Container, "eth0", kind).is_ok());
            // Not even for a VM's config: a VM gets a tap or a macvtap.
            let e = g.create_stacked(Side::Node, "v0", kind).unwrap_err();
            assert!(e.contains("container namespace only"), "{e}");
            assert!(grants(Command::Del)
                .create_stacked(Side::Container, "eth0", kind)
                .is_err());
        }
    }

    #[test]
    fn node_addresses_and_routes_stay_inside_the_attachments_networks() {
        let g = grants(Command::Add);
        let net = |s: &str| crate::net::parse_cidr(s).unwrap();
        assert!(g
            .address(Side::Node, "cni0", &net("10.1.2.1/24"), true)
            .is_ok());
        assert!(g
            .address(Side::Node, "cni0", &net("10.1.2.1/32"), true)
            .is_ok());
        assert!(g
            .address(Side::Node, "cni0", &net("10.1.2.1/16"), true)
            .is_err());
        assert!(g
            .address(Side::Node, "cni0", &net("192.168.1.10/24"), true)
            .is_err());
        // Removing is not adding (forceAddress replaces a bridge address).
        assert!(g
            .address(Side::Node, "cni0", &net("192.168.1.10/24"), false)
            .is_ok());
        // The container's addresses are the pod's business.
        assert!(g
            .address(Side::Container, "eth0", &net("192.168.1.10/24"), true)
            .is_ok());
        assert!(g
            .route(Side::Node, "veth0123abcd", &net("10.1.2.5/32"), None, true)
            .is_ok());
        assert!(g
            .route(Side::Node, "veth0123abcd", &net("fd00::5/128"), None, true)
            .is_ok());
        for dst in ["0.0.0.0/1", "128.0.0.0/1", "0.0.0.0/0", "10.0.0.0/8"] {
            let err = g
                .route(Side::Node, "cni0", &net(dst), None, true)
                .unwrap_err();
            assert!(err.contains("outside the attachment's networks"), "{err}");
        }
        assert!(g
            .route(Side::Node, "cni0", &net("10.1.2.0/24"), Some(254), true)
            .is_ok());
    }

    #[test]
    fn route_tables() {
        let g = grants(Command::Add);
        let dst = crate::net::parse_cidr("10.1.2.5/32").unwrap();
        for table in [0, 253, 255] {
            assert!(g
                .route(Side::Container, "eth0", &dst, Some(table), true)
                .is_err());
            assert!(g
                .route(Side::Node, "cni0", &dst, Some(table), true)
                .is_err());
        }
        assert!(g
            .route(Side::Container, "eth0", &dst, Some(100), true)
            .is_ok());
        assert!(g.route(Side::Node, "cni0", &dst, Some(100), true).is_err());
    }

    #[test]
    fn config_named_container_bridge_is_a_master_only() {
        let g = grants(Command::Add);
        // cni0 is config-named: in the container it may become a master...
        assert!(g.enslave(Side::Container, "cni0").is_ok());
        // ...but is not changed, deleted or its sysctls written.
        assert!(g.change(Side::Container, "cni0").is_err());
        assert!(g.delete(Side::Container, "cni0").is_err());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.cni0.forwarding", true)
            .is_err());
        // A bridge the config does not name stays out of reach.
        assert!(g.enslave(Side::Container, "br-other").is_err());
        // What may be changed may also be a master; the node side is
        // unchanged (config-named or created links only).
        assert!(g.enslave(Side::Container, "eth0").is_ok());
        assert!(g.enslave(Side::Node, "cni0").is_ok());
        assert!(g.enslave(Side::Node, "veth0123abcd").is_ok());
        assert!(g.enslave(Side::Node, "br-other").is_err());
    }

    #[test]
    fn sysctls() {
        let g = grants(Command::Add);
        assert!(g.sysctl(Side::Node, "kernel.hostname", false).is_err());
        assert!(g.sysctl(Side::Container, "kernel.shmmax", true).is_err());
        assert!(g
            .sysctl(Side::Container, "net.core.somaxconn", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.eth0.arp_notify", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.all.rp_filter", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.eth1.arp_notify", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.ipv4.ip_forward", true).is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv6.conf.all.forwarding", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv4.conf.all.rp_filter", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.core.somaxconn", true).is_err());
        assert!(g.sysctl(Side::Node, "net.core.somaxconn", false).is_ok());
        assert_eq!(
            g.sysctl(Side::Node, "net.ipv4.conf.veth0123abcd.accept_ra", true),
            Ok(Basis::Created("veth0123abcd".into(), id(7)))
        );
        assert!(g
            .sysctl(Side::Node, "net.ipv6.conf.cni0.accept_ra", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv4.conf.lo.accept_ra", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.ipv4.conf..x", true).is_err());
    }
}
