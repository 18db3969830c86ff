//! The thin client of `wasm-cni daemon`, as a library and as the small
//! static program (`wasm-cni-client`) a runtime executes on a node whose
//! networks say `"daemon": "prefer"` or `"require"`: it reads only the keys
//! it needs to find the daemon, forwards the `CNI_*` variables,
//! `WASM_CNI_LOG` and stdin over the socket, with the container's network
//! namespace as a descriptor it opened itself, and prints exactly what the
//! daemon answers, with its exit code. No engine, no component, no plugin
//! config: what runs a chain in-process (for `"off"`, the default, and for
//! `"prefer"` when no daemon listens) is the caller's (`forward::run`'s
//! `local`): the full `wasm-cni` engine.
//!
//! Nothing here may depend on the engine: this crate is what keeps the
//! program the runtime executes on every call small.

#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod arena;
pub mod forward;
pub mod wire;

/// A CNI error as the engine prints it: `{"cniVersion", "code", "msg"}`,
/// indented by four spaces, with Go's HTML-safe escapes.
pub fn error_json(code: u32, msg: &str, cni_version: Option<&str>) -> String {
    let mut obj = serde_json::Map::new();
    if let Some(v) = cni_version {
        obj.insert("cniVersion".into(), serde_json::Value::from(v));
    }
    obj.insert("code".into(), serde_json::Value::from(code));
    obj.insert("msg".into(), serde_json::Value::from(msg));
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    if serde::Serialize::serialize(&serde_json::Value::Object(obj), &mut ser).is_err() {
        return format!("{{\"code\": {code}}}");
    }
    go_escape(&String::from_utf8_lossy(&buf))
}

/// Go's HTML-safe string escapes, applied to serialised JSON, as the
/// reference plugins print it. These characters can only occur inside JSON
/// strings, so a plain substitution is exact. (The engine prints with this
/// too: the client and the engine answer byte for byte alike.)
pub fn go_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The CNI error codes the client itself answers with.
pub mod code {
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const STATUS_UNAVAILABLE: u32 = 50;
    pub const INTERNAL: u32 = 999;
}
