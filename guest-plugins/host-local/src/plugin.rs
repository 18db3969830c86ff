//! The CNI verbs over a [`Host`]: the WIT imports in the component, a fake in
//! the unit tests.
//!
//! Everything one call does to the store is one host transaction, committed
//! only if the verb returns `Ok`: a failing ADD leaves nothing behind, so
//! there is no release-on-error path here.

use std::collections::BTreeMap;
use std::net::IpAddr;

use wasm_cni_sdk::error::{code, CniError};

use crate::alloc::{AllocError, Elsewhere, How, Owner, Pool, Slot, Slots, SpanCount};
use crate::config::{self, IpamConfig};
use crate::dns::parse_resolv_conf;
use crate::ip;

pub use wasm_cni_sdk::host::Level;
pub use wasm_cni_sdk::types::{Dns, Route};

/// Store value: the effective `reuseIPWait` in milliseconds, for the
/// operator view (`wasm-cni ipam ls`).
pub const REUSE_WAIT_VALUE: &str = "reuseIPWaitMs";

/// Store value: how many addresses the configured ranges hold, gateways
/// excluded (decimal), so that `wasm-cni status` can say what is free
/// without knowing this plugin's config. Any IPAM plugin may keep it.
pub const POOL_SIZE_VALUE: &str = "poolSize";

/// Store value: the round-robin cursor of range set `idx` (the reference's
/// `last_reserved_ip.<idx>` file).
pub fn last_reserved_value(idx: usize) -> String {
    format!("last_reserved_ip.{idx}")
}

/// A store or file failure as the host reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostError {
    /// Not allowed for this verb, owner or path.
    Refused(String),
    /// The host could not read or write.
    Io(String),
}

impl HostError {
    fn into_cni(self, what: &str) -> CniError {
        match self {
            HostError::Io(m) => CniError::new(code::IO_FAILURE, format!("{what}: {m}")),
            HostError::Refused(m) => CniError::internal(format!("{what}: refused: {m}")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub owner: Owner,
    pub allocated_at: u64,
    pub released_at: Option<u64>,
}

/// `store.span`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub entries: u32,
    pub released: u32,
    pub oldest_released: Option<Entry>,
}

/// The imports of the `ipam-plugin` world. The owner of `reserve`,
/// `release-by-owner` and `get-by-owner` is the calling attachment, set by
/// the host.
pub trait Host {
    fn now(&self) -> u64;
    fn list(&self) -> Result<Vec<Entry>, HostError>;
    /// The entries of `keys`, in order (at most [`MAX_LOOKUP`]).
    fn lookup(&self, keys: &[String]) -> Result<Vec<Option<Entry>>, HostError>;
    /// What the scope holds for the addresses `first..=last`.
    fn span(&self, first: &str, last: &str) -> Result<Span, HostError>;
    fn reserve(&self, key: &str) -> Result<bool, HostError>;
    fn release_by_owner(&self) -> Result<Vec<String>, HostError>;
    fn release(&self, key: &str) -> Result<bool, HostError>;
    fn get_by_owner(&self) -> Result<Vec<String>, HostError>;
    fn get_value(&self, name: &str) -> Result<Option<String>, HostError>;
    fn set_value(&self, name: &str, value: Option<&str>) -> Result<(), HostError>;
    /// In a store several nodes share: the blocks (CIDRs) other nodes
    /// claimed, to allocate from last (since contract 0.2.2).
    fn blocks_of_other_nodes(&self) -> Result<Vec<String>, HostError>;
    /// A file the config names (`ipam.resolvConf`), read by the host.
    fn read_config_file(&self, path: &str) -> Result<String, HostError>;
    fn log(&self, level: Level, message: &str);
}

/// An ADD, DEL or CHECK request (the fields host-local reads).
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub container_id: String,
    pub ifname: String,
    pub args: Vec<(String, String)>,
    pub config: String,
}

/// An ip of the IPAM result (IPAM results name no interface).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpConfig {
    pub address: String,
    pub gateway: Option<String>,
}

