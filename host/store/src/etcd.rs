//! Scopes in etcd, shared by every node of a cluster.
//!
//! Layout under the configured prefix `P`:
//!
//! * `P/scopes/<network>/<plugin>/entries/<key>`: one entry (JSON, with the
//!   node that allocated it);
//! * `P/scopes/<network>/<plugin>/values/<node>/<name>`: the named values,
//!   per node: a value is a plugin's cursor or setting (host-local's last
//!   reserved address), and a cursor shared by all nodes would be a key
//!   every allocation in the cluster writes.
//!
//! A transaction reads both ranges at one revision, lets the plugin work on
//! that snapshot, and commits in one etcd transaction that compares every
//! key it writes with its revision as read (or its absence). Two nodes
//! taking different addresses never wait for each other; two taking the same
//! one conflict on that key, and the loser's whole plugin call is run again
//! on a fresh snapshot ([`StoreError::Conflict`], retried by the sandbox within the
//! call's deadline). Within one node the scope is also locked (flock under
//! the local state directory), so a node's own concurrent calls queue as
//! with the local store instead of conflicting.
//!
//! A transaction never releases or removes a live entry another node
//! allocated: GC (or a DEL) on one node leaves other nodes' attachments
//! alone, whatever the plugin decided. Quarantine uses the entries'
//! `releasedAt` as written by the releasing node: nodes' clocks must agree
//! (NTP) to well within `reuseIPWait`.
//!
//! Every etcd request is bounded by `timeoutMs` and by the call's deadline;
//! past either, or with etcd unreachable, the call fails with
//! [`StoreError::Unavailable`]
//! (CNI code 11) and nothing is written: an etcd transaction applies whole
//! or not at all.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions,
    Txn as EtcdTxn, TxnOp, TxnOpResponse,
};
use serde::Deserialize;

use ipnet::IpNet;

use super::{lock_failed, Entry, Scope, ScopeData, StateStore, StoreError, StoreResult, Txn};
use wasm_cni_base::fsutil::{lock_gated, open_lock_file, Locked};

/// The `store` object of a wasm-cni config with `"type": "etcd"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub endpoints: Vec<String>,
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Bound on each etcd request (and on connecting).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// This node's name in the cluster store (default: the hostname).
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
}

/// PEM files for TLS to etcd: the CA to trust, and a client certificate
/// and key when etcd asks for one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsConfig {
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name to verify the server's certificate against (default: the
    /// endpoint's host).
    #[serde(default)]
    pub server_name: Option<String>,
}

fn default_prefix() -> String {
    "/wasm-cni".into()
}

fn default_timeout_ms() -> u64 {
    2000
}

impl EtcdConfig {
    /// Parses and checks a `store` object; the message says what is wrong.
    pub fn from_value(v: &serde_json::Value) -> Result<Self, String> {
        let c: EtcdConfig = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        if c.kind != "etcd" {
            return Err(format!("type {:?} is not a store type (\"etcd\")", c.kind));
        }
        if c.endpoints.is_empty() {
            return Err("endpoints: at least one is needed".into());
        }
        if let Some(bad) = c
            .endpoints
            .iter()
            .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
        {
            return Err(format!(
                "endpoints: {bad:?} is not an http:// or https:// URL"
            ));
        }
        if !c.prefix.starts_with('/') || c.prefix.len() > 128 {
            return Err(format!(
                "prefix {:?} must start with '/' (128 bytes at most)",
                c.prefix
            ));
        }
        if c.timeout_ms == 0 || c.timeout_ms > 60_000 {
            return Err(format!("timeoutMs {} is not in 1..=60000", c.timeout_ms));
        }
        if let Some(n) = &c.node {
            if !valid_node(n) {
                return Err(format!("node {n:?}: letters, digits, '.', '-', '_' only"));
            }
        }
        if c.username.is_some() != c.password.is_some() {
            return Err("username and password go together".into());
        }
        Ok(c)
    }

    /// The node name: configured, else the hostname.
    pub fn node_name(&self) -> io::Result<String> {
        if let Some(n) = &self.node {
            return Ok(n.clone());
        }
        let name = fs::read_to_string("/proc/sys/kernel/hostname")?
            .trim()
            .to_string();
        if valid_node(&name) {
            Ok(name)
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the hostname {name:?} is no node name; set the store's \"node\""),
            ))
        }
    }
}

