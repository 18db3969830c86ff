//! Settings the host itself changes on the node for an attachment, beyond
//! what its plugins ask for: today `route_localnet` on the node link an
//! IPv4 hairpin rule's address is routed through (localhost connections to
//! a mapped port leave the node with a loopback source until they are
//! masqueraded), as the reference portmap sets it.
//!
//! They obey the plugins' scope: only on a node link the attachment created
//! (still that link) or one its network's config names (`bridge`,
//! `master`, `vm.parent` of any chain entry), never on whatever link the
//! node happens to route the address through. And they belong to the
//! attachment: recorded with it, put back by its DEL or GC when no other
//! attachment of the node relies on the same setting of the same link. An
//! attachment that finds the setting already made by another takes over
//! that one's old value, so whichever leaves last puts it back; a setting
//! the node made itself is never touched.

use std::collections::BTreeSet;
use std::net::IpAddr;

use wasm_cni_base::log;
use wasm_cni_kernel::filter::Rule;
use wasm_cni_kernel::net::{LinkId, Net, NetError, NsId};
use wasm_cni_store::state::{AttachmentRecord, AttachmentRecords, NodeSetting};

/// The value `route_localnet` is set to.
const ON: &str = "1";

/// The node links an effect may touch: those the attachment created (with
/// their identity) and those the network's config names.
pub(super) struct Scope<'a> {
    pub created: &'a std::collections::BTreeMap<String, LinkId>,
    pub named: &'a BTreeSet<String>,
}

/// Every node setting recorded by an attachment other than `me`; an
/// unreadable state directory yields `None` (then nothing is put back).
fn others(records: &dyn AttachmentRecords, me: (&str, &str, &str)) -> Option<Vec<NodeSetting>> {
    let mut out = Vec::new();
    for network in records.networks().ok()? {
        for r in records.list(&network).ok()? {
            if (
                r.network.as_str(),
                r.container_id.as_str(),
                r.ifname.as_str(),
            ) == me
            {
                continue;
            }
            out.extend(r.node_settings);
        }
    }
    Some(out)
}

/// Apply the host's settings for the IPv4 hairpin rules `added` and return
/// what to record, each with whether this call wrote it (else it took over
/// another attachment's). Called with the state directory locked (so that a
/// DEL deciding whether to put a setting back sees this attachment's
/// record).
pub(super) fn apply(
    net: &mut dyn Net,
    node: NsId,
    records: &dyn AttachmentRecords,
    me: (&str, &str, &str),
    scope: &Scope<'_>,
    added: &[Rule],
) -> Vec<(NodeSetting, bool)> {
    let mut out: Vec<(NodeSetting, bool)> = Vec::new();
    for rule in added {
        let Rule::HairpinMasquerade {
            dst: dst @ IpAddr::V4(_),
        } = rule
        else {
            continue;
        };
        match one(net, node, records, me, scope, dst) {
            Ok(Some(s)) if !out.iter().any(|(o, _)| o.same(&s.0)) => out.push(s),
            Ok(_) => {}
            Err(e) => log::warn(format_args!("route_localnet for {dst}: {e}")),
        }
    }
    out
}

fn one(
    net: &mut dyn Net,
    node: NsId,
    records: &dyn AttachmentRecords,
    me: (&str, &str, &str),
    scope: &Scope<'_>,
    dst: &IpAddr,
) -> Result<Option<(NodeSetting, bool)>, NetError> {
    let Some(dev) = net.route_dev(node, dst)? else {
        return Ok(None);
    };
    let link = net.link_by_name(node, &dev)?;
    let ours = match scope.created.get(&dev) {
        Some(id) => link.id() == *id,
        None => scope.named.contains(&dev),
    };
    if !ours {
        log::warn(format_args!(
            "not setting route_localnet on {dev:?} for {dst}: the node routes it through a link that is neither this attachment's nor named by its network's config (localhost connections to its mapped ports will not work)"
        ));
        return Ok(None);
    }
    let key = format!("net.ipv4.conf.{dev}.route_localnet");
    let old = net.sysctl_get(node, &key)?;
    let setting = |old: String| NodeSetting {
        key: key.clone(),
        index: link.index,
        old,
        value: ON.into(),
    };
    if old.trim() != ON {
        net.sysctl_set(node, &key, ON)?;
        return Ok(Some((setting(old), true)));
    }
    // Already on: ours to share if another attachment turned it on (take
    // over its old value), the node's own otherwise.
    let inherited = others(records, me).and_then(|all| {
        all.into_iter()
            .find(|s| s.key == key && s.index == link.index)
            .map(|s| s.old)
    });
    Ok(inherited.map(|old| (setting(old), false)))
}

/// Put back the settings of `rec` (whose record is being removed) that no
/// other attachment records. Called with the state directory locked.
/// Best effort: failures are logged.
pub(super) fn release(
    net: &mut dyn Net,
    node: NsId,
    records: &dyn AttachmentRecords,
    rec: &AttachmentRecord,
) {
    if rec.node_settings.is_empty() {
        return;
    }
    let me = (
        rec.network.as_str(),
        rec.container_id.as_str(),
        rec.ifname.as_str(),
    );
    let Some(others) = others(records, me) else {
        log::warn(format_args!(
            "state directory unreadable: keeping the node settings of {} {}",
            rec.container_id, rec.ifname
        ));
        return;
    };
    for s in &rec.node_settings {
        if others.iter().any(|o| o.same(s)) {
            continue;
        }
        if let Err(e) = put_back(net, node, s) {
            log::warn(format_args!("putting back {}: {e}", s.key));
        }
    }
}

/// Write `s.old` back if the link is still the one changed and still holds
/// the value the host wrote.
pub(super) fn put_back(net: &mut dyn Net, node: NsId, s: &NodeSetting) -> Result<(), NetError> {
    let Some(dev) = s.link_name() else {
        return Ok(());
    };
    match net.link_by_name(node, dev) {
        Ok(l) if l.index == s.index => {}
        Ok(_) | Err(NetError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    }
    if net.sysctl_get(node, &s.key)?.trim() == s.value {
        net.sysctl_set(node, &s.key, &s.old)?;
        log::info(format_args!("put back {}={}", s.key, s.old.trim()));
    }
    Ok(())
}
