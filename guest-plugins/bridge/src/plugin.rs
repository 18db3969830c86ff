//! The bridge verbs, generic over the host.

use wasm_cni_sdk::check::{self, mac_matches};
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::error::code;
use wasm_cni_sdk::filter::Rule;
use wasm_cni_sdk::iface::{self, configure_iface, try_sysctl, Notify};
use wasm_cni_sdk::ip::{parse_cidr, Family, IpNet, IpNetExt};
use wasm_cni_sdk::net::{iface_sysctl, Link, LinkSettings, NetError, Ops};
use wasm_cni_sdk::plugin::{self, open_container, open_node, DelOrder};
use wasm_cni_sdk::veth::setup_veth;
use wasm_cni_sdk::vm::{self, VmConf, VmInterface};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Interface, Plugin, Request, Route};

use crate::conf::{self, Conf};

/// Index of the container interface in the bridge result.
const CONTAINER_INDEX: u32 = 2;

pub struct Bridge;

impl Plugin for Bridge {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = conf::load(&req.config, &req.args)?;
        conf.reject_unsupported()?;
        let node = open_node(host)?;
        let bridge = setup_bridge(&node, &conf)?;
        if let Some(vm) = &conf.vm {
            return add_vm(host, &node, &conf, req, &bridge, vm);
        }
        let cont = open_container(host, req)?;
        let pair = setup_veth(
            &node,
            &cont,
            &conf.net.name,
            &req.container_id,
            &req.ifname,
            conf.mtu,
            conf.mac.as_deref(),
        )?;
        let (host_veth, cont_veth) = (pair.host, pair.container);
        // Deleting the container end also deletes the host end.
        let added = configure(
            host, &node, &cont, &conf, req, &bridge, &host_veth, &cont_veth,
        );
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        if let Some(vm) = vm::of_config(&req.config) {
            // The VM's link is on the node; the container is not ours.
            let net: NetConf = config::from_str(&req.config)?;
            let name = vm::link_name(vm.interface, &net.name, &req.container_id, &req.ifname);
            open_node(host)?
                .delete_link_if_exists(&name)
                .map_err(|e| e.into_cni(format_args!("failed to delete {name:?}")))?;
            return plugin::release_ipam(host, &net);
        }
        // As the reference bridge: the veth first (no netns, or it is gone:
        // nothing to delete), then the IP.
        plugin::del_interface(host, req, DelOrder::LinkFirst)
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = conf::load(&req.config, &req.args)?;
        if let Some(vm) = &conf.vm {
            return check_vm(host, &conf, req, vm);
        }
        let cont = open_container(host, req)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let node = open_node(host)?;
        check_links(&node, &cont, &conf, req, prev)?;
        check::validate_interface_ips(&cont, &req.ifname, prev)?;
        check::validate_routes(&cont, &prev.routes)?;
        let rules = filter_rules(&conf, prev)?;
        if !rules.is_empty() {
            host.filter_check(&rules)
                .map_err(|e| e.into_cni("ipMasq/macspoofchk rules"))?;
        }
        Ok(())
    }

    /// IPAM's STATUS, then the bridge itself: missing is fine (ADD creates
    /// it); a link of that name that is not a bridge is 50 (ADD would fail);
    /// a bridge that is down is 51 — ADD would set it up again, but the
    /// containers already on it have no connectivity until then.
    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        plugin::forward_status(host, config)?;
        let conf = conf::load(config, &[])?;
        let name = conf.bridge.as_str();
        match open_node(host)?.link_by_name(name) {
            Ok(br) if br.kind != "bridge" => Err(CniError::new(
                code::NOT_AVAILABLE,
                format!("{name:?} exists but is not a bridge: ADD would fail"),
            )),
            Ok(br) if !br.up => Err(CniError::new(
                code::LIMITED_CONNECTIVITY,
                format!(
                    "bridge {name:?} is down: containers attached to it have no connectivity \
                     (the next ADD sets it up)"
                ),
            )),
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into_cni(format_args!("failed to look up bridge {name:?}"))),
        }
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        plugin::forward_gc(host, config)
    }
}

/// Index of the VM's tap or macvtap in a `vm` result.
const VM_INDEX: u32 = 1;

