//! CNI spec versions: parsing, comparison, libcni's selection rule and the VERSION reply.

use std::fmt;
use std::str::FromStr;

use serde_json::{json, Value};

use super::error::{CniError, ErrorCode};

/// Spec versions this host accepts in a config and can emit results for. 0.1.0/0.2.0 are
/// missing on purpose: they predate CHECK and chaining; results in that format are still
/// readable (see `result::parse`).
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest spec version implemented (libcni's `version.Current()`).
pub const CURRENT: &str = "1.1.0";

const CURRENT_VERSION: Version = Version::new(1, 1, 0);
const CHECK_MIN: Version = Version::new(0, 4, 0);
const GC_STATUS_MIN: Version = Version::new(1, 1, 0);

/// A `major.minor.patch` triple, ordered numerically (so 0.10.0 > 0.4.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Version {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Go's `version.ParseVersion`: "" means 0.1.0, missing parts are 0, more than three
    /// parts is an error. Failures use code 1 (incompatible version): Go's skel reports an
    /// unreadable config `cniVersion` as code 1 too (it matches no supported version), so a
    /// bad version string gets the same code wherever it is found.
    pub fn parse(s: &str) -> Result<Version, CniError> {
        if s.is_empty() {
            return Ok(Version::new(0, 1, 0));
        }
        let invalid = |why: String| {
            CniError::new(
                ErrorCode::IncompatibleVersion,
                format!("invalid version {s:?}: {why}"),
            )
        };
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(invalid("too many parts".into()));
        }
        let mut nums = [0u64; 3];
        for (slot, part) in nums.iter_mut().zip(&parts) {
            // Digits only: u64::from_str would also take a leading '+'.
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(format!("{part:?} is not a number")));
            }
            *slot = part
                .parse()
                .map_err(|_| invalid(format!("{part:?} is out of range")))?;
        }
        Ok(Version::new(nums[0], nums[1], nums[2]))
    }
}

