//! resolv.conf to a CNI `dns` object (the reference's `parseResolvConf`).

use crate::plugin::Dns;

pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [key, first, rest @ ..] = fields.as_slice() else {
            continue;
        };
        match *key {
            "nameserver" => dns.nameservers.push((*first).to_string()),
            "domain" => dns.domain = Some((*first).to_string()),
            "search" => dns
                .search
                .extend(std::iter::once(first).chain(rest).map(|s| s.to_string())),
            "options" => dns
                .options
                .extend(std::iter::once(first).chain(rest).map(|s| s.to_string())),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_file() {
        let d = parse_resolv_conf("nameserver 10.1.2.123\n");
        assert_eq!(d.nameservers, ["10.1.2.123"]);
        assert_eq!(d.domain, None);
    }

    #[test]
    fn comments_are_ignored() {
        let d =
            parse_resolv_conf("nameserver 10.1.2.123\n# nameserver 10.9.9.9\n; x\nnameserver\n");
        assert_eq!(d.nameservers, ["10.1.2.123"]);
    }

    #[test]
    fn all_fields() {
        let d = parse_resolv_conf(
            "nameserver 10.1.2.123\nnameserver 2001:db8::5\ndomain example.com\n\
             search example.com example.net\noptions ndots:5 timeout:2\n  options attempts:3  \n",
        );
        assert_eq!(d.nameservers, ["10.1.2.123", "2001:db8::5"]);
        assert_eq!(d.domain.as_deref(), Some("example.com"));
        assert_eq!(d.search, ["example.com", "example.net"]);
        assert_eq!(d.options, ["ndots:5", "timeout:2", "attempts:3"]);
    }
}
