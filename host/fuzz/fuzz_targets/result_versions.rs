//! CNI results between versions (`cni::result`): what a runtime passes as
//! `prevResult` and what a plugin returns are parsed, converted to every
//! version and parsed again.
//!
//! Properties: no panic; whatever `to_json(r, v)` writes, `parse(_, v)`
//! reads back; converting to a 0.3.0–1.1.0 version keeps every address (in
//! order) and writing the re-read result again gives the same JSON; a
//! legacy 0.1.0/0.2.0 result keeps the first address of each family; the
//! pretty printer's output is the same JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wasm_cni_protocol::result::{parse, to_string_pretty, CniResult};

const VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

fn addresses(r: &CniResult) -> Vec<String> {
    r.ips.iter().map(|ip| ip.address.clone()).collect()
}

fn is_v4(a: &str) -> bool {
    !a.contains(':')
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for from in VERSIONS {
        let Ok(r) = parse(&value, from) else {
            continue;
        };
        for to in VERSIONS {
            let Ok(json) = r.to_json(to) else {
                continue;
            };
            let text = to_string_pretty(&json);
            let reread: Value = serde_json::from_str(&text).expect("pretty output is JSON");
            assert_eq!(reread, json);
            let back = parse(&json, to)
                .unwrap_or_else(|e| panic!("{to} output does not parse: {e}: {json}"));
            if to.starts_with("0.1") || to.starts_with("0.2") {
                for v4 in [true, false] {
                    let first = |r: &CniResult| addresses(r).into_iter().find(|a| is_v4(a) == v4);
                    assert_eq!(first(&back), first(&r), "{json}");
                }
            } else {
                assert_eq!(addresses(&back), addresses(&r), "{json}");
                assert_eq!(back.to_json(to).expect("again"), json);
            }
        }
    }
});
