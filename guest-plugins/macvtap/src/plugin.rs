//! The macvtap verbs, generic over the host.

use wasm_cni_sdk::check::{self, mac_matches};
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::host::Level;
use wasm_cni_sdk::iface::{self, configure_iface, try_sysctl};
use wasm_cni_sdk::net::{iface_sysctl, Link, LinkSettings, Ops};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Interface, Plugin, Request};

use crate::conf::{load, Conf};

pub struct Macvtap;

fn open<H: Host>(host: &H, req: &Request) -> Result<(H::Ns, H::Ns), CniError> {
    let node = host
        .node_netns()
        .map_err(|e| e.into_cni("failed to open the node network namespace"))?;
    let cont = host.container_netns().map_err(|e| {
        e.into_cni(format_args!(
            "failed to open netns {:?}",
            req.netns.as_deref().unwrap_or("")
        ))
    })?;
    Ok((node, cont))
}

impl Plugin for Macvtap {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        conf.supported()?;
        let (node, cont) = open(host, req)?;
        let (master, mtu) = conf.resolve_master(&node)?;
        // Created in the container namespace under CNI_IFNAME directly: no
        // temporary name, nothing ever appears in the node namespace.
        let link = node
            .create_macvtap(
                &req.ifname,
                &master.name,
                conf.mode,
                mtu,
                conf.mac.as_deref(),
                &cont,
            )
            .map_err(|e| e.into_cni("failed to create macvtap"))?;
        let added = configure(host, &cont, &conf, req, &link, &master);
        if added.is_err() {
            if let Err(e) = cont.delete_link_if_exists(&req.ifname) {
                host.log(
                    Level::Warn,
                    &format!("rollback: deleting {}: {e}", req.ifname),
                );
            }
        }
        added
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // Lenient (no master lookup, no validation): DEL must work whatever
        // became of the uplink or the config.
        let net: NetConf = config::from_str(&req.config)?;
        if net.has_ipam() {
            host.ipam_del()?;
        }
        match host.container_netns() {
            Ok(cont) => {
                cont.delete_link_if_exists(&req.ifname)
                    .map_err(|e| e.into_cni(format_args!("failed to delete {:?}", req.ifname)))?;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into_cni("failed to open the container network namespace")),
        }
        Ok(())
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let (node, cont) = open(host, req)?;
        conf.resolve_master(&node)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let netns = req.netns.as_deref();
        let cont_map = check::container_interface(prev, &req.ifname, netns).ok_or_else(|| {
            CniError::internal(format!(
                "sandbox in prevResult doesn't match configured netns: {}",
                netns.unwrap_or("")
            ))
        })?;
        let link = cont.link_by_name(&req.ifname).map_err(|_| {
            CniError::internal(format!(
                "container Interface name in prevResult: {} not found",
                req.ifname
            ))
        })?;
        if link.kind != "macvtap" {
            return Err(CniError::internal(format!(
                "error: Container interface {} not of type macvtap",
                link.name
            )));
        }
        if let Some(mode) = link.macvlan_mode.filter(|m| *m != conf.mode) {
            return Err(CniError::internal(format!(
                "container macvtap mode {} does not match expected value: {}",
                mode.as_str(),
                conf.mode.as_str()
            )));
        }
        if !mac_matches(cont_map.mac.as_deref(), &link) {
            return Err(CniError::internal(format!(
                "interface {} Mac {} doesn't match container Mac: {}",
                link.name,
                cont_map.mac.as_deref().unwrap_or(""),
                link.mac
            )));
        }
        if conf.promisc && !link.promisc {
            return Err(CniError::internal(format!(
                "interface {} is not in promiscuous mode (promiscMode)",
                link.name
            )));
        }
        check::validate_interface_ips(&cont, &req.ifname, prev)?;
        check::validate_routes(&cont, &prev.routes)
    }

    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        let net: NetConf = config::from_str(config)?;
        if net.has_ipam() {
            host.ipam_status()?;
        }
        Ok(())
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        let net: NetConf = config::from_str(config)?;
        if net.has_ipam() {
            host.ipam_gc()?;
        }
        Ok(())
    }
}

/// After the link exists; the caller deletes it on error.
fn configure<H: Host>(
    host: &H,
    cont: &H::Ns,
    conf: &Conf,
    req: &Request,
    link: &Link,
    master: &Link,
) -> Result<CniResult, CniError> {
    let ifname = req.ifname.as_str();
    // kubevirt: the queue length follows the master's (the kernel gives a
    // macvtap 500), and `promiscMode` turns promiscuous mode on.
    let tune = LinkSettings {
        promisc: conf.promisc.then_some(true),
        txqlen: Some(master.txqlen).filter(|q| *q != 0 && *q != link.txqlen),
        ..LinkSettings::default()
    };
    if tune != LinkSettings::default() {
        cont.set_link(ifname, &tune)
            .map_err(|e| e.into_cni(format_args!("failed to configure {ifname:?}")))?;
    }
    let mut result = CniResult {
        interfaces: vec![Interface {
            name: ifname.to_string(),
            mac: Some(link.mac.clone()),
            sandbox: req.netns.clone(),
            ..Interface::default()
        }],
        ..CniResult::default()
    };
    if conf.net.has_ipam() {
        let allocated = host.ipam_add()?;
        let configured = (|| {
            iface::require_ips(&allocated)?;
            result.ips = allocated.ips;
            result.routes = allocated.routes;
            for ipc in &mut result.ips {
                ipc.interface = Some(0);
            }
            let _ = try_sysctl(cont, &iface_sysctl("ipv4", ifname, "arp_notify"), "1");
            let _ = try_sysctl(cont, &iface_sysctl("ipv6", ifname, "ndisc_notify"), "1");
            configure_iface(cont, ifname, &result)
        })();
        if let Err(e) = configured {
            if let Err(del) = host.ipam_del() {
                host.log(Level::Warn, &format!("rollback: IPAM DEL: {del}"));
            }
            return Err(e);
        }
    } else {
        cont.set_up(ifname)
            .map_err(|e| e.into_cni(format_args!("failed to set {ifname:?} UP")))?;
    }
    if let Ok(l) = cont.link_by_name(ifname) {
        result.interfaces[0].mac = Some(l.mac);
    }
    // As the reference macvlan: the config's `dns` only.
    result.dns = conf.net.dns_if_set();
    Ok(result)
}
