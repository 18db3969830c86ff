//! [`Filter`] on the kernel: nf_tables, spoken over netfilter netlink.
//!
//! wasm-cni's rules live in two tables of its own:
//!
//! ```text
//! table inet wasm_cni
//!   chain prerouting  { type nat hook prerouting priority dstnat }   port maps
//!   chain output      { type nat hook output priority -100 }         port maps, from the node
//!   chain postrouting { type nat hook postrouting priority srcnat }  ipMasq, hairpin
//!   chain isolation   { type filter hook forward priority -10 }      same-bridge isolation
//!   chain isolated                                                   (its drops)
//!   chain forward     { type filter hook forward priority filter }   firewall accepts
//! table bridge wasm_cni
//!   chain prerouting  { type filter hook prerouting priority -300 }  macspoofchk
//! ```
//!
//! Each change is one netlink batch, which the kernel applies all or
//! nothing. A table and its chains are created together, in the batch that
//! first needs them, and then stay: deleting a table unregisters its hooks,
//! which costs the kernel an RCU grace period per DEL, while empty base
//! chains cost a packet nothing measurable. A port map depends on what
//! others hold: it reads the ruleset first and sends its batch with the
//! generation it read, so that if another process changed the ruleset in
//! between the kernel refuses the batch and the step reads again. So
//! concurrent plugin hosts need no lock between them.
//!
//! Closing a netfilter socket waits for the kernel to free the transactions
//! of recent commits (an RCU grace period, several milliseconds): the
//! daemon keeps its sockets in a [`SocketPool`] instead of closing one per
//! request.

mod nfnl;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use self::nfnl::{
    Expr, Hook, Msg, NfError, NfSocket, RuleInfo, ERESTART, NFPROTO_BRIDGE, NFPROTO_INET,
    NFPROTO_IPV4, NFPROTO_IPV6, NFT_JUMP, NFT_RETURN, NF_ACCEPT, NF_DROP, REG_1, REG_2,
};
use super::{port_clash, Entry, Filter, FilterError, Owned, Rule, Tag, TABLE};
use crate::net::{IpNet, IpNetFamily, Ipv4Net, Ipv6Net};
use std::collections::BTreeMap;
use wasm_cni_model::fabric::{Masquerade, NAT_TABLE};

/// How often a step whose batch lost a race with another writer reads the
/// ruleset again before giving up.
const ATTEMPTS: usize = 50;

/// Messages per batch when removing many rules at once (GC).
const BATCH_MAX: usize = 256;

/// A chain of wasm-cni's tables.
struct ChainSpec {
    family: u8,
    name: &'static str,
    hook: Option<Hook>,
}

const NF_INET_PRE_ROUTING: u32 = 0;
const NF_INET_FORWARD: u32 = 2;
const NF_INET_LOCAL_OUT: u32 = 3;
const NF_INET_POST_ROUTING: u32 = 4;

const fn hook(num: u32, priority: i32, kind: &'static str) -> Option<Hook> {
    Some(Hook {
        num,
        priority,
        kind,
    })
}

const PREROUTING: &str = "prerouting";
const OUTPUT: &str = "output";
const POSTROUTING: &str = "postrouting";
const ISOLATION: &str = "isolation";
const ISOLATED: &str = "isolated";
const FORWARD: &str = "forward";

const CHAINS: &[ChainSpec] = &[
    ChainSpec {
        family: NFPROTO_INET,
        name: PREROUTING,
        hook: hook(NF_INET_PRE_ROUTING, -100, "nat"),
    },
    ChainSpec {
        family: NFPROTO_INET,
        name: OUTPUT,
        hook: hook(NF_INET_LOCAL_OUT, -100, "nat"),
    },
    ChainSpec {
        family: NFPROTO_INET,
        name: POSTROUTING,
        hook: hook(NF_INET_POST_ROUTING, 100, "nat"),
    },
    // Before `forward`: an accept there ends this table's forward hook.
    ChainSpec {
        family: NFPROTO_INET,
        name: ISOLATION,
        hook: hook(NF_INET_FORWARD, -10, "filter"),
    },
    ChainSpec {
        family: NFPROTO_INET,
        name: ISOLATED,
        hook: None,
    },
    ChainSpec {
        family: NFPROTO_INET,
        name: FORWARD,
        hook: hook(NF_INET_FORWARD, 0, "filter"),
    },
    ChainSpec {
        family: NFPROTO_BRIDGE,
        name: PREROUTING,
        hook: hook(NF_INET_PRE_ROUTING, -300, "filter"),
    },
];

