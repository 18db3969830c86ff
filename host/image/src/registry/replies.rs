//! What a registry says, parsed: the URLs it redirects to, its
//! `WWW-Authenticate` challenges, its error bodies. Every input here is the
//! registry's (or a redirect's), so nothing here trusts it: bad text is an
//! error, never a panic.

use hyper::StatusCode;
use serde_json::Value;

/// An absolute http(s) URL, split as a request needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// As in the Host header: an IPv6 address in brackets.
    pub host: String,
    pub port: u16,
    /// Path and query, starting with '/'.
    pub target: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("{s:?} is not an http(s) URL"));
        };
        let (authority, target) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.contains('@') {
            return Err(format!("{s:?}: credentials in a URL are not accepted"));
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if authority.starts_with('[') {
            match authority.split_once(']') {
                Some((h, rest)) => (
                    format!("{h}]"),
                    match rest.strip_prefix(':') {
                        Some(p) => p.parse().map_err(|_| format!("{s:?}: bad port"))?,
                        None if rest.is_empty() => default_port,
                        None => return Err(format!("{s:?}: bad authority")),
                    },
                ),
                None => return Err(format!("{s:?}: bad authority")),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("{s:?}: bad port"))?,
                ),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() || port == 0 || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("{s:?}: bad URL"));
        }
        Ok(Url {
            https,
            host,
            port,
            target,
        })
    }

    /// A Location header's target, absolute or relative to this URL.
    pub fn join(&self, location: &str) -> Result<Url, String> {
        if location.starts_with("http://") || location.starts_with("https://") {
            return Url::parse(location);
        }
        let target = if location.starts_with('/') {
            location.to_string()
        } else {
            let dir = self.target.split('?').next().unwrap_or("/");
            let dir = &dir[..dir.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        Url::parse(&format!("{}{target}", self.origin()))
    }

    pub fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }

    pub(super) fn authority(&self) -> String {
        if self.port == if self.https { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub(super) fn connect_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

/// The first challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        /// `service`, `scope` and the rest, in order, for the token request.
        params: Vec<(String, String)>,
    },
}

pub fn parse_challenge(h: &str) -> Result<Challenge, String> {
    let h = h.trim();
    let (scheme, rest) = h.split_once([' ', '\t']).unwrap_or((h, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Ok(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(format!("unsupported authentication scheme {scheme:?}"));
    }
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim().to_ascii_lowercase();
        if key.is_empty() || key.contains([' ', ',', '"']) {
            return Err(format!("malformed challenge {h:?}"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(format!("malformed challenge {h:?}: unterminated quote"));
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        // RFC 7235: a parameter occurs once per challenge; two realms
        // would leave which one we ask ambiguous.
        if params.iter().any(|(k, _)| *k == key) {
            return Err(format!("malformed challenge {h:?}: {key} given twice"));
        }
        params.push((key, value));
    }
    let Some(i) = params.iter().position(|(k, _)| k == "realm") else {
        return Err(format!("Bearer challenge {h:?} names no realm"));
    };
    let (_, realm) = params.remove(i);
    Ok(Challenge::Bearer { realm, params })
}

/// A distribution error reply in a sentence: the status, and the registry's
/// own codes and messages when it sent them.
pub fn describe_error(status: StatusCode, body: &[u8]) -> String {
    let mut out = status.to_string();
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let errors: Vec<String> = v
            .get("errors")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .take(5)
                    .map(|e| {
                        let field = |k| e.get(k).and_then(Value::as_str).unwrap_or("");
                        format!("{} {}", field("code"), field("message"))
                            .trim()
                            .chars()
                            .take(200)
                            .collect()
                    })
                    .filter(|s: &String| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !errors.is_empty() {
            out.push_str(": ");
            out.push_str(&errors.join("; "));
        }
    }
    out
}

/// Percent-encode a query component (RFC 3986 unreserved kept).
pub(super) fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_and_join() {
        let u = Url::parse("http://127.0.0.1:5000/v2/").unwrap();
        assert_eq!(
            (u.https, u.host.as_str(), u.port, u.target.as_str()),
            (false, "127.0.0.1", 5000, "/v2/")
        );
        let v6 = Url::parse("https://[::1]:8443").unwrap();
        assert_eq!(
            (
                v6.host.as_str(),
                v6.connect_host(),
                v6.port,
                v6.target.as_str()
            ),
            ("[::1]", "::1", 8443, "/")
        );
        assert_eq!(
            Url::parse("https://auth.example?x=1").unwrap().target,
            "/?x=1"
        );
        assert_eq!(
            u.join("/v2/r/blobs/uploads/abc?_state=1").unwrap().target,
            "/v2/r/blobs/uploads/abc?_state=1"
        );
        assert_eq!(
            u.join("https://cdn.example/blob").unwrap().origin(),
            "https://cdn.example:443"
        );
        for bad in [
            "ftp://x/",
            "http://u:p@host/",
            "http://host:0/",
            "http://host:99999/",
            "http:///",
            "http://h/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn challenges_parse() {
        assert_eq!(
            parse_challenge("Basic realm=\"Registry\"").unwrap(),
            Challenge::Basic
        );
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                params: vec![
                    ("service".into(), "registry.docker.io".into()),
                    (
                        "scope".into(),
                        "repository:library/busybox:pull,push".into()
                    )
                ]
            }
        );
        assert!(parse_challenge("Bearer service=\"x\"")
            .unwrap_err()
            .contains("realm"));
        assert!(parse_challenge("Bearer realm=\"x")
            .unwrap_err()
            .contains("unterminated"));
        assert!(parse_challenge("Negotiate abc").is_err());
        // The fuzzer's finding: a second realm is refused, not half-used.
        assert!(
            parse_challenge(r#"Bearer realm="https://a/t",realm="https://b/t""#)
                .unwrap_err()
                .contains("realm given twice")
        );
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }

    #[test]
    fn error_bodies_are_summarised() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#;
        assert_eq!(
            describe_error(StatusCode::NOT_FOUND, body),
            "404 Not Found: MANIFEST_UNKNOWN manifest unknown"
        );
        assert_eq!(
            describe_error(StatusCode::BAD_GATEWAY, b"<html>"),
            "502 Bad Gateway"
        );
    }
}
