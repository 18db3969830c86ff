//! The vlan verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::net::Ops;
use wasm_cni_sdk::plugin::{self, DelOrder};
use wasm_cni_sdk::stacked::{check_link, configure_link, resolve_master};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Plugin, Request};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    master: Option<String>,
    #[serde(default, rename = "vlanId")]
    vlan_id: Option<i64>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    link_in_container: Option<bool>,
}

#[derive(Debug)]
struct Conf {
    net: NetConf,
    master: String,
    vlan_id: u16,
    mtu: i64,
    link_in_container: bool,
}

fn load(text: &str) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let master = raw.master.filter(|m| !m.is_empty()).ok_or_else(|| {
        CniError::invalid_config(
            "\"master\" field is required. It specifies the host interface name to create the VLAN for",
        )
    })?;
    // 4095 is reserved; 0 tags priority only, as the reference allows.
    let id = raw.vlan_id.unwrap_or(0);
    let vlan_id = u16::try_from(id)
        .ok()
        .filter(|v| *v <= 4094)
        .ok_or_else(|| {
            CniError::invalid_config(format!(
                "invalid VLAN ID {id} (must be between 0 and 4094 inclusive)"
            ))
        })?;
    Ok(Conf {
        master,
        vlan_id,
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
}

pub struct Vlan;

impl Plugin for Vlan {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config)?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        let master_ns = conf.master_ns(&node, &cont);
        let (master, mtu) = resolve_master(master_ns, Some(&conf.master), conf.mtu)?;
        let link = master_ns
            .create_vlan(&req.ifname, &master.name, conf.vlan_id, mtu, &cont)
            .map_err(|e| e.into_cni("failed to create vlan"))?;
        let added = configure_link(host, &cont, &conf.net, req, &link, None);
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // Unlike the reference, no master lookup: DEL must work whatever
        // became of the uplink (its removal took the vlan with it).
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
            .ok_or_else(|| CniError::internal("vlan: required prevResult missing"))?;
        conf.master_ns(&node, &cont)
            .link_by_name(&conf.master)
            .map_err(|e| e.into_cni(format_args!("failed to lookup master {:?}", conf.master)))?;
        check_link(&cont, req, prev, "vlan", |l| {
            if l.vlan_id != Some(conf.vlan_id) {
                return Err(CniError::internal(format!(
                    "container vlan id {} does not match expected value: {}",
                    l.vlan_id.map_or_else(|| "none".into(), |v| v.to_string()),
                    conf.vlan_id
                )));
            }
            if conf.mtu != 0 && i64::from(l.mtu) != conf.mtu {
                return Err(CniError::internal(format!(
                    "container vlan MTU {} does not match expected value: {}",
                    l.mtu, conf.mtu
                )));
            }
            Ok(())
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