const FAMILIES: [u8; 2] = [NFPROTO_INET, NFPROTO_BRIDGE];

fn family_name(f: u8) -> &'static str {
    if f == NFPROTO_BRIDGE {
        "bridge"
    } else {
        "inet"
    }
}

// Expression constants (nf_tables.h).
const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_PAYLOAD_LL_HEADER: u32 = 0;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 2;
const RTN_LOCAL: u32 = 2;
const NFT_CT_STATE: u32 = 0;
const NFT_CT_STATUS: u32 = 2;
const CT_STATE_ESTABLISHED: u32 = 1 << 1;
const CT_STATE_RELATED: u32 = 1 << 2;
const IPS_DST_NAT: u32 = 1 << 5;

/// One kernel rule a semantic rule becomes.
struct KRule {
    family: u8,
    chain: &'static str,
    exprs: Vec<Expr>,
}

fn cmp(op: u32, data: Vec<u8>) -> Expr {
    Expr::Cmp { op, data }
}

fn nfproto(v4: bool) -> [Expr; 2] {
    [
        Expr::Meta {
            key: NFT_META_NFPROTO,
            dreg: REG_1,
        },
        cmp(
            NFT_CMP_EQ,
            vec![if v4 { NFPROTO_IPV4 } else { NFPROTO_IPV6 }],
        ),
    ]
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn mask_bytes(net: &IpNet) -> Vec<u8> {
    let len = if net.is_ipv4() { 4 } else { 16 };
    let mut m = vec![0u8; len];
    let mut bits = usize::from(net.prefix_len());
    for b in &mut m {
        let take = bits.min(8);
        *b = if take == 0 { 0 } else { 0xffu8 << (8 - take) };
        bits -= take;
    }
    m
}

/// `ip[6] saddr|daddr (==|!=) net`.
fn addr_match(source: bool, net: &IpNet, op: u32) -> Vec<Expr> {
    let v4 = net.is_ipv4();
    let (offset, len) = match (v4, source) {
        (true, true) => (12, 4),
        (true, false) => (16, 4),
        (false, true) => (8, 16),
        (false, false) => (24, 16),
    };
    let mut out = vec![Expr::Payload {
        base: NFT_PAYLOAD_NETWORK_HEADER,
        offset,
        len,
    }];
    let full = if v4 { 32 } else { 128 };
    if net.prefix_len() < full {
        out.push(Expr::Bitwise {
            mask: mask_bytes(net),
            xor: vec![0; len as usize],
        });
    }
    out.push(cmp(op, ip_bytes(&net.network())));
    out
}

fn host(ip: &IpAddr) -> IpNet {
    IpNet::from(*ip)
}

fn ifname(input: bool, name: &str, op: u32) -> [Expr; 2] {
    let mut data = name.as_bytes().to_vec();
    data.resize(16, 0);
    [
        Expr::Meta {
            key: if input {
                NFT_META_IIFNAME
            } else {
                NFT_META_OIFNAME
            },
            dreg: REG_1,
        },
        cmp(op, data),
    ]
}

/// `ct <key> & bits != 0`.
fn ct_any(key: u32, bits: u32) -> [Expr; 3] {
    [
        Expr::Ct { key },
        Expr::Bitwise {
            mask: bits.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        cmp(NFT_CMP_NEQ, vec![0; 4]),
    ]
}

fn verdict(code: i32) -> Expr {
    Expr::Verdict { code, chain: None }
}

fn multicast(v4: bool) -> IpNet {
    if v4 {
        IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(224, 0, 0, 0), 4))
    } else {
        IpNet::V6(Ipv6Net::new_assert(
            Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
            8,
        ))
    }
}

