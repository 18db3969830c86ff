//! The host's import functions, called with arbitrary arguments in
//! arbitrary order, as a hostile component could (and some no component
//! could: forged handle indices), against the in-memory backends of
//! `sandbox::harness`; then the policy layer (`policy::Grants`) alone with
//! arbitrary grants and requests.
//!
//! Properties: no panic; after every call nothing that is not the
//! attachment's has changed (links, addresses, routes, sysctls of others;
//! every new link is recorded as the attachment's); after the call ends
//! (committed or not), other scopes of the store are untouched and another
//! attachment's live entries are released only by GC. For `Grants`: what
//! it allows stays inside `net.` and inside the attachment.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};
use wasm_cni::cni::Command;
use wasm_cni::filter::{Proto, Rule};
use wasm_cni::sandbox::harness::{
    FilterRule, Handle, Import, ImportHarness, RouteArgs, PORT_MAPPINGS,
};

use wasm_cni::net::{IpNet, Ipv4Net, LinkId};
use wasm_cni::sandbox::policy::{ConfigGrants, FilterNeed, FilterOp, Grants, PortGrant, Side};

/// Link names: the scene's (see `sandbox::harness`), a few fresh ones, or
/// anything.
#[derive(Arbitrary, Debug)]
enum Name {
    Eth0,
    Lo,
    Other0,
    Other1,
    Uplink,
    Veth9,
    Eth9,
    Cni0,
    Fresh(u8),
    Raw(String),
}

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Eth0 => "eth0".into(),
            Name::Lo => "lo".into(),
            Name::Other0 => "other0".into(),
            Name::Other1 => "other1".into(),
            Name::Uplink => "uplink".into(),
            Name::Veth9 => "veth9".into(),
            Name::Eth9 => "eth9".into(),
            Name::Cni0 => "cni0".into(),
            Name::Fresh(n) => format!("vfz{}", n % 4),
            Name::Raw(s) => s.clone(),
        }
    }
}

