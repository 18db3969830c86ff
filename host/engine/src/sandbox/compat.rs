//! Released contract versions the host keeps serving, each adapted to the
//! current one: an old import forwards to the current import of the same
//! name, so the policy choke point, the budget and the traces are the same
//! code for every version (`wit/README.md` says what is served and why).
//!
//! Values cross by name, field by field, through serde (the bindings of
//! every version derive it): a field the old version lacks is dropped on
//! the way to the plugin and arrives as `none` on the way to the host. Only
//! components built against an older version pay for it, and their imports
//! are microseconds next to the kernel work they ask for.
//!
//! The released bindings keep wasmtime's plain shape (a trap outside, the
//! WIT error inside); [`split`] turns a current import's `Result<T, Fail<E>>`
//! into it, so a trap stays a trap in every version.

use serde::{de::DeserializeOwned, Serialize};
use wasmtime::component::Resource;

use super::bindings::cni::plugin as now;
use super::bindings::v0_1_0::cni::plugin as v0_1;
use super::fail::split;
use super::host_network::NetnsHandle;
use super::state::Ctx;

/// A value of one contract version as the other's. Every type on both
/// sides comes from the same WIT text but for additions, so this fails
/// only on a host bug: then the call traps (a clean CNI error), rather
/// than the plugin seeing a made-up value.
pub(crate) fn adapt<A: Serialize, B: DeserializeOwned>(value: A) -> wasmtime::Result<B> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|e| wasmtime::format_err!("adapting a value between contract versions: {e}"))
}

/// One verb of a component that exports `cni:plugin/plugin@0.1.0`.
pub(crate) fn call_v0_1(
    guest: &super::bindings::v0_1_0::exports::cni::plugin::plugin::Guest,
    store: &mut wasmtime::Store<Ctx>,
    call: &super::Call<'_>,
) -> wasmtime::Result<Result<Option<now::types::CniResult>, now::types::Error>> {
    use super::Call;
    let answer: Result<Option<v0_1::types::CniResult>, v0_1::types::Error> = match call {
        Call::Add(req) => guest.call_add(&mut *store, &adapt(req)?)?.map(Some),
        Call::Del(req) => guest.call_del(&mut *store, &adapt(req)?)?.map(|()| None),
        Call::Check(req) => guest.call_check(&mut *store, &adapt(req)?)?.map(|()| None),
        Call::Status(conf) => guest.call_status(&mut *store, conf)?.map(|()| None),
        Call::Gc(conf, valid) => {
            let valid: Vec<v0_1::types::Attachment> = adapt(valid)?;
            guest.call_gc(&mut *store, conf, &valid)?.map(|()| None)
        }
    };
    adapt(answer)
}

type R1<T, E> = wasmtime::Result<Result<T, E>>;
type NetR<T> = R1<T, v0_1::network::NetError>;
type Ns = Resource<NetnsHandle>;

impl v0_1::types::Host for Ctx {}

impl v0_1::log::Host for Ctx {
    fn log(&mut self, level: v0_1::log::Level, message: String) -> wasmtime::Result<()> {
        now::log::Host::log(self, adapt(level)?, message)
    }
}

impl v0_1::ipam::Host for Ctx {
    fn add(&mut self) -> R1<v0_1::types::CniResult, v0_1::types::Error> {
        adapt(now::ipam::Host::add(self)?)
    }
    fn del(&mut self) -> R1<(), v0_1::types::Error> {
        adapt(now::ipam::Host::del(self)?)
    }
    fn check(&mut self) -> R1<(), v0_1::types::Error> {
        adapt(now::ipam::Host::check(self)?)
    }
    fn status(&mut self) -> R1<(), v0_1::types::Error> {
        adapt(now::ipam::Host::status(self)?)
    }
    fn gc(&mut self) -> R1<(), v0_1::types::Error> {
        adapt(now::ipam::Host::gc(self)?)
    }
}

type StoreR<T> = R1<T, v0_1::store::StoreError>;

impl v0_1::store::Host for Ctx {
    fn reserve(&mut self, key: String) -> StoreR<bool> {
        adapt(split(now::store::Host::reserve(self, key))?)
    }
    fn release_by_owner(&mut self) -> StoreR<Vec<String>> {
        adapt(split(now::store::Host::release_by_owner(self))?)
    }
    fn release(&mut self, key: String) -> StoreR<bool> {
        adapt(split(now::store::Host::release(self, key))?)
    }
    fn get_by_owner(&mut self) -> StoreR<Vec<String>> {
        adapt(split(now::store::Host::get_by_owner(self))?)
    }
    fn list(&mut self) -> StoreR<Vec<v0_1::store::Entry>> {
        adapt(split(now::store::Host::list(self))?)
    }
    fn now(&mut self) -> wasmtime::Result<u64> {
        now::store::Host::now(self)
    }
    fn get_value(&mut self, name: String) -> StoreR<Option<String>> {
        adapt(split(now::store::Host::get_value(self, name))?)
    }
    fn set_value(&mut self, name: String, value: Option<String>) -> StoreR<()> {
        adapt(split(now::store::Host::set_value(self, name, value))?)
    }
}

