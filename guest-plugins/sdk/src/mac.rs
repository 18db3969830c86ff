//! MAC address validation and the per-plugin MAC source priority.

use crate::args::CniArgs;
use crate::config::NetConf;
use crate::error::CniError;

/// Parses a 6-byte MAC (`:` or `-` separated, any case) into the canonical
/// lowercase, colon-separated form the kernel reports.
pub fn normalize(mac: &str) -> Option<String> {
    let parts: Vec<&str> = if mac.contains(':') {
        mac.split(':').collect()
    } else {
        mac.split('-').collect()
    };
    if parts.len() != 6 {
        return None;
    }
    let mut bytes = Vec::with_capacity(6);
    for part in parts {
        if part.len() != 2 {
            return None;
        }
        bytes.push(u8::from_str_radix(part, 16).ok()?);
    }
    Some(
        bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
    )
}

/// Whether two MACs are the same address (case and separator insensitive).
pub fn same(a: &str, b: &str) -> bool {
    match (normalize(a), normalize(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// Where a requested MAC came from, for the error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MacSource {
    /// The plugin's own config key `mac`.
    Config,
    /// CNI_ARGS `MAC=`.
    CniArgs,
    /// `args.cni.mac`.
    ArgsCni,
    /// `runtimeConfig.mac` (capability `mac`).
    RuntimeConfig,
}

impl MacSource {
    fn describe(self) -> &'static str {
        match self {
            Self::Config => "mac",
            Self::CniArgs => "CNI_ARGS MAC",
            Self::ArgsCni => "args.cni.mac",
            Self::RuntimeConfig => "runtimeConfig.mac",
        }
    }
}

/// Picks the MAC from `candidates`, given in increasing priority (the last
/// non-empty one wins, as in the reference plugins), and validates it.
/// Bridge: `[CniArgs, ArgsCni, RuntimeConfig]`; macvlan: `[Config, CniArgs,
/// RuntimeConfig]`; tuning: `[Config, CniArgs, RuntimeConfig, ArgsCni]`.
/// An invalid MAC is code 7.
pub fn select(candidates: &[(MacSource, Option<&str>)]) -> Result<Option<String>, CniError> {
    let Some((source, mac)) = candidates
        .iter()
        .rev()
        .find_map(|(s, m)| m.filter(|m| !m.is_empty()).map(|m| (*s, m)))
    else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        CniError::invalid_config(format!(
            "invalid MAC address {mac:?} (from {}){why}",
            source.describe()
        ))
    };
    let normalized = normalize(mac).ok_or_else(|| invalid(""))?;
    // No Ethernet device accepts these (and the host refuses them).
    if normalized == "00:00:00:00:00:00" {
        return Err(invalid(": all zero"));
    }
    if normalized
        .get(..2)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .is_some_and(|first| first & 1 == 1)
    {
        return Err(invalid(": multicast"));
    }
    Ok(Some(normalized))
}

/// The container MAC of the plugins that create one link from their own
/// config (macvlan, macvtap, tap): CNI_ARGS may carry only `MAC` (the
/// reference `MacEnvArgs`: anything else is code 4 unless `IgnoreUnknown`),
/// and the priority is the config's `mac` < CNI_ARGS `MAC` <
/// `runtimeConfig.mac` (see [`select`]).
pub fn requested(
    config_mac: Option<&str>,
    args: &[(String, String)],
    net: &NetConf,
) -> Result<Option<String>, CniError> {
    let cni_args = CniArgs::parse(args, &["MAC"])?;
    select(&[
        (MacSource::Config, config_mac),
        (MacSource::CniArgs, cni_args.mac()),
        (MacSource::RuntimeConfig, net.runtime_mac()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(
            normalize("0A-1b-2C-3d-4E-5f").as_deref(),
            Some("0a:1b:2c:3d:4e:5f")
        );
        assert_eq!(
            normalize("c2:2a:77:bb:6e:d2").as_deref(),
            Some("c2:2a:77:bb:6e:d2")
        );
        for bad in [
            "",
            "c2:2a:77:bb:6e",
            "c2:2a:77:bb:6e:d2:00",
            "c2:2a:77:bb:6e:zz",
            "c22a77bb6ed2",
            "c2:2a:77:bb:6e:d",
        ] {
            assert!(normalize(bad).is_none(), "{bad}");
        }
        assert!(same("C2:2A:77:BB:6E:D2", "c2-2a-77-bb-6e-d2"));
    }

    #[test]
    fn later_sources_win_and_empty_is_unset() {
        let picked = select(&[
            (MacSource::CniArgs, Some("02:00:00:00:00:01")),
            (MacSource::ArgsCni, Some("02:00:00:00:00:02")),
            (MacSource::RuntimeConfig, Some("")),
        ])
        .unwrap();
        assert_eq!(picked.as_deref(), Some("02:00:00:00:00:02"));
        assert_eq!(select(&[(MacSource::Config, None)]).unwrap(), None);
        let e = select(&[(MacSource::RuntimeConfig, Some("nope"))]).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("runtimeConfig.mac"), "{}", e.msg);
        let e = select(&[(MacSource::Config, Some("01:00:5e:00:00:01"))]).unwrap_err();
        assert!(e.msg.ends_with(": multicast"), "{}", e.msg);
        assert!(select(&[(MacSource::Config, Some("00:00:00:00:00:00"))]).is_err());
        assert_eq!(
            select(&[(MacSource::Config, Some("C2:11:22:33:44:55"))])
                .unwrap()
                .as_deref(),
            Some("c2:11:22:33:44:55")
        );
    }

    #[test]
    fn requested_takes_config_then_cni_args_then_runtime_config() {
        let args = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let net: NetConf = crate::config::from_str(r#"{"name":"n"}"#).unwrap();
        let with_runtime: NetConf =
            crate::config::from_str(r#"{"runtimeConfig":{"mac":"02:00:00:00:00:03"}}"#).unwrap();
        let config = Some("02:00:00:00:00:01");
        let mac_arg = args(&[("MAC", "02:00:00:00:00:02")]);
        assert_eq!(
            requested(config, &[], &net).unwrap().as_deref(),
            Some("02:00:00:00:00:01")
        );
        assert_eq!(
            requested(config, &mac_arg, &net).unwrap().as_deref(),
            Some("02:00:00:00:00:02")
        );
        assert_eq!(
            requested(config, &mac_arg, &with_runtime)
                .unwrap()
                .as_deref(),
            Some("02:00:00:00:00:03")
        );
        assert_eq!(requested(None, &[], &net).unwrap(), None);
        let e = requested(None, &args(&[("IP", "10.0.0.2")]), &net).unwrap_err();
        assert_eq!(e.code, 4);
        let ignored = args(&[("IP", "10.0.0.2"), ("IgnoreUnknown", "1")]);
        assert_eq!(requested(None, &ignored, &net).unwrap(), None);
        let e = requested(None, &args(&[("MAC", "nope")]), &net).unwrap_err();
        assert_eq!(e.msg, r#"invalid MAC address "nope" (from CNI_ARGS MAC)"#);
    }
}
