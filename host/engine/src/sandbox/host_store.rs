//! `cni:plugin/store`: the plugin's scope of the state store, inside one
//! transaction per call (see `wasm_cni_store`). Owner and verb come from the
//! call, never from the plugin.

use std::net::IpAddr;

use super::bindings::cni::plugin::store::{Entry as WitEntry, Host, SpanSummary, StoreError};
use super::bindings::types::Attachment;
use super::fail::{Fail, StoreFail};
use super::state::Ctx;
use super::AbortCause;
use wasm_cni_protocol::Command;
use wasm_cni_store::state::now_ms;
// The backend's failure, as opposed to the WIT's `store-error` the plugin sees.
use wasm_cni_store::StoreError as Failure;
use wasm_cni_store::{valid_key, Entry, Owner, ScopeData};

type R<T> = Result<T, StoreFail>;

/// Bounds on what a plugin can make the host keep.
const MAX_VALUE_BYTES: usize = 64 << 10;
const MAX_ITEMS: usize = 1 << 20;
/// Keys one `lookup` may ask for: its answer is built on the host before
/// the plugin's memory limit could refuse it.
pub(crate) const MAX_LOOKUP_KEYS: usize = 1024;
/// What one scope may hold in all, as stored: without it, a call
/// could write `hostCallBudget` values of 64 KiB each (650 MB by default)
/// to the state directory. Room for a fully used /16 pool of host-local
/// entries (about 130 bytes each) with plenty to spare.
pub(crate) const MAX_SCOPE_BYTES: usize = 32 << 20;

/// Bytes `s` takes as a JSON string, quotes included, escaped the way the
/// store writes it (serde_json): `"` and `\\` and the five short escapes
/// take two bytes, other control characters six (`\u00XX`). The quota
/// counts what is written, not what the plugin passed.
pub(crate) fn json_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// An entry as written: `"key":{"owner":{"containerId":..,"ifname":..},
/// "allocatedAt":N,"releasedAt":N},` with both numbers at their longest.
fn entry_bytes(key: &str, e: &Entry) -> usize {
    json_len(key) + json_len(&e.owner.container_id) + json_len(&e.owner.ifname) + 110
}

/// A value as written: `"name":"value",`.
fn value_bytes(name: &str, value: &str) -> usize {
    json_len(name) + json_len(value) + 2
}

/// The size of a scope as [`MAX_SCOPE_BYTES`] counts it.
fn scope_bytes(data: &ScopeData) -> usize {
    data.entries
        .iter()
        .map(|(k, e)| entry_bytes(k, e))
        .chain(data.values.iter().map(|(k, v)| value_bytes(k, v)))
        .sum()
}

/// Account for a change of `old` to `new` bytes; refuse it (changing
/// nothing) if the scope would outgrow [`MAX_SCOPE_BYTES`]. Shrinking is
/// always allowed, so a full scope can still be cleaned up.
fn account(used: &mut usize, old: usize, new: usize) -> Result<(), StoreError> {
    let next = used.saturating_sub(old).saturating_add(new);
    if new > old && next > MAX_SCOPE_BYTES {
        return Err(StoreError::Refused(format!(
            "the scope would hold more than {MAX_SCOPE_BYTES} bytes"
        )));
    }
    *used = next;
    Ok(())
}

fn refused<T>(why: impl Into<String>) -> R<T> {
    Err(StoreError::Refused(why.into()).into())
}