impl FromStr for Version {
    type Err = CniError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quote_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Picks the config version the way libcni does (spec 1.1 `cniVersions`), then requires
/// it to be one this host speaks.
///
/// With `cniVersions`: every entry plus a non-empty `cniVersion` is parsed (any failure is
/// an error), entries newer than [`CURRENT`] are discarded and the highest remaining one
/// wins; if none remains `cniVersion` is kept as given. Without `cniVersions`,
/// `cniVersion` is used as-is. The winner must match [`SUPPORTED`] exactly, as in Go's
/// skel, else code 1.
pub fn select(
    cni_version: Option<&str>,
    cni_versions: Option<&[String]>,
) -> Result<String, CniError> {
    let declared = cni_version.unwrap_or("");
    let mut chosen = declared;
    if let Some(list) = cni_versions {
        let extra = Some(declared).filter(|v| !v.is_empty());
        let mut best: Option<(Version, bool, &str)> = None;
        for v in list.iter().map(String::as_str).chain(extra) {
            let parsed = Version::parse(v).map_err(|e| {
                CniError::new(
                    ErrorCode::IncompatibleVersion,
                    format!("invalid cniVersions entry {v:?}"),
                )
                .with_details(e.msg)
            })?;
            if parsed > CURRENT_VERSION {
                continue;
            }
            // On a numeric tie ("1.1" vs "1.1.0") prefer the spelling we support.
            let key = (parsed, SUPPORTED.contains(&v), v);
            if best.is_none_or(|b| (b.0, b.1) < (key.0, key.1)) {
                best = Some(key);
            }
        }
        if let Some((_, _, v)) = best {
            chosen = v;
        }
    }
    if !SUPPORTED.contains(&chosen) {
        return Err(
            CniError::new(ErrorCode::IncompatibleVersion, "incompatible CNI versions")
                .with_details(format!(
                    "config is {chosen:?}, plugin supports {}",
                    go_quote_list(SUPPORTED)
                )),
        );
    }
    Ok(chosen.to_string())
}

/// The VERSION answer, one line plus newline. The spec says to echo the input
/// `cniVersion`; Go's skel always answers with its own current version. We echo a
/// non-empty input that parses as a version (so a runtime probing with 1.0.0 sees 1.0.0)
/// and answer [`CURRENT`] otherwise, since VERSION must not fail on odd stdin.
pub fn version_reply(input: Option<&str>) -> String {
    let echoed = input
        .filter(|v| !v.is_empty() && Version::parse(v).is_ok())
        .unwrap_or(CURRENT);
    let reply = json!({ "cniVersion": echoed, "supportedVersions": SUPPORTED });
    format!("{}\n", super::result::go_escape(&reply.to_string()))
}

/// The `cniVersion` of a VERSION request's stdin, or `None` if stdin is empty, not JSON or
/// has no string `cniVersion` (VERSION ignores malformed input rather than failing).
pub fn input_version(stdin: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(stdin).ok()? {
        Value::Object(mut m) => match m.remove("cniVersion") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

fn at_least(v: &str, min: Version) -> bool {
    Version::parse(v).is_ok_and(|v| v >= min)
}

/// CHECK exists from spec 0.4.0 on.
pub fn supports_check(v: &str) -> bool {
    at_least(v, CHECK_MIN)
}

/// GC and STATUS exist from spec 1.1.0 on.
pub fn supports_gc_status(v: &str) -> bool {
    at_least(v, GC_STATUS_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_versions() {
        assert_eq!(Version::parse("").unwrap(), Version::new(0, 1, 0));
        assert_eq!(Version::parse("1").unwrap(), Version::new(1, 0, 0));
        assert_eq!(Version::parse("1.1").unwrap(), Version::new(1, 1, 0));
        assert_eq!(Version::parse("0.3.1").unwrap(), Version::new(0, 3, 1));
        assert_eq!("1.0.0".parse::<Version>().unwrap().to_string(), "1.0.0");
        for bad in [
            "1.0.0.0", "a.b.c", "1..0", "+1.0.0", "-1.0", "1.0.x", " 1.0.0",
        ] {
            let e = Version::parse(bad).unwrap_err();
            assert_eq!(e.code, 1, "{bad}");
            assert!(e.msg.contains(bad.trim()), "{bad}: {}", e.msg);
        }
    }

    #[test]
    fn ordering_is_numeric() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("0.10.0") > v("0.4.0"));
        assert!(v("1.0.0") > v("0.4.0"));
        assert!(v("1.1.0") > v("1.0.9"));
        assert_eq!(v("1.1"), v("1.1.0"));
    }

    #[test]
    fn select_without_cni_versions_uses_cni_version() {
        assert_eq!(select(Some("0.4.0"), None).unwrap(), "0.4.0");
        assert_eq!(select(Some("1.1.0"), None).unwrap(), "1.1.0");
    }

    #[test]
    fn select_rejects_unsupported_with_go_details() {
        let e = select(Some("0.2.0"), None).unwrap_err();
        assert_eq!(e.code, 1);
        assert_eq!(e.msg, "incompatible CNI versions");
        assert_eq!(
            e.details,
            r#"config is "0.2.0", plugin supports ["0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]"#
        );
        // No version at all means 0.1.0, which we do not speak.
        let e = select(None, None).unwrap_err();
        assert!(e.details.starts_with(r#"config is """#), "{}", e.details);
        // Exact spelling is required, as in Go's skel.
        assert_eq!(select(Some("1.0"), None).unwrap_err().code, 1);
        assert_eq!(select(Some("2.0.0"), None).unwrap_err().code, 1);
    }

    #[test]
    fn select_takes_highest_not_newer_than_current() {
        let list = strings(&["0.4.0", "1.0.0", "2.0.0", "1.5.0"]);
        assert_eq!(select(Some("0.3.1"), Some(&list)).unwrap(), "1.0.0");
        let list = strings(&["0.3.1"]);
        assert_eq!(select(Some("1.1.0"), Some(&list)).unwrap(), "1.1.0");
        assert_eq!(select(None, Some(&list)).unwrap(), "0.3.1");
        let list = strings(&["1.1.0", "0.4.0"]);
        assert_eq!(select(None, Some(&list)).unwrap(), "1.1.0");
    }

    #[test]
    fn select_falls_back_to_cni_version_when_all_entries_too_new() {
        let list = strings(&["3.0.0"]);
        assert_eq!(select(Some("0.4.0"), Some(&list)).unwrap(), "0.4.0");
        // An empty list also leaves cniVersion alone.
        assert_eq!(select(Some("1.0.0"), Some(&[])).unwrap(), "1.0.0");
        let e = select(Some("2.0.0"), Some(&list)).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.details.contains(r#"config is "2.0.0""#));
    }

    #[test]
    fn select_errors_on_unparsable_entries() {
        let list = strings(&["1.0.0", "banana"]);
        let e = select(Some("1.0.0"), Some(&list)).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("banana"), "{}", e.msg);
        let list = strings(&["1.0.0"]);
        let e = select(Some("x.y"), Some(&list)).unwrap_err();
        assert!(e.msg.contains("x.y"), "{}", e.msg);
    }

    #[test]
    fn select_prefers_supported_spelling_on_tie() {
        let list = strings(&["1.1", "1.1.0", "1.1"]);
        assert_eq!(select(None, Some(&list)).unwrap(), "1.1.0");
        // A tie that only has the short spelling is still unsupported.
        let list = strings(&["1.1"]);
        assert_eq!(select(None, Some(&list)).unwrap_err().code, 1);
    }

    #[test]
    fn version_reply_format() {
        let expected = "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n";
        assert_eq!(version_reply(None), expected);
        assert_eq!(version_reply(Some("")), expected);
        assert_eq!(version_reply(Some("not a version")), expected);
        let r: Value = serde_json::from_str(&version_reply(Some("0.4.0"))).unwrap();
        assert_eq!(r["cniVersion"], "0.4.0");
        assert_eq!(r["supportedVersions"], json!(SUPPORTED));
    }

    #[test]
    fn input_version_is_lenient() {
        assert_eq!(
            input_version(br#"{"cniVersion":"1.0.0"}"#).as_deref(),
            Some("1.0.0")
        );
        assert_eq!(input_version(b""), None);
        assert_eq!(input_version(b"garbage"), None);
        assert_eq!(input_version(br#"{"cniVersion":1}"#), None);
        assert_eq!(input_version(br#"["1.0.0"]"#), None);
    }

    #[test]
    fn verb_gates() {
        assert!(!supports_check("0.3.1"));
        assert!(supports_check("0.4.0"));
        assert!(supports_check("1.0.0"));
        assert!(!supports_check("garbage"));
        assert!(!supports_gc_status("1.0.0"));
        assert!(supports_gc_status("1.1.0"));
        assert!(supports_gc_status("1.2.0"));
    }
}
