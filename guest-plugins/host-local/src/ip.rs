//! Address arithmetic for both families on `u128`, and CIDRs parsed the way
//! Go's `net.ParseCIDR` does (the address keeps its host bits).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// `value` must fit the family (callers mask it).
pub fn from_u128(family: Family, value: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX))),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// All ones in the family's width.
fn all_ones(family: Family) -> u128 {
    match family {
        Family::V4 => u128::from(u32::MAX),
        Family::V6 => u128::MAX,
    }
}

/// The mask of `prefix` leading ones.
pub fn mask(family: Family, prefix: u8) -> u128 {
    let host_bits = u32::from(family.bits().saturating_sub(prefix));
    let host = 1u128.checked_shl(host_bits).map_or(u128::MAX, |v| v - 1);
    all_ones(family) & !host
}

/// The next address, wrapping within the family (Go's `ip.NextIP`).
pub fn next(ip: IpAddr) -> IpAddr {
    let f = Family::of(&ip);
    from_u128(f, to_u128(ip).wrapping_add(1) & all_ones(f))
}

/// IPv4-mapped IPv6 addresses are IPv4, as Go's `To4` makes them.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A plain address, with Go's error text.
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>()
        .map(canonical)
        .map_err(|_| format!("invalid IP address: {s}"))
}

/// `ip` or `ip/prefix` (the prefix is dropped), as host-local accepts for
/// requested addresses.
pub fn parse_ip_maybe_cidr(s: &str) -> Result<IpAddr, String> {
    let s = s.trim();
    match s.split_once('/') {
        Some(_) => Cidr::parse(s).map(|c| canonical(c.ip)),
        None => parse_ip(s),
    }
}

/// An address with a prefix length; `ip` may have host bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub ip: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Go's `net.ParseCIDR` (without the masking), with its error text.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid CIDR address: {s}");
        let (addr, prefix) = s.split_once('/').ok_or_else(bad)?;
        let ip: IpAddr = addr.parse().map_err(|_| bad())?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > Family::of(&ip).bits() {
            return Err(bad());
        }
        Ok(Cidr { ip, prefix })
    }

    pub fn family(&self) -> Family {
        Family::of(&self.ip)
    }

    pub fn network(&self) -> IpAddr {
        let f = self.family();
        from_u128(f, to_u128(self.ip) & mask(f, self.prefix))
    }

    /// The highest address of the subnet (the IPv4 broadcast).
    pub fn last(&self) -> IpAddr {
        let f = self.family();
        let m = mask(f, self.prefix);
        from_u128(f, (to_u128(self.ip) & m) | (all_ones(f) & !m))
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        let f = self.family();
        Family::of(ip) == f && (to_u128(*ip) & mask(f, self.prefix)) == to_u128(self.network())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_math_v4_and_v6() {
        let c = Cidr::parse("10.1.2.3/24").unwrap();
        assert_eq!(c.to_string(), "10.1.2.3/24");
        assert_eq!(c.network(), ip("10.1.2.0"));
        assert_eq!(c.last(), ip("10.1.2.255"));
        assert!(c.contains(&ip("10.1.2.200")));
        assert!(!c.contains(&ip("10.1.3.0")));
        assert!(!c.contains(&ip("::1")));
        let c = Cidr::parse("2001:db8::/64").unwrap();
        assert_eq!(c.last(), ip("2001:db8::ffff:ffff:ffff:ffff"));
        assert_eq!(
            Cidr::parse("0.0.0.0/0").unwrap().last(),
            ip("255.255.255.255")
        );
        assert_eq!(Cidr::parse("::/0").unwrap().network(), ip("::"));
    }

    #[test]
    fn parse_errors_use_go_texts() {
        assert_eq!(
            Cidr::parse("10.0.0.0/33").unwrap_err(),
            "invalid CIDR address: 10.0.0.0/33"
        );
        assert!(Cidr::parse("10.0.0.0").is_err());
        assert!(Cidr::parse("10.0.0.0/+8").is_err());
        assert_eq!(parse_ip("nope").unwrap_err(), "invalid IP address: nope");
    }

    #[test]
    fn next_wraps_and_requested_ips_drop_the_prefix() {
        assert_eq!(next(ip("10.0.0.255")), ip("10.0.1.0"));
        assert_eq!(next(ip("255.255.255.255")), ip("0.0.0.0"));
        assert_eq!(next(ip("2001:db8::ffff")), ip("2001:db8::1:0"));
        assert_eq!(
            parse_ip_maybe_cidr("10.1.2.11/24").unwrap(),
            ip("10.1.2.11")
        );
        assert_eq!(
            parse_ip_maybe_cidr(" 2001:db8::1/64").unwrap(),
            ip("2001:db8::1")
        );
        assert_eq!(parse_ip("::ffff:10.0.0.1").unwrap(), ip("10.0.0.1"));
    }
}
