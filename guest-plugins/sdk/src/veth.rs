//! The reference `ip.SetupVeth`, with deterministic host-side names.

use crate::error::CniError;
use crate::iface::try_sysctl;
use crate::naming::{veth_name, MAX_NAME_ATTEMPTS};
use crate::net::{iface_sysctl, Link, NetError, Ops};

/// The two ends of a new pair.
#[derive(Clone, Debug)]
pub struct VethPair {
    /// `vethXXXXXXXX` in the node namespace, up, `accept_ra=0`.
    pub host: Link,
    /// `ifname` in the container namespace, down.
    pub container: Link,
}

/// Creates `ifname` in `cont` with its peer `vethXXXXXXXX` in `node` (name
/// from [`veth_name`], the next salt on a host-side collision, up to
/// [`MAX_NAME_ATTEMPTS`]), then sets the host end up with `accept_ra=0`.
///
/// An existing `ifname` is the reference error `container veth name
/// provided (eth0) already exists`. On any later error the pair is deleted
/// before returning.
pub fn setup_veth<N: Ops>(
    node: &N,
    cont: &N,
    network: &str,
    container_id: &str,
    ifname: &str,
    mtu: Option<u32>,
    mac: Option<&str>,
) -> Result<VethPair, CniError> {
    for salt in 0..MAX_NAME_ATTEMPTS {
        let peer = veth_name(network, container_id, ifname, salt);
        match cont.create_veth(ifname, &peer, node, mtu, mac) {
            Ok(container) => {
                return finish(node, &peer)
                    .map(|host| VethPair { host, container })
                    .inspect_err(|_| {
                        // Deleting the container end deletes the host end.
                        let _ = cont.delete_link_if_exists(ifname);
                    });
            }
            Err(NetError::Exists(_)) => {
                if cont.link_by_name(ifname).is_ok() {
                    return Err(CniError::internal(format!(
                        "container veth name provided ({ifname}) already exists"
                    )));
                }
                // The host-side name is taken: try the next salt.
            }
            Err(e) => return Err(e.into_cni("failed to make veth pair")),
        }
    }
    Err(CniError::internal("failed to find a unique veth name"))
}

fn finish<N: Ops>(node: &N, peer: &str) -> Result<Link, CniError> {
    let link = node
        .set_up(peer)
        .map_err(|e| e.into_cni(format_args!("failed to set {peer:?} up")))?;
    // "We want to own the routes for this interface."
    let _ = try_sysctl(node, &iface_sysctl("ipv6", peer, "accept_ra"), "0");
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeHost, NsId};
    use crate::naming::veth_name;

    #[test]
    fn creates_both_ends_and_retries_names() {
        let host = FakeHost::new("eth0");
        let (n, c) = (host.ns(NsId::Node), host.ns(NsId::Container));
        for salt in 0..3 {
            host.add_link(
                NsId::Node,
                &veth_name("net", "c", "eth0", salt),
                "veth",
                1500,
            );
        }
        let pair = setup_veth(
            &n,
            &c,
            "net",
            "c",
            "eth0",
            Some(1400),
            Some("02:00:00:00:00:07"),
        )
        .unwrap();
        assert_eq!(pair.host.name, veth_name("net", "c", "eth0", 3));
        assert!(pair.host.up && !pair.container.up);
        assert_eq!(pair.container.mac, "02:00:00:00:00:07");
        assert_eq!(pair.host.mtu, 1400);
        let key = format!("net.ipv6.conf.{}.accept_ra", pair.host.name);
        assert_eq!(host.sysctl(NsId::Node, &key).as_deref(), Some("0"));

        let e = setup_veth(&n, &c, "net", "c", "eth0", None, None).unwrap_err();
        assert_eq!(e.msg, "container veth name provided (eth0) already exists");
    }

    #[test]
    fn gives_up_after_max_attempts_and_cleans_up_on_failure() {
        let host = FakeHost::new("eth0");
        let (n, c) = (host.ns(NsId::Node), host.ns(NsId::Container));
        for salt in 0..MAX_NAME_ATTEMPTS {
            host.add_link(
                NsId::Node,
                &veth_name("net", "c", "eth0", salt),
                "veth",
                1500,
            );
        }
        assert_eq!(
            setup_veth(&n, &c, "net", "c", "eth0", None, None)
                .unwrap_err()
                .msg,
            "failed to find a unique veth name"
        );
        let host = FakeHost::new("eth0");
        let (n, c) = (host.ns(NsId::Node), host.ns(NsId::Container));
        let before = host.snapshot();
        host.fail_next("set_link", "", NetError::Kernel(-1, "nope".into()));
        setup_veth(&n, &c, "net", "c", "eth0", None, None).unwrap_err();
        assert_eq!(host.snapshot(), before);
    }
}
