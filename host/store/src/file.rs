//! A scope's file: the JSON the disk store writes and reads.
//!
//! Both directions are written out by hand for the one shape the store
//! writes: at host-local's history cap (thousands of entries, a megabyte
//! with Kubernetes' 64-character container ids) serde's general machinery
//! was most of what a call paid for its state (its parser alone 42 % of a
//! per-invocation call). Writing is byte for byte what `serde_json`
//! writes. Reading takes the exact shape [`write`] gives and hands anything
//! else, as read, to `serde_json`: a file edited by hand, written by an
//! older wasm-cni or by whoever else can write the data directory reads as
//! it always did, and what `serde_json` refuses is refused.

use std::collections::BTreeMap;

use super::{Entry, Owner, ScopeData};

/// The file as written: `{"gen":…}` then the scope's own keys, byte for
/// byte what `serde_json` writes for them. Every field is destructured, so
/// a field added to an entry does not compile until it is written here.
pub fn write(gen: &str, data: &ScopeData) -> Vec<u8> {
    let ScopeData { entries, values } = data;
    // Entries are about 180 bytes as host-local writes them.
    let mut out = Vec::with_capacity(64 + entries.len() * 192 + values.len() * 64);
    out.extend_from_slice(b"{\"gen\":");
    write_str(&mut out, gen);
    out.extend_from_slice(b",\"entries\":{");
    for (i, (key, entry)) in entries.iter().enumerate() {
        let Entry {
            owner: Owner {
                container_id,
                ifname,
            },
            allocated_at,
            released_at,
            node,
        } = entry;
        if i > 0 {
            out.push(b',');
        }
        write_str(&mut out, key);
        out.extend_from_slice(b":{\"owner\":{\"containerId\":");
        write_str(&mut out, container_id);
        out.extend_from_slice(b",\"ifname\":");
        write_str(&mut out, ifname);
        out.extend_from_slice(b"},\"allocatedAt\":");
        write_u64(&mut out, *allocated_at);
        if let Some(t) = released_at {
            out.extend_from_slice(b",\"releasedAt\":");
            write_u64(&mut out, *t);
        }
        if let Some(n) = node {
            out.extend_from_slice(b",\"node\":");
            write_str(&mut out, n);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"},\"values\":{");
    for (i, (name, value)) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(&mut out, name);
        out.push(b':');
        write_str(&mut out, value);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `s` as a JSON string, escaped as `serde_json` escapes it: `"` and `\\`,
/// the five short control escapes, other controls as `\u00xx`.
fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // Addresses, container ids and interface names never need escaping:
    // one branch-free pass over the string (which the compiler vectorizes)
    // and one copy, not a test per byte.
    if !bytes.iter().fold(false, |any, &b| any | needs_escape(b)) {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        if short == 0 {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// `n` in decimal, two digits at a time: times are 13 digits, and a
/// division per digit was a tenth of writing a scope.
fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = usize::try_from(n % 100).unwrap_or(0) * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = usize::try_from(n).unwrap_or(0) * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// The scope in `bytes`, as `serde_json` reads it.
pub fn read(bytes: &[u8]) -> serde_json::Result<ScopeData> {
    match read_written(bytes) {
        Some(data) => Ok(data),
        None => serde_json::from_slice(bytes),
    }
}

/// The scope in `bytes` if they are in exactly the shape [`write`] gives
/// (no whitespace, fields in its order, strings without escapes, keys in
/// increasing order), else `None`. Whatever it returns is what
/// `serde_json` returns for the same bytes.
fn read_written(bytes: &[u8]) -> Option<ScopeData> {
    let mut r = Reader { bytes, at: 0 };
    r.lit(b"{\"gen\":")?;
    r.str()?;
    r.lit(b",\"entries\":{")?;
    // Entries are about 120 to 180 bytes in the file.
    let mut entries = Vec::with_capacity(bytes.len() / 128);
    if !r.eat(b'}') {
        loop {
            let key = r.str()?;
            r.lit(b":{\"owner\":{\"containerId\":")?;
            let container_id = r.str()?.to_owned();
            r.lit(b",\"ifname\":")?;
            let ifname = r.str()?.to_owned();
            r.lit(b"},\"allocatedAt\":")?;
            let allocated_at = r.u64()?;
            let released_at = match r.lit(b",\"releasedAt\":") {
                Some(()) => Some(r.u64()?),
                None => None,
            };
            let node = match r.lit(b",\"node\":") {
                Some(()) => Some(r.str()?.to_owned()),
                None => None,
            };
            r.lit(b"}")?;
            let owner = Owner {
                container_id,
                ifname,
            };
            let entry = Entry {
                owner,
                allocated_at,
                released_at,
                node,
            };
            entries.push((key, entry));
            if !r.eat(b',') {
                break;
            }
        }
        r.lit(b"}")?;
    }
    r.lit(b",\"values\":{")?;
    let mut values = Vec::new();
    if !r.eat(b'}') {
        loop {
            let name = r.str()?;
            r.lit(b":")?;
            values.push((name, r.str()?.to_owned()));
            if !r.eat(b',') {
                break;
            }
        }
        r.lit(b"}")?;
    }
    r.lit(b"}")?;
    // A key repeated or out of order is left to serde_json, whose map
    // keeps the last of equal keys.
    let ordered = increasing(&entries) && increasing(&values);
    (r.at == bytes.len() && ordered).then(|| ScopeData {
        entries: map(entries),
        values: map(values),
    })
}

fn increasing<V>(items: &[(&str, V)]) -> bool {
    items.windows(2).all(|w| w[0].0 < w[1].0)
}

/// The map of `items`, which are in increasing order, inserted from the
/// last: each insert then finds its place at the first key of each node on
/// its way down, where from the first it would pass every key of every
/// node (about as costly as serde's whole parse). `collect` sorts first,
/// and a sort of this type is kilobytes of the engine nodes install.
fn map<V>(items: Vec<(&str, V)>) -> BTreeMap<String, V> {
    let mut map = BTreeMap::new();
    for (k, v) in items.into_iter().rev() {
        map.insert(k.to_owned(), v);
    }
    map
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Past `lit` if the input goes on with it; else stays put.
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(lit).then(|| self.at += lit.len())
    }

    fn eat(&mut self, b: u8) -> bool {
        self.lit(&[b]).is_some()
    }

    /// A string without escapes or control characters (which JSON does
    /// not allow raw), as valid UTF-8.
    fn str(&mut self) -> Option<&'a str> {
        let rest = self.bytes.get(self.at..)?.strip_prefix(b"\"")?;
        let len = rest.iter().position(|&b| b == b'"' || needs_escape(b))?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        let s = std::str::from_utf8(rest.get(..len)?).ok()?;
        self.at += len + 2;
        Some(s)
    }

    /// A JSON integer that fits a `u64`: digits, no leading zero, and
    /// neither fraction nor exponent (the literal expected next fails on
    /// those).
    fn u64(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.at..)?;
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let digits = rest.get(..len)?;
        if len == 0 || (len > 1 && digits.first() == Some(&b'0')) {
            return None;
        }
        let mut n: u64 = 0;
        for &d in digits {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.at += len;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a runtime or a daemon peer controls here: the container id and
    /// the interface name; a plugin: the values (any string). What they
    /// must not gain: a file that reads back as anything else, a key of
    /// their making. The file is what serde_json writes, byte for byte.
    #[test]
    fn the_scope_is_written_as_serde_json_writes_it() {
        #[derive(serde::Serialize)]
        struct Stamped<'a> {
            gen: &'a str,
            #[serde(flatten)]
            data: &'a ScopeData,
        }
        let every: String = (0u8..0x80)
            .map(char::from)
            .chain(['é', '→', '\u{2028}', '😀'])
            .collect();
        let odd = ["", "eth0", "a\"},\"x\":{\"", "c\\\"", every.as_str()];
        let mut data = ScopeData::default();
        for (i, s) in odd.iter().enumerate() {
            data.entries.insert(
                format!("10.0.0.{i}{s}"),
                Entry {
                    owner: Owner {
                        container_id: s.to_string(),
                        ifname: format!("{s}{i}"),
                    },
                    allocated_at: [0, 1, 9, 10, u64::MAX][i],
                    released_at: (i % 2 == 1).then_some(u64::MAX - i as u64),
                    node: (i > 2).then(|| s.to_string()),
                },
            );
            data.values.insert(format!("v{i}{s}"), s.to_string());
        }
        let gen = "0123456789abcdef0123456789abcdef";
        for data in [ScopeData::default(), data] {
            let written = write(gen, &data);
            let serde = serde_json::to_vec(&Stamped { gen, data: &data }).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&serde)
            );
            assert_eq!(serde_json::from_slice::<ScopeData>(&written).unwrap(), data);
        }
        // Every length of number, and each side of every power of ten.
        let mut numbers: Vec<u64> = (0..=1000).collect();
        for p in 1..20 {
            let t = 10u64.pow(p);
            numbers.extend([t - 1, t, t + 1, t + 10]);
            numbers.extend(t.checked_mul(2).map(|t2| t2 - 1));
        }
        numbers.extend([1_796_564_700_639, u64::MAX - 1, u64::MAX]);
        for n in numbers {
            let mut out = Vec::new();
            write_u64(&mut out, n);
            assert_eq!(String::from_utf8_lossy(&out), n.to_string());
        }
    }

    /// A scope as host-local and the cluster store write it: no string
    /// that needs escaping.
    fn plain(n: u32) -> ScopeData {
        let mut data = ScopeData::default();
        for i in 0..n {
            data.entries.insert(
                format!("10.77.{}.{}", i / 250, i % 250 + 2),
                Entry {
                    owner: Owner {
                        container_id: format!(
                            "{:064x}",
                            u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        ),
                        ifname: "eth0".into(),
                    },
                    allocated_at: 1_796_564_700_639 + u64::from(i),
                    released_at: (i % 3 != 0).then_some(1_796_564_800_000 + u64::from(i)),
                    node: (i % 5 == 0).then(|| format!("node-{i}")),
                },
            );
        }
        data.values
            .insert("last_reserved_ip.0".into(), "10.77.0.9".into());
        data.values.insert("é→😀".into(), String::new());
        data
    }

    #[test]
    fn a_written_scope_reads_back_without_serde_and_as_serde_reads_it() {
        let gen = "0123456789abcdef0123456789abcdef";
        for data in [ScopeData::default(), plain(1), plain(600)] {
            let bytes = write(gen, &data);
            // The shape `write` gives is read by hand, not by serde.
            assert_eq!(read_written(&bytes).as_ref(), Some(&data));
            assert_eq!(read(&bytes).unwrap(), data);
            assert_eq!(serde_json::from_slice::<ScopeData>(&bytes).unwrap(), data);
        }
        // A string that needs escaping is left to serde_json, which reads it.
        let mut odd = plain(3);
        let owner = Owner {
            container_id: "a\\b\n".into(),
            ifname: "eth0".into(),
        };
        odd.entries.insert(
            "10.9.9.9\"x".into(),
            Entry {
                owner,
                allocated_at: 0,
                released_at: None,
                node: None,
            },
        );
        let bytes = write(gen, &odd);
        assert_eq!(read_written(&bytes), None);
        assert_eq!(read(&bytes).unwrap(), odd);
    }

    /// What the data directory's writer controls: every byte of the file.
    /// What they must not gain: a scope read otherwise than `serde_json`
    /// reads it (an entry dropped or added, a repeated key's last value
    /// not the one kept, a file serde refuses taken as a scope), or a
    /// panic. Every cut, deletion, replacement and insertion of a byte that
    /// matters to JSON, at every offset of a written file, then the edge
    /// cases by name.
    #[test]
    fn every_damaged_file_reads_as_serde_json_reads_it() {
        let same = |bytes: &[u8]| {
            let ours = read(bytes).ok();
            let serde = serde_json::from_slice::<ScopeData>(bytes).ok();
            assert_eq!(ours, serde, "{}", String::from_utf8_lossy(bytes));
            ours.is_some()
        };
        let base = write("0123456789abcdef0123456789abcdef", &plain(4));
        let odd: &[u8] = b" \"\\0159}],:{[\x00\x1f\x7f\xc3\xffaeE-.nlu";
        let (mut cases, mut read_ok) = (0, 0);
        for at in 0..=base.len() {
            let mut tries = vec![base[..at].to_vec()];
            if at < base.len() {
                tries.push([&base[..at], &base[at + 1..]].concat());
            }
            for &b in odd {
                tries.push([&base[..at], &[b], &base[at..]].concat());
                if at < base.len() {
                    tries.push([&base[..at], &[b], &base[at + 1..]].concat());
                }
            }
            for t in tries {
                cases += 1;
                read_ok += usize::from(same(&t));
            }
        }
        // Edits that stay JSON of a scope (a digit changed, a space added)
        // must have been among them, or this proves nothing.
        assert!(read_ok > 500, "{read_ok} of {cases} read");
        let entry = |k: &str, t: &str| {
            format!(r#""{k}":{{"owner":{{"containerId":"c","ifname":"eth0"}},"allocatedAt":{t}}}"#)
        };
        let file = |entries: &[String]| {
            format!(
                r#"{{"gen":"g","entries":{{{}}},"values":{{}}}}"#,
                entries.join(",")
            )
        };
        for text in [
            file(&[entry("10.0.0.2", "1"), entry("10.0.0.2", "2")]),
            file(&[entry("10.0.0.3", "1"), entry("10.0.0.2", "2")]),
            file(&[entry("10.0.0.2", "01")]),
            file(&[entry("10.0.0.2", "-1")]),
            file(&[entry("10.0.0.2", "1.0")]),
            file(&[entry("10.0.0.2", "1e3")]),
            file(&[entry("10.0.0.2", "18446744073709551615")]),
            file(&[entry("10.0.0.2", "18446744073709551616")]),
            file(&[entry("10.0.0.2", "1,\"releasedAt\":null")]),
            file(&[entry("10.0.0.2", "1,\"node\":\"n\",\"releasedAt\":2")]),
            file(&[entry("10.0.0.2", "1,\"extra\":2")]),
            file(&[]) + " ",
            file(&[]).replace("\"g\"", "7"),
            r#"{"entries":{},"values":{}}"#.into(),
            "{}".into(),
            String::new(),
        ] {
            same(text.as_bytes());
        }
        // A key twice reads as its last value, by either road.
        let twice = file(&[entry("10.0.0.2", "1"), entry("10.0.0.2", "2")]);
        let data = read(twice.as_bytes()).unwrap();
        assert_eq!(data.entries["10.0.0.2"].allocated_at, 2);
    }
}
