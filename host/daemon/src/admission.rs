//! Which requests the daemon runs at once: at most `--max-concurrent`, and
//! only as many as the memory their plugins may use fits in what the
//! daemon has.
//!
//! What a peer controls here: its config's limits (`memoryBytes`,
//! `maxResultBytes` of every entry and IPAM delegate), how many requests
//! it sends at once, and what its plugins do within their limits. What it
//! must not gain: the daemon killed by its memory cgroup (every pod's
//! network with it), or another request's room. So a request is admitted
//! only when what its calls may hold at once fits beside what the requests
//! in flight may hold; otherwise it waits, within its client's patience,
//! and is answered "try again later" (11) past it. A plugin that uses its
//! whole limit, and makes the host copy and keep as much as it can for it,
//! still stays within what was admitted: the host's copies out of a plugin
//! are bounded ([`limits::transfer_bytes`]) and its scope counts against
//! its own limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use serde_json::Value;

use wasm_cni_engine::sandbox::limits::{self, DEFAULT_MAX_RESULT_BYTES, DEFAULT_MEMORY_BYTES};

/// What the daemon keeps for itself out of its memory limit: the engine,
/// loaded components and their code, the scope cache
/// (`store::disk::CACHE_BYTES`), request threads' stacks and the metrics
/// and readiness threads. Measured at 21–25 MiB with every bundled
/// component loaded (bench item 9); the rest is margin.
pub const DAEMON_RESERVE_BYTES: u64 = 48 << 20;

/// What the host holds for one plugin call beyond its limits: the store,
/// the instance's metadata, the call's context and buffers (its tables and
/// scope count against `memoryBytes`).
const CALL_OVERHEAD_BYTES: u64 = 1 << 20;

/// The memory one call may make the daemon use: its linear memory and
/// scope (`memoryBytes`), a copy out of it (an import's arguments or its
/// answer), the answer kept, and the call's own overhead.
fn call_bytes(wasm: Option<&Value>) -> u64 {
    let get = |k: &str, default: u64| {
        wasm.and_then(|w| w.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(default)
    };
    let memory = get("memoryBytes", DEFAULT_MEMORY_BYTES);
    let result = get("maxResultBytes", DEFAULT_MAX_RESULT_BYTES);
    let transfer = limits::transfer_bytes(result) as u64;
    memory
        .saturating_add(transfer)
        .saturating_add(result)
        .saturating_add(CALL_OVERHEAD_BYTES)
}

/// What a request (the `wasm-cni` plugin config it carries) may make the
/// daemon use at once: its chain runs one entry at a time, each with its
/// IPAM delegate alive inside it, so the largest entry and its delegate.
/// A config with no readable chain costs one default call (it fails before
/// any plugin runs).
pub fn request_bytes(conf: &Value) -> u64 {
    let entry = |e: &Value| {
        let own = call_bytes(e.get("wasm"));
        let ipam = e.get("ipam").map_or(0, |i| call_bytes(i.get("wasm")));
        own.saturating_add(ipam)
    };
    conf.get("chain")
        .and_then(Value::as_array)
        .and_then(|chain| chain.iter().map(entry).max())
        .unwrap_or_else(|| call_bytes(None))
}

/// Requests in flight, by count and by the memory they may use.
pub struct Slots {
    held: Mutex<Held>,
    max: usize,
    /// Memory for calls, all requests together; None: not bounded.
    budget: Option<u64>,
    freed: Condvar,
}

#[derive(Default)]
struct Held {
    busy: usize,
    bytes: u64,
}

/// Why a request got no slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The daemon is stopping.
    Stopping,
    /// The request may use more than the daemon has for all calls.
    TooLarge { need: u64, budget: u64 },
    /// No room came by the deadline: `busy` requests in flight held
    /// `held` bytes of the `budget` (None: not bounded by memory).
    Late {
        need: u64,
        held: u64,
        busy: usize,
        budget: Option<u64>,
    },
}

impl Slots {
    pub fn new(max: usize, budget: Option<u64>) -> Self {
        Slots {
            held: Mutex::new(Held::default()),
            max: max.max(1),
            budget,
            freed: Condvar::new(),
        }
    }

    pub fn busy(&self) -> usize {
        self.held.lock().map(|h| h.busy).unwrap_or(0)
    }

