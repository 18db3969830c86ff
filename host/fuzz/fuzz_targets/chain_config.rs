//! The network config on stdin (`cni::config::parse`), for every verb.
//!
//! Properties: no panic; an accepted config has a supported version, a
//! non-empty chain of safe plugin type names and absolute directories; its
//! own `raw` form, serialised and parsed again, gives the same config (the
//! host re-reads what it wrote without drift); per-plugin limits resolve.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wasm_cni_engine::sandbox::Limits;
use wasm_cni_protocol::config::parse;
use wasm_cni_protocol::{version, Command};

fuzz_target!(|data: &[u8]| {
    for command in Command::ALL {
        let Ok(conf) = parse(data, command) else {
            continue;
        };
        assert!(version::SUPPORTED.contains(&conf.cni_version.as_str()));
        assert!(!conf.chain.is_empty());
        assert!(conf.plugin_dir.is_absolute() && conf.state_dir.is_absolute());
        assert!(conf.cache_dir.as_ref().is_none_or(|d| d.is_absolute()));
        for entry in &conf.chain {
            let t = &entry.plugin_type;
            assert!(!t.is_empty() && !t.contains(['/', '\0']) && t != "." && t != "..");
            let limits = Limits::resolve(&entry.limits);
            assert!(limits.deadline_ticks() >= 1);
            if let Some(pin) = &entry.limits.sha256 {
                assert!(pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()));
                assert_eq!(pin, &pin.to_ascii_lowercase());
            }
        }
        let again = serde_json::to_vec(&Value::Object(conf.raw.clone())).expect("serialise");
        let reparsed = parse(&again, command).expect("the config's own form parses");
        assert_eq!(reparsed, conf);
    }
});