/// The abbreviated IPAM result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpamResult {
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Option<Dns>,
}

fn owner_of(req: &Request) -> Owner {
    Owner {
        container_id: req.container_id.clone(),
        ifname: req.ifname.clone(),
    }
}

/// Keys one `store.lookup` takes.
pub const MAX_LOOKUP: usize = 1024;

/// [`Slots`] asked of the host within the call's transaction: what this
/// call reserves is in the answers to its next questions.
struct HostSlots<'a, H: Host>(&'a H);

fn store_failed(e: HostError) -> AllocError {
    AllocError::Store(e.into_cni("reading allocations"))
}

impl<H: Host> Slots for HostSlots<'_, H> {
    fn get(&self, ips: &[IpAddr]) -> Result<Vec<Option<Slot>>, AllocError> {
        let mut out = Vec::with_capacity(ips.len());
        for chunk in ips.chunks(MAX_LOOKUP) {
            let keys: Vec<String> = chunk.iter().map(ToString::to_string).collect();
            let found = self.0.lookup(&keys).map_err(store_failed)?;
            if found.len() != keys.len() {
                return Err(AllocError::Store(CniError::internal(format!(
                    "the store answered {} of {} lookups",
                    found.len(),
                    keys.len()
                ))));
            }
            out.extend(found.into_iter().map(|e| {
                e.map(|e| Slot {
                    owner: e.owner,
                    released_at: e.released_at,
                })
            }));
        }
        Ok(out)
    }

    fn span(&self, first: IpAddr, last: IpAddr) -> Result<SpanCount, AllocError> {
        let s = self
            .0
            .span(&first.to_string(), &last.to_string())
            .map_err(store_failed)?;
        let oldest = s
            .oldest_released
            .and_then(|e| Some((e.released_at?, ip::parse_ip(&e.key).ok()?)));
        Ok(SpanCount {
            entries: s.entries as usize,
            released: s.released as usize,
            oldest,
        })
    }

    /// The host knows the caller: `owner` is always it here.
    fn held_by(&self, _owner: &Owner) -> Result<Vec<IpAddr>, AllocError> {
        Ok(self
            .0
            .get_by_owner()
            .map_err(store_failed)?
            .iter()
            .filter_map(|k| ip::parse_ip(k).ok())
            .collect())
    }
}

/// The store's entries by address; keys that are not addresses are not ours.
fn slots(entries: Vec<Entry>) -> BTreeMap<IpAddr, Slot> {
    entries
        .into_iter()
        .filter_map(|e| {
            let ip = ip::parse_ip(&e.key).ok()?;
            Some((
                ip,
                Slot {
                    owner: e.owner,
                    released_at: e.released_at,
                },
            ))
        })
        .collect()
}

/// Keep what the operator views show of this config where they can find
/// it: the effective wait and the pool's size, each written only when it
/// changed.
fn remember_config<H: Host>(host: &H, conf: &IpamConfig) -> Result<(), CniError> {
    let size = conf
        .ranges
        .iter()
        .fold(0u128, |n, set| n.saturating_add(set.size()));
    remember(
        host,
        REUSE_WAIT_VALUE,
        conf.policy.reuse_wait_ms.to_string(),
    )?;
    remember(host, POOL_SIZE_VALUE, size.to_string())
}

