//! IP and CIDR math for v4 and v6 (what Go's `net.IPNet` and the plugins'
//! `ip` package provide), on the `ipnet` crate's [`IpNet`]: an address with
//! a prefix length, the address keeping its host bits (`10.1.2.3/24`, as Go's
//! `ParseCIDR` gives the IP). Parse with [`parse_cidr`] for Go's rules;
//! [`IpNetExt`] adds what CNI plugins compute from a prefix.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The address family of an IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// Bits in an address of this family.
    pub fn bits(self) -> u8 {
        match self {
            Self::V4 => 32,
            Self::V6 => 128,
        }
    }

    /// The default route destination: `0.0.0.0/0` or `::/0`.
    pub fn default_route(self) -> IpNet {
        match self {
            Self::V4 => IpNet::V4(Ipv4Net::default()),
            Self::V6 => IpNet::V6(Ipv6Net::default()),
        }
    }

    /// The node-wide forwarding sysctl for this family.
    pub fn forwarding_sysctl(self) -> &'static str {
        match self {
            Self::V4 => "net.ipv4.ip_forward",
            Self::V6 => "net.ipv6.conf.all.forwarding",
        }
    }
}

/// Why a CIDR or IP did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// What plugins need of a CIDR beyond what `ipnet` provides.
pub trait IpNetExt {
    fn family(&self) -> Family;
    /// True for `0.0.0.0/0` and `::/0`.
    fn is_default(&self) -> bool;
    /// Whether the two prefixes overlap (one contains the other).
    fn overlaps(&self, other: &IpNet) -> bool;
    /// Same family and same network.
    fn same_subnet(&self, other: &IpNet) -> bool;
    /// The highest address of the prefix (for IPv4, the broadcast address).
    fn last(&self) -> IpAddr;
    /// The conventional gateway: network address + 1 (Go `calcGatewayIP`).
    fn gateway(&self) -> IpAddr;
    /// `addr` with this prefix length (`None` across families).
    fn with_addr(&self, addr: IpAddr) -> Option<IpNet>;
}

impl IpNetExt for IpNet {
    fn family(&self) -> Family {
        Family::of(&self.addr())
    }

    fn is_default(&self) -> bool {
        self.prefix_len() == 0 && self.addr().is_unspecified()
    }

    fn overlaps(&self, other: &IpNet) -> bool {
        self.contains(&other.addr()) || other.contains(&self.addr())
    }

    fn same_subnet(&self, other: &IpNet) -> bool {
        self.trunc() == other.trunc()
    }

    fn last(&self) -> IpAddr {
        self.broadcast()
    }

    fn gateway(&self) -> IpAddr {
        next_ip(self.network())
    }

    fn with_addr(&self, addr: IpAddr) -> Option<IpNet> {
        if Family::of(&addr) != self.family() {
            return None;
        }
        IpNet::new(addr, self.prefix_len()).ok()
    }
}

/// A host prefix: `/32` or `/128`.
pub fn host(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}

/// Parses `addr/prefix` as Go's `net.ParseCIDR` accepts it (the address
/// keeps its host bits). Use this, not `str::parse::<IpNet>()`: `ipnet`'s
/// own parser also takes IPv4 octets with leading zeros (`010.1.2.3/24`),
/// which Go and the reference plugins refuse.
pub fn parse_cidr(s: &str) -> Result<IpNet, ParseError> {
    let invalid = || ParseError(format!("invalid CIDR address: {s}"));
    let (addr, prefix) = s.split_once('/').ok_or_else(invalid)?;
    let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
        return Err(invalid());
    }
    let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
    IpNet::new(addr, prefix).map_err(|_| invalid())
}

/// Parses a plain IP address (no prefix).
pub fn parse_ip(s: &str) -> Result<IpAddr, ParseError> {
    s.trim()
        .parse()
        .map_err(|_| ParseError(format!("invalid IP address: {s}")))
}

/// Parses `ip` or `ip/prefix`; a bare IP gets a host prefix.
pub fn parse_ip_or_cidr(s: &str) -> Result<IpNet, ParseError> {
    if s.contains('/') {
        parse_cidr(s)
    } else {
        parse_ip(s).map(host)
    }
}

/// The address after `ip` (wrapping at the end of the family's space).
pub fn next_ip(ip: IpAddr) -> IpAddr {
    let family = Family::of(&ip);
    let value = to_u128(ip).wrapping_add(1) & mask(family.bits(), family.bits());
    from_u128(family, value)
}

