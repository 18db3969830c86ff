//! `wasm-cni-plugin-test`: the `wasm-cni` CLI with the in-memory kernel
//! model, store and packet filter built in, for `wasm-cni plugin test` (which
//! hands over to it). A separate binary so that the model (and the fuzz
//! harness beside it) never ships in what nodes run: plugin authors install
//! it on their own machines.

fn main() {
    wasm_cni::cli::process_main();
}
