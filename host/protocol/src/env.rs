//! The CNI_* environment of one invocation, validated the way Go's skel does.

use std::collections::HashMap;
use std::path::PathBuf;

use super::error::{CniError, ErrorCode};

pub use wasm_cni_model::Command;

/// Variables that must be set and non-empty for this verb. Go's skel requires
/// CNI_PATH for ADD/DEL/CHECK although the spec calls it optional; we follow skel.
fn required(command: Command) -> &'static [&'static str] {
    match command {
        Command::Add | Command::Check => &[CONTAINERID, NETNS, IFNAME, PATH],
        Command::Del => &[CONTAINERID, IFNAME, PATH],
        Command::Gc | Command::Status => &[PATH],
        Command::Version => &[],
    }
}

/// Exact, case-sensitive match as in skel; anything else is code 4.
pub fn parse_command(s: &str) -> Result<Command, CniError> {
    s.parse()
        .map_err(|e: wasm_cni_model::UnknownCommand| invalid_env(e.to_string()))
}

const COMMAND: &str = "CNI_COMMAND";
const CONTAINERID: &str = "CNI_CONTAINERID";
const NETNS: &str = "CNI_NETNS";
const IFNAME: &str = "CNI_IFNAME";
const ARGS: &str = "CNI_ARGS";
const PATH: &str = "CNI_PATH";

/// Linux IFNAMSIZ (16) minus the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub command: Command,
    /// Empty for GC, STATUS and VERSION.
    pub container_id: String,
    /// `None` when unset or empty (allowed for DEL, GC, STATUS, VERSION).
    pub netns: Option<String>,
    /// Empty for GC, STATUS and VERSION.
    pub ifname: String,
    pub args: Vec<(String, String)>,
    pub path: Vec<PathBuf>,
}

fn invalid_env(msg: impl Into<String>) -> CniError {
    CniError::new(ErrorCode::InvalidEnvironment, msg)
}

/// Builds an [`Invocation`] from environment pairs (pass `std::env::vars()` in
/// production). An empty variable counts as unset, as with Go's `os.Getenv`. Errors are
/// all code 4: a missing or unknown CNI_COMMAND first, then every missing required
/// variable at once, then container id, ifname and CNI_ARGS format. Id and ifname are
/// only checked for ADD/DEL/CHECK, the verbs that use them.
pub fn from_env<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<Invocation, CniError> {
    let env: HashMap<String, String> = vars
        .into_iter()
        .filter(|(k, v)| k.starts_with("CNI_") && !v.is_empty())
        .collect();
    let get = |k: &str| env.get(k).map(String::as_str);

    let command: Command = get(COMMAND)
        .ok_or_else(|| invalid_env(format!("required env variables [{COMMAND}] missing")))
        .and_then(parse_command)?;

    let missing: Vec<&str> = required(command)
        .iter()
        .copied()
        .filter(|k| get(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(invalid_env(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }

    let container_id = get(CONTAINERID).unwrap_or_default().to_string();
    let ifname = get(IFNAME).unwrap_or_default().to_string();
    if command.is_attachment() {
        if !valid_name(&container_id) {
            return Err(invalid_env("invalid characters in containerID").with_details(container_id));
        }
        validate_ifname(&ifname)?;
    }

    Ok(Invocation {
        command,
        container_id,
        netns: get(NETNS).map(str::to_string),
        ifname,
        args: parse_args(get(ARGS).unwrap_or_default())?,
        path: get(PATH)
            .unwrap_or_default()
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect(),
    })
}

/// Go's `utils.ValidateInterfaceName`: what the kernel would refuse, checked up front.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(invalid_env("interface name is empty"));
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(
            invalid_env("interface name is too long").with_details(format!(
                "interface name should be less than {} characters",
                MAX_IFNAME_LEN + 1
            )),
        );
    }
    if name == "." || name == ".." {
        return Err(invalid_env("interface name is . or .."));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(invalid_env("interface name contains an invalid character")
            .with_details(format!("invalid character {c:?}")));
    }
    Ok(())
}

/// `CNI_ARGS` as `K=V;K=V` (Go's `types.LoadArgs` split rules). Every pair needs exactly
/// one `=`, so a trailing `;` is an error as in Go. Keys are not checked here: which keys
/// a plugin knows is the plugin's business.
pub fn parse_args(raw: &str) -> Result<Vec<(String, String)>, CniError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    raw.split(';')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !v.contains('=') => Ok((k.to_string(), v.to_string())),
            _ => Err(invalid_env(format!("ARGS: invalid pair {pair:?}"))),
        })
        .collect()
}

