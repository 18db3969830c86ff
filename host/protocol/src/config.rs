//! The wasm-cni network config received on stdin, and the per-plugin request configs
//! derived from it the way libcni derives them from a conflist (`buildOneConfig`).
//!
//! Error codes: 6 for JSON that does not decode and for wrong types of the spec fields
//! Go's skel decodes itself (`name`, `cniVersion`, `cniVersions`); 1 for version
//! problems; 7 for everything else that fails validation; 2 for unknown keys inside a
//! chain entry's `wasm` limits (our own schema, where a typo would silently lift a limit).

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::env::{valid_name, Command};
use super::error::{CniError, ErrorCode};
use super::version;

pub const DEFAULT_PLUGIN_DIR: &str = "/opt/cni/wasm";
pub const DEFAULT_STATE_DIR: &str = "/run/wasm-cni";
/// Where `wasm-cni pull` keeps images: persistent, unlike the state on /run.
pub const DEFAULT_IMAGE_DIR: &str = "/var/lib/wasm-cni/images";

/// GC's list of attachments that are still in use. The tagged spec 1.1.0 text used the
/// second name; libcni sends both, and so do we.
pub const VALID_ATTACHMENTS_KEYS: [&str; 2] = ["cni.dev/valid-attachments", "cni.dev/attachments"];

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    /// The version selected from `cniVersion`/`cniVersions`; always one of
    /// [`version::SUPPORTED`].
    pub cni_version: String,
    pub name: String,
    pub chain: Vec<ChainEntry>,
    pub plugin_dir: PathBuf,
    /// The image store that chain entries naming `wasm.image` load from.
    pub image_dir: PathBuf,
    pub state_dir: PathBuf,
    pub cache_dir: Option<PathBuf>,
    pub prev_result: Option<Value>,
    pub runtime_config: Map<String, Value>,
    /// Everything as received, for re-serialising or caching.
    pub raw: Map<String, Value>,
    /// GC only: `(containerID, ifname)` pairs still in use. A JSON `null` list (a nil Go
    /// slice) means "none are valid", i.e. `Some(vec![])`; an absent key is `None`.
    pub valid_attachments: Option<Vec<(String, String)>>,
    pub disable_check: bool,
    pub disable_gc: bool,
    /// The `store` object (a cluster store such as etcd); absent: the local
    /// store under `stateDir`. Checked where the store is opened.
    pub store: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChainEntry {
    pub plugin_type: String,
    /// The entry exactly as configured; unknown keys and their order are kept because
    /// plugins read their own keys from it.
    pub raw: Map<String, Value>,
    /// Capability names declared `true`, in config order.
    pub capabilities: Vec<String>,
    pub limits: Limits,
    /// Limits for the IPAM delegate, from `ipam.wasm`.
    pub ipam_limits: Limits,
}

/// Per-plugin sandbox limits from the entry's optional `wasm` object. `None` means the
/// host default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub deadline_ms: Option<u64>,
    pub max_result_bytes: Option<u64>,
    pub host_call_budget: Option<u64>,
    /// Expected digest of the component, lowercased.
    pub sha256: Option<String>,
    /// `REGISTRY/REPOSITORY@sha256:…`: the component comes from the image
    /// store instead of pluginDir (checked where it is loaded).
    pub image: Option<String>,
    /// Bounds on loading the component: its size, and the time and memory
    /// compiling it may take.
    pub max_component_bytes: Option<u64>,
    pub compile_ms: Option<u64>,
    pub compile_memory_bytes: Option<u64>,
}

fn decoding(why: impl std::fmt::Display) -> CniError {
    CniError::new(
        ErrorCode::Decoding,
        format!("error unmarshall network config: {why}"),
    )
}

