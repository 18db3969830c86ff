//! A scope's file as the disk store reads it (`store::file::read`): whoever
//! can write the data directory controls every byte of it. Inputs are a
//! scope as `store::file::write` writes it, then edited byte by byte (so
//! that most stay close to the shape read by hand), or raw bytes.
//!
//! Property: no panic, and the file reads exactly as `serde_json` reads it:
//! the same scope, or an error where serde refuses it.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wasm_cni_store::{file, Entry, Owner, ScopeData};

#[derive(Arbitrary, Debug)]
struct Input {
    /// Key, container id, ifname, allocated, released, node.
    entries: Vec<(String, String, String, u64, Option<u64>, Option<String>)>,
    values: Vec<(String, String)>,
    /// (offset, byte, what): replace, insert, delete, or cut there.
    edits: Vec<(u16, u8, u8)>,
    raw: Option<Vec<u8>>,
}

fuzz_target!(|input: Input| {
    let bytes = match input.raw {
        Some(raw) => raw,
        None => {
            let mut data = ScopeData::default();
            for (key, container_id, ifname, allocated_at, released_at, node) in input.entries {
                let owner = Owner {
                    container_id,
                    ifname,
                };
                let entry = Entry {
                    owner,
                    allocated_at,
                    released_at,
                    node,
                };
                data.entries.insert(key, entry);
            }
            data.values.extend(input.values);
            let mut bytes = file::write("0123456789abcdef0123456789abcdef", &data);
            for (at, b, what) in input.edits {
                let at = usize::from(at) % (bytes.len() + 1);
                match what % 4 {
                    0 if at < bytes.len() => bytes[at] = b,
                    1 => bytes.insert(at, b),
                    2 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    3 => bytes.truncate(at),
                    _ => {}
                }
            }
            bytes
        }
    };
    let ours = file::read(&bytes).ok();
    let serde = serde_json::from_slice::<ScopeData>(&bytes).ok();
    assert_eq!(ours, serde);
});