fn valid_node(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The largest reply the client reads (a scope's three ranges at once).
pub const MAX_REPLY_BYTES: usize = 64 << 20;
/// What a scope may hold in etcd, keys and values with their per-key
/// overhead counted, so that it always reads back within
/// [`MAX_REPLY_BYTES`]: a commit past it is refused for good, never left to
/// fail every later read.
pub const MAX_SCOPE_STORED_BYTES: usize = 48 << 20;
/// What etcd adds to a key and its value in a range reply (revisions,
/// version, lease, framing), rounded up.
const KV_OVERHEAD: usize = 48;

/// The reply size one key and value count for.
fn stored(key: &str, value: usize) -> usize {
    key.len() + value + KV_OVERHEAD
}

/// An etcd failure as the host reports it: out of reach, too slow, a leader
/// change, an overloaded member ([`StoreError::Unavailable`], "try again
/// later"); else
/// permanent (a reply over the limit, a request etcd finds too large, bad
/// credentials, no permission), which retrying cannot mend.
fn failure(e: etcd_client::Error) -> StoreError {
    use etcd_client::Error as E;
    // gRPC status codes: CANCELLED 1, UNKNOWN 2, DEADLINE_EXCEEDED 4,
    // RESOURCE_EXHAUSTED 8, ABORTED 10, INTERNAL 13, UNAVAILABLE 14.
    let transient = match &e {
        E::GRpcStatus(s) => matches!(s.code() as i32, 1 | 2 | 4 | 8 | 10 | 13 | 14),
        E::TransportError(_) | E::IoError(_) => true,
        _ => false,
    };
    if transient {
        StoreError::Unavailable(format!("etcd: {e}"))
    } else {
        io::Error::other(format!("etcd: {e}")).into()
    }
}

pub struct EtcdStore {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    conf: EtcdConfig,
    node: String,
    /// Where this node's per-scope lock files live (tmpfs).
    lock_root: PathBuf,
    rt: tokio::runtime::Runtime,
    /// Connected on first use and kept (the daemon reuses it across calls).
    client: Mutex<Option<Client>>,
}

/// Revisions as read: what the commit compares against (0: absent).
type Revisions = BTreeMap<String, i64>;

/// Addresses are grouped in blocks (calico's block affinity): the first
/// node to allocate in a block claims it, and a transaction tells the
/// plugin which blocks other nodes claimed (`Txn::others_blocks`), so an
/// allocator that takes from those last keeps nodes side by side instead
/// of racing for the same next address. Every address stays allocatable
/// by every node: a node whose own blocks and the free ones are full
/// borrows from others'. A claim goes when its block holds nothing live.
const V4_BLOCK: u8 = 26;
const V6_BLOCK: u8 = 122;

/// The block a key belongs to, if it is an address: `10.1.2.64_26`.
pub fn block_of(key: &str) -> Option<String> {
    let ip: IpAddr = key.parse().ok()?;
    let len = if ip.is_ipv4() { V4_BLOCK } else { V6_BLOCK };
    let net = IpNet::new(ip, len).ok()?.trunc();
    Some(format!("{}_{}", net.addr(), len))
}

/// A block's name as a CIDR (`10.1.2.64_26` → `10.1.2.64/26`), if it
/// names a block: a network address with its family's block length.
/// Another writer of etcd chose the name, so anything else is no block.
pub fn block_cidr(block: &str) -> Option<String> {
    let (addr, len) = block.split_once('_')?;
    let (addr, len) = (addr.parse::<IpAddr>().ok()?, len.parse::<u8>().ok()?);
    let want = if addr.is_ipv4() { V4_BLOCK } else { V6_BLOCK };
    let net = IpNet::new(addr, len).ok()?;
    (len == want && net.trunc().addr() == addr).then(|| net.to_string())
}

/// A scope as read from etcd at one revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub data: ScopeData,
    /// Full key → mod revision of everything read.
    pub revisions: Revisions,
    /// Block → the node that claimed it.
    pub blocks: BTreeMap<String, String>,
    /// Full key → what it counts for in a reply ([`stored`]), for every key
    /// read.
    pub sizes: BTreeMap<String, usize>,
}

impl Snapshot {
    /// What the scope would count for in a reply once `writes` are made.
    pub fn stored_after(&self, writes: &[Write]) -> usize {
        let mut total: usize = self.sizes.values().sum();
        for w in writes {
            total = total.saturating_sub(self.sizes.get(&w.key).copied().unwrap_or(0));
            if let Some(v) = &w.value {
                total += stored(&w.key, v.len());
            }
        }
        total
    }
}

/// The key prefixes of one scope (entries, this node's values, blocks).
#[derive(Debug, Clone)]
pub struct Prefixes {
    pub entries: String,
    pub values: String,
    pub blocks: String,
}

/// Builds a snapshot from the keys and values of the three ranges (`range`
/// 0 entries, 1 values, 2 blocks); a value that does not decode is an
/// error naming its key, never a panic.
pub fn parse_snapshot(
    p: &Prefixes,
    kvs: impl IntoIterator<Item = (usize, Vec<u8>, Vec<u8>, i64)>,
) -> io::Result<Snapshot> {
    let mut snap = Snapshot::default();
    for (range, key, value, rev) in kvs {
        let key = String::from_utf8(key).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a key is not UTF-8: {e}"),
            )
        })?;
        let bad =
            |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{key}: {what}"));
        snap.sizes.insert(key.clone(), stored(&key, value.len()));
        let value = String::from_utf8(value).map_err(|e| bad(e.to_string()))?;
        let prefix = match range {
            0 => &p.entries,
            1 => &p.values,
            _ => &p.blocks,
        };
        let Some(name) = key.strip_prefix(prefix.as_str()) else {
            continue;
        };
        if !super::valid_key(name) {
            return Err(bad("not a key this store writes".into()));
        }
        match range {
            0 => {
                let entry: Entry = serde_json::from_str(&value).map_err(|e| bad(e.to_string()))?;
                snap.data.entries.insert(name.to_string(), entry);
            }
            1 => {
                snap.data.values.insert(name.to_string(), value);
            }
            _ => {
                if !valid_node(&value) {
                    return Err(bad(format!("{value:?} is not a node name")));
                }
                snap.blocks.insert(name.to_string(), value);
            }
        }
        snap.revisions.insert(key, rev);
    }
    Ok(snap)
}

