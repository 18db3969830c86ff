//! Runs a network's chain of plugins in one process, the way libcni runs a
//! conflist: ADD in order passing each result on as the next `prevResult`,
//! DEL in reverse (best effort, reporting every failure), CHECK in order,
//! STATUS in order up to the first failure, GC to every plugin.
//!
//! Unlike libcni, a failed ADD is rolled back here: every plugin that ran
//! (including the one that failed) gets a DEL, and an IPAM allocation the
//! failing plugin made is released even if its own DEL cannot run; then the
//! host deletes the links the attachment created and takes back every other
//! change it made (`cleanup`). The runtime's DEL after a failed ADD then
//! finds nothing left to do.
//!
//! Each attachment has a record (`state`), written as pending before its
//! ADD runs a plugin and updated as links are created, so that a process
//! killed halfway leaves DEL and GC what they need; verbs on one attachment
//! are serialised by its lock, across processes.

mod ahead;
mod cleanup;
mod effects;
mod native;
mod operation;
mod services;

use std::collections::BTreeSet;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::HostError;
use crate::sandbox::policy::{ConfigGrants, PortGrant, Side};
use crate::sandbox::{
    convert, wit, CallError, CreatedLinks, Faults, Holder, Limits, Plugin, Runtime,
};
use ahead::Ahead;
use cleanup::Sides;
use operation::Operation;
use services::StepServices;
use wasm_cni_base::log;
use wasm_cni_image::trust::Policy;
use wasm_cni_image::{ImageError, ImageRef, ImageStore};
use wasm_cni_kernel::filter::{Filter, Tag};
use wasm_cni_kernel::net::{LinkId, Net, NsSource};
use wasm_cni_protocol::config::{ChainEntry, NetConf};
use wasm_cni_protocol::result::{self, CniResult};
use wasm_cni_protocol::{CniError, Command, ErrorCode};
use wasm_cni_store::state::{
    now_ms, AttachmentRecord, AttachmentRecords, Lock, RecordedLink, RECORD_KIND,
};
use wasm_cni_store::StateStore;

/// The attachment an ADD/DEL/CHECK is about (from CNI_* variables).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
    /// CNI_NETNS as the runtime gave it: what plugins see and the record
    /// keeps.
    pub netns: Option<String>,
    /// How a daemon's peer passed the namespace, if through a daemon.
    pub passed: Passed,
    /// The uid of the daemon peer that asked, when not root: a namespace
    /// path it named is never opened by the host on its behalf, now or
    /// later (GC).
    pub peer_uid: Option<u32>,
    pub args: Vec<(String, String)>,
}

/// How a daemon's peer passed the container's namespace.
#[derive(Debug, Clone, Default)]
pub enum Passed {
    /// By name only (a process of one call, or a root peer that passed no
    /// descriptor): the host opens `netns`.
    #[default]
    ByName,
    /// As the descriptor the peer opened with its own credentials, held
    /// for the call: nothing is opened by name.
    Descriptor(Arc<OwnedFd>),
    /// Not at all: a non-root peer's path is never opened on its behalf.
    Nothing,
}

