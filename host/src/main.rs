//! `wasm-cni`: a CNI plugin when the runtime sets CNI_COMMAND, an operator
//! CLI (and the daemon) otherwise.

use std::io::{Read, Write};

fn main() {
    // Components are compiled in a child process of this executable, under
    // a deadline and a memory bound (sandbox::compile).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            wasm_cni::sandbox::compile::CHILD_COMMAND,
        ))
    {
        std::process::exit(wasm_cni::sandbox::compile::child_main());
    }
    wasm_cni::sandbox::compile::use_child_process();
    if std::env::var_os("CNI_COMMAND").is_some() {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut stdin = Vec::new();
        if let Err(e) = std::io::stdin().lock().read_to_end(&mut stdin) {
            let e = wasm_cni::cni::CniError::new(
                wasm_cni::cni::ErrorCode::Io,
                format!("reading stdin: {e}"),
            );
            eprintln!("wasm-cni error: {e}");
            print!("{}", e.to_json(None));
            std::process::exit(1);
        }
        // Through the daemon when the config asks for one, else in-process.
        let out = wasm_cni::daemon::client::run(vars, stdin);
        let _ = std::io::stderr().write_all(out.stderr.as_bytes());
        print!("{}", out.stdout);
        std::process::exit(out.exit_code);
    }
    std::process::exit(wasm_cni::cli::main());
}
