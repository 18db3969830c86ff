//! What the host itself takes back for an attachment, beyond what its
//! plugins' DELs do: the links the attachment created (after DEL, GC and a
//! failed ADD), and every other change a failed ADD made (undone in
//! reverse). Links are touched only while they are still the ones created:
//! same name, ifindex and kind.

use crate::error::HostError;
use crate::sandbox::policy::Side;
use crate::sandbox::{Change, CreatedLinks, Undo};
use wasm_cni_base::log;
use wasm_cni_kernel::net::{LinkChange, LinkId, Net, NetError, NsId, NsRef, NsSource};

/// The two namespaces of an attachment, as far as they still exist.
pub(super) struct Sides {
    pub node: NsId,
    /// `None` when the runtime passed no namespace or it is gone.
    pub container: Option<NsId>,
}

impl Sides {
    pub fn open(net: &mut dyn Net, netns: Option<NsSource>) -> Result<Self, HostError> {
        let node = net
            .open(NsRef::Current)
            .map_err(|e| HostError::internal(format!("opening the node namespace: {e}")))?;
        let container = netns
            .and_then(|ns| net.open(ns.as_ref()).ok())
            .filter(|id| !net.same_ns(*id, node));
        Ok(Sides { node, container })
    }

    fn get(&self, side: Side) -> Option<NsId> {
        match side {
            Side::Node => Some(self.node),
            Side::Container => self.container,
        }
    }
}

/// Whether the link called `name` in `ns` is the one with identity `id`.
fn is_still(net: &mut dyn Net, ns: NsId, name: &str, id: &LinkId) -> Result<bool, NetError> {
    match net.link_by_name(ns, name) {
        Ok(l) => Ok(l.id() == *id),
        Err(NetError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Delete every link in `created` that is still the one created. A veth
/// takes its peer along, so a peer already gone is no error; nor is a link
/// that has become another (it is no longer ours to delete).
pub(super) fn delete_links(
    net: &mut dyn Net,
    sides: &Sides,
    created: &CreatedLinks,
    why: &str,
) -> Vec<HostError> {
    let mut errors = Vec::new();
    for side in [Side::Container, Side::Node] {
        let Some(ns) = sides.get(side) else { continue };
        for (name, id) in created.side(side) {
            let outcome = is_still(net, ns, name, id).and_then(|ours| match ours {
                true => net.delete_link(ns, name).map(|()| true),
                false => Ok(false),
            });
            match outcome {
                Ok(true) => log::info(format_args!("{why}: deleted {} link {name}", side.as_str())),
                Ok(false) | Err(NetError::NotFound(_)) => {}
                Err(e) => errors.push(HostError::internal(format!(
                    "{why}: deleting {} link {name}: {e}",
                    side.as_str()
                ))),
            }
        }
    }
    errors
}

/// The links of `created` that still exist as created (what a record
/// keeps: a name whose link is gone is forgotten).
pub(super) fn live(net: &mut dyn Net, sides: &Sides, created: &CreatedLinks) -> CreatedLinks {
    let mut out = CreatedLinks::default();
    for side in [Side::Container, Side::Node] {
        let Some(ns) = sides.get(side) else { continue };
        for (name, id) in created.side(side) {
            // A read error keeps the link: forgetting it could leak it.
            if is_still(net, ns, name, id).unwrap_or(true) {
                out.side_mut(side).insert(name.clone(), id.clone());
            }
        }
    }
    out
}

/// Undo `changes` in reverse, best effort: each is taken back only if the
/// thing is still as the change left it. Shared changes are skipped when
/// `keep_shared` (other attachments may depend on them).
pub(super) fn undo(net: &mut dyn Net, sides: &Sides, changes: &[Change], keep_shared: bool) {
    for change in changes.iter().rev() {
        if change.shared && keep_shared {
            log::info(format_args!(
                "failed ADD: keeping {:?}: other attachments may depend on it",
                change.undo
            ));
            continue;
        }
        let Some(ns) = sides.get(change.side) else {
            continue;
        };
        if let Err(e) = undo_one(net, ns, &change.undo) {
            log::warn(format_args!(
                "failed ADD: could not undo {:?} in the {} namespace: {e}",
                change.undo,
                change.side.as_str()
            ));
        }
    }
}

fn undo_one(net: &mut dyn Net, ns: NsId, undo: &Undo) -> Result<(), NetError> {
    let tolerate = |r: Result<(), NetError>| match r {
        Err(NetError::NotFound(_) | NetError::Exists(_)) => Ok(()),
        other => other,
    };
    match undo {
        Undo::Address { link, addr, added } => tolerate(match added {
            true => net.del_address(ns, link, addr),
            false => net.add_address(ns, link, addr),
        }),
        Undo::Route { route, added } => tolerate(match added {
            true => net.del_route(ns, route),
            false => net.add_route(ns, route),
        }),
        Undo::Sysctl { key, old, new } => {
            if net.sysctl_get(ns, key)? == *new {
                net.sysctl_set(ns, key, old)?;
            }
            Ok(())
        }
        Undo::Link {
            name,
            index,
            restore,
        } => match net.link_by_name(ns, name) {
            Ok(l) if l.index == *index => {
                // Only what differs now: writing a MAC a bridge already has
                // would still make it "set by the user".
                let master = match l.master {
                    Some(m) => net.link_by_index(ns, m).map(|m| m.name).unwrap_or_default(),
                    None => String::new(),
                };
                let change = LinkChange {
                    up: restore.up.filter(|v| *v != l.up),
                    mtu: restore.mtu.filter(|v| *v != l.mtu),
                    mac: restore
                        .mac
                        .clone()
                        .filter(|v| !v.eq_ignore_ascii_case(&l.mac)),
                    master: restore.master.clone().filter(|v| *v != master),
                    promisc: restore.promisc.filter(|v| *v != l.promisc),
                    allmulti: restore.allmulti.filter(|v| *v != l.allmulti),
                    txqlen: restore.txqlen.filter(|v| *v != l.txqlen),
                    hairpin: None,
                };
                match change == LinkChange::default() {
                    true => Ok(()),
                    false => net.set_link(ns, name, &change).map(drop),
                }
            }
            Ok(_) | Err(NetError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        },
        Undo::Bridge { name, id } => {
            if !is_still(net, ns, name, id)? {
                return Ok(());
            }
            let ports = net
                .links(ns)?
                .iter()
                .filter(|l| l.master == Some(id.index))
                .count();
            match ports {
                0 => tolerate(net.delete_link(ns, name)),
                _ => Ok(()),
            }
        }
    }
}
