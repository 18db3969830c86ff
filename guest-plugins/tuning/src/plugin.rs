//! The tuning verbs, generic over the host.

use serde::{Deserialize, Serialize};
use wasm_cni_sdk::check;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::host::Level;
use wasm_cni_sdk::mac;
use wasm_cni_sdk::net::{Link, LinkSettings, Ops};
use wasm_cni_sdk::plugin;
use wasm_cni_sdk::{CniError, CniResult, Host, Plugin, Request};

use crate::conf::{self, Conf};

/// What ADD saved to restore on DEL: the reference backup file's shape,
/// kept in the host store under `<containerID>_<ifname>`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    pub txqlen: Option<u32>,
}

impl Backup {
    /// The current values of what `conf` is about to change.
    fn of(conf: &Conf, link: &Link) -> Self {
        Self {
            mac: conf.mac.as_ref().map(|_| link.mac.clone()),
            promisc: conf.promisc.then_some(link.promisc),
            mtu: conf.mtu.map(|_| link.mtu),
            allmulti: conf.allmulti.map(|_| link.allmulti),
            txqlen: conf.txqlen.map(|_| link.txqlen),
        }
    }

    fn settings(&self) -> LinkSettings {
        LinkSettings {
            mac: self.mac.clone(),
            promisc: self.promisc,
            mtu: self.mtu,
            allmulti: self.allmulti,
            txqlen: self.txqlen,
            ..LinkSettings::default()
        }
    }
}

/// The store key of an attachment's backup.
pub fn backup_key(req: &Request) -> String {
    format!("{}_{}", req.container_id, req.ifname)
}

pub struct Tuning;

impl Plugin for Tuning {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf = conf::load(&req.config, &req.args, &req.ifname)?;
        let prev = check::require_prev_result(req.prev_result.as_ref())?;
        let cont = plugin::open_container(host, req)?;
        let ifname = req.ifname.as_str();

        // Sysctls, remembering the old values to undo a failed ADD (DEL
        // does not restore sysctls, as in the reference).
        let mut written: Vec<(String, Option<String>)> = Vec::new();
        let undo_sysctls = |written: &[(String, Option<String>)]| {
            for (key, old) in written.iter().rev() {
                if let Some(old) = old {
                    if let Err(e) = cont.set_sysctl(key, old) {
                        host.log(Level::Warn, &format!("rollback: {key}={old}: {e}"));
                    }
                }
            }
        };
        for (key, dotted, value) in &conf.sysctls {
            let old = cont.get_sysctl(dotted).ok();
            if let Err(e) = cont.set_sysctl(dotted, value) {
                undo_sysctls(&written);
                return Err(e.into_cni(format_args!("failed to set sysctl {key}={value}")));
            }
            written.push((dotted.clone(), old));
        }

