//! The tap verbs, generic over the host.

use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::host::Level;
use wasm_cni_sdk::iface::{self, configure_iface, try_sysctl};
use wasm_cni_sdk::net::{iface_sysctl, Link, LinkSettings, Ops};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Interface, Plugin, Request};

use crate::conf::{load, Conf};

pub struct Tap;

fn open_container<H: Host>(host: &H, req: &Request) -> Result<H::Ns, CniError> {
    host.container_netns().map_err(|e| {
        e.into_cni(format_args!(
            "failed to open netns {:?}",
            req.netns.as_deref().unwrap_or("")
        ))
    })
}

impl Plugin for Tap {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        conf.unsupported()?;
        let cont = open_container(host, req)?;
        // Straight under CNI_IFNAME: the host opens /dev/net/tun inside the
        // container namespace, so no other namespace's names can clash and
        // the reference's temporary name is not needed.
        let link = cont
            .create_tap(
                &req.ifname,
                conf.mtu,
                conf.mac.as_deref(),
                conf.multi_queue,
                conf.owner,
                conf.group,
            )
            .map_err(|e| e.into_cni("failed to create tap"))?;
        let added = configure(host, &cont, &conf, req, &link);
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
        // Lenient (the JSON only): DEL must clean up after any ADD.
        let net: NetConf = config::from_str(&req.config)?;
        if net.has_ipam() {
            host.ipam_del()?;
        }
        match host.container_netns() {
            Ok(cont) => {
                cont.delete_link_if_exists(&req.ifname)
                    .map_err(|e| e.into_cni(format_args!("failed to delete {:?}", req.ifname)))?;
            }
            // No netns passed, or the runtime already deleted it (and the
            // tap with it).
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into_cni("failed to open the container network namespace")),
        }
        Ok(())
    }

    /// §6.4: IPAM CHECK, prevResult required, the interface's sandbox must
    /// be CNI_NETNS, its ips and the routes must be in place. Like the
    /// reference, no link-type or MAC check.
    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let cont = open_container(host, req)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let netns = req.netns.as_deref();
        if check::container_interface(prev, &req.ifname, netns).is_none() {
            let recorded = prev
                .interfaces
                .iter()
                .find(|i| i.name == req.ifname)
                .and_then(|i| i.sandbox.as_deref())
                .unwrap_or("");
            return Err(CniError::internal(format!(
                "Sandbox in prevResult {recorded} doesn't match configured netns: {}",
                netns.unwrap_or("")
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

/// After the tap exists: bridge port, up, IPAM. The caller deletes the tap
/// on error; an IPAM allocation made here is released here.
fn configure<H: Host>(
    host: &H,
    cont: &H::Ns,
    conf: &Conf,
    req: &Request,
    link: &Link,
) -> Result<CniResult, CniError> {
    let ifname = req.ifname.as_str();
    if let Some(bridge) = &conf.bridge {
        let port = LinkSettings {
            master: Some(bridge.clone()),
            ..LinkSettings::default()
        };
        cont.set_link(ifname, &port).map_err(|e| {
            if e.is_not_found() {
                e.into_cni(format_args!("failed to get bridge {bridge}"))
            } else {
                e.into_cni(format_args!(
                    "failed to set tap {ifname} as a port of bridge {bridge}"
                ))
            }
        })?;
    }
    cont.set_up(ifname)
        .map_err(|e| e.into_cni("failed to set tap interface up"))?;

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
            // All addresses apply to the tap.
            for ipc in &mut result.ips {
                ipc.interface = Some(0);
            }
            let _ = try_sysctl(cont, &iface_sysctl("ipv4", ifname, "arp_notify"), "1");
            configure_iface(cont, ifname, &result)
        })();
        if let Err(e) = configured {
            if let Err(del) = host.ipam_del() {
                host.log(Level::Warn, &format!("rollback: IPAM DEL: {del}"));
            }
            return Err(e);
        }
    }
    if let Ok(l) = cont.link_by_name(ifname) {
        result.interfaces[0].mac = Some(l.mac);
    }
    // The reference reports the config's `dns` only.
    result.dns = conf.net.dns_if_set();
    Ok(result)
}
