//! The WIT side: the one `wit_bindgen::generate!` of the SDK, conversions
//! between generated and plain types, [`WitHost`] / [`WitNs`] (the
//! [`Host`] / [`Ops`] implementations over the real imports) and the
//! [`Adapter`] that exports a [`Plugin`]. Plugins export themselves with
//! [`crate::export_plugin!`].

use std::marker::PhantomData;

use crate::error::CniError;
use crate::host::{Host, Level, Plugin, StoreEntry, StoreError};
use crate::net::{
    IpvlanMode, Link, LinkSettings, MacvlanMode, NetError, NetResult, Ops, Qdisc, RateLimit,
    RouteSpec,
};
use crate::types::{Attachment, CniResult, Dns, Interface, IpConfig, Request, Route};

/// The generated bindings of world `interface-plugin`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "interface-plugin",
        pub_export_macro: true,
        // The SDK's `Link` and modes are the contract's own types, compared
        // in plugins' tests.
        additional_derives: [PartialEq, Eq],
        runtime_path: "wasm_cni_sdk::__private::wit_bindgen::rt",
    });
}

use crate::filter::{FilterError, Protocol, Rule};
use bindings::cni::plugin::{filter as wf, ipam, log, network as wnet, store, types as wt};

// ---------------------------------------------------------------- types

impl From<wt::Attachment> for Attachment {
    fn from(a: wt::Attachment) -> Self {
        Self {
            container_id: a.container_id,
            ifname: a.ifname,
        }
    }
}

impl From<wt::Interface> for Interface {
    fn from(i: wt::Interface) -> Self {
        Self {
            name: i.name,
            mac: i.mac,
            mtu: i.mtu,
            sandbox: i.sandbox,
            socket_path: i.socket_path,
            pci_id: i.pci_id,
        }
    }
}

impl From<Interface> for wt::Interface {
    fn from(i: Interface) -> Self {
        Self {
            name: i.name,
            mac: i.mac,
            mtu: i.mtu,
            sandbox: i.sandbox,
            socket_path: i.socket_path,
            pci_id: i.pci_id,
        }
    }
}

impl From<wt::IpConfig> for IpConfig {
    fn from(i: wt::IpConfig) -> Self {
        Self {
            address: i.address,
            gateway: i.gateway,
            interface: i.interface,
        }
    }
}

impl From<IpConfig> for wt::IpConfig {
    fn from(i: IpConfig) -> Self {
        Self {
            address: i.address,
            gateway: i.gateway,
            interface: i.interface,
        }
    }
}

impl From<wt::Route> for Route {
    fn from(r: wt::Route) -> Self {
        Self {
            dst: r.dst,
            gw: r.gw,
            mtu: r.mtu,
            advmss: r.advmss,
            priority: r.priority,
            table: r.table,
            scope: r.scope,
        }
    }
}

impl From<Route> for wt::Route {
    fn from(r: Route) -> Self {
        Self {
            dst: r.dst,
            gw: r.gw,
            mtu: r.mtu,
            advmss: r.advmss,
            priority: r.priority,
            table: r.table,
            scope: r.scope,
        }
    }
}

impl From<wt::Dns> for Dns {
    fn from(d: wt::Dns) -> Self {
        Self {
            nameservers: d.nameservers,
            domain: d.domain,
            search: d.search,
            options: d.options,
        }
    }
}

impl From<Dns> for wt::Dns {
    fn from(d: Dns) -> Self {
        Self {
            nameservers: d.nameservers,
            domain: d.domain,
            search: d.search,
            options: d.options,
        }
    }
}

impl From<wt::CniResult> for CniResult {
    fn from(r: wt::CniResult) -> Self {
        Self {
            interfaces: r.interfaces.into_iter().map(Into::into).collect(),
            ips: r.ips.into_iter().map(Into::into).collect(),
            routes: r.routes.into_iter().map(Into::into).collect(),
            dns: r.dns.map(Into::into),
        }
    }
}

impl From<CniResult> for wt::CniResult {
    fn from(r: CniResult) -> Self {
        Self {
            interfaces: r.interfaces.into_iter().map(Into::into).collect(),
            ips: r.ips.into_iter().map(Into::into).collect(),
            routes: r.routes.into_iter().map(Into::into).collect(),
            dns: r.dns.map(Into::into),
        }
    }
}

impl From<wt::Request> for Request {
    fn from(r: wt::Request) -> Self {
        Self {
            container_id: r.container_id,
            ifname: r.ifname,
            netns: r.netns,
            args: r.args,
            config: r.config,
            prev_result: r.prev_result.map(Into::into),
        }
    }
}

