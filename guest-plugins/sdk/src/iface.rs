//! The reference `ipam.ConfigureIface`, the IPAM step of an interface
//! plugin's ADD built on it ([`attach_ipam`], [`with_ipam`]) and small
//! helpers around results.

use std::net::IpAddr;

use crate::error::CniError;
use crate::host::Host;
use crate::ip::{parse_cidr, parse_ip, Family, IpNet, IpNetExt};
use crate::net::{iface_sysctl, Link, NetError, Ops, RouteSpec};
use crate::plugin::undo_ipam;
use crate::types::{CniResult, Interface, IpConfig, Request};

/// Parses an `ips[].address`, naming the field on error (code 999: results
/// come from IPAM plugins, not the user's config).
pub fn parse_address(ipc: &IpConfig) -> Result<IpNet, CniError> {
    parse_cidr(&ipc.address).map_err(|e| CniError::internal(format!("IPAM result: {e}")))
}

/// Parses an `ips[].gateway`, if any.
pub fn parse_gateway(ipc: &IpConfig) -> Result<Option<IpAddr>, CniError> {
    ipc.gateway
        .as_deref()
        .map(|g| parse_ip(g).map_err(|e| CniError::internal(format!("IPAM result: gateway: {e}"))))
        .transpose()
}

/// The IPAM result must carry at least one IP (reference message).
pub fn require_ips(result: &CniResult) -> Result<(), CniError> {
    if result.ips.is_empty() {
        return Err(CniError::internal("IPAM plugin returned missing IP config"));
    }
    Ok(())
}

/// The address families present in `result.ips`, in first-seen order.
pub fn families(result: &CniResult) -> Result<Vec<Family>, CniError> {
    let mut out = Vec::new();
    for ipc in &result.ips {
        let family = parse_address(ipc)?.family();
        if !out.contains(&family) {
            out.push(family);
        }
    }
    Ok(out)
}

/// Turns on forwarding for each family (Go `ip.EnableForward`), in the
/// namespace given (normally the node's).
pub fn enable_forwarding<N: Ops>(ns: &N, families: &[Family]) -> Result<(), CniError> {
    for family in families {
        let key = family.forwarding_sysctl();
        if ns.get_sysctl(key).is_ok_and(|v| v.trim() == "1") {
            continue;
        }
        ns.set_sysctl(key, "1")
            .map_err(|e| e.into_cni(format_args!("failed to enable forwarding ({key}=1)")))?;
    }
    Ok(())
}

/// A result whose one interface is CNI_IFNAME in CNI_NETNS with `link`'s
/// MAC: what plugins that create only the container link (macvlan,
/// macvtap, tap) report.
pub fn container_result(req: &Request, link: &Link) -> CniResult {
    CniResult {
        interfaces: vec![Interface {
            name: req.ifname.clone(),
            mac: Some(link.mac.clone()),
            sandbox: req.netns.clone(),
            ..Interface::default()
        }],
        ..CniResult::default()
    }
}

/// Re-reads the MAC of the link `iface` names in `ns` (enslaving and
/// addressing may change it); keeps the recorded one if the link cannot be
/// read.
pub fn refresh_mac<N: Ops>(ns: &N, iface: &mut Interface) {
    if let Ok(l) = ns.link_by_name(&iface.name) {
        iface.mac = Some(l.mac);
    }
}

/// Sets the link up, failing as the reference `ConfigureIface` does
/// (`failed to set "<ifname>" UP: …`).
pub fn link_up<N: Ops>(ns: &N, ifname: &str) -> Result<(), CniError> {
    ns.set_up(ifname)
        .map_err(|e| e.into_cni(format_args!("failed to set {ifname:?} UP")))?;
    Ok(())
}

/// The neighbour-notification sysctls set on an interface before it is
/// addressed (failures ignored, as in the references).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// `arp_notify=1` (tap, bridge).
    Arp,
    /// `arp_notify=1` and `ndisc_notify=1` (macvlan, macvtap).
    ArpAndNdisc,
}

impl Notify {
    pub fn apply<N: Ops>(self, ns: &N, ifname: &str) {
        let _ = try_sysctl(ns, &iface_sysctl("ipv4", ifname, "arp_notify"), "1");
        if self == Self::ArpAndNdisc {
            let _ = try_sysctl(ns, &iface_sysctl("ipv6", ifname, "ndisc_notify"), "1");
        }
    }
}

/// IPAM ADD, then `configure` with its result; if `configure` fails, the
/// allocation is released (IPAM DEL, best effort, see
/// [`crate::plugin::undo_ipam`]) and its error returned. An IPAM ADD error
/// is returned as is.
pub fn with_ipam<H: Host, T>(
    host: &H,
    configure: impl FnOnce(CniResult) -> Result<T, CniError>,
) -> Result<T, CniError> {
    let allocated = host.ipam_add()?;
    configure(allocated).inspect_err(|_| undo_ipam(host))
}