impl v0_1::files::Host for Ctx {
    fn read_config_file(&mut self, path: String) -> R1<String, v0_1::files::FileError> {
        adapt(split(now::files::Host::read_config_file(self, path))?)
    }
}

type FilterR = R1<(), v0_1::filter::FilterError>;

impl v0_1::filter::Host for Ctx {
    fn add(&mut self, rules: Vec<v0_1::filter::Rule>) -> FilterR {
        adapt(split(now::filter::Host::add(self, adapt(rules)?))?)
    }
    fn check(&mut self, rules: Vec<v0_1::filter::Rule>) -> FilterR {
        adapt(split(now::filter::Host::check(self, adapt(rules)?))?)
    }
    fn remove(&mut self, rules: Vec<v0_1::filter::Rule>) -> FilterR {
        adapt(split(now::filter::Host::remove(self, adapt(rules)?))?)
    }
}

impl v0_1::network::Host for Ctx {
    fn container_netns(&mut self) -> NetR<Ns> {
        handle(split(now::network::Host::container_netns(self))?)
    }
    fn node_netns(&mut self) -> NetR<Ns> {
        handle(split(now::network::Host::node_netns(self))?)
    }
}

/// A handle is the same host object in every version: only errors adapt.
fn handle(opened: Result<Ns, now::network::NetError>) -> NetR<Ns> {
    Ok(match opened {
        Ok(ns) => Ok(ns),
        Err(e) => Err(adapt(e)?),
    })
}

use now::network::HostNetns as NowNs;
use v0_1::network::{Address, Link, LinkSettings, MacvlanMode, Qdisc, RateLimit, RouteSpec};

