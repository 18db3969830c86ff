//! CNI results: one internal model (spec 1.1) read from and written to every spec version.
//!
//! Output choices (Go `pkg/types` is the model, spec text where Go leaks):
//! - Keys come out in Go's struct order; empty lists, empty strings and unset options are
//!   omitted, like Go's `omitempty`. So an empty `routes` list is omitted in 1.x too, and an
//!   empty `dns` is omitted, as HEAD libcni does (older Go libs print `"dns":{}`).
//! - Interface `mtu` and route `mtu`/`advmss`/`priority` of 0 mean unset (Go `int`
//!   omitempty); route `table`/`scope` are Go pointers, so 0 is kept.
//! - 0.3.x/0.4.0: `ips[].version` is computed from the address; interfaces keep only
//!   name/mac/sandbox; routes keep every field, as Go's shared route type does.
//! - 1.0.0: the 1.1-only fields are dropped (interface mtu/socketPath/pciID, route
//!   mtu/advmss/priority/table/scope). Go keeps them, but the 1.0 schema has no such keys
//!   and a strict 1.0 consumer may reject them.
//! - 0.1.0/0.2.0: first IPv4 and first IPv6 address only, routes filed by `dst` family
//!   with only dst/gw, no interfaces; no address at all is an error.
//!
//! Input is lenient: any field of the 1.1 model is read whatever the declared version (a
//! Go plugin may label a 1.x struct as 0.3.1), a missing `ips[].version` is accepted, and
//! addresses are validated and written back in canonical form.

use std::net::IpAddr;

use serde::Serialize;
use serde_json::ser::{PrettyFormatter, Serializer};
use serde_json::{Map, Value};

use super::error::{CniError, ErrorCode};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Option<Dns>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    /// Netns path for container-side interfaces; `None` for host interfaces.
    pub sandbox: Option<String>,
    pub socket_path: Option<String>,
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpConfig {
    /// Address with prefix length, e.g. `10.1.2.3/24` (host bits kept).
    pub address: String,
    pub gateway: Option<String>,
    /// Index into `CniResult::interfaces`.
    pub interface: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Route {
    pub dst: String,
    pub gw: Option<String>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.as_deref().unwrap_or("").is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// Go's result type families: a result must be read and written with its family's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// 0.1.0 / 0.2.0: `ip4` / `ip6`.
    Legacy,
    /// 0.3.0 / 0.3.1 / 0.4.0: `ips[].version`.
    V04,
    /// 1.0.0 / 1.1.0.
    V1,
}

fn family(version: &str) -> Result<Family, CniError> {
    match version {
        "" | "0.1.0" | "0.2.0" => Ok(Family::Legacy),
        "0.3.0" | "0.3.1" | "0.4.0" => Ok(Family::V04),
        "1.0.0" | "1.1.0" => Ok(Family::V1),
        other => Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!("unsupported CNI result version {other:?}"),
        )),
    }
}

/// Parses a result of any spec version into the 1.1 model. Its own `cniVersion` decides
/// the schema; `default_version` is used when that is absent or null (libcni and Go
/// plugins do the same). Type errors are code 6 and name the field.
pub fn parse(value: &Value, default_version: &str) -> Result<CniResult, CniError> {
    parse_labelled(value, default_version, "result")
}

/// Reads `prevResult` from a plugin config. Absent or null means none. Unlike Go, which
/// insists on the config's version family, any version is accepted: we convert anyway.
pub fn parse_prev(
    config: &Map<String, Value>,
    config_version: &str,
) -> Result<Option<CniResult>, CniError> {
    match config.get("prevResult") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_labelled(v, config_version, "prevResult").map(Some),
    }
}

fn parse_labelled(
    value: &Value,
    default_version: &str,
    label: &str,
) -> Result<CniResult, CniError> {
    let p = Parser { label };
    let m = p.object(value, "")?;
    let version = match m.get("cniVersion") {
        None | Some(Value::Null) => default_version,
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(p.wrong_type("cniVersion", "a string", other)),
    };
    match family(version)? {
        Family::Legacy => p.legacy(m),
        fam => p.current(m, fam),
    }
}

struct Parser<'a> {
    label: &'a str,
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Present and not null: Go decodes a JSON null as the zero value.
fn field<'v>(m: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    m.get(key).filter(|v| !v.is_null())
}

