//! CIDR text as the reference plugins read it: Go's `net.ParseCIDR` rules
//! over the `ipnet` crate's type. The address keeps its host bits
//! (`10.1.2.3/24`), as Go's `ParseCIDR` returns the IP.

use std::net::IpAddr;

pub use ipnet::IpNet;

/// `addr/prefix`: an address `std` accepts (no leading zeros in IPv4
/// octets, as Go since 1.17), then 1 to 3 decimal digits no larger than the
/// family's bits. Not `str::parse::<IpNet>()`: `ipnet`'s own parser also
/// takes `010.1.2.3/24`, which Go and the reference plugins refuse.
pub fn parse(s: &str) -> Option<IpNet> {
    let (addr, prefix) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    IpNet::new(addr, prefix.parse().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_rules() {
        for (s, want) in [
            ("10.1.2.3/24", Some("10.1.2.3/24")),
            ("10.1.2.3/024", Some("10.1.2.3/24")),
            ("fd00::1:2/64", Some("fd00::1:2/64")),
            ("::ffff:10.1.2.3/120", Some("::ffff:10.1.2.3/120")),
            ("0.0.0.0/0", Some("0.0.0.0/0")),
            ("10.1.2.3", None),
            ("10.1.2.3/33", None),
            ("::1/129", None),
            ("10.1.2.3/", None),
            ("/24", None),
            ("10.1.2.3/+4", None),
            ("10.1.2.3/0024", None),
            ("10.1.2.3/24/1", None),
            ("010.1.2.3/24", None),
            ("10.1.2.003/24", None),
            (" 10.1.2.3/24", None),
        ] {
            assert_eq!(parse(s).map(|n| n.to_string()).as_deref(), want, "{s}");
        }
        // What a plain parse would let through.
        assert!("010.1.2.3/24".parse::<IpNet>().is_ok());
    }
}
