//! Assertions the plugins' native tests share: behaviour several interface
//! plugins must have alike, checked once here against any [`Plugin`]. Each
//! panics (fails the calling test) on a mismatch.

// Test helpers: failing loudly is their job.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use crate::error::CniError;
use crate::host::Plugin;
use crate::net::{LinkSettings, NetError, Ops};
use crate::types::Request;

use super::{FakeHost, NsId};

/// The container MAC follows `mac` < CNI_ARGS `MAC` < `runtimeConfig.mac`
/// (ADD, then DEL, three times). `conf(extra)` is the plugin's config with
/// `extra` members. Returns the last request, its ADD done.
pub fn assert_mac_priority<P: Plugin>(host: &FakeHost, conf: impl Fn(&str) -> String) -> Request {
    let mut req = host.request(&conf(r#""mac":"02:00:00:00:00:01""#));
    let ifname = req.ifname.clone();
    P::add(host, &req).unwrap();
    assert_eq!(
        host.link(NsId::Container, &ifname).unwrap().mac,
        "02:00:00:00:00:01"
    );
    P::del(host, &req).unwrap();
    req.args = vec![("MAC".into(), "02:00:00:00:00:02".into())];
    P::add(host, &req).unwrap();
    assert_eq!(
        host.link(NsId::Container, &ifname).unwrap().mac,
        "02:00:00:00:00:02"
    );
    P::del(host, &req).unwrap();
    req.config = conf(r#""mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}"#);
    let r = P::add(host, &req).unwrap();
    assert_eq!(r.interfaces[0].mac.as_deref(), Some("02:00:00:00:00:03"));
    req
}

/// An ADD with IPAM (`config`) that fails leaves the namespaces as they
/// were: when IPAM ADD fails (its error returned as is), and when a route
/// fails after it (the allocation is released: IPAM ADD then DEL).
/// `new_host` makes a fresh host whose IPAM returns a route.
pub fn assert_failed_ipam_add_rolls_back<P: Plugin>(new_host: impl Fn() -> FakeHost, config: &str) {
    let host = new_host();
    let before = host.snapshot();
    host.set_ipam_error("add", CniError::internal("range exhausted"));
    let e = P::add(&host, &host.request(config)).unwrap_err();
    assert_eq!(e.msg, "range exhausted");
    assert_eq!(host.snapshot(), before);

    let host = new_host();
    let before = host.snapshot();
    host.fail_next(
        "add_route",
        "",
        NetError::Kernel(-22, "invalid argument".into()),
    );
    P::add(&host, &host.request(config)).unwrap_err();
    assert_eq!(host.ipam_calls(), ["add", "del"]);
    assert!(!host.ipam_allocated());
    assert_eq!(host.snapshot(), before);
}

/// DEL succeeds before any ADD (with `first_config`, which ADD may not
/// even accept) and twice after one (with `config`, which has IPAM): the
/// container keeps only `lo`, and every DEL runs IPAM DEL. Returns the
/// request of `config`.
pub fn assert_del_is_idempotent<P: Plugin>(
    host: &FakeHost,
    first_config: &str,
    config: &str,
) -> Request {
    P::del(host, &host.request(first_config)).unwrap();
    let req = host.request(config);
    P::add(host, &req).unwrap();
    P::del(host, &req).unwrap();
    P::del(host, &req).unwrap();
    assert_eq!(host.link_names(NsId::Container), ["lo"]);
    assert_eq!(host.ipam_calls(), ["del", "add", "del", "del"]);
    req
}

/// STATUS and GC call the IPAM plugin's when the config has one
/// (`l3_config`), and nothing otherwise (`l2_config`).
pub fn assert_status_and_gc_go_to_ipam<P: Plugin>(
    host: &FakeHost,
    l2_config: &str,
    l3_config: &str,
) {
    P::status(host, l2_config).unwrap();
    P::gc(host, l2_config, &[]).unwrap();
    assert!(host.ipam_calls().is_empty());
    P::status(host, l3_config).unwrap();
    P::gc(host, l3_config, &[]).unwrap();
    assert_eq!(host.ipam_calls(), ["status", "gc"]);
}

/// For a plugin that picks a master link (macvlan, macvtap): without
/// `master` in `config`, the master is the link of the node's IPv4 default
/// route, else of its IPv6 one. With neither, ADD fails (999 `no default
/// route interface found`) and changes nothing; with only an IPv6 one, on a
/// 9000-byte link, the container link gets that master's MTU.
pub fn assert_default_master_needs_a_default_route<P: Plugin>(config: &str) {
    let host = FakeHost::new("eth0");
    host.remove_route(NsId::Node, "0.0.0.0/0");
    let before = host.snapshot();
    let e = P::add(&host, &host.request(config)).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (999, "no default route interface found")
    );
    assert_eq!(host.snapshot(), before);
    host.add_link(NsId::Node, "ens4", "device", 9000);
    host.allow_node_link("ens4");
    host.add_default_route(NsId::Node, "ens4", "fe80::1");
    let req = host.request(config);
    P::add(&host, &req).unwrap();
    assert_eq!(host.link(NsId::Container, &req.ifname).unwrap().mtu, 9000);
}

/// The host grants a stacked link's master as the config names it, or,
/// without one, the node's default-route link (`ens3`), and no other node
/// link: both ADDs pass its policy with nothing granted by hand, and only
/// the named master may then be changed. `conf(extra)` is the plugin's
/// config with `extra` members; `kind` the link it makes.
pub fn assert_master_granted_as_the_host_grants<P: Plugin>(
    conf: impl Fn(&str) -> String,
    kind: &str,
) {
    for extra in [r#""master":"ens9""#, ""] {
        let host = FakeHost::new("eth0");
        host.add_link(NsId::Node, "ens9", "device", 1500);
        let req = host.request(&conf(extra));
        P::add(&host, &req).unwrap();
        assert_eq!(host.link(NsId::Container, "eth0").unwrap().kind, kind);
        let changed = host.ns(NsId::Node).set_link("ens9", &LinkSettings::up());
        let named = !extra.is_empty();
        assert_eq!(changed.is_ok(), named, "{changed:?}");
    }
}
