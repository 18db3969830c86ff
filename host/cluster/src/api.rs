//! The Kubernetes API, as cluster mode reads it: list the Nodes, then watch
//! them from the list's resourceVersion. Every reply is untrusted: a page
//! is read up to [`MAX_PAGE`] bytes, a watch event up to [`MAX_EVENT`], each
//! request within its deadline; a watch that runs past its own
//! `timeoutSeconds` is cut. The token is read for each request (the kubelet
//! rotates projected tokens) and sent over HTTPS only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hyper::header::{self, HeaderName, HeaderValue};
use hyper::StatusCode;
use serde_json::Value;
use wasm_cni_image::registry::{self, Lines, Url};

use crate::node::{self, Node};

/// One page of a list: 250 Nodes of a few kilobytes each, with room for
/// Nodes whose status lists many images.
pub const MAX_PAGE: u64 = 32 << 20;
pub const PAGE_SIZE: usize = 250;
/// One watch event: one Node.
pub const MAX_EVENT: usize = 1 << 20;
/// Pages in one list: 100 000 Nodes, far past any cluster's.
const MAX_PAGES: usize = 400;
/// A continue token is opaque and short; it goes back into a query.
const MAX_CONTINUE: usize = 4096;

/// Where and how to reach the API server.
#[derive(Debug, Clone)]
pub struct Api {
    /// `https://host:port`, without a path.
    pub base: String,
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
    /// For a list page.
    pub request_timeout: Duration,
    /// The watch's `timeoutSeconds`: the server ends it then, and the
    /// client a little later if it has not.
    pub watch_timeout: Duration,
}

/// Why a request came to nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The resourceVersion is too old (410 Gone): list again.
    Gone,
    /// Anything else: try again later, keeping what is applied.
    Failed(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Gone => f.write_str("the watch expired (410 Gone)"),
            ApiError::Failed(why) => f.write_str(why),
        }
    }
}

/// A change a watch reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Put(Node),
    Deleted(String),
    /// An object that is not a usable Node, and why (logged, counted).
    Skipped(String),
}

/// Every Node, by name, and the list's resourceVersion.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    pub nodes: BTreeMap<String, Node>,
    pub resource_version: String,
    pub skipped: Vec<String>,
}

impl Api {
    pub fn new(base: &str, token_file: PathBuf, ca_file: PathBuf) -> Result<Api, String> {
        let base = base.trim_end_matches('/').to_string();
        let url = Url::parse(&format!("{base}/"))?;
        if !url.https {
            return Err(format!(
                "--api-server {base}: not https (the service account's token goes only over TLS)"
            ));
        }
        if url.target != "/" {
            return Err(format!("--api-server {base}: a server, without a path"));
        }
        Ok(Api {
            base,
            token_file,
            ca_file,
            request_timeout: Duration::from_secs(10),
            watch_timeout: Duration::from_secs(300),
        })
    }

    fn headers(&self) -> Result<Vec<(HeaderName, String)>, ApiError> {
        let token = std::fs::read_to_string(&self.token_file).map_err(|e| {
            ApiError::Failed(format!(
                "--api-token-file {}: {e}",
                self.token_file.display()
            ))
        })?;
        let token = token.trim();
        if token.is_empty() || HeaderValue::from_str(token).is_err() {
            return Err(ApiError::Failed(format!(
                "--api-token-file {}: not a token",
                self.token_file.display()
            )));
        }
        Ok(vec![
            (header::AUTHORIZATION, format!("Bearer {token}")),
            (header::ACCEPT, "application/json".into()),
        ])
    }

    fn url(&self, query: &str) -> Result<Url, ApiError> {
        Url::parse(&format!("{}/api/v1/nodes?{query}", self.base)).map_err(ApiError::Failed)
    }

