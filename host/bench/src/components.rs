//! Item 4: what the sandbox costs, measured in-process through the
//! `wasm_cni` library — engine set-up, cold first call, warm load per
//! component, host→guest call round trip.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use wasm_cni_engine::sandbox::{
    wit, Call, CniResultWit, IpamOp, Limits, NetAccess, Runtime, Services,
};
use wasm_cni_engine::sandbox::{Origin, StoreAccess};
use wasm_cni_protocol::config::Limits as ConfLimits;
use wasm_cni_protocol::{CniError, ErrorCode};

use crate::stats::{summarize, Summary};

/// Services for a plugin that uses none: the fixture `fx` only logs.
struct NoServices;

impl Services for NoServices {
    fn ipam(&self, _: IpamOp, _: std::time::Instant) -> Result<Option<CniResultWit>, CniError> {
        Err(CniError::new(ErrorCode::Internal, "no IPAM in the bench"))
    }
    fn store(&self) -> Option<StoreAccess> {
        None
    }
    fn net(&self) -> Option<NetAccess> {
        None
    }
}

pub struct Costs {
    /// `Runtime::new`: config, engine, linker (plugin + WASI imports),
    /// cache, epoch ticker. ms.
    pub engine_setup: Summary,
    /// Empty artifact cache: engine + compile + instantiate + one ADD of
    /// `fx`, ms.
    pub cold_fx: Summary,
    /// Compiling `bridge` alone (empty cache), ms.
    pub cold_bridge_load: Summary,
    /// Per component, artifact cached: read + digest + deserialize +
    /// pre-link, ms.
    pub warm_load: Vec<(String, Summary)>,
    /// A fresh store, instantiation and one ADD call of `fx`, µs.
    pub round_trip: Summary,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn fx_request() -> wit::Request {
    wit::Request {
        container_id: "bench".into(),
        ifname: "eth0".into(),
        netns: Some("/run/netns/bench".into()),
        args: Vec::new(),
        config: r#"{"cniVersion":"1.1.0","name":"benchnet","type":"fx","tag":"bench"}"#.into(),
        prev_result: None,
    }
}

fn call_fx(rt: &Runtime, limits: Limits) -> io::Result<()> {
    let fx = rt.load("fx", None).map_err(io_err)?;
    let req = fx_request();
    rt.call(&fx, limits, Arc::new(NoServices), Call::Add(&req))
        .map_err(io_err)?;
    Ok(())
}

/// `plugins`: a directory with `<type>.wasm` for `fx` and the plugins;
/// `scratch`: an empty directory for caches.
pub fn measure(plugins: &Path, scratch: &Path, cold_reps: usize, reps: usize) -> io::Result<Costs> {
    let limits = Limits::resolve(&ConfLimits::default());
    let warm_cache = scratch.join("warm");

    // Engine set-up. The first one in a process also pays one-time
    // initialisation; a plugin process pays that too, so it is kept.
    let mut setup = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let rt = Runtime::new(plugins, Some(warm_cache.clone())).map_err(io_err)?;
        setup.push(ms_since(t));
        drop(rt);
    }

    // Cold: a new engine and an empty cache each time.
    let mut cold_fx = Vec::new();
    let mut cold_bridge = Vec::new();
    for i in 0..cold_reps {
        crate::proc::check_interrupted()?;
        let cache = scratch.join(format!("cold-{i}"));
        let t = Instant::now();
        let rt = Runtime::new(plugins, Some(cache.clone())).map_err(io_err)?;
        call_fx(&rt, limits)?;
        cold_fx.push(ms_since(t));
        let t = Instant::now();
        let p = rt.load("bridge", None).map_err(io_err)?;
        cold_bridge.push(ms_since(t));
        if p.origin != Origin::Compiled {
            return Err(io::Error::other("cold load did not compile"));
        }
        drop(rt);
        let _ = std::fs::remove_dir_all(&cache);
    }

    // Warm loads: fill the cache once, then a fresh runtime per sample so
    // its in-memory map is empty and the artifact is read from disk.
    let names = ["fx", "bridge", "host-local", "tuning", "loopback"];
    {
        let rt = Runtime::new(plugins, Some(warm_cache.clone())).map_err(io_err)?;
        for n in names {
            rt.load(n, None).map_err(io_err)?;
        }
    }
    let mut warm_load = Vec::new();
    for n in names {
        let mut v = Vec::new();
        for _ in 0..reps {
            let rt = Runtime::new(plugins, Some(warm_cache.clone())).map_err(io_err)?;
            let t = Instant::now();
            let p = rt.load(n, None).map_err(io_err)?;
            v.push(ms_since(t));
            if p.origin != Origin::Cached {
                return Err(io::Error::other(format!("{n}: warm load compiled")));
            }
        }
        warm_load.push((n.to_string(), summarize(&v)));
    }

    // Round trip: one loaded plugin, a fresh store per call.
    let rt = Runtime::new(plugins, Some(warm_cache)).map_err(io_err)?;
    call_fx(&rt, limits)?;
    let mut rt_us = Vec::new();
    for _ in 0..reps * 10 {
        let t = Instant::now();
        call_fx(&rt, limits)?;
        rt_us.push(t.elapsed().as_secs_f64() * 1e6);
    }

    Ok(Costs {
        engine_setup: summarize(&setup),
        cold_fx: summarize(&cold_fx),
        cold_bridge_load: summarize(&cold_bridge),
        warm_load,
        round_trip: summarize(&rt_us),
    })
}
