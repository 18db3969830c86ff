//! Which contract a component was built against, checked by name before
//! its imports are linked: a component the host cannot serve is refused
//! with a sentence that says what it asked for and what this host serves,
//! never with a type-mismatch string from the linker.

use wasmtime::component::types::{Component, ComponentItem};
use wasmtime::Engine;

/// The `cni:plugin` versions this host serves, oldest first. The last is
/// the contract in `wit/`; the others are in `wit/released/`.
pub const SERVED: &[&str] = &["0.1.0", "0.2.0", "0.2.1", "0.2.2"];

/// The interfaces of `cni:plugin`, the same in every served version (0.2.0
/// changed records, 0.2.1 and 0.2.2 added functions, none changed names).
const INTERFACES: &[&str] = &[
    "types", "log", "network", "filter", "ipam", "store", "files", "plugin",
];

/// The WASI 0.2 interfaces the linker defines (`wasmtime_wasi::p2`'s
/// synchronous set). They carry no authority: the store's WASI context has
/// no preopened directory, no environment, no socket permission, and its
/// monotonic clock ends by the call's deadline.
pub const WASI: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stderr",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:random/random",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
];

/// The contract a component's `plugin` export belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V0_1,
    V0_2,
    V0_2_1,
    V0_2_2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1 => "0.1.0",
            Version::V0_2 => "0.2.0",
            Version::V0_2_1 => "0.2.1",
            Version::V0_2_2 => "0.2.2",
        }
    }

    fn parse(v: &str) -> Option<Version> {
        match v {
            "0.1.0" => Some(Version::V0_1),
            "0.2.0" => Some(Version::V0_2),
            "0.2.1" => Some(Version::V0_2_1),
            "0.2.2" => Some(Version::V0_2_2),
            _ => None,
        }
    }
}

/// A name from the component, as a message shows it: names are the
/// author's (valid component names, so printable), their length too.
fn shown(name: &str) -> String {
    const MAX: usize = 128;
    match name.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

fn served() -> String {
    format!("this host serves cni:plugin {}", SERVED.join(", "))
}

/// What [`check`] found: the contract of the `plugin` export, and whether
/// every import is of the current contract (0.2.x), so that the linker of
/// the current contract alone serves it: no WASI, no 0.1.0 interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub version: Version,
    pub current_only: bool,
}

/// Check every import and the `plugin` export by name. `Err` is the whole
/// sentence of the refusal, after the plugin's name.
pub fn check(ty: &Component, engine: &Engine) -> Result<Checked, String> {
    let mut current_only = true;
    for (name, _) in ty.imports(engine) {
        current_only &= check_import(name).map_err(|e| e.replace(name, &shown(name)))?;
    }
    let mut export = None;
    for (name, item) in ty.exports(engine) {
        let Some(version) = name.strip_prefix("cni:plugin/plugin@") else {
            continue;
        };
        let (name, version) = (shown(name), shown(version));
        if !matches!(item.ty, ComponentItem::ComponentInstance(_)) {
            return Err(format!("exports {name}, which is not an interface"));
        }
        match Version::parse(&version) {
            Some(v) => export = Some(v),
            None => {
                return Err(format!(
                    "was built against cni:plugin@{version} (it exports {name}); {}: use a host \
                     that serves {version}, or build the plugin against one of these",
                    served()
                ))
            }
        }
    }
    let version = export.ok_or_else(|| {
        format!(
            "exports no cni:plugin/plugin interface, so it is not a CNI plugin ({})",
            served()
        )
    })?;
    Ok(Checked {
        version,
        current_only: current_only && version != Version::V0_1,
    })
}

/// Check one import by name: `Ok(true)` for an interface of the current
/// contract (the 0.2 versions, which its bindings serve by wasmtime's
/// semver rules), `Ok(false)` for one of 0.1.0 or of WASI.
fn check_import(name: &str) -> Result<bool, String> {
    let (path, version) = name.rsplit_once('@').unwrap_or((name, ""));
    if let Some(iface) = path.strip_prefix("cni:plugin/") {
        let Some(served_version) = Version::parse(version) else {
            return Err(format!(
                "was built against cni:plugin@{version} (it imports {name}); {}: use a host \
                 that serves {version}, or build the plugin against one of these",
                served()
            ));
        };
        if iface == "plugin" || !INTERFACES.contains(&iface) {
            return Err(format!(
                "imports {name}, which cni:plugin@{version} does not provide"
            ));
        }
        return Ok(served_version != Version::V0_1);
    }
    let wasi_0_2 = version
        .strip_prefix("0.2.")
        .is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()));
    if WASI.contains(&path) && wasi_0_2 {
        return Ok(false);
    }
    Err(format!(
        "imports {name}, which this host does not grant to plugins (it grants cni:plugin \
         {} and, with no authority, WASI 0.2's cli, clocks, filesystem, io, random and \
         sockets interfaces)",
        SERVED.join(", ")
    ))
}

