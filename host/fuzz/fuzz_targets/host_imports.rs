//! The host's import functions, called with arbitrary arguments in
//! arbitrary order, as a hostile component could (and some no component
//! could: forged handle indices), against the in-memory backends of
//! `sandbox::harness`; then the policy layer (`policy::Grants`) alone with
//! arbitrary grants and requests. The calls are drawn from the harness's own
//! import list (`harness::Import` derives `Arbitrary`), so a new import is
//! fuzzed without a change here.
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
use wasm_cni_engine::sandbox::harness::{draw, Import, ImportHarness, PORT_MAPPINGS};
use wasm_cni_kernel::filter::{Proto, Rule};
use wasm_cni_protocol::Command;

use wasm_cni_engine::sandbox::policy::{
    ConfigGrants, FilterNeed, FilterOp, Grants, PortGrant, Side,
};
use wasm_cni_kernel::net::{IpNet, Ipv4Net, LinkId};

/// A direct question to the policy layer.
#[derive(Arbitrary, Debug)]
struct PolicyCase {
    command: u8,
    #[arbitrary(with = draw::name)]
    ifname: String,
    #[arbitrary(with = names)]
    config_named: Vec<String>,
    #[arbitrary(with = names)]
    created_node: Vec<String>,
    #[arbitrary(with = names)]
    created_container: Vec<String>,
    node: bool,
    #[arbitrary(with = draw::sysctl)]
    key: String,
    write: bool,
    /// The attachment's own addresses, and a node route to ask about.
    own: Vec<(u32, u8)>,
    route: (u32, u8, Option<u32>),
    #[arbitrary(with = draw::name)]
    dev: String,
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
    Isolate(#[arbitrary(with = draw::name)] String),
    MacSpoof(#[arbitrary(with = draw::name)] String, [u8; 6]),
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
            PRule::Isolate(b) => Rule::IsolateBridge { bridge: b.clone() },
            PRule::MacSpoof(l, mac) => Rule::MacSpoofCheck {
                link: l.clone(),
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
    ops: Vec<Import>,
    policy: Vec<PolicyCase>,
}

/// Link names as the harness draws them.
fn names(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<Vec<String>> {
    (0..u.int_in_range(0..=4u8)?)
        .map(|_| draw::name(u))
        .collect()
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
    let created = |names: &[String]| {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let id = LinkId {
                    index: i as u32 + 2,
                    kind: "veth".into(),
                };
                (n.clone(), id)
            })
            .collect()
    };
    let g = Grants {
        command: COMMANDS[c.command as usize % COMMANDS.len()],
        ifname: c.ifname.clone(),
        config: ConfigGrants {
            named: c.config_named.iter().cloned().collect(),
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
    if g.route(Side::Node, &c.dev, &dst, table, true).is_ok() {
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
    if c.write && g.sysctl(Side::Container, &c.key, true).is_ok() {
        assert!(matches!(g.command, Command::Add | Command::Del));
    }
    let side = if c.node { Side::Node } else { Side::Container };
    let key = c.key.clone();
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
    for import in &input.ops {
        // A trap ends a real call; the harness carries on to make sure the
        // host stays consistent anyway.
        let _ = h.call(import.clone());
        if let Err(why) = h.check() {
            panic!("after {import:?}: {why}");
        }
    }
    if let Err(why) = h.finish(input.commit) {
        panic!("{why}");
    }
    for case in &input.policy {
        check_policy(case);
    }
});
