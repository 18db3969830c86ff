//! `wasm-cni`: a CNI plugin when the runtime sets CNI_COMMAND, an operator
//! CLI otherwise.

fn main() {
    if std::env::var_os("CNI_COMMAND").is_some() {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let out = wasm_cni::edge::run(vars, &mut std::io::stdin().lock());
        print!("{}", out.stdout);
        std::process::exit(out.exit_code);
    }
    std::process::exit(wasm_cni::cli::main());
}
