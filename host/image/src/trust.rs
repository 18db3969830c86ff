//! The node's trust policy: which images it runs, by who signed them.
//!
//! ```json
//! {"rules": [
//!   {"match": "registry.example.com/cni/*", "action": "verify", "keys": ["keys/cni-team.pub"]},
//!   {"match": "127.0.0.1:5000/*", "action": "skip"},
//!   {"match": "*", "action": "deny"}
//! ]}
//! ```
//!
//! Rules are tried in order against `REGISTRY/REPOSITORY` (no tag, no
//! digest); the first whose pattern matches decides (`*` matches any run
//! of characters, `/` included), and an image no rule matches is denied.
//! `verify` wants one valid signature (`sign.rs`) by one of its keys over
//! the manifest the image is pinned to, naming that image. Key paths are
//! relative to the policy file.
//!
//! The policy is the node's: its file, and every key file, must belong to
//! root (or to whoever runs wasm-cni) and be writable by no one else, or
//! the policy is refused, since whoever could write them decides what the
//! node runs. A request never names a policy.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::sign::{self, PublicKey};
use super::{Digest, ImageRef};

/// Where a node's policy is unless told otherwise; no file there means no
/// policy (every image is taken, as before policies existed).
pub const DEFAULT_PATH: &str = "/etc/wasm-cni/policy.json";
const MAX_POLICY_BYTES: u64 = 1 << 20;
const MAX_RULES: usize = 1024;
const MAX_KEY_BYTES: u64 = 64 << 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRule {
    #[serde(rename = "match")]
    pattern: String,
    action: Action,
    #[serde(default)]
    keys: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    rules: Vec<FileRule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Verify,
    Skip,
    Deny,
}

#[derive(Debug, Clone)]
struct Rule {
    pattern: String,
    action: Action,
    keys: Vec<(PathBuf, PublicKey)>,
}

/// A loaded policy.
#[derive(Debug, Clone)]
pub struct Policy {
    path: PathBuf,
    rules: Vec<Rule>,
}

/// What the policy decided for an image, and by which rule: 1-based, as
/// an operator counts them in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No signature needed.
    Skip { rule: usize },
    /// Verified by the key at this path.
    Verified { rule: usize, key: PathBuf },
}

/// The variable of a process's own environment that names its policy.
pub const ENV: &str = "WASM_CNI_TRUST_POLICY";

/// Where a policy comes from, first found: `explicit` (a flag of the
/// operator's own command or daemon), [`ENV`] in this process's own
/// environment (never a request's), the default path if a file is there.
pub fn load(explicit: Option<&Path>) -> Result<Option<Policy>, String> {
    let from_env = std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match explicit.map(Path::to_path_buf).or(from_env) {
        Some(path) => Policy::load(&path).map(Some),
        None => match std::fs::symlink_metadata(DEFAULT_PATH) {
            Ok(_) => Policy::load(Path::new(DEFAULT_PATH)).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("trust policy {DEFAULT_PATH}: {e}")),
        },
    }
}