impl Ctx {
    /// Charge the call, open the transaction on first use, and hand the
    /// operation the scope's data with the caller's owner and verb.
    fn with_scope<T>(
        &mut self,
        op: impl FnOnce(&mut ScopeData, &Owner, Command, &mut usize) -> Result<T, StoreError>,
    ) -> R<T> {
        self.charge()?;
        let Some(access) = &self.store else {
            return refused("no state store for this call");
        };
        if self.inject(|| format!("store {}/{}", access.scope.network, access.scope.plugin)) {
            // What a full tmpfs under /run answers a write.
            return Err(
                StoreError::Io("No space left on device (os error 28) (injected)".into()).into(),
            );
        }
        let owner = access.owner.clone();
        let command = access.command;
        if self.txn.is_none() {
            let started = std::time::Instant::now();
            let opened = access.backend.begin_by(&access.scope, Some(self.deadline));
            self.record(
                "store",
                || {
                    format!(
                        "read {}/{} under its lock",
                        access.scope.network, access.scope.plugin
                    )
                },
                started,
                false,
            );
            match opened {
                Ok(mut t) => {
                    // A file's length is what the data was read from (or
                    // written to): at host-local's history cap, counting
                    // the data instead was 6 % of a per-invocation call.
                    self.scope_bytes = t.stored_bytes().map_or_else(
                        || scope_bytes(t.data()),
                        |n| usize::try_from(n).unwrap_or(usize::MAX),
                    );
                    self.txn = Some(t);
                }
                // Waiting took the whole deadline: nothing is left for the
                // plugin to do, and the runtime should retry (code 11).
                // A cluster store out of reach (or too slow): code 11 too,
                // with what went wrong.
                Err(Failure::Unavailable(why)) => {
                    return Err(self
                        .abort(AbortCause::StoreUnavailable(format!(
                            "{}/{}: {why}",
                            access.scope.network, access.scope.plugin
                        )))
                        .into());
                }
                Err(Failure::Busy(_)) => {
                    return Err(self
                        .abort(AbortCause::StoreBusy {
                            scope: format!("{}/{}", access.scope.network, access.scope.plugin),
                            waited_ms: started.elapsed().as_millis() as u64,
                        })
                        .into());
                }
                Err(e) => return Err(StoreError::Io(e.to_string()).into()),
            }
            self.hold_scope()?;
        }
        let done = match self.txn.as_mut() {
            Some(txn) => op(txn.data(), &owner, command, &mut self.scope_bytes)?,
            None => return refused("no transaction"),
        };
        self.hold_scope()?;
        Ok(done)
    }

    /// Count the scope the host holds for this call against the call's
    /// memory limit, as if it were the plugin's own memory: a daemon
    /// admits calls by their limits, and a scope (up to
    /// [`MAX_SCOPE_BYTES`] as stored, more as the maps that hold it, and
    /// once more in a `list` answer) is memory the plugin makes the host
    /// keep.
    fn hold_scope(&mut self) -> Result<(), StoreFail> {
        let held = self.scope_bytes.saturating_mul(SCOPE_HELD_PER_BYTE);
        self.memory
            .hold(held)
            .map_err(|cause| StoreFail::from(self.abort(cause)))
    }
}

/// Host memory counted per byte of a scope as stored: its maps (keys,
/// owners and the tree around them: about twice the stored bytes for
/// host-local's entries), and the bytes read or written.
const SCOPE_HELD_PER_BYTE: usize = 3;

/// What the plugin passed, as a refusal quotes it: cut, since the message
/// goes back to the plugin and into the log.
fn shown(text: &str) -> String {
    text.chars().take(64).collect()
}

fn check_key(key: &str) -> Result<(), StoreError> {
    if valid_key(key) {
        Ok(())
    } else {
        Err(StoreError::Refused(format!("invalid key {:?}", shown(key))))
    }
}

/// An entry as the plugin sees it.
fn wit_entry(key: &str, e: &Entry) -> WitEntry {
    WitEntry {
        key: key.to_string(),
        owner: Attachment {
            container_id: e.owner.container_id.clone(),
            ifname: e.owner.ifname.clone(),
        },
        allocated_at: e.allocated_at,
        released_at: e.released_at,
    }
}

