//! The macvtap config: the reference macvlan's keys (`master`, `mode`,
//! `mtu`, `mac`, `ipam`) plus kubevirt macvtap-cni's `promiscMode`; what
//! kubevirt has and a component cannot do is refused with code 2.

use serde::Deserialize;
use serde_json::Value;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::mac;
use wasm_cni_sdk::net::{Link, MacvlanMode, Ops};
use wasm_cni_sdk::stacked as shared;
use wasm_cni_sdk::CniError;

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
    promisc_mode: Option<bool>,
    // Refused (code 2) when set; any JSON type, so the refusal names them.
    #[serde(default, rename = "deviceID")]
    device_id: Option<Value>,
    #[serde(default)]
    owner: Option<Value>,
    #[serde(default)]
    group: Option<Value>,
    #[serde(default)]
    link_in_container: Option<bool>,
    #[serde(default)]
    bcqueuelen: Option<u64>,
}

/// A parsed config, the master not yet resolved (what DEL never needs).
#[derive(Debug)]
pub struct Conf {
    pub net: NetConf,
    /// `None`: the interface of the node's default route.
    pub master: Option<String>,
    pub mode: MacvlanMode,
    /// 0: the master's.
    pub mtu: i64,
    /// From `mac` < CNI_ARGS `MAC` < `runtimeConfig.mac`.
    pub mac: Option<String>,
    /// kubevirt's `promiscMode`.
    pub promisc: bool,
    /// Set keys this plugin does not implement, with their values.
    unsupported: Vec<(&'static str, String)>,
}

pub fn load(text: &str, args: &[(String, String)]) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let mode = shared::parse_mode("macvtap", raw.mode.as_deref())?;
    let mac = mac::requested(raw.mac.as_deref(), args, &net)?;
    let mut unsupported = Vec::new();
    for (key, value) in [
        ("deviceID", raw.device_id),
        ("owner", raw.owner),
        ("group", raw.group),
    ] {
        if let Some(v) = value.filter(|v| !v.is_null()) {
            unsupported.push((key, v.to_string()));
        }
    }
    if raw.link_in_container == Some(true) {
        unsupported.push(("linkInContainer", "true".into()));
    }
    if let Some(n) = raw.bcqueuelen.filter(|n| *n != 0) {
        unsupported.push(("bcqueuelen", n.to_string()));
    }
    Ok(Conf {
        master: raw.master.filter(|m| !m.is_empty()),
        mode,
        mtu: raw.mtu.unwrap_or(0),
        mac,
        promisc: raw.promisc_mode.unwrap_or(false),
        unsupported,
        net,
    })
}

impl Conf {
    /// Code 2 for the first set key this plugin does not implement.
    pub fn supported(&self) -> Result<(), CniError> {
        match self.unsupported.first() {
            Some((key, value)) => Err(CniError::unsupported_field(key, value)),
            None => Ok(()),
        }
    }

    /// The master link in the node namespace (default: the interface of
    /// the default route) and the MTU to ask for (`None`: the master's).
    pub fn resolve_master<N: Ops>(&self, node: &N) -> Result<(Link, Option<u32>), CniError> {
        shared::resolve_master(node, self.master.as_deref(), self.mtu)
    }
}
