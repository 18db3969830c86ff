//! CNI_ARGS (`K1=V1;K2=V2`, already split into pairs by the host), read the
//! way Go's `types.LoadArgs` does: keys are matched exactly against the
//! plugin's known fields, and an unknown key is an error unless
//! `IgnoreUnknown` is true.

use crate::error::CniError;

/// The CNI_ARGS keys a plugin accepts, after validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

/// Parses a Go `UnmarshallableBool`: `1`/`true`/`0`/`false`, any case.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

impl CniArgs {
    /// Validates `pairs` against `known` (besides `IgnoreUnknown`, which is
    /// always accepted). Errors are code 4 (invalid environment), with the
    /// Go message `ARGS: unknown args ["K=V"]`.
    pub fn parse(pairs: &[(String, String)], known: &[&str]) -> Result<Self, CniError> {
        let mut ignore_unknown = false;
        for (key, value) in pairs {
            if key == "IgnoreUnknown" {
                ignore_unknown = parse_bool(value).ok_or_else(|| {
                    CniError::invalid_environment(format!(
                        "ARGS: boolean unmarshal error: invalid input {value}"
                    ))
                })?;
            }
        }
        let unknown: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
            .collect();
        if !unknown.is_empty() && !ignore_unknown {
            return Err(CniError::invalid_environment(format!(
                "ARGS: unknown args [{}]",
                unknown.join(" ")
            )));
        }
        Ok(Self {
            pairs: pairs
                .iter()
                .filter(|(k, _)| known.contains(&k.as_str()))
                .cloned()
                .collect(),
        })
    }

    /// The last non-empty value of `key` (Go keeps the last assignment; an
    /// empty value counts as unset).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// CNI_ARGS `MAC`.
    pub fn mac(&self) -> Option<&str> {
        self.get("MAC")
    }

    /// CNI_ARGS `IP` (static, host-local): may be a comma-separated list.
    pub fn ip(&self) -> Option<&str> {
        self.get("IP")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_keys_fail_unless_ignored() {
        let e = CniArgs::parse(&pairs(&[("FOO", "bar")]), &["MAC"]).unwrap_err();
        assert_eq!(e.code, 4);
        assert_eq!(e.msg, r#"ARGS: unknown args ["FOO=bar"]"#);
        let a = CniArgs::parse(
            &pairs(&[
                ("IgnoreUnknown", "TRUE"),
                ("K8S_POD_NAME", "p"),
                ("MAC", "02:00:00:00:00:01"),
            ]),
            &["MAC"],
        )
        .unwrap();
        assert_eq!(a.mac(), Some("02:00:00:00:00:01"));
        assert_eq!(a.get("K8S_POD_NAME"), None);
    }

    #[test]
    fn ignore_unknown_must_be_a_bool() {
        let e = CniArgs::parse(&pairs(&[("IgnoreUnknown", "yes")]), &[]).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("invalid input yes"), "{}", e.msg);
        let e = CniArgs::parse(&pairs(&[("IgnoreUnknown", "0"), ("X", "1")]), &[]).unwrap_err();
        assert!(e.msg.contains("unknown args"));
    }

    #[test]
    fn last_non_empty_value_wins() {
        let a = CniArgs::parse(
            &pairs(&[("IP", "10.0.0.1/24"), ("IP", "10.0.0.2/24"), ("IP", "")]),
            &["IP"],
        )
        .unwrap();
        assert_eq!(a.ip(), Some("10.0.0.2/24"));
        assert_eq!(a.mac(), None);
    }
}
