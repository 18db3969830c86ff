//! Packet filtering on the plugins' behalf, as semantic rules.
//!
//! [`Filter`] is what the host side of `cni:plugin/filter` calls once its
//! policy has allowed a request: masquerade this pod's traffic, map this host
//! port to it, let it be forwarded, isolate its bridge, pin its veth to its
//! MAC. Never raw nftables. Two backends: the host's `KernelFilter`
//! (nf_tables over netlink, in the node namespace) and, for tests and the
//! rootless harness, [`MemoryFilter`] (feature `memory`), a model of the
//! same ruleset. One behavioural suite runs on both.
//!
//! Every rule belongs to one attachment. The backend writes the owner into
//! the rule itself, as its comment: `wasm-cni <network> <attachment> <rule>`,
//! where `<network>` and `<attachment>` are short hashes of the network name
//! and of (network, container id, ifname) ([`Tag`]) and `<rule>` is the
//! rule's canonical text. So the kernel ruleset alone says whose a rule is:
//! DEL removes exactly the attachment's rules, GC the network's rules of
//! attachments that are gone, and a late DEL for an old container (another
//! container id) never matches a newer one's rules. Everything lives in
//! wasm-cni's own tables (`inet wasm_cni`, `bridge wasm_cni`); nothing else
//! of the node's ruleset is read for decisions or changed.

#[cfg(feature = "memory")]
mod memory;

use std::fmt;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

use crate::net::{check_link_name, format_mac, IpNet, IpNetFamily};

#[cfg(feature = "memory")]
pub use memory::MemoryFilter;

/// The table wasm-cni keeps its rules in, in the `inet` and `bridge`
/// families.
pub const TABLE: &str = "wasm_cni";
/// What every comment wasm-cni writes starts with.
pub const COMMENT_PREFIX: &str = "wasm-cni";
/// nft(8) shows and accepts comments up to this many bytes.
const COMMENT_MAX: usize = 127;
/// Exceptions one masquerade rule may carry (bridge's and ptp's ipMasq use
/// one: the pod's own subnet).
pub const MAX_EXCEPT: usize = 4;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum FilterError {
    #[error("invalid: {0}")]
    Invalid(String),
    /// The host port (and protocol, and host address) is mapped already, by
    /// the attachment `holder`.
    #[error("{what} is already mapped by another attachment")]
    PortTaken { what: String, holder: Tag },
    #[error("kernel error {errno}: {msg}")]
    Kernel { errno: i32, msg: String },
}

impl FilterError {
    pub fn kernel(errno: i32, msg: impl Into<String>) -> Self {
        FilterError::Kernel {
            errno,
            msg: msg.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }

    /// IANA protocol number (`meta l4proto`).
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Sctp => 132,
        }
    }

    pub fn parse(s: &str) -> Option<Proto> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Proto::Tcp),
            "udp" => Some(Proto::Udp),
            "sctp" => Some(Proto::Sctp),
            _ => None,
        }
    }
}

/// One semantic rule. Each becomes one or two kernel rules, all carrying
/// the same comment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Masquerade traffic from `source` leaving the node, except to the
    /// `except` networks and to multicast (as the reference ipMasq does).
    Masquerade { source: IpAddr, except: Vec<IpNet> },
    /// DNAT `proto` traffic to a local address of the node (or to `host_ip`
    /// only) on `host_port` to `dst`:`dst_port`: from other hosts
    /// (prerouting) and from the node itself (output).
    PortMap {
        proto: Proto,
        host_ip: Option<IpAddr>,
        host_port: u16,
        dst: IpAddr,
        dst_port: u16,
    },
    /// Masquerade DNATed connections to `dst` that come from `dst` itself
    /// (hairpin) or, for IPv4, from the node's loopback, so the answers
    /// come back the way they went.
    HairpinMasquerade { dst: IpAddr },
    /// Accept forwarded traffic from `addr`, and to it when it belongs to a
    /// connection already seen (the reference firewall plugin's rules).
    AllowForward { addr: IpAddr },
    /// Drop forwarded traffic from bridge `bridge` to another isolated
    /// bridge (the firewall plugin's `ingressPolicy: same-bridge`).
    IsolateBridge { bridge: String },
    /// Drop frames entering the bridge from `link` whose source MAC is not
    /// `mac` (bridge's `macspoofchk`).
    MacSpoofCheck { link: String, mac: [u8; 6] },
}

