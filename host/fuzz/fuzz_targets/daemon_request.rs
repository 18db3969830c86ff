//! What a socket peer sends the daemon: `daemon::wire` reads it, and what
//! reads as a request goes (with only the forwarded variables) to
//! `edge::prepare`, as the daemon does before running anything.
//!
//! Properties: no panic; no allocation beyond the wire limits (a length is
//! checked before it is allocated); a request or response that reads
//! encodes and reads back to itself; only `CNI_*` and `WASM_CNI_LOG` pass;
//! the edge's reply is JSON with exit code 0 or 1.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wasm_cni_daemon::wire::{self, Request, Response};
use wasm_cni_engine::edge::{prepare, Prepared};

fuzz_target!(|data: &[u8]| {
    if let Ok(resp) = Response::read(&mut &data[..]) {
        assert_eq!(
            Response::read(&mut resp.encode().as_slice()).ok(),
            Some(resp)
        );
    }
    let Ok(req) = Request::read(&mut &data[..]) else {
        return;
    };
    assert!(req.stdin.len() <= wire::MAX_STDIN_BYTES);
    let again = Request::read(&mut req.encode().as_slice()).expect("reads back");
    assert_eq!(again, req);
    let vars: Vec<(String, String)> = req
        .env
        .into_iter()
        .filter(|(k, _)| wire::forwarded(k))
        .collect();
    assert!(vars
        .iter()
        .all(|(k, _)| k.starts_with("CNI_") || k == "WASM_CNI_LOG"));
    if let Prepared::Reply(out) = prepare(vars, &mut req.stdin.as_slice()) {
        assert!(out.exit_code == 0 || out.exit_code == 1, "{out:?}");
        if !out.stdout.is_empty() {
            serde_json::from_str::<serde_json::Value>(&out.stdout)
                .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {}", out.stdout));
        }
    }
});
