//! Registry credentials from the auth files `podman login` and `docker login`
//! write, looked up as podman does: `--auth-file`, else `REGISTRY_AUTH_FILE`,
//! else `$XDG_RUNTIME_DIR/containers/auth.json` (root's:
//! `/run/containers/0/auth.json`), `~/.config/containers/auth.json`, then
//! docker's `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`. The first
//! file with an entry for the image wins; within a file, the most specific
//! key (`host/namespace/repo` before `host`). Credential helpers
//! (`credsStore`, `credHelpers`) are not run.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

use super::ImageRef;

/// A user name and password (or token) for a registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Creds {
    pub username: String,
    pub password: String,
    /// Which file they came from, for messages.
    pub source: String,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a password in a log line.
        write!(f, "Creds({} from {})", self.username, self.source)
    }
}

/// The files to look in, in order.
pub fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = env("REGISTRY_AUTH_FILE") {
        return vec![p];
    }
    let mut files = Vec::new();
    match env("XDG_RUNTIME_DIR") {
        Some(run) => files.push(run.join("containers/auth.json")),
        None => files.push(PathBuf::from(format!(
            "/run/containers/{}/auth.json",
            rustix::process::getuid().as_raw()
        ))),
    }
    let home = env("HOME");
    if let Some(h) = &home {
        files.push(h.join(".config/containers/auth.json"));
    }
    match env("DOCKER_CONFIG") {
        Some(d) => files.push(d.join("config.json")),
        None => {
            if let Some(h) = &home {
                files.push(h.join(".docker/config.json"));
            }
        }
    }
    files
}

/// Credentials for `image` from the first file that has some. An explicit
/// file that cannot be read is an error; the default ones may be absent.
pub fn lookup(explicit: Option<&Path>, image: &ImageRef) -> Result<Option<Creds>, String> {
    for file in candidates(explicit) {
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let source = file.display().to_string();
        if let Some((username, password)) = find(&bytes, &image.registry, &image.repository)
            .map_err(|e| format!("{source}: {e}"))?
        {
            return Ok(Some(Creds {
                username,
                password,
                source,
            }));
        }
    }
    Ok(None)
}

/// The registry a key of `auths` names, as docker and podman normalise it:
/// no scheme, no trailing slash, docker's legacy `/v1/` path dropped, and
/// docker hub's aliases made one.
fn normalise(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key.trim_end_matches('/');
    let key = key
        .strip_suffix("/v1")
        .or_else(|| key.strip_suffix("/v2"))
        .unwrap_or(key);
    match key.split_once('/') {
        Some((host, rest)) => format!("{}/{rest}", hub(host)),
        None => hub(key).to_string(),
    }
}

fn hub(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        h => h,
    }
}

/// Look `registry`/`repository` up in one auth file's bytes.
pub fn find(
    file: &[u8],
    registry: &str,
    repository: &str,
) -> Result<Option<(String, String)>, String> {
    let v: Value = serde_json::from_slice(file).map_err(|e| format!("not JSON: {e}"))?;
    let Some(auths) = v.get("auths").and_then(Value::as_object) else {
        return Ok(None);
    };
    let registry = hub(registry);
    // host/a/b/c, host/a/b, host/a, host: most specific first.
    let full = format!("{registry}/{repository}");
    let mut wanted: Vec<&str> = full.match_indices('/').map(|(i, _)| &full[..i]).collect();
    wanted.push(&full);
    wanted.reverse();
    for want in wanted {
        let Some(entry) = auths
            .iter()
            .find_map(|(k, e)| (normalise(k) == want).then_some(e))
        else {
            continue;
        };
        return decode(entry).map(Some);
    }
    Ok(None)
}

fn decode(entry: &Value) -> Result<(String, String), String> {
    if let Some(auth) = entry.get("auth").and_then(Value::as_str) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("\"auth\" is not base64: {e}"))?;
        let text = String::from_utf8(raw).map_err(|_| "\"auth\" is not UTF-8".to_string())?;
        let Some((user, pass)) = text.split_once(':') else {
            return Err("\"auth\" is not base64 of USER:PASSWORD".into());
        };
        return Ok((user.to_string(), pass.to_string()));
    }
    match (
        entry.get("username").and_then(Value::as_str),
        entry.get("password").and_then(Value::as_str),
    ) {
        (Some(u), Some(p)) => Ok((u.to_string(), p.to_string())),
        _ if entry.get("identitytoken").is_some() => {
            Err("only an identity token is stored; log in with a password or token instead".into())
        }
        _ => Err("an entry without \"auth\"".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn most_specific_key_wins_and_aliases_match() {
        let file = format!(
            r#"{{"auths":{{
                "reg.example:5000":{{"auth":"{}"}},
                "reg.example:5000/team":{{"auth":"{}"}},
                "https://index.docker.io/v1/":{{"auth":"{}"}}}}}}"#,
            b64("all:one"),
            b64("team:two"),
            b64("hub:three")
        );
        let f = file.as_bytes();
        let got = |r, p| find(f, r, p).unwrap();
        assert_eq!(
            got("reg.example:5000", "team/bridge"),
            Some(("team".into(), "two".into()))
        );
        assert_eq!(
            got("reg.example:5000", "other/x"),
            Some(("all".into(), "one".into()))
        );
        assert_eq!(
            got("docker.io", "library/busybox"),
            Some(("hub".into(), "three".into()))
        );
        assert_eq!(
            got("reg.example", "team/bridge"),
            None,
            "another port is another registry"
        );
        assert_eq!(
            got("reg.example:5000", "teamx/a"),
            Some(("all".into(), "one".into()))
        );
    }

    #[test]
    fn bad_entries_are_errors_and_absent_ones_are_none() {
        assert!(find(b"{}", "r.io", "a").unwrap().is_none());
        assert!(find(br#"{"auths":{"r.io":{"auth":"!!"}}}"#, "r.io", "a")
            .unwrap_err()
            .contains("base64"));
        let nocolon = format!(r#"{{"auths":{{"r.io":{{"auth":"{}"}}}}}}"#, b64("x"));
        assert!(find(nocolon.as_bytes(), "r.io", "a")
            .unwrap_err()
            .contains("USER:PASSWORD"));
        assert!(
            find(br#"{"auths":{"r.io":{"identitytoken":"t"}}}"#, "r.io", "a")
                .unwrap_err()
                .contains("identity token")
        );
        assert_eq!(
            find(
                br#"{"auths":{"r.io":{"username":"u","password":"p:q"}}}"#,
                "r.io",
                "a"
            )
            .unwrap(),
            Some(("u".into(), "p:q".into()))
        );
        assert!(find(b"not json", "r.io", "a").is_err());
    }

    #[test]
    fn an_explicit_file_must_exist() {
        let image: ImageRef = "r.io/a:1".parse().unwrap();
        let err = lookup(Some(Path::new("/nonexistent/auth.json")), &image).unwrap_err();
        assert!(err.contains("/nonexistent/auth.json"), "{err}");
    }
}
