//! Addresses as host-local reads them, on top of the SDK's CIDR math
//! ([`IpNet`], the `ipnet` crate's, read with Go's `net.ParseCIDR` rules,
//! the address keeping its host bits;
//! [`Family`]; [`next`]; the `u128` conversions): Go's `To4` canonical form
//! and Go's texts for plain and requested addresses.

use std::net::IpAddr;

pub use wasm_cni_sdk::ip::{from_u128, next_ip as next, to_u128, Family, IpNet, IpNetExt};

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
        Some(_) => parse_cidr(s).map(|c| canonical(c.addr())),
        None => parse_ip(s),
    }
}

/// A CIDR (Go's `net.ParseCIDR` without the masking), with its error text.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    wasm_cni_sdk::ip::parse_cidr(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_math_v4_and_v6() {
        let c = parse_cidr("10.1.2.3/24").unwrap();
        assert_eq!(c.to_string(), "10.1.2.3/24");
        assert_eq!(c.network(), ip("10.1.2.0"));
        assert_eq!(c.last(), ip("10.1.2.255"));
        assert!(c.contains(&ip("10.1.2.200")));
        assert!(!c.contains(&ip("10.1.3.0")));
        assert!(!c.contains(&ip("::1")));
        let c = parse_cidr("2001:db8::/64").unwrap();
        assert_eq!(c.last(), ip("2001:db8::ffff:ffff:ffff:ffff"));
        assert_eq!(
            parse_cidr("0.0.0.0/0").unwrap().last(),
            ip("255.255.255.255")
        );
        assert_eq!(parse_cidr("::/0").unwrap().network(), ip("::"));
    }

    #[test]
    fn parse_errors_use_go_texts() {
        assert_eq!(
            parse_cidr("10.0.0.0/33").unwrap_err(),
            "invalid CIDR address: 10.0.0.0/33"
        );
        assert!(parse_cidr("10.0.0.0").is_err());
        assert!(parse_cidr("10.0.0.0/+8").is_err());
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