impl Parser<'_> {
    fn err(&self, path: &str, why: impl std::fmt::Display) -> CniError {
        let at = if path.is_empty() { "" } else { ": " };
        CniError::new(
            ErrorCode::Decoding,
            format!("invalid {}{at}{path}: {why}", self.label),
        )
    }

    fn wrong_type(&self, path: &str, want: &str, got: &Value) -> CniError {
        self.err(path, format!("expected {want}, found {}", json_type(got)))
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, CniError> {
        v.as_object()
            .ok_or_else(|| self.wrong_type(path, "an object", v))
    }

    fn array<'v>(
        &self,
        m: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<&'v [Value], CniError> {
        match field(m, key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(other) => Err(self.wrong_type(&join(path, key), "an array", other)),
        }
    }

    /// Empty strings are "unset", as Go's omitempty would treat them on the way out.
    fn opt_str(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<String>, CniError> {
        match field(m, key) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong_type(&join(path, key), "a string", other)),
        }
    }

    fn req_str(&self, m: &Map<String, Value>, key: &str, path: &str) -> Result<String, CniError> {
        self.opt_str(m, key, path)?
            .ok_or_else(|| self.err(&join(path, key), "missing"))
    }

    fn str_list(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Vec<String>, CniError> {
        let list = self.array(m, key, path)?;
        let path = join(path, key);
        let mut out = Vec::new();
        for (i, v) in list.iter().enumerate() {
            match v {
                Value::String(s) => out.push(s.clone()),
                other => return Err(self.wrong_type(&format!("{path}[{i}]"), "a string", other)),
            }
        }
        Ok(out)
    }

    fn opt_uint(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
        max: u64,
    ) -> Result<Option<u64>, CniError> {
        let Some(v) = field(m, key) else {
            return Ok(None);
        };
        let path = join(path, key);
        let n = v
            .as_u64()
            .ok_or_else(|| self.wrong_type(&path, "a non-negative integer", v))?;
        if n > max {
            return Err(self.err(&path, format!("{n} is out of range (max {max})")));
        }
        Ok(Some(n))
    }

    fn opt_u32(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<u32>, CniError> {
        let n = self.opt_uint(m, key, path, u32::MAX.into())?;
        Ok(n.and_then(|n| u32::try_from(n).ok()))
    }

    /// Go `int` + omitempty: 0 is indistinguishable from unset.
    fn opt_nonzero_u32(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<u32>, CniError> {
        Ok(self.opt_u32(m, key, path)?.filter(|&n| n != 0))
    }

    fn ip(&self, s: &str, path: &str) -> Result<String, CniError> {
        s.parse::<IpAddr>()
            .map(|ip| ip.to_string())
            .map_err(|_| self.err(path, format!("{s:?} is not an IP address")))
    }

    fn opt_ip(
        &self,
        m: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<String>, CniError> {
        let path_key = join(path, key);
        self.opt_str(m, key, path)?
            .map(|s| self.ip(&s, &path_key))
            .transpose()
    }

    /// `ip/prefix`, host bits allowed (Go keeps them), written back canonically.
    fn cidr(&self, m: &Map<String, Value>, key: &str, path: &str) -> Result<String, CniError> {
        let s = self.req_str(m, key, path)?;
        let path = join(path, key);
        match super::cidr::parse(&s) {
            Some(net) => Ok(net.to_string()),
            None => Err(self.err(&path, format!("{s:?} is not an address in CIDR notation"))),
        }
    }

    fn route(&self, v: &Value, path: &str) -> Result<Route, CniError> {
        let m = self.object(v, path)?;
        let scope = self.opt_uint(m, "scope", path, u8::MAX.into())?;
        Ok(Route {
            dst: self.cidr(m, "dst", path)?,
            gw: self.opt_ip(m, "gw", path)?,
            mtu: self.opt_nonzero_u32(m, "mtu", path)?,
            advmss: self.opt_nonzero_u32(m, "advmss", path)?,
            priority: self.opt_nonzero_u32(m, "priority", path)?,
            table: self.opt_u32(m, "table", path)?,
            scope: scope.and_then(|s| u8::try_from(s).ok()),
        })
    }

    fn routes(&self, m: &Map<String, Value>, path: &str) -> Result<Vec<Route>, CniError> {
        let list = self.array(m, "routes", path)?;
        let path = join(path, "routes");
        list.iter()
            .enumerate()
            .map(|(i, r)| self.route(r, &format!("{path}[{i}]")))
            .collect()
    }

    fn dns(&self, m: &Map<String, Value>) -> Result<Option<Dns>, CniError> {
        let Some(v) = field(m, "dns") else {
            return Ok(None);
        };
        let d = self.object(v, "dns")?;
        let dns = Dns {
            nameservers: self.str_list(d, "nameservers", "dns")?,
            domain: self.opt_str(d, "domain", "dns")?,
            search: self.str_list(d, "search", "dns")?,
            options: self.str_list(d, "options", "dns")?,
        };
        Ok(Some(dns).filter(|d| !d.is_empty()))
    }

    fn legacy(&self, m: &Map<String, Value>) -> Result<CniResult, CniError> {
        let mut res = CniResult {
            dns: self.dns(m)?,
            ..CniResult::default()
        };
        // ip4's routes come first, then ip6's, as Go's 0.2 -> 0.3 conversion does.
        for key in ["ip4", "ip6"] {
            let Some(v) = field(m, key) else { continue };
            let ipc = self.object(v, key)?;
            res.ips.push(IpConfig {
                address: self.cidr(ipc, "ip", key)?,
                gateway: self.opt_ip(ipc, "gateway", key)?,
                interface: None,
            });
            res.routes.extend(self.routes(ipc, key)?);
        }
        Ok(res)
    }

    fn current(&self, m: &Map<String, Value>, fam: Family) -> Result<CniResult, CniError> {
        let mut interfaces = Vec::new();
        for (i, v) in self.array(m, "interfaces", "")?.iter().enumerate() {
            let path = format!("interfaces[{i}]");
            let o = self.object(v, &path)?;
            interfaces.push(Interface {
                name: self.opt_str(o, "name", &path)?.unwrap_or_default(),
                mac: self.opt_str(o, "mac", &path)?,
                mtu: self.opt_nonzero_u32(o, "mtu", &path)?,
                sandbox: self.opt_str(o, "sandbox", &path)?,
                socket_path: self.opt_str(o, "socketPath", &path)?,
                pci_id: self.opt_str(o, "pciID", &path)?,
            });
        }
        let mut ips = Vec::new();
        for (i, v) in self.array(m, "ips", "")?.iter().enumerate() {
            let path = format!("ips[{i}]");
            let o = self.object(v, &path)?;
            let address = self.cidr(o, "address", &path)?;
            if fam == Family::V04 {
                // Optional (Debian's loopback omits it) but must not contradict the address.
                if let Some(ver) = self.opt_str(o, "version", &path)? {
                    let actual = ip_version(&address);
                    if ver != actual {
                        return Err(self.err(
                            &join(&path, "version"),
                            format!("{ver:?} does not match address {address} (IPv{actual})"),
                        ));
                    }
                }
            }
            let interface = self.opt_u32(o, "interface", &path)?;
            // A dangling index would make a later plugin configure the wrong link.
            if let Some(idx) = interface {
                if usize::try_from(idx).map_or(true, |i| i >= interfaces.len()) {
                    return Err(self.err(
                        &join(&path, "interface"),
                        format!("index {idx} out of range ({} interfaces)", interfaces.len()),
                    ));
                }
            }
            ips.push(IpConfig {
                address,
                gateway: self.opt_ip(o, "gateway", &path)?,
                interface,
            });
        }
        Ok(CniResult {
            interfaces,
            ips,
            routes: self.routes(m, "")?,
            dns: self.dns(m)?,
        })
    }
}

/// "4" or "6" for an address or CIDR; IPv6 text always has a ':', IPv4 never does.
fn ip_version(addr: &str) -> &'static str {
    if addr.contains(':') {
        "6"
    } else {
        "4"
    }
}

/// What a target version may carry beyond the 0.3 basics.
#[derive(Clone, Copy)]
struct Shape {
    ip_version: bool,
    iface_extras: bool,
    route_extras: bool,
}

fn put_str(m: &mut Map<String, Value>, key: &str, v: Option<&String>) {
    if let Some(s) = v.filter(|s| !s.is_empty()) {
        m.insert(key.into(), Value::from(s.as_str()));
    }
}

fn put_nonzero(m: &mut Map<String, Value>, key: &str, v: Option<u32>) {
    if let Some(n) = v.filter(|&n| n != 0) {
        m.insert(key.into(), Value::from(n));
    }
}

fn put_list(m: &mut Map<String, Value>, key: &str, v: &[String]) {
    if !v.is_empty() {
        m.insert(key.into(), Value::from(v.to_vec()));
    }
}

fn route_json(r: &Route, extras: bool) -> Value {
    let mut m = Map::new();
    m.insert("dst".into(), Value::from(r.dst.as_str()));
    put_str(&mut m, "gw", r.gw.as_ref());
    if extras {
        put_nonzero(&mut m, "mtu", r.mtu);
        put_nonzero(&mut m, "advmss", r.advmss);
        put_nonzero(&mut m, "priority", r.priority);
        if let Some(t) = r.table {
            m.insert("table".into(), Value::from(t));
        }
        if let Some(s) = r.scope {
            m.insert("scope".into(), Value::from(s));
        }
    }
    Value::Object(m)
}

fn dns_json(dns: Option<&Dns>) -> Option<Value> {
    let d = dns.filter(|d| !d.is_empty())?;
    let mut m = Map::new();
    put_list(&mut m, "nameservers", &d.nameservers);
    put_str(&mut m, "domain", d.domain.as_ref());
    put_list(&mut m, "search", &d.search);
    put_list(&mut m, "options", &d.options);
    Some(Value::Object(m))
}

impl CniResult {
    /// Serialises the result as spec `version` (see the module docs for what each version
    /// keeps). The output's `cniVersion` is `version`, except that "" is written as 0.1.0.
    pub fn to_json(&self, version: &str) -> Result<Value, CniError> {
        let shape = match family(version)? {
            Family::Legacy => {
                return self.to_legacy(if version.is_empty() { "0.1.0" } else { version })
            }
            Family::V04 => Shape {
                ip_version: true,
                iface_extras: false,
                route_extras: true,
            },
            Family::V1 => Shape {
                ip_version: false,
                iface_extras: version != "1.0.0",
                route_extras: version != "1.0.0",
            },
        };
        let mut out = Map::new();
        out.insert("cniVersion".into(), Value::from(version));
        if !self.interfaces.is_empty() {
            let list = self.interfaces.iter().map(|i| {
                let mut m = Map::new();
                m.insert("name".into(), Value::from(i.name.as_str()));
                put_str(&mut m, "mac", i.mac.as_ref());
                if shape.iface_extras {
                    put_nonzero(&mut m, "mtu", i.mtu);
                }
                put_str(&mut m, "sandbox", i.sandbox.as_ref());
                if shape.iface_extras {
                    put_str(&mut m, "socketPath", i.socket_path.as_ref());
                    put_str(&mut m, "pciID", i.pci_id.as_ref());
                }
                Value::Object(m)
            });
            out.insert("interfaces".into(), list.collect());
        }
        if !self.ips.is_empty() {
            let list = self.ips.iter().map(|ip| {
                let mut m = Map::new();
                if shape.ip_version {
                    m.insert("version".into(), Value::from(ip_version(&ip.address)));
                }
                if let Some(idx) = ip.interface {
                    m.insert("interface".into(), Value::from(idx));
                }
                m.insert("address".into(), Value::from(ip.address.as_str()));
                put_str(&mut m, "gateway", ip.gateway.as_ref());
                Value::Object(m)
            });
            out.insert("ips".into(), list.collect());
        }
        if !self.routes.is_empty() {
            let list = self
                .routes
                .iter()
                .map(|r| route_json(r, shape.route_extras));
            out.insert("routes".into(), list.collect());
        }
        if let Some(dns) = dns_json(self.dns.as_ref()) {
            out.insert("dns".into(), dns);
        }
        Ok(Value::Object(out))
    }

    /// Go's `convertTo02x`: one address per family, routes filed by `dst` family.
    fn to_legacy(&self, version: &str) -> Result<Value, CniError> {
        let first = |fam: &str| self.ips.iter().find(|ip| ip_version(&ip.address) == fam);
        let mut out = Map::new();
        out.insert("cniVersion".into(), Value::from(version));
        let mut any = false;
        for (key, fam) in [("ip4", "4"), ("ip6", "6")] {
            let Some(ip) = first(fam) else { continue };
            any = true;
            let mut m = Map::new();
            m.insert("ip".into(), Value::from(ip.address.as_str()));
            put_str(&mut m, "gateway", ip.gateway.as_ref());
            let routes: Vec<Value> = self
                .routes
                .iter()
                .filter(|r| ip_version(&r.dst) == fam)
                .map(|r| route_json(r, false))
                .collect();
            if !routes.is_empty() {
                m.insert("routes".into(), Value::Array(routes));
            }
            out.insert(key.into(), Value::Object(m));
        }
        if !any {
            // Go returns a plain error here, which its skel reports as code 999.
            return Err(CniError::new(
                ErrorCode::Internal,
                "cannot convert: no valid IP addresses",
            ));
        }
        if let Some(dns) = dns_json(self.dns.as_ref()) {
            out.insert("dns".into(), dns);
        }
        Ok(Value::Object(out))
    }
}

/// Go's `json.MarshalIndent(v, "", "    ")`: 4-space indent, no trailing newline, and
/// Go's HTML-safe escaping of `<`, `>`, `&`, U+2028 and U+2029.
pub fn to_string_pretty(value: &Value) -> String {
    let mut buf = Vec::new();
    let mut ser = Serializer::with_formatter(&mut buf, PrettyFormatter::with_indent(b"    "));
    if value.serialize(&mut ser).is_err() {
        // Serialising a Value into memory cannot fail; keep a sane fallback anyway.
        return go_escape(&value.to_string());
    }
    go_escape(&String::from_utf8_lossy(&buf))
}

/// Go's HTML-safe string escapes for serialised JSON: the thin client's,
/// so that both print errors byte for byte alike.
pub(crate) use wasm_cni_client::go_escape;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    /// Compares serialised forms: preserve_order maps compare equal regardless of order,
    /// but key order is part of what we promise.
    #[track_caller]
    fn assert_json(actual: &Value, expected: &str) {
        assert_eq!(actual.to_string(), v(expected).to_string());
    }

    const DNS: &str = r#"{"nameservers":["10.1.2.1","2001:db8::1"],"domain":"example.com","search":["example.com","svc.local"],"options":["ndots:2"]}"#;

    fn r020() -> String {
        format!(
            r#"{{"cniVersion":"0.2.0",
            "ip4":{{"ip":"10.1.2.3/24","gateway":"10.1.2.1","routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}},{{"dst":"192.168.0.0/16"}}]}},
            "ip6":{{"ip":"2001:db8::3/64","gateway":"2001:db8::1","routes":[{{"dst":"::/0","gw":"2001:db8::1"}}]}},
            "dns":{DNS}}}"#
        )
    }

    const IFACES_BASIC: &str = r#"[{"name":"cni0","mac":"0a:58:0a:01:02:01"},{"name":"veth1234","mac":"c6:0c:3b:5d:aa:01"},{"name":"eth0","mac":"0a:58:0a:01:02:03","sandbox":"/var/run/netns/ns1"}]"#;

    fn r040(ver: &str) -> String {
        format!(
            r#"{{"cniVersion":"{ver}","interfaces":{IFACES_BASIC},
            "ips":[{{"version":"4","interface":2,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},{{"version":"6","interface":2,"address":"2001:db8::3/64","gateway":"2001:db8::1"}}],
            "routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}},{{"dst":"::/0","gw":"2001:db8::1"}}],
            "dns":{DNS}}}"#
        )
    }

    fn r100(ver: &str) -> String {
        format!(
            r#"{{"cniVersion":"{ver}","interfaces":{IFACES_BASIC},
            "ips":[{{"interface":2,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},{{"interface":2,"address":"2001:db8::3/64","gateway":"2001:db8::1"}}],
            "routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}},{{"dst":"::/0","gw":"2001:db8::1"}}],
            "dns":{DNS}}}"#
        )
    }

    /// 0.2.0 rendering of both the 0.4.0 and 1.0.0 fixtures.
    fn r040_as_020() -> String {
        format!(
            r#"{{"cniVersion":"0.2.0",
            "ip4":{{"ip":"10.1.2.3/24","gateway":"10.1.2.1","routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}}]}},
            "ip6":{{"ip":"2001:db8::3/64","gateway":"2001:db8::1","routes":[{{"dst":"::/0","gw":"2001:db8::1"}}]}},
            "dns":{DNS}}}"#
        )
    }

    const R110: &str = r#"{"cniVersion":"1.1.0",
        "interfaces":[
            {"name":"br0","mac":"0a:58:0a:01:02:01","mtu":9000},
            {"name":"eth0","mac":"0a:58:0a:01:02:03","mtu":1400,"sandbox":"/var/run/netns/ns1","socketPath":"/run/vhost/sock0","pciID":"0000:00:1f.6"}],
        "ips":[
            {"interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"},
            {"interface":1,"address":"10.9.9.9/32"},
            {"interface":1,"address":"2001:db8::3/64"}],
        "routes":[
            {"dst":"0.0.0.0/0","gw":"10.1.2.1","mtu":1400,"advmss":1360,"priority":100,"table":0,"scope":0},
            {"dst":"2001:db8:1::/48","table":200,"scope":253}],
        "dns":{"nameservers":["10.1.2.1"]}}"#;

    fn r110_as_04x(ver: &str) -> String {
        format!(
            r#"{{"cniVersion":"{ver}",
            "interfaces":[{{"name":"br0","mac":"0a:58:0a:01:02:01"}},{{"name":"eth0","mac":"0a:58:0a:01:02:03","sandbox":"/var/run/netns/ns1"}}],
            "ips":[
                {{"version":"4","interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},
                {{"version":"4","interface":1,"address":"10.9.9.9/32"}},
                {{"version":"6","interface":1,"address":"2001:db8::3/64"}}],
            "routes":[
                {{"dst":"0.0.0.0/0","gw":"10.1.2.1","mtu":1400,"advmss":1360,"priority":100,"table":0,"scope":0}},
                {{"dst":"2001:db8:1::/48","table":200,"scope":253}}],
            "dns":{{"nameservers":["10.1.2.1"]}}}}"#
        )
    }

    const R110_AS_100: &str = r#"{"cniVersion":"1.0.0",
        "interfaces":[{"name":"br0","mac":"0a:58:0a:01:02:01"},{"name":"eth0","mac":"0a:58:0a:01:02:03","sandbox":"/var/run/netns/ns1"}],
        "ips":[
            {"interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"},
            {"interface":1,"address":"10.9.9.9/32"},
            {"interface":1,"address":"2001:db8::3/64"}],
        "routes":[{"dst":"0.0.0.0/0","gw":"10.1.2.1"},{"dst":"2001:db8:1::/48"}],
        "dns":{"nameservers":["10.1.2.1"]}}"#;

    const R110_AS_020: &str = r#"{"cniVersion":"0.2.0",
        "ip4":{"ip":"10.1.2.3/24","gateway":"10.1.2.1","routes":[{"dst":"0.0.0.0/0","gw":"10.1.2.1"}]},
        "ip6":{"ip":"2001:db8::3/64","routes":[{"dst":"2001:db8:1::/48"}]},
        "dns":{"nameservers":["10.1.2.1"]}}"#;

    fn convert(src: &str, to: &str) -> Value {
        parse(&v(src), "1.1.0").unwrap().to_json(to).unwrap()
    }

    #[test]
    fn from_020_to_every_version() {
        let src = r020();
        assert_json(&convert(&src, "0.2.0"), &src);
        assert_json(&convert(&src, "0.1.0"), &src.replace("0.2.0", "0.1.0"));
        // A target of "" means 0.1.0.
        assert_json(&convert(&src, ""), &src.replace("0.2.0", "0.1.0"));
        // ip4 then ip6, routes ip4's then ip6's, no interfaces.
        let ips_04 = r#""ips":[{"version":"4","address":"10.1.2.3/24","gateway":"10.1.2.1"},{"version":"6","address":"2001:db8::3/64","gateway":"2001:db8::1"}]"#;
        let ips_1 = r#""ips":[{"address":"10.1.2.3/24","gateway":"10.1.2.1"},{"address":"2001:db8::3/64","gateway":"2001:db8::1"}]"#;
        let routes = r#""routes":[{"dst":"0.0.0.0/0","gw":"10.1.2.1"},{"dst":"192.168.0.0/16"},{"dst":"::/0","gw":"2001:db8::1"}]"#;
        for ver in ["0.3.0", "0.3.1", "0.4.0"] {
            let want = format!(r#"{{"cniVersion":"{ver}",{ips_04},{routes},"dns":{DNS}}}"#);
            assert_json(&convert(&src, ver), &want);
        }
        for ver in ["1.0.0", "1.1.0"] {
            let want = format!(r#"{{"cniVersion":"{ver}",{ips_1},{routes},"dns":{DNS}}}"#);
            assert_json(&convert(&src, ver), &want);
        }
    }

    #[test]
    fn from_040_to_every_version() {
        let src = r040("0.4.0");
        assert_json(&convert(&src, "0.2.0"), &r040_as_020());
        for ver in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_json(&convert(&src, ver), &r040(ver));
        }
        for ver in ["1.0.0", "1.1.0"] {
            assert_json(&convert(&src, ver), &r100(ver));
        }
    }

    #[test]
    fn from_100_to_every_version() {
        let src = r100("1.0.0");
        assert_json(&convert(&src, "0.2.0"), &r040_as_020());
        for ver in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_json(&convert(&src, ver), &r040(ver));
        }
        for ver in ["1.0.0", "1.1.0"] {
            assert_json(&convert(&src, ver), &r100(ver));
        }
    }

    #[test]
    fn from_110_to_every_version() {
        assert_json(&convert(R110, "1.1.0"), R110);
        assert_json(&convert(R110, "1.0.0"), R110_AS_100);
        for ver in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_json(&convert(R110, ver), &r110_as_04x(ver));
        }
        // Only the first address of each family survives; route extras are lost.
        assert_json(&convert(R110, "0.2.0"), R110_AS_020);
    }

    #[test]
    fn round_trips_keep_the_model() {
        let cases = [
            (r020(), "0.2.0"),
            (r040("0.3.1"), "0.3.1"),
            (r040("0.4.0"), "0.4.0"),
            (r100("1.0.0"), "1.0.0"),
            (R110.to_string(), "1.1.0"),
        ];
        for (src, ver) in cases {
            let model = parse(&v(&src), "").unwrap();
            let again = parse(&model.to_json(ver).unwrap(), "").unwrap();
            assert_eq!(model, again, "{ver}");
        }
        // 1.1 -> 0.4 -> 1.1 loses only the interface extras.
        let full = parse(&v(R110), "").unwrap();
        let back = parse(&full.to_json("0.4.0").unwrap(), "").unwrap();
        let mut expected = full.clone();
        for i in &mut expected.interfaces {
            i.mtu = None;
            i.socket_path = None;
            i.pci_id = None;
        }
        assert_eq!(back, expected);
    }

    #[test]
    fn model_from_110_fixture() {
        let r = parse(&v(R110), "").unwrap();
        assert_eq!(
            r.interfaces[1],
            Interface {
                name: "eth0".into(),
                mac: Some("0a:58:0a:01:02:03".into()),
                mtu: Some(1400),
                sandbox: Some("/var/run/netns/ns1".into()),
                socket_path: Some("/run/vhost/sock0".into()),
                pci_id: Some("0000:00:1f.6".into()),
            }
        );
        assert_eq!(
            r.routes[0],
            Route {
                dst: "0.0.0.0/0".into(),
                gw: Some("10.1.2.1".into()),
                mtu: Some(1400),
                advmss: Some(1360),
                priority: Some(100),
                table: Some(0),
                scope: Some(0),
            }
        );
        assert_eq!(r.ips[2].interface, Some(1));
        assert_eq!(r.dns.unwrap().nameservers, vec!["10.1.2.1".to_string()]);
    }

    #[test]
    fn no_ip_cannot_go_below_030() {
        let r = CniResult {
            interfaces: vec![Interface {
                name: "eth0".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        for ver in ["0.1.0", "0.2.0"] {
            let e = r.to_json(ver).unwrap_err();
            assert_eq!(e.msg, "cannot convert: no valid IP addresses");
            assert_eq!(e.code, 999);
        }
        assert_json(
            &r.to_json("0.3.0").unwrap(),
            r#"{"cniVersion":"0.3.0","interfaces":[{"name":"eth0"}]}"#,
        );
    }

    #[test]
    fn legacy_with_only_ipv6_and_unrouted_family() {
        let r = parse(
            &v(r#"{"cniVersion":"1.0.0","ips":[{"address":"fd00::5/64"}],"routes":[{"dst":"10.0.0.0/8"},{"dst":"fd01::/64","gw":"fd00::1"}]}"#),
            "",
        )
        .unwrap();
        // The IPv4 route is dropped: there is no ip4 to hang it on.
        assert_json(
            &r.to_json("0.2.0").unwrap(),
            r#"{"cniVersion":"0.2.0","ip6":{"ip":"fd00::5/64","routes":[{"dst":"fd01::/64","gw":"fd00::1"}]}}"#,
        );
        // And the other way round: an ip4 with no IPv4 routes gets no "routes" key.
        let r = parse(
            &v(r#"{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/8"}],"routes":[{"dst":"fd01::/64"}]}"#),
            "",
        )
        .unwrap();
        assert_json(
            &r.to_json("0.2.0").unwrap(),
            r#"{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.5/8"}}"#,
        );
    }

    #[test]
    fn empty_result_and_empty_dns_are_omitted() {
        let r = parse(&v(r#"{"cniVersion":"1.0.0","dns":{}}"#), "").unwrap();
        assert_eq!(r, CniResult::default());
        assert_json(&r.to_json("1.1.0").unwrap(), r#"{"cniVersion":"1.1.0"}"#);
        let r = CniResult {
            dns: Some(Dns::default()),
            routes: vec![],
            ..Default::default()
        };
        assert_json(&r.to_json("1.0.0").unwrap(), r#"{"cniVersion":"1.0.0"}"#);
    }

    #[test]
    fn zero_ints_are_unset_but_table_scope_zero_kept() {
        let r = parse(
            &v(r#"{"cniVersion":"1.1.0","interfaces":[{"name":"a","mtu":0}],"routes":[{"dst":"10.0.0.0/8","mtu":0,"advmss":0,"priority":0,"table":0,"scope":0}]}"#),
            "",
        )
        .unwrap();
        assert_eq!(r.interfaces[0].mtu, None);
        assert_json(
            &r.to_json("1.1.0").unwrap(),
            r#"{"cniVersion":"1.1.0","interfaces":[{"name":"a"}],"routes":[{"dst":"10.0.0.0/8","table":0,"scope":0}]}"#,
        );
    }

    #[test]
    fn missing_or_null_version_uses_default() {
        let body = r#""ips":[{"address":"10.0.0.2/24"}]"#;
        let r = parse(&v(&format!("{{{body}}}")), "1.0.0").unwrap();
        assert_eq!(r.ips[0].address, "10.0.0.2/24");
        let r2 = parse(&v(&format!(r#"{{"cniVersion":null,{body}}}"#)), "1.0.0").unwrap();
        assert_eq!(r, r2);
        // With a 0.2.0 default the same object is read as legacy: no ip4, nothing found.
        let r = parse(&v(&format!("{{{body}}}")), "0.2.0").unwrap();
        assert!(r.ips.is_empty());
        // An IPAM-style legacy result without cniVersion.
        let r = parse(&v(r#"{"ip4":{"ip":"10.0.0.2/24"}}"#), "").unwrap();
        assert_eq!(r.ips[0].address, "10.0.0.2/24");
    }

    #[test]
    fn tolerates_missing_ip_version_in_04x() {
        let r = parse(
            &v(r#"{"cniVersion":"0.3.1","interfaces":[{"name":"lo","sandbox":"/n"}],"ips":[{"interface":0,"address":"127.0.0.1/8"},{"interface":0,"address":"::1/128"}]}"#),
            "",
        )
        .unwrap();
        assert_json(
            &r.to_json("0.3.1").unwrap(),
            r#"{"cniVersion":"0.3.1","interfaces":[{"name":"lo","sandbox":"/n"}],"ips":[{"version":"4","interface":0,"address":"127.0.0.1/8"},{"version":"6","interface":0,"address":"::1/128"}]}"#,
        );
    }

    #[test]
    fn addresses_are_canonicalised() {
        let r = parse(
            &v(r#"{"cniVersion":"1.0.0","ips":[{"address":"2001:DB8:0:0::0003/64","gateway":"2001:0db8::1"}],"routes":[{"dst":"0:0::0/0"}]}"#),
            "",
        )
        .unwrap();
        assert_eq!(r.ips[0].address, "2001:db8::3/64");
        assert_eq!(r.ips[0].gateway.as_deref(), Some("2001:db8::1"));
        assert_eq!(r.routes[0].dst, "::/0");
    }

    #[track_caller]
    fn parse_err(src: &str) -> CniError {
        parse(&v(src), "1.1.0").unwrap_err()
    }

    #[test]
    fn wrong_types_are_code_6_naming_the_field() {
        let cases = [
            (r#"[]"#, "result: expected an object"),
            (r#"{"cniVersion":1}"#, "cniVersion: expected a string"),
            (r#"{"interfaces":{}}"#, "interfaces: expected an array"),
            (
                r#"{"interfaces":[{"name":5}]}"#,
                "interfaces[0].name: expected a string",
            ),
            (
                r#"{"interfaces":[{"name":"a","mtu":"9000"}]}"#,
                "interfaces[0].mtu: expected a non-negative integer",
            ),
            (
                r#"{"interfaces":[{"name":"a","mtu":-1}]}"#,
                "interfaces[0].mtu: expected a non-negative integer",
            ),
            (
                r#"{"ips":[{"address":5}]}"#,
                "ips[0].address: expected a string",
            ),
            (r#"{"ips":[{}]}"#, "ips[0].address: missing"),
            (
                r#"{"ips":[{"address":"10.0.0.1"}]}"#,
                "ips[0].address: \"10.0.0.1\" is not an address in CIDR notation",
            ),
            (r#"{"ips":[{"address":"10.0.0.1/33"}]}"#, "ips[0].address"),
            (r#"{"ips":[{"address":"10.0.0.1/+8"}]}"#, "ips[0].address"),
            (
                r#"{"ips":[{"address":"fe80::1%eth0/64"}]}"#,
                "ips[0].address",
            ),
            (
                r#"{"ips":[{"address":"10.0.0.1/8","gateway":"10.0.0"}]}"#,
                "ips[0].gateway: \"10.0.0\" is not an IP address",
            ),
            (
                r#"{"ips":[{"address":"10.0.0.1/8","interface":0}]}"#,
                "ips[0].interface: index 0 out of range (0 interfaces)",
            ),
            (
                r#"{"ips":[{"address":"10.0.0.1/8","interface":1.5}]}"#,
                "ips[0].interface: expected a non-negative integer",
            ),
            (
                r#"{"routes":[{"dst":"10.0.0.0/8","gw":1}]}"#,
                "routes[0].gw: expected a string",
            ),
            (
                r#"{"routes":[{"gw":"10.0.0.1"}]}"#,
                "routes[0].dst: missing",
            ),
            (
                r#"{"routes":[{"dst":"10.0.0.0/8","scope":256}]}"#,
                "routes[0].scope: 256 is out of range",
            ),
            (
                r#"{"routes":[{"dst":"10.0.0.0/8","table":4294967296}]}"#,
                "routes[0].table: 4294967296 is out of range",
            ),
            (
                r#"{"routes":"x"}"#,
                "routes: expected an array, found string",
            ),
            (r#"{"dns":[]}"#, "dns: expected an object"),
            (
                r#"{"dns":{"search":[1]}}"#,
                "dns.search[0]: expected a string",
            ),
            (
                r#"{"cniVersion":"0.2.0","ip4":"10.0.0.1/8"}"#,
                "ip4: expected an object",
            ),
            (
                r#"{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.1/8","routes":[{"dst":1}]}}"#,
                "ip4.routes[0].dst: expected a string",
            ),
        ];
        for (src, needle) in cases {
            let e = parse_err(src);
            assert_eq!(e.code, 6, "{src}: {e}");
            assert!(
                e.msg.contains(needle),
                "{src}: {:?} lacks {needle:?}",
                e.msg
            );
        }
    }

    #[test]
    fn ip_version_must_match_address_in_04x() {
        let e =
            parse_err(r#"{"cniVersion":"0.4.0","ips":[{"version":"6","address":"10.0.0.1/8"}]}"#);
        assert_eq!(e.code, 6);
        assert!(e.msg.contains("ips[0].version"), "{}", e.msg);
        let e = parse_err(r#"{"cniVersion":"0.4.0","ips":[{"version":4,"address":"10.0.0.1/8"}]}"#);
        assert!(
            e.msg.contains("ips[0].version: expected a string"),
            "{}",
            e.msg
        );
        // 1.x has no version field; Go ignores it and so do we.
        assert!(parse(
            &v(r#"{"cniVersion":"1.0.0","ips":[{"version":"6","address":"10.0.0.1/8"}]}"#),
            ""
        )
        .is_ok());
    }

    #[test]
    fn unknown_versions_are_code_1() {
        let e = parse_err(r#"{"cniVersion":"9.9.9"}"#);
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("9.9.9"));
        let e = CniResult::default().to_json("1.2.0").unwrap_err();
        assert_eq!(e.code, 1);
    }

    #[test]
    fn parse_prev_cases() {
        let cfg = |s: &str| v(s).as_object().unwrap().clone();
        assert_eq!(parse_prev(&cfg(r#"{"name":"n"}"#), "1.0.0").unwrap(), None);
        assert_eq!(
            parse_prev(&cfg(r#"{"prevResult":null}"#), "1.0.0").unwrap(),
            None
        );
        // No cniVersion inside: the config's version decides the schema.
        let r = parse_prev(
            &cfg(r#"{"prevResult":{"ip4":{"ip":"10.0.0.2/8"}}}"#),
            "0.2.0",
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.ips[0].address, "10.0.0.2/8");
        let r = parse_prev(&cfg(r#"{"prevResult":{}}"#), "1.0.0")
            .unwrap()
            .unwrap();
        assert_eq!(r, CniResult::default());
        let e = parse_prev(&cfg(r#"{"prevResult":"x"}"#), "1.0.0").unwrap_err();
        assert_eq!(e.code, 6);
        assert!(e.msg.starts_with("invalid prevResult"), "{}", e.msg);
        let e =
            parse_prev(&cfg(r#"{"prevResult":{"ips":[{"address":"x"}]}}"#), "1.0.0").unwrap_err();
        assert!(e.msg.contains("prevResult: ips[0].address"), "{}", e.msg);
    }

    #[test]
    fn pretty_print_is_go_style() {
        let val = json!({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/8"}],"routes":[],"dns":{},"note":"<a&b>\u{2028}"});
        assert_eq!(
            to_string_pretty(&val),
            "{\n    \"cniVersion\": \"1.0.0\",\n    \"ips\": [\n        {\n            \"address\": \"10.0.0.2/8\"\n        }\n    ],\n    \"routes\": [],\n    \"dns\": {},\n    \"note\": \"\\u003ca\\u0026b\\u003e\\u2028\"\n}"
        );
        // Escaping keeps it valid JSON with the same value.
        let back: Value = serde_json::from_str(&to_string_pretty(&val)).unwrap();
        assert_eq!(back, val);
    }
}
