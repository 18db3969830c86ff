//! The bridge config: parsing, validation (code 7) and the fields this port
//! does not implement (code 2).

use serde::Deserialize;
use wasm_cni_sdk::args::CniArgs;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::mac::{self, MacSource};
use wasm_cni_sdk::vm::VmConf;
use wasm_cni_sdk::CniError;

pub const DEFAULT_BRIDGE: &str = "cni0";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    bridge: Option<String>,
    #[serde(default)]
    is_gateway: Option<bool>,
    #[serde(default)]
    is_default_gateway: Option<bool>,
    #[serde(default)]
    force_address: Option<bool>,
    #[serde(default)]
    ip_masq: Option<bool>,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    hairpin_mode: Option<bool>,
    #[serde(default)]
    promisc_mode: Option<bool>,
    #[serde(default)]
    vlan: Option<i64>,
    #[serde(default)]
    vlan_trunk: Option<Vec<VlanTrunk>>,
    #[serde(default)]
    macspoofchk: Option<bool>,
    #[serde(default)]
    enabledad: Option<bool>,
    #[serde(default)]
    disable_container_interface: Option<bool>,
    #[serde(default)]
    port_isolation: Option<bool>,
    #[serde(default)]
    vm: Option<VmConf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VlanTrunk {
    #[serde(default, rename = "minID")]
    min_id: Option<i64>,
    #[serde(default, rename = "maxID")]
    max_id: Option<i64>,
    #[serde(default)]
    id: Option<i64>,
}