fn bracket(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

impl Rule {
    /// Arguments a backend can check without the kernel.
    pub fn validate(&self) -> Result<(), FilterError> {
        let bad = |why: String| Err(FilterError::Invalid(why));
        match self {
            Rule::Masquerade { source, except } => {
                if except.len() > MAX_EXCEPT {
                    return bad(format!(
                        "masquerade {source}: at most {MAX_EXCEPT} exceptions, not {}",
                        except.len()
                    ));
                }
                if let Some(e) = except.iter().find(|e| e.is_ipv4() != source.is_ipv4()) {
                    return bad(format!(
                        "masquerade {source}: exception {e} is of the other address family"
                    ));
                }
            }
            Rule::PortMap {
                proto,
                host_ip,
                host_port,
                dst,
                dst_port,
            } => {
                if *host_port == 0 || *dst_port == 0 {
                    return bad(format!(
                        "port mapping {} {host_port} -> {dst_port}: ports are 1-65535",
                        proto.as_str()
                    ));
                }
                if let Some(h) = host_ip {
                    if h.is_ipv4() != dst.is_ipv4() {
                        return bad(format!(
                            "port mapping to {dst}: host address {h} is of the other address family"
                        ));
                    }
                    if h.is_unspecified() {
                        return bad(format!(
                            "port mapping to {dst}: an unspecified host address means any: leave it out"
                        ));
                    }
                }
            }
            Rule::IsolateBridge { bridge: link } | Rule::MacSpoofCheck { link, .. } => {
                check_link_name(link).map_err(|e| FilterError::Invalid(e.to_string()))?;
            }
            Rule::HairpinMasquerade { .. } | Rule::AllowForward { .. } => {}
        }
        Ok(())
    }

    /// The canonical text of the rule, as its comment shows it.
    pub fn text(&self) -> String {
        match self {
            Rule::Masquerade { source, except } => {
                let mut s = format!("masq {source}");
                for e in except {
                    s.push_str(&format!(" !{}", e.trunc()));
                }
                s
            }
            Rule::PortMap {
                proto,
                host_ip,
                host_port,
                dst,
                dst_port,
            } => {
                let host = match host_ip {
                    Some(h) => format!("{}:{host_port}", bracket(h)),
                    None => format!("*:{host_port}"),
                };
                format!("dnat {} {host} {}:{dst_port}", proto.as_str(), bracket(dst))
            }
            Rule::HairpinMasquerade { dst } => format!("hairpin {dst}"),
            Rule::AllowForward { addr } => format!("forward {addr}"),
            Rule::IsolateBridge { bridge } => format!("isolate {bridge}"),
            Rule::MacSpoofCheck { link, mac } => format!("macspoof {link} {}", format_mac(mac)),
        }
    }

    /// The host port a [`Rule::PortMap`] claims.
    pub fn claim(&self) -> Option<PortClaim> {
        match self {
            Rule::PortMap {
                proto,
                host_ip,
                host_port,
                dst,
                ..
            } => Some(PortClaim {
                proto: *proto,
                host_ip: *host_ip,
                port: *host_port,
                ipv4: dst.is_ipv4(),
            }),
            _ => None,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// A host port as a port mapping claims it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortClaim {
    pub proto: Proto,
    /// `None`: every local address of the node of the mapping's family.
    pub host_ip: Option<IpAddr>,
    pub port: u16,
    /// The family mapped (the portmap plugin maps IPv4 and IPv6 apart).
    pub ipv4: bool,
}

impl PortClaim {
    /// Two claims clash when they share protocol, port and family and one's
    /// addresses include the other's.
    pub fn clashes(&self, other: &PortClaim) -> bool {
        self.proto == other.proto
            && self.port == other.port
            && self.ipv4 == other.ipv4
            && match (self.host_ip, other.host_ip) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// Parse the `<proto> <host>:<port> <dst>:<port>` of a `dnat` comment.
    fn from_text(proto: &str, host: &str, dst: &str) -> Option<PortClaim> {
        let proto = Proto::parse(proto)?;
        let (ip, port) = host.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let unbracket = |s: &str| s.trim_start_matches('[').trim_end_matches(']').to_string();
        let host_ip = match ip {
            "*" => None,
            ip => Some(unbracket(ip).parse().ok()?),
        };
        let (dst_ip, _) = dst.rsplit_once(':')?;
        let dst_ip: IpAddr = unbracket(dst_ip).parse().ok()?;
        Some(PortClaim {
            proto,
            host_ip,
            port,
            ipv4: dst_ip.is_ipv4(),
        })
    }
}

impl fmt::Display for PortClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let family = if self.ipv4 { "IPv4" } else { "IPv6" };
        match self.host_ip {
            Some(ip) => write!(f, "{} port {} on {ip}", self.proto.as_str(), self.port),
            None => write!(f, "{} port {} ({family})", self.proto.as_str(), self.port),
        }
    }
}

/// Who owns a rule: short hashes of the network, and of the attachment
/// (network, container id, ifname).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    pub network: String,
    pub attachment: String,
}

/// Hex digits of each hash in a tag: 48 bits, so that two of the node's
/// attachments collide with odds far below one in a billion.
const TAG_HEX: usize = 12;

fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(TAG_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Tag {
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Tag {
        Tag {
            network: Tag::network_hash(network),
            attachment: short_hash(&[network, container_id, ifname]),
        }
    }

    pub fn network_hash(network: &str) -> String {
        short_hash(&[network])
    }

    /// The comment of `rule` owned by this tag. Too long a rule text is cut
    /// and a hash of the whole appended, so the comment stays unique.
    pub fn comment(&self, rule: &Rule) -> String {
        let head = format!("{COMMENT_PREFIX} {} {} ", self.network, self.attachment);
        let text = rule.text();
        if head.len() + text.len() <= COMMENT_MAX {
            return head + &text;
        }
        let digest = short_hash(&[&text]);
        let room = COMMENT_MAX - head.len() - digest.len() - 2;
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{head}{} #{digest}", &text[..cut])
    }
}

/// What a comment written by wasm-cni says: the owner and the rule text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub tag: Tag,
    pub text: String,
}

impl Owned {
    /// `None` for comments wasm-cni did not write.
    pub fn parse(comment: &str) -> Option<Owned> {
        let mut parts = comment.splitn(4, ' ');
        if parts.next()? != COMMENT_PREFIX {
            return None;
        }
        let network = parts.next()?;
        let attachment = parts.next()?;
        let text = parts.next()?;
        let hex = |s: &str| s.len() == TAG_HEX && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(network) || !hex(attachment) {
            return None;
        }
        Some(Owned {
            tag: Tag {
                network: network.into(),
                attachment: attachment.into(),
            },
            text: text.into(),
        })
    }

    /// The host port a `dnat` rule claims.
    pub fn claim(&self) -> Option<PortClaim> {
        let mut words = self.text.split(' ');
        if words.next()? != "dnat" {
            return None;
        }
        PortClaim::from_text(words.next()?, words.next()?, words.next()?)
    }
}

/// One rule of wasm-cni's tables as a backend lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `inet` or `bridge`.
    pub family: &'static str,
    pub chain: String,
    pub comment: String,
}

