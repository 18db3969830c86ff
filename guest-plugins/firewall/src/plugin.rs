//! The firewall verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config;
use wasm_cni_sdk::filter::Rule;
use wasm_cni_sdk::{CniError, CniResult, Host, Plugin, Request};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    iptables_admin_chain_name: Option<String>,
    #[serde(default)]
    firewalld_zone: Option<String>,
    #[serde(default)]
    ingress_policy: Option<String>,
}

#[derive(Debug)]
pub struct Conf {
    pub same_bridge: bool,
    unsupported: Vec<(&'static str, String)>,
}

pub fn load(text: &str) -> Result<Conf, CniError> {
    let (_net, raw): (config::NetConf, Raw) = config::parse(text)?;
    let mut unsupported = Vec::new();
    // The rules are the host's nftables rules, never firewalld's zones; an
    // admin chain to jump to does not exist.
    match raw.backend.as_deref() {
        None | Some("" | "iptables") => {}
        Some(other) => unsupported.push(("backend", format!("{other:?}"))),
    }
    if let Some(c) = raw.iptables_admin_chain_name.filter(|c| !c.is_empty()) {
        unsupported.push(("iptablesAdminChainName", format!("{c:?}")));
    }
    if let Some(z) = raw.firewalld_zone.filter(|z| !z.is_empty()) {
        unsupported.push(("firewalldZone", format!("{z:?}")));
    }
    let same_bridge = match raw.ingress_policy.as_deref() {
        None | Some("" | "open") => false,
        Some("same-bridge") => true,
        Some(other) => {
            return Err(CniError::invalid_config(format!(
                "unknown ingress policy: {other:?}"
            )))
        }
    };
    Ok(Conf {
        same_bridge,
        unsupported,
    })
}

impl Conf {
    /// Forwarding for each of the pod's addresses, and with `same-bridge`
    /// the isolation of the bridge, which the reference takes as the
    /// result's first interface.
    pub fn rules(&self, result: &CniResult) -> Result<Vec<Rule>, CniError> {
        let mut rules = Vec::new();
        for ip in &result.ips {
            let addr = ip.address.split('/').next().unwrap_or_default();
            if addr.parse::<std::net::IpAddr>().is_err() {
                return Err(CniError::invalid_config(format!(
                    "invalid address {:?} in prevResult",
                    ip.address
                )));
            }
            rules.push(Rule::AllowForward(addr.to_string()));
        }
        if self.same_bridge {
            let Some(bridge) = result.interfaces.first() else {
                return Err(CniError::invalid_config(
                    "interface needs to be set for ingress policy \"same-bridge\", make sure to chain \"firewall\" plugin with \"bridge\"",
                ));
            };
            rules.push(Rule::IsolateBridge(bridge.name.clone()));
        }
        Ok(rules)
    }
}

pub struct Firewall;

impl Plugin for Firewall {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config)?;
        if let Some((key, value)) = conf.unsupported.first() {
            return Err(CniError::unsupported_field(key, value));
        }
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::invalid_config("missing prevResult from earlier plugin"))?;
        let rules = conf.rules(prev)?;
        if !rules.is_empty() {
            host.filter_add(&rules)
                .map_err(|e| e.into_cni("could not add firewall rules"))?;
        }
        Ok(prev.clone())
    }

    /// Nothing to do: the host removes the attachment's rules, all in one
    /// batch, once every plugin's DEL has succeeded.
    fn del<H: Host>(_host: &H, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config)?;
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let rules = conf.rules(prev)?;
        if rules.is_empty() {
            return Ok(());
        }
        host.filter_check(&rules)
            .map_err(|e| e.into_cni("firewall rules"))
    }
}
