//! VM networking on bridge and ptp (`"vm"` in their config): where the veth
//! pair would be, a tap — or, on bridge, a macvtap — in the node namespace,
//! for a hypervisor on the node to open (kvm runtimes: firecracker, a
//! libvirt guest, kata without a pod namespace of its own). IPAM addresses
//! are reserved and reported with the interface index of that link, and
//! configured on no link: the VM's guest configures them.
//!
//! ```json
//! "vm": {"interface": "tap", "owner": 107, "group": 107, "multiQueue": true}
//! "vm": {"interface": "macvtap", "parent": "cni0", "mode": "bridge"}
//! ```
//!
//! `owner`/`group` are who may open the tap (the hypervisor's user); the
//! host creates a node-namespace tap or macvtap only for a config that asks
//! with `"vm"`, and only with the owners it names.

use serde::Deserialize;

use crate::error::CniError;
use crate::naming::fnv1a32;
use crate::net::{Link, LinkSettings, MacvlanMode, Ops};

/// What the VM gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VmInterface {
    #[default]
    Tap,
    Macvtap,
}

/// `"vm"` of a config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VmConf {
    #[serde(default)]
    pub interface: VmInterface,
    #[serde(default)]
    pub owner: Option<u32>,
    #[serde(default)]
    pub group: Option<u32>,
    #[serde(default)]
    pub multi_queue: bool,
    /// macvtap: the lower link (default: the plugin's bridge).
    #[serde(default)]
    pub parent: Option<String>,
    /// macvtap mode (default `bridge`).
    #[serde(default)]
    pub mode: Option<String>,
}

impl VmConf {
    /// Checks what a plugin cannot build; `macvtap` only where `macvtap`
    /// is true (bridge: it has a lower link to offer).
    pub fn validate(&self, macvtap: bool) -> Result<(), CniError> {
        match self.interface {
            VmInterface::Macvtap if !macvtap => Err(CniError::invalid_config(
                "vm.interface \"macvtap\" needs a lower link: use it with bridge",
            )),
            VmInterface::Macvtap if self.owner.is_some() || self.group.is_some() => {
                Err(CniError::invalid_config(
                    "vm.owner/vm.group are for taps: a macvtap is opened through /dev/tapN",
                ))
            }
            VmInterface::Tap if self.parent.is_some() || self.mode.is_some() => Err(
                CniError::invalid_config("vm.parent/vm.mode are for macvtaps"),
            ),
            _ => {
                self.macvtap_mode()?;
                Ok(())
            }
        }
    }

    fn macvtap_mode(&self) -> Result<MacvlanMode, CniError> {
        let mode = self.mode.as_deref().unwrap_or("bridge");
        match MacvlanMode::parse(mode) {
            Some(MacvlanMode::Passthru) | None => Err(CniError::invalid_config(format!(
                "vm.mode {mode:?}: one of bridge, private, vepa"
            ))),
            Some(m) => Ok(m),
        }
    }
}

/// DEL's view of a config: its `"vm"`, if it has one that reads, without
/// validating anything else (DEL must clean up after any ADD).
pub fn of_config(text: &str) -> Option<VmConf> {
    #[derive(Deserialize)]
    struct View {
        #[serde(default)]
        vm: Option<VmConf>,
    }
    serde_json::from_str::<View>(text).ok()?.vm
}

/// The node-side name: `tap`/`mvt` + 8 hex digits of the attachment, so a
/// hypervisor config can be written before ADD returns, and DEL of the same
/// attachment finds it.
pub fn link_name(kind: VmInterface, network: &str, container_id: &str, ifname: &str) -> String {
    let mut input = Vec::new();
    for part in [network, container_id, ifname] {
        input.extend_from_slice(part.as_bytes());
        input.push(0);
    }
    let prefix = match kind {
        VmInterface::Tap => "tap",
        VmInterface::Macvtap => "mvt",
    };
    format!("{prefix}{:08x}", fnv1a32(&input))
}

/// Creates the VM's link in `node`, up; `lower` is the macvtap's default
/// parent.
pub fn create<N: Ops>(
    node: &N,
    vm: &VmConf,
    name: &str,
    mtu: Option<u32>,
    mac: Option<&str>,
    lower: Option<&str>,
) -> Result<Link, CniError> {
    let made = match vm.interface {
        VmInterface::Tap => node
            .create_tap(name, mtu, mac, vm.multi_queue, vm.owner, vm.group)
            .map_err(|e| e.into_cni(format_args!("failed to create tap {name}"))),
        VmInterface::Macvtap => {
            let parent = vm.parent.as_deref().or(lower).ok_or_else(|| {
                CniError::invalid_config("vm.parent: the macvtap needs a lower link")
            })?;
            node.create_macvtap(name, parent, vm.macvtap_mode()?, mtu, mac, node)
                .map_err(|e| {
                    e.into_cni(format_args!("failed to create macvtap {name} on {parent}"))
                })
        }
    }?;
    node.set_link(
        &made.name,
        &LinkSettings {
            up: Some(true),
            ..LinkSettings::default()
        },
    )
    .map_err(|e| e.into_cni(format_args!("failed to set {name} up")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_short_and_per_kind() {
        let t = link_name(VmInterface::Tap, "n", "c1", "eth0");
        assert_eq!(t, link_name(VmInterface::Tap, "n", "c1", "eth0"));
        assert!(t.starts_with("tap") && t.len() == 11, "{t}");
        assert_ne!(t, link_name(VmInterface::Tap, "n", "c2", "eth0"));
        assert!(link_name(VmInterface::Macvtap, "n", "c1", "eth0").starts_with("mvt"));
    }

    #[test]
    fn configs_that_cannot_be_built_are_code_7() {
        let parse = |s: &str| serde_json::from_str::<VmConf>(s).unwrap();
        assert!(parse(r#"{"interface":"tap","owner":107}"#)
            .validate(false)
            .is_ok());
        assert!(parse(r#"{"interface":"macvtap","parent":"cni0"}"#)
            .validate(true)
            .is_ok());
        for (bad, macvtap) in [
            (r#"{"interface":"macvtap"}"#, false),
            (r#"{"interface":"macvtap","owner":1}"#, true),
            (r#"{"interface":"tap","parent":"eth0"}"#, true),
            (r#"{"interface":"macvtap","mode":"passthru"}"#, true),
        ] {
            assert_eq!(parse(bad).validate(macvtap).unwrap_err().code, 7, "{bad}");
        }
        assert!(serde_json::from_str::<VmConf>(r#"{"interface":"virtio"}"#).is_err());
        assert!(serde_json::from_str::<VmConf>(r#"{"ownr":1}"#).is_err());
    }
}