/// A validated bridge config.
#[derive(Debug)]
pub struct Conf {
    pub net: NetConf,
    pub bridge: String,
    pub is_gw: bool,
    pub is_default_gw: bool,
    pub force_address: bool,
    pub mtu: Option<u32>,
    pub hairpin: bool,
    pub promisc: bool,
    pub enable_dad: bool,
    pub disable_container_interface: bool,
    /// Masquerade the pod's traffic leaving the node (`ipMasq`).
    pub ip_masq: bool,
    /// Let only the container MAC in through the host veth (`macspoofchk`).
    pub macspoofchk: bool,
    /// The container MAC, by priority CNI_ARGS MAC < args.cni.mac <
    /// runtimeConfig.mac.
    pub mac: Option<String>,
    /// A tap or macvtap on the node for a VM instead of the veth pair.
    pub vm: Option<VmConf>,
    /// Set fields this port does not implement: (key, value).
    unsupported: Vec<(&'static str, String)>,
}

/// Parses and validates, as the reference `loadNetConf` (plus the checks its
/// `cmdAdd` makes first).
pub fn load(text: &str, args: &[(String, String)]) -> Result<Conf, CniError> {
    let (net, raw): (NetConf, Raw) = config::parse(text)?;

    let vlan = raw.vlan.unwrap_or(0);
    if !(0..=4094).contains(&vlan) {
        return Err(CniError::invalid_config(format!(
            "invalid VLAN ID {vlan} (must be between 0 and 4094)"
        )));
    }
    let trunk = collect_vlan_trunk(raw.vlan_trunk.as_deref())?;

    let bridge = raw.bridge.unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
    if bridge.is_empty()
        || bridge.len() > 15
        || bridge.contains(['/', ':'])
        || bridge.contains(char::is_whitespace)
    {
        return Err(CniError::invalid_config(format!(
            "invalid bridge name {bridge:?}"
        )));
    }
    let mtu = mtu(raw.mtu)?;

    let cni_args = CniArgs::parse(args, &["MAC"])?;
    let mac = mac::select(&[
        (MacSource::CniArgs, cni_args.mac()),
        (MacSource::ArgsCni, net.args_cni_mac()),
        (MacSource::RuntimeConfig, net.runtime_mac()),
    ])?;

    let disable_container_interface = raw.disable_container_interface.unwrap_or(false);
    if net.has_ipam() && disable_container_interface {
        return Err(CniError::invalid_config(
            "cannot use IPAM when DisableContainerInterface flag is set",
        ));
    }
    let hairpin = raw.hairpin_mode.unwrap_or(false);
    let promisc = raw.promisc_mode.unwrap_or(false);
    if hairpin && promisc {
        return Err(CniError::invalid_config(
            "cannot set hairpin mode and promiscuous mode at the same time",
        ));
    }
    let is_default_gw = raw.is_default_gateway.unwrap_or(false);
    if let Some(vm) = &raw.vm {
        vm.validate(true)?;
        if raw.macspoofchk == Some(true) {
            return Err(CniError::invalid_config(
                "macspoofchk needs the container's MAC; a VM's guest chooses its own",
            ));
        }
        if disable_container_interface {
            return Err(CniError::invalid_config(
                "vm and disableContainerInterface: there is no container interface either way",
            ));
        }
    }

    let mut unsupported = Vec::new();
    // Both of the reference's backends mean one thing here: the host's
    // nftables rules.
    match raw.ip_masq_backend.as_deref() {
        None | Some("" | "iptables" | "nftables") => {}
        Some(other) => unsupported.push(("ipMasqBackend", format!("{other:?}"))),
    }
    if vlan != 0 {
        unsupported.push(("vlan", vlan.to_string()));
    }
    if !trunk.is_empty() {
        unsupported.push(("vlanTrunk", format!("{trunk:?}")));
    }
    if raw.port_isolation == Some(true) {
        unsupported.push(("portIsolation", "true".to_string()));
    }

    Ok(Conf {
        net,
        bridge,
        is_gw: raw.is_gateway.unwrap_or(false) || is_default_gw,
        is_default_gw,
        force_address: raw.force_address.unwrap_or(false),
        mtu,
        hairpin,
        promisc,
        enable_dad: raw.enabledad.unwrap_or(false),
        disable_container_interface,
        ip_masq: raw.ip_masq.unwrap_or(false),
        macspoofchk: raw.macspoofchk.unwrap_or(false),
        mac,
        vm: raw.vm,
        unsupported,
    })
}

impl Conf {
    /// Code 2 for the first set field this port does not implement. Checked
    /// by ADD only: DEL must still clean up whatever config it is given.
    pub fn reject_unsupported(&self) -> Result<(), CniError> {
        match self.unsupported.first() {
            Some((key, value)) => Err(CniError::unsupported_field(key, value)),
            None => Ok(()),
        }
    }
}

/// `mtu`: 0 or absent means the kernel default; otherwise 68..=65535.
pub fn mtu(value: Option<i64>) -> Result<Option<u32>, CniError> {
    match value.unwrap_or(0) {
        0 => Ok(None),
        m if (68..=65535).contains(&m) => Ok(u32::try_from(m).ok()),
        m => Err(CniError::invalid_config(format!(
            "invalid MTU {m}, must be 0 (unset) or between 68 and 65535"
        ))),
    }
}

/// The reference `collectVlanTrunk`, with its messages.
fn collect_vlan_trunk(trunk: Option<&[VlanTrunk]>) -> Result<Vec<i64>, CniError> {
    let mut vlans = Vec::new();
    for item in trunk.unwrap_or_default() {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                if min <= 0 || min > 4094 {
                    return Err(CniError::invalid_config("incorrect trunk minID parameter"));
                }
                if max <= 0 || max > 4094 {
                    return Err(CniError::invalid_config("incorrect trunk maxID parameter"));
                }
                if max < min {
                    return Err(CniError::invalid_config(
                        "minID is greater than maxID in trunk parameter",
                    ));
                }
                vlans.extend(min..=max);
            }
            (None, Some(_)) => {
                return Err(CniError::invalid_config(
                    "minID and maxID should be configured simultaneously, minID is missing",
                ))
            }
            (Some(_), None) => {
                return Err(CniError::invalid_config(
                    "minID and maxID should be configured simultaneously, maxID is missing",
                ))
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            if id <= 0 || id > 4094 {
                return Err(CniError::invalid_config("incorrect trunk id parameter"));
            }
            vlans.push(id);
        }
    }
    vlans.sort_unstable();
    vlans.dedup();
    Ok(vlans)
}