impl From<wt::Error> for CniError {
    fn from(e: wt::Error) -> Self {
        Self {
            code: e.code,
            msg: e.msg,
            details: e.details,
        }
    }
}

impl From<CniError> for wt::Error {
    fn from(e: CniError) -> Self {
        Self {
            code: e.code,
            msg: e.msg,
            details: e.details,
        }
    }
}

// -------------------------------------------------------------- network

impl From<wnet::NetError> for NetError {
    fn from(e: wnet::NetError) -> Self {
        match e {
            wnet::NetError::Exists(m) => Self::Exists(m),
            wnet::NetError::NotFound(m) => Self::NotFound(m),
            wnet::NetError::Refused(m) => Self::Refused(m),
            wnet::NetError::Invalid(m) => Self::Invalid(m),
            wnet::NetError::Kernel((errno, m)) => Self::Kernel(errno, m),
        }
    }
}

impl From<wnet::RouteSpec> for RouteSpec {
    fn from(r: wnet::RouteSpec) -> Self {
        Self {
            dst: r.dst,
            gw: r.gw,
            dev: r.dev,
            src: r.src,
            mtu: r.mtu,
            advmss: r.advmss,
            priority: r.priority,
            table: r.table,
            scope: r.scope,
        }
    }
}

fn route_to_wit(r: &RouteSpec) -> wnet::RouteSpec {
    wnet::RouteSpec {
        dst: r.dst.clone(),
        gw: r.gw.clone(),
        dev: r.dev.clone(),
        src: r.src.clone(),
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    }
}

fn settings_to_wit(s: &LinkSettings) -> wnet::LinkSettings {
    wnet::LinkSettings {
        up: s.up,
        mtu: s.mtu,
        mac: s.mac.clone(),
        master: s.master.clone(),
        promisc: s.promisc,
        allmulti: s.allmulti,
        txqlen: s.txqlen,
        hairpin: s.hairpin,
    }
}

fn address(cidr: &str) -> wnet::Address {
    wnet::Address {
        cidr: cidr.to_string(),
    }
}

/// A network namespace handle from the host (the WIT `netns` resource).
pub struct WitNs(wnet::Netns);