/// `vm`: the tap (a port of the bridge) or macvtap (on `vm.parent`, else
/// on the bridge) on the node; IPAM addresses reserved and reported for
/// it, configured on no link but the bridge's gateway.
fn add_vm<H: Host>(
    host: &H,
    node: &H::Ns,
    conf: &Conf,
    req: &Request,
    bridge: &Link,
    vm: &VmConf,
) -> Result<CniResult, CniError> {
    let name = vm::link_name(vm.interface, &conf.net.name, &req.container_id, &req.ifname);
    let link = vm::create(
        node,
        vm,
        &name,
        conf.mtu,
        conf.mac.as_deref(),
        Some(&conf.bridge),
    )?;
    let added = configure_vm(host, node, conf, bridge, &link, vm);
    if added.is_err() {
        let _ = node.delete_link_if_exists(&name);
    }
    added
}

fn configure_vm<H: Host>(
    host: &H,
    node: &H::Ns,
    conf: &Conf,
    bridge: &Link,
    link: &Link,
    vm: &VmConf,
) -> Result<CniResult, CniError> {
    if vm.interface == VmInterface::Tap {
        node.set_link(
            &link.name,
            &LinkSettings {
                master: Some(conf.bridge.clone()),
                hairpin: conf.hairpin.then_some(true),
                ..LinkSettings::default()
            },
        )
        .map_err(|e| {
            e.into_cni(format_args!(
                "failed to connect {} to bridge {}",
                link.name, conf.bridge
            ))
        })?;
    }
    let mut result = CniResult {
        interfaces: vec![
            Interface {
                name: bridge.name.clone(),
                mac: Some(bridge.mac.clone()),
                ..Interface::default()
            },
            Interface {
                name: link.name.clone(),
                mac: Some(link.mac.clone()),
                mtu: Some(link.mtu),
                ..Interface::default()
            },
        ],
        ..CniResult::default()
    };
    if conf.net.has_ipam() {
        iface::with_ipam(host, |allocated| {
            iface::require_ips(&allocated)?;
            result.ips = allocated.ips;
            result.routes = allocated.routes;
            result.dns = allocated.dns;
            let gateways = calc_gateways(&mut result, conf, VM_INDEX)?;
            gateway_on_bridge(node, conf, &bridge.mac, &gateways)?;
            add_rules(host, conf, &result)
        })?;
    }
    iface::refresh_mac(node, &mut result.interfaces[1]);
    iface::refresh_mac(node, &mut result.interfaces[0]);
    if let Some(dns) = conf.net.dns_if_set() {
        result.dns = Some(dns);
    }
    Ok(result)
}

/// CHECK of a `vm` attachment: IPAM, the bridge, and the VM's link on the
/// node as the result says (a tap a port of the bridge, a macvtap on its
/// parent), with the result's MAC.
fn check_vm<H: Host>(host: &H, conf: &Conf, req: &Request, vm: &VmConf) -> Result<(), CniError> {
    if conf.net.has_ipam() {
        host.ipam_check()?;
    }
    let prev = check::require_prev_result(req.prev_result.as_ref())?;
    let node = open_node(host)?;
    let name = vm::link_name(vm.interface, &conf.net.name, &req.container_id, &req.ifname);
    let listed = prev
        .interfaces
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| CniError::internal(format!("{name} is not in prevResult")))?;
    let br = node
        .link_by_name(&conf.bridge)
        .map_err(|_| CniError::internal(format!("Interface name {} not found", conf.bridge)))?;
    let l = node
        .link_by_name(&name)
        .map_err(|_| CniError::internal(format!("Interface name {name} not found")))?;
    let (kind, placed) = match vm.interface {
        VmInterface::Tap => ("tun", l.master == Some(br.index)),
        VmInterface::Macvtap => ("macvtap", true),
    };
    if l.kind != kind || !placed {
        return Err(CniError::internal(format!(
            "{name} is a {} link{}, not the {kind} this attachment made",
            l.kind,
            if placed { "" } else { " outside the bridge" }
        )));
    }
    if !mac_matches(listed.mac.as_deref(), &l) {
        return Err(CniError::internal(format!(
            "Interface {name} Mac doesn't match: {}",
            listed.mac.as_deref().unwrap_or("")
        )));
    }
    Ok(())
}