/// The IPAM step of an interface plugin's ADD, for a result whose
/// `interfaces` are already filled in, `ifname` (in `ns`) being
/// `interfaces[index]`:
///
/// 1. IPAM ADD;
/// 2. the IPAM result must hold an IP ([`require_ips`]);
/// 3. `result.ips` and `result.routes` become IPAM's, every ip pointing at
///    `index` (IPAM's `dns` is left to the caller);
/// 4. the `notify` sysctls on `ifname`;
/// 5. [`configure_iface`].
///
/// A failure after 1 releases the allocation (see [`with_ipam`]).
pub fn attach_ipam<H: Host>(
    host: &H,
    ns: &H::Ns,
    ifname: &str,
    index: u32,
    notify: Notify,
    result: &mut CniResult,
) -> Result<(), CniError> {
    with_ipam(host, |allocated| {
        require_ips(&allocated)?;
        result.ips = allocated.ips;
        result.routes = allocated.routes;
        for ipc in &mut result.ips {
            ipc.interface = Some(index);
        }
        notify.apply(ns, ifname);
        configure_iface(ns, ifname, result)
    })
}

/// The reference `ipam.ConfigureIface(ifname, result)`, run against `ns`:
///
/// * ips without `interface` are skipped; an index pointing elsewhere is an
///   error (`invalid interface index`);
/// * before the first IPv6 address: `disable_ipv6=0` on `lo` and the
///   interface (only if not already 0; a read failure is skipped) and
///   `keep_addr_on_down=1` on the interface;
/// * each address is added, then the link is set up;
/// * each route is added on the interface, `gw` defaulting to the first
///   gateway of the same family among the ips; `priority`, `table`,
///   `scope` are honoured, and unlike the reference so are `mtu` and
///   `advmss` (the WIT route-spec carries them).
///
/// Differences: no 5 s wait for IPv6 DAD to settle (a guest has no clock;
/// plugins disable DAD on the container side where the reference does).
pub fn configure_iface<N: Ops>(ns: &N, ifname: &str, result: &CniResult) -> Result<(), CniError> {
    if result.interfaces.is_empty() {
        return Err(CniError::internal("no interfaces to configure"));
    }
    ns.link_by_name(ifname)
        .map_err(|e| e.into_cni(format_args!("failed to lookup {ifname:?}")))?;

    let mut v4gw: Option<IpAddr> = None;
    let mut v6gw: Option<IpAddr> = None;
    let mut ipv6_enabled = false;
    for ipc in &result.ips {
        let Some(index) = ipc.interface else {
            continue;
        };
        let points_here = usize::try_from(index)
            .ok()
            .and_then(|i| result.interfaces.get(i))
            .is_some_and(|iface| iface.name == ifname);
        if !points_here {
            return Err(CniError::internal(format!(
                "failed to add IP addr {} to {ifname:?}: invalid interface index",
                ipc.address
            )));
        }
        let addr = parse_address(ipc)?;
        if !ipv6_enabled && addr.family() == Family::V6 {
            enable_ipv6(ns, ifname)?;
            ipv6_enabled = true;
        }
        ns.add_address(ifname, &addr.to_string()).map_err(|e| {
            e.into_cni(format_args!(
                "failed to add IP addr {} to {ifname:?}",
                ipc.address
            ))
        })?;
        if let Some(gw) = parse_gateway(ipc)? {
            match Family::of(&gw) {
                Family::V4 => {
                    v4gw.get_or_insert(gw);
                }
                Family::V6 => {
                    v6gw.get_or_insert(gw);
                }
            }
        }
    }

    link_up(ns, ifname)?;

    for route in &result.routes {
        let dst = parse_cidr(&route.dst).map_err(|e| CniError::internal(format!("route: {e}")))?;
        let gw = match &route.gw {
            Some(gw) => Some(gw.clone()),
            None => match dst.family() {
                Family::V4 => v4gw.map(|g| g.to_string()),
                Family::V6 => v6gw.map(|g| g.to_string()),
            },
        };
        let spec = RouteSpec {
            dst: dst.trunc().to_string(),
            gw: gw.clone(),
            dev: Some(ifname.to_string()),
            src: None,
            mtu: route.mtu,
            advmss: route.advmss,
            priority: route.priority,
            table: route.table,
            scope: route.scope,
        };
        ns.add_route(&spec).map_err(|e| {
            e.into_cni(format_args!(
                "failed to add route '{} via {} dev {ifname} metric {}'",
                route.dst,
                gw.as_deref().unwrap_or("<nil>"),
                route.priority.unwrap_or(0)
            ))
        })?;
    }
    Ok(())
}

