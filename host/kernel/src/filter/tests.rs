//! The filter suite every backend passes (the model always; the kernel, as
//! root, in a namespace of its own), and what only nft(8) can confirm.

use std::net::IpAddr;

use super::*;
use crate::net::tests::support::{require_root, Netns};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn masq(src: &str) -> Rule {
    Rule::Masquerade {
        source: ip(src),
        except: vec!["10.88.0.0/16".parse().unwrap()],
    }
}

fn port(p: u16, dst: &str, host_ip: Option<&str>) -> Rule {
    Rule::PortMap {
        proto: Proto::Tcp,
        host_ip: host_ip.map(ip),
        host_port: p,
        dst: ip(dst),
        dst_port: 80,
    }
}

fn every_kind(dst: &str) -> Vec<Rule> {
    vec![
        masq(dst),
        port(8080, dst, None),
        Rule::HairpinMasquerade { dst: ip(dst) },
        Rule::AllowForward { addr: ip(dst) },
        Rule::IsolateBridge {
            bridge: "cni0".into(),
        },
        Rule::MacSpoofCheck {
            link: "veth1234".into(),
            mac: [0x0a, 0x58, 0, 0, 0, 5],
        },
    ]
}

fn comments(f: &mut dyn Filter) -> Vec<String> {
    let mut v: Vec<String> = f.list().unwrap().into_iter().map(|e| e.comment).collect();
    v.sort();
    v.dedup();
    v
}

/// The behaviour both backends share.
fn suite(f: &mut dyn Filter) {
    let a = Tag::new("net1", "ctr-a", "eth0");
    let b = Tag::new("net1", "ctr-b", "eth0");
    let other_net = Tag::new("net2", "ctr-c", "eth0");
    assert!(f.list().unwrap().is_empty());

    let rules = every_kind("10.88.0.5");
    assert_eq!(f.add(&a, &rules).unwrap(), rules);
    // Retried ADD: nothing new.
    assert_eq!(f.add(&a, &rules).unwrap(), Vec::<Rule>::new());
    assert_eq!(f.present(&a, &rules).unwrap(), vec![true; rules.len()]);
    // The same rules are not b's.
    assert_eq!(f.present(&b, &rules).unwrap(), vec![false; rules.len()]);
    let listed = f.list().unwrap();
    assert_eq!(listed.len(), 10, "{listed:#?}");
    assert!(listed
        .iter()
        .any(|e| e.family == "bridge" && e.chain == "prerouting"));

    // b may not take a's port, on any address; nothing of b's is added.
    for clash in [
        port(8080, "10.88.0.6", None),
        port(8080, "10.88.0.6", Some("192.168.1.1")),
    ] {
        let err = f.add(&b, &[masq("10.88.0.6"), clash.clone()]).unwrap_err();
        match err {
            FilterError::PortTaken { holder, what } => {
                assert_eq!(holder, a);
                assert!(what.contains("tcp port 8080"), "{what}");
            }
            e => panic!("{clash}: {e:?}"),
        }
    }
    assert_eq!(f.present(&b, &[masq("10.88.0.6")]).unwrap(), vec![false]);
    // Another port, another protocol, or the other family is free.
    let b_rules = vec![
        masq("10.88.0.6"),
        port(8081, "10.88.0.6", None),
        Rule::PortMap {
            proto: Proto::Udp,
            host_ip: None,
            host_port: 8080,
            dst: ip("10.88.0.6"),
            dst_port: 53,
        },
        port(8080, "fd00::6", None),
    ];
    assert_eq!(f.add(&b, &b_rules).unwrap().len(), 4);
    // Host-address mappings: equal addresses clash, distinct ones do not.
    let c = Tag::new("net1", "ctr-c", "eth0");
    f.add(&c, &[port(9000, "10.88.0.7", Some("192.168.1.1"))])
        .unwrap();
    f.add(&b, &[port(9000, "10.88.0.6", Some("192.168.1.2"))])
        .unwrap();
    assert!(matches!(
        f.add(&a, &[port(9000, "10.88.0.5", None)]),
        Err(FilterError::PortTaken { .. })
    ));
    f.add(&other_net, &[masq("10.99.0.5")]).unwrap();

    // Removing a rule a tag does not have removes nothing.
    assert_eq!(f.remove(&b, &[masq("10.88.0.5")]).unwrap(), 0);
    assert_eq!(f.remove(&a, &[masq("10.88.0.5")]).unwrap(), 1);
    assert_eq!(f.present(&a, &[masq("10.88.0.5")]).unwrap(), vec![false]);
    // DEL of a: every rule of a, nothing of b's.
    assert_eq!(f.remove_all(&a).unwrap(), rules.len() - 1);
    assert_eq!(f.present(&b, &b_rules).unwrap(), vec![true; 4]);
    // GC of net1 keeping b: c's rules go, b's and net2's stay.
    assert_eq!(
        f.sweep(
            &Tag::network_hash("net1"),
            std::slice::from_ref(&b.attachment)
        )
        .unwrap(),
        1
    );
    let left = comments(f);
    assert!(left
        .iter()
        .all(|c| c.contains(&b.attachment) || c.contains(&other_net.attachment)));
    assert_eq!(f.remove_all(&b).unwrap(), 5);
    assert_eq!(f.remove_all(&other_net).unwrap(), 1);
    assert!(f.list().unwrap().is_empty());

    // Bad arguments are refused before anything is touched.
    for bad in [
        port(0, "10.88.0.5", None),
        port(80, "10.88.0.5", Some("fd00::1")),
        port(80, "10.88.0.5", Some("0.0.0.0")),
        Rule::Masquerade {
            source: ip("10.88.0.5"),
            except: vec!["fd00::/64".parse().unwrap()],
        },
        Rule::IsolateBridge {
            bridge: "a/b".into(),
        },
    ] {
        assert!(
            matches!(
                f.add(&a, std::slice::from_ref(&bad)),
                Err(FilterError::Invalid(_))
            ),
            "{bad}"
        );
    }
    assert!(f.list().unwrap().is_empty());
}

