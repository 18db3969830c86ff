//! One verb on one attachment: the value that owns what the host accounts
//! to that attachment while its chain runs, and is dropped with the verb.
//!
//! The ledger (links created, changes made, the attachment's own networks,
//! filter rules added, what it made against the caps) is what the policy
//! grants from: a ledger that outlived its attachment would carry one
//! attachment's grants into the next. So nothing of it lives on the
//! [`Executor`], which holds only what lasts across calls; each ADD, DEL,
//! CHECK, each attachment a GC tears down, and each plugin-wide call
//! (STATUS, GC's last round) gets an [`Operation`] of its own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::services::StepServices;
use super::{
    cleanup, effects, native, prior_links, recorded, reported_by_plugin, request_for, union,
    Attachment, Executor, PluginConfig, Step,
};
use crate::error::HostError;
use crate::sandbox::policy::{ConfigGrants, PortGrant, Side};
use crate::sandbox::{
    convert, wit, Call, CallError, CreatedLinks, FilterAccess, Ledger, Limits, NetAccess, OnCreated,
};
use wasm_cni_base::log;
use wasm_cni_kernel::filter::{Rule, Tag};
use wasm_cni_kernel::net::IpNet;
use wasm_cni_protocol::config::ChainEntry;
use wasm_cni_protocol::result::{self, CniResult};
use wasm_cni_protocol::Command;
use wasm_cni_store::state::AttachmentRecord;

pub(super) struct Operation<'e> {
    exec: &'e Executor,
    att: &'e Attachment,
    /// Shared with each step's network and filter imports while it runs.
    ledger: Arc<Mutex<Ledger>>,
    /// During ADD: persists the created links into the pending record.
    on_created: Option<OnCreated>,
}

impl<'e> Operation<'e> {
    /// A verb on `att` whose ledger starts with the links `rec` lists (DEL,
    /// CHECK, GC), nothing else.
    pub(super) fn new(
        exec: &'e Executor,
        att: &'e Attachment,
        rec: Option<&AttachmentRecord>,
    ) -> Self {
        Operation {
            exec,
            att,
            ledger: Arc::new(Mutex::new(Ledger {
                created: rec.map(prior_links).unwrap_or_default(),
                ..Ledger::default()
            })),
            on_created: None,
        }
    }

