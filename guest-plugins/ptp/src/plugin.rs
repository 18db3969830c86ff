//! The ptp verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::check::{self, mac_matches};
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::filter::Rule;
use wasm_cni_sdk::iface::{self, configure_iface};
use wasm_cni_sdk::ip::{host as ip_host, IpNet};
use wasm_cni_sdk::net::{scope, Ops, RouteSpec};
use wasm_cni_sdk::plugin::{self, open_container, DelOrder};
use wasm_cni_sdk::veth::setup_veth;
use wasm_cni_sdk::vm::{self, VmConf};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Interface, Plugin, Request};

/// Index of the container interface in the ptp result.
const CONTAINER_INDEX: u32 = 1;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    ip_masq: Option<bool>,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    vm: Option<VmConf>,
}

#[derive(Debug)]
struct Conf {
    net: NetConf,
    ip_masq: bool,
    ip_masq_backend: Option<String>,
    mtu: Option<u32>,
    /// A tap on the node for a VM instead of the veth pair.
    vm: Option<VmConf>,
}

fn load(text: &str) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let mtu = match raw.mtu.unwrap_or(0) {
        0 => None,
        m if (68..=65535).contains(&m) => u32::try_from(m).ok(),
        m => {
            return Err(CniError::invalid_config(format!(
                "invalid MTU {m}, must be 0 (unset) or between 68 and 65535"
            )))
        }
    };
    if let Some(vm) = &raw.vm {
        vm.validate(false)?;
    }
    Ok(Conf {
        net,
        ip_masq: raw.ip_masq.unwrap_or(false),
        ip_masq_backend: raw.ip_masq_backend,
        mtu,
        vm: raw.vm,
    })
}

/// `ipMasq`: each address masqueraded except towards its own subnet, as the
/// reference's `SetupIPMasq`.
fn masq_rules(conf: &Conf, result: &CniResult) -> Result<Vec<Rule>, CniError> {
    if !conf.ip_masq {
        return Ok(Vec::new());
    }
    result
        .ips
        .iter()
        .map(|ip| {
            let addr = iface::parse_address(ip)?;
            Ok(Rule::Masquerade {
                source: addr.addr().to_string(),
                except: vec![addr.trunc().to_string()],
            })
        })
        .collect()
}

pub struct Ptp;

impl Plugin for Ptp {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config)?;
        // Both of the reference's backends mean the host's nftables rules.
        match conf.ip_masq_backend.as_deref() {
            None | Some("" | "iptables" | "nftables") => {}
            Some(other) => {
                return Err(CniError::unsupported_field(
                    "ipMasqBackend",
                    format!("{other:?}"),
                ))
            }
        }
        if !conf.net.has_ipam() {
            return Err(CniError::invalid_config(
                "ptp requires an IPAM plugin: set ipam.type",
            ));
        }
        let node = plugin::open_node(host)?;
        if let Some(vm) = &conf.vm {
            return add_vm(host, &node, &conf, req, vm);
        }
        let cont = open_container(host, req)?;

        // As the reference: IPAM ADD before the veth exists; on failure the
        // veth goes first, then the allocation.
        iface::with_ipam(host, |allocated| {
            let added = add_with_ip(&node, &cont, &conf, req, allocated).and_then(|r| {
                // The host removes the rules with the attachment.
                let rules = masq_rules(&conf, &r)?;
                if !rules.is_empty() {
                    host.filter_add(&rules)
                        .map_err(|e| e.into_cni("ipMasq rules"))?;
                }
                Ok(r)
            });
            plugin::undo_link_on_error(host, &cont, &req.ifname, added)
        })
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        if let Some(vm) = vm::of_config(&req.config) {
            // The tap is on the node; the container is not ours.
            let net: NetConf = config::from_str(&req.config)?;
            plugin::release_ipam(host, &net)?;
            let name = vm::link_name(vm.interface, &net.name, &req.container_id, &req.ifname);
            plugin::open_node(host)?
                .delete_link_if_exists(&name)
                .map_err(|e| e.into_cni(format_args!("failed to delete {name:?}")))?;
            return Ok(());
        }
        // The reference releases the IP first and returns its error.
        plugin::del_interface(host, req, DelOrder::IpamFirst)
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config)?;
        if let Some(vm) = &conf.vm {
            return check_vm(host, &conf, req, vm);
        }
        let cont = open_container(host, req)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let cont_map = check::require_container_interface(prev, req)?;
        let link = cont.link_by_name(&req.ifname).map_err(|_| {
            CniError::internal(format!(
                "ptp: Container Interface name in prevResult: {} not found",
                req.ifname
            ))
        })?;
        if link.kind != "veth" {
            return Err(CniError::internal(format!(
                "Error: Container interface {} not of type veth/p2p",
                link.name
            )));
        }
        if !mac_matches(cont_map.mac.as_deref(), &link) {
            return Err(CniError::internal(format!(
                "ptp: Interface {} Mac {} doesn't match container Mac: {}",
                link.name,
                cont_map.mac.as_deref().unwrap_or(""),
                link.mac
            )));
        }
        check::validate_interface_ips(&cont, &req.ifname, prev)?;
        check::validate_routes(&cont, &prev.routes)?;
        let rules = masq_rules(&conf, prev)?;
        if !rules.is_empty() {
            host.filter_check(&rules)
                .map_err(|e| e.into_cni("ipMasq rules"))?;
        }
        Ok(())
    }

    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        plugin::forward_status(host, config)
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        plugin::forward_gc(host, config)
    }
}

