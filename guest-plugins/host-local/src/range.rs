//! Ranges and range sets with the reference defaults, validation texts and
//! round-robin iteration (`plugins/ipam/host-local/backend/allocator`).

use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;

use crate::ip::{self, canonical, to_u128, Family, IpNet, IpNetExt};

/// A range as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeConf {
    #[serde(default)]
    pub subnet: Option<String>,
    #[serde(default)]
    pub range_start: Option<String>,
    #[serde(default)]
    pub range_end: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A validated range: `start..=end` inside `subnet`, all one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The network address and prefix.
    pub subnet: IpNet,
    pub start: IpAddr,
    pub end: IpAddr,
    pub gateway: IpAddr,
}

fn parse_opt(s: &Option<String>) -> Result<Option<IpAddr>, String> {
    s.as_deref()
        .filter(|s| !s.is_empty())
        .map(ip::parse_ip)
        .transpose()
}

impl Range {
    /// `Range.Canonicalize`: defaults and checks, in the reference's order.
    pub fn canonicalize(conf: &RangeConf) -> Result<Self, String> {
        let subnet_text = conf.subnet.as_deref().unwrap_or_default();
        let given = ip::parse_cidr(subnet_text)?;
        let family = given.family();
        if given.prefix_len() > family.bits() - 2 {
            return Err(format!("Network {given} too small to allocate from"));
        }
        let subnet = given.trunc();
        let network = subnet.addr();
        if network != given.addr() {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {} the network address is {network}",
                given.prefix_len()
            ));
        }
        let gateway = parse_opt(&conf.gateway)?.unwrap_or_else(|| ip::next(network));
        let mut range = Range {
            subnet,
            // Provisional bounds while the configured ones are checked, as
            // the reference checks each against the subnet alone first.
            start: network,
            end: subnet.last(),
            gateway,
        };
        let start = match parse_opt(&conf.range_start)? {
            Some(s) => {
                if !range.in_bounds(&s, None, None) {
                    return Err(format!("RangeStart {s} not in network {subnet}"));
                }
                s
            }
            None => ip::next(network),
        };
        let end = match parse_opt(&conf.range_end)? {
            Some(e) => {
                if !range.in_bounds(&e, Some(start), None) {
                    return Err(format!("RangeEnd {e} not in network {subnet}"));
                }
                e
            }
            None => {
                let last = subnet.last();
                match family {
                    // No broadcast address.
                    Family::V4 => ip::from_u128(family, to_u128(last) - 1),
                    Family::V6 => last,
                }
            }
        };
        range.start = start;
        range.end = end;
        Ok(range)
    }

    fn in_bounds(&self, ip: &IpAddr, start: Option<IpAddr>, end: Option<IpAddr>) -> bool {
        let ip = canonical(*ip);
        if !self.subnet.contains(&ip) {
            return false;
        }
        let v = to_u128(ip);
        start.is_none_or(|s| v >= to_u128(s)) && end.is_none_or(|e| v <= to_u128(e))
    }

    pub fn family(&self) -> Family {
        self.subnet.family()
    }

    /// In the subnet and within `start..=end`.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.in_bounds(ip, Some(self.start), Some(self.end))
    }

    pub fn overlaps(&self, other: &Range) -> bool {
        self.family() == other.family()
            && (self.contains(&other.start)
                || self.contains(&other.end)
                || other.contains(&self.start)
                || other.contains(&self.end))
    }

    /// Allocatable addresses: the range minus its gateway.
    pub fn size(&self) -> u128 {
        let n = to_u128(self.end) - to_u128(self.start) + 1;
        if self.contains(&self.gateway) {
            n - 1
        } else {
            n
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// One IP is allocated per range set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    /// `RangeSet.Canonicalize`.
    pub fn canonicalize(confs: &[RangeConf]) -> Result<Self, String> {
        if confs.is_empty() {
            return Err("empty range set".into());
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(confs.len());
        for conf in confs {
            let r = Range::canonicalize(conf)?;
            if ranges.first().is_some_and(|f| f.family() != r.family()) {
                return Err("mixed address families".into());
            }
            ranges.push(r);
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                if a.overlaps(b) {
                    return Err(format!("subnets {a} and {b} overlap"));
                }
            }
        }
        Ok(RangeSet(ranges))
    }

    pub fn family(&self) -> Option<Family> {
        self.0.first().map(Range::family)
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.0.iter().any(|r| r.contains(ip))
    }

    /// The range holding `ip`, with the reference's error.
    pub fn range_for(&self, ip: &IpAddr) -> Result<&Range, String> {
        self.0
            .iter()
            .find(|r| r.contains(ip))
            .ok_or_else(|| format!("{ip} not in range set {self}"))
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    /// Allocatable addresses in the whole set.
    pub fn size(&self) -> u128 {
        self.0.iter().map(Range::size).fold(0, u128::saturating_add)
    }

    /// Round-robin order starting after `last` (when it is in the set),
    /// else at the first range's start, skipping gateways, visiting every
    /// address once (`RangeIter`).
    pub fn iter_from(&self, last: Option<IpAddr>) -> RangeIter<'_> {
        let cur = last.and_then(|ip| {
            self.0
                .iter()
                .position(|r| r.contains(&ip))
                .map(|idx| (idx, canonical(ip)))
        });
        RangeIter {
            set: self,
            cur,
            start: None,
            done: self.0.is_empty(),
        }
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

pub struct RangeIter<'a> {
    set: &'a RangeSet,
    /// The last address returned (or the starting point), by range index.
    cur: Option<(usize, IpAddr)>,
    /// The first address stepped onto: coming back to it ends the walk.
    start: Option<IpAddr>,
    done: bool,
}

impl Iterator for RangeIter<'_> {
    type Item = IpAddr;

    fn next(&mut self) -> Option<IpAddr> {
        let ranges = &self.set.0;
        while !self.done {
            let (idx, ip) = match self.cur {
                None => (0, ranges.first()?.start),
                Some((idx, cur)) => {
                    let r = ranges.get(idx)?;
                    if cur == r.end {
                        let idx = (idx + 1) % ranges.len();
                        (idx, ranges.get(idx)?.start)
                    } else {
                        (idx, ip::next(cur))
                    }
                }
            };
            self.cur = Some((idx, ip));
            match self.start {
                None => self.start = Some(ip),
                Some(s) if s == ip => {
                    self.done = true;
                    return None;
                }
                Some(_) => {}
            }
            if ranges.get(idx).is_some_and(|r| r.gateway == ip) {
                continue;
            }
            return Some(ip);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(subnet: &str) -> RangeConf {
        RangeConf {
            subnet: Some(subnet.into()),
            ..RangeConf::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn set(subnets: &[&str]) -> RangeSet {
        RangeSet::canonicalize(&subnets.iter().map(|s| conf(s)).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn sane_defaults() {
        let r = Range::canonicalize(&conf("192.0.2.0/24")).unwrap();
        assert_eq!(
            (r.start, r.end, r.gateway),
            (ip("192.0.2.1"), ip("192.0.2.254"), ip("192.0.2.1"))
        );
        let r = Range::canonicalize(&conf("192.0.2.0/25")).unwrap();
        assert_eq!((r.start, r.end), (ip("192.0.2.1"), ip("192.0.2.126")));
        let r = Range::canonicalize(&conf("2001:db8:1::/64")).unwrap();
        assert_eq!(
            (r.start, r.end, r.gateway),
            (
                ip("2001:db8:1::1"),
                ip("2001:db8:1::ffff:ffff:ffff:ffff"),
                ip("2001:db8:1::1")
            )
        );
        assert_eq!(
            r.to_string(),
            "2001:db8:1::1-2001:db8:1:0:ffff:ffff:ffff:ffff"
        );
        // A /30 prints from the gateway, which iteration skips.
        let s = set(&["10.200.9.0/30"]);
        assert_eq!(s.to_string(), "10.200.9.1-10.200.9.2");
        assert_eq!(s.size(), 1);
    }

    #[test]
    fn validation_messages() {
        let err = |c: RangeConf| Range::canonicalize(&c).unwrap_err();
        assert_eq!(
            err(conf("192.0.2.0/31")),
            "Network 192.0.2.0/31 too small to allocate from"
        );
        assert_eq!(
            err(conf("2001:db8::/127")),
            "Network 2001:db8::/127 too small to allocate from"
        );
        assert_eq!(
            err(conf("192.0.2.1/24")),
            "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"
        );
        assert_eq!(
            err(conf("2001:db8:1::1/64")),
            "Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::"
        );
        let mut c = conf("192.0.2.0/24");
        c.range_start = Some("192.0.3.0".into());
        assert_eq!(err(c), "RangeStart 192.0.3.0 not in network 192.0.2.0/24");
        let mut c = conf("192.0.2.0/24");
        c.range_end = Some("192.0.4.0".into());
        assert_eq!(err(c), "RangeEnd 192.0.4.0 not in network 192.0.2.0/24");
        let mut c = conf("192.0.2.0/24");
        c.range_start = Some("192.0.2.50".into());
        c.range_end = Some("192.0.2.40".into());
        assert_eq!(err(c), "RangeEnd 192.0.2.40 not in network 192.0.2.0/24");
        assert_eq!(
            err(conf("192.0.2.0/33")),
            "invalid CIDR address: 192.0.2.0/33"
        );
        assert_eq!(err(RangeConf::default()), "invalid CIDR address: ");
    }

    #[test]
    fn all_fields_and_contains() {
        let r = Range::canonicalize(&RangeConf {
            subnet: Some("10.1.2.0/24".into()),
            range_start: Some("10.1.2.9".into()),
            range_end: Some("10.1.2.20".into()),
            gateway: Some("10.1.2.30".into()),
        })
        .unwrap();
        assert_eq!(r.to_string(), "10.1.2.9-10.1.2.20");
        assert!(r.contains(&ip("10.1.2.9")) && r.contains(&ip("10.1.2.20")));
        assert!(!r.contains(&ip("10.1.2.8")) && !r.contains(&ip("10.1.2.21")));
        assert!(!r.contains(&ip("2001:db8::9")));
        assert_eq!(r.size(), 12);
        let r6 = Range::canonicalize(&conf("2001:db8:1::/64")).unwrap();
        assert!(r6.contains(&ip("2001:db8:1::99")) && !r6.contains(&ip("2001:db8:2::1")));
    }

    #[test]
    fn overlaps_table() {
        let r = |s: &str, a: Option<&str>, b: Option<&str>| {
            Range::canonicalize(&RangeConf {
                subnet: Some(s.into()),
                range_start: a.map(Into::into),
                range_end: b.map(Into::into),
                gateway: None,
            })
            .unwrap()
        };
        let a = r("10.0.0.0/24", None, None);
        assert!(!a.overlaps(&r("10.0.1.0/24", None, None)));
        assert!(!a.overlaps(&r("2001:db8::/64", None, None)));
        assert!(a.overlaps(&r("10.0.0.0/24", None, None)));
        assert!(a.overlaps(&r("10.0.0.0/20", None, None)));
        let lo = r("10.0.0.0/24", Some("10.0.0.1"), Some("10.0.0.100"));
        assert!(!lo.overlaps(&r("10.0.0.0/24", Some("10.0.0.101"), Some("10.0.0.200"))));
        assert!(lo.overlaps(&r("10.0.0.0/24", Some("10.0.0.100"), Some("10.0.0.200"))));
    }

    #[test]
    fn range_set_checks() {
        let e = RangeSet::canonicalize(&[conf("10.0.0.0/24"), conf("2001:db8::/64")]).unwrap_err();
        assert_eq!(e, "mixed address families");
        let e = RangeSet::canonicalize(&[conf("10.0.0.0/24"), conf("10.0.0.0/20")]).unwrap_err();
        assert_eq!(
            e,
            "subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.15.254 overlap"
        );
        assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
        let s = set(&["10.0.0.0/24", "10.0.1.0/24"]);
        assert!(s.contains(&ip("10.0.1.7")) && !s.contains(&ip("10.0.2.7")));
        assert_eq!(
            s.range_for(&ip("10.0.2.7")).unwrap_err(),
            "10.0.2.7 not in range set 10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254"
        );
        assert!(s.overlaps(&set(&["10.0.1.0/28"])));
        assert!(!s.overlaps(&set(&["10.0.2.0/28"])));
    }

    #[test]
    fn iteration_from_start_end_and_middle() {
        let s = set(&["192.168.1.0/29"]);
        let all = |last: Option<&str>| {
            s.iter_from(last.map(ip))
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            all(None),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
        assert_eq!(
            all(Some("192.168.1.6")),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
        assert_eq!(
            all(Some("192.168.1.4")),
            [
                "192.168.1.5",
                "192.168.1.6",
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4"
            ]
        );
        // Out of the set: from the start.
        assert_eq!(all(Some("10.9.9.9"))[0], "192.168.1.2");
    }

    #[test]
    fn iteration_moves_to_the_next_range_after_an_end() {
        let s = set(&["192.168.1.0/30", "192.168.2.0/30"]);
        let v: Vec<String> = s
            .iter_from(Some(ip("192.168.1.2")))
            .map(|i| i.to_string())
            .collect();
        assert_eq!(v, ["192.168.2.2", "192.168.1.2"]);
        let s6 = set(&["2001:db8::/126"]);
        let v: Vec<String> = s6.iter_from(None).map(|i| i.to_string()).collect();
        assert_eq!(v, ["2001:db8::2", "2001:db8::3"]);
    }
}