fn remember<H: Host>(host: &H, name: &str, want: String) -> Result<(), CniError> {
    let have = host
        .get_value(name)
        .map_err(|e| e.into_cni("reading the store"))?;
    if have.as_deref() != Some(want.as_str()) {
        host.set_value(name, Some(&want))
            .map_err(|e| e.into_cni("writing the store"))?;
    }
    Ok(())
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

fn alloc_error(idx: usize, e: AllocError, conf: &IpamConfig) -> CniError {
    if let AllocError::Store(e) = e {
        return e;
    }
    let msg = format!("failed to allocate for range {idx}: {e}");
    match e {
        AllocError::Quarantined {
            quarantined,
            next_free_ms,
            ..
        } => CniError::new(code::TRY_AGAIN_LATER, msg).with_details(format!(
            "{quarantined} released address(es) are quarantined for ipam.reuseIPWait ({}); \
             the first is free again in {}. Set ipam.reuseQuarantined to true to reuse \
             the one released longest ago instead",
            seconds(conf.policy.reuse_wait_ms),
            seconds(next_free_ms)
        )),
        AllocError::Exhausted { .. } | AllocError::Refused(_) | AllocError::Store(_) => {
            CniError::internal(msg)
        }
    }
}

pub fn add<H: Host>(host: &H, req: &Request) -> Result<IpamResult, CniError> {
    let conf = config::load(&req.config, &req.args)?;
    // Like the reference, DNS first: an unreadable file allocates nothing.
    let dns = match &conf.resolv_conf {
        Some(path) => Some(parse_resolv_conf(&host.read_config_file(path).map_err(
            |e| match e {
                HostError::Io(m) => CniError::new(code::IO_FAILURE, m),
                HostError::Refused(m) => {
                    CniError::internal(format!("reading {path}: refused: {m}"))
                }
            },
        )?)),
        None => None,
    };
    let now = host.now();
    remember_config(host, &conf)?;
    let slots = HostSlots(host);
    let others = host
        .blocks_of_other_nodes()
        .map_err(|e| e.into_cni("reading the store"))?;
    let elsewhere = Elsewhere::new(&slots, &others);
    let owner = owner_of(req);
    let mut requested = conf.requested.clone();
    let mut ips = Vec::with_capacity(conf.ranges.len());
    for (idx, set) in conf.ranges.iter().enumerate() {
        let wanted = requested
            .iter()
            .position(|ip| set.contains(ip))
            .map(|i| requested.remove(i));
        let cursor = last_reserved_value(idx);
        let last = host
            .get_value(&cursor)
            .map_err(|e| e.into_cni("reading the store"))?
            .and_then(|s| ip::parse_ip(&s).ok());
        // This node's own and unclaimed blocks first; other nodes' only
        // when those have nothing (a requested address is what it is).
        let preferred = match (wanted, elsewhere.is_empty()) {
            (None, false) => {
                let pool = Pool {
                    set,
                    slots: &elsewhere,
                };
                match pool.choose(&owner, None, last, now, &conf.policy) {
                    Ok(chosen) => Some(chosen),
                    // Nothing free here (never used, or out of quarantine).
                    Err(e @ (AllocError::Exhausted { .. } | AllocError::Quarantined { .. })) => {
                        host.log(
                            Level::Debug,
                            &format!("range set {idx}: {e}; borrowing from other nodes' blocks"),
                        );
                        None
                    }
                    // A duplicate or the store failing: the same anywhere.
                    Err(e) => return Err(alloc_error(idx, e, &conf)),
                }
            }
            _ => None,
        };
        let (ip, how) = match preferred {
            Some(chosen) => chosen,
            None => Pool { set, slots: &slots }
                .choose(&owner, wanted, last, now, &conf.policy)
                .map_err(|e| alloc_error(idx, e, &conf))?,
        };
        let key = ip.to_string();
        // The whole call is one transaction and the pool was read inside
        // it: a refusal here means the store changed under us, a host bug.
        if !host
            .reserve(&key)
            .map_err(|e| e.into_cni("reserving an address"))?
        {
            return Err(CniError::internal(format!(
                "failed to allocate for range {idx}: the store refused {key}"
            )));
        }
        host.set_value(&cursor, Some(&key))
            .map_err(|e| e.into_cni("writing the store"))?;
        let why = match how {
            How::Requested => "requested".to_string(),
            How::NeverUsed => "never used".to_string(),
            How::Reused { released_ms_ago } => {
                format!("released {} ago", seconds(released_ms_ago))
            }
            How::Quarantined { early_ms } => {
                format!(
                    "quarantined, {} early (reuseQuarantined)",
                    seconds(early_ms)
                )
            }
        };
        host.log(
            Level::Debug,
            &format!(
                "range set {idx}: {key} for {} {} ({why})",
                owner.container_id, owner.ifname
            ),
        );
        let range = set
            .range_for(&ip)
            .map_err(|e| CniError::internal(format!("failed to allocate for range {idx}: {e}")))?;
        ips.push(IpConfig {
            address: format!("{ip}/{}", range.subnet.prefix_len()),
            gateway: Some(range.gateway.to_string()),
        });
    }
    if !requested.is_empty() {
        let list: Vec<String> = requested.iter().map(ToString::to_string).collect();
        return Err(CniError::internal(format!(
            "failed to allocate all requested IPs: {}",
            list.join(" ")
        )));
    }
    Ok(IpamResult {
        ips,
        routes: conf.routes,
        dns,
    })
}

/// Release what this attachment holds. Best effort: a config this plugin
/// cannot parse does not stop the release, since the store needs none.
pub fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
    match config::load(&req.config, &req.args) {
        Ok(conf) => remember_config(host, &conf)?,
        Err(e) => host.log(
            Level::Warn,
            &format!("DEL despite an invalid config: {}", e.msg),
        ),
    }
    let released = host
        .release_by_owner()
        .map_err(|e| e.into_cni("releasing addresses"))?;
    if !released.is_empty() {
        host.log(
            Level::Debug,
            &format!(
                "released {} for {} {}",
                released.join(", "),
                req.container_id,
                req.ifname
            ),
        );
    }
    Ok(())
}

