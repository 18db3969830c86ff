//! nf_tables over a netfilter netlink socket: the few messages wasm-cni
//! sends (tables, chains, rules, in batches) and the dumps it reads back.
//! Hand-written, as rtnetlink in `net::kernel` is: the attribute layout is
//! the kernel's `include/uapi/linux/netfilter/nf_tables.h`.
#![allow(clippy::disallowed_types)] // the filter's one socket

use std::io;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_BRIDGE: u8 = 7;
pub const NFPROTO_IPV6: u8 = 10;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_BATCH_GENID: u16 = 1;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_GETGEN: u16 = 16;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_GEN_ID: u16 = 1;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
/// libnftnl's user-data type for a rule comment, which nft(8) shows.
const NFTNL_UDATA_RULE_COMMENT: u8 = 0;

const NLA_F_NESTED: u16 = 0x8000;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLM_F_DUMP_INTR: u16 = 0x10;

/// The 16-byte registers (`NFT_REG_1`...) and the verdict register.
pub const REG_VERDICT: u32 = 0;
pub const REG_1: u32 = 1;
pub const REG_2: u32 = 2;

pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
pub const NFT_JUMP: i32 = -3;
pub const NFT_RETURN: i32 = -5;

/// A batch answered with this was refused because the ruleset changed
/// since the generation it named.
pub const ERESTART: i32 = 85;

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Load a `meta` key into a register.
    Meta {
        key: u32,
        dreg: u32,
    },
    /// Compare a register with `data`.
    Cmp {
        op: u32,
        data: Vec<u8>,
    },
    /// Load `len` bytes at `offset` of header `base` into a register.
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    /// `reg = (reg & mask) ^ xor`.
    Bitwise {
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Verdict {
        code: i32,
        chain: Option<String>,
    },
    /// Load a constant into a register.
    Immediate {
        dreg: u32,
        data: Vec<u8>,
    },
    /// `dnat` (or `snat`) to the address in `addr_reg`, port in `port_reg`.
    Nat {
        dnat: bool,
        family: u8,
        addr_reg: u32,
        port_reg: Option<u32>,
    },
    Masquerade,
    /// A FIB lookup's `result` for the packet's addresses by `flags`.
    Fib {
        result: u32,
        flags: u32,
    },
    /// Load a conntrack key.
    Ct {
        key: u32,
    },
    Counter,
}

/// Netlink attributes under construction.
#[derive(Default)]
struct Attrs(Vec<u8>);

impl Attrs {
    fn put(&mut self, kind: u16, data: &[u8]) {
        let len = 4 + data.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }

    fn str(&mut self, kind: u16, s: &str) {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(kind, &v);
    }

    fn be32(&mut self, kind: u16, v: u32) {
        self.put(kind, &v.to_be_bytes());
    }

    fn be64(&mut self, kind: u16, v: u64) {
        self.put(kind, &v.to_be_bytes());
    }

    fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Attrs)) {
        let mut inner = Attrs::default();
        f(&mut inner);
        self.put(kind | NLA_F_NESTED, &inner.0);
    }

    fn value(&mut self, kind: u16, data: &[u8]) {
        self.nest(kind, |a| a.put(NFTA_DATA_VALUE, data));
    }
}

fn expr(list: &mut Attrs, name: &str, f: impl FnOnce(&mut Attrs)) {
    list.nest(NFTA_LIST_ELEM, |e| {
        e.str(NFTA_EXPR_NAME, name);
        let mut data = Attrs::default();
        f(&mut data);
        if !data.0.is_empty() {
            e.put(NFTA_EXPR_DATA | NLA_F_NESTED, &data.0);
        }
    });
}

