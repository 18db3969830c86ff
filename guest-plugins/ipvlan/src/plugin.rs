//! The ipvlan verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::net::{IpvlanMode, Link, Ops};
use wasm_cni_sdk::plugin::{self, DelOrder};
use wasm_cni_sdk::stacked::{self as shared, check_link, configure_link, mode_is};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Plugin, Request};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    master: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    link_in_container: Option<bool>,
}

#[derive(Debug)]
struct Conf {
    net: NetConf,
    master: Option<String>,
    mode: IpvlanMode,
    mtu: i64,
    link_in_container: bool,
}

fn load(text: &str) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    Ok(Conf {
        master: raw.master.filter(|m| !m.is_empty()),
        mode: shared::parse_ipvlan_mode(raw.mode.as_deref())?,
        mtu: raw.mtu.unwrap_or(0),
        link_in_container: raw.link_in_container.unwrap_or(false),
        net,
    })
}

impl Conf {
    /// The master's namespace: the container's with `linkInContainer`.
    fn master_ns<'a, N>(&self, node: &'a N, cont: &'a N) -> &'a N {
        wasm_cni_sdk::stacked::master_ns(self.link_in_container, node, cont)
    }

    /// The master: `master`; else, chained after another plugin, the one
    /// interface its result names; else the default-route link.
    fn resolve_master<N: Ops>(
        &self,
        ns: &N,
        prev: Option<&CniResult>,
    ) -> Result<(Link, Option<u32>), CniError> {
        let chained = match (&self.master, prev) {
            (Some(_), _) | (None, None) => None,
            (None, Some(prev)) => match prev.interfaces.as_slice() {
                [only] if !only.name.is_empty() => Some(only.name.as_str()),
                _ => {
                    return Err(CniError::internal(
                        "chained master failure. PrevResult lacks a single named interface",
                    ))
                }
            },
        };
        shared::resolve_master(ns, self.master.as_deref().or(chained), self.mtu)
    }
}

pub struct Ipvlan;

impl Plugin for Ipvlan {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config)?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        let master_ns = conf.master_ns(&node, &cont);
        let prev = req.prev_result.as_ref();
        let (master, mtu) = conf.resolve_master(master_ns, prev)?;
        let link = master_ns
            .create_ipvlan(&req.ifname, &master.name, conf.mode, mtu, &cont)
            .map_err(|e| e.into_cni("failed to create ipvlan"))?;
        // Chained without IPAM: the addresses the previous plugin reported.
        let added = configure_link(host, &cont, &conf.net, req, &link, prev);
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // No master lookup: DEL must work whatever became of the uplink.
        plugin::del_interface(host, req, DelOrder::IpamFirst)
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config)?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::internal("required prevResult missing"))?;
        if let Some(master) = &conf.master {
            conf.master_ns(&node, &cont)
                .link_by_name(master)
                .map_err(|e| e.into_cni(format_args!("failed to lookup master {master:?}")))?;
        }
        check_link(&cont, req, prev, "ipvlan", |l| {
            mode_is(
                "IPVlan",
                l.ipvlan_mode.map(IpvlanMode::as_str),
                conf.mode.as_str(),
            )
        })?;
        check::validate_interface_ips(&cont, &req.ifname, prev)?;
        check::validate_routes(&cont, &prev.routes)
    }

    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        plugin::forward_status(host, config)
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        plugin::forward_gc(host, config)
    }
}