pub fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
    config::load(&req.config, &req.args)?;
    let held = host
        .get_by_owner()
        .map_err(|e| e.into_cni("reading allocations"))?;
    if held.is_empty() {
        return Err(CniError::internal(format!(
            "host-local: Failed to find address added by container {}",
            req.container_id
        )));
    }
    Ok(())
}

/// Code 50 when some range set has no address an ADD could get now.
pub fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
    let conf = config::load(config, &[])?;
    let now = host.now();
    let slots = slots(host.list().map_err(|e| e.into_cni("listing allocations"))?);
    for (idx, set) in conf.ranges.iter().enumerate() {
        let pool = Pool { set, slots: &slots };
        if pool.allocatable(now, &conf.policy) == 0 {
            return Err(CniError::new(
                code::NOT_AVAILABLE,
                format!("no IP addresses available in range set: {set}"),
            )
            .with_details(format!(
                "range set {idx}: every address is allocated or quarantined (ipam.reuseIPWait)"
            )));
        }
    }
    Ok(())
}

/// Release every live allocation whose attachment is not in `valid`.
pub fn gc<H: Host>(host: &H, config: &str, valid: &[Owner]) -> Result<(), CniError> {
    match config::load(config, &[]) {
        Ok(conf) => remember_config(host, &conf)?,
        Err(e) => host.log(
            Level::Warn,
            &format!("GC despite an invalid config: {}", e.msg),
        ),
    }
    let entries = host.list().map_err(|e| e.into_cni("listing allocations"))?;
    let mut errors = Vec::new();
    let mut released = 0usize;
    for e in entries
        .iter()
        .filter(|e| e.released_at.is_none() && !valid.contains(&e.owner))
    {
        match host.release(&e.key) {
            Ok(true) => {
                released += 1;
                host.log(
                    Level::Info,
                    &format!(
                        "gc: released {} of stale {} {}",
                        e.key, e.owner.container_id, e.owner.ifname
                    ),
                );
            }
            Ok(false) => {}
            Err(err) => errors.push(format!("{}: {err:?}", e.key)),
        }
    }
    if !errors.is_empty() {
        return Err(CniError::internal(format!(
            "gc: releasing failed for {}",
            errors.join("; ")
        )));
    }
    host.log(
        Level::Debug,
        &format!("gc: {released} stale allocation(s) released"),
    );
    Ok(())
}
