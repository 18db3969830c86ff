//! What a grant rests on, confirmed against the live links: the policy
//! ([`crate::policy`]) decides from names and the attachment's ledger; these
//! checks ask the kernel (any [`Net`]) whether the link a grant names is
//! still the one the ledger recorded. The host's imports and the SDK's fake
//! host both run them, so the two agree on when a grant has lapsed.

use std::collections::BTreeMap;

use crate::net::{LinkId, Net, NetError, NsId};
use crate::policy::{Ask, Basis, Grants, Side};

/// Why a batch of asks may not act ([`guard`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Deleting a link (named here) that is not there: "not found",
    /// whoever asks, so that a second DEL, whose grant went with the
    /// attachment, sees what it can handle. Listing links tells as much.
    Missing(String),
    /// The policy's refusal, in its words.
    Refused(String),
    /// A grant rested on a link the attachment created, and the live link
    /// is gone or another ([`verify_created`]), or the backend failed.
    Lapsed(NetError),
}

/// The one guard before an import acts, run by the host's imports and by
/// the SDK's fake host alike: each ask's verdict under `grants`, in order,
/// the first refusal ending the batch. A grant that rests on a link the
/// attachment created is confirmed against the live link by `confirm`
/// (which also forgets one that lapsed, and may skip a link it confirmed
/// earlier in the call). `granted` sees each ask with what allowed it.
pub fn guard(
    asks: &[Ask<'_>],
    grants: &Grants,
    net: &mut dyn Net,
    mut confirm: impl FnMut(&mut dyn Net, Side, NsId, &str, &LinkId) -> Result<(), NetError>,
    mut granted: impl FnMut(&Ask<'_>, &Basis),
) -> Result<(), Stop> {
    for ask in asks {
        let basis = match ask.verdict(grants) {
            Ok(basis) => basis,
            Err(why) => {
                if let Ask::Delete(_, ns, name) = ask {
                    if let Err(NetError::NotFound(_)) = net.link_by_name(*ns, name) {
                        return Err(Stop::Missing((*name).to_string()));
                    }
                }
                return Err(Stop::Refused(why));
            }
        };
        if let (Basis::Created(name, id), Some((side, ns))) = (&basis, ask.place()) {
            confirm(net, side, ns, name, id).map_err(Stop::Lapsed)?;
        }
        granted(ask, &basis);
    }
    Ok(())
}

/// A grant resting on "the attachment created this link" holds only while
/// the link of that name is the one it created. A link that is gone, or was
/// replaced by another of the same name, is `NotFound` for this attachment:
/// the caller forgets it (a DEL carries on and spares the other link). Any
/// other error is the backend's, passed on: not knowing is not a grant, but
/// not a reason to forget either.
pub fn verify_created(
    net: &mut dyn Net,
    side: Side,
    ns: NsId,
    name: &str,
    id: &LinkId,
) -> Result<(), NetError> {
    match net.link_by_name(ns, name) {
        Ok(l) if l.id() == *id => Ok(()),
        Ok(l) => Err(NetError::NotFound(format!(
            "link {name:?} in the {} namespace is no longer the one this attachment created (it was {} #{}, it is {} #{})",
            side.as_str(),
            id.kind,
            id.index,
            l.kind,
            l.index
        ))),
        Err(NetError::NotFound(_)) => Err(NetError::NotFound(format!(
            "link {name:?} this attachment created is gone from the {} namespace",
            side.as_str()
        ))),
        Err(e) => Err(e),
    }
}

/// Bridge isolation's grant ([`crate::policy::FilterNeed::PortOf`]): some
/// node link the attachment created, still the one it created, is a port of
/// `bridge`.
pub fn confirm_port_of(
    net: &mut dyn Net,
    node: NsId,
    bridge: &str,
    created: &BTreeMap<String, LinkId>,
) -> Result<(), String> {
    let br = net.link_by_name(node, bridge).map_err(|e| e.to_string())?;
    let port = created.iter().any(|(name, id)| {
        net.link_by_name(node, name)
            .is_ok_and(|l| l.id() == *id && l.master == Some(br.index))
    });
    match port {
        true => Ok(()),
        false => Err(format!(
            "{bridge:?} has no port this attachment created: only the attachment's own bridge may be isolated"
        )),
    }
}

/// Whether `master` carries the default route of namespace `ns` (the
/// stacked-link rule's question, [`crate::policy::Ask::stacked`]).
pub fn carries_default_route(net: &mut dyn Net, ns: NsId, master: &str) -> bool {
    net.routes(ns, master, None)
        .is_ok_and(|routes| routes.iter().any(|r| r.dst.prefix_len() == 0))
}