/// The kernel rules of `rule`.
fn compile(rule: &Rule) -> Vec<KRule> {
    let inet = |chain, exprs| KRule {
        family: NFPROTO_INET,
        chain,
        exprs,
    };
    match rule {
        Rule::Masquerade { source, except } => {
            let v4 = source.is_ipv4();
            let mut x: Vec<Expr> = nfproto(v4).into();
            x.extend(addr_match(true, &host(source), NFT_CMP_EQ));
            for e in except.iter().chain(std::iter::once(&multicast(v4))) {
                x.extend(addr_match(false, e, NFT_CMP_NEQ));
            }
            x.extend([Expr::Counter, Expr::Masquerade]);
            vec![inet(POSTROUTING, x)]
        }
        Rule::PortMap {
            proto,
            host_ip,
            host_port,
            dst,
            dst_port,
        } => {
            let v4 = dst.is_ipv4();
            let mut x: Vec<Expr> = nfproto(v4).into();
            match host_ip {
                Some(h) => x.extend(addr_match(false, &host(h), NFT_CMP_EQ)),
                None => x.extend([
                    Expr::Fib {
                        result: NFT_FIB_RESULT_ADDRTYPE,
                        flags: NFTA_FIB_F_DADDR,
                    },
                    cmp(NFT_CMP_EQ, RTN_LOCAL.to_ne_bytes().to_vec()),
                ]),
            }
            x.extend([
                Expr::Meta {
                    key: NFT_META_L4PROTO,
                    dreg: REG_1,
                },
                cmp(NFT_CMP_EQ, vec![proto.number()]),
                Expr::Payload {
                    base: NFT_PAYLOAD_TRANSPORT_HEADER,
                    offset: 2,
                    len: 2,
                },
                cmp(NFT_CMP_EQ, host_port.to_be_bytes().to_vec()),
                Expr::Counter,
                Expr::Immediate {
                    dreg: REG_1,
                    data: ip_bytes(dst),
                },
                Expr::Immediate {
                    dreg: REG_2,
                    data: dst_port.to_be_bytes().to_vec(),
                },
                Expr::Nat {
                    dnat: true,
                    family: if v4 { NFPROTO_IPV4 } else { NFPROTO_IPV6 },
                    addr_reg: REG_1,
                    port_reg: Some(REG_2),
                },
            ]);
            vec![inet(PREROUTING, x.clone()), inet(OUTPUT, x)]
        }
        Rule::HairpinMasquerade { dst } => {
            let v4 = dst.is_ipv4();
            let from = |src: IpNet| {
                let mut x: Vec<Expr> = nfproto(v4).into();
                x.extend(ct_any(NFT_CT_STATUS, IPS_DST_NAT));
                x.extend(addr_match(true, &src, NFT_CMP_EQ));
                x.extend(addr_match(false, &host(dst), NFT_CMP_EQ));
                x.extend([Expr::Counter, Expr::Masquerade]);
                inet(POSTROUTING, x)
            };
            let mut out = vec![from(host(dst))];
            if v4 {
                out.push(from(IpNet::V4(Ipv4Net::new_assert(
                    Ipv4Addr::new(127, 0, 0, 0),
                    8,
                ))));
            }
            out
        }
        Rule::AllowForward { addr } => {
            let v4 = addr.is_ipv4();
            let mut to: Vec<Expr> = nfproto(v4).into();
            to.extend(addr_match(false, &host(addr), NFT_CMP_EQ));
            to.extend(ct_any(
                NFT_CT_STATE,
                CT_STATE_ESTABLISHED | CT_STATE_RELATED,
            ));
            to.extend([Expr::Counter, verdict(NF_ACCEPT)]);
            let mut from: Vec<Expr> = nfproto(v4).into();
            from.extend(addr_match(true, &host(addr), NFT_CMP_EQ));
            from.extend([Expr::Counter, verdict(NF_ACCEPT)]);
            vec![inet(FORWARD, to), inet(FORWARD, from)]
        }
        Rule::IsolateBridge { bridge } => {
            let mut leave: Vec<Expr> = ifname(true, bridge, NFT_CMP_EQ).into();
            leave.extend(ifname(false, bridge, NFT_CMP_NEQ));
            leave.push(Expr::Verdict {
                code: NFT_JUMP,
                chain: Some(ISOLATED.into()),
            });
            let mut enter: Vec<Expr> = ifname(false, bridge, NFT_CMP_EQ).into();
            enter.extend([Expr::Counter, verdict(NF_DROP)]);
            vec![inet(ISOLATED, enter), inet(ISOLATION, leave)]
        }
        Rule::MacSpoofCheck { link, mac } => {
            let mut x: Vec<Expr> = ifname(true, link, NFT_CMP_EQ).into();
            x.extend([
                Expr::Payload {
                    base: NFT_PAYLOAD_LL_HEADER,
                    offset: 6,
                    len: 6,
                },
                cmp(NFT_CMP_NEQ, mac.to_vec()),
                Expr::Counter,
                verdict(NF_DROP),
            ]);
            vec![KRule {
                family: NFPROTO_BRIDGE,
                chain: PREROUTING,
                exprs: x,
            }]
        }
    }
}

