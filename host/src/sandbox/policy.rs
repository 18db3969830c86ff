//! What a plugin may do to the kernel for its attachment: the one choke
//! point every `network` import passes through before the host acts.
//!
//! * Container namespace: create only CNI_IFNAME; change or delete
//!   CNI_IFNAME, `lo` and links this attachment created; a bridge the
//!   plugin's config names (the reference tap's `bridge` lives there) may
//!   be used as a master, and for nothing else.
//! * Node namespace: create links under fresh names (they become the
//!   attachment's); change or enslave links the attachment created and
//!   links the plugin's own config names (`bridge`, `master`); delete only
//!   links the attachment created.
//! * Reading is always allowed.
//! * Sysctls: keys under `net.` only. Per-interface keys (`net.ipv4.conf.X.…`
//!   and friends) only for links the plugin may change; in the node
//!   namespace, global keys only from a short list of forwarding switches.

use std::collections::BTreeSet;

/// Which namespace a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Container,
    Node,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Container => "container",
            Side::Node => "node",
        }
    }
}

/// Node-side global sysctls a plugin may write: bridge and ptp turn on
/// forwarding, as the reference plugins do.
const NODE_GLOBAL_SYSCTLS: &[&str] = &["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"];

/// Sysctl subtrees keyed by interface name.
const PER_INTERFACE: &[&str] = &[
    "net.ipv4.conf.",
    "net.ipv6.conf.",
    "net.ipv4.neigh.",
    "net.ipv6.neigh.",
];

/// What one plugin call may touch.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// CNI_IFNAME.
    pub ifname: String,
    /// Links the plugin's config names (`bridge`, `master`): changeable in
    /// the node namespace; in the container namespace only usable as a
    /// bridge master ([`Grants::enslave`]).
    pub config_named: BTreeSet<String>,
    /// Links this attachment created, per side.
    pub created_node: BTreeSet<String>,
    pub created_container: BTreeSet<String>,
}

pub type Verdict = Result<(), String>;

impl Grants {
    fn created(&self, side: Side) -> &BTreeSet<String> {
        match side {
            Side::Container => &self.created_container,
            Side::Node => &self.created_node,
        }
    }

    /// May the plugin create a link named `name` on `side`?
    pub fn create(&self, side: Side, name: &str) -> Verdict {
        match side {
            Side::Container if name == self.ifname => Ok(()),
            Side::Container => Err(format!(
                "may create only {:?} in the container namespace, not {name:?}",
                self.ifname
            )),
            // A fresh name cannot clash with anything (the kernel refuses
            // duplicates), so creation itself harms no one; it is recorded.
            Side::Node => Ok(()),
        }
    }