/// Creates or reuses the bridge, applies promisc, `accept_ra=0`, up.
fn setup_bridge<N: Ops>(node: &N, conf: &Conf) -> Result<Link, CniError> {
    let name = conf.bridge.as_str();
    let br = match node.ensure_bridge(name, conf.mtu) {
        Ok(br) if br.kind == "bridge" => br,
        Ok(_) | Err(NetError::Exists(_)) => {
            return Err(CniError::internal(format!(
                "failed to create bridge {name:?}: {name:?} already exists but is not a bridge"
            )))
        }
        Err(e) => {
            return Err(e.into_cni(format_args!(
                "failed to create bridge {name:?}: could not add {name:?}"
            )))
        }
    };
    if conf.promisc && !br.promisc {
        node.set_link(
            name,
            &LinkSettings {
                promisc: Some(true),
                ..LinkSettings::default()
            },
        )
        .map_err(|e| e.into_cni(format_args!("could not set promiscuous mode on {name:?}")))?;
    }
    let _ = try_sysctl(node, &iface_sysctl("ipv6", name, "accept_ra"), "0");
    node.set_up(name)
        .map_err(|e| e.into_cni(format_args!("failed to set {name:?} up")))
}

/// Everything after the veth exists; the caller deletes the veth on error.
#[allow(clippy::too_many_arguments)]
fn configure<H: Host>(
    host: &H,
    node: &H::Ns,
    cont: &H::Ns,
    conf: &Conf,
    req: &Request,
    bridge: &Link,
    host_veth: &Link,
    cont_veth: &Link,
) -> Result<CniResult, CniError> {
    let hv = host_veth.name.as_str();
    node.set_link(
        hv,
        &LinkSettings {
            master: Some(conf.bridge.clone()),
            ..LinkSettings::default()
        },
    )
    .map_err(|e| {
        e.into_cni(format_args!(
            "failed to connect {hv:?} to bridge {}",
            conf.bridge
        ))
    })?;
    if conf.hairpin {
        node.set_link(
            hv,
            &LinkSettings {
                hairpin: Some(true),
                ..LinkSettings::default()
            },
        )
        .map_err(|e| e.into_cni(format_args!("failed to setup hairpin mode for {hv}")))?;
    }

    let mut result = CniResult {
        interfaces: vec![
            Interface {
                name: bridge.name.clone(),
                mac: Some(bridge.mac.clone()),
                ..Interface::default()
            },
            Interface {
                name: hv.to_string(),
                mac: Some(host_veth.mac.clone()),
                ..Interface::default()
            },
            Interface {
                name: req.ifname.clone(),
                mac: Some(cont_veth.mac.clone()),
                sandbox: req.netns.clone(),
                ..Interface::default()
            },
        ],
        ..CniResult::default()
    };

    // The host removes the filter rules with the attachment (and if this
    // ADD fails); inside `with_ipam` so that a refusal releases the IP.
    if conf.net.has_ipam() {
        iface::with_ipam(host, |allocated| {
            configure_l3(node, cont, conf, req, &bridge.mac, allocated, &mut result)?;
            add_rules(host, conf, &result)
        })?;
    } else {
        if !conf.disable_container_interface {
            cont.set_up(&req.ifname)
                .map_err(|e| e.into_cni(format_args!("failed to set {:?} up", req.ifname)))?;
        }
        add_rules(host, conf, &result)?;
    }

    // Enslaving and addressing may change the MACs.
    iface::refresh_mac(node, &mut result.interfaces[1]);
    iface::refresh_mac(node, &mut result.interfaces[0]);
    if let Some(dns) = conf.net.dns_if_set() {
        result.dns = Some(dns);
    }
    Ok(result)
}

fn add_rules<H: Host>(host: &H, conf: &Conf, result: &CniResult) -> Result<(), CniError> {
    let rules = filter_rules(conf, result)?;
    if rules.is_empty() {
        return Ok(());
    }
    host.filter_add(&rules)
        .map_err(|e| e.into_cni("ipMasq/macspoofchk rules"))
}

/// The rules `ipMasq` and `macspoofchk` ask for, from the result: as the
/// reference, each address masqueraded except towards its own subnet, and
/// the host veth (the result's interface 1) letting in only the
/// container's MAC.
fn filter_rules(conf: &Conf, result: &CniResult) -> Result<Vec<Rule>, CniError> {
    let mut rules = Vec::new();
    if conf.ip_masq {
        for ip in &result.ips {
            let addr = iface::parse_address(ip)?;
            rules.push(Rule::Masquerade {
                source: addr.addr().to_string(),
                except: vec![addr.trunc().to_string()],
            });
        }
    }
    if conf.macspoofchk {
        let host_veth = result.interfaces.get(1);
        let cont = result.interfaces.get(CONTAINER_INDEX as usize);
        if let (Some(h), Some(Some(mac))) = (host_veth, cont.map(|c| c.mac.clone())) {
            rules.push(Rule::MacSpoofCheck {
                link: h.name.clone(),
                mac,
            });
        }
    }
    Ok(rules)
}

