//! The CNI edge: environment and stdin as a runtime passes them, through
//! `edge::prepare` (everything `wasm-cni` does before it touches the
//! machine: no file, namespace or plugin is opened).
//!
//! Input: `KEY=VALUE` lines, an empty line, then stdin (bytes). Properties:
//! no panic; a reply is valid JSON (or empty) with exit code 0 or 1, and an
//! error reply carries a numeric `code`; a config that is accepted yields a
//! request config for every chain entry and verb that serialises and reads
//! back as a JSON object.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wasm_cni_engine::edge::{prepare, Prepared};

fuzz_target!(|data: &[u8]| {
    let (env, stdin) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let vars: Vec<(String, String)> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match prepare(vars, &mut &stdin[..]) {
        Prepared::Reply(out) => {
            assert!(out.exit_code == 0 || out.exit_code == 1, "{out:?}");
            if !out.stdout.is_empty() {
                let v: Value = serde_json::from_str(&out.stdout)
                    .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {}", out.stdout));
                if out.exit_code == 1 {
                    assert!(v["code"].is_u64(), "{}", out.stdout);
                }
            }
        }
        Prepared::Dispatch(_inv, conf) => {
            assert!(wasm_cni_protocol::version::SUPPORTED.contains(&conf.cni_version.as_str()));
            let prev = conf.prev_result.clone();
            for entry in &conf.chain {
                assert!(!entry.plugin_type.is_empty() && !entry.plugin_type.contains('/'));
                for gc_or_status in [false, true] {
                    let map = conf.plugin_config(entry, prev.as_ref(), gc_or_status);
                    let text = serde_json::to_string(&Value::Object(map)).expect("serialise");
                    let back: Value = serde_json::from_str(&text).expect("read back");
                    assert!(back.is_object());
                    assert_eq!(back["name"], Value::from(conf.name.as_str()));
                }
            }
        }
    }
});