impl v0_1::network::HostNetns for Ctx {
    fn create_veth(
        &mut self,
        ns: Ns,
        name: String,
        peer_name: String,
        peer_ns: Ns,
        mtu: Option<u32>,
        mac: Option<String>,
    ) -> NetR<Link> {
        adapt(split(NowNs::create_veth(
            self, ns, name, peer_name, peer_ns, mtu, mac,
        ))?)
    }
    fn ensure_bridge(&mut self, ns: Ns, name: String, mtu: Option<u32>) -> NetR<Link> {
        adapt(split(NowNs::ensure_bridge(self, ns, name, mtu))?)
    }
    fn create_macvlan(
        &mut self,
        ns: Ns,
        name: String,
        master: String,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Ns,
    ) -> NetR<Link> {
        let mode = adapt(mode)?;
        adapt(split(NowNs::create_macvlan(
            self, ns, name, master, mode, mtu, mac, target,
        ))?)
    }
    fn create_macvtap(
        &mut self,
        ns: Ns,
        name: String,
        master: String,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Ns,
    ) -> NetR<Link> {
        let mode = adapt(mode)?;
        adapt(split(NowNs::create_macvtap(
            self, ns, name, master, mode, mtu, mac, target,
        ))?)
    }
    fn create_tap(
        &mut self,
        ns: Ns,
        name: String,
        mtu: Option<u32>,
        mac: Option<String>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> NetR<Link> {
        adapt(split(NowNs::create_tap(
            self,
            ns,
            name,
            mtu,
            mac,
            multi_queue,
            owner,
            group,
        ))?)
    }
    fn link_by_name(&mut self, ns: Ns, name: String) -> NetR<Link> {
        adapt(split(NowNs::link_by_name(self, ns, name))?)
    }
    fn link_by_index(&mut self, ns: Ns, index: u32) -> NetR<Link> {
        adapt(split(NowNs::link_by_index(self, ns, index))?)
    }
    fn list_links(&mut self, ns: Ns) -> NetR<Vec<Link>> {
        adapt(split(NowNs::list_links(self, ns))?)
    }
    fn set_link(&mut self, ns: Ns, name: String, settings: LinkSettings) -> NetR<Link> {
        let settings = adapt(settings)?;
        adapt(split(NowNs::set_link(self, ns, name, settings))?)
    }
    fn delete_link(&mut self, ns: Ns, name: String) -> NetR<()> {
        adapt(split(NowNs::delete_link(self, ns, name))?)
    }
    fn add_address(&mut self, ns: Ns, link: String, address: Address) -> NetR<()> {
        let address = adapt(address)?;
        adapt(split(NowNs::add_address(self, ns, link, address))?)
    }
    fn del_address(&mut self, ns: Ns, link: String, address: Address) -> NetR<()> {
        let address = adapt(address)?;
        adapt(split(NowNs::del_address(self, ns, link, address))?)
    }
    fn list_addresses(&mut self, ns: Ns, link: String) -> NetR<Vec<Address>> {
        adapt(split(NowNs::list_addresses(self, ns, link))?)
    }
    fn add_route(&mut self, ns: Ns, route: RouteSpec) -> NetR<()> {
        let route = adapt(route)?;
        adapt(split(NowNs::add_route(self, ns, route))?)
    }
    fn del_route(&mut self, ns: Ns, route: RouteSpec) -> NetR<()> {
        let route = adapt(route)?;
        adapt(split(NowNs::del_route(self, ns, route))?)
    }
    fn list_routes(&mut self, ns: Ns, link: String, table: Option<u32>) -> NetR<Vec<RouteSpec>> {
        adapt(split(NowNs::list_routes(self, ns, link, table))?)
    }
    fn create_ifb(&mut self, ns: Ns, name: String, mtu: Option<u32>) -> NetR<Link> {
        adapt(split(NowNs::create_ifb(self, ns, name, mtu))?)
    }
    fn limit_rate(&mut self, ns: Ns, link: String, limit: RateLimit) -> NetR<()> {
        let limit = adapt(limit)?;
        adapt(split(NowNs::limit_rate(self, ns, link, limit))?)
    }
    fn has_rate_limit(&mut self, ns: Ns, link: String, limit: RateLimit) -> NetR<bool> {
        let limit = adapt(limit)?;
        adapt(split(NowNs::has_rate_limit(self, ns, link, limit))?)
    }
    fn redirect_ingress(&mut self, ns: Ns, link: String, to: String) -> NetR<()> {
        adapt(split(NowNs::redirect_ingress(self, ns, link, to))?)
    }
    fn list_qdiscs(&mut self, ns: Ns, link: String) -> NetR<Vec<Qdisc>> {
        adapt(split(NowNs::list_qdiscs(self, ns, link))?)
    }
    fn get_sysctl(&mut self, ns: Ns, key: String) -> NetR<String> {
        adapt(split(NowNs::get_sysctl(self, ns, key))?)
    }
    fn set_sysctl(&mut self, ns: Ns, key: String, value: String) -> NetR<()> {
        adapt(split(NowNs::set_sysctl(self, ns, key, value))?)
    }
    fn drop(&mut self, ns: Ns) -> wasmtime::Result<()> {
        NowNs::drop(self, ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_now() -> now::network::Link {
        now::network::Link {
            index: 7,
            name: "eth0".into(),
            kind: "vlan".into(),
            mac: "02:00:00:00:00:01".into(),
            mtu: 1500,
            up: true,
            oper_up: false,
            master: Some(3),
            peer_index: None,
            promisc: false,
            allmulti: true,
            txqlen: 1000,
            macvlan_mode: Some(now::network::MacvlanMode::Vepa),
            vlan_id: Some(42),
            ipvlan_mode: Some(now::network::IpvlanMode::L3s),
        }
    }

    #[test]
    fn a_link_loses_only_the_fields_0_1_0_lacks() {
        let old: v0_1::network::Link = adapt(link_now()).unwrap();
        assert_eq!(old.index, 7);
        assert_eq!(old.name, "eth0");
        assert_eq!(old.master, Some(3));
        assert!(old.allmulti && !old.oper_up);
        assert!(matches!(
            old.macvlan_mode,
            Some(v0_1::network::MacvlanMode::Vepa)
        ));
        // And back: what 0.1.0 lacks comes up as none.
        let again: now::network::Link = adapt(old).unwrap();
        assert_eq!(again.vlan_id, None);
        assert!(again.ipvlan_mode.is_none());
        assert_eq!(again.txqlen, 1000);
    }

    #[test]
    fn errors_and_rules_keep_their_case_and_payload() {
        let e: v0_1::network::NetError =
            adapt(now::network::NetError::Kernel((-17, "exists".into()))).unwrap();
        assert!(matches!(e, v0_1::network::NetError::Kernel((-17, ref m)) if m == "exists"));
        let r: Result<u32, now::store::StoreError> =
            adapt(Ok::<u32, v0_1::store::StoreError>(5)).unwrap();
        assert!(matches!(r, Ok(5)));
        let rule: now::filter::Rule = adapt(v0_1::filter::Rule::PortMap(v0_1::filter::PortMap {
            protocol: v0_1::filter::Protocol::Sctp,
            host_ip: None,
            host_port: 8080,
            address: "10.0.0.2".into(),
            port: 80,
        }))
        .unwrap();
        assert!(matches!(
            rule,
            now::filter::Rule::PortMap(now::filter::PortMap {
                protocol: now::filter::Protocol::Sctp,
                host_port: 8080,
                port: 80,
                ..
            })
        ));
    }
}
