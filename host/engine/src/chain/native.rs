//! Classic CNI plugins in a chain: a `type` with no wasm component that
//! exists as an executable in CNI_PATH is executed the way a runtime would
//! (CNI_* environment, config on stdin), so wasm and native plugins mix.
//! Native plugins run with the host's full authority, as they would under
//! any runtime: the sandbox applies to components only.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Attachment, Passed};
use crate::error::HostError;
use crate::sandbox::{valid_type_name, CallError};
use wasm_cni_protocol::result::{self, CniResult};
use wasm_cni_protocol::{CniError, Command, ErrorCode};

/// Where native plugins may come from for one call.
#[derive(Debug, Clone, Default)]
pub struct Natives {
    /// CNI_PATH.
    pub path: Vec<PathBuf>,
    /// Why none may run for this call (a daemon's non-root peer), if so.
    pub refused: Option<String>,
}

impl Natives {
    /// The executable for `plugin`, whose component is not in `dir`: a
    /// `NotFound` naming both places, or the refusal, when there is none.
    pub fn find(&self, plugin: String, dir: PathBuf) -> Result<PathBuf, HostError> {
        if let Some(why) = &self.refused {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "plugin {plugin:?}: no {plugin}.wasm in {}; {why}",
                    dir.display()
                ),
            )
            .into());
        }
        find(&self.path, &plugin).ok_or_else(|| {
            CallError::NotFound {
                plugin,
                dir,
                cni_path: self.path.clone(),
            }
            .into()
        })
    }
}

/// The first regular, executable file named `plugin_type` in `cni_path`.
pub fn find(cni_path: &[PathBuf], plugin_type: &str) -> Option<PathBuf> {
    if !valid_type_name(plugin_type) {
        return None;
    }
    cni_path.iter().map(|d| d.join(plugin_type)).find(|p| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Execute `path` for `command` with `config` on stdin. Returns the parsed
/// result for ADD, `None` otherwise.
#[allow(clippy::too_many_arguments)]
pub fn exec(
    path: &Path,
    plugin_type: &str,
    command: Command,
    att: &Attachment,
    cni_path: &[PathBuf],
    config: &str,
    cni_version: &str,
    deadline: Duration,
) -> Result<Option<CniResult>, HostError> {
    let joined = std::env::join_paths(cni_path)
        .map_err(|e| HostError::internal(format!("CNI_PATH: {e}")))?;
    let args: Vec<String> = att.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut child = Process::new(path)
        .env("CNI_COMMAND", command.as_str())
        .env("CNI_CONTAINERID", &att.container_id)
        .env("CNI_NETNS", netns_for_native(att))
        .env("CNI_IFNAME", &att.ifname)
        .env("CNI_ARGS", args.join(";"))
        .env("CNI_PATH", joined)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| HostError::internal(format!("executing {}: {e}", path.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading everything.
        let _ = stdin.write_all(config.as_bytes());
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut out);
        }
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut err);
        }
        (out, err)
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HostError::internal(format!(
                    "plugin {plugin_type:?} ({}) did not finish within {} ms",
                    path.display(),
                    deadline.as_millis()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => {
                return Err(HostError::internal(format!(
                    "waiting for {plugin_type}: {e}"
                )))
            }
        }
    };
    let (out, err) = reader
        .join()
        .map_err(|_| HostError::internal("reading plugin output"))?;
    let stderr = String::from_utf8_lossy(&err);
    if !stderr.trim().is_empty() {
        wasm_cni_base::log::log(wasm_cni_base::log::Level::Info, plugin_type, stderr.trim());
    }
    if !status.success() {
        let error = match serde_json::from_slice::<Value>(&out) {
            Ok(v) => CniError {
                code: v["code"]
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .unwrap_or(999),
                msg: v["msg"].as_str().unwrap_or_default().to_string(),
                details: v["details"].as_str().unwrap_or_default().to_string(),
            },
            Err(_) => CniError::new(
                ErrorCode::Internal,
                format!("netplugin failed: {:?}: {status}", stderr.trim()),
            ),
        };
        return Err(CallError::Plugin {
            plugin: plugin_type.to_string(),
            error,
        }
        .into());
    }
    if command != Command::Add {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(&out).map_err(|e| HostError::PluginResult {
        plugin: plugin_type.to_string(),
        error: CniError::new(ErrorCode::Decoding, format!("result is not JSON: {e}")),
    })?;
    result::parse(&value, cni_version)
        .map(Some)
        .map_err(|error| HostError::PluginResult {
            plugin: plugin_type.to_string(),
            error,
        })
}

/// CNI_NETNS for a native plugin's process, which can only be given a
/// path: a descriptor the peer passed as this process's `/proc` entry for
/// it, which stays that namespace while the call holds the descriptor.
fn netns_for_native(att: &Attachment) -> String {
    match &att.passed {
        Passed::Descriptor(fd) => format!("/proc/{}/fd/{}", proc_pid(), fd.as_raw_fd()),
        Passed::Nothing => String::new(),
        Passed::ByName => att.netns.clone().unwrap_or_default(),
    }
}

/// This process's pid as the mounted /proc names it (what /proc/self
/// points to): the same as its own pid in a pod, which mounts a /proc of
/// its pid namespace, but not in a pid namespace that kept the node's
/// /proc, where `getpid()` would name another process. A path of pid form
/// rather than /proc/self, so that a native plugin's process, given it,
/// reaches this process's descriptor.
fn proc_pid() -> &'static str {
    static PID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PID.get_or_init(|| {
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str().map(str::to_string))
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| std::process::id().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_executable_files_by_valid_name() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-native-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plain"), b"").unwrap();
        std::fs::write(dir.join("tool"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = vec![PathBuf::from("/nonexistent"), dir.clone()];
        assert_eq!(find(&path, "tool"), Some(dir.join("tool")));
        assert_eq!(find(&path, "plain"), None);
        assert_eq!(find(&path, "../tool"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
