//! The static IPAM verbs.

use std::net::IpAddr;

use serde::Deserialize;
use wasm_cni_sdk::args::CniArgs;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, DnsConf, NetConf};
use wasm_cni_sdk::ip::{parse_cidr, parse_ip, Family, IpNet, IpNetExt};
use wasm_cni_sdk::{CniError, CniResult, Host, IpConfig, Plugin, Request, Route};

#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    ipam: Option<IpamRaw>,
}

#[derive(Debug, Default, Deserialize)]
struct IpamRaw {
    #[serde(default)]
    routes: Option<Vec<Route>>,
    #[serde(default)]
    addresses: Option<Vec<AddressRaw>>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

#[derive(Debug, Default, Deserialize)]
struct AddressRaw {
    #[serde(default)]
    address: String,
    #[serde(default)]
    gateway: Option<String>,
}

/// One configured address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

/// The effective IPAM config (reference `LoadIPAMConfig`).
#[derive(Debug)]
pub struct IpamConf {
    pub addresses: Vec<Address>,
    pub routes: Vec<Route>,
    pub dns: Option<DnsConf>,
}

fn cidr(text: &str, msg: impl FnOnce(&str) -> String) -> Result<IpNet, CniError> {
    parse_cidr(text.trim()).map_err(|_| CniError::invalid_config(msg(text)))
}

pub fn load(text: &str, args: &[(String, String)]) -> Result<IpamConf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let ipam = raw
        .ipam
        .ok_or_else(|| CniError::invalid_config("IPAM config missing 'ipam' key"))?;

    let mut addresses = Vec::new();
    for a in ipam.addresses.unwrap_or_default() {
        let address = cidr(&a.address, |t| {
            format!("the 'address' field is expected to be in CIDR notation, got: '{t}'")
        })?;
        let gateway = a
            .gateway
            .filter(|g| !g.is_empty())
            .map(|g| {
                parse_ip(&g)
                    .map_err(|e| CniError::invalid_config(format!("address {}: {e}", a.address)))
            })
            .transpose()?;
        addresses.push(Address { address, gateway });
    }

    // CNI_ARGS IP (appended) and GATEWAY (matched to the addresses holding it).
    let cni_args = CniArgs::parse(args, &["IP", "GATEWAY"])?;
    if let Some(ips) = cni_args.ip() {
        for item in ips.split(',') {
            let address = cidr(item, |t| {
                format!(
                    "the 'ip' field is expected to be in CIDR notation, got: '{}'",
                    t.trim()
                )
            })?;
            addresses.push(Address {
                address,
                gateway: None,
            });
        }
    }
    if let Some(gateways) = cni_args.get("GATEWAY") {
        for item in gateways.split(',') {
            let gw = parse_ip(item).map_err(|_| {
                CniError::invalid_config(format!("invalid gateway address: {item}"))
            })?;
            for a in addresses.iter_mut().filter(|a| a.address.contains(&gw)) {
                a.gateway = Some(gw);
            }
        }
    }

    // args.cni.ips, then runtimeConfig.ips, each replacing all of the above.
    for list in [net.args_cni_ips(), net.runtime_ips()]
        .into_iter()
        .flatten()
    {
        if list.is_empty() {
            continue;
        }
        addresses = list
            .iter()
            .map(|t| {
                cidr(t, |t| {
                    format!("an entry in the 'ips' field is NOT in CIDR notation, got: '{t}'")
                })
                .map(|address| Address {
                    address,
                    gateway: None,
                })
            })
            .collect::<Result<_, _>>()?;
    }

    let v4 = addresses
        .iter()
        .filter(|a| a.address.family() == Family::V4)
        .count();
    let v6 = addresses.len() - v4;
    if (v4 > 1 || v6 > 1) && !net.version_at_least("0.3.0") {
        return Err(CniError::invalid_config(format!(
            "CNI version {} does not support more than 1 address per family",
            net.cni_version
        )));
    }

    // Go parses `dst` with ParseCIDR (keeping the network) and `gw` as an
    // IP: print them the same way.
    let mut routes = ipam.routes.unwrap_or_default();
    for r in &mut routes {
        let dst = parse_cidr(&r.dst)
            .map_err(|e| CniError::invalid_config(format!("ipam.routes: {e}")))?;
        r.dst = dst.trunc().to_string();
        if let Some(gw) = &mut r.gw {
            *gw = parse_ip(gw)
                .map_err(|e| CniError::invalid_config(format!("ipam.routes: {e}")))?
                .to_string();
        }
    }
    Ok(IpamConf {
        addresses,
        routes,
        dns: ipam.dns,
    })
}

pub struct Static;

impl Plugin for Static {
    fn add<H: Host>(_host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        Ok(CniResult {
            interfaces: Vec::new(),
            ips: conf
                .addresses
                .iter()
                .map(|a| IpConfig {
                    address: a.address.to_string(),
                    gateway: a.gateway.map(|g| g.to_string()),
                    interface: None,
                })
                .collect(),
            routes: conf.routes,
            dns: conf.dns.filter(DnsConf::is_set).map(|d| d.to_dns()),
        })
    }

    /// Nothing was allocated.
    fn del<H: Host>(_host: &H, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    /// Every configured address must be in prevResult, with the configured
    /// gateway if one is set.
    fn check<H: Host>(_host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        for want in &conf.addresses {
            let found = prev.ips.iter().find(|ipc| {
                parse_cidr(&ipc.address).is_ok_and(|a| a.addr() == want.address.addr())
            });
            let Some(ipc) = found else {
                return Err(CniError::internal(format!(
                    "static: Failed to find addr {} in prevResult",
                    want.address.addr()
                )));
            };
            if let Some(gw) = want.gateway {
                let got = ipc.gateway.as_deref().and_then(|g| parse_ip(g).ok());
                if got != Some(gw) {
                    return Err(CniError::internal(format!(
                        "static: Failed to match addr {} on interface {}",
                        want.address.addr(),
                        req.ifname
                    )));
                }
            }
        }
        Ok(())
    }
}