fn invalid(msg: impl Into<String>) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Present and not null: Go decodes a JSON null as the zero value.
fn field<'v>(m: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// Parses and validates stdin for `command` (not VERSION, which ignores stdin). Checks
/// run in skel's order: JSON, network name, version, then the verb's version gate, then
/// the wasm-cni specific keys.
pub fn parse(stdin: &[u8], command: Command) -> Result<NetConf, CniError> {
    let raw = match serde_json::from_slice::<Value>(stdin).map_err(decoding)? {
        Value::Object(m) => m,
        other => {
            return Err(decoding(format!(
                "expected a JSON object, found {}",
                json_type(&other)
            )))
        }
    };

    let name = match field(&raw, "name") {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(decoding(format!(
                "name: expected a string, found {}",
                json_type(other)
            )))
        }
    };
    if name.is_empty() {
        return Err(invalid("missing network name"));
    }
    if !valid_name(name) {
        return Err(invalid("invalid characters found in network name").with_details(name));
    }

    let cni_version = match field(&raw, "cniVersion") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => {
            return Err(decoding(format!(
                "cniVersion: expected a string, found {}",
                json_type(other)
            )))
        }
    };
    let cni_versions = match field(&raw, "cniVersions") {
        None => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(decoding(format!(
                        "cniVersions[{i}]: expected a string, found {}",
                        json_type(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(other) => {
            return Err(decoding(format!(
                "cniVersions: expected an array, found {}",
                json_type(other)
            )))
        }
    };
    let cni_version = version::select(cni_version, cni_versions.as_deref())?;

    let allowed = match command {
        Command::Check => version::supports_check(&cni_version),
        Command::Gc | Command::Status => version::supports_gc_status(&cni_version),
        Command::Add | Command::Del | Command::Version => true,
    };
    if !allowed {
        return Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!("config version does not allow {command}"),
        ));
    }

    let chain = match field(&raw, "chain") {
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .enumerate()
            .map(|(i, v)| parse_entry(i, v))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(_)) => return Err(invalid("chain must not be empty")),
        Some(other) => {
            return Err(invalid(format!(
                "chain: expected an array, found {}",
                json_type(other)
            )))
        }
        None => return Err(invalid("missing 'chain'")),
    };

    let runtime_config = match field(&raw, "runtimeConfig") {
        None => Map::new(),
        Some(Value::Object(m)) => conventional_keys(m.clone()),
        Some(other) => {
            return Err(invalid(format!(
                "runtimeConfig: expected an object, found {}",
                json_type(other)
            )))
        }
    };

    Ok(NetConf {
        cni_version,
        name: name.to_string(),
        chain,
        plugin_dir: dir(&raw, "pluginDir")?.unwrap_or_else(|| DEFAULT_PLUGIN_DIR.into()),
        image_dir: dir(&raw, "imageDir")?.unwrap_or_else(|| DEFAULT_IMAGE_DIR.into()),
        state_dir: dir(&raw, "stateDir")?.unwrap_or_else(|| DEFAULT_STATE_DIR.into()),
        cache_dir: dir(&raw, "cacheDir")?,
        prev_result: field(&raw, "prevResult").cloned(),
        runtime_config,
        valid_attachments: valid_attachments(&raw)?,
        disable_check: flag(&raw, "disableCheck")?,
        disable_gc: flag(&raw, "disableGC")?,
        store: match field(&raw, "store") {
            None => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(other) => {
                return Err(invalid(format!(
                    "store: expected an object, found {}",
                    json_type(other)
                )))
            }
        },
        raw,
    })
}

/// Directories must be absolute: the host's working directory is not meaningful.
fn dir(raw: &Map<String, Value>, key: &str) -> Result<Option<PathBuf>, CniError> {
    match field(raw, key) {
        None => Ok(None),
        Some(Value::String(s)) if s.starts_with('/') => Ok(Some(PathBuf::from(s))),
        Some(Value::String(s)) => Err(invalid(format!(
            "{key} must be an absolute path, got {s:?}"
        ))),
        Some(other) => Err(invalid(format!(
            "{key}: expected a string, found {}",
            json_type(other)
        ))),
    }
}

/// libcni accepts a bool or the strings "true"/"false" in any case.
fn flag(raw: &Map<String, Value>, key: &str) -> Result<bool, CniError> {
    match field(raw, key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(invalid(format!("invalid {key} value {other}"))),
    }
}

