//! Packet-filter rules a plugin asks the host for (WIT `filter`), in plain
//! types, and what the meta plugins share about them: port mappings from
//! `runtimeConfig`, the host-side interface of an attachment.

use std::fmt;

use crate::error::{code, CniError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Case-insensitive, as the runtimes write it (`"tcp"`, `"TCP"`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Self::Tcp),
            "udp" => Some(Self::Udp),
            "sctp" => Some(Self::Sctp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// One rule (WIT `filter.rule`); see the WIT for what each does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    Masquerade {
        source: String,
        except: Vec<String>,
    },
    PortMap {
        protocol: Protocol,
        host_ip: Option<String>,
        host_port: u16,
        address: String,
        port: u16,
    },
    HairpinMasquerade(String),
    AllowForward(String),
    IsolateBridge(String),
    MacSpoofCheck {
        link: String,
        mac: String,
    },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Masquerade { source, except } => {
                write!(f, "masquerade {source}")?;
                for e in except {
                    write!(f, " !{e}")?;
                }
                Ok(())
            }
            Self::PortMap {
                protocol,
                host_ip,
                host_port,
                address,
                port,
            } => write!(
                f,
                "{} {}:{host_port} -> {address}:{port}",
                protocol.as_str(),
                host_ip.as_deref().unwrap_or("*")
            ),
            Self::HairpinMasquerade(a) => write!(f, "hairpin masquerade {a}"),
            Self::AllowForward(a) => write!(f, "allow forwarding {a}"),
            Self::IsolateBridge(b) => write!(f, "isolate bridge {b}"),
            Self::MacSpoofCheck { link, mac } => write!(f, "mac spoof check {link} {mac}"),
        }
    }
}

/// What went wrong with a filter request (WIT `filter-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterError {
    Refused(String),
    Invalid(String),
    /// Another attachment maps the host port; the text names it.
    PortTaken(String),
    /// `check` found a rule missing; the text names it.
    Missing(String),
    Kernel(i32, String),
}

/// The CNI code for a host port another attachment holds: plugin-specific
/// (100 and up, as the spec reserves them).
pub const PORT_TAKEN: u32 = 100;

impl FilterError {
    /// The CNI error a plugin returns for it: `port-taken` gets
    /// [`PORT_TAKEN`], anything else 999.
    pub fn into_cni(self, context: impl fmt::Display) -> CniError {
        match self {
            Self::PortTaken(m) => CniError::new(PORT_TAKEN, format!("{context}: {m}")),
            e => CniError::new(code::INTERNAL, format!("{context}: {e}")),
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(m) => write!(f, "refused by host policy: {m}"),
            Self::Invalid(m) => write!(f, "invalid argument: {m}"),
            Self::PortTaken(m) => write!(f, "port taken: {m}"),
            Self::Missing(m) => write!(f, "missing: {m}"),
            Self::Kernel(errno, m) => write!(f, "kernel error {errno}: {m}"),
        }
    }
}

impl std::error::Error for FilterError {}