fn enable_ipv6<N: Ops>(ns: &N, ifname: &str) -> Result<(), CniError> {
    for iface in ["lo", ifname] {
        let key = iface_sysctl("ipv6", iface, "disable_ipv6");
        match ns.get_sysctl(&key) {
            // The reference logs and skips an unreadable sysctl.
            Err(_) => continue,
            Ok(v) if v.trim() == "0" => continue,
            Ok(old) => ns.set_sysctl(&key, "0").map_err(|e| {
                e.into_cni(format_args!(
                    "failed to enable IPv6 for interface {iface:?} ({key}={})",
                    old.trim()
                ))
            })?,
        }
    }
    let key = iface_sysctl("ipv6", ifname, "keep_addr_on_down");
    ns.set_sysctl(&key, "1").map_err(|e| {
        e.into_cni(format_args!(
            "failed to enable keep_addr_on_down for interface {ifname:?}"
        ))
    })
}

/// Sets a sysctl, ignoring failure (the reference ignores these writes'
/// errors: `accept_dad`, `arp_notify`, `accept_ra`, `ndisc_notify`).
pub fn try_sysctl<N: Ops>(ns: &N, key: &str, value: &str) -> Option<NetError> {
    ns.set_sysctl(key, value).err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{ipam_result, FakeHost, NsId};
    use crate::net::Ops;
    use crate::types::{Interface, Route};

    fn setup() -> (FakeHost, crate::fake::FakeNs) {
        let host = FakeHost::new("eth0");
        let (c, n) = (host.ns(NsId::Container), host.ns(NsId::Node));
        c.create_veth("eth0", "vethx", &n, None, None).unwrap();
        (host, c)
    }

    fn result(ips: &[(&str, Option<&str>)], routes: &[&str], index: Option<u32>) -> CniResult {
        let mut r = ipam_result(ips, routes);
        r.interfaces = vec![Interface {
            name: "eth0".into(),
            ..Interface::default()
        }];
        for ip in &mut r.ips {
            ip.interface = index;
        }
        r
    }

    #[test]
    fn gateways_default_per_family_and_route_fields_pass_through() {
        let (host, c) = setup();
        let mut r = result(
            &[
                ("10.0.0.2/24", Some("10.0.0.1")),
                ("10.0.0.3/24", Some("10.0.0.9")),
                ("2001:db8::2/64", Some("2001:db8::1")),
            ],
            &["0.0.0.0/0", "::/0", "192.168.0.0/16"],
            Some(0),
        );
        r.routes[2].gw = Some("10.0.0.9".into());
        r.routes[2].priority = Some(10);
        r.routes.push(Route {
            dst: "172.16.0.0/12".into(),
            table: Some(100),
            ..Route::default()
        });
        configure_iface(&c, "eth0", &r).unwrap();
        assert_eq!(
            host.addresses(NsId::Container, "eth0"),
            ["10.0.0.2/24", "10.0.0.3/24", "2001:db8::2/64"]
        );
        assert!(host.link(NsId::Container, "eth0").unwrap().up);
        let routes = host.routes(NsId::Container);
        for want in [
            "0.0.0.0/0 via 10.0.0.1 dev eth0",
            "::/0 via 2001:db8::1 dev eth0",
            "192.168.0.0/16 via 10.0.0.9 dev eth0",
            "172.16.0.0/12 via 10.0.0.1 dev eth0 table 100",
        ] {
            assert!(
                routes.contains(&want.to_string()),
                "{want} not in {routes:?}"
            );
        }
        assert_eq!(
            host.sysctl(NsId::Container, "net.ipv6.conf.eth0.keep_addr_on_down")
                .as_deref(),
            Some("1")
        );
    }

    #[test]
    fn ips_without_index_are_skipped_and_a_wrong_index_fails() {
        let (host, c) = setup();
        configure_iface(&c, "eth0", &result(&[("10.0.0.2/24", None)], &[], None)).unwrap();
        assert!(host.addresses(NsId::Container, "eth0").is_empty());
        let e = configure_iface(&c, "eth0", &result(&[("10.0.0.2/24", None)], &[], Some(3)))
            .unwrap_err();
        assert_eq!(
            e.msg,
            "failed to add IP addr 10.0.0.2/24 to \"eth0\": invalid interface index"
        );
        let mut none = result(&[], &[], None);
        none.interfaces.clear();
        assert_eq!(
            configure_iface(&c, "eth0", &none).unwrap_err().msg,
            "no interfaces to configure"
        );
        let e = configure_iface(&c, "eth1", &result(&[], &[], None)).unwrap_err();
        assert!(e.msg.starts_with("failed to lookup \"eth1\""), "{}", e.msg);
    }

    #[test]
    fn ipv4_only_leaves_ipv6_sysctls_alone() {
        let (host, c) = setup();
        host.set_sysctl(NsId::Container, "net.ipv6.conf.eth0.disable_ipv6", "1");
        configure_iface(&c, "eth0", &result(&[("10.0.0.2/24", None)], &[], Some(0))).unwrap();
        assert_eq!(
            host.sysctl(NsId::Container, "net.ipv6.conf.eth0.disable_ipv6")
                .as_deref(),
            Some("1")
        );
        configure_iface(
            &c,
            "eth0",
            &result(&[("2001:db8::2/64", None)], &[], Some(0)),
        )
        .unwrap();
        assert_eq!(
            host.sysctl(NsId::Container, "net.ipv6.conf.eth0.disable_ipv6")
                .as_deref(),
            Some("0")
        );
    }

    #[test]
    fn attach_ipam_points_ips_at_the_interface_and_releases_on_failure() {
        let (host, c) = setup();
        host.set_ipam_result(ipam_result(
            &[("10.0.0.2/24", Some("10.0.0.1"))],
            &["0.0.0.0/0"],
        ));
        let interfaces = vec![
            Interface {
                name: "vethx".into(),
                ..Interface::default()
            },
            Interface {
                name: "eth0".into(),
                ..Interface::default()
            },
        ];
        let mut r = CniResult {
            interfaces: interfaces.clone(),
            ..CniResult::default()
        };
        attach_ipam(&host, &c, "eth0", 1, Notify::Arp, &mut r).unwrap();
        assert_eq!(r.ips[0].interface, Some(1));
        assert_eq!(r.routes[0].dst, "0.0.0.0/0");
        assert_eq!(host.addresses(NsId::Container, "eth0"), ["10.0.0.2/24"]);
        let sysctl = |k: &str| host.sysctl(NsId::Container, k);
        assert_eq!(
            sysctl("net.ipv4.conf.eth0.arp_notify").as_deref(),
            Some("1")
        );
        assert_eq!(
            sysctl("net.ipv6.conf.eth0.ndisc_notify").as_deref(),
            Some("0")
        );
        assert_eq!(host.ipam_calls(), ["add"]);

        // A failure after IPAM ADD releases the allocation.
        let (host, c) = setup();
        host.set_ipam_result(ipam_result(&[("10.0.0.2/24", None)], &[]));
        let mut r = CniResult {
            interfaces,
            ..CniResult::default()
        };
        let e = attach_ipam(&host, &c, "eth0", 0, Notify::ArpAndNdisc, &mut r).unwrap_err();
        assert!(e.msg.ends_with("invalid interface index"), "{}", e.msg);
        assert_eq!(
            host.sysctl(NsId::Container, "net.ipv6.conf.eth0.ndisc_notify")
                .as_deref(),
            Some("1")
        );
        assert_eq!(host.ipam_calls(), ["add", "del"]);
        assert!(!host.ipam_allocated());
        host.set_ipam_result(ipam_result(&[], &[]));
        let e = attach_ipam(&host, &c, "eth0", 1, Notify::Arp, &mut r).unwrap_err();
        assert_eq!(e.msg, "IPAM plugin returned missing IP config");
        assert_eq!(host.ipam_calls(), ["add", "del", "add", "del"]);
        host.set_ipam_error("add", CniError::internal("exhausted"));
        let e = attach_ipam(&host, &c, "eth0", 1, Notify::Arp, &mut r).unwrap_err();
        assert_eq!(e.msg, "exhausted");
        assert_eq!(host.ipam_calls().len(), 5, "no DEL without an allocation");
    }

    #[test]
    fn container_result_and_refreshed_mac() {
        let (host, c) = setup();
        let link = c.link_by_name("eth0").unwrap();
        let req = host.request("{}");
        let mut r = container_result(
            &req,
            &Link {
                mac: "02:00:00:00:00:01".into(),
                ..link.clone()
            },
        );
        assert_eq!(
            r.interfaces,
            [Interface {
                name: "eth0".into(),
                mac: Some("02:00:00:00:00:01".into()),
                sandbox: Some(crate::fake::NETNS_PATH.into()),
                ..Interface::default()
            }]
        );
        refresh_mac(&c, &mut r.interfaces[0]);
        assert_eq!(r.interfaces[0].mac, Some(link.mac));
        r.interfaces[0].name = "gone".into();
        refresh_mac(&c, &mut r.interfaces[0]);
        assert!(r.interfaces[0].mac.is_some(), "kept when unreadable");
    }
}
