//! Plain Rust mirrors of the WIT `types` records, so plugin logic never
//! touches generated bindings. Conversions live in [`crate::guest`].

use serde::{Deserialize, Serialize};

/// One attachment of a container to a network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
}

/// An ADD, DEL or CHECK request (see `types.request` in the WIT).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    pub container_id: String,
    pub ifname: String,
    /// CNI_NETNS, for `sandbox` fields only.
    pub netns: Option<String>,
    /// CNI_ARGS pairs, in order.
    pub args: Vec<(String, String)>,
    /// The plugin's config JSON text.
    pub config: String,
    /// `prevResult`, already converted to 1.1.
    pub prev_result: Option<CniResult>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    pub sandbox: Option<String>,
    pub socket_path: Option<String>,
    pub pci_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpConfig {
    /// CIDR with host bits: `10.1.2.3/24`.
    pub address: String,
    pub gateway: Option<String>,
    /// Index into the result's `interfaces`.
    pub interface: Option<u32>,
}

/// A result route; also the JSON shape of config `routes` entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    /// True when no field carries anything.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.as_deref().unwrap_or("").is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// A CNI 1.1 result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Option<Dns>,
}
