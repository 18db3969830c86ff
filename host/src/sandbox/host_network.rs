//! `cni:plugin/network`. Until the kernel backend lands every request is
//! refused: the contract is in place so plugins can be written against it.

use wasmtime::component::Resource;

use super::bindings::cni::plugin::network::{
    Address, Host, HostNetns, Link, LinkSettings, MacvlanMode, NetError, RouteSpec,
};
use super::state::Ctx;

/// A namespace handle held in the store's resource table.
pub struct NetnsHandle;

type R<T> = wasmtime::Result<Result<T, NetError>>;

fn refused<T>() -> R<T> {
    Ok(Err(NetError::Refused(
        "network operations are not available in this host".into(),
    )))
}

impl Host for Ctx {
    fn container_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.charge()?;
        refused()
    }
    fn node_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.charge()?;
        refused()
    }
}

#[allow(unused_variables)]
impl HostNetns for Ctx {
    fn create_veth(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        peer_name: String,
        peer_ns: Resource<NetnsHandle>,
        mtu: Option<u32>,
        mac: Option<String>,
    ) -> R<Link> {
        refused()
    }
    fn ensure_bridge(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        mtu: Option<u32>,
    ) -> R<Link> {
        refused()
    }
    fn create_macvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        refused()
    }
    fn create_macvtap(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: MacvlanMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        refused()
    }
    fn create_tap(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        mtu: Option<u32>,
        mac: Option<String>,
        multi_queue: bool,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> R<Link> {
        refused()
    }
    fn link_by_name(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<Link> {
        refused()
    }
    fn link_by_index(&mut self, ns: Resource<NetnsHandle>, index: u32) -> R<Link> {
        refused()
    }
    fn list_links(&mut self, ns: Resource<NetnsHandle>) -> R<Vec<Link>> {
        refused()
    }
    fn set_link(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        settings: LinkSettings,
    ) -> R<Link> {
        refused()
    }
    fn delete_link(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<()> {
        refused()
    }
    fn add_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        refused()
    }
    fn del_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        refused()
    }
    fn list_addresses(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<Address>> {
        refused()
    }
    fn add_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        refused()
    }
    fn del_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        refused()
    }
    fn list_routes(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        table: Option<u32>,
    ) -> R<Vec<RouteSpec>> {
        refused()
    }
    fn get_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String) -> R<String> {
        refused()
    }
    fn set_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String, value: String) -> R<()> {
        refused()
    }
    fn drop(&mut self, ns: Resource<NetnsHandle>) -> wasmtime::Result<()> {
        self.table.delete(ns)?;
        Ok(())
    }
}
