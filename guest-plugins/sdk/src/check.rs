//! CHECK helpers: what the reference's `ip.ValidateExpectedInterfaceIPs`
//! and `ip.ValidateExpectedRoute` do, plus the prevResult lookups every
//! interface plugin's CHECK starts with.

use crate::error::CniError;
use crate::ip::{parse_cidr, IpNet, IpNetExt};
use crate::net::{Link, Ops, RouteSpec};
use crate::types::{CniResult, Interface, Request, Route};

/// `prevResult` is required by CHECK (reference message).
pub fn require_prev_result(prev: Option<&CniResult>) -> Result<&CniResult, CniError> {
    prev.ok_or_else(|| CniError::internal("Required prevResult missing"))
}

/// The prevResult interface named `ifname` whose sandbox is `netns`.
pub fn container_interface<'a>(
    result: &'a CniResult,
    ifname: &str,
    netns: Option<&str>,
) -> Option<&'a Interface> {
    result
        .interfaces
        .iter()
        .find(|i| i.name == ifname && i.sandbox.as_deref() == netns)
}

/// [`container_interface`] for CNI_IFNAME and CNI_NETNS, required, with the
/// reference ptp and bridge message (`Sandbox in prevResult doesn't match
/// configured netns: <CNI_NETNS>`).
pub fn require_container_interface<'a>(
    prev: &'a CniResult,
    req: &Request,
) -> Result<&'a Interface, CniError> {
    let netns = req.netns.as_deref();
    container_interface(prev, &req.ifname, netns).ok_or_else(|| {
        CniError::internal(format!(
            "Sandbox in prevResult doesn't match configured netns: {}",
            netns.unwrap_or("")
        ))
    })
}

/// Checks a link's MAC against the one recorded in prevResult, if any.
pub fn mac_matches(recorded: Option<&str>, link: &Link) -> bool {
    recorded
        .filter(|m| !m.is_empty())
        .is_none_or(|m| crate::mac::same(m, &link.mac))
}

/// Every prevResult ip meant for `ifname` (no `interface` index, or one
/// pointing at an interface of that name) must be on the link, and some
/// route must lead to its prefix.
pub fn validate_interface_ips<N: Ops>(
    ns: &N,
    ifname: &str,
    result: &CniResult,
) -> Result<(), CniError> {
    let on_link = ns
        .list_addresses(ifname)
        .map_err(|_| CniError::internal(format!("Cannot find container link {ifname}")))?;
    let on_link: Vec<IpNet> = on_link.iter().filter_map(|a| parse_cidr(a).ok()).collect();
    let routes = ns
        .all_routes(None)
        .map_err(|e| e.into_cni("Cannot list routes"))?;
    for ipc in &result.ips {
        let for_us = match ipc.interface {
            None => true,
            Some(i) => usize::try_from(i)
                .ok()
                .and_then(|i| result.interfaces.get(i))
                .is_none_or(|iface| iface.name == ifname),
        };
        if !for_us {
            continue;
        }
        let ours =
            parse_cidr(&ipc.address).map_err(|e| CniError::internal(format!("prevResult: {e}")))?;
        if !on_link.contains(&ours) {
            return Err(CniError::internal(format!(
                "Failed to match addr {} on interface {ifname}",
                ipc.address
            )));
        }
        let prefix = ours.trunc();
        let routed = routes
            .iter()
            .any(|r| parse_cidr(&r.dst).is_ok_and(|d| d.trunc() == prefix));
        if !routed {
            return Err(CniError::internal(format!(
                "Failed to find Gateway {} for interface {ifname}",
                ipc.gateway.as_deref().unwrap_or("<nil>")
            )));
        }
    }
    Ok(())
}

