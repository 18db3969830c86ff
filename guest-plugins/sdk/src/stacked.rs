//! What the plugins whose link is stacked on a master share — macvlan,
//! macvtap (a macvlan with a tap character device), ipvlan and vlan, all
//! following the reference macvlan: the mode, the master link and its MTU
//! bound, the ADD after the link exists, and the link part of CHECK. `kind`
//! is the link's kind as it reports it and as the messages name it.

use crate::check::{self, mac_matches};
use crate::config::NetConf;
use crate::error::CniError;
use crate::host::Host;
use crate::iface::{self, Notify};
use crate::ip::{parse_cidr, Family, IpNetExt};
use crate::net::{IpvlanMode, Link, MacvlanMode, Ops};
use crate::types::{CniResult, Request};

/// Parses a macvlan `mode` (absent or `""`: bridge); an unknown one is
/// code 7 `unknown <kind> mode: "<mode>"`.
pub fn parse_mode(kind: &str, mode: Option<&str>) -> Result<MacvlanMode, CniError> {
    let text = mode.unwrap_or_default();
    MacvlanMode::parse(text).ok_or_else(|| unknown_mode(kind, text))
}

/// Parses an ipvlan `mode` (absent or `""`: l2), as [`parse_mode`].
pub fn parse_ipvlan_mode(mode: Option<&str>) -> Result<IpvlanMode, CniError> {
    let text = mode.unwrap_or_default();
    IpvlanMode::parse(text).ok_or_else(|| unknown_mode("ipvlan", text))
}

fn unknown_mode(kind: &str, text: &str) -> CniError {
    CniError::invalid_config(format!("unknown {kind} mode: {text:?}"))
}

/// Where the master lives: the container namespace with `linkInContainer`,
/// else the node's.
pub fn master_ns<'a, N>(link_in_container: bool, node: &'a N, cont: &'a N) -> &'a N {
    if link_in_container {
        cont
    } else {
        node
    }
}

/// The first link with an IPv4 default route, else the first with an IPv6
/// one (the reference takes the first default route the kernel lists, v4
/// before v6).
pub fn default_route_interface<N: Ops>(ns: &N) -> Result<String, CniError> {
    let links = ns
        .list_links()
        .map_err(|e| e.into_cni("failed to list links"))?;
    for family in [Family::V4, Family::V6] {
        for link in &links {
            let Ok(routes) = ns.list_routes(&link.name, None) else {
                continue;
            };
            if routes.iter().any(|r| {
                parse_cidr(&r.dst).is_ok_and(|d| d.trunc().is_default() && d.family() == family)
            }) {
                return Ok(link.name.clone());
            }
        }
    }
    Err(CniError::internal("no default route interface found"))
}

/// The master link in `ns` (`master`, default: [`default_route_interface`])
/// and the MTU to ask for (`None`: the master's); `mtu` must be within
/// `[0, master MTU]` (code 7).
pub fn resolve_master<N: Ops>(
    ns: &N,
    master: Option<&str>,
    mtu: i64,
) -> Result<(Link, Option<u32>), CniError> {
    let name = match master {
        Some(m) => m.to_string(),
        None => default_route_interface(ns)?,
    };
    let link = ns
        .link_by_name(&name)
        .map_err(|e| e.into_cni(format_args!("failed to lookup master {name:?}")))?;
    if mtu < 0 || mtu > i64::from(link.mtu) {
        return Err(CniError::invalid_config(format!(
            "invalid MTU {mtu}, must be [0, master MTU({})]",
            link.mtu
        )));
    }
    let mtu = u32::try_from(mtu).ok().filter(|m| *m != 0);
    Ok((link, mtu))
}

