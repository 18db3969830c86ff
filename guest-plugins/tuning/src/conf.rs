//! The tuning config, merged from the plugin keys, CNI_ARGS, runtimeConfig
//! and `args.cni` as the reference `parseConf` does.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use wasm_cni_sdk::args::CniArgs;
use wasm_cni_sdk::config::{self, NetConf};
use wasm_cni_sdk::mac::{self, MacSource};
use wasm_cni_sdk::CniError;

/// A `sysctl` object in document order; a key given twice is an error
/// (the reference `duplicated sysctl keys are not allowed`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sysctls(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for Sysctls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Sysctls;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of sysctl names to string values")
            }
            fn visit_unit<E>(self) -> Result<Sysctls, E> {
                Ok(Sysctls::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sysctls, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    if out.iter().any(|(seen, _)| *seen == k) {
                        return Err(serde::de::Error::custom(
                            "duplicated sysctl keys are not allowed",
                        ));
                    }
                    out.push((k, v));
                }
                Ok(Sysctls(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    sysctl: Option<Sysctls>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default, rename = "txQLen")]
    tx_q_len: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Debug, Default, Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawArgsCni>,
}

#[derive(Debug, Default, Deserialize)]
struct RawArgsCni {
    #[serde(default)]
    sysctl: Option<Sysctls>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_q_len: Option<i64>,
}

/// The effective settings.
#[derive(Debug)]
pub struct Conf {
    /// (config key, dotted sysctl key for the host, value), in order.
    pub sysctls: Vec<(String, String, String)>,
    pub mac: Option<String>,
    pub promisc: bool,
    pub mtu: Option<u32>,
    pub txqlen: Option<u32>,
    pub allmulti: Option<bool>,
}

impl Conf {
    /// Whether any link attribute is to be changed (and so saved first).
    pub fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc
            || self.mtu.is_some()
            || self.txqlen.is_some()
            || self.allmulti.is_some()
    }
}

pub fn load(text: &str, args: &[(String, String)], ifname: &str) -> Result<Conf, CniError> {
    if ifname.contains('/') {
        return Err(CniError::invalid_environment(format!(
            "Interface name ({ifname}) contains an invalid character /"
        )));
    }
    let (net, raw): (NetConf, Raw) = config::parse(text)?;
    let cni_args = CniArgs::parse(args, &["MAC"])?;
    let args_cni = raw.args.and_then(|a| a.cni).unwrap_or_default();

    let mut sysctls = raw.sysctl.unwrap_or_default().0;
    for (k, v) in args_cni.sysctl.unwrap_or_default().0 {
        match sysctls.iter_mut().find(|(seen, _)| *seen == k) {
            Some(slot) => slot.1 = v,
            None => sysctls.push((k, v)),
        }
    }
    let sysctls = sysctls
        .into_iter()
        .map(|(k, v)| sysctl_key(&k, ifname).map(|dotted| (k, dotted, v)))
        .collect::<Result<Vec<_>, _>>()?;

    let mac = mac::select(&[
        (MacSource::Config, raw.mac.as_deref()),
        (MacSource::CniArgs, cni_args.mac()),
        (MacSource::RuntimeConfig, net.runtime_mac()),
        (MacSource::ArgsCni, args_cni.mac.as_deref()),
    ])?;
    let mtu = match args_cni.mtu.or(raw.mtu).unwrap_or(0) {
        0 => None,
        m if (68..=65535).contains(&m) => u32::try_from(m).ok(),
        m => {
            return Err(CniError::invalid_config(format!(
                "invalid MTU {m}, must be 0 (unset) or between 68 and 65535"
            )))
        }
    };
    let txqlen = match args_cni.tx_q_len.or(raw.tx_q_len) {
        None => None,
        Some(q) => Some(
            u32::try_from(q)
                .map_err(|_| CniError::invalid_config(format!("invalid txQLen {q}")))?,
        ),
    };
    Ok(Conf {
        sysctls,
        mac,
        promisc: args_cni.promisc.or(raw.promisc).unwrap_or(false),
        mtu,
        txqlen,
        allmulti: args_cni.allmulti.or(raw.allmulti),
    })
}

/// The reference `getSysctlFilename`, producing the dotted key the host
/// takes: `.` → `/`, the first `IFNAME` → the interface, and the result must
/// be under `net/` (no empty, `.` or `..` components). Dots inside the
/// interface name become `/` in the dotted form (sysctl(8) convention).
pub fn sysctl_key(key: &str, ifname: &str) -> Result<String, CniError> {
    let path = key.replace('.', "/").replacen("IFNAME", ifname, 1);
    let path = path.trim_start_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    let valid = parts.len() >= 2
        && parts.first() == Some(&"net")
        && parts
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..");
    if !valid {
        return Err(CniError::invalid_config(format!(
            "invalid net sysctl key: {path:?}"
        )));
    }
    Ok(parts
        .iter()
        .map(|p| p.replace('.', "/"))
        .collect::<Vec<_>>()
        .join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys() {
        assert_eq!(
            sysctl_key("net.ipv4.conf.IFNAME.arp_notify", "eth0").unwrap(),
            "net.ipv4.conf.eth0.arp_notify"
        );
        assert_eq!(
            sysctl_key("net/ipv4/conf/IFNAME/arp_notify", "eth0").unwrap(),
            "net.ipv4.conf.eth0.arp_notify"
        );
        assert_eq!(
            sysctl_key("net.ipv4.conf.IFNAME.arp_notify", "eth0.100").unwrap(),
            "net.ipv4.conf.eth0/100.arp_notify"
        );
        assert_eq!(
            sysctl_key("net.core.somaxconn", "eth0").unwrap(),
            "net.core.somaxconn"
        );
        for bad in [
            "kernel.hostname",
            "net",
            "net..ipv4",
            "net/../kernel/hostname",
            "netfoo.x",
            "",
        ] {
            let e = sysctl_key(bad, "eth0").unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(
                e.msg.starts_with("invalid net sysctl key"),
                "{bad}: {}",
                e.msg
            );
        }
    }
}