/// The contents of a file of the policy, read through the descriptor
/// whose owner and mode were checked: refused when others could have
/// written it, or when it is larger than `max`.
fn read_owned(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(at)?;
    let meta = file.metadata().map_err(at)?;
    wasm_cni_base::fsutil::owned_and_private(&meta, &path.display().to_string())?;
    if meta.len() > max {
        return Err(format!("{}: larger than {max} bytes", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).map_err(at)?;
    Ok(bytes)
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, String> {
        let at = |e: String| format!("trust policy {}: {e}", path.display());
        let text = read_owned(path, MAX_POLICY_BYTES).map_err(at)?;
        let base = path.parent().unwrap_or(Path::new("/"));
        Self::parse(&text, base)
            .map(|rules| Policy {
                path: path.to_path_buf(),
                rules,
            })
            .map_err(at)
    }

    fn parse(text: &[u8], base: &Path) -> Result<Vec<Rule>, String> {
        let file: PolicyFile = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        if file.rules.len() > MAX_RULES {
            return Err(format!("more than {MAX_RULES} rules"));
        }
        let mut rules = Vec::with_capacity(file.rules.len());
        for (i, r) in file.rules.into_iter().enumerate() {
            let n = i + 1;
            if r.pattern.is_empty() {
                return Err(format!("rule {n}: an empty `match`"));
            }
            match (r.action, r.keys.is_empty()) {
                (Action::Verify, true) => return Err(format!("rule {n}: `verify` needs `keys`")),
                (Action::Skip | Action::Deny, false) => {
                    return Err(format!("rule {n}: only `verify` takes `keys`"))
                }
                _ => {}
            }
            let mut keys = Vec::new();
            for k in r.keys {
                let path = base.join(k);
                let key = read_owned(&path, MAX_KEY_BYTES)
                    .and_then(|pem| {
                        PublicKey::from_pem(&String::from_utf8_lossy(&pem))
                            .map_err(|e| format!("{}: {e}", path.display()))
                    })
                    .map_err(|e| format!("rule {n}: {e}"))?;
                keys.push((path, key));
            }
            rules.push(Rule {
                pattern: r.pattern,
                action: r.action,
                keys,
            });
        }
        Ok(rules)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn rule_for(&self, image: &ImageRef) -> Option<(usize, &Rule)> {
        let name = sign::docker_reference(image);
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| glob(&r.pattern, &name))
            .map(|(i, r)| (i + 1, r))
    }

    /// Whether the rule for `image` wants its signatures fetched.
    pub fn wants_signatures(&self, image: &ImageRef) -> bool {
        matches!(self.rule_for(image), Some((_, r)) if r.action == Action::Verify)
    }

    /// Decide for `image` pinned to `manifest`, given the signatures found
    /// for it: `fetch` returns each signature's payload bytes and base64
    /// signature (called only when a rule wants a signature).
    pub fn decide(
        &self,
        image: &ImageRef,
        manifest: &Digest,
        fetch: &mut dyn FnMut() -> Result<Vec<(Vec<u8>, String)>, String>,
    ) -> Result<Decision, String> {
        let name = sign::docker_reference(image);
        let Some((n, rule)) = self.rule_for(image) else {
            return Err(format!(
                "{name}: no rule of the trust policy {} matches it (an image no rule matches \
                 is denied)",
                self.path.display()
            ));
        };
        let by = format!(
            "rule {n} ({:?}) of the trust policy {}",
            rule.pattern,
            self.path.display()
        );
        match rule.action {
            Action::Deny => Err(format!("{name}: denied by {by}")),
            Action::Skip => Ok(Decision::Skip { rule: n }),
            Action::Verify => {
                let found = fetch().map_err(|e| format!("{name}: {by} wants a signature: {e}"))?;
                let mut why = Vec::new();
                for (payload, signature) in &found {
                    let claim = match sign::parse_payload(payload) {
                        Ok(c) => c,
                        Err(e) => {
                            why.push(e);
                            continue;
                        }
                    };
                    if claim.manifest != *manifest {
                        why.push(format!(
                            "a signature names manifest {}, not {manifest}",
                            claim.manifest
                        ));
                        continue;
                    }
                    if claim.docker_reference != name {
                        why.push(format!(
                            "a signature names image {:?}, not {name:?}",
                            claim.docker_reference
                        ));
                        continue;
                    }
                    match rule
                        .keys
                        .iter()
                        .find(|(_, k)| k.verifies(payload, signature))
                    {
                        Some((path, _)) => {
                            return Ok(Decision::Verified {
                                rule: n,
                                key: path.clone(),
                            })
                        }
                        None => why.push(format!(
                            "a signature of {manifest} is not by any key of the rule"
                        )),
                    }
                }
                if why.is_empty() {
                    why.push("no signature".into());
                }
                why.dedup();
                Err(format!(
                    "{name}@{manifest}: {by} wants a signature by one of its keys: {}",
                    why.join("; ")
                ))
            }
        }
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == name;
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("*", "a/b"));
        assert!(glob("reg:5000/cni/*", "reg:5000/cni/ptp"));
        assert!(!glob("reg:5000/cni/*", "reg:5000/other/ptp"));
        assert!(glob("reg:5000/cni/ptp", "reg:5000/cni/ptp"));
        assert!(!glob("reg:5000/cni/ptp", "reg:5000/cni/ptp2"));
        assert!(glob("*/cni/*", "x/cni/y"));
        assert!(!glob("a*a", "a"));
        assert!(glob("a*a", "aa"));
        assert!(glob("**", ""));
    }

    fn policy(rules: &str) -> Result<Vec<Rule>, String> {
        Policy::parse(rules.as_bytes(), Path::new("/nonexistent"))
    }

    #[test]
    fn malformed_policies_say_which_rule() {
        for (text, why) in [
            (
                r#"{"rules":[{"match":"*","action":"verify"}]}"#,
                "rule 1: `verify` needs `keys`",
            ),
            (
                r#"{"rules":[{"match":"*","action":"skip","keys":["k"]}]}"#,
                "only `verify`",
            ),
            (
                r#"{"rules":[{"match":"","action":"deny"}]}"#,
                "empty `match`",
            ),
            (
                r#"{"rules":[{"match":"*","action":"allow"}]}"#,
                "unknown variant",
            ),
            (
                r#"{"rules":[{"match":"*","action":"deny","extra":1}]}"#,
                "unknown field",
            ),
            (
                r#"{"rules":[{"match":"*","action":"verify","keys":["missing.pub"]}]}"#,
                "rule 1: /nonexistent/missing.pub",
            ),
        ] {
            let e = policy(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_no_match_is_deny() {
        let p = Policy {
            path: "/p.json".into(),
            rules: policy(
                r#"{"rules":[{"match":"r/cni/ok*","action":"skip"},{"match":"r/cni/*","action":"deny"}]}"#,
            )
            .unwrap(),
        };
        let img = |s: &str| s.parse::<ImageRef>().unwrap();
        let d = Digest::of(b"m");
        let mut never = || -> Result<Vec<(Vec<u8>, String)>, String> { panic!("no fetch") };
        assert_eq!(
            p.decide(&img("r.io/cni/ok:v1"), &d, &mut never),
            Err(
                "r.io/cni/ok: no rule of the trust policy /p.json matches it (an image no rule \
                 matches is denied)"
                    .into()
            )
        );
        let p = Policy {
            path: "/p.json".into(),
            rules: policy(
                r#"{"rules":[{"match":"r.io/cni/ok*","action":"skip"},{"match":"r.io/cni/*","action":"deny"}]}"#,
            )
            .unwrap(),
        };
        assert_eq!(
            p.decide(&img("r.io/cni/okay:v1"), &d, &mut never),
            Ok(Decision::Skip { rule: 1 })
        );
        let e = p
            .decide(&img("r.io/cni/bad:v1"), &d, &mut never)
            .unwrap_err();
        assert!(e.contains("denied by rule 2 (\"r.io/cni/*\")"), "{e}");
    }
}