/// ADD after the link exists as CNI_IFNAME in `cont`: with IPAM,
/// [`iface::attach_ipam`] (`arp_notify` and `ndisc_notify`); without, the
/// addresses of `chained` (a prevResult, for plugins that take them, as
/// ipvlan does) if it has any, else the link is just set up. The MAC is
/// re-read, and the result carries the config's `dns` only (the reference
/// drops IPAM's). The caller deletes the link on error; an IPAM allocation
/// made here is released here.
pub fn configure_link<H: Host>(
    host: &H,
    cont: &H::Ns,
    net: &NetConf,
    req: &Request,
    link: &Link,
    chained: Option<&CniResult>,
) -> Result<CniResult, CniError> {
    let ifname = req.ifname.as_str();
    let mut result = iface::container_result(req, link);
    match chained.filter(|p| !net.has_ipam() && !p.ips.is_empty()) {
        Some(prev) => {
            result.ips.clone_from(&prev.ips);
            result.routes.clone_from(&prev.routes);
            for ipc in &mut result.ips {
                ipc.interface = Some(0);
            }
            Notify::ArpAndNdisc.apply(cont, ifname);
            iface::configure_iface(cont, ifname, &result)?;
        }
        None if net.has_ipam() => {
            iface::attach_ipam(host, cont, ifname, 0, Notify::ArpAndNdisc, &mut result)?;
        }
        None => iface::link_up(cont, ifname)?,
    }
    iface::refresh_mac(cont, &mut result.interfaces[0]);
    result.dns = net.dns_if_set();
    Ok(result)
}

/// The link part of CHECK: prevResult records CNI_IFNAME in CNI_NETNS, and
/// the link of that name is a `kind` link that passes `particular` (its
/// mode, its vlan id) with the recorded MAC. Returns the link for the
/// caller's own checks.
pub fn check_link<N: Ops>(
    cont: &N,
    req: &Request,
    prev: &CniResult,
    kind: &str,
    particular: impl FnOnce(&Link) -> Result<(), CniError>,
) -> Result<Link, CniError> {
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
    if link.kind != kind {
        return Err(CniError::internal(format!(
            "error: Container interface {} not of type {kind}",
            link.name
        )));
    }
    particular(&link)?;
    if !mac_matches(cont_map.mac.as_deref(), &link) {
        return Err(CniError::internal(format!(
            "interface {} Mac {} doesn't match container Mac: {}",
            link.name,
            cont_map.mac.as_deref().unwrap_or(""),
            link.mac
        )));
    }
    Ok(link)
}

/// For [`check_link`]: the link's mode (if it reports one) is `expected`.
pub fn mode_is(kind: &str, actual: Option<&str>, expected: &str) -> Result<(), CniError> {
    match actual {
        Some(actual) if actual != expected => Err(CniError::internal(format!(
            "container {kind} mode {actual} does not match expected value: {expected}"
        ))),
        _ => Ok(()),
    }
}

/// For [`check_link`]: a macvlan's or macvtap's mode is `mode`.
pub fn macvlan_mode_is(
    kind: &str,
    mode: MacvlanMode,
) -> impl FnOnce(&Link) -> Result<(), CniError> + '_ {
    move |l| mode_is(kind, l.macvlan_mode.map(MacvlanMode::as_str), mode.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeHost, NsId};

    #[test]
    fn modes_and_their_error() {
        assert_eq!(parse_mode("macvlan", None).unwrap(), MacvlanMode::Bridge);
        assert_eq!(
            parse_mode("macvtap", Some("")).unwrap(),
            MacvlanMode::Bridge
        );
        assert_eq!(
            parse_mode("macvtap", Some("vepa")).unwrap(),
            MacvlanMode::Vepa
        );
        let e = parse_mode("macvtap", Some("foo")).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (7, r#"unknown macvtap mode: "foo""#)
        );
    }

    #[test]
    fn master_defaults_to_the_default_route_link_v4_first() {
        let host = FakeHost::new("eth0");
        let node = host.ns(NsId::Node);
        host.add_link(NsId::Node, "ens4", "device", 9000);
        host.add_default_route(NsId::Node, "ens4", "fe80::1");
        assert_eq!(default_route_interface(&node).unwrap(), "ens3");
        host.remove_route(NsId::Node, "0.0.0.0/0");
        let (master, mtu) = resolve_master(&node, None, 0).unwrap();
        assert_eq!((master.name.as_str(), mtu), ("ens4", None));
        assert_eq!(
            resolve_master(&node, Some("ens3"), 1400).unwrap().1,
            Some(1400)
        );
        let e = resolve_master(&node, Some("ens3"), 1501).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (7, "invalid MTU 1501, must be [0, master MTU(1500)]")
        );
        let e = resolve_master(&node, Some("nope"), 0).unwrap_err();
        assert!(
            e.msg
                .starts_with(r#"failed to lookup master "nope": not found"#),
            "{}",
            e.msg
        );
        host.remove_route(NsId::Node, "::/0");
        assert_eq!(
            default_route_interface(&node).unwrap_err().msg,
            "no default route interface found"
        );
    }
}