/// The address as an integer (IPv4 in the low 32 bits), for arithmetic.
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of `family` with integer value `value`, which must fit the
/// family (an IPv4 value above 32 bits gives `255.255.255.255`).
pub fn from_u128(family: Family, value: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX))),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// A mask of `prefix` leading ones within `bits` bits.
fn mask(bits: u8, prefix: u8) -> u128 {
    let all: u128 = if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    if prefix == 0 {
        return 0;
    }
    let host_bits = u32::from(bits.saturating_sub(prefix));
    all & !(1u128.checked_shl(host_bits).map_or(u128::MAX, |v| v - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        parse_cidr(s).unwrap()
    }

    #[test]
    fn network_and_gateway_v4() {
        let n = net("10.1.2.3/24");
        assert_eq!(n.trunc().to_string(), "10.1.2.0/24");
        assert_eq!(n.gateway().to_string(), "10.1.2.1");
        assert_eq!(n.to_string(), "10.1.2.3/24");
        assert_eq!(net("10.200.9.2/30").trunc().to_string(), "10.200.9.0/30");
        assert_eq!(net("10.0.0.7/32").trunc().to_string(), "10.0.0.7/32");
        assert_eq!(net("10.0.0.7/0").trunc().to_string(), "0.0.0.0/0");
    }

    #[test]
    fn network_and_gateway_v6() {
        let n = net("2001:db8::5/64");
        assert_eq!(n.trunc().to_string(), "2001:db8::/64");
        assert_eq!(n.gateway().to_string(), "2001:db8::1");
        assert_eq!(
            net("2001:db8:1::999/128").trunc().to_string(),
            "2001:db8:1::999/128"
        );
        assert_eq!(net("fe80::1/10").trunc().to_string(), "fe80::/10");
    }

    #[test]
    fn contains_and_same_subnet() {
        let n = net("10.1.2.3/24");
        assert!(n.contains(&parse_ip("10.1.2.200").unwrap()));
        assert!(!n.contains(&parse_ip("10.1.3.1").unwrap()));
        assert!(!n.contains(&parse_ip("2001:db8::1").unwrap()));
        assert!(n.same_subnet(&net("10.1.2.1/24")));
        assert!(!n.same_subnet(&net("10.1.2.1/16")));
        assert!(net("10.0.0.1/8").overlaps(&net("10.1.2.3/16")));
        assert!(!net("2001:db8::1/64").overlaps(&net("2001:db9::1/64")));
    }

    #[test]
    fn parse_rejects_garbage() {
        for bad in [
            "10.1.2.3",
            "10.1.2.3/33",
            "10.1.2.3/",
            "x/24",
            "::1/129",
            "10.1.2.3/+4",
            "1.2.3.4/024x",
            // ipnet's own parser takes these; Go's ParseCIDR does not.
            "010.1.2.3/24",
            "10.1.2.003/24",
            " 10.1.2.3/24",
        ] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_ip_or_cidr("10.1.2.88").unwrap().to_string(),
            "10.1.2.88/32"
        );
        assert_eq!(
            parse_ip_or_cidr("2001:db8::1").unwrap().to_string(),
            "2001:db8::1/128"
        );
    }

    #[test]
    fn next_ip_wraps_and_carries() {
        assert_eq!(
            next_ip(parse_ip("10.0.0.255").unwrap()).to_string(),
            "10.0.1.0"
        );
        assert_eq!(
            next_ip(parse_ip("255.255.255.255").unwrap()).to_string(),
            "0.0.0.0"
        );
        assert_eq!(
            next_ip(parse_ip("2001:db8::ffff").unwrap()).to_string(),
            "2001:db8::1:0"
        );
    }

    #[test]
    fn last_address_of_a_prefix() {
        assert_eq!(net("10.1.2.3/24").last().to_string(), "10.1.2.255");
        assert_eq!(net("10.1.2.3/32").last().to_string(), "10.1.2.3");
        assert_eq!(net("0.0.0.0/0").last().to_string(), "255.255.255.255");
        assert_eq!(
            net("2001:db8::/64").last().to_string(),
            "2001:db8::ffff:ffff:ffff:ffff"
        );
        assert_eq!(
            net("::/0").last().to_string(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        assert_eq!(
            from_u128(Family::V4, to_u128(parse_ip("10.0.0.1").unwrap()) + 1).to_string(),
            "10.0.0.2"
        );
    }

    /// The math plugins rely on, against the mask arithmetic of the SDK's
    /// own type before `ipnet` (the formulas host-local's conformance with
    /// the reference was pinned on), over pseudo-random prefixes of both
    /// families and every prefix length.
    #[test]
    fn ipnet_agrees_with_the_previous_mask_math() {
        let mut x: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for family in [Family::V4, Family::V6] {
            let bits = family.bits();
            let all = mask(bits, bits);
            for prefix in 0..=bits {
                for _ in 0..40 {
                    let a = from_u128(family, next() & all);
                    let b = from_u128(family, next() & all);
                    let n = IpNet::new(a, prefix).unwrap();
                    let m = mask(bits, prefix);
                    let net = to_u128(a) & m;
                    assert_eq!(to_u128(n.network()), net, "{n}");
                    assert_eq!(n.trunc().prefix_len(), prefix);
                    assert_eq!(to_u128(n.last()), net | (all & !m), "{n}");
                    assert_eq!(n.gateway(), next_ip(from_u128(family, net)), "{n}");
                    assert_eq!(n.contains(&b), to_u128(b) & m == net, "{n} {b}");
                    let other = IpNet::new(b, (next() % u128::from(bits + 1)) as u8).unwrap();
                    let om = mask(bits, other.prefix_len());
                    let overlap = to_u128(b) & m == net || to_u128(a) & om == to_u128(b) & om;
                    assert_eq!(n.overlaps(&other), overlap, "{n} {other}");
                    assert_eq!(parse_cidr(&n.to_string()), Ok(n));
                }
            }
        }
    }

    #[test]
    fn default_routes() {
        assert!(net("0.0.0.0/0").is_default());
        assert!(net("::/0").is_default());
        assert!(!net("10.0.0.0/0").is_default());
        assert_eq!(Family::V6.default_route().to_string(), "::/0");
    }
}
