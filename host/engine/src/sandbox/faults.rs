//! Fault injection: the Nth host call that would reach the kernel, the
//! store or the packet filter fails with the error that layer really gives
//! (ENOMEM from netlink and nfnetlink, ENOSPC from the store's tmpfs), so
//! `plugin test --faults` can show that a chain rolls back and DEL cleans up
//! after a failure at every point. Counted across the whole chain call,
//! IPAM delegates included; calls the policy refuses are not counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where to fail, and what was seen.
#[derive(Debug)]
pub struct Faults {
    at: u64,
    seen: AtomicU64,
    hit: Mutex<Option<String>>,
}

impl Faults {
    /// Fail the `n`th call (1-based); 0 fails none and only counts.
    pub fn at(n: u64) -> Self {
        Faults {
            at: n,
            seen: AtomicU64::new(0),
            hit: Mutex::new(None),
        }
    }

    /// Calls counted so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// What the failed call was, once it happened.
    pub fn hit(&self) -> Option<String> {
        self.hit.lock().ok().and_then(|h| h.clone())
    }

    /// Count one call to `what`; true if this one must fail.
    pub(crate) fn next(&self, what: impl FnOnce() -> String) -> bool {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n != self.at {
            return false;
        }
        if let Ok(mut h) = self.hit.lock() {
            *h = Some(what());
        }
        true
    }
}

/// The errno the kernel answers a netlink request with when it cannot
/// allocate: possible for any request.
pub const ENOMEM: i32 = 12;
