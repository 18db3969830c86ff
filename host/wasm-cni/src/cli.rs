//! The operator CLI, used when CNI_COMMAND is not set: run a network by hand
//! (like `cnitool`), inspect and precompile plugins, serve as the daemon,
//! install on a node. This file holds the command line and what every
//! process runs first; each command group lives in a file of its own under
//! `cli/`.

use clap::{Parser, Subcommand};

const DEFAULT_PLUGIN_DIR: &str = "/opt/cni/wasm";
/// What a call's stdin is first read into; a larger config grows it.
const STDIN_CAPACITY: usize = 16 << 10;

mod attach;
mod daemon;
mod images;
mod install;
mod ipam;
mod kube;
mod plugin;
mod plugins;
mod probe;
mod status;

pub use attach::plugin_stdin;
use attach::AttachArgs;
use daemon::DaemonArgs;
use ipam::IpamCmd;
use plugin::PluginCmd;
pub use plugin::PLUGIN_TEST_BIN;
use plugins::{CompileArgs, DirArgs};
use probe::ProbeArgs;

#[derive(Parser)]
#[command(
    name = "wasm-cni",
    version,
    about = "CNI plugin host running plugin chains as WebAssembly components",
    long_about = "Run by a container runtime (CNI_COMMAND set), wasm-cni is a CNI plugin. \
                  Run by hand, it offers the commands below."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach a container to the network and print the result.
    Add(AttachArgs),
    /// Check an attachment made by `add`.
    Check(AttachArgs),
    /// Remove an attachment made by `add`.
    Del(AttachArgs),
    /// List plugins: world, imports, digest, whether an artifact is cached.
    Plugins(DirArgs),
    /// Precompile every plugin into the artifact cache.
    Compile(DirArgs),
    /// IPAM allocations in the state store.
    #[command(subcommand)]
    Ipam(IpamCmd),
    /// The node at a glance: each wasm-cni network of the conf dir with its
    /// STATUS, attachments, address pools and components, and the daemon
    /// (with --metrics). Exits 1 when a network is not ready.
    Status(status::StatusArgs),
    /// Ask the daemon whether it is alive (`live`: GET /healthz) or ready
    /// for pods (`ready`: GET /readyz), on its metrics listener, refusing an
    /// answer from anything but the daemon (another user's listener on its
    /// port). What the DaemonSet's exec probes run. Exits 0 on 200, else 1.
    Probe(ProbeArgs),
    /// Serve CNI requests on a unix socket, with the engine and components
    /// kept warm, for networks whose config sets "daemon": "prefer" or
    /// "require" (host/docs/operate/daemon.md). Stops on SIGTERM or SIGINT once the
    /// requests in flight are done.
    Daemon(Box<DaemonArgs>),
    /// Fetch a plugin image (a wasm component artifact) into the image store,
    /// verifying every digest. A tag is resolved to a digest, printed on
    /// stdout: the REPOSITORY@sha256:… a chain entry names as
    /// "wasm": {"image": …}.
    Pull(images::PullArgs),
    /// Publish a component as a wasm component artifact (CNCF layout: its
    /// imports and exports in the config, one application/wasm layer) under
    /// REPOSITORY:TAG; prints REPOSITORY@sha256:….
    Push(images::PushArgs),
    /// The image store.
    #[command(subcommand)]
    Images(images::ImagesCmd),
    /// Tools for plugin authors (`plugin test` runs in
    /// `wasm-cni-plugin-test`, beside this binary: the kernel model it
    /// needs is not in what nodes run).
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Put wasm-cni on this node: the binaries into the CNI bin dir(s), the
    /// components into the conflist's pluginDir (precompiled), then the
    /// conflist rendered from a template into the conf dir. Replaces only
    /// files it wrote, and records them for `uninstall`. What a DaemonSet's
    /// init container runs.
    Install(install::InstallArgs),
    /// Remove what `install` wrote: the conflist first, then (once no
    /// attachment remains, or with --force) the binaries, components and
    /// artifacts. Files changed since are left in place and named.
    Uninstall(install::UninstallArgs),
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Cmd::Add(a) => attach::attach("ADD", a),
        Cmd::Check(a) => attach::attach("CHECK", a),
        Cmd::Del(a) => attach::attach("DEL", a),
        Cmd::Plugins(d) => plugins::plugins(&d, false),
        Cmd::Compile(d) => plugins::plugins(&d, true),
        Cmd::Ipam(c) => ipam::ipam(c),
        Cmd::Status(a) => status::status(&a),
        Cmd::Probe(a) => probe::probe(&a),
        Cmd::Daemon(d) => daemon::daemon(*d),
        Cmd::Pull(p) => images::pull(&p),
        Cmd::Push(p) => images::push(&p),
        Cmd::Images(images::ImagesCmd::Ls { image_dir }) => images::list(&image_dir),
        Cmd::Images(images::ImagesCmd::Rm {
            images: named,
            image_dir,
        }) => images::remove(&image_dir, &named),
        Cmd::Plugin(PluginCmd::Test(t)) => plugin::plugin_test(t),
        Cmd::Install(a) => install::install(&a),
        Cmd::Uninstall(a) => install::uninstall(&a),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            // Errors quote others' text: a registry's or a server's reply,
            // a config's names.
            eprintln!("wasm-cni: {}", wasm_cni_base::text::Shown(&msg));
            1
        }
    }
}

