//! The bandwidth verbs, generic over the host.

use serde::Deserialize;
use sha2::{Digest, Sha512};
use wasm_cni_sdk::check;
use wasm_cni_sdk::config;
use wasm_cni_sdk::net::{NetError, Ops, RateLimit};
use wasm_cni_sdk::plugin::{open_container, open_node};
use wasm_cni_sdk::{CniError, CniResult, Host, Interface, Plugin, Request};

/// Rates and bursts, in bits (the reference's `BandwidthEntry`).
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(default)]
    pub ingress_rate: i64,
    #[serde(default)]
    pub ingress_burst: i64,
    #[serde(default)]
    pub egress_rate: i64,
    #[serde(default)]
    pub egress_burst: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(flatten)]
    entry: Entry,
    #[serde(default)]
    runtime_config: Option<RawRuntime>,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntime {
    #[serde(default)]
    bandwidth: Option<Entry>,
}

/// The limits to set, validated.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// What the pod receives: the tbf on the host veth.
    pub ingress: Option<RateLimit>,
    /// What the pod sends: the tbf on the ifb.
    pub egress: Option<RateLimit>,
}

/// The reference's `validateRateAndBurst`.
fn limit(rate: i64, burst: i64) -> Result<Option<RateLimit>, CniError> {
    let (rate, burst) = match (u64::try_from(rate), u64::try_from(burst)) {
        (Ok(r), Ok(b)) => (r, b),
        _ => {
            return Err(CniError::invalid_config(
                "rate and burst must be a positive integer",
            ))
        }
    };
    match (rate, burst) {
        (0, 0) => Ok(None),
        (_, 0) => Err(CniError::invalid_config(
            "if rate is set, burst must also be set",
        )),
        (0, _) => Err(CniError::invalid_config(
            "if burst is set, rate must also be set",
        )),
        (_, b) if b / 8 >= u64::from(u32::MAX) => {
            Err(CniError::invalid_config("burst cannot be more than 4GB"))
        }
        (rate, burst) => Ok(Some(RateLimit { rate, burst })),
    }
}

/// `runtimeConfig.bandwidth` replaces the config's own values, as in the
/// reference.
pub fn load(text: &str) -> Result<Limits, CniError> {
    let (_net, raw): (config::NetConf, Raw) = config::parse(text)?;
    let e = raw
        .runtime_config
        .and_then(|r| r.bandwidth)
        .unwrap_or(raw.entry);
    Ok(Limits {
        ingress: limit(e.ingress_rate, e.ingress_burst)?,
        egress: limit(e.egress_rate, e.egress_burst)?,
    })
}

/// `bwp` and 12 hex digits of SHA-512 over network name and container id:
/// the reference's ifb name, so both find the same device.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("bwp{hex}")
}

/// The prevResult interface that is the node end of the container's veth.
fn host_interface<N: Ops>(
    node: &N,
    cont: &N,
    prev: &CniResult,
    ifname: &str,
) -> Result<Interface, CniError> {
    if prev.interfaces.is_empty() {
        return Err(CniError::internal("no interfaces provided"));
    }
    let peer = cont
        .link_by_name(ifname)
        .ok()
        .and_then(|l| l.peer_index)
        .ok_or_else(|| {
            CniError::internal(format!("container interface {ifname} has no veth peer"))
        })?;
    let link = node
        .link_by_index(peer)
        .map_err(|e| e.into_cni("no host interface found"))?;
    prev.interfaces
        .iter()
        .find(|i| i.sandbox.as_deref().unwrap_or("").is_empty() && i.name == link.name)
        .cloned()
        .ok_or_else(|| CniError::internal("no host interface found"))
}

pub struct Bandwidth;

impl Plugin for Bandwidth {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let limits = load(&req.config)?;
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::invalid_config("must be called as chained plugin"))?;
        if limits == Limits::default() {
            return Ok(prev.clone());
        }
        let node = open_node(host)?;
        let cont = open_container(host, req)?;
        let hostif = host_interface(&node, &cont, prev, &req.ifname)?;
        let mut result = prev.clone();
        if let Some(l) = limits.ingress {
            node.limit_rate(&hostif.name, l)
                .map_err(|e| e.into_cni(format_args!("ingress limit on {}", hostif.name)))?;
        }
        if let Some(l) = limits.egress {
            let mtu = node
                .link_by_name(&hostif.name)
                .map_err(|e| e.into_cni(format_args!("{}", hostif.name)))?
                .mtu;
            let name = ifb_name(&config_name(&req.config), &req.container_id);
            // The host deletes the ifb (a link the attachment created) if
            // this ADD fails.
            let ifb = node
                .create_ifb(&name, Some(mtu))
                .map_err(|e| e.into_cni(format_args!("create ifb {name}")))?;
            result.interfaces.push(Interface {
                name: name.clone(),
                mac: Some(ifb.mac),
                ..Interface::default()
            });
            node.redirect_ingress(&hostif.name, &name)
                .map_err(|e| e.into_cni(format_args!("redirect {} to {name}", hostif.name)))?;
            node.limit_rate(&name, l)
                .map_err(|e| e.into_cni(format_args!("egress limit on {name}")))?;
        }
        Ok(result)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let node = open_node(host)?;
        let name = ifb_name(&config_name(&req.config), &req.container_id);
        match node.delete_link_if_exists(&name) {
            Ok(_) | Err(NetError::Refused(_)) => Ok(()),
            Err(e) => Err(e.into_cni(format_args!("delete ifb {name}"))),
        }
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let limits = load(&req.config)?;
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        if limits == Limits::default() {
            return Ok(());
        }
        let node = open_node(host)?;
        let cont = open_container(host, req)?;
        let hostif = host_interface(&node, &cont, prev, &req.ifname)?;
        let mut want = Vec::new();
        if let Some(l) = limits.ingress {
            want.push((hostif.name.clone(), l, "ingress"));
        }
        if let Some(l) = limits.egress {
            want.push((
                ifb_name(&config_name(&req.config), &req.container_id),
                l,
                "egress",
            ));
        }
        for (link, l, what) in want {
            let ok = node
                .has_rate_limit(&link, l)
                .map_err(|e| e.into_cni(format_args!("{what} limit on {link}")))?;
            if !ok {
                return Err(CniError::internal(format!(
                    "{what} limit on {link} doesn't match: rate {} bit/s, burst {} bit",
                    l.rate, l.burst
                )));
            }
        }
        Ok(())
    }
}

fn config_name(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("name")?.as_str().map(str::to_string))
        .unwrap_or_default()
}
