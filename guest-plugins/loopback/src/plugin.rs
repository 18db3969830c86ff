//! The loopback verbs, generic over the host.

use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::ip::{parse_cidr, Family, IpNetExt};
use wasm_cni_sdk::net::{LinkSettings, Ops};
use wasm_cni_sdk::plugin;
use wasm_cni_sdk::{CniError, CniResult, Host, Interface, IpConfig, Plugin, Request};

const LO: &str = "lo";

pub struct Loopback;

impl Plugin for Loopback {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let _: NetConf = config::from_str(&req.config)?;
        let cont = plugin::open_container(host, req)?;
        cont.set_up(LO)
            .map_err(|e| e.into_cni("failed to set lo up"))?;
        let addresses = cont
            .list_addresses(LO)
            .map_err(|e| e.into_cni("failed to list the addresses of lo"))?;
        let mut first_v4 = None;
        let mut first_v6 = None;
        for text in &addresses {
            let addr = parse_cidr(text).map_err(|e| CniError::internal(format!("lo: {e}")))?;
            if !addr.addr().is_loopback() {
                return Err(CniError::internal(format!(
                    "loopback interface found with non-loopback address {:?}",
                    addr.addr().to_string()
                )));
            }
            let slot = match addr.family() {
                Family::V4 => &mut first_v4,
                Family::V6 => &mut first_v6,
            };
            slot.get_or_insert(addr);
        }

        if let Some(prev) = &req.prev_result {
            return Ok(prev.clone());
        }
        Ok(CniResult {
            interfaces: vec![Interface {
                name: LO.into(),
                mac: Some("00:00:00:00:00:00".into()),
                sandbox: req.netns.clone(),
                ..Interface::default()
            }],
            ips: [first_v4, first_v6]
                .into_iter()
                .flatten()
                .map(|a| IpConfig {
                    address: a.to_string(),
                    gateway: None,
                    interface: Some(0),
                })
                .collect(),
            ..CniResult::default()
        })
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let _: NetConf = config::from_str(&req.config)?;
        if req.netns.as_deref().unwrap_or("").is_empty() {
            return Ok(());
        }
        let Some(cont) = plugin::container_if_exists(host)? else {
            return Ok(());
        };
        match cont.set_link(LO, &LinkSettings::down()) {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into_cni("failed to set lo down")),
        }
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let _: NetConf = config::from_str(&req.config)?;
        let cont = plugin::open_container(host, req)?;
        let lo = cont.link_by_name(LO).map_err(|e| e.into_cni("lo"))?;
        if !lo.up {
            return Err(CniError::internal("loopback interface is down"));
        }
        Ok(())
    }
}