    /// May the plugin change `name` (state, addresses, routes, master)?
    pub fn change(&self, side: Side, name: &str) -> Verdict {
        let ok = match side {
            Side::Container => name == self.ifname || name == "lo",
            Side::Node => self.config_named.contains(name),
        } || self.created(side).contains(name);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "link {name:?} in the {} namespace does not belong to this attachment",
                side.as_str()
            ))
        }
    }

    /// May the plugin make `bridge` the master of a link it may change?
    /// Any bridge it may change, and in the container namespace also one
    /// its config names: joining a bridge adds a port and changes nothing
    /// else of it (the backend accepts only bridges as masters), and the
    /// name comes from the config, not from the plugin.
    pub fn enslave(&self, side: Side, bridge: &str) -> Verdict {
        if side == Side::Container && self.config_named.contains(bridge) {
            return Ok(());
        }
        self.change(side, bridge)
            .map_err(|why| format!("may not use {bridge:?} as a master: {why}"))
    }

    /// May the plugin delete `name`?
    pub fn delete(&self, side: Side, name: &str) -> Verdict {
        let ok = match side {
            Side::Container => name == self.ifname,
            Side::Node => false,
        } || self.created(side).contains(name);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "may not delete {name:?} in the {} namespace: not created for this attachment",
                side.as_str()
            ))
        }
    }

    /// May the plugin read (`write` false) or write sysctl `key`?
    pub fn sysctl(&self, side: Side, key: &str, write: bool) -> Verdict {
        if !key.starts_with("net.") || key.contains("..") || key.ends_with('.') {
            return Err(format!("sysctl {key:?} is outside net."));
        }
        if !write {
            return Ok(());
        }
        if let Some(rest) = PER_INTERFACE.iter().find_map(|p| key.strip_prefix(p)) {
            // The setting name has no dots, so the interface is what lies
            // between the subtree and the last dot.
            let Some((ifname, _setting)) = rest.rsplit_once('.') else {
                return Err(format!("sysctl {key:?} names no interface"));
            };
            if side == Side::Node && NODE_GLOBAL_SYSCTLS.contains(&key) {
                return Ok(());
            }
            return match (side, ifname) {
                // The container namespace is the attachment's own.
                (Side::Container, "all" | "default") => Ok(()),
                (Side::Node, "all" | "default") => Err(format!(
                    "sysctl {key:?} would change every interface of the node"
                )),
                _ => self
                    .change(side, ifname)
                    .map_err(|why| format!("sysctl {key:?}: {why}")),
            };
        }
        match side {
            Side::Container => Ok(()),
            Side::Node if NODE_GLOBAL_SYSCTLS.contains(&key) => Ok(()),
            Side::Node => Err(format!("sysctl {key:?} is a node-wide setting")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants() -> Grants {
        Grants {
            ifname: "eth0".into(),
            config_named: ["cni0".to_string()].into(),
            created_node: ["veth0123abcd".to_string()].into(),
            created_container: BTreeSet::new(),
        }
    }

    #[test]
    fn container_side() {
        let g = grants();
        assert!(g.create(Side::Container, "eth0").is_ok());
        assert!(g.create(Side::Container, "eth1").is_err());
        assert!(g.change(Side::Container, "eth0").is_ok());
        assert!(g.change(Side::Container, "lo").is_ok());
        assert!(g.change(Side::Container, "eth1").is_err());
        assert!(g.delete(Side::Container, "eth0").is_ok());
        assert!(g.delete(Side::Container, "lo").is_err());
        assert!(g.delete(Side::Container, "eth1").is_err());
    }

    #[test]
    fn node_side() {
        let g = grants();
        assert!(g.create(Side::Node, "vethnew").is_ok());
        assert!(g.change(Side::Node, "cni0").is_ok());
        assert!(g.change(Side::Node, "veth0123abcd").is_ok());
        assert!(g.change(Side::Node, "lo").is_err());
        assert!(g.change(Side::Node, "eth0").is_err());
        assert!(g.delete(Side::Node, "veth0123abcd").is_ok());
        // Config-named links may be changed but never deleted.
        assert!(g.delete(Side::Node, "cni0").is_err());
        assert!(g.delete(Side::Node, "lo").is_err());
    }

    #[test]
    fn config_named_container_bridge_is_a_master_only() {
        let g = grants();
        // cni0 is config-named: in the container it may become a master...
        assert!(g.enslave(Side::Container, "cni0").is_ok());
        // ...but is not changed, deleted or its sysctls written.
        assert!(g.change(Side::Container, "cni0").is_err());
        assert!(g.delete(Side::Container, "cni0").is_err());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.cni0.forwarding", true)
            .is_err());
        // A bridge the config does not name stays out of reach.
        assert!(g.enslave(Side::Container, "br-other").is_err());
        // What may be changed may also be a master; the node side is
        // unchanged (config-named or created links only).
        assert!(g.enslave(Side::Container, "eth0").is_ok());
        assert!(g.enslave(Side::Node, "cni0").is_ok());
        assert!(g.enslave(Side::Node, "veth0123abcd").is_ok());
        assert!(g.enslave(Side::Node, "br-other").is_err());
    }

    #[test]
    fn sysctls() {
        let g = grants();
        assert!(g.sysctl(Side::Node, "kernel.hostname", false).is_err());
        assert!(g.sysctl(Side::Container, "kernel.shmmax", true).is_err());
        assert!(g
            .sysctl(Side::Container, "net.core.somaxconn", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.eth0.arp_notify", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.all.rp_filter", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Container, "net.ipv4.conf.eth1.arp_notify", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.ipv4.ip_forward", true).is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv6.conf.all.forwarding", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv4.conf.all.rp_filter", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.core.somaxconn", true).is_err());
        assert!(g.sysctl(Side::Node, "net.core.somaxconn", false).is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv4.conf.veth0123abcd.accept_ra", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv6.conf.cni0.accept_ra", true)
            .is_ok());
        assert!(g
            .sysctl(Side::Node, "net.ipv4.conf.lo.accept_ra", true)
            .is_err());
        assert!(g.sysctl(Side::Node, "net.ipv4.conf..x", true).is_err());
    }
}
