//! Per-call resource limits: memory, CPU time, host calls, result size.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

use wasm_cni_protocol::config::Limits;

/// Linear memory a plugin may grow to, per call.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
/// Wall-clock CPU deadline per call. Generous: a plugin waits for nothing
/// (the host does any waiting), so only a broken plugin comes near it.
pub const DEFAULT_DEADLINE_MS: u64 = 10_000;
/// Host imports a plugin may call per invocation.
pub const DEFAULT_HOST_CALL_BUDGET: u64 = 10_000;
/// Size of a result, serialised as JSON.
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 1 << 20;

/// `plugin test`'s whole-run bound unless `--max-seconds` says otherwise:
/// the bundled plugins' whole fault sweeps take under a second each; a
/// component that spins into every deadline would otherwise set the run
/// time itself ((host calls + 1) × deadline). Here, not in `plugin_test`,
/// because the CLI of the binary without the model shows it too.
pub const PLUGIN_TEST_MAX_SECONDS: u64 = 120;

/// What the host copies out of a plugin in one go: an import's arguments,
/// or its answer (wasmtime's hostcall fuel, which counts the bytes of each
/// string and list, and each element as the host's type holds it).
/// Imports take little (a log line is kept to 4 KiB, a store value to 64
/// KiB, a lookup to 1024 keys); an answer's bound follows its
/// `maxResultBytes`, with room for the host's layout being larger than
/// the answer's JSON.
pub const TRANSFER_FLOOR: usize = 1 << 20;

pub fn transfer_bytes(max_result_bytes: u64) -> usize {
    usize::try_from(max_result_bytes.saturating_mul(4))
        .unwrap_or(usize::MAX)
        .max(TRANSFER_FLOOR)
}

/// Whether `err` is wasmtime's refusal to copy past [`transfer_bytes`]:
/// its error type is private, its message is not (and the version is
/// pinned; `the_transfer_bound_is_told_apart` holds it to it).
pub fn is_transfer_bound(err: &wasmtime::Error) -> bool {
    err.chain().any(|e| {
        e.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    })
}

/// Granularity of the deadline: the epoch advances every tick.
pub const TICK: Duration = Duration::from_millis(5);

/// Limits with every default filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    pub memory_bytes: u64,
    pub deadline_ms: u64,
    pub host_call_budget: u64,
    pub max_result_bytes: u64,
}

impl Effective {
    pub fn resolve(limits: &Limits) -> Self {
        Effective {
            memory_bytes: limits.memory_bytes.unwrap_or(DEFAULT_MEMORY_BYTES),
            deadline_ms: limits.deadline_ms.unwrap_or(DEFAULT_DEADLINE_MS),
            host_call_budget: limits.host_call_budget.unwrap_or(DEFAULT_HOST_CALL_BUDGET),
            max_result_bytes: limits.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES),
        }
    }

    /// Epoch ticks until the deadline, rounded up, at least one.
    pub fn deadline_ticks(&self) -> u64 {
        let tick = TICK.as_millis() as u64;
        self.deadline_ms.div_ceil(tick).max(1)
    }
}

/// What one attachment's ADD may add to kernel state the node shares, or
/// that costs the node to keep and to take down (every rule makes each rule
/// add of every network dearer; every link makes DEL and rollback longer).
/// Far above what the bundled plugins need (a veth pair, an ifb, a tap; a
/// gateway address and a host route per family; masquerade, hairpin and
/// forward rules per address): beyond them the host refuses, naming the cap.
pub mod caps {
    /// Links created, in both namespaces together.
    pub const LINKS: usize = 8;
    /// Addresses and routes added in the node namespace.
    pub const NODE_ADDRESSES_AND_ROUTES: usize = 16;
    /// Traffic-control objects: rate limits and ingress redirects (a
    /// redirect counts its two links).
    pub const TC: usize = 8;
    /// Packet-filter rules, plus [`RULES_PER_PORT_MAPPING`] for each entry
    /// of the plugin's `runtimeConfig.portMappings` (those the runtime asks
    /// for are what a port map may be: the runtime, not the plugin, decides
    /// how many).
    pub const RULES: usize = 32;
    pub const RULES_PER_PORT_MAPPING: usize = 2;
}

