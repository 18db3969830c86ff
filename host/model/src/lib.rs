//! The kernel model and the policy plugins run under, without wasmtime: what
//! the host, the SDK's fake host and the fuzz harness share, so that the
//! three never disagree about what a plugin may do or what the kernel does.
//!
//! * [`net`]: links, addresses, routes, sysctls and qdiscs as semantic verbs
//!   (the [`net::Net`] trait), and with feature `memory` the in-memory model
//!   of the kernel rules plugins depend on.
//! * [`fabric`]: the node's part of the cluster network (routes to other
//!   nodes, VXLAN endpoints) as semantic verbs (the [`fabric::Fabric`]
//!   trait), and with feature `memory` its in-memory model.
//! * [`filter`]: packet filtering as semantic rules (the [`filter::Filter`]
//!   trait), and with feature `memory` its in-memory model.
//! * [`policy`]: what one plugin call may touch, the one choke point every
//!   network and filter import passes through; [`live`]: what a grant rests
//!   on, confirmed against the live links.
//!
//! The kernel backends of these traits live in `wasm-cni-kernel`.

pub mod cidr;
pub mod fabric;
pub mod filter;
pub mod live;
pub mod net;
pub mod policy;

use std::fmt;
use std::str::FromStr;

/// A CNI verb (`CNI_COMMAND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Status,
    Gc,
}

impl Command {
    pub const ALL: [Command; 6] = [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Version,
        Command::Status,
        Command::Gc,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        }
    }

    /// Verbs that address one attachment and so carry a container id and
    /// ifname.
    pub fn is_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `CNI_COMMAND` that names no verb.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown CNI_COMMAND: {0}")]
pub struct UnknownCommand(pub String);

impl FromStr for Command {
    type Err = UnknownCommand;

    /// Exact, case-sensitive match as in skel.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Command::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCommand(s.to_string()))
    }
}
