//! `wasm-cni ipam`: the allocations in a network's store, and imports into it
//! from the reference host-local or a node's local store.

use std::path::PathBuf;

use clap::Subcommand;

use serde_json::Value;

use wasm_cni_protocol::config::DEFAULT_STATE_DIR;
use wasm_cni_store::{admin, DiskStore, EtcdConfig, EtcdStore, StateStore};

#[derive(Subcommand)]
pub(super) enum IpamCmd {
    /// List allocations with owner and age, and quarantined addresses with
    /// the time they have left.
    Ls {
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
        /// Also list released addresses whose quarantine is over.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Import the reference host-local's allocations (`DIR/<network>/<ip>`
    /// files, e.g. DIR=/var/lib/cni/networks) into the store, so a node can
    /// switch to wasm-cni without losing them.
    ImportHostLocal {
        /// The reference plugin's dataDir.
        dir: PathBuf,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
        /// Interface for legacy files that hold only a container id.
        #[arg(long, default_value = "eth0")]
        legacy_ifname: String,
    },
    /// Move this node's local allocations (the store under --from-state-dir)
    /// into the cluster store --store names, so a node joins the cluster
    /// store without losing one. Safe to run again.
    ImportLocal {
        /// The local stateDir whose store is moved.
        #[arg(long, default_value = DEFAULT_STATE_DIR)]
        from_state_dir: PathBuf,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(clap::Args)]
pub(super) struct StoreArgs {
    /// wasm-cni's stateDir; the store is `<stateDir>/store`.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// The store root itself, for networks whose config sets `ipam.dataDir`
    /// (overrides --state-dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A cluster store instead: the `store` object of the network's config
    /// (`{"type":"etcd","endpoints":[…],…}`), inline or as @FILE (a whole
    /// network config file also does).
    #[arg(long, value_name = "JSON|@FILE")]
    store: Option<String>,
}

impl StoreArgs {
    fn open(&self) -> Result<Box<dyn StateStore>, String> {
        let Some(arg) = &self.store else {
            return Ok(Box::new(DiskStore::new(
                &self
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| self.state_dir.join("store")),
            )));
        };
        let text = match arg.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
            None => arg.clone(),
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("--store: {e}"))?;
        // A network config carries the object under "store".
        let v = v.get("store").cloned().unwrap_or(v);
        let conf = EtcdConfig::from_value(&v).map_err(|e| format!("--store: {e}"))?;
        let store = EtcdStore::new(conf, self.state_dir.join("store-etcd"))
            .map_err(|e| format!("--store: {e}"))?;
        Ok(Box::new(store))
    }
}

pub(super) fn ipam(cmd: IpamCmd) -> Result<i32, String> {
    match cmd {
        IpamCmd::Ls {
            network,
            store,
            all,
            json,
        } => {
            let views = admin::list(
                &*store.open()?,
                network.as_deref(),
                wasm_cni_store::state::now_ms(),
            )
            .map_err(|e| format!("reading the store: {e}"))?;
            if json {
                println!("{}", wasm_cni_base::text::json_pretty(&views)?);
            } else {
                print!("{}", admin::render(&views, all));
            }
        }
        IpamCmd::ImportHostLocal {
            dir,
            network,
            store,
            legacy_ifname,
        } => {
            let reports =
                admin::import_host_local(&*store.open()?, &dir, network.as_deref(), &legacy_ifname)
                    .map_err(|e| e.to_string())?;
            print_imports(reports, "already present", "cursor(s)");
        }
        IpamCmd::ImportLocal {
            from_state_dir,
            network,
            store,
        } => {
            let from = DiskStore::new(&from_state_dir.join("store"));
            let reports = admin::import_store(&from, &*store.open()?, network.as_deref())
                .map_err(|e| e.to_string())?;
            print_imports(reports, "already there", "value(s)");
        }
    }
    Ok(0)
}

/// One line per network imported, and one per entry left behind.
fn print_imports(reports: Vec<admin::ImportReport>, present: &str, carried: &str) {
    use wasm_cni_base::text::Shown;
    for r in reports {
        println!(
            "{}: {} imported, {} {present}, {} {carried}",
            Shown(&r.network),
            r.imported.len(),
            r.unchanged.len(),
            r.cursors.len()
        );
        for s in r.skipped {
            println!("{}: skipped {}", Shown(&r.network), Shown(&s));
        }
    }
}
