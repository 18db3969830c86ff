//! `wasm-cni`: a CNI plugin when the runtime sets CNI_COMMAND, an operator
//! CLI (and the daemon) otherwise.

fn main() {
    wasm_cni::cli::process_main();
}