/// IPAM result → gateways, container addresses and routes, bridge address,
/// forwarding.
fn configure_l3<N: Ops>(
    node: &N,
    cont: &N,
    conf: &Conf,
    req: &Request,
    bridge_mac: &str,
    allocated: CniResult,
    result: &mut CniResult,
) -> Result<(), CniError> {
    iface::require_ips(&allocated)?;
    result.ips = allocated.ips;
    result.routes = allocated.routes;
    result.dns = allocated.dns;
    let gateways = calc_gateways(result, conf, CONTAINER_INDEX)?;

    let ifname = req.ifname.as_str();
    if conf.enable_dad {
        let _ = try_sysctl(cont, &iface_sysctl("ipv6", ifname, "enhanced_dad"), "1");
        let _ = try_sysctl(cont, &iface_sysctl("ipv6", ifname, "accept_dad"), "1");
    } else {
        let _ = try_sysctl(cont, &iface_sysctl("ipv6", ifname, "accept_dad"), "0");
    }
    Notify::Arp.apply(cont, ifname);
    configure_iface(cont, ifname, result)?;

    gateway_on_bridge(node, conf, bridge_mac, &gateways)
}

/// `isGateway`: the gateways on the bridge, forwarding on for their
/// families.
fn gateway_on_bridge<N: Ops>(
    node: &N,
    conf: &Conf,
    bridge_mac: &str,
    gateways: &[IpNet],
) -> Result<(), CniError> {
    if !conf.is_gw {
        return Ok(());
    }
    let mut families = Vec::new();
    for gw in gateways {
        ensure_addr(node, &conf.bridge, bridge_mac, gw, conf.force_address)
            .map_err(|e| e.context("failed to set bridge addr"))?;
        if !families.contains(&gw.family()) {
            families.push(gw.family());
        }
    }
    iface::enable_forwarding(node, &families)
}

/// The reference `calcGateways`: sets `interface`, defaults each gateway to
/// network+1 when `isGateway`, appends a default route per family when
/// `isDefaultGateway` and none with a gateway exists. Returns the bridge
/// addresses (gateway with the ip's prefix) when `isGateway`.
fn calc_gateways(result: &mut CniResult, conf: &Conf, index: u32) -> Result<Vec<IpNet>, CniError> {
    let mut gateways = Vec::new();
    let mut default_found: Vec<Family> = Vec::new();
    for i in 0..result.ips.len() {
        let addr = iface::parse_address(&result.ips[i])?;
        let family = addr.family();
        result.ips[i].interface = Some(index);
        if result.ips[i].gateway.is_none() && conf.is_gw {
            result.ips[i].gateway = Some(addr.gateway().to_string());
        }
        let gateway = iface::parse_gateway(&result.ips[i])?;

        if conf.is_default_gw && !default_found.contains(&family) {
            let default = family.default_route();
            let exists = result
                .routes
                .iter()
                .any(|r| r.gw.is_some() && parse_cidr(&r.dst).is_ok_and(|d| d.trunc() == default));
            if !exists {
                result.routes.push(Route {
                    dst: default.to_string(),
                    gw: gateway.map(|g| g.to_string()),
                    ..Route::default()
                });
            }
            default_found.push(family);
        }

        if conf.is_gw {
            if let Some(gw) = gateway.and_then(|g| addr.with_addr(g)) {
                gateways.push(gw);
            }
        }
    }
    Ok(gateways)
}