/// Packet-filter effects in the node namespace.
pub trait Filter: Send {
    /// Install `rules` for `tag`, all or none, and return those that were
    /// new: a rule the tag already has is left as it is (ADD retried). A
    /// [`Rule::PortMap`] whose host port another tag holds fails with
    /// [`FilterError::PortTaken`], and nothing is installed.
    fn add(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<Rule>, FilterError>;
    /// For each of `rules`, whether the tag has it.
    fn present(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<bool>, FilterError>;
    /// Remove those of `rules` the tag has; returns how many were removed.
    fn remove(&mut self, tag: &Tag, rules: &[Rule]) -> Result<usize, FilterError>;
    /// Remove every rule of the tag's attachment.
    fn remove_all(&mut self, tag: &Tag) -> Result<usize, FilterError>;
    /// Remove the rules of `network` (a [`Tag::network_hash`]) whose
    /// attachment is none of `keep`.
    fn sweep(&mut self, network: &str, keep: &[String]) -> Result<usize, FilterError>;
    /// Every rule of wasm-cni's tables, in chain order.
    fn list(&mut self) -> Result<Vec<Entry>, FilterError>;
}

/// The port clash `rules` would make with what `existing` holds, checked
/// the same way by both backends.
pub fn port_clash<'a>(
    tag: &Tag,
    rules: &[Rule],
    existing: impl IntoIterator<Item = &'a str>,
) -> Result<(), FilterError> {
    let claims: Vec<PortClaim> = rules.iter().filter_map(Rule::claim).collect();
    if claims.is_empty() {
        return Ok(());
    }
    for comment in existing {
        let Some(owned) = Owned::parse(comment) else {
            continue;
        };
        if owned.tag.attachment == tag.attachment {
            continue;
        }
        let Some(held) = owned.claim() else { continue };
        if let Some(c) = claims.iter().find(|c| c.clashes(&held)) {
            return Err(FilterError::PortTaken {
                what: c.to_string(),
                holder: owned.tag,
            });
        }
    }
    Ok(())
}
