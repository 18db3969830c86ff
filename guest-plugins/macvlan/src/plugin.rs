//! The macvlan verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::mac;
use wasm_cni_sdk::net::{Link, MacvlanMode, Ops};
use wasm_cni_sdk::plugin::{self, DelOrder};
use wasm_cni_sdk::stacked::{self as shared, check_link, configure_link, macvlan_mode_is};
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
    mac: Option<String>,
    #[serde(default)]
    link_in_container: Option<bool>,
    #[serde(default)]
    bcqueuelen: Option<u64>,
}

/// The config before the master is resolved (what DEL needs).
#[derive(Debug)]
struct Conf {
    net: NetConf,
    master: Option<String>,
    mode: MacvlanMode,
    mtu: i64,
    mac: Option<String>,
    link_in_container: bool,
    bcqueuelen: u64,
}

fn load(text: &str, args: &[(String, String)]) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let mode = shared::parse_mode("macvlan", raw.mode.as_deref())?;
    let mac = mac::requested(raw.mac.as_deref(), args, &net)?;
    Ok(Conf {
        master: raw.master.filter(|m| !m.is_empty()),
        mode,
        mtu: raw.mtu.unwrap_or(0),
        mac,
        link_in_container: raw.link_in_container.unwrap_or(false),
        bcqueuelen: raw.bcqueuelen.unwrap_or(0),
        net,
    })
}

impl Conf {
    /// The master's namespace: the container's with `linkInContainer`.
    fn master_ns<'a, N>(&self, node: &'a N, cont: &'a N) -> &'a N {
        wasm_cni_sdk::stacked::master_ns(self.link_in_container, node, cont)
    }

    /// The master link (default: the interface of the default route) and
    /// the MTU check against it.
    fn resolve_master<N: Ops>(&self, ns: &N) -> Result<(Link, Option<u32>), CniError> {
        shared::resolve_master(ns, self.master.as_deref(), self.mtu)
    }
}

pub struct Macvlan;

impl Plugin for Macvlan {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        if conf.bcqueuelen != 0 {
            return Err(CniError::unsupported_field("bcqueuelen", conf.bcqueuelen));
        }
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        let master_ns = conf.master_ns(&node, &cont);
        let (master, mtu) = conf.resolve_master(master_ns)?;

        let link = master_ns
            .create_macvlan(
                &req.ifname,
                &master.name,
                conf.mode,
                mtu,
                conf.mac.as_deref(),
                &cont,
            )
            .map_err(|e| e.into_cni("failed to create macvlan"))?;
        let added = configure_link(host, &cont, &conf.net, req, &link, None);
        plugin::undo_link_on_error(host, &cont, &req.ifname, added)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // No master lookup: DEL must work whatever became of the uplink.
        plugin::del_interface(host, req, DelOrder::IpamFirst)
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let node = plugin::open_node(host)?;
        let cont = plugin::open_container(host, req)?;
        conf.resolve_master(conf.master_ns(&node, &cont))?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        // The reference macvlan's message (lowercase, unlike the others).
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::internal("required prevResult missing"))?;
        check_link(
            &cont,
            req,
            prev,
            "macvlan",
            macvlan_mode_is("macvlan", conf.mode),
        )?;
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