/// The reference `ensureAddr`: put `gw` on the bridge; an existing
/// different IPv4 address (or an overlapping IPv6 one) is an error unless
/// `forceAddress`, which replaces it. Then pin the bridge MAC to `mac`, the
/// one it had before any port was added (or, when that was the zero MAC,
/// the one it has now): a bridge whose MAC was never set follows its
/// lowest port MAC.
fn ensure_addr<N: Ops>(
    node: &N,
    bridge: &str,
    mac: &str,
    gw: &IpNet,
    force: bool,
) -> Result<(), CniError> {
    let existing = node
        .list_addresses(bridge)
        .map_err(|e| e.into_cni("could not get list of IP addresses"))?;
    for text in existing {
        let Ok(a) = parse_cidr(&text) else {
            continue;
        };
        if a.family() != gw.family() {
            continue;
        }
        if a == *gw {
            return Ok(());
        }
        if gw.family() == Family::V4 || a.contains(&gw.addr()) || gw.contains(&a.addr()) {
            if force {
                node.del_address(bridge, &text).map_err(|e| {
                    e.into_cni(format_args!("could not remove IP address from {bridge:?}"))
                })?;
            } else {
                return Err(CniError::internal(format!(
                    "{bridge:?} already has an IP address different from {gw}"
                )));
            }
        }
    }
    match node.add_address(bridge, &gw.to_string()) {
        Ok(()) | Err(NetError::Exists(_)) => {}
        Err(e) => {
            return Err(e.into_cni(format_args!("could not add IP address {gw} to {bridge:?}")))
        }
    }
    // A bridge whose ports all left before its MAC was pinned has the zero
    // MAC (the kernel's `br_stp_recalculate_bridge_id`), which cannot be
    // set: pin the one it took from the port just added instead. (The
    // reference fails here, and so would every later gateway ADD on the
    // node: one rolled-back ADD is enough to get there.)
    let zero = |m: &str| m.split(':').all(|b| b == "00");
    let mac = match zero(mac) {
        true => {
            node.link_by_name(bridge)
                .map_err(|e| e.into_cni(format_args!("failed to lookup {bridge:?}")))?
                .mac
        }
        false => mac.to_string(),
    };
    if zero(&mac) {
        return Ok(());
    }
    node.set_link(
        bridge,
        &LinkSettings {
            mac: Some(mac),
            ..LinkSettings::default()
        },
    )
    .map_err(|e| e.into_cni("could not set bridge's mac"))?;
    Ok(())
}

/// The link part of the reference CHECK: the bridge, the container veth and
/// the host veth between them.
fn check_links<N: Ops>(
    node: &N,
    cont: &N,
    conf: &Conf,
    req: &Request,
    prev: &CniResult,
) -> Result<(), CniError> {
    let br_name = conf.bridge.as_str();
    let br_map = prev
        .interfaces
        .iter()
        .find(|i| i.name == br_name)
        .ok_or_else(|| {
            CniError::internal(format!(
                "CNI created bridge {br_name} in host namespace was not found"
            ))
        })?;
    if br_map.sandbox.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(CniError::internal(format!(
            "Interface {br_name} should not be in sandbox"
        )));
    }
    let br = node
        .link_by_name(br_name)
        .map_err(|_| CniError::internal(format!("Interface name {br_name} not found")))?;
    if br.kind != "bridge" {
        return Err(CniError::internal(format!(
            "Interface {br_name} does not have link type of bridge"
        )));
    }
    if !mac_matches(br_map.mac.as_deref(), &br) {
        return Err(CniError::internal(format!(
            "Bridge interface {br_name} Mac doesn't match: {}",
            br_map.mac.as_deref().unwrap_or("")
        )));
    }
    if br.promisc != conf.promisc {
        return Err(CniError::internal(format!(
            "Bridge interface {br_name} configured Promisc Mode {} doesn't match current state: {}",
            conf.promisc, br.promisc
        )));
    }

    let cont_map = check::require_container_interface(prev, req)?;
    let cl = cont
        .link_by_name(&req.ifname)
        .map_err(|_| CniError::internal(format!("Interface name {} not found", req.ifname)))?;
    if cl.kind != "veth" {
        return Err(CniError::internal(format!(
            "Error: Container interface {} not of type veth",
            cl.name
        )));
    }
    let Some(cont_peer) = cl.peer_index else {
        return Err(CniError::internal(format!(
            "Unable to obtain veth peer index for veth {}",
            cl.name
        )));
    };
    if !mac_matches(cont_map.mac.as_deref(), &cl) {
        return Err(CniError::internal(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            cl.name,
            cont_map.mac.as_deref().unwrap_or(""),
            cl.mac
        )));
    }

    let mut veth_found = false;
    for intf in &prev.interfaces {
        if intf.name == br_name || intf.name == cont_map.name {
            continue;
        }
        if intf.sandbox.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(CniError::internal(format!(
                "Interface {} should not be in sandbox",
                intf.name
            )));
        }
        let l = node
            .link_by_name(&intf.name)
            .map_err(|_| CniError::internal(format!("Interface name {} not found", intf.name)))?;
        if l.kind != "veth"
            || l.index != cont_peer
            || l.peer_index != Some(cl.index)
            || l.master != Some(br.index)
        {
            continue;
        }
        if !mac_matches(intf.mac.as_deref(), &l) {
            return Err(CniError::internal(format!(
                "Interface {} Mac doesn't match: {} not found",
                intf.name,
                intf.mac.as_deref().unwrap_or("")
            )));
        }
        veth_found = true;
        break;
    }
    if !veth_found {
        return Err(CniError::internal(format!(
            "CNI veth created for bridge {br_name} was not found"
        )));
    }
    Ok(())
}
