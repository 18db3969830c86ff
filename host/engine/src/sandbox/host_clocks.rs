//! `wasi:clocks/monotonic-clock`, in place of wasmtime-wasi's: the one WASI
//! interface through which a plugin can make the host wait. Its pollables
//! (what `wasi:io/poll` blocks on, and what the preview-1 adapter's
//! `poll_oneoff` turns a sleep into) never outlast the call's deadline, so a
//! plugin asking to sleep for an hour, or for `u64::MAX` nanoseconds, wakes
//! at its deadline and is stopped there; once the deadline has passed, a
//! subscription traps at once. Every function is charged to the host-call
//! budget like any other import.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{
    Duration as WasiDuration, Host, Instant as WasiInstant,
};
use wasmtime_wasi::p2::{subscribe, DynPollable, Pollable};

use super::state::Ctx;

/// The clock's origin: the first reading in this process. Plugins see
/// nanoseconds since then, a monotonic value like any other.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A timer that fires at `until`, which is never past the call's deadline.
struct CappedSleep {
    until: tokio::time::Instant,
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedSleep {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.until).await;
    }
}

impl Ctx {
    /// A pollable ready after `wait`, or at the deadline if that is sooner.
    fn capped_sleep(&mut self, wait: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        self.charge()?;
        let now = Instant::now();
        if now >= self.deadline {
            return Err(self.deadline_reached());
        }
        let until = now
            .checked_add(wait)
            .map_or(self.deadline, |t| t.min(self.deadline));
        let sleep = self.table.push(CappedSleep {
            until: until.into(),
        })?;
        subscribe(&mut self.table, sleep)
    }
}

impl Host for Ctx {
    fn now(&mut self) -> wasmtime::Result<WasiInstant> {
        self.charge()?;
        Ok(now_ns())
    }

    fn resolution(&mut self) -> wasmtime::Result<WasiDuration> {
        self.charge()?;
        Ok(1)
    }

    fn subscribe_instant(&mut self, when: WasiInstant) -> wasmtime::Result<Resource<DynPollable>> {
        self.capped_sleep(Duration::from_nanos(when.saturating_sub(now_ns())))
    }

    fn subscribe_duration(
        &mut self,
        wait: WasiDuration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.capped_sleep(Duration::from_nanos(wait))
    }
}
