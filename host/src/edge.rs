//! The CNI edge: environment + stdin in, result or error JSON out. Every
//! failure becomes a CNI error here and nowhere else.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use crate::chain::{Attachment, Executor};
use crate::cni::{self, config, env, version, CniError, Command, ErrorCode};
use crate::error::HostError;
use crate::log;
use crate::net::KernelNet;
use crate::sandbox::Runtime;
use crate::state::DiskRecords;
use crate::store::DiskStore;

/// Where compiled artifacts go unless the config says `cacheDir`: on disk,
/// so they survive reboots (unlike the state under /run).
pub const DEFAULT_CACHE_DIR: &str = "/var/cache/wasm-cni";

/// What the process prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub exit_code: i32,
}

impl Outcome {
    fn ok(stdout: String) -> Self {
        Outcome {
            stdout,
            exit_code: 0,
        }
    }

    fn error(e: CniError, cni_version: Option<&str>) -> Self {
        log::error(format_args!("{e}"));
        Outcome {
            stdout: e.to_json(cni_version),
            exit_code: 1,
        }
    }
}

/// What the edge makes of the environment and stdin before anything runs.
pub enum Prepared {
    /// Answer without running a chain (VERSION, or a protocol error).
    Reply(Outcome),
    /// Run the chain.
    Dispatch(Box<cni::Invocation>, Box<config::NetConf>),
}

/// Parse and validate one invocation: everything [`run`] does before it
/// touches the machine (no file, namespace or plugin is opened), so this is
/// the part the fuzzers drive with arbitrary input.
pub fn prepare(vars: Vec<(String, String)>, stdin: &mut dyn Read) -> Prepared {
    let inv = match env::from_env(vars) {
        Ok(inv) => inv,
        Err(e) => return Prepared::Reply(Outcome::error(e, None)),
    };
    let mut input = Vec::new();
    if let Err(e) = stdin.read_to_end(&mut input) {
        return Prepared::Reply(Outcome::error(
            CniError::new(ErrorCode::Io, format!("reading stdin: {e}")),
            None,
        ));
    }
    if inv.command == Command::Version {
        let asked = serde_json::from_slice::<serde_json::Value>(&input)
            .ok()
            .and_then(|v| v.get("cniVersion")?.as_str().map(str::to_string));
        return Prepared::Reply(Outcome::ok(version::version_reply(asked.as_deref())));
    }
    match config::parse(&input, inv.command) {
        Ok(c) => Prepared::Dispatch(Box::new(inv), Box::new(c)),
        Err(e) => Prepared::Reply(Outcome::error(e, None)),
    }
}

/// Run one CNI invocation.
pub fn run(vars: Vec<(String, String)>, stdin: &mut dyn Read) -> Outcome {
    let (inv, conf) = match prepare(vars, stdin) {
        Prepared::Reply(out) => return out,
        Prepared::Dispatch(inv, conf) => (inv, conf),
    };
    let cni_version = conf.cni_version.clone();
    match dispatch(&inv, *conf) {
        Ok(stdout) => Outcome::ok(stdout),
        Err(e) => Outcome::error(CniError::from(e), Some(&cni_version)),
    }
}

fn dispatch(inv: &cni::Invocation, conf: config::NetConf) -> Result<String, HostError> {
    let cache_dir = conf
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
    let runtime = Arc::new(
        Runtime::new(&conf.plugin_dir, Some(cache_dir))
            .map_err(|e| HostError::internal(format!("starting the wasm engine: {e}")))?,
    );
    let records = Arc::new(DiskRecords::new(&conf.state_dir));
    let cni_version = conf.cni_version.clone();
    let store = Arc::new(DiskStore::new(&conf.state_dir.join("store")));
    let exec = Executor::new(
        runtime.clone(),
        Arc::new(conf),
        records,
        store,
        Box::new(KernelNet::new()),
    )
    .with_cni_path(inv.path.clone());
    let att = Attachment {
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        netns: inv.netns.clone(),
        args: inv.args.clone(),
    };
    let out = match inv.command {
        Command::Add => {
            let result = exec.add(&att)?;
            Ok(cni::result::to_string_pretty(
                &result.to_json(&cni_version)?,
            ))
        }
        Command::Del => exec.del(&att).map(|()| String::new()),
        Command::Check => {
            if exec.conf().disable_check {
                Ok(String::new())
            } else {
                exec.check(&att).map(|()| String::new())
            }
        }
        Command::Status => exec.status().map(|()| String::new()),
        Command::Gc => {
            if exec.conf().disable_gc {
                Ok(String::new())
            } else if exec.conf().valid_attachments.is_none() {
                // Never guess: without the list, every allocation would look
                // stale.
                Err(CniError::new(
                    ErrorCode::InvalidConfig,
                    "GC needs cni.dev/valid-attachments",
                )
                .into())
            } else {
                exec.gc().map(|()| String::new())
            }
        }
        Command::Version => Ok(version::version_reply(None)),
    };
    let (compiled, loaded) = runtime.cache().stats();
    log::debug(format_args!(
        "artifact cache: {compiled} compiled, {loaded} loaded"
    ));
    out
}
