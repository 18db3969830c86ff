//! The macvlan verbs, generic over the host.

use serde::Deserialize;
use wasm_cni_sdk::args::CniArgs;
use wasm_cni_sdk::check::{self, mac_matches};
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::host::Level;
use wasm_cni_sdk::iface::{self, configure_iface, try_sysctl};
use wasm_cni_sdk::ip::{Family, IpNet};
use wasm_cni_sdk::mac::{self, MacSource};
use wasm_cni_sdk::net::{iface_sysctl, Link, MacvlanMode, Ops};
use wasm_cni_sdk::{Attachment, CniError, CniResult, Host, Interface, Plugin, Request};

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
    let mode_text = raw.mode.unwrap_or_default();
    let mode = MacvlanMode::parse(&mode_text)
        .ok_or_else(|| CniError::invalid_config(format!("unknown macvlan mode: {mode_text:?}")))?;
    let cni_args = CniArgs::parse(args, &["MAC"])?;
    let mac = mac::select(&[
        (MacSource::Config, raw.mac.as_deref()),
        (MacSource::CniArgs, cni_args.mac()),
        (MacSource::RuntimeConfig, net.runtime_mac()),
    ])?;
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
        if self.link_in_container {
            cont
        } else {
            node
        }
    }

    /// The master link (default: the interface of the default route) and
    /// the MTU check against it.
    fn resolve_master<N: Ops>(&self, ns: &N) -> Result<(Link, Option<u32>), CniError> {
        let name = match &self.master {
            Some(m) => m.clone(),
            None => default_route_interface(ns)?,
        };
        let master = ns
            .link_by_name(&name)
            .map_err(|e| e.into_cni(format_args!("failed to lookup master {name:?}")))?;
        if self.mtu < 0 || self.mtu > i64::from(master.mtu) {
            return Err(CniError::invalid_config(format!(
                "invalid MTU {}, must be [0, master MTU({})]",
                self.mtu, master.mtu
            )));
        }
        let mtu = u32::try_from(self.mtu).ok().filter(|m| *m != 0);
        Ok((master, mtu))
    }
}

/// The first link with an IPv4 default route, else the first with an IPv6
/// one (the reference takes the first default route the kernel lists, v4
/// before v6).
fn default_route_interface<N: Ops>(ns: &N) -> Result<String, CniError> {
    let links = ns
        .list_links()
        .map_err(|e| e.into_cni("failed to list links"))?;
    for family in [Family::V4, Family::V6] {
        for link in &links {
            let Ok(routes) = ns.list_routes(&link.name, None) else {
                continue;
            };
            if routes.iter().any(|r| {
                r.dst
                    .parse::<IpNet>()
                    .is_ok_and(|d| d.network().is_default() && d.family() == family)
            }) {
                return Ok(link.name.clone());
            }
        }
    }
    Err(CniError::internal("no default route interface found"))
}

pub struct Macvlan;

