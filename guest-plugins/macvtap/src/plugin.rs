//! The macvtap verbs, generic over the host.

use wasm_cni_sdk::check;
use wasm_cni_sdk::net::{Link, LinkSettings, Ops};
use wasm_cni_sdk::plugin::{self, DelOrder};
use wasm_cni_sdk::stacked::{check_link, configure_link, macvlan_mode_is};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Plugin, Request};

use crate::conf::{load, Conf};

pub struct Macvtap;

impl Plugin for Macvtap {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        conf.supported()?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
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
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // No master lookup: DEL must work whatever became of the uplink.
        plugin::del_interface(host, req, DelOrder::IpamFirst)
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        conf.resolve_master(&node)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let link = check_link(
            &cont,
            req,
            prev,
            "macvtap",
            macvlan_mode_is("macvtap", conf.mode),
        )?;
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
        plugin::forward_status(host, config)
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        plugin::forward_gc(host, config)
    }
}

/// After the link exists: the kubevirt tuning, then as macvlan. The caller
/// deletes the link on error.
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
    configure_link(host, cont, &conf.net, req, link, None)
}
