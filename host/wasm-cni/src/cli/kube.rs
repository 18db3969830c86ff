//! The installer's one read of the Kubernetes API: this node's pod CIDRs
//! (`spec.podCIDRs`), with the pod's service account, for a template's
//! `${POD_CIDR}`, and its InternalIPs, whose link gives `${MTU}`. RBAC:
//! `get` on `nodes`, nothing else.
//!
//! The reply is untrusted input to a root process: read under a size limit
//! and a deadline, every CIDR parsed (a value never adds JSON structure to
//! the conflist), no redirect followed, and the token sent over HTTPS only.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::header;
use hyper::StatusCode;
use ipnet::IpNet;
use serde_json::Value;

use wasm_cni_cluster::plan::PodCidrBounds;
use wasm_cni_cluster::{api, node};
use wasm_cni_image::registry::{self, Url};

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// A Node object is a few kilobytes; more is not read.
const MAX_REPLY: u64 = 1 << 20;

/// How to reach the Kubernetes API: in a pod, nothing needs saying.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ApiArgs {
    /// The API server [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT].
    #[arg(long, value_name = "URL")]
    pub api_server: Option<String>,
    /// The bearer token [default: the service account's].
    #[arg(long, value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// The CA that signed the API server's certificate [default: the
    /// service account's ca.crt].
    #[arg(long, value_name = "FILE")]
    pub api_ca_file: Option<PathBuf>,
}

