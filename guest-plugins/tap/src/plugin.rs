//! The tap verbs, generic over the host.

use wasm_cni_sdk::check;
use wasm_cni_sdk::iface::{self, Notify};
use wasm_cni_sdk::net::{Link, LinkSettings, Ops};
use wasm_cni_sdk::plugin::{self, open_container, DelOrder};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Plugin, Request};

use crate::conf::{load, Conf};

pub struct Tap;

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
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // The JSON only: DEL must clean up after any ADD.
        plugin::del_interface(host, req, DelOrder::IpamFirst)
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
        plugin::forward_status(host, config)
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        plugin::forward_gc(host, config)
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

    let mut result = iface::container_result(req, link);
    if conf.net.has_ipam() {
        // All addresses apply to the tap; unlike macvlan, the reference
        // leaves `ndisc_notify` alone.
        iface::attach_ipam(host, cont, ifname, 0, Notify::Arp, &mut result)?;
    }
    iface::refresh_mac(cont, &mut result.interfaces[0]);
    // The reference reports the config's `dns` only.
    result.dns = conf.net.dns_if_set();
    Ok(result)
}