    /// Every Node, page by page.
    pub fn list(&self) -> Result<Listed, ApiError> {
        let mut out = Listed::default();
        let mut next = String::new();
        for _ in 0..MAX_PAGES {
            let mut query = format!("limit={PAGE_SIZE}");
            if !next.is_empty() {
                query += &format!("&continue={}", encode_query(&next));
            }
            let url = self.url(&query)?;
            let reply = registry::get_once(
                &url,
                Some(&self.ca_file),
                &self.headers()?,
                MAX_PAGE,
                self.request_timeout,
            )
            .map_err(ApiError::Failed)?;
            if reply.status == StatusCode::GONE {
                // The continue token expired: start over.
                return Err(ApiError::Gone);
            }
            if reply.status != StatusCode::OK {
                return Err(refusal(reply.status, &reply.body));
            }
            let v: Value = serde_json::from_slice(&reply.body)
                .map_err(|e| ApiError::Failed(format!("the Node list is not JSON: {e}")))?;
            if v.get("kind").and_then(Value::as_str) != Some("NodeList") {
                return Err(ApiError::Failed("the reply is not a NodeList".into()));
            }
            let items = match v.get("items") {
                Some(Value::Array(items)) => items.as_slice(),
                Some(Value::Null) | None => &[],
                Some(_) => return Err(ApiError::Failed("NodeList.items is not a list".into())),
            };
            for item in items {
                match node::parse(item) {
                    Ok(n) => {
                        out.nodes.insert(n.name.clone(), n);
                    }
                    Err(why) => out.skipped.push(why),
                }
            }
            let meta = v.get("metadata");
            let field = |f: &str| {
                meta.and_then(|m| m.get(f))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            out.resource_version = field("resourceVersion");
            next = field("continue");
            if next.len() > MAX_CONTINUE {
                return Err(ApiError::Failed(format!(
                    "a continue token of {} bytes, over {MAX_CONTINUE}",
                    next.len()
                )));
            }
            if next.is_empty() {
                if !valid_version(&out.resource_version) {
                    return Err(ApiError::Failed(
                        "the Node list has no usable resourceVersion".into(),
                    ));
                }
                return Ok(out);
            }
        }
        Err(ApiError::Failed(format!(
            "the Node list ran past {MAX_PAGES} pages"
        )))
    }

    /// Watch from `version`, reporting each change; returns the last
    /// resourceVersion seen when the server ends the watch.
    pub fn watch(
        &self,
        version: &str,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<String, ApiError> {
        // An hour at most: a watch the server never ends is cut then.
        let secs = self.watch_timeout.as_secs().clamp(1, 3600);
        let url = self.url(&format!(
            "watch=1&allowWatchBookmarks=true&timeoutSeconds={secs}&resourceVersion={}",
            encode_query(version)
        ))?;
        let mut last = version.to_string();
        let mut fault: Option<ApiError> = None;
        let mut on_line = |line: &[u8]| -> bool {
            if line.is_empty() {
                return true;
            }
            match event(line) {
                Ok((ev, rv)) => {
                    if let Some(rv) = rv {
                        last = rv;
                    }
                    if let Some(ev) = ev {
                        on_event(ev);
                    }
                    true
                }
                Err(e) => {
                    fault = Some(e);
                    false
                }
            }
        };
        let ended = registry::get_lines(
            &url,
            Some(&self.ca_file),
            &self.headers()?,
            MAX_EVENT,
            Duration::from_secs(secs + 10),
            &mut on_line,
        )
        .map_err(ApiError::Failed)?;
        if let Lines::Refused(reply) = ended {
            if reply.status == StatusCode::GONE {
                return Err(ApiError::Gone);
            }
            return Err(refusal(reply.status, &reply.body));
        }
        match fault {
            Some(e) => Err(e),
            None => Ok(last),
        }
    }
}

/// One line of a watch: the change, if any, and the resourceVersion it
/// brings the watch to.
fn event(line: &[u8]) -> Result<(Option<Event>, Option<String>), ApiError> {
    let v: Value = serde_json::from_slice(line)
        .map_err(|e| ApiError::Failed(format!("a watch event is not JSON: {e}")))?;
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    let object = v.get("object").unwrap_or(&Value::Null);
    if kind == "ERROR" {
        let code = object.get("code").and_then(Value::as_u64);
        return Err(match code {
            Some(410) => ApiError::Gone,
            _ => ApiError::Failed(format!(
                "the watch ended with an error{}",
                status_message(object)
            )),
        });
    }
    let rv = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| valid_version(rv))
        .map(str::to_string);
    let ev = match kind {
        "BOOKMARK" => None,
        "ADDED" | "MODIFIED" => Some(match node::parse(object) {
            Ok(n) => Event::Put(n),
            Err(why) => Event::Skipped(why),
        }),
        "DELETED" => Some(match node::parse(object) {
            Ok(n) => Event::Deleted(n.name),
            Err(why) => Event::Skipped(why),
        }),
        other => Some(Event::Skipped(format!(
            "a watch event of type {:?}",
            node::shorten(other)
        ))),
    };
    Ok((ev, rv))
}

/// A resourceVersion is opaque, but goes back into a query: printable
/// ASCII, short.
fn valid_version(rv: &str) -> bool {
    !rv.is_empty() && rv.len() <= 64 && rv.bytes().all(|b| b.is_ascii_graphic())
}

/// Percent-encode what goes into a query value.
fn encode_query(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

fn refusal(status: StatusCode, body: &[u8]) -> ApiError {
    let said = reply_message(body);
    let hint = match status {
        StatusCode::UNAUTHORIZED => " (the API server refused the token)",
        StatusCode::FORBIDDEN => " (RBAC needs get, list and watch on nodes)",
        _ => "",
    };
    ApiError::Failed(format!("{status}{hint}{said}"))
}

/// The message of a Status reply, as ": <message>" (bounded, without
/// control characters), or nothing.
pub fn reply_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .map(|v| status_message(&v))
        .unwrap_or_default()
}

/// A Status object's message, as ": <message>" (bounded), or nothing.
fn status_message(v: &Value) -> String {
    v.get("message")
        .and_then(Value::as_str)
        .map(|m| {
            let m: String = m.chars().filter(|c| !c.is_control()).take(300).collect();
            format!(": {m}")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_become_changes_and_an_expired_watch_asks_for_a_list() {
        let put = br#"{"type":"ADDED","object":{"metadata":{"name":"n2","resourceVersion":"17"},"spec":{"podCIDRs":["10.1.2.0/24"]}}}"#;
        let (ev, rv) = event(put).unwrap();
        assert!(matches!(ev, Some(Event::Put(n)) if n.name == "n2"));
        assert_eq!(rv.as_deref(), Some("17"));
        let gone =
            br#"{"type":"DELETED","object":{"metadata":{"name":"n2","resourceVersion":"18"}}}"#;
        assert_eq!(event(gone).unwrap().0, Some(Event::Deleted("n2".into())));
        let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"40"}}}"#;
        assert_eq!(event(bookmark).unwrap(), (None, Some("40".into())));
        let expired = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}"#;
        assert_eq!(event(expired), Err(ApiError::Gone));
        let other = br#"{"type":"ERROR","object":{"kind":"Status","code":500,"message":"etcd\u001b[2J down"}}"#;
        let ApiError::Failed(why) = event(other).unwrap_err() else {
            panic!("not a failure")
        };
        assert!(
            why.contains("etcd[2J down") && !why.contains('\u{1b}'),
            "{why}"
        );
        // Hostile lines: nothing is guessed, nothing reaches a query.
        assert!(event(b"<html>").is_err());
        let nameless = br#"{"type":"ADDED","object":{"metadata":{"name":"../x"}}}"#;
        assert!(matches!(
            event(nameless).unwrap().0,
            Some(Event::Skipped(_))
        ));
        let odd =
            br#"{"type":"ADDED","object":{"metadata":{"name":"n","resourceVersion":"1&watch=0"}}}"#;
        assert_eq!(event(odd).unwrap().1.as_deref(), Some("1&watch=0"));
        assert_eq!(encode_query("1&watch=0"), "1%26watch%3D0");
        let spaced =
            br#"{"type":"ADDED","object":{"metadata":{"name":"n","resourceVersion":"1 2"}}}"#;
        assert_eq!(event(spaced).unwrap().1, None);
    }

    #[test]
    fn only_an_https_server_without_a_path_is_an_api() {
        let f = PathBuf::from("/nonexistent");
        assert!(Api::new("https://10.0.0.1:6443/", f.clone(), f.clone()).is_ok());
        assert!(Api::new("http://10.0.0.1:8080", f.clone(), f.clone()).is_err());
        assert!(Api::new("https://10.0.0.1:6443/api/v1/x", f.clone(), f).is_err());
    }
}