/// The blocks other nodes than `node` claimed, as CIDRs: where its
/// allocator should look last.
pub fn others_blocks(snap: &Snapshot, node: &str) -> Vec<String> {
    snap.blocks
        .iter()
        .filter(|(_, owner)| *owner != node)
        .filter_map(|(block, _)| block_cidr(block))
        .collect()
}

/// One key a commit writes: only if its revision is still `expect` (0: it
/// must not exist); `value` none deletes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub key: String,
    pub expect: i64,
    pub value: Option<Vec<u8>>,
}

/// What committing `data` (the plugin's changes to `snap`) writes for
/// `node`:
///
/// * entries and this node's values that changed, each guarded by its
///   revision as read;
/// * never a change to another node's live entry that releases it, deletes
///   it or gives it another owner (GC here knows only this node's
///   attachments);
/// * a claim for each unclaimed block this node allocates in, and the end
///   of this node's claims on blocks left with nothing live.
pub fn plan(p: &Prefixes, snap: &Snapshot, data: &ScopeData, node: &str) -> io::Result<Vec<Write>> {
    let guard = |key: String, value: Option<Vec<u8>>| Write {
        expect: snap.revisions.get(&key).copied().unwrap_or(0),
        key,
        value,
    };
    let mut writes = Vec::new();
    let mut claims: BTreeSet<String> = BTreeSet::new();
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let keys: BTreeSet<&String> = snap
        .data
        .entries
        .keys()
        .chain(data.entries.keys())
        .collect();
    for k in keys {
        let (old, new) = (snap.data.entries.get(k), data.entries.get(k));
        if old == new {
            continue;
        }
        if let Some(o) = old.filter(|o| o.is_live() && o.node.as_deref() != Some(node)) {
            if new.is_none_or(|n| !n.is_live() || n.owner != o.owner) {
                continue;
            }
        }
        let block = block_of(k);
        if let Some(b) = &block {
            touched.insert(b.clone());
        }
        match new {
            Some(n) => {
                let mut n = n.clone();
                let fresh =
                    old.is_none_or(|o| o.allocated_at != n.allocated_at || o.owner != n.owner);
                if fresh {
                    n.node = Some(node.to_string());
                }
                if let (true, true, Some(b)) = (fresh, n.is_live(), &block) {
                    if !snap.blocks.contains_key(b) {
                        claims.insert(b.clone());
                    }
                }
                let json = serde_json::to_vec(&n).map_err(io::Error::other)?;
                writes.push(guard(format!("{}{k}", p.entries), Some(json)));
            }
            None => writes.push(guard(format!("{}{k}", p.entries), None)),
        }
    }
    for b in &claims {
        writes.push(guard(
            format!("{}{b}", p.blocks),
            Some(node.as_bytes().to_vec()),
        ));
    }
    // A claim of ours on a block this call changed and left empty ends.
    for b in touched.difference(&claims) {
        if snap.blocks.get(b).map(String::as_str) != Some(node) {
            continue;
        }
        let live = data
            .entries
            .iter()
            .any(|(k, e)| e.is_live() && block_of(k).as_ref() == Some(b));
        if !live {
            writes.push(guard(format!("{}{b}", p.blocks), None));
        }
    }
    let names: BTreeSet<&String> = snap.data.values.keys().chain(data.values.keys()).collect();
    for name in names {
        let (old, new) = (snap.data.values.get(name), data.values.get(name));
        if old != new {
            writes.push(guard(
                format!("{}{name}", p.values),
                new.map(|v| v.clone().into_bytes()),
            ));
        }
    }
    Ok(writes)
}

