//! The portmap verbs, generic over the host.

use std::net::IpAddr;

use serde::Deserialize;
use serde_json::Value;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config;
use wasm_cni_sdk::filter::{Protocol, Rule};
use wasm_cni_sdk::{CniError, CniResult, Host, Plugin, Request};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    snat: Option<bool>,
    #[serde(default)]
    mark_masq_bit: Option<Value>,
    #[serde(default)]
    external_set_mark_chain: Option<Value>,
    #[serde(default, rename = "conditionsV4")]
    conditions_v4: Option<Vec<String>>,
    #[serde(default, rename = "conditionsV6")]
    conditions_v6: Option<Vec<String>>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    runtime_config: Option<RawRuntime>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRuntime {
    #[serde(default)]
    port_mappings: Option<Vec<RawMapping>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMapping {
    #[serde(default)]
    host_port: i64,
    #[serde(default)]
    container_port: i64,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default, rename = "hostIP")]
    host_ip: Option<String>,
}

/// One validated `portMappings` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub protocol: Protocol,
    /// `None`: any address; `Some(unspecified)` limits the family only.
    pub host_ip: Option<IpAddr>,
    pub host_port: u16,
    pub container_port: u16,
}

#[derive(Debug)]
pub struct Conf {
    pub snat: bool,
    pub mappings: Vec<Mapping>,
    /// Set fields this port cannot honour: (key, value).
    unsupported: Vec<(&'static str, String)>,
}

fn port(v: i64, what: &str) -> Result<u16, CniError> {
    u16::try_from(v)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| CniError::invalid_config(format!("Invalid {what} port number: {v}")))
}

pub fn load(text: &str) -> Result<Conf, CniError> {
    let (_net, raw): (config::NetConf, Raw) = config::parse(text)?;
    let mut unsupported = Vec::new();
    if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
        return Err(CniError::invalid_config(
            "Cannot specify externalSetMarkChain and markMasqBit",
        ));
    }
    // Hairpin and localhost connections are masqueraded by conntrack state
    // and address, not by a packet mark, and there is no iptables chain to
    // jump to: options about the mark would silently do nothing.
    if let Some(v) = &raw.mark_masq_bit {
        unsupported.push(("markMasqBit", v.to_string()));
    }
    if let Some(v) = &raw.external_set_mark_chain {
        unsupported.push(("externalSetMarkChain", v.to_string()));
    }
    for (key, c) in [
        ("conditionsV4", &raw.conditions_v4),
        ("conditionsV6", &raw.conditions_v6),
    ] {
        if let Some(c) = c.as_ref().filter(|c| !c.is_empty()) {
            unsupported.push((key, format!("{c:?}")));
        }
    }
    match raw.backend.as_deref() {
        None | Some("" | "iptables" | "nftables") => {}
        Some(other) => unsupported.push(("backend", format!("{other:?}"))),
    }
    let mut mappings = Vec::new();
    let entries = raw
        .runtime_config
        .and_then(|r| r.port_mappings)
        .unwrap_or_default();
    for m in entries {
        let container_port = port(m.container_port, "container")?;
        let host_port = port(m.host_port, "host")?;
        let protocol = match m.protocol.as_deref() {
            None | Some("") => Protocol::Tcp,
            Some(p) => match Protocol::parse(p) {
                Some(p) => p,
                None => {
                    unsupported.push(("runtimeConfig.portMappings.protocol", format!("{p:?}")));
                    continue;
                }
            },
        };
        let host_ip = match m.host_ip.as_deref() {
            None | Some("") => None,
            Some(h) => Some(h.parse::<IpAddr>().map_err(|_| {
                CniError::invalid_config(format!("Invalid host IP {h:?} in portMappings"))
            })?),
        };
        mappings.push(Mapping {
            protocol,
            host_ip,
            host_port,
            container_port,
        });
    }
    Ok(Conf {
        snat: raw.snat.unwrap_or(true),
        mappings,
        unsupported,
    })
}

impl Conf {
    fn reject_unsupported(&self) -> Result<(), CniError> {
        match self.unsupported.first() {
            Some((key, value)) => Err(CniError::unsupported_field(key, value)),
            None => Ok(()),
        }
    }

    /// The rules for the pod's addresses: each mapping for the first IPv4
    /// and the first IPv6 address of the container interface (a mapping
    /// with a host IP only for that family), and with `snat` a hairpin rule
    /// per mapped address.
    pub fn rules(&self, result: &CniResult, ifname: &str) -> Result<Vec<Rule>, CniError> {
        let mut rules = Vec::new();
        for addr in container_ips(result, ifname)? {
            let mut mapped = false;
            for m in &self.mappings {
                if m.host_ip.is_some_and(|h| h.is_ipv4() != addr.is_ipv4()) {
                    continue;
                }
                mapped = true;
                rules.push(Rule::PortMap {
                    protocol: m.protocol,
                    host_ip: m
                        .host_ip
                        .filter(|h| !h.is_unspecified())
                        .map(|h| h.to_string()),
                    host_port: m.host_port,
                    address: addr.to_string(),
                    port: m.container_port,
                });
            }
            if mapped && self.snat {
                rules.push(Rule::HairpinMasquerade(addr.to_string()));
            }
        }
        Ok(rules)
    }
}

/// The reference's choice: the first IPv4 and the first IPv6 address of the
/// result, skipping those of known interfaces other than the container's.
fn container_ips(result: &CniResult, ifname: &str) -> Result<Vec<IpAddr>, CniError> {
    let (mut v4, mut v6) = (None, None);
    for ip in &result.ips {
        if let Some(i) = ip.interface {
            if let Some(intf) = result.interfaces.get(i as usize) {
                if intf.name != ifname || intf.sandbox.as_deref().unwrap_or("").is_empty() {
                    continue;
                }
            }
        }
        let addr: IpAddr = ip
            .address
            .split('/')
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|_| {
                CniError::invalid_config(format!("invalid address {:?} in prevResult", ip.address))
            })?;
        let slot = if addr.is_ipv4() { &mut v4 } else { &mut v6 };
        if slot.is_none() {
            *slot = Some(addr);
        }
    }
    Ok(v4.into_iter().chain(v6).collect())
}

pub struct Portmap;

impl Plugin for Portmap {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config)?;
        conf.reject_unsupported()?;
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::invalid_config("must be called as chained plugin"))?;
        let rules = conf.rules(prev, &req.ifname)?;
        if !rules.is_empty() {
            host.filter_add(&rules)
                .map_err(|e| e.into_cni("could not map ports"))?;
        }
        Ok(prev.clone())
    }

    /// Nothing to do: the host removes the attachment's rules, all in one
    /// batch, once every plugin's DEL has succeeded (one commit instead of
    /// one per plugin).
    fn del<H: Host>(_host: &H, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config)?;
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let rules = conf.rules(prev, &req.ifname)?;
        if rules.is_empty() {
            return Ok(());
        }
        host.filter_check(&rules)
            .map_err(|e| e.into_cni("port mappings"))
    }
}