impl ApiArgs {
    /// `https://host:port`, from the option or the pod's environment.
    pub fn base(&self) -> Result<String, String> {
        if let Some(s) = &self.api_server {
            return Ok(s.trim_end_matches('/').to_string());
        }
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
            "no --api-server and no KUBERNETES_SERVICE_HOST (not in a pod?)".to_string()
        })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".to_string());
        Ok(if host.contains(':') {
            format!("https://[{host}]:{port}")
        } else {
            format!("https://{host}:{port}")
        })
    }

    pub fn token_file(&self) -> PathBuf {
        self.api_token_file
            .clone()
            .unwrap_or_else(|| Path::new(SA_DIR).join("token"))
    }

    pub fn ca_file(&self) -> PathBuf {
        self.api_ca_file
            .clone()
            .unwrap_or_else(|| Path::new(SA_DIR).join("ca.crt"))
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct KubeArgs {
    /// Fill ${POD_CIDR} (the first of the node's spec.podCIDRs),
    /// ${POD_CIDR_V4}, ${POD_CIDR_V6} and ${POD_CIDRS} (comma-separated)
    /// from this Node, read from the Kubernetes API with the pod's service
    /// account. In a DaemonSet: the downward API's spec.nodeName.
    #[arg(long, value_name = "NODE")]
    pub pod_cidr_from_node: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
    /// How long to keep trying (a node's CIDR is assigned shortly after it
    /// registers; an API server may be restarting). Each request has 5 s.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub api_wait_ms: u64,
    /// The shortest IPv4 prefix a Node's pod CIDR may have: a wider one is
    /// refused (a pod CIDR is routed into the node's bridge).
    #[arg(long, value_name = "LEN", default_value_t = PodCidrBounds::DEFAULT.v4)]
    pub min_pod_cidr_prefix_v4: u8,
    /// The shortest IPv6 prefix a Node's pod CIDR may have.
    #[arg(long, value_name = "LEN", default_value_t = PodCidrBounds::DEFAULT.v6)]
    pub min_pod_cidr_prefix_v6: u8,
    /// Fill ${MTU} too, for cluster mode in MODE (auto, direct, vxlan): the
    /// MTU of the link holding the Node's InternalIPs, less VXLAN's
    /// encapsulation unless MODE is direct. Needs --pod-cidr-from-node, and
    /// the installer on the node's network.
    #[arg(long, value_name = "MODE")]
    pub mtu_for_cluster_mode: Option<wasm_cni_cluster::plan::Mode>,
}

/// The node's pod CIDRs, as placeholder values.
pub fn pod_cidr_values(a: &KubeArgs, node: &str) -> Result<Vec<(String, String)>, String> {
    let (cidrs, internal_ips) = pod_cidrs(a, node)?;
    let mut out = vec![
        ("POD_CIDR".to_string(), cidrs[0].to_string()),
        (
            "POD_CIDRS".to_string(),
            cidrs
                .iter()
                .map(IpNet::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
    ];
    if let Some(v4) = cidrs.iter().find(|c| matches!(c, IpNet::V4(_))) {
        out.push(("POD_CIDR_V4".into(), v4.to_string()));
    }
    if let Some(v6) = cidrs.iter().find(|c| matches!(c, IpNet::V6(_))) {
        out.push(("POD_CIDR_V6".into(), v6.to_string()));
    }
    if let Some(mode) = a.mtu_for_cluster_mode {
        use wasm_cni_kernel::fabric::{Fabric, KernelFabric};
        let connected = KernelFabric::open(wasm_cni_kernel::net::NsRef::Current)
            .and_then(|mut f| f.connected())
            .map_err(|e| format!("--mtu-for-cluster-mode: this host's links: {e}"))?;
        let mtu = wasm_cni_cluster::plan::pod_mtu(mode, &connected, &internal_ips)
            .map_err(|e| format!("--mtu-for-cluster-mode: node {node}: {e}"))?;
        out.push(("MTU".into(), mtu.to_string()));
    }
    Ok(out)
}

fn api_url(a: &KubeArgs, name: &str) -> Result<Url, String> {
    let base = a
        .api
        .base()
        .map_err(|e| format!("--pod-cidr-from-node: {e}"))?;
    // A node name is a DNS subdomain: nothing in it can change the path.
    if !node::valid_name(name) {
        return Err(format!(
            "--pod-cidr-from-node {name:?}: not a node name (lower-case letters, digits, '-' and '.')"
        ));
    }
    let url = Url::parse(&format!("{base}/api/v1/nodes/{name}"))
        .map_err(|e| format!("--api-server: {e}"))?;
    if !url.https {
        return Err(format!(
            "--api-server {base}: not https (the service account's token goes only over TLS)"
        ));
    }
    Ok(url)
}

/// A Node's pod CIDRs and its InternalIPs.
type CidrsAndIps = (Vec<IpNet>, Vec<IpAddr>);

/// The Node's pod CIDRs, within bounds, and its InternalIPs.
fn pod_cidrs(a: &KubeArgs, node: &str) -> Result<CidrsAndIps, String> {
    let bounds = PodCidrBounds {
        v4: a.min_pod_cidr_prefix_v4,
        v6: a.min_pod_cidr_prefix_v6,
    };
    let (cidrs, ips) = fetch_pod_cidrs(a, node)?;
    for net in &cidrs {
        bounds
            .check(net)
            .map_err(|why| format!("--pod-cidr-from-node {node}: spec.podCIDRs: {why}"))?;
    }
    Ok((cidrs, ips))
}

fn fetch_pod_cidrs(a: &KubeArgs, node: &str) -> Result<CidrsAndIps, String> {
    let url = api_url(a, node)?;
    let token_file = a.api.token_file();
    let ca_file = a.api.ca_file();
    if let Err(e) = std::fs::metadata(&ca_file) {
        return Err(format!("--api-ca-file {}: {e}", ca_file.display()));
    }
    let deadline = Instant::now() + Duration::from_millis(a.api_wait_ms);
    let mut pause = Duration::from_millis(250);
    loop {
        // Read each time: the kubelet rotates projected tokens.
        let token = std::fs::read_to_string(&token_file)
            .map_err(|e| format!("--api-token-file {}: {e}", token_file.display()))?;
        let token = token.trim();
        if token.is_empty() || header::HeaderValue::from_str(token).is_err() {
            return Err(format!(
                "--api-token-file {}: not a token",
                token_file.display()
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = registry::get_once(
            &url,
            Some(&ca_file),
            &[
                (header::AUTHORIZATION, format!("Bearer {token}")),
                (header::ACCEPT, "application/json".into()),
            ],
            MAX_REPLY,
            left.clamp(Duration::from_millis(100), Duration::from_secs(5)),
        );
        let why = match attempt {
            Ok(reply) if reply.status == StatusCode::OK => match parse_node(&reply.body) {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => format!("node {node:?} has no spec.podCIDRs yet"),
                Err(e) => return Err(format!("{}: {e}", url.origin())),
            },
            Ok(reply) => {
                let said = api::reply_message(&reply.body);
                let final_ = match reply.status {
                    StatusCode::UNAUTHORIZED => Some(format!(
                        "the API server refused the service account's token (401){said}"
                    )),
                    StatusCode::FORBIDDEN => Some(format!(
                        "the service account may not read node {node:?} (403; RBAC needs \
                         get on nodes){said}"
                    )),
                    StatusCode::NOT_FOUND => Some(format!("no node {node:?} (404){said}")),
                    _ => None,
                };
                if let Some(e) = final_ {
                    return Err(format!("{}: {e}", url.origin()));
                }
                format!("{}: {}{said}", url.origin(), reply.status)
            }
            // Only an API server that cannot be reached or is slow may get
            // better by waiting (restarting, a leader change); a TLS refusal,
            // a bad CA file or a reply over the limit will not.
            Err(e) if e.contains("connecting:") || e.contains("no complete reply within") => e,
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        if now + pause > deadline {
            return Err(format!(
                "--pod-cidr-from-node {node}: gave up after {} ms: {why}",
                a.api_wait_ms
            ));
        }
        // `why` may quote the API server's reply.
        eprintln!(
            "wasm-cni: {}; trying again",
            wasm_cni_base::text::Shown(&why)
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// A Node's pod CIDRs (`spec.podCIDRs`, else `spec.podCIDR`) and its
/// InternalIPs; None when it has no CIDR yet. Anything but a list of CIDRs
/// is an error.
fn parse_node(body: &[u8]) -> Result<Option<CidrsAndIps>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not a Node: {e}"))?;
    if v.get("kind").and_then(Value::as_str) != Some("Node") {
        return Err("the reply is not a Node".into());
    }
    let node = node::parse(&v)?;
    let cidrs = node.cidrs?;
    Ok((!cidrs.is_empty()).then_some((cidrs, node.internal_ips)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_reply_yields_its_cidrs_or_a_reason() {
        let node = |spec: &str| {
            format!(r#"{{"kind":"Node","metadata":{{"name":"n"}},"spec":{spec}}}"#).into_bytes()
        };
        assert_eq!(
            parse_node(&node(
                r#"{"podCIDR":"10.1.0.0/24","podCIDRs":["10.1.0.0/24","fd00::/64"]}"#
            ))
            .unwrap()
            .unwrap()
            .0
            .len(),
            2
        );
        assert_eq!(
            parse_node(&node(r#"{"podCIDR":"10.1.0.0/24"}"#)).unwrap(),
            Some((vec!["10.1.0.0/24".parse().unwrap()], vec![]))
        );
        assert_eq!(parse_node(&node("{}")).unwrap(), None);
        assert_eq!(parse_node(&node(r#"{"podCIDRs":[]}"#)).unwrap(), None);
        for bad in [
            r#"{"podCIDRs":"10.1.0.0/24"}"#,
            r#"{"podCIDRs":[1]}"#,
            r#"{"podCIDRs":["10.1.0.0/33"]}"#,
            r#"{"podCIDRs":["10.1.0.1/24"]}"#,
            r#"{"podCIDRs":["10.1.0.0/24\",\"x\":\""]}"#,
            r#"{"podCIDRs":["10.1.0.0/24","10.2.0.0/24","10.3.0.0/24"]}"#,
        ] {
            assert!(parse_node(&node(bad)).is_err(), "{bad}");
        }
        assert!(parse_node(br#"{"kind":"Pod"}"#).is_err());
        assert!(parse_node(b"<html>").is_err());
    }

    #[test]
    fn only_a_node_name_and_https_make_a_url() {
        let a = KubeArgs {
            pod_cidr_from_node: None,
            api: ApiArgs {
                api_server: Some("https://127.0.0.1:6443/".into()),
                ..ApiArgs::default()
            },
            api_wait_ms: 0,
            min_pod_cidr_prefix_v4: 16,
            min_pod_cidr_prefix_v6: 48,
            mtu_for_cluster_mode: None,
        };
        assert_eq!(
            api_url(&a, "node-1.x").unwrap().target,
            "/api/v1/nodes/node-1.x"
        );
        for bad in ["", "../../secrets", "a/b", "a?b", "A", "n%2e"] {
            assert!(api_url(&a, bad).is_err(), "{bad}");
        }
        let plain = KubeArgs {
            api: ApiArgs {
                api_server: Some("http://127.0.0.1:8080".into()),
                ..ApiArgs::default()
            },
            ..a
        };
        assert!(api_url(&plain, "n").unwrap_err().contains("not https"));
    }
}