/// Whether every kernel rule of `rule` is in place: `have` counts kernel
/// rules by comment.
fn complete(have: &HashMap<String, usize>, tag: &Tag, rule: &Rule) -> bool {
    have.get(&tag.comment(rule)).copied().unwrap_or(0) >= compile(rule).len()
}

/// Netfilter sockets kept open for reuse (by a daemon, in its namespace).
#[derive(Default)]
pub struct SocketPool {
    idle: Mutex<Vec<NfSocket>>,
}

/// Sockets a pool keeps; more are closed when returned.
const POOL_MAX: usize = 32;

impl SocketPool {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }
}

/// nf_tables in one network namespace: the node's. The socket is opened on
/// first use, so a chain without filter rules never opens one.
pub struct KernelFilter {
    sock: Option<NfSocket>,
    pool: Option<Arc<SocketPool>>,
    /// Families whose table (with all its chains) this filter made or added
    /// to: later batches leave out creating them (and put it back if the
    /// table is gone after all).
    tables: HashSet<u8>,
}

impl Default for KernelFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KernelFilter {
    fn drop(&mut self) {
        if let (Some(sock), Some(pool)) = (self.sock.take(), &self.pool) {
            if let Ok(mut idle) = pool.idle.lock() {
                if idle.len() < POOL_MAX {
                    idle.push(sock);
                }
            }
        }
    }
}

fn kerr(what: &str) -> impl FnOnce(NfError) -> FilterError + '_ {
    move |e| FilterError::kernel(e.errno, format!("{what}: {}", e.msg))
}

impl KernelFilter {
    /// The namespace of the thread that first uses it.
    pub fn new() -> Self {
        KernelFilter {
            sock: None,
            pool: None,
            tables: HashSet::new(),
        }
    }

    /// Taking its socket from `pool` and giving it back when dropped.
    pub fn pooled(pool: Arc<SocketPool>) -> Self {
        KernelFilter {
            sock: None,
            pool: Some(pool),
            tables: HashSet::new(),
        }
    }

    fn sock(&mut self) -> Result<&mut NfSocket, FilterError> {
        if self.sock.is_none() {
            if let Some(pool) = &self.pool {
                self.sock = pool.idle.lock().ok().and_then(|mut idle| idle.pop());
            }
        }
        if self.sock.is_none() {
            let sock = NfSocket::new().map_err(|e| {
                FilterError::kernel(
                    e.raw_os_error().unwrap_or(libc::EIO),
                    format!("netfilter netlink socket: {e}"),
                )
            })?;
            self.sock = Some(sock);
        }
        match self.sock.as_mut() {
            Some(s) => Ok(s),
            None => Err(FilterError::kernel(libc::EIO, "netfilter socket")),
        }
    }

    /// The namespace `path` names (`/run/netns/NAME`).
    pub fn in_namespace(path: &Path) -> Result<Self, FilterError> {
        let file = File::open(path).map_err(|e| {
            FilterError::kernel(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("namespace {}: {e}", path.display()),
            )
        })?;
        let sock = crate::net::in_netns(file.as_fd(), NfSocket::new).map_err(|e| {
            FilterError::kernel(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("netfilter socket in {}: {e}", path.display()),
            )
        })?;
        Ok(KernelFilter {
            sock: Some(sock),
            pool: None,
            tables: HashSet::new(),
        })
    }

    /// The rules of wasm-cni's table in `family` (none if it has no table).
    fn rules_of(&mut self, family: u8) -> Result<Vec<RuleInfo>, FilterError> {
        let rules = self
            .sock()?
            .rules(family, TABLE)
            .map_err(kerr("listing wasm-cni's rules"))?;
        Ok(rules.unwrap_or_default())
    }

    /// Delete the rules `doomed` picks, and a table left without rules;
    /// retried when another writer gets in between.
    fn delete_where(
        &mut self,
        doomed: impl Fn(&Owned, &str) -> bool,
    ) -> Result<usize, FilterError> {
        let mut removed = 0;
        for family in FAMILIES {
            removed += self.delete_in(family, &doomed)?;
        }
        Ok(removed)
    }

