//! Runs a network's chain of plugins in one process, the way libcni runs a
//! conflist: ADD in order passing each result on as the next `prevResult`,
//! DEL in reverse (best effort, reporting every failure), CHECK in order,
//! STATUS in order up to the first failure, GC to every plugin.
//!
//! Unlike libcni, a failed ADD is rolled back here: every plugin that ran
//! (including the one that failed) gets a DEL, and an IPAM allocation the
//! failing plugin made is released even if its own DEL cannot run. The
//! runtime's DEL after a failed ADD then finds nothing left to do.

mod native;
mod services;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::cni::config::{ChainEntry, NetConf};
use crate::cni::result::{self, CniResult};
use crate::cni::Command;
use crate::error::HostError;
use crate::log;
use crate::net::{Net, NetError, NsRef};
use crate::sandbox::{convert, wit, Call, CallError, CreatedLinks, Limits, NetAccess, Runtime};
use crate::state::{now_ms, AttachmentRecord, AttachmentRecords, RECORD_KIND};
use crate::store::StateStore;
use services::StepServices;

/// The attachment an ADD/DEL/CHECK is about (from CNI_* variables).
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
    pub netns: Option<String>,
    pub args: Vec<(String, String)>,
}

pub struct Executor {
    runtime: Arc<Runtime>,
    conf: Arc<NetConf>,
    records: Arc<dyn AttachmentRecords + Send + Sync>,
    store: Arc<dyn StateStore>,
    net: Arc<Mutex<Box<dyn Net>>>,
    /// Links the current attachment's plugins created, across steps.
    created: Arc<Mutex<CreatedLinks>>,
    /// Where native plugins are looked for (CNI_PATH).
    cni_path: Vec<PathBuf>,
}

/// What a chain step runs with.
struct Step<'a> {
    index: usize,
    entry: &'a ChainEntry,
    command: Command,
}

impl Executor {
    pub fn new(
        runtime: Arc<Runtime>,
        conf: Arc<NetConf>,
        records: Arc<dyn AttachmentRecords + Send + Sync>,
        store: Arc<dyn StateStore>,
        net: Box<dyn Net>,
    ) -> Self {
        Executor {
            runtime,
            conf,
            records,
            store,
            net: Arc::new(Mutex::new(net)),
            created: Arc::default(),
            cni_path: Vec::new(),
        }
    }

    /// Let `type`s without a component run as executables from `cni_path`.
    pub fn with_cni_path(mut self, cni_path: Vec<PathBuf>) -> Self {
        self.cni_path = cni_path;
        self
    }

    /// The network backend, e.g. to inspect an in-memory one in tests.
    pub fn net(&self) -> Arc<Mutex<Box<dyn Net>>> {
        self.net.clone()
    }

    pub fn conf(&self) -> &NetConf {
        &self.conf
    }

    fn incoming_prev(&self) -> Result<Option<CniResult>, HostError> {
        match &self.conf.prev_result {
            Some(v) => Ok(Some(result::parse(v, &self.conf.cni_version)?)),
            None => Ok(None),
        }
    }

