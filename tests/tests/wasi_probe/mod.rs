//! The hand-written hostile component (`tests/wasi-probe/probe.wat`), which
//! imports WASI sockets and filesystem: assembled per attack.

use std::path::PathBuf;

use serde_json::{json, Value};
use wasm_cni_tests::hostile::DEADLINE_MS;
use wasm_cni_tests::{workspace_root, Sandbox};

/// The hand-written WAT plugin, assembled per attack.
pub struct WasiProbe {
    dir: PathBuf,
}

impl WasiProbe {
    pub fn new(sb: &Sandbox) -> Self {
        let dir = sb.dir.join("probe");
        std::fs::create_dir_all(&dir).unwrap();
        WasiProbe { dir }
    }

    /// The component for attack `attack` (see probe.wat), with two extra
    /// memories of 37.5 MiB each if `extra_memories`.
    fn component(attack: u32, extra_memories: bool) -> Vec<u8> {
        let root = workspace_root();
        let probe = root.join("tests/wasi-probe");
        let text = std::fs::read_to_string(probe.join("probe.wat")).unwrap();
        let text = text
            .replace(
                "(global $attack i32 (i32.const 0)) ;; ATTACK",
                &format!("(global $attack i32 (i32.const {attack}))"),
            )
            .replace(
                ";; EXTRA-MEMORIES",
                if extra_memories {
                    "(memory $m1 600) (memory $m2 600)"
                } else {
                    ""
                },
            );
        let mut module = wat::parse_str(&text).unwrap();
        let mut resolve = wit_parser::Resolve::default();
        resolve.push_dir(root.join("wit")).unwrap();
        let (pkg, _) = resolve.push_dir(probe.join("wit")).unwrap();
        let world = resolve.select_world(&[pkg], Some("probe")).unwrap();
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
            false,
        )
        .unwrap();
        let mut encoder = wit_component::ComponentEncoder::default();
        encoder.module(&module).unwrap().validate(true);
        encoder.encode().unwrap()
    }

    /// Install the variant as plugin `wasi-probe` and return a config.
    pub fn conf(&self, sb: &Sandbox, network: &str, attack: u32, extra_memories: bool) -> Value {
        let path = self
            .dir
            .join(format!("probe-{attack}-{extra_memories}.wasm"));
        std::fs::write(&path, Self::component(attack, extra_memories)).unwrap();
        sb.install(&path, "wasi-probe");
        sb.conf(
            "1.1.0",
            network,
            json!([{"type": "wasi-probe", "wasm": {"deadlineMs": DEADLINE_MS}}]),
        )
    }
}