    fn delete_in(
        &mut self,
        family: u8,
        doomed: &impl Fn(&Owned, &str) -> bool,
    ) -> Result<usize, FilterError> {
        for _ in 0..ATTEMPTS {
            let rules = self.rules_of(family)?;
            let mut msgs: Vec<Msg> = Vec::new();
            let mut comments: HashSet<&str> = HashSet::new();
            for r in &rules {
                let Some(comment) = &r.comment else { continue };
                let Some(owned) = Owned::parse(comment) else {
                    continue;
                };
                if doomed(&owned, comment) {
                    msgs.push(nfnl::del_rule(family, TABLE, &r.chain, r.handle));
                    comments.insert(comment);
                }
            }
            if msgs.is_empty() {
                return Ok(0);
            }
            let sock = self.sock()?;
            let outcome = msgs
                .chunks(BATCH_MAX)
                .try_for_each(|chunk| sock.batch(chunk, None));
            match outcome {
                Ok(()) => return Ok(comments.len()),
                // One of these rules went meanwhile (an administrator's
                // `nft delete`): read again.
                Err(e) if e.errno == libc::ENOENT => continue,
                Err(e) => return Err(kerr("removing rules")(e)),
            }
        }
        Err(FilterError::kernel(
            libc::EBUSY,
            "removing rules: the ruleset kept changing",
        ))
    }
}

