//! Verb-level steps the interface plugins share: opening the namespaces
//! (with the reference messages), undoing a failed ADD, the DEL of a
//! container link and STATUS / GC forwarded to the delegated IPAM plugin.

use crate::config::{self, NetConf};
use crate::error::CniError;
use crate::host::{Host, Level};
use crate::net::Ops;
use crate::types::Request;

/// The node namespace; failing to open it is code 999
/// `failed to open the node network namespace: …`.
pub fn open_node<H: Host>(host: &H) -> Result<H::Ns, CniError> {
    host.node_netns()
        .map_err(|e| e.into_cni("failed to open the node network namespace"))
}

/// The container namespace for ADD and CHECK, where it must exist; failing
/// to open it is code 999 `failed to open netns "<CNI_NETNS>": …`.
pub fn open_container<H: Host>(host: &H, req: &Request) -> Result<H::Ns, CniError> {
    host.container_netns().map_err(|e| {
        e.into_cni(format_args!(
            "failed to open netns {:?}",
            req.netns.as_deref().unwrap_or("")
        ))
    })
}

/// The container namespace for DEL: `None` when there is none (no
/// CNI_NETNS, or the runtime already deleted it, and what was in it);
/// any other failure is code 999
/// `failed to open the container network namespace: …`.
pub fn container_if_exists<H: Host>(host: &H) -> Result<Option<H::Ns>, CniError> {
    match host.container_netns() {
        Ok(cont) => Ok(Some(cont)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into_cni("failed to open the container network namespace")),
    }
}

/// Deletes `ifname` in the container namespace; a namespace or link that is
/// already gone is success. Deleting the container end of a veth also
/// deletes the node end.
pub fn delete_container_link<H: Host>(host: &H, ifname: &str) -> Result<(), CniError> {
    if let Some(cont) = container_if_exists(host)? {
        cont.delete_link_if_exists(ifname)
            .map_err(|e| e.into_cni(format_args!("failed to delete {ifname:?}")))?;
    }
    Ok(())
}

/// IPAM DEL when the config names an IPAM plugin; its error is returned.
pub fn release_ipam<H: Host>(host: &H, net: &NetConf) -> Result<(), CniError> {
    if net.has_ipam() {
        host.ipam_del()?;
    }
    Ok(())
}

/// What [`del_interface`] does first; a failure stops DEL before the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelOrder {
    /// IPAM DEL, then the link (macvlan, macvtap, tap, ptp: the references
    /// release the IP first and return its error).
    IpamFirst,
    /// The link, then IPAM DEL (bridge).
    LinkFirst,
}

/// The DEL of a plugin whose only artifact is CNI_IFNAME in the container
/// namespace (plus its IPAM allocation). Lenient: only the common keys of
/// the config are read (no validation, no master or bridge lookup), so DEL
/// cleans up after any ADD whatever became of its config; a namespace or
/// link already gone is success.
pub fn del_interface<H: Host>(host: &H, req: &Request, order: DelOrder) -> Result<(), CniError> {
    let net: NetConf = config::from_str(&req.config)?;
    match order {
        DelOrder::IpamFirst => {
            release_ipam(host, &net)?;
            delete_container_link(host, &req.ifname)
        }
        DelOrder::LinkFirst => {
            delete_container_link(host, &req.ifname)?;
            release_ipam(host, &net)
        }
    }
}

/// Passes an ADD step's outcome through; when it failed, first deletes
/// `ifname` in `ns` (best effort: a failed delete is logged as
/// `rollback: deleting <ifname>: …` and the step's error returned).
pub fn undo_link_on_error<H: Host, T>(
    host: &H,
    ns: &H::Ns,
    ifname: &str,
    added: Result<T, CniError>,
) -> Result<T, CniError> {
    if added.is_err() {
        if let Err(e) = ns.delete_link_if_exists(ifname) {
            host.log(Level::Warn, &format!("rollback: deleting {ifname}: {e}"));
        }
    }
    added
}

/// Releases the IPAM allocation of a failed ADD (best effort: a failed IPAM
/// DEL is logged as `rollback: IPAM DEL: …`).
pub fn undo_ipam<H: Host>(host: &H) {
    if let Err(e) = host.ipam_del() {
        host.log(Level::Warn, &format!("rollback: IPAM DEL: {e}"));
    }
}