/// `vm`: IPAM, then a tap on the node carrying the gateway addresses, with
/// a host route to each reserved address through it; nothing is configured
/// for the guest, which sets its own addresses.
fn add_vm<H: Host>(
    host: &H,
    node: &H::Ns,
    conf: &Conf,
    req: &Request,
    vm: &VmConf,
) -> Result<CniResult, CniError> {
    let name = vm::link_name(vm.interface, &conf.net.name, &req.container_id, &req.ifname);
    iface::with_ipam(host, |allocated| {
        let added = vm_with_ip(node, conf, vm, &name, allocated).and_then(|r| {
            let rules = masq_rules(conf, &r)?;
            if !rules.is_empty() {
                host.filter_add(&rules)
                    .map_err(|e| e.into_cni("ipMasq rules"))?;
            }
            Ok(r)
        });
        plugin::undo_link_on_error(host, node, &name, added)
    })
}

fn vm_with_ip<N: Ops>(
    node: &N,
    conf: &Conf,
    vm: &VmConf,
    name: &str,
    allocated: CniResult,
) -> Result<CniResult, CniError> {
    let addressing = addressing(node, &allocated)?;
    let tap = vm::create(node, vm, name, conf.mtu, None, None)?;
    let mut result = allocated;
    result.interfaces = vec![Interface {
        name: tap.name.clone(),
        mac: Some(tap.mac.clone()),
        mtu: Some(tap.mtu),
        ..Interface::default()
    }];
    for ipc in &mut result.ips {
        ipc.interface = Some(0);
    }
    for a in &addressing {
        let gw = ip_host(a.gw).to_string();
        node.add_address(name, &gw)
            .map_err(|e| e.into_cni(format_args!("failed to add IP addr {gw} to {name}")))?;
        let route = RouteSpec {
            dst: ip_host(a.addr.addr()).to_string(),
            dev: Some(name.to_string()),
            scope: Some(scope::LINK),
            ..RouteSpec::default()
        };
        match node.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e.into_cni(format_args!("failed to add route to {name}"))),
        }
    }
    if let Some(dns) = conf.net.dns_if_set() {
        result.dns = Some(dns);
    }
    Ok(result)
}

/// CHECK of a `vm` attachment: IPAM, the tap on the node with the result's
/// MAC, and a route to each reserved address through it.
fn check_vm<H: Host>(host: &H, conf: &Conf, req: &Request, vm: &VmConf) -> Result<(), CniError> {
    if conf.net.has_ipam() {
        host.ipam_check()?;
    }
    let prev = check::require_prev_result(req.prev_result.as_ref())?;
    let node = plugin::open_node(host)?;
    let name = vm::link_name(vm.interface, &conf.net.name, &req.container_id, &req.ifname);
    let listed = prev
        .interfaces
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| CniError::internal(format!("{name} is not in prevResult")))?;
    let tap = node
        .link_by_name(&name)
        .map_err(|_| CniError::internal(format!("ptp: tap {name} not found")))?;
    if tap.kind != "tun" || !mac_matches(listed.mac.as_deref(), &tap) {
        return Err(CniError::internal(format!(
            "ptp: {name} is not the tap this attachment made"
        )));
    }
    let routes = node
        .list_routes(&name, None)
        .map_err(|e| e.into_cni(format_args!("listing routes of {name}")))?;
    for ip in &prev.ips {
        let want = ip_host(iface::parse_address(ip)?.addr()).to_string();
        if !routes.iter().any(|r| r.dst == want) {
            return Err(CniError::internal(format!(
                "ptp: no route to {want} through {name}"
            )));
        }
    }
    let rules = masq_rules(conf, prev)?;
    if !rules.is_empty() {
        host.filter_check(&rules)
            .map_err(|e| e.into_cni("ipMasq rules"))?;
    }
    Ok(())
}

