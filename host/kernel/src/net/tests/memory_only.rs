//! What only the memory model can be asked: the state `LinkInfo` does not
//! carry, and its namespace bookkeeping.

use std::path::Path;

use crate::net::{LinkChange, MemoryNet, Net, NetError, NsRef};

use super::support::memory_env;

#[test]
fn namespaces_are_opened_by_path() {
    let mut net = MemoryNet::new();
    let node = net.open(NsRef::Current).unwrap();
    let id = net.add_namespace("/run/netns/x");
    assert_eq!(net.add_namespace("/run/netns/x"), id);
    assert_eq!(
        net.open(NsRef::Path(Path::new("/run/netns/x"))).unwrap(),
        id
    );
    assert!(net.same_ns(id, id) && !net.same_ns(id, node));
    let missing = net.open(NsRef::Path(Path::new("/run/netns/missing")));
    assert!(matches!(missing, Err(NetError::NotFound(_))));
    // Every namespace starts with its own `lo`.
    assert_eq!(net.links(id).unwrap().len(), 1);
    assert_eq!(net.links(node).unwrap().len(), 1);
}

/// What `plugin test` relies on: a namespace removed takes its links and
/// their veth peers with it, its path no longer opens, and `dump` tells
/// states apart.
#[test]
fn a_removed_namespace_takes_its_veths_and_dump_shows_it() {
    let mut net = MemoryNet::new();
    let node = net.open(NsRef::Current).unwrap();
    let path = Path::new("/run/netns/gone");
    let ctr = net.add_namespace(path);
    net.add_device(node, "up0", 1500, Some("02:00:00:00:00:09"))
        .unwrap();
    let before = net.dump(node);
    net.create_veth(node, "vh0", "eth0", ctr, None, None)
        .unwrap();
    assert_ne!(net.dump(node), before);
    assert!(net.dump(ctr).iter().any(|l| l.contains(" eth0 veth ")));
    assert!(net.remove_namespace(path));
    assert!(!net.remove_namespace(path));
    assert!(matches!(
        net.open(NsRef::Path(path)),
        Err(NetError::NotFound(_))
    ));
    assert!(matches!(
        net.link_by_name(node, "vh0"),
        Err(NetError::NotFound(_))
    ));
    assert_eq!(net.dump(node), before);
    assert!(before.iter().any(|l| l.contains("up0 device mtu 1500 up")));
}

#[test]
fn hairpin_and_tap_owner_are_recorded() {
    let (mut net, a, b) = memory_env();
    net.ensure_bridge(a, "br0", None).unwrap();
    net.create_veth(a, "v0", "v1", b, None, None).unwrap();
    let change = LinkChange {
        master: Some("br0".into()),
        hairpin: Some(true),
        ..LinkChange::default()
    };
    net.set_link(a, "v0", &change).unwrap();
    assert!(net.hairpin(a, "v0").unwrap());
    let release = LinkChange {
        master: Some(String::new()),
        ..LinkChange::default()
    };
    net.set_link(a, "v0", &release).unwrap();
    assert!(
        !net.hairpin(a, "v0").unwrap(),
        "leaving the bridge clears it"
    );

    net.create_tap(a, "tap0", None, None, false, Some(1000), Some(100))
        .unwrap();
    assert_eq!(net.tap_owner(a, "tap0").unwrap(), (Some(1000), Some(100)));
}

#[test]
fn defined_sysctls() {
    let (mut net, a, b) = memory_env();
    assert!(matches!(
        net.sysctl_get(a, "net.core.somaxconn"),
        Err(NetError::NotFound(_))
    ));
    net.define_sysctl(a, "net.core.somaxconn", "4096\n")
        .unwrap();
    assert_eq!(net.sysctl_get(a, "net.core.somaxconn").unwrap(), "4096");
    net.sysctl_set(a, "net.core.somaxconn", "128").unwrap();
    assert_eq!(net.sysctl_get(a, "net.core.somaxconn").unwrap(), "128");
    assert!(matches!(
        net.sysctl_get(b, "net.core.somaxconn"),
        Err(NetError::NotFound(_))
    ));
    assert!(matches!(
        net.define_sysctl(a, "net/core", "1"),
        Err(NetError::Invalid(_))
    ));
}