struct EtcdTxnState {
    store: std::sync::Arc<Inner>,
    scope: Scope,
    snap: Snapshot,
    data: ScopeData,
    deadline: Option<Instant>,
    _lock: Locked,
}

impl EtcdStore {
    pub fn new(conf: EtcdConfig, lock_root: PathBuf) -> io::Result<Self> {
        let node = conf.node_name()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wasm-cni-etcd")
            .enable_all()
            .build()?;
        Ok(EtcdStore {
            inner: std::sync::Arc::new(Inner {
                conf,
                node,
                lock_root,
                rt,
                client: Mutex::new(None),
            }),
        })
    }
}

impl Inner {
    fn scope_prefix(&self, scope: &Scope) -> String {
        format!(
            "{}/scopes/{}/{}/",
            self.conf.prefix.trim_end_matches('/'),
            scope.network,
            scope.plugin
        )
    }

    fn entries_prefix(&self, scope: &Scope) -> String {
        format!("{}entries/", self.scope_prefix(scope))
    }

    fn values_prefix(&self, scope: &Scope) -> String {
        format!("{}values/{}/", self.scope_prefix(scope), self.node)
    }

    /// How long the next request may take: the configured bound, cut to
    /// what is left of `deadline`.
    fn budget(&self, deadline: Option<Instant>) -> StoreResult<Duration> {
        let bound = Duration::from_millis(self.conf.timeout_ms);
        let left = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(bound),
            None => bound,
        };
        if left.is_zero() {
            return Err(StoreError::Unavailable(
                "no time left for etcd before the deadline".into(),
            ));
        }
        Ok(left)
    }

    fn connect_options(&self, timeout: Duration) -> io::Result<ConnectOptions> {
        let mut o = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(Duration::from_millis(self.conf.timeout_ms));
        if let (Some(u), Some(p)) = (&self.conf.username, &self.conf.password) {
            o = o.with_user(u.clone(), p.clone());
        }
        if let Some(t) = &self.conf.tls {
            let read = |p: &PathBuf| {
                fs::read(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
            };
            let mut tls = TlsOptions::new();
            if let Some(ca) = &t.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            match (&t.cert_file, &t.key_file) {
                (Some(c), Some(k)) => tls = tls.identity(Identity::from_pem(read(c)?, read(k)?)),
                (None, None) => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "tls: certFile and keyFile go together",
                    ))
                }
            }
            if let Some(n) = &t.server_name {
                tls = tls.domain_name(n.clone());
            }
            o = o.with_tls(tls);
        }
        Ok(o)
    }

    /// The connected client, connecting first if need be, within `deadline`.
    fn client(&self, deadline: Option<Instant>) -> StoreResult<Client> {
        if let Ok(g) = self.client.lock() {
            if let Some(c) = g.as_ref() {
                return Ok(c.clone());
            }
        }
        let timeout = self.budget(deadline)?;
        let options = self.connect_options(timeout)?;
        let endpoints = self.conf.endpoints.clone();
        let connected = self.rt.block_on(async {
            tokio::time::timeout(timeout, Client::connect(endpoints, Some(options))).await
        });
        let client = match connected {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(StoreError::Unavailable(format!("etcd: {e}"))),
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "etcd: no connection within {} ms",
                    timeout.as_millis()
                )))
            }
        };
        if let Ok(mut g) = self.client.lock() {
            *g = Some(client.clone());
        }
        Ok(client)
    }

    /// Run one etcd transaction within the budget.
    fn run(
        &self,
        txn: EtcdTxn,
        deadline: Option<Instant>,
    ) -> StoreResult<etcd_client::TxnResponse> {
        let client = self.client(deadline)?;
        let timeout = self.budget(deadline)?;
        // tonic's default (4 MiB) is below what a scope may hold.
        let mut kv = client
            .kv_client()
            .max_decoding_message_size(MAX_REPLY_BYTES);
        let out = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, kv.txn(txn)).await });
        match out {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(failure(e)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "etcd: no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    fn prefixes(&self, scope: &Scope) -> Prefixes {
        Prefixes {
            entries: self.entries_prefix(scope),
            values: self.values_prefix(scope),
            blocks: format!("{}blocks/", self.scope_prefix(scope)),
        }
    }

    /// The scope's three ranges at one revision. Serializable: the member
    /// answers from what it has, without a round of consensus first; a
    /// stale snapshot cannot do harm, since the commit compares every key
    /// it writes with the revision read (stale means a conflict, and the
    /// call runs again).
    fn read(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Snapshot> {
        let p = self.prefixes(scope);
        let get = |prefix: &str| {
            TxnOp::get(
                prefix.to_string(),
                Some(GetOptions::new().with_prefix().with_serializable()),
            )
        };
        let txn = EtcdTxn::new().and_then(vec![get(&p.entries), get(&p.values), get(&p.blocks)]);
        let resp = self.run(txn, deadline)?;
        let mut kvs = Vec::new();
        for (i, op) in resp.op_responses().into_iter().enumerate() {
            if let TxnOpResponse::Get(get) = op {
                kvs.extend(
                    get.kvs()
                        .iter()
                        .map(|kv| (i, kv.key().to_vec(), kv.value().to_vec(), kv.mod_revision())),
                );
            }
        }
        Ok(parse_snapshot(&p, kvs)?)
    }

    fn lock(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Locked> {
        let path = self
            .lock_root
            .join(&scope.network)
            .join(format!("{}.lock", scope.plugin));
        let lock = open_lock_file(&path)?;
        lock_gated(lock, deadline).map_err(|e| lock_failed(scope, e))
    }
}

impl Txn for EtcdTxnState {
    fn data(&mut self) -> &mut ScopeData {
        &mut self.data
    }

    fn others_blocks(&self) -> Vec<String> {
        others_blocks(&self.snap, &self.store.node)
    }

    fn commit(self: Box<Self>) -> StoreResult<()> {
        let store = &*self.store;
        let p = store.prefixes(&self.scope);
        let writes = plan(&p, &self.snap, &self.data, &store.node)?;
        if writes.is_empty() {
            return Ok(());
        }
        let after = self.snap.stored_after(&writes);
        if after > MAX_SCOPE_STORED_BYTES {
            return Err(StoreError::Quota(format!(
                "{}/{}: the scope would hold {after} bytes in etcd, over the limit of {MAX_SCOPE_STORED_BYTES} (every read of it must fit a reply of {MAX_REPLY_BYTES})",
                self.scope.network, self.scope.plugin
            )));
        }
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        for w in writes {
            compares.push(if w.expect == 0 {
                Compare::create_revision(w.key.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(w.key.clone(), CompareOp::Equal, w.expect)
            });
            ops.push(match w.value {
                Some(v) => TxnOp::put(w.key, v, None),
                None => TxnOp::delete(w.key, None),
            });
        }
        let txn = EtcdTxn::new().when(compares).and_then(ops);
        let resp = store.run(txn, self.deadline)?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!(
                "{}/{}: another node changed what this call read",
                self.scope.network, self.scope.plugin
            )))
        }
    }
}

