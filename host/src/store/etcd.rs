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
//! on a fresh snapshot ([`Conflict`], retried by the sandbox within the
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
//! past either, or with etcd unreachable, the call fails with [`Unavailable`]
//! (CNI code 11) and nothing is written: an etcd transaction applies whole
//! or not at all.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions,
    Txn as EtcdTxn, TxnOp, TxnOpResponse,
};
use serde::Deserialize;

use super::{Entry, Scope, ScopeData, StateStore, Txn};
use crate::fsutil::lock_exclusive;

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

/// The store could not be reached in time: the runtime should retry later
/// (CNI code 11). Nothing was written.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unavailable {}

/// Another node changed a key this transaction read and wrote: nothing was
/// written, and the call may be run again on a fresh snapshot.
#[derive(Debug)]
pub struct Conflict(pub String);

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Conflict {}

/// Whether `e` is a [`Conflict`].
pub fn is_conflict(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Conflict>())
}

/// Whether `e` is an [`Unavailable`].
pub fn is_unavailable(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Unavailable>())
}

fn unavailable(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, Unavailable(msg))
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

struct EtcdTxnState {
    store: std::sync::Arc<Inner>,
    scope: Scope,
    read: ScopeData,
    revisions: Revisions,
    data: ScopeData,
    deadline: Option<Instant>,
    _lock: File,
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

    pub fn node(&self) -> &str {
        &self.inner.node
    }

