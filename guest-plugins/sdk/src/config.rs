//! Config parsing: typed serde structs for the keys every plugin shares.
//!
//! [`parse`] reads the request config twice from the same text: once into
//! [`NetConf`] (the common keys) and once into the plugin's own struct, so a
//! plugin's struct only declares its specific keys. Unknown keys are ignored,
//! as Go's `json.Unmarshal` does.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::CniError;
use crate::types::Dns;

/// The keys every plugin config may carry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub cni_version: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default)]
    pub ipam: Option<IpamConf>,
    #[serde(default)]
    pub dns: Option<DnsConf>,
    #[serde(default)]
    pub args: Option<Args>,
    #[serde(default)]
    pub runtime_config: Option<RuntimeConfig>,
}

/// `ipam`: only `type` is common; IPAM plugins read the rest themselves.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub ipam_type: String,
}

/// The config's `dns` object. Fields are optional so that "set" can be told
/// from "absent" (Go's `dnsConfSet`: any non-nil list or a non-empty domain).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DnsConf {
    #[serde(default)]
    pub nameservers: Option<Vec<String>>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub search: Option<Vec<String>>,
    #[serde(default)]
    pub options: Option<Vec<String>>,
}

impl DnsConf {
    /// Go's `dnsConfSet`.
    pub fn is_set(&self) -> bool {
        self.nameservers.is_some()
            || self.search.is_some()
            || self.options.is_some()
            || self.domain.as_deref().is_some_and(|d| !d.is_empty())
    }

    pub fn to_dns(&self) -> Dns {
        Dns {
            nameservers: self.nameservers.clone().unwrap_or_default(),
            domain: self.domain.clone().filter(|d| !d.is_empty()),
            search: self.search.clone().unwrap_or_default(),
            options: self.options.clone().unwrap_or_default(),
        }
    }
}

/// `args` (CONVENTIONS.md): only the `cni` namespace is read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Args {
    #[serde(default)]
    pub cni: Option<ArgsCni>,
}

/// `args.cni`: the well-known keys.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ArgsCni {
    #[serde(default)]
    pub ips: Option<Vec<String>>,
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub labels: Option<Vec<Label>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Label {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// `runtimeConfig`: the capabilities the SDK's plugins read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RuntimeConfig {
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub ips: Option<Vec<String>>,
}

impl NetConf {
    /// Whether an IPAM plugin is configured (`ipam.type` non-empty).
    pub fn has_ipam(&self) -> bool {
        self.ipam.as_ref().is_some_and(|i| !i.ipam_type.is_empty())
    }

    /// The config's `dns`, if set (the plugins prefer it over IPAM's).
    pub fn dns_if_set(&self) -> Option<Dns> {
        self.dns
            .as_ref()
            .filter(|d| d.is_set())
            .map(DnsConf::to_dns)
    }

    pub fn args_cni(&self) -> Option<&ArgsCni> {
        self.args.as_ref().and_then(|a| a.cni.as_ref())
    }

    /// `args.cni.mac`.
    pub fn args_cni_mac(&self) -> Option<&str> {
        self.args_cni().and_then(|c| c.mac.as_deref())
    }

    /// `args.cni.ips`.
    pub fn args_cni_ips(&self) -> Option<&[String]> {
        self.args_cni().and_then(|c| c.ips.as_deref())
    }

    /// `runtimeConfig.mac`.
    pub fn runtime_mac(&self) -> Option<&str> {
        self.runtime_config.as_ref().and_then(|r| r.mac.as_deref())
    }

    /// `runtimeConfig.ips`.
    pub fn runtime_ips(&self) -> Option<&[String]> {
        self.runtime_config.as_ref().and_then(|r| r.ips.as_deref())
    }

    /// Whether `cniVersion` is at least `version` ("" counts as 0.1.0).
    pub fn version_at_least(&self, version: &str) -> bool {
        version_at_least(&self.cni_version, version)
    }
}

/// Deserializes `text` into `T`. Malformed JSON is code 6 (decoding
/// failure); well-formed JSON of the wrong shape is code 7 (invalid config).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, CniError> {
    serde_json::from_str(text).map_err(|e| {
        let msg = format!("failed to load netconf: {e}");
        match e.classify() {
            serde_json::error::Category::Data => CniError::invalid_config(msg),
            _ => CniError::decoding(msg),
        }
    })
}

/// Parses the common keys and the plugin's own struct from one config text.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<(NetConf, T), CniError> {
    let common: NetConf = from_str(text)?;
    let own: T = from_str(text)?;
    Ok((common, own))
}

/// Compares `major.minor.patch` versions numerically; "" means 0.1.0 and an
/// unparsable version compares as 0.0.0.
pub fn version_at_least(version: &str, minimum: &str) -> bool {
    parse_version(version) >= parse_version(minimum)
}

fn parse_version(v: &str) -> (u32, u32, u32) {
    if v.is_empty() {
        return (0, 1, 0);
    }
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Default, Debug)]
    struct Own {
        #[serde(default)]
        bridge: Option<String>,
    }

    #[test]
    fn parses_common_and_own_keys() {
        let (c, own): (NetConf, Own) = parse(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"br0",
                "ipam":{"type":"static","addresses":[]},
                "dns":{"nameservers":["10.0.0.53"]},
                "args":{"cni":{"mac":"02:00:00:00:00:09","ips":["10.0.0.9/24"],"other":1}},
                "runtimeConfig":{"mac":"02:00:00:00:00:0a","portMappings":[]},
                "capabilities":{"mac":true}}"#,
        )
        .unwrap();
        assert_eq!(own.bridge.as_deref(), Some("br0"));
        assert_eq!(c.name, "n");
        assert!(c.has_ipam());
        assert_eq!(c.args_cni_mac(), Some("02:00:00:00:00:09"));
        assert_eq!(c.args_cni_ips().unwrap(), ["10.0.0.9/24".to_string()]);
        assert_eq!(c.runtime_mac(), Some("02:00:00:00:00:0a"));
        assert_eq!(c.dns_if_set().unwrap().nameservers, ["10.0.0.53"]);
        assert!(c.version_at_least("0.4.0"));
    }

    #[test]
    fn nulls_and_empties() {
        let (c, _): (NetConf, Own) =
            parse(r#"{"name":"n","ipam":{},"dns":{},"args":null,"runtimeConfig":null}"#).unwrap();
        assert!(!c.has_ipam());
        assert!(c.dns_if_set().is_none());
        assert!(c.runtime_mac().is_none());
        assert!(!c.version_at_least("0.3.0"));
        // An explicitly empty list is "set", as in Go.
        let (c, _): (NetConf, Own) = parse(r#"{"name":"n","dns":{"search":[]}}"#).unwrap();
        assert!(c.dns_if_set().is_some());
    }

    #[test]
    fn error_codes() {
        let e = parse::<Own>("{not json").unwrap_err();
        assert_eq!(e.code, 6);
        assert!(e.msg.starts_with("failed to load netconf"));
        let e = parse::<Own>(r#"{"name":"n","bridge":7}"#).unwrap_err();
        assert_eq!(e.code, 7);
    }

    #[test]
    fn versions() {
        assert!(version_at_least("1.1.0", "1.0.0"));
        assert!(version_at_least("0.10.0", "0.4.0"));
        assert!(!version_at_least("0.2.0", "0.3.0"));
        assert!(version_at_least("0.3.0", "0.3.0"));
    }
}