impl StateStore for EtcdStore {
    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Box<dyn Txn>> {
        let inner = &self.inner;
        // Connected before the node's lock is taken: the locked stretch is
        // the read, the plugin and the commit, not a handshake.
        inner.client(deadline)?;
        let lock = inner.lock(scope, deadline)?;
        let snap = inner.read(scope, deadline)?;
        let data = snap.data.clone();
        Ok(Box::new(EtcdTxnState {
            store: self.inner.clone(),
            scope: scope.clone(),
            snap,
            data,
            deadline,
            _lock: lock,
        }))
    }

    fn scopes(&self, network: &str) -> StoreResult<Vec<String>> {
        self.inner.children(&format!("scopes/{network}/"))
    }

    fn networks(&self) -> StoreResult<Vec<String>> {
        self.inner.children("scopes/")
    }

    fn ready(&self, deadline: Option<Instant>) -> StoreResult<()> {
        // A count of at most one key: a round trip that reads nothing,
        // whatever the cluster holds. Linearizable (unlike the scope reads):
        // a member cut off from the quorum still serves serializable reads,
        // but no commit would succeed through it.
        let key = format!("{}/", self.inner.conf.prefix.trim_end_matches('/'));
        let txn = EtcdTxn::new().and_then(vec![TxnOp::get(
            key,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_limit(1),
            ),
        )]);
        self.inner.run(txn, deadline).map(drop)
    }
}