fn encode_expr(list: &mut Attrs, x: &Expr) {
    match x {
        Expr::Meta { key, dreg } => expr(list, "meta", |a| {
            a.be32(1, *dreg); // NFTA_META_DREG
            a.be32(2, *key); // NFTA_META_KEY
        }),
        Expr::Cmp { op, data } => expr(list, "cmp", |a| {
            a.be32(1, REG_1); // NFTA_CMP_SREG
            a.be32(2, *op); // NFTA_CMP_OP
            a.value(3, data); // NFTA_CMP_DATA
        }),
        Expr::Payload { base, offset, len } => expr(list, "payload", |a| {
            a.be32(1, REG_1); // NFTA_PAYLOAD_DREG
            a.be32(2, *base);
            a.be32(3, *offset);
            a.be32(4, *len);
        }),
        Expr::Bitwise { mask, xor } => expr(list, "bitwise", |a| {
            a.be32(1, REG_1); // NFTA_BITWISE_SREG
            a.be32(2, REG_1); // NFTA_BITWISE_DREG
            a.be32(3, mask.len() as u32); // NFTA_BITWISE_LEN
            a.value(4, mask);
            a.value(5, xor);
        }),
        Expr::Verdict { code, chain } => expr(list, "immediate", |a| {
            a.be32(1, REG_VERDICT); // NFTA_IMMEDIATE_DREG
            a.nest(2, |d| {
                d.nest(NFTA_DATA_VERDICT, |v| {
                    v.be32(NFTA_VERDICT_CODE, *code as u32);
                    if let Some(c) = chain {
                        v.str(NFTA_VERDICT_CHAIN, c);
                    }
                })
            });
        }),
        Expr::Immediate { dreg, data } => expr(list, "immediate", |a| {
            a.be32(1, *dreg);
            a.value(2, data);
        }),
        Expr::Nat {
            dnat,
            family,
            addr_reg,
            port_reg,
        } => expr(list, "nat", |a| {
            a.be32(1, u32::from(*dnat)); // NFTA_NAT_TYPE: 0 snat, 1 dnat
            a.be32(2, u32::from(*family)); // NFTA_NAT_FAMILY
            a.be32(3, *addr_reg); // NFTA_NAT_REG_ADDR_MIN
            if let Some(p) = port_reg {
                a.be32(5, *p); // NFTA_NAT_REG_PROTO_MIN
            }
        }),
        Expr::Masquerade => expr(list, "masq", |_| {}),
        Expr::Fib { result, flags } => expr(list, "fib", |a| {
            a.be32(1, REG_1); // NFTA_FIB_DREG
            a.be32(2, *result); // NFTA_FIB_RESULT
            a.be32(3, *flags); // NFTA_FIB_FLAGS
        }),
        Expr::Ct { key } => expr(list, "ct", |a| {
            a.be32(1, REG_1); // NFTA_CT_DREG
            a.be32(2, *key); // NFTA_CT_KEY
        }),
        Expr::Counter => expr(list, "counter", |_| {}),
    }
}

/// A chain's hook: number, priority and type (`nat`, `filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    pub num: u32,
    pub priority: i32,
    pub kind: &'static str,
}

/// One message of a batch, without its netlink header.
#[derive(Debug, Clone)]
pub struct Msg {
    kind: u16,
    flags: u16,
    family: u8,
    attrs: Vec<u8>,
}

pub fn new_table(family: u8, table: &str) -> Msg {
    let mut a = Attrs::default();
    a.str(NFTA_TABLE_NAME, table);
    Msg {
        kind: NFT_MSG_NEWTABLE,
        flags: NLM_F_CREATE,
        family,
        attrs: a.0,
    }
}

/// Delete a table with its chains and rules (`ENOENT` if there is none:
/// send [`new_table`] first in the same batch to make it certain).
pub fn del_table(family: u8, table: &str) -> Msg {
    let mut a = Attrs::default();
    a.str(NFTA_TABLE_NAME, table);
    Msg {
        kind: NFT_MSG_DELTABLE,
        flags: 0,
        family,
        attrs: a.0,
    }
}

/// Create the chain, or leave it as it is when it exists with this hook.
pub fn new_chain(family: u8, table: &str, chain: &str, hook: Option<Hook>) -> Msg {
    let mut a = Attrs::default();
    a.str(NFTA_CHAIN_TABLE, table);
    a.str(NFTA_CHAIN_NAME, chain);
    if let Some(h) = hook {
        a.nest(NFTA_CHAIN_HOOK, |n| {
            n.be32(NFTA_HOOK_HOOKNUM, h.num);
            n.be32(NFTA_HOOK_PRIORITY, h.priority as u32);
        });
        a.be32(NFTA_CHAIN_POLICY, NF_ACCEPT as u32);
        a.str(NFTA_CHAIN_TYPE, h.kind);
    }
    Msg {
        kind: NFT_MSG_NEWCHAIN,
        flags: NLM_F_CREATE,
        family,
        attrs: a.0,
    }
}