impl Plugin for Macvlan {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(&req.config, &req.args)?;
        if conf.bcqueuelen != 0 {
            return Err(CniError::unsupported_field("bcqueuelen", conf.bcqueuelen));
        }
        let node = host
            .node_netns()
            .map_err(|e| e.into_cni("failed to open the node network namespace"))?;
        let cont = host.container_netns().map_err(|e| {
            e.into_cni(format_args!(
                "failed to open netns {:?}",
                req.netns.as_deref().unwrap_or("")
            ))
        })?;
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
        let added = configure(host, &cont, &conf, req, &link);
        if added.is_err() {
            if let Err(e) = cont.delete_link_if_exists(&req.ifname) {
                host.log(
                    Level::Warn,
                    &format!("rollback: deleting {}: {e}", req.ifname),
                );
            }
        }
        added
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // Lenient (no master lookup, no validation): DEL must work whatever
        // became of the uplink or the config.
        let net: NetConf = config::from_str(&req.config)?;
        if net.has_ipam() {
            host.ipam_del()?;
        }
        match host.container_netns() {
            Ok(cont) => {
                cont.delete_link_if_exists(&req.ifname)
                    .map_err(|e| e.into_cni(format_args!("failed to delete {:?}", req.ifname)))?;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into_cni("failed to open the container network namespace")),
        }
        Ok(())
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = load(&req.config, &req.args)?;
        let node = host
            .node_netns()
            .map_err(|e| e.into_cni("failed to open the node network namespace"))?;
        let cont = host.container_netns().map_err(|e| {
            e.into_cni(format_args!(
                "failed to open netns {:?}",
                req.netns.as_deref().unwrap_or("")
            ))
        })?;
        conf.resolve_master(conf.master_ns(&node, &cont))?;
        if conf.net.has_ipam() {
            host.ipam_check()?;
        }
        let prev = req
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::internal("required prevResult missing"))?;
        let netns = req.netns.as_deref();
        let cont_map = check::container_interface(prev, &req.ifname, netns).ok_or_else(|| {
            CniError::internal(format!(
                "sandbox in prevResult doesn't match configured netns: {}",
                netns.unwrap_or("")
            ))
        })?;
        let link = cont.link_by_name(&req.ifname).map_err(|_| {
            CniError::internal(format!(
                "container Interface name in prevResult: {} not found",
                req.ifname
            ))
        })?;
        if link.kind != "macvlan" {
            return Err(CniError::internal(format!(
                "error: Container interface {} not of type macvlan",
                link.name
            )));
        }
        if let Some(mode) = link.macvlan_mode.filter(|m| *m != conf.mode) {
            return Err(CniError::internal(format!(
                "container macvlan mode {} does not match expected value: {}",
                mode.as_str(),
                conf.mode.as_str()
            )));
        }
        if !mac_matches(cont_map.mac.as_deref(), &link) {
            return Err(CniError::internal(format!(
                "interface {} Mac {} doesn't match container Mac: {}",
                link.name,
                cont_map.mac.as_deref().unwrap_or(""),
                link.mac
            )));
        }
        check::validate_interface_ips(&cont, &req.ifname, prev)?;
        check::validate_routes(&cont, &prev.routes)
    }

    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        let net: NetConf = config::from_str(config)?;
        if net.has_ipam() {
            host.ipam_status()?;
        }
        Ok(())
    }

    fn gc<H: Host>(host: &H, config: &str, _valid: &[Attachment]) -> Result<(), CniError> {
        let net: NetConf = config::from_str(config)?;
        if net.has_ipam() {
            host.ipam_gc()?;
        }
        Ok(())
    }
}

/// After the link exists; the caller deletes it on error.
fn configure<H: Host>(
    host: &H,
    cont: &H::Ns,
    conf: &Conf,
    req: &Request,
    link: &Link,
) -> Result<CniResult, CniError> {
    let ifname = req.ifname.as_str();
    let mut result = CniResult {
        interfaces: vec![Interface {
            name: ifname.to_string(),
            mac: Some(link.mac.clone()),
            sandbox: req.netns.clone(),
            ..Interface::default()
        }],
        ..CniResult::default()
    };
    if conf.net.has_ipam() {
        let allocated = host.ipam_add()?;
        let configured = (|| {
            iface::require_ips(&allocated)?;
            result.ips = allocated.ips;
            result.routes = allocated.routes;
            for ipc in &mut result.ips {
                ipc.interface = Some(0);
            }
            let _ = try_sysctl(cont, &iface_sysctl("ipv4", ifname, "arp_notify"), "1");
            let _ = try_sysctl(cont, &iface_sysctl("ipv6", ifname, "ndisc_notify"), "1");
            configure_iface(cont, ifname, &result)
        })();
        if let Err(e) = configured {
            if let Err(del) = host.ipam_del() {
                host.log(Level::Warn, &format!("rollback: IPAM DEL: {del}"));
            }
            return Err(e);
        }
    } else {
        cont.set_up(ifname)
            .map_err(|e| e.into_cni(format_args!("failed to set {ifname:?} UP")))?;
    }
    if let Ok(l) = cont.link_by_name(ifname) {
        result.interfaces[0].mac = Some(l.mac);
    }
    // The reference reports the config's `dns` only; IPAM's is dropped.
    result.dns = conf.net.dns_if_set();
    Ok(result)
}
