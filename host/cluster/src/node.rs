//! Node objects, as cluster mode reads them: the name, the pod CIDRs
//! (`spec.podCIDRs`, else `spec.podCIDR`) and the InternalIPs
//! (`status.addresses`). The API server's word is parsed, never trusted:
//! a field that is not what Kubernetes would write makes the Node refused,
//! with a reason, and the rest of the cluster is unaffected.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;
use wasm_cni_model::net::IpNetFamily;

/// Kubernetes allows one pod CIDR per family, so two at most.
const MAX_CIDRS: usize = 2;
/// A Node lists a handful of addresses; more are not read.
const MAX_ADDRESSES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// `metadata.creationTimestamp` (RFC 3339, UTC, which sorts as text):
    /// of two Nodes whose CIDRs overlap, the older keeps its own.
    pub created: Option<String>,
    /// The pod CIDRs, or why they cannot be used (then the Node adds
    /// nothing anywhere).
    pub cidrs: Result<Vec<IpNet>, String>,
    /// `status.addresses` of type InternalIP, in order.
    pub internal_ips: Vec<IpAddr>,
}

/// A Node's name is a DNS subdomain.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// A Node object. `Err` only when it has no usable name (there is nothing
/// to key it by); any other fault is kept in [`Node::cidrs`].
pub fn parse(v: &Value) -> Result<Node, String> {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("a Node without metadata.name")?;
    if !valid_name(name) {
        return Err(format!("a Node named {:?}: not a node name", shorten(name)));
    }
    let internal_ips = match v.pointer("/status/addresses") {
        Some(Value::Array(list)) => list
            .iter()
            .take(MAX_ADDRESSES)
            .filter(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
            .filter_map(|a| a.get("address").and_then(Value::as_str))
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .collect(),
        _ => Vec::new(),
    };
    let created = v
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .filter(|t| t.len() == 20 && t.ends_with('Z'))
        .map(str::to_string);
    Ok(Node {
        name: name.to_string(),
        created,
        cidrs: cidrs(v.get("spec")),
        internal_ips,
    })
}

fn cidrs(spec: Option<&Value>) -> Result<Vec<IpNet>, String> {
    let list: Vec<&Value> = match spec.and_then(|s| s.get("podCIDRs")) {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(Value::Null) | None => spec.and_then(|s| s.get("podCIDR")).into_iter().collect(),
        Some(_) => return Err("spec.podCIDRs is not a list".into()),
    };
    if list.len() > MAX_CIDRS {
        return Err(format!(
            "spec.podCIDRs has {} entries, at most 2",
            list.len()
        ));
    }
    let mut out: Vec<IpNet> = Vec::new();
    for c in list {
        let s = c.as_str().ok_or("spec.podCIDRs holds a non-string")?;
        let net: IpNet = s
            .parse()
            .map_err(|_| format!("spec.podCIDRs: {:?} is not a CIDR", shorten(s)))?;
        if net != net.trunc() {
            return Err(format!("spec.podCIDRs: {s} has host bits set"));
        }
        if out.iter().any(|o| o.is_ipv4() == net.is_ipv4()) {
            return Err("spec.podCIDRs has two CIDRs of one family".into());
        }
        out.push(net);
    }
    Ok(out)
}

/// At most 64 characters of a string an API object controls, for a reason
/// or a log line (where it is also neutralised).
pub fn shorten(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(spec: &str, status: &str) -> Value {
        serde_json::from_str(&format!(
            r#"{{"kind":"Node","metadata":{{"name":"n1","creationTimestamp":"2026-12-07T09:00:00Z"}},"spec":{spec},"status":{status}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_node_yields_its_cidrs_and_internal_ips() {
        let n = parse(&node(
            r#"{"podCIDR":"10.1.0.0/24","podCIDRs":["10.1.0.0/24","fd00:1::/64"]}"#,
            r#"{"addresses":[{"type":"Hostname","address":"n1"},{"type":"ExternalIP","address":"1.2.3.4"},
               {"type":"InternalIP","address":"192.168.1.5"},{"type":"InternalIP","address":"fd50::5"},
               {"type":"InternalIP","address":"not-an-ip"}]}"#,
        ))
        .unwrap();
        assert_eq!(n.name, "n1");
        assert_eq!(n.created.as_deref(), Some("2026-12-07T09:00:00Z"));
        assert_eq!(n.cidrs.unwrap().len(), 2);
        assert_eq!(
            n.internal_ips,
            vec![
                "192.168.1.5".parse::<IpAddr>().unwrap(),
                "fd50::5".parse().unwrap()
            ]
        );
        let old = parse(&node(r#"{"podCIDR":"10.1.0.0/24"}"#, "{}")).unwrap();
        assert_eq!(old.cidrs, Ok(vec!["10.1.0.0/24".parse().unwrap()]));
        assert_eq!(parse(&node("{}", "{}")).unwrap().cidrs, Ok(vec![]));
    }

    #[test]
    fn a_node_that_is_not_what_kubernetes_writes_is_refused_not_guessed() {
        for bad in [
            r#"{"podCIDRs":"10.1.0.0/24"}"#,
            r#"{"podCIDRs":[1]}"#,
            r#"{"podCIDRs":["10.1.0.0/33"]}"#,
            r#"{"podCIDRs":["10.1.0.1/24"]}"#,
            r#"{"podCIDRs":["10.1.0.0/24","10.2.0.0/24"]}"#,
            r#"{"podCIDRs":["10.1.0.0/24","fd00::/64","10.3.0.0/24"]}"#,
            r#"{"podCIDRs":["10.0.0.0/24\",\"x\":\""]}"#,
        ] {
            assert!(parse(&node(bad, "{}")).unwrap().cidrs.is_err(), "{bad}");
        }
        for name in [r#""""#, r#""../x""#, r#""A""#, "7", "null"] {
            let v: Value =
                serde_json::from_str(&format!(r#"{{"metadata":{{"name":{name}}}}}"#)).unwrap();
            assert!(parse(&v).is_err(), "{name}");
        }
        // Addresses past the first few are not read.
        let many: Vec<String> = (0..100)
            .map(|i| format!(r#"{{"type":"InternalIP","address":"10.9.0.{i}"}}"#))
            .collect();
        let n = parse(&node(
            "{}",
            &format!(r#"{{"addresses":[{}]}}"#, many.join(",")),
        ))
        .unwrap();
        assert_eq!(n.internal_ips.len(), MAX_ADDRESSES);
    }
}