/// Each allocated ip with its gateway (ptp needs one), forwarding on.
fn addressing<N: Ops>(node: &N, allocated: &CniResult) -> Result<Vec<Addressing>, CniError> {
    iface::require_ips(allocated)?;
    let mut out = Vec::new();
    for ipc in &allocated.ips {
        let addr = iface::parse_address(ipc)?;
        let gw = iface::parse_gateway(ipc)?.ok_or_else(|| {
            CniError::internal(format!("ptp: IPAM returned no gateway for {}", ipc.address))
        })?;
        out.push(Addressing { addr, gw });
    }
    iface::enable_forwarding(node, &iface::families(allocated)?)
        .map_err(|e| e.context("Could not enable IP forwarding"))?;
    Ok(out)
}

/// One ip of the result with its gateway, both parsed.
struct Addressing {
    addr: IpNet,
    gw: std::net::IpAddr,
}

/// Everything after IPAM ADD; the caller releases the IP and deletes the
/// veth on error.
fn add_with_ip<N: Ops>(
    node: &N,
    cont: &N,
    conf: &Conf,
    req: &Request,
    allocated: CniResult,
) -> Result<CniResult, CniError> {
    let addressing = addressing(node, &allocated)?;

    let pair = setup_veth(
        node,
        cont,
        &conf.net.name,
        &req.container_id,
        &req.ifname,
        conf.mtu,
        None,
    )?;
    let mut result = allocated;
    result.interfaces = vec![
        Interface {
            name: pair.host.name.clone(),
            mac: Some(pair.host.mac.clone()),
            ..Interface::default()
        },
        Interface {
            name: req.ifname.clone(),
            mac: Some(pair.container.mac.clone()),
            sandbox: req.netns.clone(),
            ..Interface::default()
        },
    ];
    for ipc in &mut result.ips {
        ipc.interface = Some(CONTAINER_INDEX);
    }

    // Container: addresses, routes, then swap the kernel's connected route
    // for `gw/32 scope link` + `subnet via gw`.
    let ifname = req.ifname.as_str();
    configure_iface(cont, ifname, &result)?;
    for a in &addressing {
        let subnet = a.addr.trunc().to_string();
        cont.del_route(&RouteSpec {
            dst: subnet.clone(),
            dev: Some(ifname.to_string()),
            ..RouteSpec::default()
        })
        .map_err(|e| e.into_cni(format_args!("failed to delete route {subnet} dev {ifname}")))?;
        let src = a.addr.addr().to_string();
        for route in [
            RouteSpec {
                dst: ip_host(a.gw).to_string(),
                dev: Some(ifname.to_string()),
                scope: Some(scope::LINK),
                src: Some(src.clone()),
                ..RouteSpec::default()
            },
            RouteSpec {
                dst: subnet.clone(),
                gw: Some(a.gw.to_string()),
                dev: Some(ifname.to_string()),
                scope: Some(scope::UNIVERSE),
                src: Some(src.clone()),
                ..RouteSpec::default()
            },
        ] {
            cont.add_route(&route).map_err(|e| {
                e.into_cni(format_args!(
                    "failed to add route {} via {} dev {ifname}",
                    route.dst,
                    route.gw.as_deref().unwrap_or("<nil>")
                ))
            })?;
        }
    }

    // Node: the gateway as a host address on the veth, and a host route to
    // the container's IP.
    let hv = pair.host.name.as_str();
    for a in &addressing {
        let gw = ip_host(a.gw).to_string();
        node.add_address(hv, &gw)
            .map_err(|e| e.into_cni(format_args!("failed to add IP addr {gw} to veth")))?;
        let route = RouteSpec {
            dst: ip_host(a.addr.addr()).to_string(),
            dev: Some(hv.to_string()),
            scope: Some(scope::HOST),
            ..RouteSpec::default()
        };
        match node.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e.into_cni("failed to add route on host")),
        }
    }

    iface::refresh_mac(node, &mut result.interfaces[0]);
    if let Some(dns) = conf.net.dns_if_set() {
        result.dns = Some(dns);
    }
    Ok(result)
}