/// Why a component whose names all check out still does not link: its
/// types differ from the version it names. `linker_error` is wasmtime's
/// text; only the import and the item it names are kept from it.
pub fn mismatch(version: Version, linker_error: &str) -> String {
    let quoted: Vec<String> = linker_error
        .split('`')
        .skip(1)
        .step_by(2)
        .map(shown)
        .collect();
    let differs = match quoted.as_slice() {
        [import, item, ..] => format!("its import {import} differs in {item}"),
        [import] => format!("its import {import} differs"),
        [] => "its imports differ".to_string(),
    };
    let hint = match version {
        // The one known case: `link` gained two fields under 0.1.0 on
        // 2026-12-01, before 0.1.0 was frozen as it had been released.
        Version::V0_1 => {
            ". A component built from a later, unreleased revision of 0.1.0 (its `link` \
             record has `vlan-id` and `ipvlan-mode`) matches cni:plugin@0.2.0: rebuild it \
             against 0.2.0"
        }
        Version::V0_2 | Version::V0_2_1 | Version::V0_2_2 => "",
    };
    format!(
        "was built against cni:plugin@{v}, but {differs} from cni:plugin@{v} as released \
         ({}){hint}",
        served(),
        v = version.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_checked_by_name_and_version() {
        assert!(check_import("cni:plugin/network@0.1.0").is_ok());
        assert!(check_import("cni:plugin/types@0.2.0").is_ok());
        assert!(check_import("wasi:io/streams@0.2.12").is_ok());
        assert!(check_import("wasi:clocks/monotonic-clock@0.2.0").is_ok());
        assert!(check_import("cni:plugin/store@0.2.1").is_ok());
        let e = check_import("cni:plugin/network@0.3.0").unwrap_err();
        assert!(
            e.contains("cni:plugin@0.3.0")
                && e.contains("serves cni:plugin 0.1.0, 0.2.0, 0.2.1, 0.2.2"),
            "{e}"
        );
        // Semver-compatible in the linker's eyes, but not a version this
        // host released.
        assert!(check_import("cni:plugin/log@0.1.1").is_err());
        assert!(check_import("cni:plugin/log").is_err());
        assert!(check_import("cni:plugin/plugin@0.2.0").is_err());
        assert!(check_import("cni:plugin/tunnel@0.2.0")
            .unwrap_err()
            .contains("does not provide"));
        for refused in [
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:io/streams@0.3.0",
            "wasi:io/streams@0.2.",
            "wasi:io/streams",
            "evil:net/raw@1.0.0",
        ] {
            let e = check_import(refused).unwrap_err();
            assert!(e.contains(refused) && e.contains("does not grant"), "{e}");
        }
    }

    /// A component with one import beyond the current contract (a WASI
    /// clock, a 0.1.0 interface) must get the full linker, where WASI's
    /// monotonic clock is the host's own, bounded by the call's deadline.
    #[test]
    fn only_current_contract_imports_are_served_by_its_linker_alone() {
        for current in ["cni:plugin/log@0.2.0", "cni:plugin/network@0.2.1"] {
            assert_eq!(check_import(current), Ok(true), "{current}");
        }
        for other in [
            "cni:plugin/log@0.1.0",
            "wasi:clocks/monotonic-clock@0.2.0",
            "wasi:io/streams@0.2.12",
            "cni:plugin/log",
            "cni:plugin@0.2.0",
            "xcni:plugin/log@0.2.0",
        ] {
            assert_ne!(check_import(other), Ok(true), "{other}");
        }
    }

    #[test]
    fn a_mismatch_names_the_import_not_the_types() {
        let linker = "component imports instance `cni:plugin/network@0.1.0`, but a matching \
            implementation was not found in the linker: instance export \
            `[method]netns.create-veth` has the wrong type: type mismatch with results: \
            expected record of 13 fields, found 15 fields";
        let m = mismatch(Version::V0_1, linker);
        assert!(
            m.contains("its import cni:plugin/network@0.1.0 differs in [method]netns.create-veth"),
            "{m}"
        );
        assert!(
            m.contains("rebuild it against 0.2.0") && !m.contains("type mismatch"),
            "{m}"
        );
        assert!(mismatch(Version::V0_2, "no quotes").contains("its imports differ"));
    }

    #[test]
    fn long_names_are_cut_in_messages() {
        let long = format!("wasi:io/{}@0.2.0", "x".repeat(5000));
        let e = check_import(&long)
            .map_err(|e| e.replace(&long, &shown(&long)))
            .unwrap_err();
        assert!(e.len() < 500 && e.contains('…'), "{e}");
        assert_eq!(shown("ab"), "ab");
    }
}