    /// ADD: the chain in order, each result the next one's prevResult; a
    /// failure rolls back what ran and what the host did for it.
    pub(super) fn add(mut self, mut prev: Option<CniResult>) -> Result<CniResult, HostError> {
        let exec = self.exec;
        if let Some(p) = &prev {
            self.own_addresses(p);
        }
        let prior = self.start_pending()?;
        for (index, entry) in exec.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Add,
            };
            match self.run(&step, prev.as_ref(), None) {
                Ok(Some(r)) => prev = Some(r),
                Ok(None) => {
                    let err = HostError::internal(format!(
                        "chain[{index}] ({}) returned no result",
                        entry.plugin_type
                    ));
                    self.rollback(index + 1, prev.as_ref(), None);
                    self.undo_failed_add(prior.as_ref());
                    return Err(err);
                }
                Err((err, ipam_held)) => {
                    let reported = reported_by_plugin(&err);
                    self.rollback(index, prev.as_ref(), Some((reported, ipam_held)));
                    self.undo_failed_add(prior.as_ref());
                    return Err(err);
                }
            }
        }
        let result = prev.unwrap_or_default();
        let mut created = self.ledger().created;
        if let Some(prior) = &prior {
            created = union(&prior_links(prior), &created);
        }
        // Nothing created, nothing to look up: an IPAM-only chain opens no
        // namespace (in a daemon, a netlink socket and two setns per ADD).
        let links = if created.is_empty() {
            created
        } else {
            exec.with_sides(self.att, |net, sides| {
                Ok(cleanup::live(net, sides, &created))
            })?
        };
        let mut record = exec.record(self.att, &links);
        record.result = result.to_json("1.1.0")?;
        record.pending = false;
        if let Some(prior) = &prior {
            record.node_settings = prior.node_settings.clone();
        }
        if let Err(err) = self.finish_add(&mut record, &links) {
            // Without the record a later DEL could not find what to undo.
            self.rollback(exec.conf.chain.len(), Some(&result), None);
            self.undo_failed_add(prior.as_ref());
            return Err(err);
        }
        Ok(result)
    }

    /// CHECK: the chain in order, up to the first failure.
    pub(super) fn check(self, prev: Option<&CniResult>) -> Result<(), HostError> {
        for (index, entry) in self.exec.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command: Command::Check,
            };
            self.run(&step, prev, None).map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// STATUS of every plugin in order, or GC's round with the valid
    /// attachments (`valid`): every failure of a GC is kept, STATUS stops
    /// at the first.
    pub(super) fn each_plugin(
        self,
        command: Command,
        valid: Option<&[wit::Attachment]>,
    ) -> Vec<HostError> {
        let mut errors = Vec::new();
        for (index, entry) in self.exec.conf.chain.iter().enumerate() {
            let step = Step {
                index,
                entry,
                command,
            };
            if let Err((e, _)) = self.run(&step, None, valid) {
                errors.push(e);
                if command == Command::Status {
                    break;
                }
            }
        }
        errors
    }

    /// Make the host's own node settings for what the ADD added (`effects`)
    /// and save the final record, both under the state directory's lock
    /// when there are settings to make, so that a DEL deciding whether to
    /// put one back sees this record.
    fn finish_add(
        &self,
        record: &mut AttachmentRecord,
        links: &CreatedLinks,
    ) -> Result<(), HostError> {
        let exec = self.exec;
        let save = |r: &AttachmentRecord| {
            exec.records
                .save(r)
                .map_err(|e| HostError::state("saving the attachment record", e))
        };
        let added = self.ledger().filter_added;
        let hairpin = |r: &Rule| {
            matches!(
                r,
                Rule::HairpinMasquerade {
                    dst: std::net::IpAddr::V4(_)
                }
            )
        };
        if !added.iter().any(hairpin) {
            return save(record);
        }
        let _all = exec
            .records
            .lock_all()
            .map_err(|e| HostError::state("locking the state directory", e))?;
        let me = (
            exec.conf.name.as_str(),
            self.att.container_id.as_str(),
            self.att.ifname.as_str(),
        );
        let named = exec.chain_named();
        let scope = effects::Scope {
            created: &links.node,
            named: &named,
        };
        let made = exec.with_sides(self.att, |net, sides| {
            Ok(effects::apply(
                net,
                sides.node,
                &*exec.records,
                me,
                &scope,
                &added,
            ))
        })?;
        let mut changed = Vec::new();
        for (setting, wrote) in made {
            if record.node_settings.iter().any(|s| s.same(&setting)) {
                continue;
            }
            if wrote {
                changed.push(setting.clone());
            }
            record.node_settings.push(setting);
        }
        let saved = save(record);
        if saved.is_err() {
            let _ = exec.with_sides(self.att, |net, sides| {
                for s in &changed {
                    if let Err(e) = effects::put_back(net, sides.node, s) {
                        log::warn(format_args!("failed ADD: putting back {}: {e}", s.key));
                    }
                }
                Ok(())
            });
        }
        saved
    }

    /// Write the pending record before any plugin runs, under the state
    /// lock (so that a failed ADD deciding whether others depend on what it
    /// changed sees every ADD that has started), and keep it up to date as
    /// links are created: if this process dies, DEL and GC find them.
    ///
    /// An ADD for an attachment that already has a record (a runtime
    /// retrying an ADD whose answer it lost) keeps that record: the links
    /// it lists stay listed, and a failure puts it back as it was. Returns
    /// it.
    fn start_pending(&mut self) -> Result<Option<AttachmentRecord>, HostError> {
        let exec = self.exec;
        let prior = exec.load_record(self.att);
        let base = prior
            .clone()
            .unwrap_or_else(|| exec.record(self.att, &CreatedLinks::default()));
        {
            let _all = exec
                .records
                .lock_all()
                .map_err(|e| HostError::state("locking the state directory", e))?;
            if prior.is_none() {
                exec.records
                    .save(&base)
                    .map_err(|e| HostError::state("saving the pending attachment record", e))?;
            }
        }
        let records = exec.records.clone();
        let known = prior.as_ref().map(prior_links).unwrap_or_default();
        self.on_created = Some(Arc::new(move |links: &CreatedLinks| {
            let mut rec = base.clone();
            let all = union(&known, links);
            rec.node_links = recorded(&all, Side::Node);
            rec.container_links = recorded(&all, Side::Container);
            if let Err(e) = records.save(&rec) {
                log::warn(format_args!("updating the pending attachment record: {e}"));
            }
        }));
        Ok(prior)
    }

    /// After a failed ADD was rolled back: delete the links its plugins
    /// created that are still there (a plugin the host stopped halfway
    /// cannot be relied on to know, in its DEL, what it made), take back
    /// every other change it made, in reverse, and drop its pending record.
    /// Changes to what other attachments share (the network's bridge, the
    /// node's forwarding switches) are kept if any other attachment exists
    /// or is being added: it may depend on them. Best effort: failures are
    /// logged, the ADD's own error is what is reported.
    fn undo_failed_add(&mut self, prior: Option<&AttachmentRecord>) {
        // Nothing may write the pending record once it is being dropped.
        self.on_created = None;
        let exec = self.exec;
        let att = self.att;
        let ledger = self.ledger();
        let outcome = exec.with_sides(att, |net, sides| {
            for e in cleanup::delete_links(net, sides, &ledger.created, "failed ADD") {
                log::warn(format_args!("{e}"));
            }
            if let Err(e) = exec.filter_cleanup(att, |f, tag| f.remove(tag, &ledger.filter_added)) {
                log::warn(format_args!("failed ADD: {e}"));
            }
            let _all = exec
                .records
                .lock_all()
                .map_err(|e| HostError::state("locking the state directory", e))?;
            let shared = ledger.changes.iter().any(|c| c.shared);
            let keep_shared = shared && exec.others_exist(att);
            cleanup::undo(net, sides, &ledger.changes, keep_shared);
            match prior {
                Some(rec) => exec
                    .records
                    .save(rec)
                    .map_err(|e| HostError::state("restoring the attachment record", e)),
                None => exec
                    .records
                    .remove(&exec.conf.name, &att.container_id, &att.ifname)
                    .map_err(|e| HostError::state("removing the pending attachment record", e)),
            }
        });
        if let Err(e) = outcome {
            log::warn(format_args!("failed ADD: {e}"));
        }
    }

    /// Undo a failed ADD. The plugins before the failed one completed, so
    /// each gets a DEL, in reverse. The failed plugin gets one only if the
    /// host stopped it (trap, deadline, limit): a plugin that returned its
    /// error has cleaned up after itself, and a DEL could destroy what was
    /// never its own (an interface that already bore CNI_IFNAME, say).
    /// Either way, an IPAM allocation it still holds is released.
    fn rollback(
        &self,
        completed: usize,
        partial: Option<&CniResult>,
        failed: Option<(bool, Option<String>)>,
    ) {
        let chain = &self.exec.conf.chain;
        if let Some((reported, ipam_held)) = &failed {
            let step = Step {
                index: completed,
                entry: &chain[completed],
                command: Command::Del,
            };
            let released = if *reported {
                false
            } else {
                match self.run(&step, partial, None) {
                    Ok(_) => true,
                    Err((e, _)) => {
                        log::warn(format_args!("rollback of chain[{completed}] failed: {e}"));
                        false
                    }
                }
            };
            if !released {
                if let Some(ipam_type) = ipam_held {
                    if let Err(e) = self.release_ipam(&step, ipam_type) {
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
                entry: &chain[index],
                command: Command::Del,
            };
            if let Err((e, _)) = self.run(&step, partial, None) {
                log::warn(format_args!("rollback of chain[{index}] failed: {e}"));
            }
        }
    }

    fn release_ipam(&self, step: &Step<'_>, ipam_type: &str) -> Result<(), HostError> {
        let PluginConfig { text, ports } = self.exec.plugin_config(step, None)?;
        let request = request_for(self.att, text, None);
        self.services(step, Command::Del, &request, ports, None)
            .run_ipam_direct(ipam_type)
    }

    /// DEL every plugin, then delete whatever links the attachment created
    /// that they left (only once every DEL succeeded: a failed DEL is
    /// retried, and its plugin may still need them).
    pub(super) fn teardown(self, prev: Option<&CniResult>, why: &str) -> Vec<HostError> {
        let exec = self.exec;
        let mut errors = self.del_chain(prev);
        if !errors.is_empty() {
            return errors;
        }
        if let Err(e) = exec.filter_cleanup(self.att, |f, tag| f.remove_all(tag)) {
            errors.push(e);
        }
        let created = self.ledger().created;
        if created.is_empty() {
            return errors;
        }
        match exec.with_sides(self.att, |net, sides| {
            Ok(cleanup::delete_links(net, sides, &created, why))
        }) {
            Ok(errs) => errors.extend(errs),
            Err(e) => errors.push(e),
        }
        errors
    }

    /// DEL every plugin in reverse, best effort: every failure is kept.
    fn del_chain(&self, prev: Option<&CniResult>) -> Vec<HostError> {
        let mut errors = Vec::new();
        for (index, entry) in self.exec.conf.chain.iter().enumerate().rev() {
            let step = Step {
                index,
                entry,
                command: Command::Del,
            };
            if let Err((e, _)) = self.run(&step, prev, None) {
                errors.push(e);
            }
        }
        errors
    }

    /// The addresses of `result` are the attachment's own: node-side
    /// addresses and routes may lie in their networks, filter rules may name
    /// them. Only the runtime's prevResult at ADD (the runtime is trusted:
    /// it comes from the plugins before wasm-cni in its conflist); the IPAM
    /// answers the host receives are added as they come (`services`).
    fn own_addresses(&self, result: &CniResult) {
        let nets: Vec<IpNet> = result
            .ips
            .iter()
            .filter_map(|ip| wasm_cni_kernel::net::parse_cidr(&ip.address).ok())
            .collect();
        if let Ok(mut l) = self.ledger.lock() {
            l.own_nets.extend(nets);
        }
    }

    /// The ledger as it stands.
    fn ledger(&self) -> Ledger {
        self.ledger.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn net_access(&self, entry: &ChainEntry, command: Command, ports: Vec<PortGrant>) -> NetAccess {
        let exec = self.exec;
        let att = self.att;
        NetAccess {
            backend: exec.net.clone(),
            container: att.container_ns(),
            ifname: att.ifname.clone(),
            command,
            config: ConfigGrants::from_config(&entry.plugin_type, &entry.raw),
            ledger: self.ledger.clone(),
            on_created: self.on_created.clone(),
            ports,
            filter: exec.filter.as_ref().map(|backend| FilterAccess {
                backend: backend.clone(),
                tag: Tag::new(&exec.conf.name, &att.container_id, &att.ifname),
                holder: exec.holder(),
            }),
        }
    }

    fn services(
        &self,
        step: &Step<'_>,
        command: Command,
        request: &wit::Request,
        ports: Vec<PortGrant>,
        valid: Option<&[wit::Attachment]>,
    ) -> StepServices {
        let exec = self.exec;
        let entry = step.entry;
        let mut services = StepServices::new(
            exec.runtime.clone(),
            (step.index, exec.steps.clone()),
            exec.store.clone(),
            Some(self.net_access(entry, command, ports)),
            &exec.natives,
            &exec.conf.image_dir,
            &exec.conf.name,
            entry,
            command,
            request,
            self.att,
            valid,
        );
        services.faults = exec.faults.clone();
        services.trace_work = exec.trace_work;
        services.trust = exec.trust.clone();
        services.ahead = exec.ahead.clone();
        services
    }

    /// Run one step. On failure also returns the IPAM type whose allocation
    /// the step still holds, if any (for rollback).
    fn run(
        &self,
        step: &Step<'_>,
        prev: Option<&CniResult>,
        valid: Option<&[wit::Attachment]>,
    ) -> Result<Option<CniResult>, (HostError, Option<String>)> {
        let exec = self.exec;
        let at = |e: HostError| (e.in_step(step.index, &step.entry.plugin_type), None);
        let PluginConfig {
            text: config,
            ports,
        } = exec.plugin_config(step, prev).map_err(at)?;
        let plugin = match exec.load(&step.entry.plugin_type, &step.entry.limits) {
            Ok(p) => p,
            Err(CallError::NotFound { plugin, dir, .. }) => {
                let path = exec.natives.find(plugin.clone(), dir).map_err(at)?;
                log::debug(format_args!(
                    "chain[{}] {plugin}: native {}",
                    step.index,
                    path.display()
                ));
                let deadline = Limits::resolve(&step.entry.limits).deadline_ms;
                let started = Instant::now();
                let out = native::exec(
                    &path,
                    &plugin,
                    step.command,
                    self.att,
                    &exec.natives.path,
                    &config,
                    &exec.conf.cni_version,
                    Duration::from_millis(deadline),
                );
                exec.report(step, started, None, None);
                return out.map_err(at);
            }
            Err(e) => return Err(at(e.into())),
        };
        let request = request_for(self.att, config.clone(), prev);
        let services = Arc::new(self.services(step, step.command, &request, ports, valid));
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
        let started = Instant::now();
        let outcome = exec.runtime.call(&plugin, limits, services.clone(), call);
        let abort = match &outcome {
            Err(CallError::Aborted { cause, .. }) => Some(cause.kind()),
            _ => None,
        };
        exec.report(step, started, abort, Some((&plugin, &services)));
        match outcome {
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