impl Inner {
    /// The distinct first path segments of the keys under `P/<under>`, in
    /// key order (etcd returns keys sorted): networks, or a network's
    /// plugin scopes.
    fn children(&self, under: &str) -> StoreResult<Vec<String>> {
        let prefix = format!("{}/{under}", self.conf.prefix.trim_end_matches('/'));
        let txn = EtcdTxn::new().and_then(vec![TxnOp::get(
            prefix.clone(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )]);
        let resp = self.run(txn, None)?;
        let mut out: Vec<String> = Vec::new();
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                for kv in get.kvs() {
                    let key = String::from_utf8_lossy(kv.key());
                    let Some(child) = key.strip_prefix(&prefix).and_then(|k| k.split('/').next())
                    else {
                        continue;
                    };
                    if out.last().map(String::as_str) != Some(child) {
                        out.push(child.to_string());
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_is_checked() {
        let ok = EtcdConfig::from_value(
            &json!({"type": "etcd", "endpoints": ["http://127.0.0.1:2379"]}),
        )
        .unwrap();
        assert_eq!((ok.prefix.as_str(), ok.timeout_ms), ("/wasm-cni", 2000));
        for (v, msg) in [
            (json!({"type": "etcd", "endpoints": []}), "at least one"),
            (
                json!({"type": "etcd", "endpoints": ["127.0.0.1:2379"]}),
                "not an http",
            ),
            (
                json!({"type": "etcd", "endpoints": ["http://a"], "prefix": "x"}),
                "must start with '/'",
            ),
            (
                json!({"type": "etcd", "endpoints": ["http://a"], "timeoutMs": 0}),
                "timeoutMs 0",
            ),
            (
                json!({"type": "etcd", "endpoints": ["http://a"], "node": "a/b"}),
                "node \"a/b\"",
            ),
            (
                json!({"type": "etcd", "endpoints": ["http://a"], "username": "u"}),
                "go together",
            ),
            (
                json!({"type": "etcd", "endpoints": ["http://a"], "endpoint": "x"}),
                "unknown field",
            ),
            (
                json!({"type": "consul", "endpoints": ["http://a"]}),
                "not a store type",
            ),
        ] {
            let e = EtcdConfig::from_value(&v).unwrap_err();
            assert!(e.contains(msg), "{v}: {e}");
        }
    }

    fn prefixes() -> Prefixes {
        Prefixes {
            entries: "/p/e/".into(),
            values: "/p/v/n0/".into(),
            blocks: "/p/b/".into(),
        }
    }

    fn entry(c: &str, node: &str, released: Option<u64>) -> Entry {
        Entry {
            owner: super::super::Owner {
                container_id: c.into(),
                ifname: "eth0".into(),
            },
            allocated_at: 1,
            released_at: released,
            node: Some(node.into()),
        }
    }

    fn kv(range: usize, key: &str, value: &[u8], rev: i64) -> (usize, Vec<u8>, Vec<u8>, i64) {
        (range, key.as_bytes().to_vec(), value.to_vec(), rev)
    }

    #[test]
    fn blocks_are_26s_and_122s() {
        assert_eq!(block_of("10.1.2.77").as_deref(), Some("10.1.2.64_26"));
        assert_eq!(block_of("fd00::1:7f").as_deref(), Some("fd00::1:40_122"));
        assert_eq!(block_of("last_reserved_ip.0"), None);
        assert_eq!(block_cidr("10.1.2.64_26").as_deref(), Some("10.1.2.64/26"));
        assert_eq!(
            block_cidr("fd00::1:40_122").as_deref(),
            Some("fd00::1:40/122")
        );
        for not_a_block in [
            "10.1.2.64_24",
            "10.1.2.65_26",
            "10.1.2.64",
            "10.1.2.64_26_26",
            "fd00::1:40_26",
            "junk",
            "",
        ] {
            assert_eq!(block_cidr(not_a_block), None, "{not_a_block}");
        }
    }

    #[test]
    fn what_etcd_holds_is_parsed_or_refused_by_key() {
        let p = prefixes();
        let e = serde_json::to_vec(&entry("a", "n1", None)).unwrap();
        let snap = parse_snapshot(
            &p,
            vec![
                kv(0, "/p/e/10.0.0.2", &e, 7),
                kv(1, "/p/v/n0/last_reserved_ip.0", b"10.0.0.2", 8),
                kv(2, "/p/b/10.0.0.0_26", b"n1", 9),
                // Outside the prefix: not this scope's, skipped.
                kv(0, "/q/e/10.0.0.3", &e, 10),
            ],
        )
        .unwrap();
        assert_eq!(snap.data.entries["10.0.0.2"].owner.container_id, "a");
        assert_eq!(snap.data.values["last_reserved_ip.0"], "10.0.0.2");
        assert_eq!(snap.blocks["10.0.0.0_26"], "n1");
        assert_eq!(snap.revisions.len(), 3);
        for (bad, what) in [
            (kv(0, "/p/e/10.0.0.2", b"{not json", 1), "/p/e/10.0.0.2"),
            (kv(0, "/p/e/a b", &e, 1), "not a key this store writes"),
            (kv(2, "/p/b/10.0.0.0_26", b"no/de", 1), "not a node name"),
            (kv(1, "/p/v/n0/x", &[0xff, 0xfe], 1), "/p/v/n0/x"),
            ((0, vec![0xff], e.clone(), 1), "not UTF-8"),
        ] {
            let err = parse_snapshot(&p, vec![bad]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains(what), "{err}");
        }
    }

    #[test]
    fn a_commit_claims_the_block_this_node_allocates_in_first() {
        let p = prefixes();
        let mut snap = Snapshot::default();
        snap.blocks.insert("10.0.0.0_26".into(), "n1".into());
        snap.revisions.insert("/p/b/10.0.0.0_26".into(), 3);
        snap.data
            .entries
            .insert("10.0.0.5".into(), entry("b", "n1", None));
        snap.revisions.insert("/p/e/10.0.0.5".into(), 4);
        snap.blocks.insert("10.0.0.128_26".into(), "n0".into());
        snap.blocks.insert("junk".into(), "n2".into());
        assert_eq!(others_blocks(&snap, "n0"), ["10.0.0.0/26"]);
        assert_eq!(others_blocks(&snap, "n1"), ["10.0.0.128/26"]);
        let mut data = snap.data.clone();
        // n0 allocates in the next block: an entry and a claim, both new.
        data.entries
            .insert("10.0.0.70".into(), entry("c", "n0", None));
        // And borrows from n1's block: an entry, no claim.
        data.entries
            .insert("10.0.0.9".into(), entry("d", "n0", None));
        let w = plan(&p, &snap, &data, "n0").unwrap();
        let keys: Vec<(&str, i64, bool)> = w
            .iter()
            .map(|w| (w.key.as_str(), w.expect, w.value.is_some()))
            .collect();
        assert_eq!(
            keys,
            [
                ("/p/e/10.0.0.70", 0, true),
                ("/p/e/10.0.0.9", 0, true),
                ("/p/b/10.0.0.64_26", 0, true)
            ]
        );
        // Nothing changed: nothing written.
        assert!(plan(&p, &snap, &snap.data.clone(), "n0")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_commit_never_takes_another_nodes_live_entry_and_ends_empty_claims() {
        let p = prefixes();
        let mut snap = Snapshot::default();
        snap.data
            .entries
            .insert("10.0.0.2".into(), entry("a", "n0", None));
        snap.data
            .entries
            .insert("10.0.0.100".into(), entry("b", "n1", None));
        snap.data
            .entries
            .insert("10.0.0.101".into(), entry("c", "n1", Some(5)));
        snap.blocks.insert("10.0.0.0_26".into(), "n0".into());
        snap.blocks.insert("10.0.0.64_26".into(), "n1".into());
        for (k, r) in [
            ("/p/e/10.0.0.2", 11),
            ("/p/e/10.0.0.100", 12),
            ("/p/e/10.0.0.101", 13),
            ("/p/b/10.0.0.0_26", 14),
            ("/p/b/10.0.0.64_26", 15),
        ] {
            snap.revisions.insert(k.into(), r);
        }
        // GC that knows no valid attachment releases everything; the
        // quarantined entry of n1 is reused.
        let mut data = snap.data.clone();
        for e in data.entries.values_mut() {
            e.released_at.get_or_insert(9);
        }
        data.entries
            .insert("10.0.0.101".into(), entry("d", "n0", None));
        let w = plan(&p, &snap, &data, "n0").unwrap();
        let keys: Vec<(&str, i64, bool)> = w
            .iter()
            .map(|w| (w.key.as_str(), w.expect, w.value.is_some()))
            .collect();
        assert_eq!(
            keys,
            [
                ("/p/e/10.0.0.101", 13, true),
                ("/p/e/10.0.0.2", 11, true),
                // n0's block is left with nothing live: its claim ends.
                ("/p/b/10.0.0.0_26", 14, false),
            ],
            "n1's live 10.0.0.100 untouched"
        );
        let reused: Entry = serde_json::from_slice(w[0].value.as_ref().unwrap()).unwrap();
        assert_eq!(reused.node.as_deref(), Some("n0"));
    }

    #[test]
    fn an_unreachable_etcd_is_unavailable_within_the_timeout() {
        // A port nothing listens on (connection refused) and an address
        // that drops packets both end within timeoutMs.
        let conf = EtcdConfig::from_value(&json!({"type": "etcd",
            "endpoints": ["http://127.0.0.1:9"], "timeoutMs": 300, "node": "n1"}))
        .unwrap();
        let dir = std::env::temp_dir().join(format!("wasm-cni-etcd-unit-{}", std::process::id()));
        let store = EtcdStore::new(conf, dir.clone()).unwrap();
        let scope = Scope {
            network: "n".into(),
            plugin: "host-local".into(),
            data_dir: None,
        };
        let started = Instant::now();
        let e = store
            .begin_by(&scope, Some(Instant::now() + Duration::from_secs(5)))
            .err()
            .unwrap();
        assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(2000),
            "{:?}",
            started.elapsed()
        );
        let _ = fs::remove_dir_all(dir);
    }
}
