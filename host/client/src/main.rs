//! `wasm-cni-client`: the program a runtime executes on a node whose
//! networks use the daemon, installed as the CNI plugin `wasm-cni` with the
//! full engine beside it as `wasm-cni-engine` (`wasm-cni install` places
//! both). It forwards the call to the daemon; for a network whose config
//! says `"daemon": "off"` (or `"prefer"` with no daemon listening), and for
//! every operator command, it becomes the engine (`exec`), with the same
//! environment and stdin, so a node behaves the same whichever file the
//! runtime runs.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use wasm_cni_client::forward;
use wasm_cni_client::wire::Response;
use wasm_cni_client::{code, error_json};

/// One call's allocations, faulted in once and never given back
/// (`arena`'s reasons); 256 KiB of address space, in `.bss`.
#[global_allocator]
static ALLOC: wasm_cni_client::arena::Arena<{ 256 << 10 }> = wasm_cni_client::arena::Arena::new();

/// The engine's file name, beside this program.
const ENGINE: &str = "wasm-cni-engine";

fn main() {
    let Some(_) = std::env::var_os("CNI_COMMAND") else {
        // An operator's command: the engine's.
        let args: Vec<OsString> = std::env::args_os().skip(1).collect();
        let e = engine().map(|p| Command::new(p).args(args).exec());
        eprintln!("wasm-cni: {}", describe(e));
        std::process::exit(1);
    };
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    // Sized for a whole config: an empty vector is read in growing probes
    // (32, 32, 64, 128... bytes), a read each.
    let mut stdin = Vec::with_capacity(16 << 10);
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut stdin) {
        finish(Response {
            exit_code: 1,
            stdout: error_json(5, &format!("reading stdin: {e}"), None),
            stderr: format!("wasm-cni error: reading stdin: {e}\n"),
        });
    }
    let out = forward::run(vars, stdin, local, &log);
    finish(out);
}

/// Print the answer as the engine would and exit with its code.
fn finish(out: Response) -> ! {
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.stdout.as_bytes());
    let _ = stdout.flush();
    std::process::exit(out.exit_code)
}

/// The engine beside this program.
fn engine() -> std::io::Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.with_file_name(ENGINE))
}

fn describe(e: std::io::Result<std::io::Error>) -> String {
    match e {
        Ok(e) | Err(e) => format!("cannot run the engine ({ENGINE} beside this program): {e}"),
    }
}

/// Become the engine for this call: same environment, and the stdin read
/// so far given back through a memory file. Returns only on failure. For
/// `"prefer"` with no daemon, the engine looks for it again and says so
/// when it runs the chain itself: one warning, from whoever runs it.
fn local(why: forward::Local, _vars: Vec<(String, String)>, stdin: Vec<u8>) -> Response {
    let failed = |what: String| {
        let msg = format!("cannot run the engine for this call: {what}");
        Response {
            exit_code: 1,
            stdout: error_json(code::INTERNAL, &msg, None),
            stderr: format!("wasm-cni error: {msg}\n"),
        }
    };
    let memfd = match rustix::fs::memfd_create("wasm-cni-stdin", rustix::fs::MemfdFlags::CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => return failed(format!("memfd: {e}")),
    };
    let mut file = std::fs::File::from(memfd);
    if let Err(e) = file
        .write_all(&stdin)
        .and_then(|()| std::io::Seek::rewind(&mut file))
    {
        return failed(format!("memfd: {e}"));
    }
    let path = match engine() {
        Ok(p) => p,
        Err(e) => return failed(e.to_string()),
    };
    // The environment is inherited as it came (the runtime's); after a
    // wait for the daemon, the engine is told not to wait again.
    let mut cmd = Command::new(&path);
    if matches!(why, forward::Local::NoDaemon(_)) {
        cmd.env(forward::WAITED_VAR, "1");
    }
    let e = cmd.stdin(file).exec();
    failed(format!("{}: {e}", path.display()))
}

/// The client's own lines, at `WASM_CNI_LOG` (default `warn`), as the engine
/// writes them.
fn log(level: &'static str, line: &str) {
    let rank = |l: &str| match l {
        "error" => 0,
        "warn" => 1,
        "info" => 2,
        "debug" => 3,
        _ => 1,
    };
    let max = std::env::var("WASM_CNI_LOG").unwrap_or_default();
    let max = if max.is_empty() { "warn" } else { max.as_str() };
    if rank(level) <= rank(max) {
        let _ = writeln!(std::io::stderr(), "wasm-cni {level}: {line}");
    }
}