/// Every prevResult route must exist in its table, anywhere in the
/// namespace: a default route (`0.0.0.0/0`, `::/0`) is matched by
/// destination alone, as the reference does (its filter drops the gateway
/// for default routes, so a chained plugin may change the default gateway);
/// other routes by destination and, when given, gateway.
pub fn validate_routes<N: Ops>(ns: &N, routes: &[Route]) -> Result<(), CniError> {
    let mut tables: Vec<(Option<u32>, Vec<RouteSpec>)> = Vec::new();
    for route in routes {
        let dst = parse_cidr(&route.dst)
            .map_err(|_| CniError::internal(format!("Invalid static route found {}", route.dst)))?;
        let dst = dst.trunc();
        let table_routes = match tables.iter().position(|(t, _)| *t == route.table) {
            Some(i) => &tables[i].1,
            None => {
                let listed = ns
                    .all_routes(route.table)
                    .map_err(|e| e.into_cni("Cannot list routes"))?;
                tables.push((route.table, listed));
                &tables[tables.len() - 1].1
            }
        };
        let gw = route
            .gw
            .as_deref()
            .and_then(|g| crate::ip::parse_ip(g).ok());
        let found = table_routes.iter().any(|r| {
            let Ok(rdst) = parse_cidr(&r.dst) else {
                return false;
            };
            if rdst.trunc() != dst {
                return false;
            }
            if dst.is_default() {
                return true;
            }
            match gw {
                None => true,
                Some(gw) => {
                    r.gw.as_deref()
                        .and_then(|g| crate::ip::parse_ip(g).ok())
                        .is_some_and(|rg| rg == gw)
                }
            }
        });
        if !found {
            return Err(CniError::internal(format!(
                "Expected Route {{Dst:{} GW:{}}} not found in routing table",
                route.dst,
                route.gw.as_deref().unwrap_or("<nil>")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{ipam_result, FakeHost, NsId};

    fn setup() -> (FakeHost, crate::fake::FakeNs, CniResult) {
        let host = FakeHost::new("eth0");
        host.disable_policy();
        let c = host.ns(NsId::Container);
        host.add_link(NsId::Container, "eth0", "veth", 1500);
        host.add_address(NsId::Container, "eth0", "10.0.0.2/24");
        host.add_default_route(NsId::Container, "eth0", "10.0.0.1");
        let mut r = ipam_result(
            &[("10.0.0.2/24", Some("10.0.0.1"))],
            &["0.0.0.0/0", "10.0.0.0/24"],
        );
        r.interfaces = vec![Interface {
            name: "eth0".into(),
            ..Interface::default()
        }];
        r.ips[0].interface = Some(0);
        (host, c, r)
    }

    #[test]
    fn ips_and_routes_present() {
        let (_host, c, r) = setup();
        validate_interface_ips(&c, "eth0", &r).unwrap();
        validate_routes(&c, &r.routes).unwrap();
    }

    #[test]
    fn ips_of_other_interfaces_are_not_ours() {
        let (_host, c, mut r) = setup();
        r.interfaces.push(Interface {
            name: "net1".into(),
            ..Interface::default()
        });
        r.ips.push(ip_on("10.9.9.9/24", 1));
        validate_interface_ips(&c, "eth0", &r).unwrap();
        r.ips[1].interface = Some(0);
        let e = validate_interface_ips(&c, "eth0", &r).unwrap_err();
        assert_eq!(e.msg, "Failed to match addr 10.9.9.9/24 on interface eth0");
    }

    #[test]
    fn routes_match_by_destination_and_gateway_except_default() {
        let (host, c, mut r) = setup();
        r.routes[0].gw = Some("10.0.0.254".into());
        validate_routes(&c, &r.routes).unwrap();
        r.routes[1].gw = Some("10.0.0.254".into());
        let e = validate_routes(&c, &r.routes).unwrap_err();
        assert_eq!(
            e.msg,
            "Expected Route {Dst:10.0.0.0/24 GW:10.0.0.254} not found in routing table"
        );
        host.remove_route(NsId::Container, "0.0.0.0/0");
        let e = validate_routes(&c, &r.routes[..1]).unwrap_err();
        assert!(
            e.msg.starts_with("Expected Route {Dst:0.0.0.0/0"),
            "{}",
            e.msg
        );
        r.routes[1].table = Some(7);
        r.routes[1].gw = None;
        assert!(validate_routes(&c, &r.routes[1..]).is_err());
    }

    #[test]
    fn the_container_interface_must_be_in_the_sandbox() {
        let (host, _c, mut r) = setup();
        let mut req = host.request("{}");
        r.interfaces[0].sandbox = req.netns.clone();
        assert_eq!(require_container_interface(&r, &req).unwrap().name, "eth0");
        req.netns = Some("/var/run/netns/other".into());
        let e = require_container_interface(&r, &req).unwrap_err();
        assert_eq!(
            e.msg,
            "Sandbox in prevResult doesn't match configured netns: /var/run/netns/other"
        );
    }

    #[test]
    fn missing_prefix_route_fails() {
        let (host, c, r) = setup();
        host.remove_route(NsId::Container, "10.0.0.0/24");
        let e = validate_interface_ips(&c, "eth0", &r).unwrap_err();
        assert_eq!(e.msg, "Failed to find Gateway 10.0.0.1 for interface eth0");
    }

    fn ip_on(address: &str, interface: u32) -> crate::types::IpConfig {
        crate::types::IpConfig {
            address: address.into(),
            gateway: None,
            interface: Some(interface),
        }
    }
}