/// STATUS of a plugin that delegates IPAM: the IPAM plugin's STATUS when
/// the config names one, else ready.
pub fn forward_status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
    let net: NetConf = config::from_str(config)?;
    if net.has_ipam() {
        host.ipam_status()?;
    }
    Ok(())
}

/// GC of a plugin that delegates IPAM: the IPAM plugin's GC (which receives
/// the valid attachments itself) when the config names one, else nothing.
pub fn forward_gc<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
    let net: NetConf = config::from_str(config)?;
    if net.has_ipam() {
        host.ipam_gc()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{netconf, with_ipam_type, FakeHost, NsId};
    use crate::net::NetError;

    fn l2() -> String {
        netconf("1.1.0", "n", "x", "")
    }

    fn l3() -> String {
        netconf("1.1.0", "n", "x", &with_ipam_type("static", ""))
    }

    fn host_with_eth0() -> FakeHost {
        let host = FakeHost::with_ipam_result(&[("10.0.0.2/24", None)], &[]);
        host.add_link(NsId::Container, "eth0", "veth", 1500);
        host
    }

    #[test]
    fn del_orders_and_tolerates_what_is_gone() {
        for (order, calls_after_failed_ipam) in
            [(DelOrder::IpamFirst, true), (DelOrder::LinkFirst, false)]
        {
            let host = host_with_eth0();
            host.set_ipam_error("del", CniError::internal("ipam down"));
            let e = del_interface(&host, &host.request(&l3()), order).unwrap_err();
            assert_eq!(e.msg, "ipam down");
            // IPAM first: its failure keeps the link; link first: it is gone.
            assert_eq!(
                host.link(NsId::Container, "eth0").is_some(),
                calls_after_failed_ipam,
                "{order:?}"
            );
        }
        let host = host_with_eth0();
        let req = host.request(&l2());
        del_interface(&host, &req, DelOrder::IpamFirst).unwrap();
        assert_eq!(host.link_names(NsId::Container), ["lo"]);
        del_interface(&host, &req, DelOrder::IpamFirst).unwrap();
        host.remove_container_netns();
        del_interface(&host, &req, DelOrder::LinkFirst).unwrap();
        assert!(host.ipam_calls().is_empty(), "no ipam, no IPAM DEL");
        assert_eq!(
            del_interface(&host, &host.request("{"), DelOrder::IpamFirst)
                .unwrap_err()
                .code,
            6
        );
    }

    #[test]
    fn opening_namespaces_names_what_failed() {
        let host = FakeHost::new("eth0");
        host.remove_container_netns();
        let e = open_container(&host, &host.request("{}")).err().unwrap();
        assert!(
            e.msg
                .starts_with(r#"failed to open netns "/var/run/netns/fake": not found"#),
            "{}",
            e.msg
        );
        assert!(container_if_exists(&host).unwrap().is_none());
        assert!(open_node(&host).is_ok());
    }

    #[test]
    fn undo_steps_log_their_failures() {
        let host = host_with_eth0();
        let cont = host.ns(NsId::Container);
        host.fail_next("delete_link", "eth0", NetError::Kernel(-16, "busy".into()));
        host.set_ipam_error("del", CniError::internal("ipam down"));
        let e = undo_link_on_error(&host, &cont, "eth0", Err::<(), _>(CniError::internal("x")))
            .unwrap_err();
        assert_eq!(e.msg, "x");
        undo_ipam(&host);
        let logs: Vec<String> = host.logs().into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            logs,
            [
                "rollback: deleting eth0: kernel error -16: busy",
                "rollback: IPAM DEL: [999] ipam down"
            ]
        );
        assert_eq!(undo_link_on_error(&host, &cont, "eth0", Ok(7)).unwrap(), 7);
        assert!(host.link(NsId::Container, "eth0").is_some());
    }

    #[test]
    fn status_and_gc_forward_only_with_ipam() {
        let host = FakeHost::new("eth0");
        forward_status(&host, &l2()).unwrap();
        forward_gc(&host, &l2()).unwrap();
        assert!(host.ipam_calls().is_empty());
        forward_status(&host, &l3()).unwrap();
        forward_gc(&host, &l3()).unwrap();
        assert_eq!(host.ipam_calls(), ["status", "gc"]);
        host.set_ipam_error("status", CniError::new(50, "exhausted"));
        assert_eq!(forward_status(&host, &l3()).unwrap_err().code, 50);
    }
}