impl PartialEq for Passed {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Passed::ByName, Passed::ByName) | (Passed::Nothing, Passed::Nothing) => true,
            (Passed::Descriptor(a), Passed::Descriptor(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Attachment {
    /// Where the host opens the container's namespace, if anywhere.
    pub fn container_ns(&self) -> Option<NsSource> {
        match &self.passed {
            Passed::Descriptor(fd) => Some(NsSource::Fd(fd.clone())),
            Passed::Nothing => None,
            Passed::ByName => self
                .netns
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| NsSource::Path(p.into())),
        }
    }
}

/// A network's chain and what lasts across its calls: the runtime, the
/// backends, the config. Each verb on an attachment runs as an
/// [`Operation`] of its own, which owns that attachment's ledger.
pub struct Executor {
    runtime: Arc<Runtime>,
    conf: Arc<NetConf>,
    records: Arc<dyn AttachmentRecords + Send + Sync>,
    store: Arc<dyn StateStore>,
    net: Arc<Mutex<Box<dyn Net>>>,
    /// Packet filtering in the node namespace; without it plugins get none.
    filter: Option<Arc<Mutex<Box<dyn Filter>>>>,
    /// Where native plugins are looked for (CNI_PATH), if anywhere.
    natives: native::Natives,
    /// Every plugin call made so far, in order.
    steps: Steps,
    faults: Option<Arc<Faults>>,
    /// Keep the host's work per plugin call (the call is traced).
    trace_work: bool,
    /// The node's trust policy, for entries that name an image.
    trust: Option<Arc<Trust>>,
    /// Components loaded ahead of their steps (a process of one call).
    ahead: Option<Arc<Ahead>>,
}

/// Where plugin calls are reported, IPAM delegates' included.
pub(crate) type Steps = Arc<Mutex<Vec<StepReport>>>;

/// How one plugin call of a verb went, for the daemon's request log and
/// metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    pub index: usize,
    pub plugin: String,
    pub verb: &'static str,
    /// Wall-clock start (for trace spans).
    pub started: std::time::SystemTime,
    /// The component's sha256 (none for a native plugin).
    pub digest: Option<String>,
    /// What the host did for it, kept only for a traced call.
    pub host_work: Vec<crate::sandbox::HostWork>,
    pub duration: Duration,
    /// Why the host stopped the plugin (`AbortCause::kind`), if it did.
    pub abort: Option<&'static str>,
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
            filter: None,
            natives: native::Natives::default(),
            steps: Steps::default(),
            faults: None,
            trace_work: false,
            trust: None,
            ahead: None,
        }
    }

    /// Check chain entries that name an image against the node's trust
    /// policy at every load.
    pub fn with_trust(mut self, policy: Option<Policy>) -> Self {
        self.trust = policy.map(|policy| {
            Arc::new(Trust {
                policy,
                passed: Mutex::default(),
            })
        });
        self
    }

    /// Run against backends shared with other executors (`plugin test`
    /// makes one per verb over one kernel model).
    pub fn with_shared(
        mut self,
        net: Arc<Mutex<Box<dyn Net>>>,
        filter: Option<Arc<Mutex<Box<dyn Filter>>>>,
    ) -> Self {
        self.net = net;
        self.filter = filter;
        self
    }

    /// Fail one host call of this executor's chain calls (`plugin test
    /// --faults`).
    pub fn with_faults(mut self, faults: Arc<Faults>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Compile the components an ADD, DEL or CHECK will load after its
    /// first ahead of their steps, on threads of their own (`ahead.rs`):
    /// for a process that runs one call.
    pub fn loading_ahead(mut self) -> Self {
        self.ahead = Some(Arc::default());
        self
    }

    fn start_ahead(&self, reverse: bool) {
        if let Some(ahead) = &self.ahead {
            ahead.start(
                &self.runtime,
                &self.conf.image_dir,
                self.trust.as_ref(),
                &self.conf.chain,
                reverse,
            );
        }
    }

    /// A step's component: what was loaded ahead for it, else loaded now.
    fn load(
        &self,
        plugin: &str,
        limits: &wasm_cni_protocol::config::Limits,
    ) -> Result<Arc<Plugin>, CallError> {
        ahead::load(
            self.ahead.as_deref(),
            &self.runtime,
            &self.conf.image_dir,
            self.trust.as_deref(),
            plugin,
            limits,
        )
    }

    /// Let `type`s without a component run as executables from `cni_path`.
    pub fn with_cni_path(mut self, cni_path: Vec<PathBuf>) -> Self {
        self.natives.path = cni_path;
        self
    }

    /// Run no native plugin, saying `why` where one would have run.
    pub fn without_natives(mut self, why: String) -> Self {
        self.natives = native::Natives {
            path: Vec::new(),
            refused: Some(why),
        };
        self
    }

    /// Keep what the host does for each plugin call in its report (for a
    /// traced call; otherwise nothing is kept).
    pub fn with_host_work(mut self, keep: bool) -> Self {
        self.trace_work = keep;
        self
    }

    /// Give plugins packet filtering through `filter`.
    pub fn with_filter(mut self, filter: Box<dyn Filter>) -> Self {
        self.filter = Some(Arc::new(Mutex::new(filter)));
        self
    }

    /// The filter backend, e.g. to inspect an in-memory one in tests.
    pub fn filter(&self) -> Option<Arc<Mutex<Box<dyn Filter>>>> {
        self.filter.clone()
    }

    /// The network backend, e.g. to inspect an in-memory one in tests.
    pub fn net(&self) -> Arc<Mutex<Box<dyn Net>>> {
        self.net.clone()
    }

    pub fn conf(&self) -> &NetConf {
        &self.conf
    }

    /// Every plugin call made so far, in order.
    pub fn steps(&self) -> Vec<StepReport> {
        self.steps.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn incoming_prev(&self) -> Result<Option<CniResult>, HostError> {
        match &self.conf.prev_result {
            Some(v) => Ok(Some(result::parse(v, &self.conf.cni_version)?)),
            None => Ok(None),
        }
    }

    /// Every image the chain names is in the image store and passes the
    /// node's trust policy, before a plugin runs: an ADD that cannot finish
    /// does not start.
    fn check_images(&self) -> Result<(), HostError> {
        let store = ImageStore::new(&self.conf.image_dir);
        for (index, entry) in self.conf.chain.iter().enumerate() {
            for limits in [&entry.limits, &entry.ipam_limits] {
                if let Some(image) = &limits.image {
                    let plugin = &entry.plugin_type;
                    image
                        .parse::<ImageRef>()
                        .and_then(|i| {
                            store.resolve(&i)?;
                            match &self.trust {
                                Some(trust) => trust.check(&store, &i),
                                None => Ok(()),
                            }
                        })
                        .map_err(|error| {
                            HostError::from(CallError::Image {
                                plugin: plugin.clone(),
                                error: Box::new(error),
                            })
                            .in_step(index, plugin)
                        })?;
                }
            }
        }
        Ok(())
    }

    pub fn add(&self, att: &Attachment) -> Result<CniResult, HostError> {
        self.check_images()?;
        self.start_ahead(false);
        let _lock = self.lock_attachment(att)?;
        let prev = self.incoming_prev()?;
        Operation::new(self, att, None).add(prev)
    }

    /// Remove the attachment's record and, when it made node settings, put
    /// back those no other attachment records (under the state directory's
    /// lock, as `finish_add` makes them).
    fn remove_record(
        &self,
        att: &Attachment,
        rec: Option<&AttachmentRecord>,
    ) -> Result<(), HostError> {
        let remove = || {
            self.records
                .remove(&self.conf.name, &att.container_id, &att.ifname)
                .map_err(|e| HostError::state("removing the attachment record", e))
        };
        let Some(rec) = rec.filter(|r| !r.node_settings.is_empty()) else {
            return remove();
        };
        let _all = self
            .records
            .lock_all()
            .map_err(|e| HostError::state("locking the state directory", e))?;
        remove()?;
        let released = self.with_sides(att, |net, sides| {
            effects::release(net, sides.node, &*self.records, rec);
            Ok(())
        });
        if let Err(e) = released {
            log::warn(format_args!("putting back node settings: {e}"));
        }
        Ok(())
    }

    /// The attachment's lock, waited for as long as a whole chain may run:
    /// another verb for the same attachment is in progress (a runtime
    /// retrying, or a second front door to the same state).
    fn lock_attachment(&self, att: &Attachment) -> Result<Lock, HostError> {
        let budget: u64 = self
            .conf
            .chain
            .iter()
            .map(|e| {
                Limits::resolve(&e.limits).deadline_ms + Limits::resolve(&e.ipam_limits).deadline_ms
            })
            .sum();
        let deadline = Instant::now() + Duration::from_millis(budget.max(1_000));
        self.records
            .lock(
                &self.conf.name,
                &att.container_id,
                &att.ifname,
                Some(deadline),
            )
            .map_err(|e| match e.kind() {
                io::ErrorKind::TimedOut => CniError::new(
                    ErrorCode::TryAgainLater,
                    format!(
                        "another operation on {} {} of network {:?} is still in progress",
                        att.container_id, att.ifname, self.conf.name
                    ),
                )
                .into(),
                _ => HostError::state("locking the attachment", e),
            })
    }

    /// The record of `att` as it stands (pending, no result yet).
    fn record(&self, att: &Attachment, links: &CreatedLinks) -> AttachmentRecord {
        AttachmentRecord {
            kind: RECORD_KIND.into(),
            network: self.conf.name.clone(),
            container_id: att.container_id.clone(),
            ifname: att.ifname.clone(),
            netns: att.netns.clone(),
            peer_uid: att.peer_uid,
            cni_args: att.args.clone(),
            runtime_config: self.conf.runtime_config.clone(),
            result: Value::Null,
            node_links: recorded(links, Side::Node),
            container_links: recorded(links, Side::Container),
            node_settings: Vec::new(),
            created_at: now_ms(),
            pending: true,
        }
    }

    /// Whether any attachment but `att` is recorded (or pending) in this
    /// state directory; an unreadable directory counts as yes.
    fn others_exist(&self, att: &Attachment) -> bool {
        let Ok(networks) = self.records.networks() else {
            return true;
        };
        networks.iter().any(|n| match self.records.list(n) {
            Ok(recs) => recs.iter().any(|r| {
                !(r.network == self.conf.name
                    && r.container_id == att.container_id
                    && r.ifname == att.ifname)
            }),
            Err(_) => true,
        })
    }

    /// Run `f` on the backend with the attachment's namespaces opened.
    fn with_sides<T>(
        &self,
        att: &Attachment,
        f: impl FnOnce(&mut dyn Net, &Sides) -> Result<T, HostError>,
    ) -> Result<T, HostError> {
        let mut net = self
            .net
            .lock()
            .map_err(|_| HostError::internal("network backend poisoned"))?;
        let sides = Sides::open(net.as_mut(), att.container_ns())?;
        f(net.as_mut(), &sides)
    }

    pub fn del(&self, att: &Attachment) -> Result<(), HostError> {
        self.start_ahead(true);
        let _lock = self.lock_attachment(att)?;
        let rec = self.load_record(att);
        let prev = match self.incoming_prev()? {
            Some(p) => Some(p),
            None => recorded_result(rec.as_ref()),
        };
        // The result torn down is the plugins' own account: it names what to
        // release, never what the host may grant (DEL adds nothing to the
        // node, and only ADD's IPAM answers are the attachment's networks).
        let errors = Operation::new(self, att, rec.as_ref()).teardown(prev.as_ref(), "DEL");
        if errors.is_empty() {
            self.remove_record(att, rec.as_ref())
        } else {
            Err(HostError::many(errors))
        }
    }

    /// Run `f` on the filter backend with the attachment's tag, if there is
    /// a filter.
    fn filter_cleanup(
        &self,
        att: &Attachment,
        f: impl FnOnce(&mut dyn Filter, &Tag) -> Result<usize, wasm_cni_kernel::filter::FilterError>,
    ) -> Result<(), HostError> {
        let Some(filter) = &self.filter else {
            return Ok(());
        };
        let tag = Tag::new(&self.conf.name, &att.container_id, &att.ifname);
        let mut backend = filter
            .lock()
            .map_err(|_| HostError::internal("filter backend poisoned"))?;
        f(backend.as_mut(), &tag)
            .map(|_| ())
            .map_err(|e| HostError::filter("removing the attachment's filter rules", e))
    }

    /// GC's last step: rules of this network whose attachment is neither
    /// valid nor recorded (a host killed between adding rules and writing
    /// its record) go.
    fn sweep_filter(&self, valid: &[(String, String)]) -> Result<(), HostError> {
        let Some(filter) = &self.filter else {
            return Ok(());
        };
        let records = self
            .records
            .list(&self.conf.name)
            .map_err(|e| HostError::state("listing attachment records", e))?;
        let keep: Vec<String> = valid
            .iter()
            .map(|(c, i)| (c.as_str(), i.as_str()))
            .chain(
                records
                    .iter()
                    .map(|r| (r.container_id.as_str(), r.ifname.as_str())),
            )
            .map(|(c, i)| Tag::new(&self.conf.name, c, i).attachment)
            .collect();
        let mut backend = filter
            .lock()
            .map_err(|_| HostError::internal("filter backend poisoned"))?;
        match backend.sweep(&Tag::network_hash(&self.conf.name), &keep) {
            Ok(0) => Ok(()),
            Ok(n) => {
                log::info(format_args!(
                    "gc: removed {n} filter rules of attachments that are gone"
                ));
                Ok(())
            }
            Err(e) => Err(HostError::filter("gc of filter rules", e)),
        }
    }

    pub fn check(&self, att: &Attachment) -> Result<(), HostError> {
        self.start_ahead(false);
        let _lock = self.lock_attachment(att)?;
        let rec = self.load_record(att);
        let prev = match self.incoming_prev()? {
            Some(p) => Some(p),
            None => recorded_result(rec.as_ref()),
        };
        Operation::new(self, att, rec.as_ref()).check(prev.as_ref())
    }

    /// STATUS: what the host itself needs for an ADD (a state directory it
    /// can write, a store that answers), then each plugin's STATUS in
    /// order. Every cause is code 50 ("cannot service ADD") unless a plugin
    /// said 51 ("existing containers may have limited connectivity"); the
    /// message names the cause and the details keep its original code, so
    /// a runtime that reports only the code still points at the fault.
    pub fn status(&self) -> Result<(), HostError> {
        self.status_causes()
            .map_err(|e| HostError::Cni(status_error(CniError::from(e))))
    }

    fn status_causes(&self) -> Result<(), HostError> {
        self.records.writable(&self.conf.name).map_err(|e| {
            CniError::new(
                ErrorCode::Io,
                format!(
                    "state directory {} is not writable: {e}",
                    self.conf.state_dir.display()
                ),
            )
        })?;
        self.store.ready(None).map_err(|e| {
            CniError::new(
                ErrorCode::TryAgainLater,
                format!("the network's state store does not answer: {e}"),
            )
        })?;
        let att = no_attachment();
        match Operation::new(self, &att, None)
            .each_plugin(Command::Status, None)
            .into_iter()
            .next()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// GC: DEL every recorded attachment of this network that is not in the
    /// valid set (as libcni does with its cache), then send GC to every
    /// plugin so each can release what it holds for unknown attachments.
    pub fn gc(&self) -> Result<(), HostError> {
        let valid: Vec<(String, String)> = self.conf.valid_attachments.clone().unwrap_or_default();
        let mut errors = Vec::new();
        self.records.sweep(&self.conf.name);
        let records = self
            .records
            .list(&self.conf.name)
            .map_err(|e| HostError::state("listing attachment records", e))?;
        for rec in records {
            let key = (rec.container_id.clone(), rec.ifname.clone());
            if valid.contains(&key) {
                continue;
            }
            // A verb still running on it (an ADD in progress is pending and
            // not yet in the runtime's list) is not stale.
            let _lock = match self
                .records
                .lock(&rec.network, &rec.container_id, &rec.ifname, None)
            {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    log::info(format_args!(
                        "gc: skipping {} {}: an operation on it is in progress",
                        rec.container_id, rec.ifname
                    ));
                    continue;
                }
                Err(e) => {
                    errors.push(HostError::state("locking a stale attachment", e));
                    continue;
                }
            };
            log::info(format_args!(
                "gc: deleting stale attachment {} {}{}",
                rec.container_id,
                rec.ifname,
                if rec.pending {
                    " (an ADD that never finished)"
                } else {
                    ""
                }
            ));
            // A namespace a non-root daemon peer named is not opened on its
            // behalf: its container links go with the namespace.
            let att = Attachment {
                container_id: rec.container_id.clone(),
                ifname: rec.ifname.clone(),
                netns: rec.netns.clone().filter(|_| rec.peer_uid.is_none()),
                args: rec.cni_args.clone(),
                ..Attachment::default()
            };
            // Whatever the plugins leave of the stale attachment goes too:
            // the host recorded it as theirs.
            let errs = Operation::new(self, &att, Some(&rec))
                .teardown(recorded_result(Some(&rec)).as_ref(), "gc");
            if !errs.is_empty() {
                errors.extend(errs);
                continue;
            }
            if let Err(e) = self.remove_record(&att, Some(&rec)) {
                errors.push(e);
            }
        }
        if let Err(e) = self.sweep_filter(&valid) {
            errors.push(e);
        }
        let valid_wit: Vec<wit::Attachment> = valid
            .iter()
            .map(|(c, i)| wit::Attachment {
                container_id: c.clone(),
                ifname: i.clone(),
            })
            .collect();
        let att = no_attachment();
        errors.extend(Operation::new(self, &att, None).each_plugin(Command::Gc, Some(&valid_wit)));
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

    /// The node links any entry of the network's chain names: where the
    /// host's own settings for an attachment may go (`effects`).
    fn chain_named(&self) -> BTreeSet<String> {
        self.conf
            .chain
            .iter()
            .flat_map(|e| ConfigGrants::named_links(&e.plugin_type, &e.raw))
            .collect()
    }

    /// Names attachments by tag from the records of this state directory.
    fn holder(&self) -> Holder {
        let records = self.records.clone();
        Arc::new(move |tag: &Tag| {
            let networks = records.networks().ok()?;
            networks.iter().find_map(|n| {
                records.list(n).ok()?.into_iter().find_map(|r| {
                    (Tag::new(&r.network, &r.container_id, &r.ifname) == *tag).then(|| {
                        format!(
                            "container {} ({}) of network {:?}",
                            r.container_id, r.ifname, r.network
                        )
                    })
                })
            })
        })
    }

    fn plugin_config(
        &self,
        step: &Step<'_>,
        prev: Option<&CniResult>,
    ) -> Result<PluginConfig, HostError> {
        let prev_json = match prev {
            Some(p) => Some(p.to_json(&self.conf.cni_version)?),
            None => None,
        };
        let gc_or_status = matches!(step.command, Command::Gc | Command::Status);
        let config = Value::Object(self.conf.plugin_config(
            step.entry,
            prev_json.as_ref(),
            gc_or_status,
        ));
        Ok(PluginConfig {
            text: serde_json::to_string(&config)
                .map_err(|e| HostError::internal(format!("serialising plugin config: {e}")))?,
            ports: PortGrant::from_value(&config),
        })
    }

    fn report(
        &self,
        step: &Step<'_>,
        started: Instant,
        abort: Option<&'static str>,
        ran: Option<(&crate::sandbox::Plugin, &StepServices)>,
    ) {
        if let Ok(mut steps) = self.steps.lock() {
            steps.push(StepReport {
                index: step.index,
                plugin: step.entry.plugin_type.clone(),
                verb: step.command.as_str(),
                started: wall_start(started),
                duration: started.elapsed(),
                abort,
                digest: ran.map(|(p, _)| p.digest.clone()),
                host_work: ran.map(|(_, s)| s.take_work()).unwrap_or_default(),
            });
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

/// A step's config as the plugin gets it, and the port mappings it grants.
struct PluginConfig {
    text: String,
    ports: Vec<PortGrant>,
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

/// When `started` was on the wall clock.
pub(crate) fn wall_start(started: Instant) -> std::time::SystemTime {
    std::time::SystemTime::now() - started.elapsed()
}

/// A STATUS failure as the spec wants it: 50 or 51, the cause's own code
/// kept in the details.
fn status_error(mut e: CniError) -> CniError {
    let (unavailable, limited) = (
        ErrorCode::StatusUnavailable.code(),
        ErrorCode::StatusLimited.code(),
    );
    if e.code != unavailable && e.code != limited {
        let was = format!("was code {}", e.code);
        e.details = if e.details.is_empty() {
            was
        } else {
            format!("{}; {was}", e.details)
        };
        e.code = unavailable;
    }
    e
}

fn no_attachment() -> Attachment {
    Attachment::default()
}

/// The links a record lists, by name with their identity.
fn prior_links(rec: &AttachmentRecord) -> CreatedLinks {
    let links = |list: &[RecordedLink]| {
        list.iter()
            .map(|l| {
                (
                    l.name.clone(),
                    LinkId {
                        index: l.index,
                        kind: l.kind.clone(),
                    },
                )
            })
            .collect()
    };
    CreatedLinks {
        node: links(&rec.node_links),
        container: links(&rec.container_links),
    }
}

/// `links` as a record lists them.
fn recorded(links: &CreatedLinks, side: Side) -> Vec<RecordedLink> {
    links
        .side(side)
        .iter()
        .map(|(name, id)| RecordedLink {
            name: name.clone(),
            index: id.index,
            kind: id.kind.clone(),
        })
        .collect()
}

/// Both sets together; for a name in both, `b`'s identity.
fn union(a: &CreatedLinks, b: &CreatedLinks) -> CreatedLinks {
    let mut out = a.clone();
    for side in [Side::Node, Side::Container] {
        out.side_mut(side)
            .extend(b.side(side).iter().map(|(n, id)| (n.clone(), id.clone())));
    }
    out
}

fn recorded_result(rec: Option<&AttachmentRecord>) -> Option<CniResult> {
    rec.and_then(|r| result::parse(&r.result, "1.1.0").ok())
}

/// The node's trust policy for one request, with the images that passed
/// it: ADD's check before any plugin runs and each step's (and delegate's)
/// load ask the same question, and within one request the answer cannot
/// change (the policy is read once per request).
pub(crate) struct Trust {
    policy: Policy,
    passed: Mutex<BTreeSet<String>>,
}

impl Trust {
    /// `image` (resolved, so pinned) passes the node's trust policy today,
    /// by the signatures its pull kept: an image pulled under an older
    /// policy is checked again at every request.
    fn check(&self, store: &ImageStore, image: &ImageRef) -> Result<(), ImageError> {
        let key = image.to_string();
        if self.passed.lock().is_ok_and(|p| p.contains(&key)) {
            return Ok(());
        }
        trusted(&self.policy, store, image)?;
        if let Ok(mut p) = self.passed.lock() {
            p.insert(key);
        }
        Ok(())
    }
}

/// The policy judges where the bytes came from, not what the config calls
/// them: the store finds an image by its manifest digest alone, so a name
/// is only a claim. An image passes when the config names one of the
/// repositories this node pulled that manifest from, and every one of them
/// passes the policy: a digest known under a name a rule denies stays
/// denied whatever the config calls it, and no `skip` rule is reached by
/// renaming.
fn trusted(policy: &Policy, store: &ImageStore, image: &ImageRef) -> Result<(), ImageError> {
    use wasm_cni_image::sign::docker_reference;
    let Some(manifest) = &image.digest else {
        return Err(ImageError::Unpinned(image.to_string()));
    };
    let named = docker_reference(image);
    let pulled_from = store.provenance(manifest)?;
    if pulled_from.is_empty() {
        return Err(ImageError::Refused(format!(
            "{named}@{manifest}: this node has no record of where it pulled that manifest \
             from, which the trust policy {} judges; `wasm-cni pull {named}@{manifest}` \
             records it",
            policy.path().display()
        )));
    }
    if !pulled_from.contains(&named) {
        return Err(ImageError::Refused(format!(
            "{named}@{manifest}: this node pulled that manifest from {}, never from {named}; \
             the trust policy {} judges an image by the repository it came from, so a config \
             names it by that one",
            pulled_from.join(", "),
            policy.path().display()
        )));
    }
    // The config's own name first: its refusal is the one to show.
    let mut order = vec![named.clone()];
    order.extend(pulled_from.into_iter().filter(|r| *r != named));
    for from in order {
        let as_pulled: ImageRef = format!("{from}@{manifest}").parse()?;
        policy
            .decide(&as_pulled, manifest, &mut || {
                store.signatures(manifest).map_err(|e| e.to_string())
            })
            .map_err(|why| {
                let also = if from == named {
                    String::new()
                } else {
                    format!(" ({named} is the same manifest, pulled from there too)")
                };
                ImageError::Refused(if policy.wants_signatures(&as_pulled) {
                    format!(
                        "{why}{also} (the signatures checked are those its pulls verified; \
                         `wasm-cni pull` it again under this policy to fetch others)"
                    )
                } else {
                    format!("{why}{also}")
                })
            })?;
    }
    Ok(())
}

/// `ipam.type` of a chain entry, if it delegates.
fn ipam_type(entry: &ChainEntry) -> Option<&str> {
    entry.raw.get("ipam")?.get("type")?.as_str()
}

/// A chain entry's component: from the image store when the entry names an
/// image (never a native plugin then: an image that is not pulled is an
/// error of its own), else `<type>.wasm` from pluginDir. A `sha256` pin
/// beside an image must name the image's component.
pub(crate) fn load_component(
    runtime: &Runtime,
    image_dir: &std::path::Path,
    trust: Option<&Trust>,
    plugin: &str,
    limits: &wasm_cni_protocol::config::Limits,
) -> Result<Arc<Plugin>, CallError> {
    let bounds = crate::sandbox::compile::CompileLimits::resolve(limits, runtime.compile_limits());
    let Some(image) = &limits.image else {
        return runtime.load_within(plugin, limits.sha256.as_deref(), &bounds);
    };
    let image_err = |error| CallError::Image {
        plugin: plugin.to_string(),
        error: Box::new(error),
    };
    let image: ImageRef = image.parse().map_err(image_err)?;
    let store = ImageStore::new(image_dir);
    let resolved = store.resolve(&image).map_err(image_err)?;
    if let Some(trust) = trust {
        trust.check(&store, &image).map_err(image_err)?;
    }
    if let Some(pin) = limits.sha256.as_deref() {
        if !pin.eq_ignore_ascii_case(&resolved.pin) {
            return Err(CallError::DigestMismatch {
                plugin: plugin.to_string(),
                path: resolved.path,
                expected: pin.to_string(),
                actual: resolved.pin,
            });
        }
    }
    runtime.load_image(plugin, resolved.path, &resolved.pin, &bounds)
}
