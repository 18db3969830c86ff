//! The tap config: the reference keys, validated up front so that a bad
//! config fails with code 7 (2 for what is not implemented) before anything
//! is created.

use serde::Deserialize;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::mac;
use wasm_cni_sdk::CniError;

/// The largest MTU of a tap device (the kernel's `MAX_MTU` less the
/// Ethernet header).
pub const MAX_MTU: u32 = 65521;
/// The smallest MTU an Ethernet device accepts.
pub const MIN_MTU: u32 = 68;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    multi_queue: Option<bool>,
    #[serde(default)]
    owner: Option<u32>,
    #[serde(default)]
    group: Option<u32>,
    #[serde(default)]
    selinux_context: Option<String>,
    #[serde(default)]
    bridge: Option<String>,
}

/// A parsed, validated tap config.
#[derive(Debug)]
pub struct Conf {
    pub net: NetConf,
    /// `None`: the kernel's default (1500).
    pub mtu: Option<u32>,
    /// From `mac` < CNI_ARGS `MAC` < `runtimeConfig.mac`.
    pub mac: Option<String>,
    pub multi_queue: bool,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// A bridge in the container namespace to enslave the tap to.
    pub bridge: Option<String>,
    selinux_context: Option<String>,
}

/// Parses and validates the config and CNI_ARGS (`MAC` only, as the
/// reference's `MacEnvArgs`).
pub fn load(text: &str, args: &[(String, String)]) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let mtu = match raw.mtu.unwrap_or(0) {
        0 => None,
        m => Some(
            u32::try_from(m)
                .ok()
                .filter(|m| (MIN_MTU..=MAX_MTU).contains(m))
                .ok_or_else(|| {
                    CniError::invalid_config(format!(
                        "invalid MTU {m}, must be 0 or [{MIN_MTU}, {MAX_MTU}]"
                    ))
                })?,
        ),
    };
    let mac = mac::requested(raw.mac.as_deref(), args, &net)?;
    Ok(Conf {
        mtu,
        mac,
        multi_queue: raw.multi_queue.unwrap_or(false),
        owner: raw.owner,
        group: raw.group,
        bridge: raw.bridge.filter(|b| !b.is_empty()),
        selinux_context: raw.selinux_context.filter(|s| !s.is_empty()),
        net,
    })
}

impl Conf {
    /// What ADD cannot do: an SELinux label for the tap needs the
    /// reference's `ip tuntap` exec under a changed exec label, and a
    /// component can neither exec nor relabel.
    pub fn unsupported(&self) -> Result<(), CniError> {
        match &self.selinux_context {
            Some(ctx) => Err(CniError::unsupported_field("selinuxContext", ctx)),
            None => Ok(()),
        }
    }
}