/// The container id / network name rule: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &[(&str, &str)] = &[
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_NETNS", "/run/netns/ns1"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni:"),
    ];

    fn env(cmd: &str, vars: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out = vec![("CNI_COMMAND".to_string(), cmd.to_string())];
        out.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        out
    }

    fn without(skip: &[&str]) -> Vec<(&'static str, &'static str)> {
        FULL.iter()
            .copied()
            .filter(|(k, _)| !skip.contains(k))
            .collect()
    }

    #[test]
    fn full_add() {
        let mut vars = FULL.to_vec();
        vars.push(("CNI_ARGS", "IgnoreUnknown=1;IP=10.0.0.5/24;K8S_POD_NAME="));
        vars.push(("PATH", "/usr/bin"));
        let inv = from_env(env("ADD", &vars)).unwrap();
        assert_eq!(
            inv,
            Invocation {
                command: Command::Add,
                container_id: "ctr-1".into(),
                netns: Some("/run/netns/ns1".into()),
                ifname: "eth0".into(),
                args: vec![
                    ("IgnoreUnknown".into(), "1".into()),
                    ("IP".into(), "10.0.0.5/24".into()),
                    ("K8S_POD_NAME".into(), String::new()),
                ],
                path: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            }
        );
    }

    #[test]
    fn command_parsing() {
        for c in Command::ALL {
            assert_eq!(c.as_str().parse::<Command>().unwrap(), c);
            assert_eq!(c.to_string(), c.as_str());
        }
        let e = parse_command("add").unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (4, "unknown CNI_COMMAND: add"));
    }

    #[test]
    fn missing_or_unknown_command() {
        let e = from_env(
            without(&[])
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .unwrap_err();
        assert_eq!(e.code, 4);
        assert_eq!(e.msg, "required env variables [CNI_COMMAND] missing");
        let e = from_env(env("", FULL)).unwrap_err();
        assert_eq!(e.msg, "required env variables [CNI_COMMAND] missing");
        let e = from_env(env("BOGUS", FULL)).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (4, "unknown CNI_COMMAND: BOGUS"));
    }

    #[test]
    fn each_missing_var_per_verb_is_named() {
        let required: &[(&str, &[&str])] = &[
            (
                "ADD",
                &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            ),
            (
                "CHECK",
                &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            ),
            ("DEL", &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"]),
            ("GC", &["CNI_PATH"]),
            ("STATUS", &["CNI_PATH"]),
        ];
        for (cmd, vars) in required {
            assert!(from_env(env(cmd, FULL)).is_ok(), "{cmd}");
            for var in *vars {
                // Unset and empty are the same.
                for vars in [without(&[var]), {
                    let mut v = without(&[var]);
                    v.push((var, ""));
                    v
                }] {
                    let e = from_env(env(cmd, &vars)).unwrap_err();
                    assert_eq!(e.code, 4, "{cmd} {var}");
                    assert_eq!(e.msg, format!("required env variables [{var}] missing"));
                }
            }
            let e = from_env(env(cmd, &[])).unwrap_err();
            assert_eq!(
                e.msg,
                format!("required env variables [{}] missing", vars.join(","))
            );
        }
    }

    #[test]
    fn optional_vars() {
        let inv = from_env(env("DEL", &without(&["CNI_NETNS"]))).unwrap();
        assert_eq!(inv.netns, None);
        let mut vars = without(&["CNI_NETNS"]);
        vars.push(("CNI_NETNS", ""));
        assert_eq!(from_env(env("DEL", &vars)).unwrap().netns, None);
        let inv = from_env(env("VERSION", &[])).unwrap();
        assert_eq!(inv.command, Command::Version);
        assert!(inv.path.is_empty() && inv.args.is_empty() && inv.container_id.is_empty());
        let inv = from_env(env("GC", &[("CNI_PATH", "/opt/cni/bin")])).unwrap();
        assert_eq!(inv.path, vec![PathBuf::from("/opt/cni/bin")]);
        assert_eq!(inv.ifname, "");
    }

    #[test]
    fn runtime_dummy_version_call_is_accepted() {
        // libcni's VERSION probe: dummy values, empty id and args.
        let vars = [
            ("CNI_NETNS", "dummy"),
            ("CNI_IFNAME", "dummy"),
            ("CNI_PATH", "dummy"),
            ("CNI_CONTAINERID", ""),
            ("CNI_ARGS", ""),
        ];
        assert!(from_env(env("VERSION", &vars)).is_ok());
    }

    #[test]
    fn gc_ignores_attachment_vars() {
        // Ids and ifnames are not used by GC/STATUS, so odd values are not rejected.
        let vars = [("CNI_PATH", "/p"), ("CNI_IFNAME", "way/too/long/ifname")];
        assert!(from_env(env("GC", &vars)).is_ok());
        assert!(from_env(env("STATUS", &vars)).is_ok());
    }

    #[test]
    fn bad_container_ids() {
        for id in [
            "-abc", "_abc", ".abc", "a b", "a/b", "ctr:1", "ctr\n", "ĉtr",
        ] {
            for cmd in ["ADD", "DEL", "CHECK"] {
                let mut vars = without(&["CNI_CONTAINERID"]);
                vars.push(("CNI_CONTAINERID", id));
                let e = from_env(env(cmd, &vars)).unwrap_err();
                assert_eq!(e.code, 4, "{id:?}");
                assert_eq!(e.msg, "invalid characters in containerID");
                assert_eq!(e.details, id);
            }
        }
        for id in ["a", "0", "A_b.c-9", "abc123def"] {
            let mut vars = without(&["CNI_CONTAINERID"]);
            vars.push(("CNI_CONTAINERID", id));
            assert!(from_env(env("ADD", &vars)).is_ok(), "{id}");
        }
    }

    #[test]
    fn bad_ifnames() {
        let cases = [
            (
                "0123456789abcdef",
                "interface name is too long",
                "interface name should be less than 16 characters",
            ),
            (
                "éééééééé",
                "interface name is too long",
                "interface name should be less than 16 characters",
            ),
            (".", "interface name is . or ..", ""),
            ("..", "interface name is . or ..", ""),
            (
                "eth/0",
                "interface name contains an invalid character",
                "invalid character '/'",
            ),
            (
                "eth:0",
                "interface name contains an invalid character",
                "invalid character ':'",
            ),
            (
                "eth 0",
                "interface name contains an invalid character",
                "invalid character ' '",
            ),
            (
                "eth\t0",
                "interface name contains an invalid character",
                "invalid character '\\t'",
            ),
            (
                "eth\u{a0}0",
                "interface name contains an invalid character",
                "invalid character '\\u{a0}'",
            ),
        ];
        for (name, msg, details) in cases {
            let mut vars = without(&["CNI_IFNAME"]);
            vars.push(("CNI_IFNAME", name));
            let e = from_env(env("ADD", &vars)).unwrap_err();
            assert_eq!(
                (e.code, e.msg.as_str(), e.details.as_str()),
                (4, msg, details),
                "{name:?}"
            );
        }
        assert_eq!(
            validate_ifname("").unwrap_err().msg,
            "interface name is empty"
        );
        for ok in ["eth0", "0123456789abcde", "...", "a.b", "ééééééé"] {
            assert!(validate_ifname(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn cni_args_parsing() {
        assert_eq!(parse_args("").unwrap(), vec![]);
        assert_eq!(
            parse_args("A=1;B=;=c").unwrap(),
            vec![
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), String::new()),
                (String::new(), "c".to_string()),
            ]
        );
        for (raw, bad) in [
            ("A", "A"),
            ("A=1;B", "B"),
            ("A=1=2", "A=1=2"),
            ("A=1;", ""),
            (";A=1", ""),
        ] {
            let e = parse_args(raw).unwrap_err();
            assert_eq!(e.code, 4, "{raw}");
            assert_eq!(e.msg, format!("ARGS: invalid pair {bad:?}"), "{raw}");
        }
        let mut vars = FULL.to_vec();
        vars.push(("CNI_ARGS", "IP=10.0.0.1;oops"));
        let e = from_env(env("ADD", &vars)).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (4, "ARGS: invalid pair \"oops\""));
    }

    #[test]
    fn name_rule() {
        assert!(valid_name("podnet"));
        assert!(valid_name("9net_a.b-c"));
        assert!(!valid_name(""));
        assert!(!valid_name("-net"));
        assert!(!valid_name("net/x"));
        assert!(!valid_name("net\n"));
        assert!(!valid_name("net x"));
    }
}