fn valid_attachments(raw: &Map<String, Value>) -> Result<Option<Vec<(String, String)>>, CniError> {
    let Some((key, value)) = VALID_ATTACHMENTS_KEYS
        .iter()
        .find_map(|k| raw.get(*k).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    let list = match value {
        Value::Null => return Ok(Some(Vec::new())),
        Value::Array(list) => list,
        other => {
            return Err(invalid(format!(
                "{key}: expected an array, found {}",
                json_type(other)
            )))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let get = |k: &str| match v.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(invalid(format!("{key}[{i}]: missing string '{k}'"))),
            };
            Ok((get("containerID")?, get("ifname")?))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn parse_entry(i: usize, v: &Value) -> Result<ChainEntry, CniError> {
    let Value::Object(raw) = v else {
        return Err(invalid(format!(
            "chain[{i}]: expected an object, found {}",
            json_type(v)
        )));
    };
    let plugin_type = match field(raw, "type") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None => {
            return Err(invalid(format!("chain[{i}]: missing 'type'")))
        }
        Some(other) => {
            return Err(invalid(format!(
                "chain[{i}]: 'type' must be a string, found {}",
                json_type(other)
            )))
        }
    };
    // `type` names a file in pluginDir, so it must not be able to escape it.
    if plugin_type.contains(['/', '\0']) || plugin_type == "." || plugin_type == ".." {
        return Err(invalid(format!(
            "chain[{i}]: invalid plugin type {plugin_type:?}"
        )));
    }

    let capabilities = match field(raw, "capabilities") {
        None => Vec::new(),
        Some(Value::Object(caps)) => {
            let mut names = Vec::new();
            for (name, enabled) in caps {
                match enabled {
                    Value::Bool(true) => names.push(name.clone()),
                    Value::Bool(false) => {}
                    other => {
                        return Err(invalid(format!(
                            "chain[{i}].capabilities.{name}: expected a bool, found {}",
                            json_type(other)
                        )))
                    }
                }
            }
            names
        }
        Some(other) => {
            return Err(invalid(format!(
                "chain[{i}].capabilities: expected an object, found {}",
                json_type(other)
            )))
        }
    };

    Ok(ChainEntry {
        plugin_type,
        capabilities,
        limits: parse_limits(&format!("chain[{i}].wasm"), field(raw, "wasm"))?,
        ipam_limits: parse_limits(
            &format!("chain[{i}].ipam.wasm"),
            field(raw, "ipam")
                .and_then(Value::as_object)
                .and_then(|m| field(m, "wasm")),
        )?,
        raw: raw.clone(),
    })
}

fn parse_limits(at: &str, v: Option<&Value>) -> Result<Limits, CniError> {
    let mut limits = Limits::default();
    let Some(v) = v else {
        return Ok(limits);
    };
    let Value::Object(m) = v else {
        return Err(invalid(format!(
            "{at}: expected an object, found {}",
            json_type(v)
        )));
    };
    for (key, value) in m {
        let path = format!("{at}.{key}");
        let slot = match key.as_str() {
            "memoryBytes" => &mut limits.memory_bytes,
            "deadlineMs" => &mut limits.deadline_ms,
            "maxResultBytes" => &mut limits.max_result_bytes,
            "hostCallBudget" => &mut limits.host_call_budget,
            "maxComponentBytes" => &mut limits.max_component_bytes,
            "compileMs" => &mut limits.compile_ms,
            "compileMemoryBytes" => &mut limits.compile_memory_bytes,
            "sha256" => {
                limits.sha256 = match value {
                    Value::Null => None,
                    Value::String(s)
                        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) =>
                    {
                        Some(s.to_ascii_lowercase())
                    }
                    _ => return Err(invalid(format!("{path}: expected 64 hex characters"))),
                };
                continue;
            }
            "image" => {
                limits.image = match value {
                    Value::Null => None,
                    Value::String(s) if !s.is_empty() => Some(s.clone()),
                    _ => return Err(invalid(format!("{path}: expected an image reference"))),
                };
                continue;
            }
            _ => {
                return Err(CniError::new(
                    ErrorCode::UnsupportedField,
                    format!("unsupported field {path} = {value}"),
                ))
            }
        };
        *slot = match value {
            Value::Null => None,
            v => Some(v.as_u64().ok_or_else(|| {
                invalid(format!(
                    "{path}: expected a non-negative integer, found {value}"
                ))
            })?),
        };
    }
    Ok(limits)
}

impl NetConf {
    /// The stdin for one chain plugin, as libcni's `buildOneConfig` builds it: the entry as
    /// configured, with `name` and `cniVersion` overwritten. For ADD/DEL/CHECK also
    /// `prevResult` (when given) and `runtimeConfig` holding only the capabilities the
    /// entry declares and the runtime supplied; that key is set only when non-empty so a
    /// static `runtimeConfig` otherwise passes through. For GC/STATUS only name and
    /// version, plus both valid-attachment keys when the request carried a list (the
    /// runtime sends one only with GC). `capabilities` and `wasm` stay in, as libcni
    /// keeps unknown keys.
    pub fn plugin_config(
        &self,
        entry: &ChainEntry,
        prev_result: Option<&Value>,
        for_gc_status: bool,
    ) -> Map<String, Value> {
        let mut conf = entry.raw.clone();
        conf.insert("name".into(), Value::from(self.name.as_str()));
        conf.insert("cniVersion".into(), Value::from(self.cni_version.as_str()));
        if for_gc_status {
            if let Some(atts) = &self.valid_attachments {
                let list: Value = atts
                    .iter()
                    .map(|(id, ifname)| json!({"containerID": id, "ifname": ifname}))
                    .collect();
                for key in VALID_ATTACHMENTS_KEYS {
                    conf.insert(key.into(), list.clone());
                }
            }
            return conf;
        }
        if let Some(prev) = prev_result {
            conf.insert("prevResult".into(), prev.clone());
        }
        let runtime: Map<String, Value> = entry
            .capabilities
            .iter()
            .filter_map(|c| self.runtime_config.get(c).map(|v| (c.clone(), v.clone())))
            .collect();
        if !runtime.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        conf
    }
}

/// The keys of the conventional capabilities' objects, as the CNI
/// conventions spell them.
const CAPABILITY_KEYS: [(&str, &[&str]); 4] = [
    (
        "portMappings",
        &["hostPort", "containerPort", "protocol", "hostIP"],
    ),
    (
        "bandwidth",
        &["ingressRate", "ingressBurst", "egressRate", "egressBurst"],
    ),
    ("ipRanges", &["subnet", "rangeStart", "rangeEnd", "gateway"]),
    ("dns", &["servers", "searches", "options"]),
];

/// The runtime's capability arguments with their keys as the conventions
/// spell them. containerd (go-cni) sends Go's field names (`HostPort`,
/// `IngressRate`, `Subnet`) and the reference plugins read them because
/// Go's JSON matches keys without case; so do we, here, once, so that the
/// policy's port grants and the plugins read the same value. A key given
/// both ways keeps the exact one, as Go prefers it.
fn conventional_keys(mut rc: Map<String, Value>) -> Map<String, Value> {
    for (capability, keys) in CAPABILITY_KEYS {
        if let Some(v) = rc.get_mut(capability) {
            respell(v, keys, 0);
        }
    }
    rc
}

fn respell(v: &mut Value, keys: &[&str], depth: usize) {
    // ipRanges is a list of lists of objects; nothing conventional is deeper.
    if depth > 2 {
        return;
    }
    match v {
        Value::Array(items) => items.iter_mut().for_each(|i| respell(i, keys, depth + 1)),
        Value::Object(m) => {
            for key in keys {
                if m.contains_key(*key) {
                    continue;
                }
                let other = m.keys().find(|k| k.eq_ignore_ascii_case(key)).cloned();
                if let Some(other) = other {
                    if let Some(val) = m.remove(&other) {
                        m.insert((*key).to_string(), val);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASIC: &str = r#"{"cniVersion":"1.1.0","name":"podnet","type":"wasm-cni",
        "chain":[{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.88.0.0/16"}},{"type":"tuning","mtu":1400}]}"#;

    fn obj(s: &str) -> Map<String, Value> {
        match serde_json::from_str(s).unwrap() {
            Value::Object(m) => m,
            _ => panic!("not an object: {s}"),
        }
    }

    /// BASIC with top-level keys replaced or added.
    fn with(extra: &str) -> Vec<u8> {
        let mut m = obj(BASIC);
        m.extend(obj(extra));
        serde_json::to_vec(&m).unwrap()
    }

    fn err(stdin: &[u8], cmd: Command) -> CniError {
        parse(stdin, cmd).unwrap_err()
    }

    /// Found by the `chain_config` fuzzer (minimised with `cargo fuzz
    /// tmin`): a number a plugin's own key carries came back different from
    /// the host's serialised config, because serde_json's default float
    /// parsing is not exact. Issue #14 reported the same for
    /// `33353333.336666662`.
    #[test]
    fn numbers_pass_through_unchanged() {
        for number in [
            "1677721733333000001332",
            "33353333.336666662",
            "0.1",
            "1e-320",
            "18446744073709551616",
            "-9007199254740993",
        ] {
            let stdin = format!(
                r#"{{"cniVersion":"1.1.0","name":"p","capabilities":{{"x":true}},"chain":[{{"type":"r","capabilities":{{"x":true}},"k":{{"n":{number}}}}}],"runtimeConfig":{{"x":{number}}}}}"#
            );
            let conf = parse(stdin.as_bytes(), Command::Add).unwrap();
            let expect: Value = serde_json::from_str(number).unwrap();
            assert_eq!(conf.chain[0].raw["k"]["n"], expect, "{number}");
            // What a plugin and the cached record get, read back, is the
            // same number.
            let plugin = conf.plugin_config(&conf.chain[0], None, false);
            let text = serde_json::to_string(&Value::Object(plugin)).unwrap();
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back["k"]["n"], expect, "{number} became {}", back["k"]["n"]);
            assert_eq!(back["runtimeConfig"]["x"], expect, "{number}");
            let again = serde_json::to_vec(&Value::Object(conf.raw.clone())).unwrap();
            assert_eq!(parse(&again, Command::Add).unwrap(), conf, "{number}");
            // And the value is the one closest to what was written.
            if let (Some(f), Ok(exact)) = (expect.as_f64(), number.parse::<f64>()) {
                assert_eq!(f.to_bits(), exact.to_bits(), "{number}");
            }
        }
    }

    #[test]
    fn parses_the_example() {
        let c = parse(BASIC.as_bytes(), Command::Add).unwrap();
        assert_eq!(c.cni_version, "1.1.0");
        assert_eq!(c.name, "podnet");
        assert_eq!(c.plugin_dir, PathBuf::from("/opt/cni/wasm"));
        assert_eq!(c.state_dir, PathBuf::from("/run/wasm-cni"));
        assert_eq!(c.cache_dir, None);
        assert_eq!(c.prev_result, None);
        assert!(c.runtime_config.is_empty());
        assert_eq!(c.valid_attachments, None);
        assert!(!c.disable_check && !c.disable_gc);
        assert_eq!(c.raw, obj(BASIC));
        let types: Vec<_> = c.chain.iter().map(|e| e.plugin_type.as_str()).collect();
        assert_eq!(types, ["bridge", "tuning"]);
        assert_eq!(c.chain[0].limits, Limits::default());
        let keys: Vec<_> = c.chain[0].raw.keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "bridge", "ipam"]);
    }

    #[test]
    fn optional_top_level_keys() {
        let c = parse(
            &with(r#"{"pluginDir":"/x/p","stateDir":"/x/s","cacheDir":"/x/c","disableCheck":"TRUE","disableGC":true,
                "prevResult":{"cniVersion":"1.1.0"},"runtimeConfig":{"portMappings":[]}}"#),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.plugin_dir, PathBuf::from("/x/p"));
        assert_eq!(c.state_dir, PathBuf::from("/x/s"));
        assert_eq!(c.cache_dir, Some(PathBuf::from("/x/c")));
        assert!(c.disable_check && c.disable_gc);
        assert_eq!(c.prev_result, Some(json!({"cniVersion":"1.1.0"})));
        assert_eq!(c.runtime_config, obj(r#"{"portMappings":[]}"#));
        let c = parse(
            &with(r#"{"disableCheck":"False","prevResult":null}"#),
            Command::Add,
        )
        .unwrap();
        assert!(!c.disable_check);
        assert_eq!(c.prev_result, None);
    }

    #[test]
    fn malformed_stdin_is_code_6() {
        for stdin in [
            &b""[..],
            b"{",
            b"not json",
            b"[1,2]",
            b"\"podnet\"",
            br#"{"name":5}"#,
        ] {
            let e = err(stdin, Command::Add);
            assert_eq!(e.code, 6, "{:?}", String::from_utf8_lossy(stdin));
            assert!(
                e.msg.starts_with("error unmarshall network config: "),
                "{}",
                e.msg
            );
        }
        assert!(err(&with(r#"{"cniVersion":1}"#), Command::Add)
            .msg
            .contains("cniVersion"));
        assert!(err(&with(r#"{"cniVersions":"1.0.0"}"#), Command::Add)
            .msg
            .contains("cniVersions"));
        let e = err(&with(r#"{"cniVersions":["1.0.0",1]}"#), Command::Add);
        assert_eq!(e.code, 6);
        assert!(e.msg.contains("cniVersions[1]"), "{}", e.msg);
    }

    #[test]
    fn network_name_is_code_7() {
        for extra in [r#"{"name":""}"#, r#"{"name":null}"#] {
            let e = err(&with(extra), Command::Del);
            assert_eq!((e.code, e.msg.as_str()), (7, "missing network name"));
        }
        let mut m = obj(BASIC);
        m.remove("name");
        let e = err(&serde_json::to_vec(&m).unwrap(), Command::Add);
        assert_eq!((e.code, e.msg.as_str()), (7, "missing network name"));
        for bad in ["pod net", "-podnet", "pod/net", "../etc"] {
            let e = err(&with(&json!({ "name": bad }).to_string()), Command::Add);
            assert_eq!(e.code, 7);
            assert_eq!(e.msg, "invalid characters found in network name");
            assert_eq!(e.details, bad);
        }
    }

    #[test]
    fn name_is_checked_before_version() {
        let e = err(br#"{"cniVersion":"9.9.9"}"#, Command::Add);
        assert_eq!(e.code, 7);
    }

    #[test]
    fn unsupported_version_is_code_1_with_details() {
        let e = err(&with(r#"{"cniVersion":"0.2.0"}"#), Command::Add);
        assert_eq!(e.code, 1);
        assert_eq!(e.msg, "incompatible CNI versions");
        assert_eq!(
            e.details,
            r#"config is "0.2.0", plugin supports ["0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]"#
        );
        let mut m = obj(BASIC);
        m.remove("cniVersion");
        assert_eq!(err(&serde_json::to_vec(&m).unwrap(), Command::Add).code, 1);
    }

    #[test]
    fn cni_versions_selection() {
        let pick = |extra: &str| parse(&with(extra), Command::Add).map(|c| c.cni_version);
        assert_eq!(
            pick(r#"{"cniVersion":"0.4.0","cniVersions":["1.0.0","0.3.1"]}"#).unwrap(),
            "1.0.0"
        );
        assert_eq!(
            pick(r#"{"cniVersion":"1.0.0","cniVersions":["1.1.0","2.0.0"]}"#).unwrap(),
            "1.1.0"
        );
        assert_eq!(
            pick(r#"{"cniVersion":"0.3.1","cniVersions":null}"#).unwrap(),
            "0.3.1"
        );
        let e = pick(r#"{"cniVersions":["1.0.0","one"]}"#).unwrap_err();
        assert_eq!(e.code, 1);
    }

    #[test]
    fn verb_version_gates() {
        let gate = |ver: &str, cmd| parse(&with(&json!({ "cniVersion": ver }).to_string()), cmd);
        let e = gate("0.3.1", Command::Check).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (1, "config version does not allow CHECK")
        );
        assert!(gate("0.4.0", Command::Check).is_ok());
        for cmd in [Command::Gc, Command::Status] {
            let e = gate("1.0.0", cmd).unwrap_err();
            assert_eq!(e.code, 1);
            assert_eq!(
                e.msg,
                format!("config version does not allow {}", cmd.as_str())
            );
            assert!(gate("1.1.0", cmd).is_ok());
        }
        for cmd in [Command::Add, Command::Del] {
            assert!(gate("0.3.0", cmd).is_ok());
        }
    }

    #[test]
    fn chain_validation_is_code_7() {
        let cases = [
            (r#"{"chain":null}"#, "missing 'chain'"),
            (r#"{"chain":[]}"#, "chain must not be empty"),
            (
                r#"{"chain":{"type":"x"}}"#,
                "chain: expected an array, found object",
            ),
            (
                r#"{"chain":["bridge"]}"#,
                "chain[0]: expected an object, found string",
            ),
            (
                r#"{"chain":[{"type":"a"},{"mtu":1}]}"#,
                "chain[1]: missing 'type'",
            ),
            (r#"{"chain":[{"type":""}]}"#, "chain[0]: missing 'type'"),
            (
                r#"{"chain":[{"type":3}]}"#,
                "chain[0]: 'type' must be a string, found number",
            ),
            (
                r#"{"chain":[{"type":"../bridge"}]}"#,
                "chain[0]: invalid plugin type \"../bridge\"",
            ),
            (
                r#"{"chain":[{"type":".."}]}"#,
                "chain[0]: invalid plugin type \"..\"",
            ),
            (
                r#"{"chain":[{"type":"a","capabilities":["mac"]}]}"#,
                "chain[0].capabilities: expected an object",
            ),
            (
                r#"{"chain":[{"type":"a","capabilities":{"mac":"yes"}}]}"#,
                "chain[0].capabilities.mac: expected a bool",
            ),
            (
                r#"{"pluginDir":"rel/dir"}"#,
                "pluginDir must be an absolute path",
            ),
            (r#"{"stateDir":5}"#, "stateDir: expected a string"),
            (
                r#"{"disableCheck":"yes"}"#,
                "invalid disableCheck value \"yes\"",
            ),
            (
                r#"{"runtimeConfig":[]}"#,
                "runtimeConfig: expected an object",
            ),
            (
                r#"{"cni.dev/valid-attachments":{}}"#,
                "cni.dev/valid-attachments: expected an array",
            ),
            (
                r#"{"cni.dev/attachments":[{"containerID":"a"}]}"#,
                "cni.dev/attachments[0]: missing string 'ifname'",
            ),
        ];
        for (extra, msg) in cases {
            let e = err(&with(extra), Command::Add);
            assert_eq!(e.code, 7, "{extra}: {e}");
            assert!(e.msg.starts_with(msg), "{extra}: {:?} vs {msg:?}", e.msg);
        }
        let mut m = obj(BASIC);
        m.remove("chain");
        assert_eq!(
            err(&serde_json::to_vec(&m).unwrap(), Command::Add).msg,
            "missing 'chain'"
        );
    }

    #[test]
    fn capabilities_and_limits() {
        let c = parse(
            &with(r#"{"chain":[{"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false,"mac":true},
                "wasm":{"memoryBytes":67108864,"deadlineMs":2000,"maxResultBytes":65536,"hostCallBudget":1000,
                "maxComponentBytes":1048576,"compileMs":500,"compileMemoryBytes":268435456,
                "sha256":"ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789",
                "image":"reg.example/cni/portmap@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}]}"#),
            Command::Add,
        )
        .unwrap();
        let e = &c.chain[0];
        assert_eq!(e.capabilities, ["portMappings", "mac"]);
        assert_eq!(
            e.limits,
            Limits {
                memory_bytes: Some(64 << 20),
                deadline_ms: Some(2000),
                max_result_bytes: Some(65536),
                host_call_budget: Some(1000),
                sha256: Some(
                    "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789".into()
                ),
                image: Some(
                    "reg.example/cni/portmap@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into()
                ),
                max_component_bytes: Some(1 << 20),
                compile_ms: Some(500),
                compile_memory_bytes: Some(256 << 20),
            }
        );
        let c = parse(
            &with(r#"{"chain":[{"type":"a","wasm":{"deadlineMs":null}}]}"#),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.chain[0].limits, Limits::default());
    }

    #[test]
    fn ipam_delegate_limits_come_from_ipam_wasm() {
        let c = parse(
            &with(r#"{"chain":[{"type":"bridge","ipam":{"type":"host-local","wasm":{"deadlineMs":50}}}]}"#),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.chain[0].ipam_limits.deadline_ms, Some(50));
        assert_eq!(c.chain[0].limits, Limits::default());
        let e = err(
            &with(
                r#"{"chain":[{"type":"bridge","ipam":{"type":"host-local","wasm":{"deadlineMs":"x"}}}]}"#,
            ),
            Command::Add,
        );
        assert_eq!(e.code, 7);
        assert!(
            e.msg.starts_with("chain[0].ipam.wasm.deadlineMs"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn bad_limits() {
        let cases = [
            (r#""x""#, 7, "chain[0].wasm: expected an object"),
            (
                r#"{"memoryBytes":"64M"}"#,
                7,
                "chain[0].wasm.memoryBytes: expected a non-negative integer",
            ),
            (r#"{"deadlineMs":-1}"#, 7, "chain[0].wasm.deadlineMs"),
            (
                r#"{"maxResultBytes":1.5}"#,
                7,
                "chain[0].wasm.maxResultBytes",
            ),
            (
                r#"{"hostCallBudget":true}"#,
                7,
                "chain[0].wasm.hostCallBudget",
            ),
            (
                r#"{"sha256":"abc"}"#,
                7,
                "chain[0].wasm.sha256: expected 64 hex characters",
            ),
            (
                r#"{"sha256":"zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}"#,
                7,
                "chain[0].wasm.sha256",
            ),
            (
                r#"{"image":5}"#,
                7,
                "chain[0].wasm.image: expected an image reference",
            ),
            (
                r#"{"image":""}"#,
                7,
                "chain[0].wasm.image: expected an image reference",
            ),
            (
                r#"{"memoryByte":5}"#,
                2,
                "unsupported field chain[0].wasm.memoryByte = 5",
            ),
        ];
        for (wasm, code, msg) in cases {
            let stdin = with(&format!(r#"{{"chain":[{{"type":"a","wasm":{wasm}}}]}}"#));
            let e = err(&stdin, Command::Add);
            assert_eq!(e.code, code, "{wasm}: {e}");
            assert!(e.msg.starts_with(msg), "{wasm}: {:?}", e.msg);
        }
    }

    #[test]
    fn valid_attachments_forms() {
        let atts = |extra: &str| parse(&with(extra), Command::Gc).unwrap().valid_attachments;
        assert_eq!(atts("{}"), None);
        assert_eq!(atts(r#"{"cni.dev/valid-attachments":null}"#), Some(vec![]));
        assert_eq!(atts(r#"{"cni.dev/attachments":null}"#), Some(vec![]));
        assert_eq!(
            atts(r#"{"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}"#),
            Some(vec![("c1".into(), "eth0".into())])
        );
        // The HEAD spec name wins when both are present.
        assert_eq!(
            atts(
                r#"{"cni.dev/attachments":[],"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"net1"}]}"#
            ),
            Some(vec![("c2".into(), "net1".into())])
        );
    }

    fn add_conf(extra: &str) -> NetConf {
        parse(&with(extra), Command::Add).unwrap()
    }

    #[test]
    fn plugin_config_injects_name_version_prev() {
        let c = add_conf(r#"{"cniVersion":"1.0.0"}"#);
        let prev = json!({"cniVersion":"1.0.0","ips":[{"address":"10.88.0.2/16"}]});
        let conf = c.plugin_config(&c.chain[0], Some(&prev), false);
        assert_eq!(
            Value::Object(conf).to_string(),
            json!({"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.88.0.0/16"},
                   "name":"podnet","cniVersion":"1.0.0","prevResult":prev})
            .to_string()
        );
        let conf = c.plugin_config(&c.chain[1], None, false);
        assert!(!conf.contains_key("prevResult"));
        assert!(!conf.contains_key("runtimeConfig"));
    }

    #[test]
    fn plugin_config_overwrites_name_and_version_in_place() {
        let c = add_conf(
            r#"{"chain":[{"name":"other","cniVersion":"0.1.0","type":"a","x":{"y":[1,2]}}]}"#,
        );
        let conf = c.plugin_config(&c.chain[0], None, false);
        assert_eq!(
            Value::Object(conf).to_string(),
            r#"{"name":"podnet","cniVersion":"1.1.0","type":"a","x":{"y":[1,2]}}"#
        );
    }

    /// What containerd sends (Go's field names) reaches the policy and the
    /// plugins as the conventions spell it; an exact key is never replaced
    /// by a look-alike, and other capabilities are passed as they came.
    #[test]
    fn capability_keys_from_go_runtimes_read_as_the_conventions_spell_them() {
        let c = add_conf(
            r#"{"runtimeConfig":{
                 "portMappings":[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":"127.0.0.1"},
                                 {"hostPort":1,"HOSTPORT":2,"containerPort":3}],
                 "bandwidth":{"IngressRate":1000,"IngressBurst":10,"EgressRate":2000,"EgressBurst":20},
                 "ipRanges":[[{"Subnet":"10.1.0.0/24","RangeStart":"10.1.0.5","Gateway":"10.1.0.1"}]],
                 "mac":"aa:bb:cc:dd:ee:ff","custom":{"HostPort":9}},
               "chain":[{"type":"x","capabilities":{"portMappings":true,"bandwidth":true,"ipRanges":true,"custom":true}}]}"#,
        );
        let conf = c.plugin_config(&c.chain[0], None, false);
        assert_eq!(
            conf["runtimeConfig"],
            json!({
                "portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"127.0.0.1"},
                                {"hostPort":1,"HOSTPORT":2,"containerPort":3}],
                "bandwidth":{"ingressRate":1000,"ingressBurst":10,"egressRate":2000,"egressBurst":20},
                "ipRanges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.5","gateway":"10.1.0.1"}]],
                "custom":{"HostPort":9},
            })
        );
    }

    #[test]
    fn plugin_config_runtime_config_only_for_declared_capabilities() {
        let c = add_conf(
            r#"{"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"mac":"aa:bb:cc:dd:ee:ff","ips":["10.88.0.9/16"]},
                "chain":[
                  {"type":"portmap","capabilities":{"portMappings":true,"bandwidth":true,"ips":false}},
                  {"type":"tuning","runtimeConfig":{"static":1}},
                  {"type":"bandwidth","capabilities":{"bandwidth":true},"runtimeConfig":{"static":2}},
                  {"type":"tuning","capabilities":{"mac":true},"runtimeConfig":{"static":3}}]}"#,
        );
        let rc = |i: usize| {
            c.plugin_config(&c.chain[i], None, false)
                .get("runtimeConfig")
                .cloned()
        };
        // bandwidth declared but not supplied, ips supplied but declared false.
        assert_eq!(
            rc(0),
            Some(json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}))
        );
        // Nothing to inject: static runtimeConfig passes through untouched.
        assert_eq!(rc(1), Some(json!({"static":1})));
        assert_eq!(rc(2), Some(json!({"static":2})));
        // Injection replaces the static one.
        assert_eq!(rc(3), Some(json!({"mac":"aa:bb:cc:dd:ee:ff"})));
        // capabilities and wasm keys stay, like libcni.
        assert!(c
            .plugin_config(&c.chain[0], None, false)
            .contains_key("capabilities"));
    }

    #[test]
    fn plugin_config_gc_and_status() {
        let c = parse(
            &with(r#"{"runtimeConfig":{"mac":"aa:bb:cc:dd:ee:ff"},"prevResult":{"cniVersion":"1.1.0"},
                "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c2","ifname":"eth1"}],
                "chain":[{"type":"tuning","capabilities":{"mac":true},"wasm":{"deadlineMs":5}}]}"#),
            Command::Gc,
        )
        .unwrap();
        let prev = json!({"x":1});
        let conf = c.plugin_config(&c.chain[0], Some(&prev), true);
        let list =
            json!([{"containerID":"c1","ifname":"eth0"},{"containerID":"c2","ifname":"eth1"}]);
        assert_eq!(
            Value::Object(conf).to_string(),
            json!({"type":"tuning","capabilities":{"mac":true},"wasm":{"deadlineMs":5},"name":"podnet","cniVersion":"1.1.0",
                   "cni.dev/valid-attachments":list,"cni.dev/attachments":list})
            .to_string()
        );

        // A null list reaches plugins as an empty list under both keys.
        let c = parse(&with(r#"{"cni.dev/attachments":null}"#), Command::Gc).unwrap();
        let conf = c.plugin_config(&c.chain[0], None, true);
        assert_eq!(conf["cni.dev/valid-attachments"], json!([]));
        assert_eq!(conf["cni.dev/attachments"], json!([]));

        // STATUS: no list was sent, so only name and version are added.
        let c = parse(&with(r#"{"runtimeConfig":{"mac":"x"}}"#), Command::Status).unwrap();
        let conf = c.plugin_config(&c.chain[0], None, true);
        assert_eq!(
            conf,
            c.chain[0]
                .raw
                .clone()
                .into_iter()
                .chain([
                    ("name".to_string(), json!("podnet")),
                    ("cniVersion".to_string(), json!("1.1.0")),
                ])
                .collect()
        );
    }
}