/// What std's runtime start did for `main` and `#![no_main]` leaves to us.
/// A standard descriptor the parent left closed is opened on `/dev/null`:
/// else the next file this process opens takes its number, and the CNI
/// result or the log goes into that file (a lock, a record, a scope). And
/// a write to a pipe whose reader is gone (a runtime that gave up waiting)
/// is the error `EPIPE`, not a signal that kills the process mid-call.
pub fn process_start() {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::fd::BorrowedFd;
    // SAFETY: 0, 1 and 2 are only polled: an fd number that is not open
    // comes back as POLLNVAL, nothing is read or closed.
    let std_fds = unsafe { [0, 1, 2].map(|fd| BorrowedFd::borrow_raw(fd)) };
    let mut fds = std_fds
        .each_ref()
        .map(|fd| PollFd::new(fd, PollFlags::empty()));
    // A zero timeout: asked for no event, an open descriptor never wakes it.
    let closed: Vec<bool> = match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(_) => fds
            .iter()
            .map(|p| p.revents().contains(PollFlags::NVAL))
            .collect(),
        // Cannot tell: check each the slow way.
        Err(_) => (0..3)
            .map(|fd| {
                // SAFETY: F_GETFD only reads the descriptor's flags.
                unsafe { libc::fcntl(fd, libc::F_GETFD) == -1 }
            })
            .collect(),
    };
    for (fd, closed) in (0..3).zip(closed) {
        if !closed {
            continue;
        }
        // The lowest free number is the closed one, lowest first; without
        // close-on-exec, as the descriptor it stands for was (a child the
        // engine starts inherits it).
        // SAFETY: a NUL-terminated path; the descriptor is kept for good.
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened != fd {
            std::process::abort();
        }
    }
    // SAFETY: setting a signal's disposition to "ignore" runs no code of
    // ours in a handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// What the `wasm-cni` binaries run: a CNI plugin when the runtime sets
/// `CNI_COMMAND`, the compiler child, or the operator CLI.
pub fn process_main() -> ! {
    // Components are compiled in a child process of this executable, under
    // a deadline and a memory bound (sandbox::compile).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            wasm_cni_engine::sandbox::compile::CHILD_COMMAND,
        ))
    {
        std::process::exit(wasm_cni_engine::sandbox::compile::child_main());
    }
    wasm_cni_engine::sandbox::compile::use_child_process();
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(wasm_cni_engine::trace::CHILD_COMMAND))
    {
        std::process::exit(wasm_cni_engine::trace::child_main());
    }
    if std::env::var_os("CNI_COMMAND").is_some() {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        // Sized for a whole config: an empty vector is read in growing
        // probes (32, 32, 64, 128... bytes), a read each.
        let mut stdin = Vec::with_capacity(STDIN_CAPACITY);
        if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut stdin) {
            let e = wasm_cni_protocol::CniError::new(
                wasm_cni_protocol::ErrorCode::Io,
                format!("reading stdin: {e}"),
            );
            eprintln!("wasm-cni error: {e}");
            print!("{}", e.to_json(None));
            std::process::exit(1);
        }
        // Through the daemon when the config asks for one, else in-process.
        // The in-process host is never dropped: `exit` leaves it to the
        // kernel (`run_keeping`).
        let mut spent = None;
        let out = wasm_cni_daemon::client::run_keeping(vars, stdin, &mut spent);
        let _ = std::io::Write::write_all(&mut std::io::stderr(), out.stderr.as_bytes());
        // A runtime that stopped reading gets the exit code all the same.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), out.stdout.as_bytes());
        std::process::exit(out.exit_code);
    }
    std::process::exit(main());
}