impl Ops for WitNs {
    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_ns: &Self,
        mtu: Option<u32>,
        mac: Option<&str>,
    ) -> NetResult<Link> {
        Ok(self.0.create_veth(name, peer_name, &peer_ns.0, mtu, mac)?)
    }

    fn ensure_bridge(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        Ok(self.0.ensure_bridge(name, mtu)?)
    }

    fn create_macvlan(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link> {
        Ok(self
            .0
            .create_macvlan(name, master, mode, mtu, mac, &target.0)?)
    }

    fn create_macvtap(
        &self,
        name: &str,
        master: &str,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<&str>,
        target: &Self,
    ) -> NetResult<Link> {
        Ok(self
            .0
            .create_macvtap(name, master, mode, mtu, mac, &target.0)?)
    }

    fn create_vlan(
        &self,
        name: &str,
        master: &str,
        vlan_id: u16,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link> {
        Ok(self.0.create_vlan(name, master, vlan_id, mtu, &target.0)?)
    }

    fn create_ipvlan(
        &self,
        name: &str,
        master: &str,
        mode: IpvlanMode,
        mtu: Option<u32>,
        target: &Self,
    ) -> NetResult<Link> {
        Ok(self.0.create_ipvlan(name, master, mode, mtu, &target.0)?)
    }

    fn create_tap(
        &self,
        name: &str,
        mtu: Option<u32>,
        mac: Option<&str>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> NetResult<Link> {
        Ok(self
            .0
            .create_tap(name, mtu, mac, multi_queue, owner, group)?)
    }

    fn link_by_name(&self, name: &str) -> NetResult<Link> {
        Ok(self.0.link_by_name(name)?)
    }

    fn link_by_index(&self, index: u32) -> NetResult<Link> {
        Ok(self.0.link_by_index(index)?)
    }

    fn list_links(&self) -> NetResult<Vec<Link>> {
        Ok(self.0.list_links()?)
    }

    fn set_link(&self, name: &str, settings: &LinkSettings) -> NetResult<Link> {
        Ok(self.0.set_link(name, &settings_to_wit(settings))?)
    }

    fn delete_link(&self, name: &str) -> NetResult<()> {
        Ok(self.0.delete_link(name)?)
    }

    fn add_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        Ok(self.0.add_address(link, &address(cidr))?)
    }

    fn del_address(&self, link: &str, cidr: &str) -> NetResult<()> {
        Ok(self.0.del_address(link, &address(cidr))?)
    }

    fn list_addresses(&self, link: &str) -> NetResult<Vec<String>> {
        Ok(self
            .0
            .list_addresses(link)?
            .into_iter()
            .map(|a| a.cidr)
            .collect())
    }

    fn add_route(&self, route: &RouteSpec) -> NetResult<()> {
        Ok(self.0.add_route(&route_to_wit(route))?)
    }

    fn del_route(&self, route: &RouteSpec) -> NetResult<()> {
        Ok(self.0.del_route(&route_to_wit(route))?)
    }

    fn list_routes(&self, link: &str, table: Option<u32>) -> NetResult<Vec<RouteSpec>> {
        Ok(self
            .0
            .list_routes(link, table)?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    fn get_sysctl(&self, key: &str) -> NetResult<String> {
        Ok(self.0.get_sysctl(key)?)
    }

    fn set_sysctl(&self, key: &str, value: &str) -> NetResult<()> {
        Ok(self.0.set_sysctl(key, value)?)
    }

    fn create_ifb(&self, name: &str, mtu: Option<u32>) -> NetResult<Link> {
        Ok(self.0.create_ifb(name, mtu)?)
    }

    fn limit_rate(&self, link: &str, limit: RateLimit) -> NetResult<()> {
        Ok(self.0.limit_rate(
            link,
            wnet::RateLimit {
                rate: limit.rate,
                burst: limit.burst,
            },
        )?)
    }

    fn has_rate_limit(&self, link: &str, limit: RateLimit) -> NetResult<bool> {
        Ok(self.0.has_rate_limit(
            link,
            wnet::RateLimit {
                rate: limit.rate,
                burst: limit.burst,
            },
        )?)
    }

    fn redirect_ingress(&self, link: &str, to: &str) -> NetResult<()> {
        Ok(self.0.redirect_ingress(link, to)?)
    }

    fn list_qdiscs(&self, link: &str) -> NetResult<Vec<Qdisc>> {
        Ok(self
            .0
            .list_qdiscs(link)?
            .into_iter()
            .map(|q| Qdisc {
                kind: q.kind,
                handle: q.handle,
                parent: q.parent,
                tbf_rate: q.tbf_rate,
                tbf_buffer: q.tbf_buffer,
                tbf_limit: q.tbf_limit,
            })
            .collect())
    }
}

// ----------------------------------------------------------------- host

impl From<store::StoreError> for StoreError {
    fn from(e: store::StoreError) -> Self {
        match e {
            store::StoreError::Refused(m) => Self::Refused(m),
            store::StoreError::Io(m) => Self::Io(m),
        }
    }
}

/// The real host: every call is a WIT import.
#[derive(Clone, Copy, Debug, Default)]
pub struct WitHost;

impl From<wf::FilterError> for FilterError {
    fn from(e: wf::FilterError) -> Self {
        match e {
            wf::FilterError::Refused(m) => Self::Refused(m),
            wf::FilterError::Invalid(m) => Self::Invalid(m),
            wf::FilterError::PortTaken(m) => Self::PortTaken(m),
            wf::FilterError::Missing(m) => Self::Missing(m),
            wf::FilterError::Kernel((errno, m)) => Self::Kernel(errno, m),
        }
    }
}

fn rule_to_wit(r: &Rule) -> wf::Rule {
    match r {
        Rule::Masquerade { source, except } => wf::Rule::Masquerade(wf::Masquerade {
            source: source.clone(),
            except: except.clone(),
        }),
        Rule::PortMap {
            protocol,
            host_ip,
            host_port,
            address,
            port,
        } => wf::Rule::PortMap(wf::PortMap {
            protocol: match protocol {
                Protocol::Tcp => wf::Protocol::Tcp,
                Protocol::Udp => wf::Protocol::Udp,
                Protocol::Sctp => wf::Protocol::Sctp,
            },
            host_ip: host_ip.clone(),
            host_port: *host_port,
            address: address.clone(),
            port: *port,
        }),
        Rule::HairpinMasquerade(a) => wf::Rule::HairpinMasquerade(a.clone()),
        Rule::AllowForward(a) => wf::Rule::AllowForward(a.clone()),
        Rule::IsolateBridge(b) => wf::Rule::IsolateBridge(b.clone()),
        Rule::MacSpoofCheck { link, mac } => wf::Rule::MacSpoofCheck(wf::MacSpoofCheck {
            link: link.clone(),
            mac: mac.clone(),
        }),
    }
}

fn rules_to_wit(rules: &[Rule]) -> Vec<wf::Rule> {
    rules.iter().map(rule_to_wit).collect()
}

impl Host for WitHost {
    type Ns = WitNs;

    fn container_netns(&self) -> Result<WitNs, NetError> {
        Ok(WitNs(wnet::container_netns()?))
    }

    fn node_netns(&self) -> Result<WitNs, NetError> {
        Ok(WitNs(wnet::node_netns()?))
    }

    fn ipam_add(&self) -> Result<CniResult, CniError> {
        Ok(ipam::add()?.into())
    }

    fn ipam_del(&self) -> Result<(), CniError> {
        Ok(ipam::del()?)
    }

    fn ipam_check(&self) -> Result<(), CniError> {
        Ok(ipam::check()?)
    }

    fn ipam_status(&self) -> Result<(), CniError> {
        Ok(ipam::status()?)
    }

    fn ipam_gc(&self) -> Result<(), CniError> {
        Ok(ipam::gc()?)
    }

    fn store_reserve(&self, key: &str) -> Result<bool, StoreError> {
        Ok(store::reserve(key)?)
    }

    fn store_release_by_owner(&self) -> Result<Vec<String>, StoreError> {
        Ok(store::release_by_owner()?)
    }

    fn store_release(&self, key: &str) -> Result<bool, StoreError> {
        Ok(store::release(key)?)
    }

    fn store_get_by_owner(&self) -> Result<Vec<String>, StoreError> {
        Ok(store::get_by_owner()?)
    }

    fn store_list(&self) -> Result<Vec<StoreEntry>, StoreError> {
        Ok(store::list()?
            .into_iter()
            .map(|e| StoreEntry {
                key: e.key,
                owner: e.owner.into(),
                allocated_at: e.allocated_at,
                released_at: e.released_at,
            })
            .collect())
    }

    fn store_now(&self) -> u64 {
        store::now()
    }

    fn store_get_value(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(store::get_value(name)?)
    }

    fn store_set_value(&self, name: &str, value: Option<&str>) -> Result<(), StoreError> {
        Ok(store::set_value(name, value)?)
    }

    fn filter_add(&self, rules: &[Rule]) -> Result<(), FilterError> {
        Ok(wf::add(&rules_to_wit(rules))?)
    }

    fn filter_check(&self, rules: &[Rule]) -> Result<(), FilterError> {
        Ok(wf::check(&rules_to_wit(rules))?)
    }

    fn filter_remove(&self, rules: &[Rule]) -> Result<(), FilterError> {
        Ok(wf::remove(&rules_to_wit(rules))?)
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Error => log::Level::Error,
            Level::Warn => log::Level::Warn,
            Level::Info => log::Level::Info,
            Level::Debug => log::Level::Debug,
        };
        log::log(level, message);
    }
}

// --------------------------------------------------------------- export

/// Implements the generated `Guest` trait for any [`Plugin`].
pub struct Adapter<P>(PhantomData<P>);

impl<P: Plugin> bindings::exports::cni::plugin::plugin::Guest for Adapter<P> {
    fn add(req: wt::Request) -> Result<wt::CniResult, wt::Error> {
        P::add(&WitHost, &req.into())
            .map(Into::into)
            .map_err(Into::into)
    }

    fn del(req: wt::Request) -> Result<(), wt::Error> {
        P::del(&WitHost, &req.into()).map_err(Into::into)
    }

    fn check(req: wt::Request) -> Result<(), wt::Error> {
        P::check(&WitHost, &req.into()).map_err(Into::into)
    }

    fn status(config: String) -> Result<(), wt::Error> {
        P::status(&WitHost, &config).map_err(Into::into)
    }

    fn gc(config: String, valid_attachments: Vec<wt::Attachment>) -> Result<(), wt::Error> {
        let valid: Vec<Attachment> = valid_attachments.into_iter().map(Into::into).collect();
        P::gc(&WitHost, &config, &valid).map_err(Into::into)
    }
}

/// Exports `$plugin` (a type implementing [`Plugin`]) as the component's
/// `cni:plugin/plugin` interface.
///
/// The export symbols (`cni:plugin/plugin@0.2.2#add`, ...) are only emitted
/// for wasm32: a native `cdylib` cannot carry such names (the linker's
/// version script rejects them), so natively the macro only checks that the
/// adapter implements the generated `Guest` trait.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        type __WasmCniExport = $crate::guest::Adapter<$plugin>;
        #[cfg(target_arch = "wasm32")]
        $crate::guest::bindings::export!(__WasmCniExport with_types_in $crate::guest::bindings);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn() = || {
            fn exportable<T: $crate::guest::bindings::exports::cni::plugin::plugin::Guest>() {}
            exportable::<$crate::guest::Adapter<$plugin>>();
        };
    };
}