const SETTINGS: &[&str] = &[
    "forwarding",
    "rp_filter",
    "proxy_arp",
    "accept_ra",
    "arp_notify",
    "disable_ipv6",
];
const GLOBAL_KEYS: &[&str] = &[
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    "net.core.somaxconn",
    "kernel.hostname",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Global(u8),
    /// `net.ipv{4,6}.{conf,neigh}.<iface>.<setting>`
    Iface(bool, bool, IfaceName, u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum IfaceName {
    Link(Name),
    All,
    Default,
}

impl Key {
    fn get(&self) -> String {
        match self {
            Key::Global(i) => GLOBAL_KEYS[*i as usize % GLOBAL_KEYS.len()].into(),
            Key::Iface(v6, neigh, iface, s) => {
                let iface = match iface {
                    IfaceName::Link(n) => n.get(),
                    IfaceName::All => "all".into(),
                    IfaceName::Default => "default".into(),
                };
                format!(
                    "net.ipv{}.{}.{iface}.{}",
                    if *v6 { 6 } else { 4 },
                    if *neigh { "neigh" } else { "conf" },
                    SETTINGS[*s as usize % SETTINGS.len()]
                )
            }
            Key::Raw(s) => s.clone(),
        }
    }
}

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

#[derive(Arbitrary, Debug)]
enum Text {
    Cidr(u8),
    Ip(u8),
    Raw(String),
}

impl Text {
    fn get(&self) -> String {
        match self {
            Text::Cidr(i) => CIDRS[*i as usize % CIDRS.len()].into(),
            Text::Ip(i) => IPS[*i as usize % IPS.len()].into(),
            Text::Raw(s) => s.clone(),
        }
    }
}

/// Store keys: the seeded ones of this scope and of others, or anything.
#[derive(Arbitrary, Debug)]
enum StoreKey {
    Seeded(u8),
    Raw(String),
}

impl StoreKey {
    fn get(&self) -> String {
        const K: &[&str] = &["10.1.0.2", "10.1.0.3", "10.2.0.2", "10.3.0.2", "last"];
        match self {
            StoreKey::Seeded(i) => K[*i as usize % K.len()].into(),
            StoreKey::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum H {
    Issued(u8),
    Forged(u32),
}

impl H {
    fn get(&self) -> Handle {
        match self {
            H::Issued(i) => Handle::Issued(*i as usize),
            H::Forged(r) => Handle::Forged(*r),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Route {
    dst: Text,
    gw: Option<Text>,
    dev: Option<Name>,
    src: Option<Text>,
    mtu: Option<u32>,
    priority: Option<u32>,
    table: Option<u32>,
    scope: Option<u8>,
}

impl Route {
    fn get(&self) -> RouteArgs {
        RouteArgs {
            dst: self.dst.get(),
            gw: self.gw.as_ref().map(Text::get),
            dev: self.dev.as_ref().map(Name::get),
            src: self.src.as_ref().map(Text::get),
            mtu: self.mtu,
            advmss: None,
            priority: self.priority,
            table: self.table,
            scope: self.scope,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Log(u8, String),
    ContainerNetns,
    NodeNetns,
    Drop(H),
    Veth(H, Name, Name, H, Option<u32>, Option<String>),
    Bridge(H, Name, Option<u32>),
    Macvlan(H, Name, Name, u8, Option<u32>, H, bool),
    Tap(H, Name, Option<u32>, bool, Option<u32>),
    Vlan(H, Name, Name, u16, Option<u32>, H),
    Ipvlan(H, Name, Name, u8, Option<u32>, H),
    LinkByName(H, Name),
    LinkByIndex(H, u32),
    ListLinks(H),
    SetLink(
        H,
        Name,
        Option<bool>,
        Option<u32>,
        Option<String>,
        Option<Name>,
        Option<bool>,
        Option<bool>,
    ),
    Delete(H, Name),
    AddAddress(H, Name, Text),
    DelAddress(H, Name, Text),
    ListAddresses(H, Name),
    AddRoute(H, Route),
    DelRoute(H, Route),
    ListRoutes(H, Name, Option<u32>),
    GetSysctl(H, Key),
    SetSysctl(H, Key, String),
    Reserve(StoreKey),
    ReleaseByOwner,
    Release(StoreKey),
    GetByOwner,
    List,
    Now,
    GetValue(StoreKey),
    SetValue(StoreKey, Option<String>),
    ReadFile(String),
    Ipam(u8),
    Filter(u8, Vec<FRule>),
    CreateIfb(H, Name, Option<u32>),
    LimitRate(H, Name, u64, u64),
    RedirectIngress(H, Name, Name),
    ListQdiscs(H, Name),
}

/// A filter rule: addresses from the scene's (the attachment's own is
/// `10.1.0.5`, another attachment's `10.1.0.77`) or anything.
#[derive(Arbitrary, Debug)]
enum FRule {
    Masquerade(Addr, Vec<Text>),
    PortMap(u8, Option<Addr>, u16, Addr, u16),
    /// One of the two granted mappings, to the given address.
    Granted(bool, Addr),
    Hairpin(Addr),
    Forward(Addr),
    Isolate(Name),
    MacSpoof(Name, String),
}

#[derive(Arbitrary, Debug)]
enum Addr {
    Own,
    Other,
    Node,
    Text(Text),
}

impl Addr {
    fn get(&self) -> String {
        match self {
            Addr::Own => "10.1.0.5".into(),
            Addr::Other => "10.1.0.77".into(),
            Addr::Node => "192.168.9.1".into(),
            Addr::Text(t) => t.get(),
        }
    }
}

impl FRule {
    fn get(&self) -> FilterRule {
        match self {
            FRule::Masquerade(a, except) => {
                FilterRule::Masquerade(a.get(), except.iter().map(Text::get).collect())
            }
            FRule::PortMap(protocol, host_ip, host_port, a, port) => FilterRule::PortMap {
                protocol: *protocol,
                host_ip: host_ip.as_ref().map(Addr::get),
                host_port: *host_port,
                address: a.get(),
                port: *port,
            },
            FRule::Granted(udp, a) => FilterRule::PortMap {
                protocol: u8::from(*udp),
                host_ip: udp.then(|| "192.168.9.1".into()),
                host_port: if *udp { 5353 } else { 8080 },
                address: a.get(),
                port: if *udp { 53 } else { 80 },
            },
            FRule::Hairpin(a) => FilterRule::Hairpin(a.get()),
            FRule::Forward(a) => FilterRule::Forward(a.get()),
            FRule::Isolate(b) => FilterRule::Isolate(b.get()),
            FRule::MacSpoof(l, mac) => FilterRule::MacSpoof(l.get(), mac.clone()),
        }
    }
}

impl Op {
    fn import(&self) -> Import {
        match self {
            Op::Log(l, m) => Import::Log(*l, m.clone()),
            Op::ContainerNetns => Import::ContainerNetns,
            Op::NodeNetns => Import::NodeNetns,
            Op::Drop(h) => Import::DropNetns(h.get()),
            Op::Veth(ns, name, peer, peer_ns, mtu, mac) => Import::CreateVeth {
                ns: ns.get(),
                name: name.get(),
                peer: peer.get(),
                peer_ns: peer_ns.get(),
                mtu: *mtu,
                mac: mac.clone(),
            },
            Op::Bridge(ns, name, mtu) => Import::EnsureBridge {
                ns: ns.get(),
                name: name.get(),
                mtu: *mtu,
            },
            Op::Macvlan(ns, name, master, mode, mtu, target, tap) => Import::CreateMacvlan {
                ns: ns.get(),
                name: name.get(),
                master: master.get(),
                mode: *mode,
                mtu: *mtu,
                mac: None,
                target: target.get(),
                tap: *tap,
            },
            Op::Vlan(ns, name, master, vlan_id, mtu, target) => Import::CreateVlan {
                ns: ns.get(),
                name: name.get(),
                master: master.get(),
                vlan_id: *vlan_id,
                mtu: *mtu,
                target: target.get(),
            },
            Op::Ipvlan(ns, name, master, mode, mtu, target) => Import::CreateIpvlan {
                ns: ns.get(),
                name: name.get(),
                master: master.get(),
                mode: *mode,
                mtu: *mtu,
                target: target.get(),
            },
            Op::Tap(ns, name, mtu, multi_queue, owner) => Import::CreateTap {
                ns: ns.get(),
                name: name.get(),
                mtu: *mtu,
                mac: None,
                multi_queue: *multi_queue,
                owner: *owner,
                group: None,
            },
            Op::LinkByName(ns, n) => Import::LinkByName(ns.get(), n.get()),
            Op::LinkByIndex(ns, i) => Import::LinkByIndex(ns.get(), *i),
            Op::ListLinks(ns) => Import::ListLinks(ns.get()),
            Op::SetLink(ns, name, up, mtu, mac, master, promisc, hairpin) => Import::SetLink {
                ns: ns.get(),
                name: name.get(),
                up: *up,
                mtu: *mtu,
                mac: mac.clone(),
                master: master.as_ref().map(Name::get),
                promisc: *promisc,
                allmulti: None,
                txqlen: None,
                hairpin: *hairpin,
            },
            Op::Delete(ns, n) => Import::DeleteLink(ns.get(), n.get()),
            Op::AddAddress(ns, l, c) => Import::AddAddress(ns.get(), l.get(), c.get()),
            Op::DelAddress(ns, l, c) => Import::DelAddress(ns.get(), l.get(), c.get()),
            Op::ListAddresses(ns, l) => Import::ListAddresses(ns.get(), l.get()),
            Op::AddRoute(ns, r) => Import::AddRoute(ns.get(), r.get()),
            Op::DelRoute(ns, r) => Import::DelRoute(ns.get(), r.get()),
            Op::ListRoutes(ns, l, t) => Import::ListRoutes(ns.get(), l.get(), *t),
            Op::GetSysctl(ns, k) => Import::GetSysctl(ns.get(), k.get()),
            Op::SetSysctl(ns, k, v) => Import::SetSysctl(ns.get(), k.get(), v.clone()),
            Op::Reserve(k) => Import::Reserve(k.get()),
            Op::ReleaseByOwner => Import::ReleaseByOwner,
            Op::Release(k) => Import::Release(k.get()),
            Op::GetByOwner => Import::GetByOwner,
            Op::List => Import::ListEntries,
            Op::Now => Import::Now,
            Op::GetValue(k) => Import::GetValue(k.get()),
            Op::SetValue(k, v) => Import::SetValue(k.get(), v.clone()),
            Op::ReadFile(p) => Import::ReadConfigFile(p.clone()),
            Op::Ipam(o) => Import::Ipam(*o),
            Op::Filter(op, rules) => Import::Filter(*op, rules.iter().map(FRule::get).collect()),
            Op::CreateIfb(ns, n, mtu) => Import::CreateIfb(ns.get(), n.get(), *mtu),
            Op::LimitRate(ns, n, rate, burst) => {
                Import::LimitRate(ns.get(), n.get(), *rate, *burst)
            }
            Op::RedirectIngress(ns, n, to) => Import::RedirectIngress(ns.get(), n.get(), to.get()),
            Op::ListQdiscs(ns, n) => Import::ListQdiscs(ns.get(), n.get()),
        }
    }
}

/// A direct question to the policy layer.
#[derive(Arbitrary, Debug)]
struct PolicyCase {
    command: u8,
    ifname: Name,
    config_named: Vec<Name>,
    created_node: Vec<Name>,
    created_container: Vec<Name>,
    node: bool,
    key: Key,
    write: bool,
    /// The attachment's own addresses, and a node route to ask about.
    own: Vec<(u32, u8)>,
    route: (u32, u8, Option<u32>),
    dev: Name,
    /// A filter rule to ask about, with the operation (add, check, remove).
    rule: Option<(u8, PRule)>,
}

/// A rule as the policy sees it (already parsed).
#[derive(Arbitrary, Debug)]
enum PRule {
    Masquerade(u32),
    PortMap(bool, Option<u32>, u16, u32, u16),
    Hairpin(u32),
    Forward(u32),
    Isolate(Name),
    MacSpoof(Name, [u8; 6]),
}

impl PRule {
    fn get(&self) -> Rule {
        let ip = |a: u32| IpAddr::from(Ipv4Addr::from(a));
        match self {
            PRule::Masquerade(a) => Rule::Masquerade {
                source: ip(*a),
                except: Vec::new(),
            },
            PRule::PortMap(udp, host_ip, host_port, dst, dst_port) => Rule::PortMap {
                proto: if *udp { Proto::Udp } else { Proto::Tcp },
                host_ip: host_ip.map(ip),
                host_port: *host_port,
                dst: ip(*dst),
                dst_port: *dst_port,
            },
            PRule::Hairpin(a) => Rule::HairpinMasquerade { dst: ip(*a) },
            PRule::Forward(a) => Rule::AllowForward { addr: ip(*a) },
            PRule::Isolate(b) => Rule::IsolateBridge { bridge: b.get() },
            PRule::MacSpoof(l, mac) => Rule::MacSpoofCheck {
                link: l.get(),
                mac: *mac,
            },
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    command: u8,
    budget: u8,
    commit: bool,
    ops: Vec<Op>,
    policy: Vec<PolicyCase>,
}

const COMMANDS: [Command; 5] = [
    Command::Add,
    Command::Del,
    Command::Check,
    Command::Status,
    Command::Gc,
];

fn v4(addr: u32, prefix: u8) -> IpNet {
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::from(addr), prefix % 33))
}

fn check_policy(c: &PolicyCase) {
    let created = |names: &[Name]| {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let id = LinkId {
                    index: i as u32 + 2,
                    kind: "veth".into(),
                };
                (n.get(), id)
            })
            .collect()
    };
    let g = Grants {
        command: COMMANDS[c.command as usize % COMMANDS.len()],
        ifname: c.ifname.get(),
        config: ConfigGrants {
            named: c.config_named.iter().map(Name::get).collect(),
            ..ConfigGrants::default()
        },
        created_node: created(&c.created_node),
        created_container: created(&c.created_container),
        own_nets: c.own.iter().map(|&(a, p)| v4(a, p)).collect(),
        ports: PortGrant::from_config(PORT_MAPPINGS),
    };
    if let Some((op, rule)) = &c.rule {
        check_filter_policy(&g, *op, &rule.get());
    }
    // Writes only in ADD and DEL; a node route only inside the attachment's
    // networks and in the main table.
    let (dst, prefix, table) = c.route;
    let dst = v4(dst, prefix);
    if g.route(Side::Node, &c.dev.get(), &dst, table, true).is_ok() {
        assert!(matches!(g.command, Command::Add | Command::Del));
        assert!(table.is_none_or(|t| t == 254), "{table:?}");
        assert!(
            g.own_nets
                .iter()
                .any(|n| n.prefix_len() <= dst.prefix_len() && n.contains(&dst.addr())),
            "{dst} outside {:?}",
            g.own_nets
        );
    }
    if c.write && g.sysctl(Side::Container, &c.key.get(), true).is_ok() {
        assert!(matches!(g.command, Command::Add | Command::Del));
    }
    let side = if c.node { Side::Node } else { Side::Container };
    let key = c.key.get();
    if g.sysctl(side, &key, c.write).is_err() {
        return;
    }
    assert!(key.starts_with("net.") && !key.contains(".."), "{key}");
    if !c.write {
        return;
    }
    // A per-interface key names a link the plugin may change (or, in the
    // container, every link: the namespace is the attachment's own); in the
    // node only the two forwarding switches are global.
    for prefix in [
        "net.ipv4.conf.",
        "net.ipv6.conf.",
        "net.ipv4.neigh.",
        "net.ipv6.neigh.",
    ] {
        if let Some(rest) = key.strip_prefix(prefix) {
            let (iface, _) = rest.rsplit_once('.').expect("a setting");
            let forwarding = key == "net.ipv4.ip_forward" || key == "net.ipv6.conf.all.forwarding";
            match side {
                Side::Node => assert!(
                    forwarding || g.change(side, iface).is_ok(),
                    "node {key} allowed"
                ),
                Side::Container => assert!(
                    matches!(iface, "all" | "default") || g.change(side, iface).is_ok(),
                    "container {key} allowed"
                ),
            }
            return;
        }
    }
    if side == Side::Node {
        assert!(
            key == "net.ipv4.ip_forward" || key == "net.ipv6.conf.all.forwarding",
            "{key}"
        );
    }
}

/// What the policy lets through for a filter rule: additions only in ADD,
/// removals in ADD and DEL; an added rule names only the attachment's own
/// addresses (checks and removals match only its own, tagged rules,
/// whatever they name); an added port map is a granted one; a node link is
/// one the attachment created.
fn check_filter_policy(g: &Grants, op: u8, rule: &Rule) {
    let op = [FilterOp::Add, FilterOp::Check, FilterOp::Remove][op as usize % 3];
    let Ok(need) = g.filter(rule, op) else {
        return;
    };
    match op {
        FilterOp::Add => assert_eq!(g.command, Command::Add),
        FilterOp::Remove => assert!(matches!(g.command, Command::Add | Command::Del)),
        FilterOp::Check => {}
    }
    let own = |a: &IpAddr| op != FilterOp::Add || g.own_nets.iter().any(|n| n.addr() == *a);
    match rule {
        Rule::Masquerade { source: a, .. }
        | Rule::HairpinMasquerade { dst: a }
        | Rule::AllowForward { addr: a } => assert!(own(a), "{rule}"),
        Rule::PortMap {
            proto,
            host_ip,
            host_port,
            dst,
            dst_port,
        } => {
            assert!(own(dst), "{rule}");
            if op == FilterOp::Add {
                assert!(
                    g.ports.iter().any(|p| p.proto == *proto
                        && p.host_ip == *host_ip
                        && p.host_port == *host_port
                        && p.container_port == *dst_port),
                    "{rule}"
                );
            }
        }
        Rule::IsolateBridge { bridge } => {
            assert_eq!(need, FilterNeed::PortOf(bridge.clone()), "{rule}")
        }
        Rule::MacSpoofCheck { link, .. } => match need {
            FilterNeed::Created(name, id) => {
                assert!(
                    &name == link && g.created_node.get(link) == Some(&id),
                    "{rule}"
                )
            }
            other => panic!("{rule}: {other:?}"),
        },
    }
}

fuzz_target!(|input: Input| {
    let command = COMMANDS[input.command as usize % COMMANDS.len()];
    let budget = u64::from(input.budget) + 1;
    let mut h = ImportHarness::new(command, budget).expect("the scene");
    for op in &input.ops {
        let import = op.import();
        // A trap ends a real call; the harness carries on to make sure the
        // host stays consistent anyway.
        let _ = h.call(import);
        if let Err(why) = h.check() {
            panic!("after {op:?}: {why}");
        }
    }
    if let Err(why) = h.finish(input.commit) {
        panic!("{why}");
    }
    for case in &input.policy {
        check_policy(case);
    }
});