        let mut result = prev.clone();
        if conf.changes_link() {
            if let Err(e) = tune_link(host, &cont, &conf, req) {
                undo_sysctls(&written);
                return Err(e);
            }
            if let Some(mac) = &conf.mac {
                for i in result.interfaces.iter_mut().filter(|i| i.name == ifname) {
                    i.mac = Some(mac.clone());
                }
            }
        }
        Ok(result)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        // Lenient: DEL needs only the attachment, whatever the config says.
        let _: NetConf = config::from_str(&req.config)?;
        let key = backup_key(req);
        let Some(saved) = host
            .store_get_value(&key)
            .map_err(|e| e.into_cni("reading the saved link settings"))?
        else {
            return Ok(());
        };
        let forget = || {
            host.store_set_value(&key, None)
                .map_err(|e| e.into_cni("removing the saved link settings"))
        };
        let Ok(backup) = serde_json::from_str::<Backup>(&saved) else {
            host.log(
                Level::Warn,
                &format!("dropping unreadable saved settings {key}: {saved}"),
            );
            return forget();
        };
        let Some(cont) = plugin::container_if_exists(host)? else {
            // Netns gone: nothing left to restore.
            return forget();
        };
        match cont.set_link(&req.ifname, &backup.settings()) {
            Ok(_) => forget(),
            // The link is gone: nothing left to restore.
            Err(e) if e.is_not_found() => forget(),
            // Keep the backup so that a retried DEL can restore.
            Err(e) => Err(e.into_cni(format_args!(
                "failed to restore the settings of {}",
                req.ifname
            ))),
        }
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf = conf::load(&req.config, &req.args, &req.ifname)?;
        check::require_prev_result(req.prev_result.as_ref())?;
        let cont = plugin::open_container(host, req)?;
        let ifname = req.ifname.as_str();
        for (key, dotted, want) in &conf.sysctls {
            let current = cont
                .get_sysctl(dotted)
                .map_err(|e| e.into_cni(format_args!("reading sysctl {key}")))?;
            if current.trim_end_matches('\n') != want {
                return Err(CniError::internal(format!(
                    "Error: Tuning configured value of {dotted} is {want}, current value is {}",
                    current.trim_end_matches('\n')
                )));
            }
        }
        let link = cont
            .link_by_name(ifname)
            .map_err(|_| CniError::internal(format!("Cannot find container link {ifname}")))?;
        if let Some(want) = &conf.mac {
            if !mac::same(want, &link.mac) {
                return Err(CniError::internal(format!(
                    "Error: Tuning configured Ethernet of {ifname} is {want}, current value is {}",
                    link.mac
                )));
            }
        }
        if conf.promisc != link.promisc {
            return Err(CniError::internal(format!(
                "Error: Tuning link {ifname} configured promisc is {}, current value is {}",
                conf.promisc,
                u8::from(link.promisc)
            )));
        }
        if let Some(want) = conf.mtu.filter(|m| *m != link.mtu) {
            return Err(CniError::internal(format!(
                "Error: Tuning configured MTU of {ifname} is {want}, current value is {}",
                link.mtu
            )));
        }
        if let Some(want) = conf.allmulti.filter(|a| *a != link.allmulti) {
            return Err(CniError::internal(format!(
                "Error: Tuning configured all-multicast mode of {ifname} is {want}, current value is {}",
                link.allmulti
            )));
        }
        if let Some(want) = conf.txqlen.filter(|q| *q != link.txqlen) {
            return Err(CniError::internal(format!(
                "Error: Tuning configured Transmit Queue Length of {ifname} is {want}, current value is {}",
                link.txqlen
            )));
        }
        Ok(())
    }
}

/// Saves the current link values, then applies the new ones; on failure
/// restores the saved values and forgets them.
fn tune_link<H: Host>(host: &H, cont: &H::Ns, conf: &Conf, req: &Request) -> Result<(), CniError> {
    let ifname = req.ifname.as_str();
    let link = cont
        .link_by_name(ifname)
        .map_err(|e| e.into_cni(format_args!("failed to get {ifname:?}")))?;
    let backup = Backup::of(conf, &link);
    let json = serde_json::to_string(&backup)
        .map_err(|e| CniError::internal(format!("failed to marshal data for {ifname:?}: {e}")))?;
    let key = backup_key(req);
    host.store_set_value(&key, Some(&json))
        .map_err(|e| e.into_cni(format_args!("failed to save the settings of {ifname}")))?;

    let settings = LinkSettings {
        mac: conf.mac.clone(),
        promisc: conf.promisc.then_some(true),
        mtu: conf.mtu,
        allmulti: conf.allmulti,
        txqlen: conf.txqlen,
        ..LinkSettings::default()
    };
    if let Err(e) = cont.set_link(ifname, &settings) {
        if let Err(undo) = cont.set_link(ifname, &backup.settings()) {
            host.log(
                Level::Warn,
                &format!("rollback: restoring {ifname}: {undo}"),
            );
        }
        if let Err(undo) = host.store_set_value(&key, None) {
            host.log(Level::Warn, &format!("rollback: forgetting {key}: {undo}"));
        }
        return Err(e.into_cni(format_args!("failed to tune {ifname}")));
    }
    Ok(())
}