/// Instances, memories and tables one call may create. A component made by
/// wit-component has a handful of each; the limits stop a hand-written one
/// from multiplying host-side structures.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_MEMORIES: usize = 8;
pub const MAX_TABLES: usize = 64;
/// Table elements (function references, 8 bytes each on the host) across
/// every table of a call.
pub const MAX_TABLE_ELEMENTS: usize = 1_000_000;
/// What one table element takes on the host.
const TABLE_ELEMENT_BYTES: usize = 8;

/// A call's linear memory kept resident in a daemon's pool slot after the
/// call: reset by `memset` of the pages it touched (found with
/// `PAGEMAP_SCAN`), not unmapped, so the next call on the slot neither
/// faults them in again nor makes the kernel shoot down other CPUs' TLB
/// entries. Beyond it, a slot's pages are given back (`madvise`). 256 KiB
/// was as fast as 1 MiB here and kept a quarter of the memory
/// (host/bench/results/findings.md).
pub const POOL_KEEP_RESIDENT: usize = 256 << 10;
/// Slots that hold no instance but keep their resident pages for the module
/// last in them. Past this many, a new instance takes the least recently
/// used of them rather than a slot never used, so the slots a daemon ever
/// touches (each up to [`POOL_KEEP_RESIDENT`] resident) stay close to its
/// busiest concurrency.
pub const POOL_WARM_SLOTS: u32 = 8;

