//! What etcd answers the cluster store: the keys and values of a scope's
//! ranges (from a hostile or corrupted etcd, or another writer), parsed by
//! `store::etcd::parse_snapshot`, then a plugin call's changes planned into
//! a commit by `store::etcd::plan`.
//!
//! Properties: no panic; what does not decode is an error; the commit
//! writes only under the scope's prefixes, guards each key with its
//! revision as read (0: absent), and never releases, deletes or re-owns another node's
//! live entry, whatever the call changed.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wasm_cni_store::etcd::{block_cidr, others_blocks, parse_snapshot, plan, Prefixes};
use wasm_cni_store::{Entry, Owner};

#[derive(Arbitrary, Debug)]
struct Kv {
    range: u8,
    /// An entry key under the prefix (or a raw key when `raw`).
    name: String,
    raw: bool,
    value: Vec<u8>,
    /// Or a well-formed entry, to get past decoding.
    entry: Option<(u8, u64, Option<u64>, u8)>,
    rev: i64,
}

#[derive(Arbitrary, Debug)]
enum Change {
    /// Reserve a key for this node's owner.
    Reserve(String, u8),
    /// Release whatever entry sits at the n-th key.
    Release(u8),
    /// Delete the n-th key.
    Delete(u8),
    /// Release every live entry (GC that knows no valid attachment).
    ReleaseAll,
    SetValue(String, Option<String>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    kvs: Vec<Kv>,
    changes: Vec<Change>,
}

const NODES: [&str; 3] = ["n0", "n1", "n2"];
const ME: &str = "n0";

fn owner(i: u8) -> Owner {
    Owner {
        container_id: format!("c{}", i % 4),
        ifname: "eth0".into(),
    }
}

fuzz_target!(|input: Input| {
    let p = Prefixes {
        entries: "/p/scopes/net/host-local/entries/".into(),
        values: format!("/p/scopes/net/host-local/values/{ME}/"),
        blocks: "/p/scopes/net/host-local/blocks/".into(),
    };
    let kvs = input.kvs.iter().map(|kv| {
        let range = usize::from(kv.range % 3);
        let prefix = [&p.entries, &p.values, &p.blocks][range];
        let key = if kv.raw {
            kv.name.clone()
        } else {
            format!("{prefix}{}", kv.name)
        };
        let value = match (range, kv.entry) {
            (0, Some((o, at, rel, node))) => serde_json::to_vec(&Entry {
                owner: owner(o),
                allocated_at: at,
                released_at: rel,
                node: Some(NODES[usize::from(node % 3)].to_string()),
            })
            .unwrap_or_default(),
            (2, Some((_, _, _, node))) => NODES[usize::from(node % 3)].as_bytes().to_vec(),
            _ => kv.value.clone(),
        };
        (range, key.into_bytes(), value, kv.rev)
    });
    let Ok(snap) = parse_snapshot(&p, kvs.collect::<Vec<_>>()) else {
        return;
    };
    // What the plugin is told of other nodes' claims: CIDRs of blocks,
    // whatever names another writer gave them.
    for b in others_blocks(&snap, ME) {
        let (addr, len) = b.split_once('/').expect("a CIDR");
        assert_eq!(block_cidr(&format!("{addr}_{len}")), Some(b.clone()));
    }
    let mut data = snap.data.clone();
    for c in input.changes.iter().take(64) {
        let keys: Vec<String> = data.entries.keys().cloned().collect();
        let nth = |n: &u8| keys.get(usize::from(*n) % keys.len().max(1)).cloned();
        match c {
            Change::Reserve(k, o) => {
                if wasm_cni_store::valid_key(k) && !data.entries.get(k).is_some_and(Entry::is_live)
                {
                    data.entries.insert(
                        k.clone(),
                        Entry {
                            owner: owner(*o),
                            allocated_at: 7,
                            released_at: None,
                            node: None,
                        },
                    );
                }
            }
            Change::Release(n) => {
                if let Some(e) = nth(n).and_then(|k| data.entries.get_mut(&k)) {
                    e.released_at = Some(9);
                }
            }
            Change::Delete(n) => {
                if let Some(k) = nth(n) {
                    data.entries.remove(&k);
                }
            }
            Change::ReleaseAll => {
                for e in data.entries.values_mut() {
                    e.released_at.get_or_insert(9);
                }
            }
            Change::SetValue(k, v) => {
                if wasm_cni_store::valid_key(k) {
                    match v {
                        Some(v) => data.values.insert(k.clone(), v.clone()),
                        None => data.values.remove(k),
                    };
                }
            }
        }
    }
    let writes = plan(&p, &snap, &data, ME).expect("entries serialise");
    for w in &writes {
        assert!(
            [&p.entries, &p.values, &p.blocks]
                .iter()
                .any(|x| w.key.starts_with(x.as_str())),
            "{w:?}"
        );
        assert_eq!(
            w.expect,
            snap.revisions.get(&w.key).copied().unwrap_or(0),
            "{w:?}"
        );
        let Some(name) = w.key.strip_prefix(p.entries.as_str()) else {
            continue;
        };
        if let Some(old) = snap.data.entries.get(name) {
            if old.is_live() && old.node.as_deref() != Some(ME) {
                let new: Option<Entry> = w
                    .value
                    .as_ref()
                    .and_then(|v| serde_json::from_slice(v).ok());
                assert!(
                    new.is_some_and(|n| n.is_live() && n.owner == old.owner),
                    "another node's live entry {name} changed: {old:?} -> {w:?}"
                );
            }
        }
    }
});
