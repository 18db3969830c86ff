//! `wasm-cni add`, `check` and `del`: a network run by hand, as `cnitool`
//! runs one, through the same door a runtime goes through.

use std::path::PathBuf;

use serde_json::{Map, Value};

use wasm_cni_engine::sandbox::sha256_hex;

#[derive(clap::Args)]
pub(super) struct AttachArgs {
    /// Network configuration: a conflist whose plugins are of type
    /// `wasm-cni`, or a single `wasm-cni` plugin config.
    #[arg(long)]
    conf: PathBuf,
    /// Path of the container's network namespace (e.g. /run/netns/NAME).
    #[arg(long)]
    netns: Option<String>,
    /// Container id; defaults to one derived from the netns path.
    #[arg(long)]
    id: Option<String>,
    /// Interface name inside the container.
    #[arg(long, default_value = "eth0")]
    ifname: String,
    /// CNI_ARGS, `K=V;K=V`.
    #[arg(long, default_value = "")]
    args: String,
    /// Capability arguments as JSON, e.g. '{"mac":"02:00:00:00:00:01"}'.
    #[arg(long)]
    capability_args: Option<String>,
}

/// Build the stdin a runtime would send for the `wasm-cni` entry of `conf`.
pub fn plugin_stdin(conf: &Value, capability_args: &Map<String, Value>) -> Result<Value, String> {
    let obj = conf.as_object().ok_or("the config is not a JSON object")?;
    let mut entry = match obj.get("plugins") {
        Some(Value::Array(plugins)) => {
            let mut found = plugins
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("wasm-cni"));
            let first = found
                .next()
                .and_then(Value::as_object)
                .cloned()
                .ok_or("the conflist has no plugin of type wasm-cni")?;
            if found.next().is_some() {
                return Err("the conflist has more than one wasm-cni plugin".into());
            }
            first
        }
        Some(_) => return Err("`plugins` must be a list".into()),
        None => obj.clone(),
    };
    for key in ["name", "cniVersion", "cniVersions"] {
        if let Some(v) = obj.get(key) {
            entry.insert(key.into(), v.clone());
        }
    }
    // libcni passes a capability only if the plugin declares it.
    let declared: Vec<String> = entry
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|c| {
            c.iter()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let rc: Map<String, Value> = capability_args
        .iter()
        .filter(|(k, _)| declared.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !rc.is_empty() {
        entry.insert("runtimeConfig".into(), Value::Object(rc));
    }
    Ok(Value::Object(entry))
}

pub(super) fn attach(command: &str, a: AttachArgs) -> Result<i32, String> {
    let text = std::fs::read(&a.conf).map_err(|e| format!("{}: {e}", a.conf.display()))?;
    let conf: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", a.conf.display()))?;
    let caps: Map<String, Value> = match &a.capability_args {
        Some(s) => serde_json::from_str(s).map_err(|e| format!("--capability-args: {e}"))?,
        None => Map::new(),
    };
    let stdin = plugin_stdin(&conf, &caps)?;
    let netns = a.netns.clone().unwrap_or_default();
    if command != "DEL" && netns.is_empty() {
        return Err(format!("{} needs --netns", command.to_lowercase()));
    }
    let id = a.id.clone().unwrap_or_else(|| {
        let h = sha256_hex(netns.as_bytes());
        format!("cli-{}", &h[..16])
    });
    let cni_path = std::env::var("CNI_PATH").unwrap_or_else(|_| "/opt/cni/bin".into());
    let vars = vec![
        ("CNI_COMMAND".to_string(), command.to_string()),
        ("CNI_CONTAINERID".to_string(), id),
        ("CNI_NETNS".to_string(), netns),
        ("CNI_IFNAME".to_string(), a.ifname.clone()),
        ("CNI_ARGS".to_string(), a.args.clone()),
        ("CNI_PATH".to_string(), cni_path),
    ];
    let bytes = serde_json::to_vec(&stdin).map_err(|e| e.to_string())?;
    // The same door a runtime goes through: the daemon, if the config asks.
    let out = wasm_cni_daemon::client::run(vars, bytes);
    eprint!("{}", out.stderr);
    if !out.stdout.is_empty() {
        println!("{}", out.stdout.trim_end());
    }
    Ok(out.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdin_from_conflist_injects_name_version_and_declared_caps() {
        let conf = json!({"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"wasm-cni","capabilities":{"mac":true},"chain":[{"type":"fx"}]}]});
        let caps: Map<String, Value> =
            serde_json::from_value(json!({"mac":"02:00:00:00:00:01","ips":["10.0.0.2"]})).unwrap();
        let s = plugin_stdin(&conf, &caps).unwrap();
        assert_eq!(s["name"], "n");
        assert_eq!(s["cniVersion"], "1.0.0");
        assert_eq!(s["runtimeConfig"], json!({"mac":"02:00:00:00:00:01"}));
    }

    #[test]
    fn stdin_needs_exactly_one_wasm_cni_plugin() {
        let none = json!({"name":"n","plugins":[{"type":"bridge"}]});
        assert!(plugin_stdin(&none, &Map::new()).is_err());
        let bare = json!({"name":"n","cniVersion":"1.1.0","type":"wasm-cni","chain":[]});
        assert_eq!(
            plugin_stdin(&bare, &Map::new()).unwrap()["type"],
            "wasm-cni"
        );
    }
}
