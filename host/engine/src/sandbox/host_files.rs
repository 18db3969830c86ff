//! `cni:plugin/files`: the host reads, for the plugin, a file its own config
//! names. The allowed paths are taken from the call's config by the host
//! (never from the plugin), and only under keys known to hold a file to
//! read: a plugin cannot turn this into general file access.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde_json::Value;

use super::bindings::cni::plugin::files::{FileError, Host};
use super::fail::FileFail;
use super::state::Ctx;

/// Config keys (JSON pointers) whose string value names a file the plugin
/// may read: host-local's resolv.conf.
const FILE_KEYS: &[&str] = &["/ipam/resolvConf"];

/// resolv.conf and its like are tiny; a bigger file is a mistake.
const MAX_FILE_BYTES: u64 = 64 << 10;

/// The paths `config` (a request config, JSON) lets the plugin read.
pub(crate) fn allowed_paths(config: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(config) else {
        return Vec::new();
    };
    FILE_KEYS
        .iter()
        .filter_map(|k| v.pointer(k).and_then(Value::as_str))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

fn read_small(path: &Path) -> Result<String, String> {
    let ctx = |e: std::io::Error| format!("open {}: {e}", path.display());
    // Non-blocking: a FIFO at that path must not hang the host.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ctx)?;
    if !file.metadata().map_err(ctx)?.is_file() {
        return Err(format!("open {}: not a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ctx)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{}: larger than {MAX_FILE_BYTES} bytes",
            path.display()
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

impl Host for Ctx {
    fn convert_file_error(&mut self, e: FileFail) -> wasmtime::Result<FileError> {
        e.into_wit()
    }

    fn read_config_file(&mut self, path: String) -> Result<String, FileFail> {
        self.charge()?;
        if !self.config_files.contains(&path) {
            return Err(FileError::Refused(format!(
                "{path:?} is not a file this plugin's config names"
            ))
            .into());
        }
        Ok(read_small(Path::new(&path)).map_err(FileError::Io)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_keys_name_files() {
        let c = r#"{"name":"n","resolvConf":"/etc/a","ipam":{"type":"host-local","resolvConf":"/etc/b","dataDir":"/x"}}"#;
        assert_eq!(allowed_paths(c), ["/etc/b"]);
        assert!(allowed_paths(r#"{"ipam":{"resolvConf":""}}"#).is_empty());
        assert!(allowed_paths(r#"{"ipam":{"resolvConf":7}}"#).is_empty());
        assert!(allowed_paths("not json").is_empty());
    }

    #[test]
    fn reads_small_text_files_only() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("resolv.conf");
        std::fs::write(&ok, "nameserver 192.0.2.1\n").unwrap();
        assert_eq!(read_small(&ok).unwrap(), "nameserver 192.0.2.1\n");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'#'; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        assert!(read_small(&big).unwrap_err().contains("larger than"));
        assert!(read_small(&dir).unwrap_err().contains("not a regular file"));
        let missing = read_small(&dir.join("nope")).unwrap_err();
        assert!(missing.starts_with("open "), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