#[test]
fn memory_suite() {
    suite(&mut MemoryFilter::new());
}

#[test]
fn a_rule_missing_a_piece_is_not_present_and_is_added_again_whole() {
    let t = Tag::new("n", "c", "eth0");
    let fwd = Rule::AllowForward {
        addr: ip("10.0.0.5"),
    };
    let mut m = MemoryFilter::new();
    m.add(&t, std::slice::from_ref(&fwd)).unwrap();
    assert!(m.delete_one(&t, &fwd));
    assert_eq!(
        m.present(&t, std::slice::from_ref(&fwd)).unwrap(),
        vec![false]
    );
    assert_eq!(
        m.add(&t, std::slice::from_ref(&fwd)).unwrap(),
        vec![fwd.clone()]
    );
    assert_eq!(
        m.present(&t, std::slice::from_ref(&fwd)).unwrap(),
        vec![true]
    );
    assert_eq!(m.remove_all(&t).unwrap(), 1);
    assert!(m.list().unwrap().is_empty());
}

#[test]
fn kernel_suite() {
    require_root!();
    let ns = Netns::new("filter");
    let mut f = KernelFilter::in_namespace(&ns.path).unwrap();
    suite(&mut f);
    // The tables stay, empty.
    let out = ns.exec(&["nft", "list", "ruleset"]);
    assert!(out.contains("table inet wasm_cni"), "{out}");
    assert!(!out.contains("comment"), "{out}");
}

#[test]
fn comments_name_their_owner_and_rule() {
    let t = Tag::new("podman", "0123abcd", "eth0");
    assert_eq!(t.network, Tag::network_hash("podman"));
    assert_eq!(t.attachment.len(), 12);
    assert_ne!(t, Tag::new("podman", "0123abcd", "eth1"));
    assert_ne!(t, Tag::new("podman", "0123abce", "eth0"));
    assert_ne!(t, Tag::new("podman2", "0123abcd", "eth0"));
    let c = t.comment(&port(8080, "10.88.0.5", None));
    assert_eq!(
        c,
        format!(
            "wasm-cni {} {} dnat tcp *:8080 10.88.0.5:80",
            t.network, t.attachment
        )
    );
    let o = Owned::parse(&c).unwrap();
    assert_eq!(o.tag, t);
    assert_eq!(
        o.claim(),
        Some(PortClaim {
            proto: Proto::Tcp,
            host_ip: None,
            port: 8080,
            ipv4: true
        })
    );
    let v6 = t.comment(&port(443, "fd00::5", Some("2001:db8::1")));
    assert!(
        v6.ends_with("dnat tcp [2001:db8::1]:443 [fd00::5]:80"),
        "{v6}"
    );
    assert_eq!(
        Owned::parse(&v6).unwrap().claim().unwrap().host_ip,
        Some(ip("2001:db8::1"))
    );
    // Someone else's comments are not ours.
    for foreign in [
        "",
        "wasm-cni",
        "wasm-cni xyz 123 masq 1.2.3.4",
        "kube-proxy wasm-cni",
        &c.replacen("wasm-cni", "wasm-cnj", 1),
    ] {
        assert_eq!(Owned::parse(foreign), None, "{foreign}");
    }
}

