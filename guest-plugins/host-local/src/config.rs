//! The request config as host-local reads it (`allocator.LoadIPAMConfig`):
//! the `ipam` object, `runtimeConfig.ipRanges`/`ips`, `args.cni.ips` and
//! CNI_ARGS `IP=`, plus this plugin's reuse keys.

use std::net::IpAddr;

use serde::Deserialize;
use wasm_cni_sdk::error::{code, CniError};

use crate::alloc::Policy;
use crate::ip;
use crate::plugin::Route;
use crate::range::{RangeConf, RangeSet};

/// `ipam.reuseIPWait` when absent, in seconds.
pub const DEFAULT_REUSE_WAIT_S: u64 = 60;
/// Upper bound for `reuseIPWait` (a day): a typo must not freeze a pool.
const MAX_REUSE_WAIT_S: f64 = 86_400.0;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetConfRaw {
    #[serde(default)]
    cni_version: Option<String>,
    #[serde(default)]
    ipam: Option<IpamRaw>,
    #[serde(default)]
    runtime_config: Option<RuntimeRaw>,
    #[serde(default)]
    args: Option<ArgsRaw>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IpamRaw {
    /// The legacy single range lives directly in `ipam`.
    #[serde(flatten)]
    legacy: RangeConf,
    #[serde(default)]
    ranges: Option<Vec<Vec<RangeConf>>>,
    #[serde(default)]
    routes: Option<Vec<RouteRaw>>,
    #[serde(default)]
    resolv_conf: Option<String>,
    #[serde(default, rename = "reuseIPWait")]
    reuse_ip_wait: Option<f64>,
    #[serde(default)]
    reuse_quarantined: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RuntimeRaw {
    #[serde(default)]
    ip_ranges: Option<Vec<Vec<RangeConf>>>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
struct ArgsRaw {
    #[serde(default)]
    cni: Option<ArgsCniRaw>,
}

#[derive(Deserialize, Default)]
struct ArgsCniRaw {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RouteRaw {
    #[serde(default)]
    dst: Option<String>,
    #[serde(default)]
    gw: Option<String>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    advmss: Option<u32>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    scope: Option<u8>,
}

/// What host-local needs from one request.
#[derive(Clone, Debug, PartialEq)]
pub struct IpamConfig {
    pub ranges: Vec<RangeSet>,
    pub routes: Vec<Route>,
    pub resolv_conf: Option<String>,
    /// Requested addresses in collection order, without duplicates.
    pub requested: Vec<IpAddr>,
    pub policy: Policy,
}

fn invalid(msg: impl Into<String>) -> CniError {
    CniError::invalid_config(msg)
}

/// Versions before 0.3.0 carry one address per family.
fn before_0_3(version: &str) -> bool {
    matches!(version, "" | "0.1.0" | "0.2.0")
}

/// Parse `config` (the request JSON) and CNI_ARGS pairs.
pub fn load(config: &str, args: &[(String, String)]) -> Result<IpamConfig, CniError> {
    let raw: NetConfRaw = serde_json::from_str(config).map_err(|e| {
        CniError::new(
            code::DECODING_FAILURE,
            format!("error unmarshall network config: {e}"),
        )
    })?;
    let version = raw.cni_version.unwrap_or_default();
    let ipam = raw
        .ipam
        .ok_or_else(|| invalid("IPAM config missing 'ipam' key"))?;
    let runtime = raw.runtime_config.unwrap_or_default();

    let mut requested = Vec::new();
    if let Some(ip) = env_ip(args)? {
        requested.extend(ip);
    }
    let arg_ips = raw.args.and_then(|a| a.cni).and_then(|c| c.ips);
    for s in arg_ips.iter().flatten().chain(runtime.ips.iter().flatten()) {
        let ip = ip::parse_ip_maybe_cidr(s)
            .map_err(|e| invalid(format!("cannot understand ip: {e}")))?;
        requested.push(ip);
    }
    let mut seen = Vec::new();
    requested.retain(|ip| {
        let new = !seen.contains(ip);
        seen.push(*ip);
        new
    });

    // Final order: runtime ipRanges, then the legacy range, then `ranges`.
    let mut confs: Vec<Vec<RangeConf>> = runtime.ip_ranges.unwrap_or_default();
    if ipam.legacy.subnet.as_deref().is_some_and(|s| !s.is_empty()) {
        confs.push(vec![ipam.legacy.clone()]);
    }
    confs.extend(ipam.ranges.unwrap_or_default());
    if confs.is_empty() {
        return Err(invalid("no IP ranges specified"));
    }
    let mut ranges = Vec::with_capacity(confs.len());
    for (i, c) in confs.iter().enumerate() {
        ranges.push(
            RangeSet::canonicalize(c)
                .map_err(|e| invalid(format!("invalid range set {i}: {e}")))?,
        );
    }
    let v4 = ranges
        .iter()
        .filter(|s| s.family() == Some(ip::Family::V4))
        .count();
    if (v4 > 1 || ranges.len() - v4 > 1) && before_0_3(&version) {
        return Err(invalid(format!(
            "CNI version {version} does not support more than 1 address per family"
        )));
    }
    for (i, a) in ranges.iter().enumerate() {
        for (j, b) in ranges.iter().enumerate().skip(i + 1) {
            if a.overlaps(b) {
                return Err(invalid(format!("range set {i} overlaps with {j}")));
            }
        }
    }

    let routes = ipam
        .routes
        .unwrap_or_default()
        .into_iter()
        .map(route)
        .collect::<Result<Vec<_>, _>>()?;

    let wait = ipam.reuse_ip_wait.unwrap_or(DEFAULT_REUSE_WAIT_S as f64);
    if !(0.0..=MAX_REUSE_WAIT_S).contains(&wait) {
        return Err(invalid(format!(
            "ipam.reuseIPWait {wait}: must be between 0 and {MAX_REUSE_WAIT_S} seconds"
        )));
    }
    Ok(IpamConfig {
        ranges,
        routes,
        resolv_conf: ipam.resolv_conf.filter(|p| !p.is_empty()),
        requested,
        policy: Policy {
            // In range, so the cast neither truncates nor saturates.
            reuse_wait_ms: (wait * 1000.0).round() as u64,
            reuse_quarantined: ipam.reuse_quarantined.unwrap_or(false),
        },
    })
}

/// CNI_ARGS as Go's `types.LoadArgs` reads them into host-local's
/// `IPAMEnvArgs`: `IP` (a comma-separated list is accepted too) and
/// `IgnoreUnknown`; any other key is an error unless `IgnoreUnknown`.
fn env_ip(args: &[(String, String)]) -> Result<Option<Vec<IpAddr>>, CniError> {
    let env = |m: String| CniError::new(code::INVALID_ENVIRONMENT, m);
    let mut ignore_unknown = false;
    for (k, v) in args {
        if k == "IgnoreUnknown" {
            ignore_unknown = match v.to_ascii_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(env(format!(
                        "ARGS: boolean unmarshal error: invalid input {v}"
                    )))
                }
            };
        }
    }
    let unknown: Vec<String> = args
        .iter()
        .filter(|(k, _)| k != "IgnoreUnknown" && k != "IP")
        .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
        .collect();
    if !unknown.is_empty() && !ignore_unknown {
        return Err(env(format!("ARGS: unknown args [{}]", unknown.join(" "))));
    }
    let Some((_, value)) = args.iter().rev().find(|(k, v)| k == "IP" && !v.is_empty()) else {
        return Ok(None);
    };
    value
        .split(',')
        .map(|s| {
            ip::parse_ip_maybe_cidr(s).map_err(|e| {
                env(format!(
                    "ARGS: error parsing value of pair \"IP={value}\": {e}"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn route(r: RouteRaw) -> Result<Route, CniError> {
    let dst = r
        .dst
        .ok_or_else(|| invalid("ipam.routes: a route without \"dst\""))?;
    let dst = ip::parse_cidr(&dst).map_err(invalid)?;
    let gw =
        r.gw.filter(|g| !g.is_empty())
            .map(|g| ip::parse_ip(&g).map_err(invalid))
            .transpose()?;
    Ok(Route {
        dst: dst.to_string(),
        gw: gw.map(|g| g.to_string()),
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(ipam: &str) -> String {
        format!(r#"{{"cniVersion":"1.0.0","name":"mynet","type":"host-local","ipam":{ipam}}}"#)
    }

    fn load_ok(c: &str) -> IpamConfig {
        load(c, &[]).unwrap()
    }

    fn load_err(c: &str) -> CniError {
        load(c, &[]).unwrap_err()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn old_style_config() {
        let c = load_ok(&conf(
            r#"{"type":"host-local","subnet":"10.1.2.0/24","rangeStart":"10.1.2.9","gateway":"10.1.2.30",
                "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.1.2.1"}],"dataDir":"/x"}"#,
        ));
        assert_eq!(c.ranges.len(), 1);
        assert_eq!(c.ranges[0].to_string(), "10.1.2.9-10.1.2.254");
        assert_eq!(c.ranges[0].0[0].gateway.to_string(), "10.1.2.30");
        assert_eq!(c.routes[1].gw.as_deref(), Some("10.1.2.1"));
        assert_eq!(c.policy.reuse_wait_ms, 60_000);
        assert!(!c.policy.reuse_quarantined);
    }

    #[test]
    fn mixed_config_orders_runtime_then_legacy_then_ranges() {
        let c = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
            "subnet":"10.1.2.0/24","ranges":[[{"subnet":"10.2.2.0/24"},{"subnet":"10.3.2.0/24"}],[{"subnet":"2001:db8:1::/64"}]],
            "reuseIPWait":1.5,"reuseQuarantined":true},
            "runtimeConfig":{"ipRanges":[[{"subnet":"192.168.0.0/24"}]]}}"#;
        let c = load_ok(c);
        let sets: Vec<String> = c.ranges.iter().map(ToString::to_string).collect();
        assert_eq!(
            sets,
            [
                "192.168.0.1-192.168.0.254",
                "10.1.2.1-10.1.2.254",
                "10.2.2.1-10.2.2.254,10.3.2.1-10.3.2.254",
                "2001:db8:1::1-2001:db8:1:0:ffff:ffff:ffff:ffff"
            ]
        );
        assert_eq!(c.policy.reuse_wait_ms, 1_500);
        assert!(c.policy.reuse_quarantined);
    }

    #[test]
    fn requested_ips_from_every_source_in_order() {
        let c = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local","subnet":"10.1.2.0/24"},
            "args":{"cni":{"ips":["10.1.2.88","10.1.2.11/24"]}},
            "runtimeConfig":{"ips":["192.168.0.1","192.168.0.5/24","2001:db8::1/64"]}}"#;
        let got = load(c, &pairs(&[("IP", "10.1.2.11/24")]))
            .unwrap()
            .requested;
        let got: Vec<String> = got.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "10.1.2.11",
                "10.1.2.88",
                "192.168.0.1",
                "192.168.0.5",
                "2001:db8::1"
            ]
        );
        let one = load(c, &pairs(&[("IP", "10.1.2.10")])).unwrap().requested;
        assert_eq!(one[0].to_string(), "10.1.2.10");
    }

    #[test]
    fn cni_args_rules() {
        let c = conf(r#"{"subnet":"10.1.2.0/24"}"#);
        let e = load(&c, &pairs(&[("FOO", "bar")])).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (4, r#"ARGS: unknown args ["FOO=bar"]"#)
        );
        let ok = load(
            &c,
            &pairs(&[
                ("IgnoreUnknown", "1"),
                ("K8S_POD_NAME", "p"),
                ("IP", "10.1.2.7"),
            ]),
        );
        assert_eq!(ok.unwrap().requested.len(), 1);
        let e = load(&c, &pairs(&[("IP", "10.1.2.x")])).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("invalid IP address: 10.1.2.x"), "{}", e.msg);
    }

    #[test]
    fn validation_texts() {
        assert_eq!(
            load_err(r#"{"cniVersion":"1.0.0","name":"n"}"#).msg,
            "IPAM config missing 'ipam' key"
        );
        assert_eq!(
            load_err(&conf(r#"{"type":"host-local"}"#)).msg,
            "no IP ranges specified"
        );
        let e = load_err(&conf(
            r#"{"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"2001:db8::/64"}]]}"#,
        ));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (7, "invalid range set 0: mixed address families")
        );
        let e = load_err(&conf(
            r#"{"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.0/20"}]]}"#,
        ));
        assert_eq!(
            e.msg,
            "invalid range set 0: subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.15.254 overlap"
        );
        let e = load_err(&conf(
            r#"{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/20"}]]}"#,
        ));
        assert_eq!(e.msg, "range set 0 overlaps with 1");
        let e = load_err(&conf(r#"{"subnet":"192.0.2.0/31"}"#));
        assert_eq!(
            e.msg,
            "invalid range set 0: Network 192.0.2.0/31 too small to allocate from"
        );
        let e = load_err(&conf(r#"{"subnet":"10.0.0.0/24","reuseIPWait":-1}"#));
        assert!(e.msg.starts_with("ipam.reuseIPWait -1"), "{}", e.msg);
        let e = load_err(&conf(
            r#"{"subnet":"10.0.0.0/24","routes":[{"dst":"10.0.0.0"}]}"#,
        ));
        assert_eq!(e.msg, "invalid CIDR address: 10.0.0.0");
        let e = load_err(r#"{"name":"n","ipam":{"subnet":7}}"#);
        assert_eq!(e.code, 6);
    }

    #[test]
    fn one_address_per_family_before_0_3_0() {
        let two_v4 = r#"{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.3.0/24"}]]}"#;
        let v4_v6 = r#"{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8::/64"}]]}"#;
        let at = |v: &str, ipam: &str| {
            load(
                &format!(r#"{{"cniVersion":"{v}","name":"n","ipam":{ipam}}}"#),
                &[],
            )
        };
        assert_eq!(
            at("0.2.0", two_v4).unwrap_err().msg,
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
        assert!(at("0.2.0", v4_v6).is_ok());
        assert!(at("0.3.1", two_v4).is_ok());
    }
}