    pub fn config(&self) -> &EtcdConfig {
        &self.inner.conf
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
    fn budget(&self, deadline: Option<Instant>) -> io::Result<Duration> {
        let bound = Duration::from_millis(self.conf.timeout_ms);
        let left = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(bound),
            None => bound,
        };
        if left.is_zero() {
            return Err(unavailable(
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
    fn client(&self, deadline: Option<Instant>) -> io::Result<Client> {
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
            Ok(Err(e)) => return Err(unavailable(format!("etcd: {e}"))),
            Err(_) => {
                return Err(unavailable(format!(
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
    fn run(&self, txn: EtcdTxn, deadline: Option<Instant>) -> io::Result<etcd_client::TxnResponse> {
        let mut client = self.client(deadline)?;
        let timeout = self.budget(deadline)?;
        let out = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, client.txn(txn)).await });
        match out {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(unavailable(format!("etcd: {e}"))),
            Err(_) => Err(unavailable(format!(
                "etcd: no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// Both ranges of `scope` at one revision: the data and the revision
    /// of every key read.
    fn read(&self, scope: &Scope, deadline: Option<Instant>) -> io::Result<(ScopeData, Revisions)> {
        let (ep, vp) = (self.entries_prefix(scope), self.values_prefix(scope));
        let txn = EtcdTxn::new().and_then(vec![
            TxnOp::get(ep.clone(), Some(GetOptions::new().with_prefix())),
            TxnOp::get(vp.clone(), Some(GetOptions::new().with_prefix())),
        ]);
        let resp = self.run(txn, deadline)?;
        let mut data = ScopeData::default();
        let mut revisions = Revisions::new();
        for (i, op) in resp.op_responses().into_iter().enumerate() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            for kv in get.kvs() {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                revisions.insert(key.clone(), kv.mod_revision());
                if i == 0 {
                    let Some(name) = key.strip_prefix(&ep) else {
                        continue;
                    };
                    let entry: Entry = serde_json::from_slice(kv.value()).map_err(|e| {
                        io::Error::new(io::ErrorKind::InvalidData, format!("{key}: {e}"))
                    })?;
                    data.entries.insert(name.to_string(), entry);
                } else if let Some(name) = key.strip_prefix(&vp) {
                    data.values.insert(
                        name.to_string(),
                        String::from_utf8_lossy(kv.value()).into_owned(),
                    );
                }
            }
        }
        Ok((data, revisions))
    }

    fn lock(&self, scope: &Scope, deadline: Option<Instant>) -> io::Result<File> {
        let dir = self.lock_root.join(&scope.network);
        fs::create_dir_all(&dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(format!("{}.lock", scope.plugin)))?;
        lock_exclusive(&lock, deadline)?;
        Ok(lock)
    }
}

impl Txn for EtcdTxnState {
    fn data(&mut self) -> &mut ScopeData {
        &mut self.data
    }

    fn commit(self: Box<Self>) -> io::Result<()> {
        let store = &*self.store;
        let (ep, vp) = (
            store.entries_prefix(&self.scope),
            store.values_prefix(&self.scope),
        );
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut guard = |key: String, ops_entry: Option<TxnOp>| {
            let rev = self.revisions.get(&key).copied().unwrap_or(0);
            compares.push(if rev == 0 {
                Compare::create_revision(key.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key.clone(), CompareOp::Equal, rev)
            });
            ops.push(ops_entry.unwrap_or_else(|| TxnOp::delete(key, None)));
        };
        let keys: std::collections::BTreeSet<&String> = self
            .read
            .entries
            .keys()
            .chain(self.data.entries.keys())
            .collect();
        for k in keys {
            let (old, new) = (self.read.entries.get(k), self.data.entries.get(k));
            if old == new {
                continue;
            }
            // Another node's live allocation stays as it is, whatever this
            // call decided (GC here knows only this node's attachments).
            if let Some(o) = old.filter(|o| o.is_live() && o.node.as_deref() != Some(&store.node)) {
                if new.is_none_or(|n| !n.is_live() || n.owner != o.owner) {
                    continue;
                }
            }
            let key = format!("{ep}{k}");
            match new {
                Some(n) => {
                    let mut n = n.clone();
                    if old.is_none_or(|o| o.allocated_at != n.allocated_at || o.owner != n.owner) {
                        n.node = Some(store.node.clone());
                    }
                    let json = serde_json::to_vec(&n).map_err(io::Error::other)?;
                    guard(key.clone(), Some(TxnOp::put(key, json, None)));
                }
                None => guard(key, None),
            }
        }
        let names: std::collections::BTreeSet<&String> = self
            .read
            .values
            .keys()
            .chain(self.data.values.keys())
            .collect();
        for name in names {
            let (old, new) = (self.read.values.get(name), self.data.values.get(name));
            if old == new {
                continue;
            }
            let key = format!("{vp}{name}");
            let op = new.map(|v| TxnOp::put(key.clone(), v.clone(), None));
            guard(key, op);
        }
        if ops.is_empty() {
            return Ok(());
        }
        let txn = EtcdTxn::new().when(compares).and_then(ops);
        let resp = store.run(txn, self.deadline)?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(io::Error::other(Conflict(format!(
                "{}/{}: another node changed what this call read",
                self.scope.network, self.scope.plugin
            ))))
        }
    }
}

impl StateStore for EtcdStore {
    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> io::Result<Box<dyn Txn>> {
        let inner = &self.inner;
        let lock = inner.lock(scope, deadline)?;
        let (data, revisions) = inner.read(scope, deadline)?;
        Ok(Box::new(EtcdTxnState {
            store: self.inner.clone(),
            scope: scope.clone(),
            read: data.clone(),
            revisions,
            data,
            deadline,
            _lock: lock,
        }))
    }

    fn scopes(&self, network: &str) -> io::Result<Vec<String>> {
        let prefix = format!(
            "{}/scopes/{network}/",
            self.inner.conf.prefix.trim_end_matches('/')
        );
        let mut out: Vec<String> = self
            .inner
            .keys(&prefix)?
            .iter()
            .filter_map(|k| {
                k.strip_prefix(&prefix)?
                    .split('/')
                    .next()
                    .map(str::to_string)
            })
            .collect();
        out.dedup();
        Ok(out)
    }

    fn networks(&self) -> io::Result<Vec<String>> {
        let prefix = format!("{}/scopes/", self.inner.conf.prefix.trim_end_matches('/'));
        let mut out: Vec<String> = self
            .inner
            .keys(&prefix)?
            .iter()
            .filter_map(|k| {
                k.strip_prefix(&prefix)?
                    .split('/')
                    .next()
                    .map(str::to_string)
            })
            .collect();
        out.dedup();
        Ok(out)
    }
}

impl Inner {
    /// Keys under `prefix`, sorted (etcd returns them in key order).
    fn keys(&self, prefix: &str) -> io::Result<Vec<String>> {
        let txn = EtcdTxn::new().and_then(vec![TxnOp::get(
            prefix.to_string(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )]);
        let resp = self.run(txn, None)?;
        let mut out = Vec::new();
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                out.extend(
                    get.kvs()
                        .iter()
                        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned()),
                );
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
        assert!(is_unavailable(&e), "{e}");
        assert!(
            started.elapsed() < Duration::from_millis(2000),
            "{:?}",
            started.elapsed()
        );
        let _ = fs::remove_dir_all(dir);
    }
}