    /// A slot for a request that may use `need` bytes, waiting for one
    /// until `deadline`, or until `stop` is set (see [`Slots::wake_all`]).
    pub fn take(
        self: &Arc<Self>,
        need: u64,
        deadline: Instant,
        stop: &AtomicBool,
    ) -> Result<SlotGuard, Refused> {
        if let Some(budget) = self.budget.filter(|b| need > *b) {
            return Err(Refused::TooLarge { need, budget });
        }
        let mut held = self.held.lock().map_err(|_| Refused::Stopping)?;
        loop {
            if stop.load(Ordering::SeqCst) {
                return Err(Refused::Stopping);
            }
            let fits = self
                .budget
                .is_none_or(|b| held.bytes.saturating_add(need) <= b);
            if held.busy < self.max && fits {
                held.busy += 1;
                held.bytes = held.bytes.saturating_add(need);
                return Ok(SlotGuard {
                    slots: self.clone(),
                    bytes: need,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refused::Late {
                    need,
                    held: held.bytes,
                    busy: held.busy,
                    budget: self.budget,
                });
            }
            held = match self.freed.wait_timeout(held, left) {
                Ok((h, _)) => h,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Wake every waiter (to see that the daemon stops).
    pub fn wake_all(&self) {
        let _held = self.held.lock();
        self.freed.notify_all();
    }

    /// Wait until no slot is taken, or `deadline`; whether it got idle.
    pub fn wait_idle_until(&self, deadline: Instant) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        while held.busy > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            held = match self.freed.wait_timeout(held, left) {
                Ok((h, _)) => h,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }
}

/// A held request slot and its memory, released on drop.
pub struct SlotGuard {
    slots: Arc<Slots>,
    bytes: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Ok(mut held) = self.slots.held.lock() {
            held.busy = held.busy.saturating_sub(1);
            held.bytes = held.bytes.saturating_sub(self.bytes);
        }
        self.slots.freed.notify_all();
    }
}

/// The memory limit of this process's cgroup, the tightest of its own and
/// its ancestors': `memory.max` on cgroup v2, `memory.limit_in_bytes` on
/// v1's memory controller (used when that controller is mounted, as on a
/// hybrid node). None when neither limits it.
pub fn cgroup_memory_limit() -> Option<(u64, String)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // v1: `N:memory[,...]:/path`; v2: `0::/path`.
    let v1 = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    });
    let (path, fstype, file) = match v1 {
        Some(p) => (p, "cgroup", "memory.limit_in_bytes"),
        None => (
            own.lines().find_map(|l| l.strip_prefix("0::"))?.to_string(),
            "cgroup2",
            "memory.max",
        ),
    };
    // The mount of that hierarchy: `ID PARENT MAJ:MIN ROOT POINT OPTS... -
    // FSTYPE SOURCE SUPEROPTS`.
    let (root, point) = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        if r.next()? != fstype {
            return None;
        }
        let superopts = r.nth(1).unwrap_or_default();
        if fstype == "cgroup" && !superopts.split(',').any(|o| o == "memory") {
            return None;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        Some((f.get(3)?.to_string(), f.get(4)?.to_string()))
    })?;
    let relative = path.strip_prefix(root.as_str()).unwrap_or(&path);
    let mut dir = std::path::PathBuf::from(&point);
    dir.extend(relative.split('/').filter(|c| !c.is_empty()));
    let mut tightest: Option<(u64, String)> = None;
    let top = std::path::PathBuf::from(&point);
    let mut at = Some(dir.as_path());
    while let Some(d) = at {
        if let Some(limit) = std::fs::read_to_string(d.join(file))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            // v1 says "no limit" with a number near 2^63.
            .filter(|n| *n < 1 << 62)
        {
            if tightest.as_ref().is_none_or(|(t, _)| limit < *t) {
                tightest = Some((limit, d.join(file).display().to_string()));
            }
        }
        if d == top {
            break;
        }
        at = d.parent();
    }
    tightest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_costs_its_largest_step_with_its_delegate() {
        let defaults = call_bytes(None);
        assert_eq!(request_bytes(&json!({})), defaults);
        let conf = json!({"chain": [
            {"type": "bridge", "ipam": {"type": "host-local"}},
            {"type": "portmap", "wasm": {"memoryBytes": 1 << 20}},
            {"type": "big", "wasm": {"memoryBytes": 100 << 20, "maxResultBytes": 1 << 20}},
        ]});
        let big = (100 << 20) + (4 << 20) + (1 << 20) + CALL_OVERHEAD_BYTES;
        assert_eq!(request_bytes(&conf), big.max(2 * defaults));
        let small = json!({"chain": [{"type": "x", "wasm": {"memoryBytes": 8 << 20},
            "ipam": {"type": "y", "wasm": {"memoryBytes": 8 << 20}}}]});
        assert_eq!(
            request_bytes(&small),
            2 * ((8 << 20) + (4 << 20) + (1 << 20) + CALL_OVERHEAD_BYTES)
        );
    }

    #[test]
    fn requests_wait_for_room_and_are_refused_past_their_deadline() {
        use std::time::Duration;
        let stop = Arc::new(AtomicBool::new(false));
        let slots = Arc::new(Slots::new(8, Some(100)));
        let soon = || Instant::now() + Duration::from_millis(30);
        let a = slots.take(60, soon(), &stop).unwrap();
        // Does not fit beside the first: waits, then is late.
        assert_eq!(
            slots.take(50, soon(), &stop).err(),
            Some(Refused::Late {
                need: 50,
                held: 60,
                busy: 1,
                budget: Some(100)
            })
        );
        // Never fits: refused at once.
        assert_eq!(
            slots.take(101, soon(), &stop).err(),
            Some(Refused::TooLarge {
                need: 101,
                budget: 100
            })
        );
        // Fits once the first is done.
        let (s, st) = (slots.clone(), stop.clone());
        let waiter = std::thread::spawn(move || {
            s.take(50, Instant::now() + Duration::from_secs(10), &st)
                .map(drop)
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(a);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        // The count bounds too, and stopping wakes every waiter.
        let one = Arc::new(Slots::new(1, None));
        let held = one.take(u64::MAX, soon(), &stop).unwrap();
        let (s, st) = (one.clone(), stop.clone());
        let waiter = std::thread::spawn(move || {
            s.take(1, Instant::now() + Duration::from_secs(10), &st)
                .map(drop)
        });
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::SeqCst);
        one.wake_all();
        assert_eq!(waiter.join().unwrap(), Err(Refused::Stopping));
        // The drain waits for what holds a slot, within its bound.
        let started = Instant::now();
        assert!(!one.wait_idle_until(started + Duration::from_millis(50)));
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(held);
        assert!(one.wait_idle_until(Instant::now() + Duration::from_secs(5)));
        assert_eq!(one.busy(), 0);
    }

    #[test]
    fn this_machines_cgroup_limit_reads() {
        // Whatever this machine says (often no limit): never a panic, and a
        // number read is a real limit with the file it came from.
        if let Some((limit, file)) = cgroup_memory_limit() {
            assert!(limit > 0 && limit < 1 << 62, "{limit} from {file}");
            assert!(file.starts_with("/sys/fs/cgroup"), "{file}");
        }
    }
}