impl Filter for KernelFilter {
    fn add(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<Rule>, FilterError> {
        for r in rules {
            r.validate()?;
        }
        let claims = rules.iter().any(|r| r.claim().is_some());
        for _ in 0..ATTEMPTS {
            // A port map depends on what others hold: read the generation
            // first, and commit only if nothing changed since.
            let gen = if claims {
                Some(
                    self.sock()?
                        .generation()
                        .map_err(kerr("reading the ruleset generation"))?,
                )
            } else {
                None
            };
            let needed: BTreeSet<u8> = rules.iter().flat_map(compile).map(|k| k.family).collect();
            let mut have: HashMap<String, usize> = HashMap::new();
            let mut inet_comments: Vec<String> = Vec::new();
            for &family in &needed {
                for r in self.rules_of(family)? {
                    if let Some(c) = r.comment {
                        if family == NFPROTO_INET {
                            inet_comments.push(c.clone());
                        }
                        *have.entry(c).or_default() += 1;
                    }
                }
            }
            port_clash(tag, rules, inet_comments.iter().map(String::as_str))?;
            // A rule some of whose pieces were deleted by hand is added again
            // whole.
            let fresh: Vec<&Rule> = rules.iter().filter(|r| !complete(&have, tag, r)).collect();
            if fresh.is_empty() {
                return Ok(Vec::new());
            }
            let mut msgs = Vec::new();
            for family in needed.iter().filter(|f| !self.tables.contains(f)) {
                msgs.push(nfnl::new_table(*family, TABLE));
                for c in CHAINS.iter().filter(|c| c.family == *family) {
                    msgs.push(nfnl::new_chain(*family, TABLE, c.name, c.hook));
                }
            }
            for r in &fresh {
                let comment = tag.comment(r);
                for k in compile(r) {
                    msgs.push(nfnl::new_rule(k.family, TABLE, k.chain, &k.exprs, &comment));
                }
            }
            match self.sock()?.batch(&msgs, gen) {
                Ok(()) => {
                    self.tables.extend(needed.iter().copied());
                    return Ok(fresh.into_iter().cloned().collect());
                }
                // Another writer came in between, or the table it read is
                // gone (an administrator's `nft delete table`): again.
                Err(e) if e.errno == ERESTART || e.errno == libc::ENOENT => {
                    self.tables.clear();
                    continue;
                }
                Err(e) => return Err(kerr("adding rules")(e)),
            }
        }
        Err(FilterError::kernel(
            libc::EBUSY,
            "adding rules: the ruleset kept changing",
        ))
    }

    fn present(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<bool>, FilterError> {
        let mut have: HashMap<String, usize> = HashMap::new();
        for family in FAMILIES {
            for c in self.rules_of(family)?.into_iter().filter_map(|r| r.comment) {
                *have.entry(c).or_default() += 1;
            }
        }
        Ok(rules.iter().map(|r| complete(&have, tag, r)).collect())
    }

    fn remove(&mut self, tag: &Tag, rules: &[Rule]) -> Result<usize, FilterError> {
        let wanted: HashSet<String> = rules.iter().map(|r| tag.comment(r)).collect();
        self.delete_where(|_, comment| wanted.contains(comment))
    }

    fn remove_all(&mut self, tag: &Tag) -> Result<usize, FilterError> {
        self.delete_where(|o, _| o.tag == *tag)
    }

    fn sweep(&mut self, network: &str, keep: &[String]) -> Result<usize, FilterError> {
        self.delete_where(|o, _| o.tag.network == network && !keep.contains(&o.tag.attachment))
    }

    fn list(&mut self) -> Result<Vec<Entry>, FilterError> {
        let mut out = Vec::new();
        for family in FAMILIES {
            for r in self.rules_of(family)? {
                out.push(Entry {
                    family: family_name(family),
                    chain: r.chain,
                    comment: r.comment.unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }
}

/// Cluster mode's masquerade: the table `inet` [`NAT_TABLE`] with one
/// postrouting chain, replaced whole in one batch whenever it changes (the
/// connections already translated keep their binding in conntrack). For
/// each of the node's pod CIDRs: a `return` per cluster CIDR, then a
/// masquerade of the rest but multicast. Each rule's comment says what it
/// is, which is how the table is read back.
pub(crate) struct ClusterNat {
    sock: NfSocket,
}

const RETURN: &str = "cluster-return";
const MASQ: &str = "cluster-masquerade";

impl ClusterNat {
    pub(crate) fn open(ns: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Self> {
        crate::net::in_netns(ns, NfSocket::new).map(|sock| ClusterNat { sock })
    }

    pub(crate) fn observe(&mut self) -> Result<BTreeSet<Masquerade>, NfError> {
        let mut out: BTreeMap<IpNet, BTreeSet<IpNet>> = BTreeMap::new();
        for r in self
            .sock
            .rules(NFPROTO_INET, NAT_TABLE)?
            .unwrap_or_default()
        {
            let Some(c) = r.comment else { continue };
            let words: Vec<&str> = c.split(' ').collect();
            match words.as_slice() {
                [RETURN, pods, except] => {
                    if let (Ok(p), Ok(e)) = (pods.parse(), except.parse()) {
                        out.entry(p).or_default().insert(e);
                    }
                }
                [MASQ, pods] => {
                    if let Ok(p) = pods.parse() {
                        out.entry(p).or_default();
                    }
                }
                _ => {}
            }
        }
        Ok(out
            .into_iter()
            .map(|(pods, except)| Masquerade { pods, except })
            .collect())
    }

    pub(crate) fn apply(&mut self, want: &BTreeSet<Masquerade>) -> Result<(), NfError> {
        // Made first so that the delete cannot miss, in the same batch.
        let mut msgs = vec![
            nfnl::new_table(NFPROTO_INET, NAT_TABLE),
            nfnl::del_table(NFPROTO_INET, NAT_TABLE),
        ];
        if !want.is_empty() {
            msgs.push(nfnl::new_table(NFPROTO_INET, NAT_TABLE));
            msgs.push(nfnl::new_chain(
                NFPROTO_INET,
                NAT_TABLE,
                POSTROUTING,
                hook(NF_INET_POST_ROUTING, 100, "nat"),
            ));
        }
        let rule = |x: &[Expr], comment: String| {
            nfnl::new_rule(NFPROTO_INET, NAT_TABLE, POSTROUTING, x, &comment)
        };
        for m in want {
            let v4 = m.pods.is_ipv4();
            let from = || {
                let mut x: Vec<Expr> = nfproto(v4).into();
                x.extend(addr_match(true, &m.pods, NFT_CMP_EQ));
                x
            };
            for e in m.except.iter().filter(|e| e.is_ipv4() == v4) {
                let mut x = from();
                x.extend(addr_match(false, e, NFT_CMP_EQ));
                x.push(verdict(NFT_RETURN));
                msgs.push(rule(&x, format!("{RETURN} {} {e}", m.pods)));
            }
            let mut x = from();
            x.extend(addr_match(false, &multicast(v4), NFT_CMP_NEQ));
            x.extend([Expr::Counter, Expr::Masquerade]);
            msgs.push(rule(&x, format!("{MASQ} {}", m.pods)));
        }
        self.sock.batch(&msgs, None)
    }
}