/// The daemon's instance pool, for `calls` stores alive at once (requests
/// in flight, each a plugin and its IPAM delegate).
///
/// Slots are reused rather than mapped and unmapped per call. What a slot
/// can hold is what any one call may have, and the pool has room for every
/// call at its caps at once, so that no call, however hostile, can take the
/// room another needs: a pool that ran out would fail calls of other
/// networks and tenants, which per-call allocation never did. Each memory
/// slot reserves the 4 GiB a 32-bit memory can reach (so no configured
/// `memoryBytes` is beyond it; the [`MemoryCap`] still bounds each call),
/// as address space only: pages exist as they are touched.
pub fn instance_pool(calls: u32) -> wasmtime::PoolingAllocationConfig {
    let calls = calls.max(1);
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(calls)
        .total_core_instances(calls.saturating_mul(MAX_INSTANCES as u32))
        .max_core_instances_per_component(MAX_INSTANCES as u32)
        .total_memories(calls.saturating_mul(MAX_MEMORIES as u32))
        .max_memories_per_component(MAX_MEMORIES as u32)
        .max_memories_per_module(MAX_MEMORIES as u32)
        .max_memory_size(1 << 32)
        .total_tables(calls.saturating_mul(MAX_TABLES as u32))
        .max_tables_per_component(MAX_TABLES as u32)
        .max_tables_per_module(MAX_TABLES as u32)
        .table_elements(MAX_TABLE_ELEMENTS)
        .linear_memory_keep_resident(POOL_KEEP_RESIDENT)
        .table_keep_resident(64 << 10)
        .max_unused_warm_slots(POOL_WARM_SLOTS)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// Caps what a call's instance holds — its linear memories, its tables
/// and the state scope the host keeps for it — and remembers that it did,
/// so the host can say "memory limit" instead of reporting the allocator's
/// abort. A daemon admits calls by this cap (`daemon::admission`).
///
/// The cap is on the sum over every memory of the call's instance: a
/// component may define several core memories (multi-memory, or several
/// core modules), and a per-memory cap would let each take the whole limit.
#[derive(Debug)]
pub struct MemoryCap {
    pub max_bytes: usize,
    /// Bytes held by every memory together.
    memory_total: usize,
    /// Elements held by every table together.
    table_total: usize,
    /// Grows of a memory that already existed: a call that fits its
    /// initial memory makes none (and so no change of page protections).
    grown: u32,
    /// What the host holds for the call beyond its linear memory (its
    /// state scope), counted against the same cap.
    host_held: usize,
}

impl MemoryCap {
    pub fn new(max_bytes: u64) -> Self {
        MemoryCap {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            memory_total: 0,
            table_total: 0,
            grown: 0,
            host_held: 0,
        }
    }

    /// The host now holds `bytes` for this call (replacing what it held
    /// before); refused, as a memory grow past the cap is, when the call's
    /// memory and these together would be over it.
    pub fn hold(&mut self, bytes: usize) -> Result<(), super::AbortCause> {
        let total = self
            .memory_total
            .saturating_add(self.table_total.saturating_mul(TABLE_ELEMENT_BYTES))
            .saturating_add(bytes);
        if bytes > self.host_held && total > self.max_bytes {
            return Err(super::AbortCause::Memory {
                limit: self.max_bytes as u64,
                wanted: total as u64,
            });
        }
        self.host_held = bytes;
        Ok(())
    }

    /// Bytes of linear memory held now, and how many times a memory grew
    /// after it was created.
    pub fn usage(&self) -> (usize, u32) {
        (self.memory_total, self.grown)
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Creation is a grow from 0, so every memory is counted.
        let total = self
            .memory_total
            .saturating_sub(current)
            .saturating_add(desired);
        let tables = self.table_total.saturating_mul(TABLE_ELEMENT_BYTES);
        if total.saturating_add(self.host_held).saturating_add(tables) > self.max_bytes {
            // Trap right here rather than let the guest's allocator see a
            // failed grow: the trap carries the cause, an abort would not.
            return Err(wasmtime::Error::new(super::AbortCause::Memory {
                limit: self.max_bytes as u64,
                wanted: total.saturating_add(self.host_held).saturating_add(tables) as u64,
            }));
        }
        self.memory_total = total;
        if current > 0 {
            self.grown = self.grown.saturating_add(1);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a plugin needs few. Bound them,
        // and count them against the cap as memory: they are the host's
        // memory the plugin grows.
        let total = self
            .table_total
            .saturating_sub(current)
            .saturating_add(desired);
        let bytes = self
            .memory_total
            .saturating_add(self.host_held)
            .saturating_add(total.saturating_mul(TABLE_ELEMENT_BYTES));
        if total > MAX_TABLE_ELEMENTS || (desired > current && bytes > self.max_bytes) {
            return Ok(false);
        }
        self.table_total = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// Advances the engine's epoch every [`TICK`] while a call runs, and
/// sleeps while none does: a daemon waiting for requests wakes no one.
pub struct Ticker {
    shared: Arc<TickState>,
}

struct TickState {
    /// Calls running now, and whether the ticker should end.
    state: Mutex<(usize, bool)>,
    wake: Condvar,
}

/// Held by a running call: the epoch advances while any exists.
pub struct Running(Arc<TickState>);

impl Ticker {
    pub fn start(engine: &Engine) -> Self {
        let shared = Arc::new(TickState {
            state: Mutex::new((0, false)),
            wake: Condvar::new(),
        });
        let engine = engine.clone();
        let state = shared.clone();
        // A detached thread: if spawning fails the deadline cannot fire, so
        // treat that as fatal at start-up rather than run unbounded.
        let spawned = thread::Builder::new()
            .name("wasm-cni-epoch".into())
            .spawn(move || loop {
                {
                    let Ok(mut s) = state.state.lock() else {
                        return;
                    };
                    while s.0 == 0 && !s.1 {
                        s = match state.wake.wait(s) {
                            Ok(s) => s,
                            Err(_) => return,
                        };
                    }
                    if s.1 {
                        return;
                    }
                }
                thread::sleep(TICK);
                engine.increment_epoch();
            });
        if let Err(e) = spawned {
            eprintln!("wasm-cni: cannot start the deadline timer: {e}");
            std::process::exit(1);
        }
        Ticker { shared }
    }

    /// Mark a call as running until the guard drops.
    pub fn running(&self) -> Running {
        if let Ok(mut s) = self.shared.state.lock() {
            s.0 += 1;
        }
        self.shared.wake.notify_all();
        Running(self.shared.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.state.lock() {
            s.0 = s.0.saturating_sub(1);
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.1 = true;
        }
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one call at every cap holds: 64 instances, 8 memories and 64
    /// tables (of a million elements between them).
    fn call_at_its_caps(engine: &Engine) -> wasmtime::Result<wasmtime::Store<MemoryCap>> {
        let big = format!(
            "(module {} (table {} funcref) {})",
            "(memory 1) ".repeat(MAX_MEMORIES),
            MAX_TABLE_ELEMENTS - (MAX_TABLES - 1),
            "(table 1 funcref) ".repeat(MAX_TABLES - 1),
        );
        let big = wasmtime::Module::new(engine, wat::parse_str(big)?)?;
        let empty = wasmtime::Module::new(engine, wat::parse_str("(module)")?)?;
        let mut store = wasmtime::Store::new(engine, MemoryCap::new(DEFAULT_MEMORY_BYTES));
        store.limiter(|c| c);
        wasmtime::Instance::new(&mut store, &big, &[])?;
        for _ in 1..MAX_INSTANCES {
            wasmtime::Instance::new(&mut store, &empty, &[])?;
        }
        Ok(store)
    }

    #[test]
    fn the_pool_holds_every_call_at_its_caps_at_once() {
        // A call that takes all it may must leave the others theirs: the
        // pool is sized for that, and runs out only past its `calls`.
        let mut config = super::super::engine_config();
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
            instance_pool(2),
        ));
        let engine = Engine::new(&config).unwrap();
        let first = call_at_its_caps(&engine).unwrap();
        let second = call_at_its_caps(&engine).unwrap();
        let third = call_at_its_caps(&engine).map(|_| ()).unwrap_err();
        assert!(third.to_string().contains("concurrent"), "{third:?}");
        drop((first, second));
        // Slots come back with the calls.
        call_at_its_caps(&engine).unwrap();
    }

    #[test]
    fn defaults_fill_gaps_and_overrides_win() {
        let l = Limits {
            deadline_ms: Some(12),
            ..Default::default()
        };
        let e = Effective::resolve(&l);
        assert_eq!(e.deadline_ms, 12);
        assert_eq!(e.memory_bytes, DEFAULT_MEMORY_BYTES);
        assert_eq!(e.deadline_ticks(), 3);
        let z = Effective::resolve(&Limits {
            deadline_ms: Some(0),
            ..Default::default()
        });
        assert_eq!(z.deadline_ticks(), 1);
    }

    /// The cause a refused grow traps with.
    fn refused(r: wasmtime::Result<bool>) -> super::super::AbortCause {
        match r {
            Err(e) => e
                .downcast::<super::super::AbortCause>()
                .unwrap_or_else(|e| panic!("not an abort cause: {e}")),
            Ok(grew) => panic!("not refused (grew: {grew})"),
        }
    }

    #[test]
    fn memory_cap_refuses_naming_the_cause() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 1 << 20, None).unwrap());
        assert_eq!(
            refused(cap.memory_growing(1 << 20, 2 << 20, None)),
            super::super::AbortCause::Memory {
                limit: 1 << 20,
                wanted: 2 << 20
            }
        );
    }

    #[test]
    fn memory_cap_is_shared_by_every_memory() {
        // Two memories of 600 KiB each fit a 1 MiB cap one by one, not
        // together.
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 600 << 10, None).unwrap());
        assert_eq!(
            refused(cap.memory_growing(0, 600 << 10, None)),
            super::super::AbortCause::Memory {
                limit: 1 << 20,
                wanted: 1200 << 10
            }
        );
        // Growing one memory counts only the difference.
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 256 << 10, None).unwrap());
        assert!(cap.memory_growing(256 << 10, 768 << 10, None).unwrap());
        assert!(cap.memory_growing(0, 512 << 10, None).is_err());
    }

    #[test]
    fn creating_a_memory_is_not_counted_as_growing_it() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 128 << 10, None).unwrap());
        assert!(cap.memory_growing(0, 64 << 10, None).unwrap());
        assert_eq!(cap.usage(), (192 << 10, 0));
        assert!(cap.memory_growing(64 << 10, 128 << 10, None).unwrap());
        assert_eq!(cap.usage(), (256 << 10, 1));
        // A refused grow holds nothing more and is not counted.
        assert!(cap.memory_growing(128 << 10, 2 << 20, None).is_err());
        assert_eq!(cap.usage(), (256 << 10, 1));
    }

    #[test]
    fn table_elements_are_bounded_in_total() {
        let mut cap = MemoryCap::new(16 << 20);
        assert!(cap.table_growing(0, MAX_TABLE_ELEMENTS, None).unwrap());
        assert!(!cap.table_growing(0, 1, None).unwrap());
    }

    #[test]
    fn tables_and_what_the_host_holds_count_against_the_cap() {
        // 1 MiB: 128 Ki table elements of 8 bytes, or memory, or both.
        let mut cap = MemoryCap::new(1 << 20);
        assert!(!cap.table_growing(0, 128 << 10 | 1, None).unwrap());
        assert!(cap.table_growing(0, 64 << 10, None).unwrap());
        assert!(cap
            .memory_growing(0, (512 << 10) + (64 << 10), None)
            .is_err());
        assert!(cap.memory_growing(0, 256 << 10, None).unwrap());
        // The host's hold fits what is left, or is refused.
        assert!(cap.hold(512 << 10).is_err());
        cap.hold(256 << 10).unwrap();
        // Less is always allowed, and frees room.
        cap.hold(0).unwrap();
        assert!(cap.memory_growing(256 << 10, 512 << 10, None).unwrap());
    }
}