/// Append a rule with a comment.
pub fn new_rule(family: u8, table: &str, chain: &str, exprs: &[Expr], comment: &str) -> Msg {
    let mut a = Attrs::default();
    a.str(NFTA_RULE_TABLE, table);
    a.str(NFTA_RULE_CHAIN, chain);
    a.nest(NFTA_RULE_EXPRESSIONS, |list| {
        for x in exprs {
            encode_expr(list, x);
        }
    });
    a.put(NFTA_RULE_USERDATA, &comment_udata(comment));
    Msg {
        kind: NFT_MSG_NEWRULE,
        flags: NLM_F_CREATE | NLM_F_APPEND,
        family,
        attrs: a.0,
    }
}

pub fn del_rule(family: u8, table: &str, chain: &str, handle: u64) -> Msg {
    let mut a = Attrs::default();
    a.str(NFTA_RULE_TABLE, table);
    a.str(NFTA_RULE_CHAIN, chain);
    a.be64(NFTA_RULE_HANDLE, handle);
    Msg {
        kind: NFT_MSG_DELRULE,
        flags: 0,
        family,
        attrs: a.0,
    }
}

/// libnftnl's user-data TLV: type, length, the comment with its NUL.
fn comment_udata(comment: &str) -> Vec<u8> {
    let bytes = comment.as_bytes();
    let len = (bytes.len() + 1).min(255);
    let mut v = vec![NFTNL_UDATA_RULE_COMMENT, len as u8];
    v.extend_from_slice(&bytes[..len - 1]);
    v.push(0);
    v
}

fn comment_of(udata: &[u8]) -> Option<String> {
    let mut rest = udata;
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if kind == NFTNL_UDATA_RULE_COMMENT {
            let text = value.split(|b| *b == 0).next().unwrap_or(value);
            return String::from_utf8(text.to_vec()).ok();
        }
        rest = &rest[2 + len..];
    }
    None
}

/// A rule as a dump reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    pub chain: String,
    pub handle: u64,
    pub comment: Option<String>,
}

/// Walk the attributes of `data`.
fn attrs(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([data[0], data[1]]) as usize;
        let kind = u16::from_ne_bytes([data[2], data[3]]) & 0x3fff;
        if len < 4 || len > data.len() {
            return None;
        }
        let value = &data[4..len];
        data = data.get((len + 3) & !3..).unwrap_or(&[]);
        Some((kind, value))
    })
}

fn cstr(v: &[u8]) -> String {
    let v = v.split(|b| *b == 0).next().unwrap_or(v);
    String::from_utf8_lossy(v).into_owned()
}

fn parse_rule(attrs_data: &[u8]) -> Option<RuleInfo> {
    let mut chain = None;
    let mut handle = None;
    let mut comment = None;
    for (kind, v) in attrs(attrs_data) {
        match kind {
            NFTA_RULE_CHAIN => chain = Some(cstr(v)),
            NFTA_RULE_HANDLE => handle = Some(u64::from_be_bytes(v.try_into().ok()?)),
            NFTA_RULE_USERDATA => comment = comment_of(v),
            _ => {}
        }
    }
    Some(RuleInfo {
        chain: chain?,
        handle: handle?,
        comment,
    })
}

/// A failed request: errno and the kernel's text for it.
#[derive(Debug, Clone, PartialEq)]
pub struct NfError {
    pub errno: i32,
    pub msg: String,
}

impl NfError {
    fn new(errno: i32, msg: impl Into<String>) -> Self {
        NfError {
            errno,
            msg: msg.into(),
        }
    }