#[test]
fn long_rule_texts_are_cut_but_stay_unique() {
    let t = Tag::new("n", "c", "eth0");
    let long = |last: u16| Rule::PortMap {
        proto: Proto::Sctp,
        host_ip: Some(ip("2001:db8:1111:2222:3333:4444:5555:6666")),
        host_port: 65535,
        dst: ip("fd00:1111:2222:3333:4444:5555:6666:7777"),
        dst_port: last,
    };
    let (a, b) = (t.comment(&long(1)), t.comment(&long(2)));
    assert!(a.len() <= 127 && b.len() <= 127, "{a}");
    assert_ne!(a, b);
    // The claim survives the cut: it comes first.
    assert!(a.contains("dnat sctp [2001:db8:1111:2222:3333:4444:5555:6666]:65535"));
}

#[test]
fn kernel_rules_match_what_nft_prints_and_leave_the_nodes_own_alone() {
    require_root!();
    let ns = Netns::new("nftext");
    // The node's own table and an iptables-nft-style rule, before.
    ns.exec(&[
        "nft",
        "add table ip mine; add chain ip mine input { type filter hook input priority 0; policy accept; }; add rule ip mine input tcp dport 22 counter accept comment \"node\"",
    ]);
    let mine_before = ns.exec(&["nft", "list", "table", "ip", "mine"]);
    let mut f = KernelFilter::in_namespace(&ns.path).unwrap();
    let t = Tag::new("net1", "ctr-a", "eth0");
    f.add(&t, &every_kind("10.88.0.5")).unwrap();
    f.add(&t, &[port(8443, "fd00::5", Some("2001:db8::1"))])
        .unwrap();
    let text = ns.exec(&["nft", "list", "table", "inet", "wasm_cni"]);
    for want in [
        "type nat hook prerouting priority dstnat; policy accept;",
        "type nat hook postrouting priority srcnat; policy accept;",
        "type filter hook forward priority filter; policy accept;",
        "type filter hook forward priority filter - 10; policy accept;",
        "ip saddr 10.88.0.5 ip daddr != 10.88.0.0/16 ip daddr != 224.0.0.0/4 counter packets 0 bytes 0 masquerade",
        "meta nfproto ipv4 fib daddr type local tcp dport 8080 counter packets 0 bytes 0 dnat ip to 10.88.0.5:80",
        "ip6 daddr 2001:db8::1 tcp dport 8443 counter packets 0 bytes 0 dnat ip6 to [fd00::5]:80",
        "ct status dnat ip saddr 10.88.0.5 ip daddr 10.88.0.5 counter packets 0 bytes 0 masquerade",
        "ct status dnat ip saddr 127.0.0.0/8 ip daddr 10.88.0.5 counter packets 0 bytes 0 masquerade",
        "ip daddr 10.88.0.5 ct state established,related counter packets 0 bytes 0 accept",
        "ip saddr 10.88.0.5 counter packets 0 bytes 0 accept",
        "iifname \"cni0\" oifname != \"cni0\" jump isolated",
        "oifname \"cni0\" counter packets 0 bytes 0 drop",
        &format!("comment \"wasm-cni {} {} masq 10.88.0.5 !10.88.0.0/16\"", t.network, t.attachment),
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let bridge = ns.exec(&["nft", "list", "table", "bridge", "wasm_cni"]);
    assert!(
        bridge.contains(
            "iifname \"veth1234\" ether saddr != 0a:58:00:00:00:05 counter packets 0 bytes 0 drop"
        ),
        "{bridge}"
    );
    assert_eq!(f.remove_all(&t).unwrap(), 7);
    assert_eq!(
        ns.exec(&["nft", "list", "table", "ip", "mine"]),
        mine_before
    );
    let all = ns.exec(&["nft", "list", "ruleset"]);
    assert!(!all.contains("wasm-cni"), "{all}");
    // A table deleted behind the backend's back is made again.
    ns.exec(&["nft", "delete", "table", "inet", "wasm_cni"]);
    f.add(&t, &[masq("10.88.0.5")]).unwrap();
    assert!(ns
        .exec(&["nft", "list", "table", "inet", "wasm_cni"])
        .contains("masq 10.88.0.5"));
}

#[test]
fn concurrent_writers_never_both_get_a_port() {
    require_root!();
    let ns = Netns::new("race");
    let path = ns.path.clone();
    let winners: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                s.spawn(move || {
                    let mut f = KernelFilter::in_namespace(&path).unwrap();
                    let t = Tag::new("net", &format!("ctr-{i}"), "eth0");
                    // Unrelated writes between them, to move the generation.
                    f.add(&t, &[masq(&format!("10.88.0.{}", 10 + i))]).unwrap();
                    f.add(&t, &[port(7000, &format!("10.88.0.{}", 10 + i), None)])
                        .is_ok()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(winners.iter().filter(|w| **w).count(), 1, "{winners:?}");
    let text = ns.exec(&["nft", "list", "chain", "inet", "wasm_cni", "prerouting"]);
    assert_eq!(text.matches("dport 7000").count(), 1, "{text}");
}