/// An address as `span` reads keys and bounds: IPv4-mapped IPv6 is IPv4,
/// as host-local (Go's `To4`) reads it.
fn address(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

/// `first..=last`, both addresses of one family, in order.
fn span_bounds(first: &str, last: &str) -> Result<(IpAddr, IpAddr), StoreError> {
    let bound = |s: &str| {
        address(s).ok_or_else(|| {
            StoreError::Refused(format!("span bound {:?} is not an IP address", shown(s)))
        })
    };
    let (a, b) = (bound(first)?, bound(last)?);
    if a.is_ipv4() != b.is_ipv4() {
        return Err(StoreError::Refused(format!(
            "span {a} to {b} mixes address families"
        )));
    }
    if a > b {
        return Err(StoreError::Refused(format!("span {a} to {b} is empty")));
    }
    Ok((a, b))
}

/// The summary of `first..=last` over the scope's entries: one pass, no
/// copy but of the oldest released entry.
fn summarize(data: &ScopeData, first: IpAddr, last: IpAddr) -> SpanSummary {
    let (mut entries, mut released) = (0u32, 0u32);
    let mut oldest: Option<(u64, IpAddr, &str, &Entry)> = None;
    for (key, e) in &data.entries {
        // Same family and in order: `IpAddr` orders every IPv4 address
        // below every IPv6 one, so the bounds also exclude the other family.
        let Some(ip) = address(key).filter(|ip| (first..=last).contains(ip)) else {
            continue;
        };
        entries = entries.saturating_add(1);
        if let Some(t) = e.released_at {
            released = released.saturating_add(1);
            if oldest.is_none_or(|(ot, oip, ..)| (t, ip) < (ot, oip)) {
                oldest = Some((t, ip, key, e));
            }
        }
    }
    SpanSummary {
        entries,
        released,
        oldest_released: oldest.map(|(_, _, key, e)| wit_entry(key, e)),
    }
}

fn has_owner(owner: &Owner) -> Result<(), StoreError> {
    if owner.container_id.is_empty() {
        Err(StoreError::Refused("this verb has no attachment".into()))
    } else {
        Ok(())
    }
}

impl Host for Ctx {
    fn convert_store_error(&mut self, e: StoreFail) -> wasmtime::Result<StoreError> {
        e.into_wit()
    }

    fn reserve(&mut self, key: String) -> R<bool> {
        self.with_scope(|data, owner, command, used| {
            check_key(&key)?;
            has_owner(owner)?;
            if command != Command::Add {
                return Err(StoreError::Refused(
                    "reserve is allowed during ADD only".into(),
                ));
            }
            if data.entries.get(&key).is_some_and(Entry::is_live) {
                return Ok(false);
            }
            if data.entries.len() >= MAX_ITEMS && !data.entries.contains_key(&key) {
                return Err(StoreError::Refused("too many entries".into()));
            }
            let entry = Entry {
                owner: owner.clone(),
                allocated_at: now_ms(),
                released_at: None,
                node: None,
            };
            let old = data.entries.get(&key).map_or(0, |e| entry_bytes(&key, e));
            account(used, old, entry_bytes(&key, &entry))?;
            data.entries.insert(key, entry);
            Ok(true)
        })
    }

    fn release_by_owner(&mut self) -> R<Vec<String>> {
        self.with_scope(|data, owner, _, _| {
            has_owner(owner)?;
            let now = now_ms();
            let mut released = Vec::new();
            for (key, e) in data.entries.iter_mut() {
                if e.is_live() && e.owner == *owner {
                    e.released_at = Some(now);
                    released.push(key.clone());
                }
            }
            Ok(released)
        })
    }

    fn release(&mut self, key: String) -> R<bool> {
        self.with_scope(|data, _, command, _| {
            if command != Command::Gc {
                return Err(StoreError::Refused(
                    "releasing another owner's entry is allowed during GC only".into(),
                ));
            }
            match data.entries.get_mut(&key) {
                Some(e) if e.is_live() => {
                    e.released_at = Some(now_ms());
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
    }

    fn get_by_owner(&mut self) -> R<Vec<String>> {
        self.with_scope(|data, owner, _, _| {
            Ok(data
                .entries
                .iter()
                .filter(|(_, e)| e.is_live() && e.owner == *owner)
                .map(|(k, _)| k.clone())
                .collect())
        })
    }

    fn list(&mut self) -> R<Vec<WitEntry>> {
        self.with_scope(|data, _, _, _| {
            Ok(data.entries.iter().map(|(k, e)| wit_entry(k, e)).collect())
        })
    }

    fn lookup(&mut self, keys: Vec<String>) -> R<Vec<Option<WitEntry>>> {
        self.with_scope(|data, _, _, _| {
            if keys.len() > MAX_LOOKUP_KEYS {
                return Err(StoreError::Refused(format!(
                    "lookup of {} keys; at most {MAX_LOOKUP_KEYS} per call",
                    keys.len()
                )));
            }
            keys.iter()
                .map(|k| {
                    check_key(k)?;
                    Ok(data.entries.get(k).map(|e| wit_entry(k, e)))
                })
                .collect()
        })
    }

    fn span(&mut self, first: String, last: String) -> R<SpanSummary> {
        self.with_scope(|data, _, _, _| {
            let (first, last) = span_bounds(&first, &last)?;
            Ok(summarize(data, first, last))
        })
    }

    fn blocks_of_other_nodes(&mut self) -> R<Vec<String>> {
        // The store's fact, from the snapshot the transaction read: the
        // plugin passes nothing, and what it gets is bounded by what one
        // read of the scope may hold.
        self.with_scope(|_, _, _, _| Ok(()))?;
        Ok(self
            .txn
            .as_ref()
            .map(|t| t.others_blocks())
            .unwrap_or_default())
    }

    fn now(&mut self) -> wasmtime::Result<u64> {
        // Read the clock under the scope's lock: a time taken before the
        // lock could be older than a release another process commits while
        // this one waits, making a just-released address look quarantined
        // for negative time. (Without a store, the plain clock.)
        match self.with_scope(|_, _, _, _| Ok(now_ms())) {
            Ok(t) => Ok(t),
            Err(Fail::Plugin(_)) => Ok(now_ms()),
            Err(Fail::Trap(t)) => Err(t),
        }
    }

    fn get_value(&mut self, name: String) -> R<Option<String>> {
        self.with_scope(|data, _, _, _| {
            check_key(&name)?;
            Ok(data.values.get(&name).cloned())
        })
    }

    fn set_value(&mut self, name: String, value: Option<String>) -> R<()> {
        self.with_scope(|data, _, _, used| {
            check_key(&name)?;
            let old = data.values.get(&name).map_or(0, |v| value_bytes(&name, v));
            match value {
                Some(v) => {
                    if v.len() > MAX_VALUE_BYTES {
                        return Err(StoreError::Refused(format!(
                            "value larger than {MAX_VALUE_BYTES} bytes"
                        )));
                    }
                    if data.values.len() >= MAX_ITEMS && !data.values.contains_key(&name) {
                        return Err(StoreError::Refused("too many values".into()));
                    }
                    account(used, old, value_bytes(&name, &v))?;
                    data.values.insert(name, v);
                }
                None => {
                    account(used, old, 0)?;
                    data.values.remove(&name);
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_what_serde_json_writes() {
        for s in [
            "",
            "10.1.2.3",
            "a\"b\\c",
            "\n\r\t\u{8}\u{c}",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "é€😀",
        ] {
            let written = serde_json::to_string(s).unwrap();
            assert_eq!(json_len(s), written.len(), "{s:?} -> {written}");
        }
    }

    fn entry(released_at: Option<u64>) -> Entry {
        Entry {
            owner: Owner {
                container_id: "c".into(),
                ifname: "eth0".into(),
            },
            allocated_at: 1,
            released_at,
            node: None,
        }
    }

    /// A span counts the addresses of its family between its bounds, an
    /// IPv4-mapped key as IPv4, and picks the oldest release, the lowest
    /// address among equals; other keys count nowhere.
    #[test]
    fn a_span_summarizes_its_addresses_only() {
        let mut data = ScopeData::default();
        for (k, r) in [
            ("10.0.0.2", None),
            ("10.0.0.10", Some(50)),
            ("10.0.0.9", Some(50)),
            ("::ffff:10.0.0.3", Some(70)),
            ("10.0.1.0", Some(10)),
            ("2001:db8::5", Some(1)),
            ("last", Some(0)),
            ("010.0.0.4", Some(0)),
        ] {
            data.entries.insert(k.into(), entry(r));
        }
        let (a, b) = span_bounds("10.0.0.0", "10.0.0.255").unwrap();
        let s = summarize(&data, a, b);
        assert_eq!((s.entries, s.released), (4, 3));
        // 10.0.0.9 and 10.0.0.10 were released together: the lower address
        // wins, not the lower key (the text "10.0.0.10" sorts first).
        assert_eq!(
            s.oldest_released.map(|e| e.key).as_deref(),
            Some("10.0.0.9")
        );
        let (a, b) = span_bounds("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe").unwrap();
        let s = summarize(&data, a, b);
        // `::ffff:10.0.0.3` reads as IPv4, so only 2001:db8::5 is IPv6.
        assert_eq!((s.entries, s.released), (1, 1));
        let (a, b) = span_bounds("10.0.0.3", "10.0.0.3").unwrap();
        let s = summarize(&data, a, b);
        assert_eq!(
            s.oldest_released.map(|e| e.key).as_deref(),
            Some("::ffff:10.0.0.3")
        );
        let none = summarize(
            &data,
            "192.0.2.0".parse().unwrap(),
            "192.0.2.9".parse().unwrap(),
        );
        assert_eq!((none.entries, none.released), (0, 0));
        assert!(none.oldest_released.is_none());
    }

    #[test]
    fn the_count_bounds_the_scope_as_written() {
        let mut data = ScopeData::default();
        data.values.insert("k\u{1}".into(), "\u{0}".repeat(1000));
        data.entries.insert(
            "10.0.0.2".into(),
            Entry {
                owner: Owner {
                    container_id: "c\u{2}".into(),
                    ifname: "eth0".into(),
                },
                allocated_at: u64::MAX,
                released_at: Some(u64::MAX),
                node: None,
            },
        );
        // The count covers all but the envelope, `{"entries":{},"values":{}}`.
        let written = serde_json::to_vec(&data).unwrap().len();
        let counted = scope_bytes(&data);
        assert!(counted + 27 >= written, "{counted} + 27 < {written}");
        assert!(counted <= written + 100, "{counted} > {written} + 100");
    }
}