    fn io(e: &io::Error) -> Self {
        NfError::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

/// A dump changed while it was read is retried this many times.
const DUMP_ATTEMPTS: usize = 5;

pub struct NfSocket {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

fn header(out: &mut Vec<u8>, len: usize, kind: u16, flags: u16, seq: u32) {
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
}

/// nfgenmsg: family, version 0, resource id (big endian).
fn genmsg(out: &mut Vec<u8>, family: u8, res_id: u16) {
    out.push(family);
    out.push(0);
    out.extend_from_slice(&res_id.to_be_bytes());
}

impl NfSocket {
    /// A socket in the calling thread's network namespace.
    pub fn new() -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_NETFILTER)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        Ok(NfSocket {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// The ruleset's generation, for [`NfSocket::batch`].
    pub fn generation(&mut self) -> Result<u32, NfError> {
        let seq = self.next_seq();
        let mut out = Vec::new();
        header(
            &mut out,
            20,
            (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
        );
        genmsg(&mut out, 0, 0);
        self.send(&out)?;
        let mut gen = None;
        self.receive(&[seq], |_, payload| {
            for (kind, v) in attrs(payload) {
                if kind == NFTA_GEN_ID {
                    gen = v.try_into().ok().map(u32::from_be_bytes);
                }
            }
        })?;
        gen.ok_or_else(|| NfError::new(libc::EPROTO, "nf_tables: no generation in reply"))
    }

    /// Every rule of `table` in `family`; `None` when the kernel says there
    /// is no such table (a dump may also answer a missing table with nothing).
    pub fn rules(&mut self, family: u8, table: &str) -> Result<Option<Vec<RuleInfo>>, NfError> {
        let mut last = NfError::new(libc::EINTR, "nf_tables dump interrupted");
        for _ in 0..DUMP_ATTEMPTS {
            match self.dump_rules(family, table) {
                Ok(r) => return Ok(Some(r)),
                Err(e) if e.errno == libc::ENOENT => return Ok(None),
                Err(e) if e.errno == libc::EINTR || e.errno == libc::ENOBUFS => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn dump_rules(&mut self, family: u8, table: &str) -> Result<Vec<RuleInfo>, NfError> {
        let seq = self.next_seq();
        let mut a = Attrs::default();
        a.str(NFTA_RULE_TABLE, table);
        let mut out = Vec::new();
        header(
            &mut out,
            20 + a.0.len(),
            (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE,
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
        );
        genmsg(&mut out, family, 0);
        out.extend_from_slice(&a.0);
        self.send(&out)?;
        let mut rules = Vec::new();
        self.receive(&[seq], |_, payload| {
            if let Some(r) = parse_rule(payload) {
                rules.push(r);
            }
        })?;
        Ok(rules)
    }

    /// Commit `msgs` as one transaction: all of them or none. With `genid`,
    /// the kernel refuses the batch ([`ERESTART`]) if the ruleset changed
    /// since that generation was read.
    pub fn batch(&mut self, msgs: &[Msg], genid: Option<u32>) -> Result<(), NfError> {
        let mut out = Vec::new();
        let begin = self.next_seq();
        let mut battrs = Attrs::default();
        if let Some(g) = genid {
            battrs.be32(NFNL_BATCH_GENID, g);
        }
        header(
            &mut out,
            20 + battrs.0.len(),
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
        );
        genmsg(&mut out, 0, NFNL_SUBSYS_NFTABLES);
        out.extend_from_slice(&battrs.0);
        let mut seqs = vec![begin];
        for m in msgs {
            let seq = self.next_seq();
            seqs.push(seq);
            header(
                &mut out,
                20 + m.attrs.len(),
                (NFNL_SUBSYS_NFTABLES << 8) | m.kind,
                NLM_F_REQUEST | NLM_F_ACK | m.flags,
                seq,
            );
            genmsg(&mut out, m.family, 0);
            out.extend_from_slice(&m.attrs);
        }
        let end = self.next_seq();
        header(&mut out, 20, NFNL_MSG_BATCH_END, NLM_F_REQUEST, end);
        genmsg(&mut out, 0, NFNL_SUBSYS_NFTABLES);
        self.send(&out)?;
        self.receive(&seqs, |_, _| {})
    }

    fn send(&mut self, out: &[u8]) -> Result<(), NfError> {
        self.sock
            .send(out, 0)
            .map(|_| ())
            .map_err(|e| NfError::io(&e))
    }

    /// Read replies until every sequence of `seqs` but the first is
    /// answered (a batch: the first is its begin, which is answered only
    /// when the whole batch is refused), or, for a single request, until it
    /// is acknowledged or its dump is done. The first error wins; reading goes on to the end so the next
    /// request starts on a quiet socket.
    fn receive(&mut self, seqs: &[u32], mut each: impl FnMut(u16, &[u8])) -> Result<(), NfError> {
        let Some(&first) = seqs.first() else {
            return Ok(());
        };
        let single = seqs.len() == 1;
        let mut pending: Vec<u32> = if single {
            vec![first]
        } else {
            seqs[1..].to_vec()
        };
        let mut failure: Option<NfError> = None;
        let mut interrupted = false;
        while !pending.is_empty() {
            let len = self.recv_datagram()?;
            let mut off = 0;
            while off + 16 <= len {
                let data = &self.buf[off..len];
                let msg_len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
                if msg_len < 16 || msg_len > data.len() {
                    return Err(NfError::new(libc::EBADMSG, "netlink: bad message length"));
                }
                let kind = u16::from_ne_bytes([data[4], data[5]]);
                let flags = u16::from_ne_bytes([data[6], data[7]]);
                let seq = u32::from_ne_bytes([data[8], data[9], data[10], data[11]]);
                let body = &data[16..msg_len];
                off += (msg_len + 3) & !3;
                if !seqs.contains(&seq) {
                    continue;
                }
                if flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match kind {
                    NLMSG_ERROR => {
                        let code = body
                            .get(..4)
                            .and_then(|b| b.try_into().ok())
                            .map(i32::from_ne_bytes)
                            .unwrap_or(-libc::EBADMSG);
                        if code != 0 {
                            let errno = code.saturating_abs();
                            let text = crate::net::ext_ack_text(flags, &body[4..])
                                .unwrap_or_else(|| io::Error::from_raw_os_error(errno).to_string());
                            failure.get_or_insert(NfError::new(errno, text));
                            if seq == first && !single {
                                // The batch was refused as a whole.
                                pending.clear();
                            }
                        }
                        pending.retain(|s| *s != seq);
                    }
                    NLMSG_DONE => {
                        if body.len() >= 4 {
                            let code = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                            if code < 0 {
                                failure.get_or_insert(NfError::new(
                                    -code,
                                    io::Error::from_raw_os_error(-code).to_string(),
                                ));
                            }
                        }
                        pending.retain(|s| *s != seq);
                    }
                    _ if body.len() >= 4 => each(kind & 0xff, &body[4..]),
                    _ => {}
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None if interrupted => Err(NfError::new(libc::EINTR, "nf_tables dump interrupted")),
            None => Ok(()),
        }
    }

    /// One datagram into `self.buf`; one larger than the buffer grows it and
    /// counts as lost (`ENOBUFS`, which a dump retries).
    fn recv_datagram(&mut self) -> Result<usize, NfError> {
        let len = self
            .sock
            .recv(&mut &mut self.buf[..], libc::MSG_TRUNC)
            .map_err(|e| NfError::io(&e))?;
        if len > self.buf.len() {
            self.buf.resize(len.next_power_of_two(), 0);
            return Err(NfError::new(libc::ENOBUFS, "netlink reply lost"));
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_through_user_data() {
        let u = comment_udata("wasm-cni abc 123 masq 10.0.0.1");
        assert_eq!(u[0], 0);
        assert_eq!(u[1] as usize, "wasm-cni abc 123 masq 10.0.0.1".len() + 1);
        assert_eq!(
            comment_of(&u).as_deref(),
            Some("wasm-cni abc 123 masq 10.0.0.1")
        );
        // Other user data first (nft's ebpf id, type 1), then the comment.
        let mut v = vec![1, 2, 9, 9];
        v.extend(&u);
        assert_eq!(
            comment_of(&v).as_deref(),
            Some("wasm-cni abc 123 masq 10.0.0.1")
        );
        assert_eq!(comment_of(&[0, 40, b'x']), None);
        assert_eq!(comment_of(&[]), None);
    }

    #[test]
    fn attribute_walk_stops_at_garbage() {
        let mut a = Attrs::default();
        a.str(NFTA_RULE_CHAIN, "forward");
        a.be64(NFTA_RULE_HANDLE, 7);
        let r = parse_rule(&a.0).unwrap();
        assert_eq!(
            (r.chain.as_str(), r.handle, r.comment),
            ("forward", 7, None)
        );
        let mut bad = a.0.clone();
        bad.extend_from_slice(&[200, 0, 1, 0]);
        assert_eq!(attrs(&bad).count(), 2);
        assert_eq!(parse_rule(&[1, 0]), None);
    }
}