    pub fn add(&self, att: &Attachment) -> Result<CniResult, HostError> {
        self.adopt_links(None);
        let mut prev = self.incoming_prev()?;
        for (index, entry) in self.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Add,
            };
            match self.run(&step, att, prev.as_ref(), None) {
                Ok(Some(r)) => prev = Some(r),
                Ok(None) => {
                    return Err(HostError::internal(format!(
                        "chain[{index}] ({}) returned no result",
                        entry.plugin_type
                    )))
                }
                Err((err, ipam_held)) => {
                    let reported = reported_by_plugin(&err);
                    self.rollback(att, index, prev.as_ref(), Some((reported, ipam_held)));
                    self.delete_leftover_links(att);
                    return Err(err);
                }
            }
        }
        let result = prev.unwrap_or_default();
        let created = self.created_links();
        let record = AttachmentRecord {
            kind: RECORD_KIND.into(),
            network: self.conf.name.clone(),
            container_id: att.container_id.clone(),
            ifname: att.ifname.clone(),
            netns: att.netns.clone(),
            cni_args: att.args.clone(),
            runtime_config: self.conf.runtime_config.clone(),
            result: result.to_json("1.1.0")?,
            node_links: created.node.into_iter().collect(),
            container_links: created.container.into_iter().collect(),
            created_at: now_ms(),
        };
        if let Err(e) = self.records.save(&record) {
            // Without the record a later DEL could not find what to undo.
            let err = HostError::state("saving the attachment record", e);
            self.rollback(att, self.conf.chain.len(), Some(&result), None);
            self.delete_leftover_links(att);
            return Err(err);
        }
        Ok(result)
    }

    /// Undo a failed ADD. The plugins before the failed one completed, so
    /// each gets a DEL, in reverse. The failed plugin gets one only if the
    /// host stopped it (trap, deadline, limit): a plugin that returned its
    /// error has cleaned up after itself, and a DEL could destroy what was
    /// never its own (an interface that already bore CNI_IFNAME, say).
    /// Either way, an IPAM allocation it still holds is released.
    fn rollback(
        &self,
        att: &Attachment,
        completed: usize,
        partial: Option<&CniResult>,
        failed: Option<(bool, Option<String>)>,
    ) {
        if let Some((reported, ipam_held)) = &failed {
            let step = Step {
                index: completed,
                entry: &self.conf.chain[completed],
                command: Command::Del,
            };
            let released = if *reported {
                false
            } else {
                match self.run(&step, att, partial, None) {
                    Ok(_) => true,
                    Err((e, _)) => {
                        log::warn(format_args!("rollback of chain[{completed}] failed: {e}"));
                        false
                    }
                }
            };
            if !released {
                if let Some(ipam_type) = ipam_held {
                    if let Err(e) = self.release_ipam(&step, att, ipam_type) {
                        log::warn(format_args!(
                            "releasing {ipam_type} after a failed ADD: {e}"
                        ));
                    }
                }
            }
        }
        for index in (0..completed).rev() {
            let step = Step {
                index,
                entry: &self.conf.chain[index],
                command: Command::Del,
            };
            if let Err((e, _)) = self.run(&step, att, partial, None) {
                log::warn(format_args!("rollback of chain[{index}] failed: {e}"));
            }
        }
    }

    fn release_ipam(
        &self,
        step: &Step<'_>,
        att: &Attachment,
        ipam_type: &str,
    ) -> Result<(), HostError> {
        let request = request_for(att, self.plugin_config(step, None)?, None);
        self.services(step.entry, Command::Del, &request, att, None)
            .run_ipam_direct(ipam_type)
    }

    pub fn del(&self, att: &Attachment) -> Result<(), HostError> {
        let rec = self.load_record(att);
        let prev = match self.incoming_prev()? {
            Some(p) => Some(p),
            None => recorded_result(rec.as_ref()),
        };
        self.adopt_links(rec.as_ref());
        let errors = self.del_chain(att, prev.as_ref());
        if errors.is_empty() {
            self.records
                .remove(&self.conf.name, &att.container_id, &att.ifname)
                .map_err(|e| HostError::state("removing the attachment record", e))?;
            Ok(())
        } else {
            Err(HostError::many(errors))
        }
    }

    /// DEL every plugin in reverse, best effort: every failure is kept.
    fn del_chain(&self, att: &Attachment, prev: Option<&CniResult>) -> Vec<HostError> {
        let mut errors = Vec::new();
        for (index, entry) in self.conf.chain.iter().enumerate().rev() {
            let step = Step {
                index,
                entry,
                command: Command::Del,
            };
            if let Err((e, _)) = self.run(&step, att, prev, None) {
                errors.push(e);
            }
        }
        errors
    }

    pub fn check(&self, att: &Attachment) -> Result<(), HostError> {
        let rec = self.load_record(att);
        let prev = match self.incoming_prev()? {
            Some(p) => Some(p),
            None => recorded_result(rec.as_ref()),
        };
        self.adopt_links(rec.as_ref());
        for (index, entry) in self.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Check,
            };
            self.run(&step, att, prev.as_ref(), None)
                .map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    pub fn status(&self) -> Result<(), HostError> {
        let att = no_attachment();
        for (index, entry) in self.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Status,
            };
            self.run(&step, &att, None, None).map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// GC: DEL every recorded attachment of this network that is not in the
    /// valid set (as libcni does with its cache), then send GC to every
    /// plugin so each can release what it holds for unknown attachments.
    pub fn gc(&self) -> Result<(), HostError> {
        let valid: Vec<(String, String)> = self.conf.valid_attachments.clone().unwrap_or_default();
        let mut errors = Vec::new();
        let records = self
            .records
            .list(&self.conf.name)
            .map_err(|e| HostError::state("listing attachment records", e))?;
        for rec in records {
            let key = (rec.container_id.clone(), rec.ifname.clone());
            if valid.contains(&key) {
                continue;
            }
            log::info(format_args!(
                "gc: deleting stale attachment {} {}",
                rec.container_id, rec.ifname
            ));
            let att = Attachment {
                container_id: rec.container_id.clone(),
                ifname: rec.ifname.clone(),
                netns: rec.netns.clone(),
                args: rec.cni_args.clone(),
            };
            self.adopt_links(Some(&rec));
            let errs = self.del_chain(&att, recorded_result(Some(&rec)).as_ref());
            if !errs.is_empty() {
                errors.extend(errs);
                continue;
            }
            // Whatever the plugins left of the stale attachment in the node
            // namespace goes too: the host recorded it as theirs.
            errors.extend(self.delete_node_links());
            if let Err(e) = self
                .records
                .remove(&self.conf.name, &att.container_id, &att.ifname)
            {
                errors.push(HostError::state("removing a stale attachment record", e));
            }
        }
        let valid_wit: Vec<wit::Attachment> = valid
            .iter()
            .map(|(c, i)| wit::Attachment {
                container_id: c.clone(),
                ifname: i.clone(),
            })
            .collect();
        let att = no_attachment();
        for (index, entry) in self.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Gc,
            };
            if let Err((e, _)) = self.run(&step, &att, None, Some(&valid_wit)) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(HostError::many(errors))
        }
    }

    fn load_record(&self, att: &Attachment) -> Option<AttachmentRecord> {
        match self
            .records
            .load(&self.conf.name, &att.container_id, &att.ifname)
        {
            Ok(r) => r,
            Err(e) => {
                // Like libcni with an unreadable cache: carry on without it.
                log::warn(format_args!("ignoring unreadable attachment record: {e}"));
                None
            }
        }
    }

    /// Delete the node links recorded for the current attachment that still
    /// exist (GC of a stale attachment).
    fn delete_node_links(&self) -> Vec<HostError> {
        let names = self.created_links().node;
        if names.is_empty() {
            return Vec::new();
        }
        let Ok(mut net) = self.net.lock() else {
            return vec![HostError::internal("network backend poisoned")];
        };
        let node = match net.open(NsRef::Current) {
            Ok(id) => id,
            Err(e) => {
                return vec![HostError::internal(format!(
                    "opening the node namespace: {e}"
                ))]
            }
        };
        let mut errors = Vec::new();
        for name in names {
            match net.delete_link(node, &name) {
                Ok(()) => log::info(format_args!("gc: deleted stale node link {name}")),
                Err(NetError::NotFound(_)) => {}
                Err(e) => errors.push(HostError::internal(format!(
                    "gc: deleting stale node link {name}: {e}"
                ))),
            }
        }
        errors
    }

    /// After a failed ADD is rolled back, delete the links its plugins
    /// created that are still there: a plugin the host stopped halfway (a
    /// trap, the deadline, a limit) cannot be relied on to know, in its DEL,
    /// what it made before it was stopped. The set holds only links created
    /// during this ADD (it starts empty), so nothing else can go. Best
    /// effort: failures are logged, the ADD's own error is what is reported.
    fn delete_leftover_links(&self, att: &Attachment) {
        let created = self.created_links();
        if created.node.is_empty() && created.container.is_empty() {
            return;
        }
        let Ok(mut net) = self.net.lock() else {
            return;
        };
        let Ok(node) = net.open(NsRef::Current) else {
            return;
        };
        let container = att
            .netns
            .as_deref()
            .filter(|p| !p.is_empty())
            .and_then(|p| net.open(NsRef::Path(std::path::Path::new(p))).ok())
            .filter(|id| !net.same_ns(*id, node));
        let sides = [(Some(node), created.node), (container, created.container)];
        for (ns, names) in sides {
            let Some(ns) = ns else { continue };
            for name in names {
                match net.delete_link(ns, &name) {
                    Ok(()) => log::info(format_args!("failed ADD: deleted leftover link {name}")),
                    // A veth goes with its peer; DELs may have removed it.
                    Err(NetError::NotFound(_)) => {}
                    Err(e) => log::warn(format_args!(
                        "failed ADD: cannot delete leftover link {name}: {e}"
                    )),
                }
            }
        }
        if let Ok(mut c) = self.created.lock() {
            *c = CreatedLinks::default();
        }
    }

    fn net_access(&self, entry: &ChainEntry, att: &Attachment) -> NetAccess {
        // The node links a plugin may change are the ones its own config
        // names, under the keys the reference plugins use for them, or the
        // reference default when the key is absent (bridge: cni0).
        let named = |key: &str| {
            entry
                .raw
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let mut config_named: BTreeSet<String> = ["bridge", "master"]
            .iter()
            .filter_map(|k| named(k))
            .map(str::to_string)
            .collect();
        if entry.plugin_type == "bridge" && named("bridge").is_none() {
            config_named.insert("cni0".into());
        }
        NetAccess {
            backend: self.net.clone(),
            container_path: att
                .netns
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            ifname: att.ifname.clone(),
            config_named,
            default_master: named("master").is_none(),
            created: self.created.clone(),
        }
    }

    /// Seed the created-links set from a record (DEL, CHECK, GC).
    fn adopt_links(&self, rec: Option<&AttachmentRecord>) {
        if let Ok(mut c) = self.created.lock() {
            *c = CreatedLinks {
                node: rec
                    .map(|r| r.node_links.iter().cloned().collect())
                    .unwrap_or_default(),
                container: rec
                    .map(|r| r.container_links.iter().cloned().collect())
                    .unwrap_or_default(),
            };
        }
    }

    fn created_links(&self) -> CreatedLinks {
        self.created.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn services(
        &self,
        entry: &ChainEntry,
        command: Command,
        request: &wit::Request,
        att: &Attachment,
        valid: Option<&[wit::Attachment]>,
    ) -> StepServices {
        StepServices::new(
            self.runtime.clone(),
            self.store.clone(),
            Some(self.net_access(entry, att)),
            &self.cni_path,
            &self.conf.name,
            entry,
            command,
            request,
            valid,
        )
    }

    fn plugin_config(
        &self,
        step: &Step<'_>,
        prev: Option<&CniResult>,
    ) -> Result<String, HostError> {
        let prev_json = match prev {
            Some(p) => Some(p.to_json(&self.conf.cni_version)?),
            None => None,
        };
        let gc_or_status = matches!(step.command, Command::Gc | Command::Status);
        let map = self
            .conf
            .plugin_config(step.entry, prev_json.as_ref(), gc_or_status);
        serde_json::to_string(&Value::Object(map))
            .map_err(|e| HostError::internal(format!("serialising plugin config: {e}")))
    }

    /// Run one step. On failure also returns the IPAM type whose allocation
    /// the step still holds, if any (for rollback).
    fn run(
        &self,
        step: &Step<'_>,
        att: &Attachment,
        prev: Option<&CniResult>,
        valid: Option<&[wit::Attachment]>,
    ) -> Result<Option<CniResult>, (HostError, Option<String>)> {
        let at = |e: HostError| (e.in_step(step.index, &step.entry.plugin_type), None);
        let config = self.plugin_config(step, prev).map_err(at)?;
        let plugin = match self
            .runtime
            .load(&step.entry.plugin_type, step.entry.limits.sha256.as_deref())
        {
            Ok(p) => p,
            Err(CallError::NotFound { plugin, dir, .. }) => {
                let Some(path) = native::find(&self.cni_path, &plugin) else {
                    return Err(at(CallError::NotFound {
                        plugin,
                        dir,
                        cni_path: self.cni_path.clone(),
                    }
                    .into()));
                };
                log::debug(format_args!(
                    "chain[{}] {plugin}: native {}",
                    step.index,
                    path.display()
                ));
                let deadline = Limits::resolve(&step.entry.limits).deadline_ms;
                return native::exec(
                    &path,
                    &plugin,
                    step.command,
                    att,
                    &self.cni_path,
                    &config,
                    &self.conf.cni_version,
                    Duration::from_millis(deadline),
                )
                .map_err(at);
            }
            Err(e) => return Err(at(e.into())),
        };
        let request = request_for(att, config.clone(), prev);
        let services = Arc::new(self.services(step.entry, step.command, &request, att, valid));
        let call = match step.command {
            Command::Add => Call::Add(&request),
            Command::Del => Call::Del(&request),
            Command::Check => Call::Check(&request),
            Command::Status => Call::Status(&config),
            Command::Gc => Call::Gc(&config, valid.unwrap_or(&[])),
            Command::Version => return Ok(None),
        };
        log::debug(format_args!(
            "chain[{}] {} {}",
            step.index,
            step.entry.plugin_type,
            call.verb()
        ));
        let limits = Limits::resolve(&step.entry.limits);
        match self.runtime.call(&plugin, limits, services.clone(), call) {
            Ok(Some(r)) => {
                let r = convert::from_wit(r);
                // A plugin's result is untrusted input like any other:
                // re-read it through the same parser runtimes' results take.
                let json = r.to_json("1.1.0").map_err(|e| at(e.into()))?;
                let checked = result::parse(&json, "1.1.0").map_err(|e| {
                    at(HostError::PluginResult {
                        plugin: step.entry.plugin_type.clone(),
                        error: e,
                    })
                })?;
                Ok(Some(checked))
            }
            Ok(None) => Ok(None),
            Err(e) => Err((
                HostError::from(e).in_step(step.index, &step.entry.plugin_type),
                services.ipam_held(),
            )),
        }
    }
}

/// Whether a failure is the plugin's own answer (it returned an error), as
/// opposed to the host stopping it.
fn reported_by_plugin(e: &HostError) -> bool {
    match e {
        HostError::InStep { source, .. } => reported_by_plugin(source),
        HostError::Call(CallError::Plugin { .. }) => true,
        _ => false,
    }
}

fn request_for(att: &Attachment, config: String, prev: Option<&CniResult>) -> wit::Request {
    wit::Request {
        container_id: att.container_id.clone(),
        ifname: att.ifname.clone(),
        netns: att.netns.clone(),
        args: att.args.clone(),
        config,
        prev_result: prev.map(convert::to_wit),
    }
}

fn no_attachment() -> Attachment {
    Attachment {
        container_id: String::new(),
        ifname: String::new(),
        netns: None,
        args: Vec::new(),
    }
}

fn recorded_result(rec: Option<&AttachmentRecord>) -> Option<CniResult> {
    rec.and_then(|r| result::parse(&r.result, "1.1.0").ok())
}
