//! The data of one plugin call's `Store`: what the host imports work with.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::host_network::NetAccess;
use super::limits::MemoryCap;
use super::policy::Side;
use super::{AbortCause, Services};
use wasm_cni_kernel::net::NsId;
use wasm_cni_protocol::Command;
use wasm_cni_store::{Owner, Scope, StateStore, Txn};

/// The store scope a call may use, with the owner and verb the host set.
#[derive(Clone)]
pub struct StoreAccess {
    pub backend: Arc<dyn StateStore>,
    pub scope: Scope,
    pub owner: Owner,
    pub command: Command,
}

pub struct Ctx {
    pub(crate) table: ResourceTable,
    /// Deny-all WASI: no environment, arguments, preopened directories or
    /// sockets; stdio closed. Components built for wasm32-wasip2 import WASI
    /// even when they use none of it, and must still instantiate. Made at
    /// the first WASI call: a context seeds a random generator (reading
    /// `/dev/urandom` in a static binary), 1.7 % of a per-invocation call
    /// whose components import no WASI.
    pub(crate) wasi: Option<WasiCtx>,
    pub(crate) memory: MemoryCap,
    /// The plugin's type, to name it in logs and errors.
    pub(crate) plugin: String,
    pub(crate) host_calls_left: u64,
    /// The budget this call started with, for the cause it stops with.
    host_call_budget: u64,
    /// Set by a WASI call past the budget (which cannot fail itself), for
    /// [`budget_hook`] to trap on.
    pub(crate) host_calls_exhausted: bool,
    /// When the call must be over: every wait the host does for the plugin
    /// (a WASI sleep, the store lock, an IPAM delegate) ends by then.
    pub(crate) deadline: Instant,
    /// The configured deadline, for the cause a call stops with.
    deadline_ms: u64,
    /// The call changed (or asked to change) something beyond its state:
    /// a link, a rule, an IPAM delegate's allocation. Such a call is not
    /// run again when its state commit conflicts.
    pub(crate) acted: bool,
    /// Bytes logged in this call, against [`super::host_log::MAX_LOG_BYTES`].
    pub(crate) log_bytes: usize,
    /// Links this call found to still be the ones the attachment created
    /// (side, namespace, name, ifindex): checked once per call.
    pub(crate) verified: HashSet<(Side, NsId, String, u32)>,
    pub(crate) services: Arc<dyn Services>,
    pub(crate) store: Option<StoreAccess>,
    pub(crate) net: Option<NetAccess>,
    /// Open on the first store call; committed only if the call succeeds.
    pub(crate) txn: Option<Box<dyn Txn>>,
    /// Size of the transaction's scope, as `host_store` bounds it.
    pub(crate) scope_bytes: usize,
    /// Files the call's config lets the plugin read (`files` import).
    pub(crate) config_files: Vec<String>,
    pub(crate) faults: Option<Arc<super::Faults>>,
}

impl Ctx {
    pub fn new(
        plugin: &str,
        memory: MemoryCap,
        host_call_budget: u64,
        deadline: Instant,
        deadline_ms: u64,
        services: Arc<dyn Services>,
    ) -> Self {
        let store = services.store();
        let net = services.net();
        let faults = services.faults();
        Ctx {
            faults,
            store,
            net,
            txn: None,
            scope_bytes: 0,
            config_files: Vec::new(),
            table: ResourceTable::new(),
            wasi: None,
            memory,
            plugin: plugin.to_string(),
            host_calls_left: host_call_budget,
            host_call_budget,
            host_calls_exhausted: false,
            deadline,
            deadline_ms,
            acted: false,
            log_bytes: 0,
            verified: HashSet::new(),
            services,
        }
    }

    /// Whether this host call is the one to fail (`plugin test --faults`).
    pub(crate) fn inject(&self, what: impl FnOnce() -> String) -> bool {
        self.faults.as_ref().is_some_and(|f| f.next(what))
    }

    /// Report host work to the call's services, when they want it.
    pub(crate) fn record(
        &self,
        kind: &'static str,
        what: impl FnOnce() -> String,
        started: Instant,
        refused: bool,
    ) {
        if self.services.wants_work() {
            self.services.record(super::HostWork {
                kind,
                what: what(),
                started: std::time::SystemTime::now() - started.elapsed(),
                took: started.elapsed(),
                refused,
            });
        }
    }

    /// Account for one host call; trap once the budget is spent so a plugin
    /// cannot keep the host busy in a loop of cheap imports.
    pub(crate) fn charge(&mut self) -> wasmtime::Result<()> {
        if !self.take_one() {
            return Err(self.abort(AbortCause::HostCalls {
                budget: self.host_call_budget,
            }));
        }
        Ok(())
    }

    /// The error that stops the plugin for `cause`: it traps, and the
    /// caller finds the cause in the trap.
    pub(crate) fn abort(&self, cause: AbortCause) -> wasmtime::Error {
        wasmtime::Error::new(cause)
    }

    /// Spend one call of the budget; false (and remembered) once spent.
    fn take_one(&mut self) -> bool {
        if self.host_calls_left == 0 {
            self.host_calls_exhausted = true;
            return false;
        }
        self.host_calls_left -= 1;
        true
    }

    /// The error that stops a plugin the host found past its deadline.
    pub(crate) fn deadline_reached(&self) -> wasmtime::Error {
        self.abort(AbortCause::Deadline {
            ms: self.deadline_ms,
        })
    }

    /// Time left until the deadline (zero once it has passed).
    pub(crate) fn remaining(&self) -> std::time::Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Installed on every plugin store: a WASI call that went over the budget
/// (counted in [`WasiView::ctx`], which wasmtime-wasi calls once per import)
/// traps as it returns, before the plugin runs again.
pub(crate) fn budget_hook(
    ctx: wasmtime::StoreContextMut<'_, Ctx>,
    hook: wasmtime::CallHook,
) -> wasmtime::Result<()> {
    let ctx = ctx.data();
    if matches!(hook, wasmtime::CallHook::ReturningFromHost) && ctx.host_calls_exhausted {
        return Err(ctx.abort(AbortCause::HostCalls {
            budget: ctx.host_call_budget,
        }));
    }
    Ok(())
}

/// WASI with nothing in it. The builder's defaults already grant nothing;
/// saying so here keeps it that way if a default changes: no preopened
/// directory (so no path can be named), no environment, no arguments,
/// closed stdio, no socket of any kind and no name lookup (socket creation
/// itself is refused, so the host opens no descriptor for a plugin).
fn deny_all_wasi() -> WasiCtx {
    let mut b = WasiCtx::builder();
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    b.build()
}

impl WasiView for Ctx {
    /// Every WASI import reaches the context through here, exactly once per
    /// call: that is where WASI calls are charged ([`budget_hook`] traps).
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.take_one();
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(deny_all_wasi),
            table: &mut self.table,
        }
    }
}
