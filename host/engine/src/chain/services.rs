//! What a chain step's plugin may ask of the host: for now, IPAM delegation.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{native, Attachment, StepReport, Steps};
use crate::error::HostError;
use crate::sandbox::{
    convert, wit, Call, CallError, CniResultWit, Faults, HostWork, IpamOp, Limits, NetAccess,
    Runtime, Services, StoreAccess,
};
use wasm_cni_protocol::config::{ChainEntry, Limits as ConfLimits};
use wasm_cni_protocol::{CniError, Command, ErrorCode};
use wasm_cni_store::{Owner, Scope, StateStore};

/// Host work kept per plugin call for its trace.
const MAX_WORK: usize = 256;

pub(super) struct StepServices {
    runtime: Arc<Runtime>,
    /// The step's index, and where the delegate's calls are reported.
    steps: (usize, Steps),
    command: Command,
    network: String,
    /// The plugin this step runs (its store scope).
    plugin_type: String,
    store: Arc<dyn StateStore>,
    /// Kernel access for the step's own plugin; its IPAM delegate gets none.
    net: Option<NetAccess>,
    /// The `dataDir` the config gives this step's plugin, if any.
    data_dir: Option<PathBuf>,
    /// `ipam.type` of the step's config, if it has one.
    ipam_type: Option<String>,
    ipam_limits: ConfLimits,
    ipam_data_dir: Option<PathBuf>,
    request: wit::Request,
    /// The attachment, for a native delegate's environment.
    att: Attachment,
    valid: Vec<wit::Attachment>,
    natives: native::Natives,
    image_dir: PathBuf,
    /// The node's trust policy, for a delegate that names an image.
    pub(super) trust: Option<Arc<super::Trust>>,
    /// Components loaded ahead, the delegate's among them.
    pub(super) ahead: Option<Arc<super::ahead::Ahead>>,
    cni_version: String,
    /// Set while the delegate holds an allocation made during this step.
    held: Mutex<Option<String>>,
    /// Shared with the delegate: calls are counted across the chain.
    pub(super) faults: Option<Arc<Faults>>,
    /// Whether the host's work is kept for the trace, and what it was.
    pub(super) trace_work: bool,
    pub(super) work: Mutex<Vec<HostWork>>,
}

impl StepServices {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        runtime: Arc<Runtime>,
        steps: (usize, Steps),
        store: Arc<dyn StateStore>,
        net: Option<NetAccess>,
        natives: &native::Natives,
        image_dir: &std::path::Path,
        network: &str,
        entry: &ChainEntry,
        command: Command,
        request: &wit::Request,
        att: &Attachment,
        valid: Option<&[wit::Attachment]>,
    ) -> Self {
        let ipam = entry.raw.get("ipam").and_then(Value::as_object);
        let ipam_type = super::ipam_type(entry).map(str::to_string);
        let ipam_limits = entry.ipam_limits.clone();
        let ipam_data_dir = ipam
            .and_then(|i| i.get("dataDir"))
            .and_then(Value::as_str)
            .map(PathBuf::from);
        // An IPAM plugin run as a chain step keeps its data where its own
        // `ipam.dataDir` says, as it would when delegated to.
        let data_dir = match entry.raw.get("dataDir").and_then(Value::as_str) {
            Some(d) => Some(PathBuf::from(d)),
            None if ipam_type.as_deref() == Some(entry.plugin_type.as_str()) => {
                ipam_data_dir.clone()
            }
            None => None,
        };
        StepServices {
            runtime,
            steps,
            command,
            network: network.to_string(),
            plugin_type: entry.plugin_type.clone(),
            store,
            net,
            data_dir,
            ipam_type,
            ipam_limits,
            ipam_data_dir,
            // The delegate gets the very same request, prevResult included
            // (CHECK needs it).
            request: request.clone(),
            att: att.clone(),
            valid: valid.map(<[_]>::to_vec).unwrap_or_default(),
            natives: natives.clone(),
            image_dir: image_dir.to_path_buf(),
            trust: None,
            ahead: None,
            cni_version: serde_json::from_str::<Value>(&request.config)
                .ok()
                .and_then(|v| v.get("cniVersion")?.as_str().map(str::to_string))
                .unwrap_or_default(),
            held: Mutex::new(None),
            faults: None,
            trace_work: false,
            work: Mutex::new(Vec::new()),
        }
    }

    /// The host work recorded so far, taken.
    pub(super) fn take_work(&self) -> Vec<HostWork> {
        self.work
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }

    /// The IPAM type still holding an allocation made in this step.
    pub(super) fn ipam_held(&self) -> Option<String> {
        self.held.lock().ok().and_then(|h| h.clone())
    }

    /// DEL the delegate directly, without the interface plugin.
    pub(super) fn run_ipam_direct(&self, ipam_type: &str) -> Result<(), HostError> {
        self.call_delegate(ipam_type, IpamOp::Del, None).map(|_| ())
    }

    /// Run the delegate under its own limits, and never past `deadline`
    /// (the calling plugin's).
    fn call_delegate(
        &self,
        ipam_type: &str,
        op: IpamOp,
        deadline: Option<Instant>,
    ) -> Result<Option<CniResultWit>, HostError> {
        let mut limits = Limits::resolve(&self.ipam_limits);
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            limits.deadline_ms = limits.deadline_ms.min(left.as_millis() as u64).max(1);
        }
        let plugin = match super::ahead::load(
            self.ahead.as_deref(),
            &self.runtime,
            &self.image_dir,
            self.trust.as_deref(),
            ipam_type,
            &self.ipam_limits,
        ) {
            Ok(p) => p,
            Err(CallError::NotFound { plugin, dir, .. }) => {
                let path = self.natives.find(plugin.clone(), dir)?;
                let command = match op {
                    IpamOp::Add => Command::Add,
                    IpamOp::Del => Command::Del,
                    IpamOp::Check => Command::Check,
                    IpamOp::Status => Command::Status,
                    IpamOp::Gc => Command::Gc,
                };
                // Same environment, same stdin: exactly what a classic
                // plugin's delegation would exec.
                return native::exec(
                    &path,
                    &plugin,
                    command,
                    &self.att,
                    &self.natives.path,
                    &self.request.config,
                    &self.cni_version,
                    Duration::from_millis(limits.deadline_ms),
                )
                .map(|r| r.as_ref().map(convert::to_wit));
            }
            Err(e) => return Err(e.into()),
        };
        let req = &self.request;
        let call = match op {
            IpamOp::Add => Call::Add(req),
            IpamOp::Del => Call::Del(req),
            IpamOp::Check => Call::Check(req),
            IpamOp::Status => Call::Status(&req.config),
            IpamOp::Gc => Call::Gc(&req.config, &self.valid),
        };
        // The delegate cannot delegate further: no IPAM type of its own.
        let inner = Arc::new(StepServices {
            runtime: self.runtime.clone(),
            steps: self.steps.clone(),
            command: self.command,
            network: self.network.clone(),
            plugin_type: ipam_type.to_string(),
            store: self.store.clone(),
            net: None,
            data_dir: self.ipam_data_dir.clone(),
            ipam_type: None,
            ipam_limits: ConfLimits::default(),
            ipam_data_dir: None,
            request: self.request.clone(),
            att: self.att.clone(),
            valid: self.valid.clone(),
            natives: native::Natives::default(),
            image_dir: self.image_dir.clone(),
            trust: self.trust.clone(),
            ahead: None,
            cni_version: self.cni_version.clone(),
            held: Mutex::new(None),
            faults: self.faults.clone(),
            trace_work: self.trace_work,
            work: Mutex::new(Vec::new()),
        });
        let started = Instant::now();
        let outcome = self.runtime.call(&plugin, limits, inner.clone(), call);
        if let Ok(mut steps) = self.steps.1.lock() {
            steps.push(StepReport {
                host_work: inner.take_work(),
                digest: Some(plugin.digest.clone()),
                index: self.steps.0,
                plugin: ipam_type.to_string(),
                verb: self.command.as_str(),
                started: super::wall_start(started),
                duration: started.elapsed(),
                abort: match &outcome {
                    Err(CallError::Aborted { cause, .. }) => Some(cause.kind()),
                    _ => None,
                },
            });
        }
        Ok(outcome?)
    }
}

