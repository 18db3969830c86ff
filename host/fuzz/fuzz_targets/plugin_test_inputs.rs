//! `wasm-cni plugin test`'s inputs: the plugin's config, a prevResult and
//! the cniVersion override, as an author types them (`plugin_test::prepare`:
//! the config wrapped as a chain, the kernel model staged from the
//! prevResult, each verb's config parsed; no component runs).
//!
//! Properties: no panic; a prevResult that stages once stages the same way
//! again after the namespace is removed and made anew.

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wasm_cni_engine::sandbox::Runtime;
use wasm_cni_testing::{prepare, Options, Unprepared};

fn runtime() -> Option<Arc<Runtime>> {
    static RT: OnceLock<Option<Arc<Runtime>>> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(std::path::Path::new("/tmp"), None)
            .ok()
            .map(Arc::new)
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    // config \0 prevResult \0 version
    let mut parts = data.splitn(3, |b| *b == 0);
    let Some(Ok(config)) = parts.next().map(serde_json::from_slice::<Value>) else {
        return;
    };
    let prev_result = parts
        .next()
        .and_then(|p| serde_json::from_slice::<Value>(p).ok());
    let cni_version = parts
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_string);
    let Some(rt) = runtime() else { return };
    let opts = Options {
        plugin: "/tmp/fuzzed.wasm".into(),
        config,
        args: Vec::new(),
        capability_args: None,
        prev_result,
        cni_version,
        faults: false,
        time_limit: std::time::Duration::from_secs(60),
    };
    if let Err(Unprepared::Restaged(why)) = prepare(&opts, rt) {
        panic!("{why}");
    }
});