fn allowed(command: Command, op: IpamOp) -> bool {
    matches!(
        (command, op),
        (Command::Add, IpamOp::Add | IpamOp::Del)
            | (Command::Del, IpamOp::Del)
            | (Command::Check, IpamOp::Check)
            | (Command::Status, IpamOp::Status)
            | (Command::Gc, IpamOp::Gc)
    )
}

impl Services for StepServices {
    fn net(&self) -> Option<NetAccess> {
        self.net.clone()
    }

    fn wants_work(&self) -> bool {
        self.trace_work
    }

    fn record(&self, work: HostWork) {
        if let Ok(mut w) = self.work.lock() {
            // A plugin looping on refused calls is bounded by its host-call
            // budget; this bounds what one call keeps for its trace.
            if w.len() < MAX_WORK {
                w.push(work);
            }
        }
    }

    fn faults(&self) -> Option<Arc<Faults>> {
        self.faults.clone()
    }

    fn store(&self) -> Option<StoreAccess> {
        Some(StoreAccess {
            backend: self.store.clone(),
            scope: Scope {
                network: self.network.clone(),
                plugin: self.plugin_type.clone(),
                data_dir: self.data_dir.clone(),
            },
            owner: Owner {
                container_id: self.request.container_id.clone(),
                ifname: self.request.ifname.clone(),
            },
            command: self.command,
        })
    }

    fn ipam(&self, op: IpamOp, deadline: Instant) -> Result<Option<CniResultWit>, CniError> {
        if !allowed(self.command, op) {
            return Err(CniError::new(
                ErrorCode::Internal,
                format!(
                    "ipam.{op:?} is not allowed during {}",
                    self.command.as_str()
                )
                .to_lowercase(),
            ));
        }
        let Some(ipam_type) = &self.ipam_type else {
            return Err(CniError::new(
                ErrorCode::InvalidConfig,
                "IPAM config missing 'ipam' key",
            ));
        };
        let out = self
            .call_delegate(ipam_type, op, Some(deadline))
            .map_err(CniError::from)?;
        if let Ok(mut held) = self.held.lock() {
            match op {
                IpamOp::Add => *held = Some(ipam_type.clone()),
                IpamOp::Del => *held = None,
                _ => {}
            }
        }
        // What IPAM handed out is the attachment's own: node-side
        // addresses and routes of its plugins may lie in those networks.
        if let (Some(result), Some(net)) = (&out, &self.net) {
            let nets = result
                .ips
                .iter()
                .filter_map(|ip| wasm_cni_kernel::net::parse_cidr(&ip.address).ok());
            if let Ok(mut ledger) = net.ledger.lock() {
                ledger.own_nets.extend(nets);
            }
        }
        Ok(out)
    }
}
