//! Between the WIT result type and the host's CNI model. Both are the CNI
//! 1.1 shape, so this is field-for-field.

use super::wit;
use wasm_cni_protocol::result::{CniResult, Dns, Interface, IpConfig, Route};

pub fn to_wit(r: &CniResult) -> wit::CniResult {
    wit::CniResult {
        interfaces: r
            .interfaces
            .iter()
            .map(|i| wit::Interface {
                name: i.name.clone(),
                mac: i.mac.clone(),
                mtu: i.mtu,
                sandbox: i.sandbox.clone(),
                socket_path: i.socket_path.clone(),
                pci_id: i.pci_id.clone(),
            })
            .collect(),
        ips: r
            .ips
            .iter()
            .map(|ip| wit::IpConfig {
                address: ip.address.clone(),
                gateway: ip.gateway.clone(),
                interface: ip.interface,
            })
            .collect(),
        routes: r
            .routes
            .iter()
            .map(|rt| wit::Route {
                dst: rt.dst.clone(),
                gw: rt.gw.clone(),
                mtu: rt.mtu,
                advmss: rt.advmss,
                priority: rt.priority,
                table: rt.table,
                scope: rt.scope,
            })
            .collect(),
        dns: r.dns.as_ref().map(|d| wit::Dns {
            nameservers: d.nameservers.clone(),
            domain: d.domain.clone(),
            search: d.search.clone(),
            options: d.options.clone(),
        }),
    }
}

pub fn from_wit(r: wit::CniResult) -> CniResult {
    CniResult {
        interfaces: r
            .interfaces
            .into_iter()
            .map(|i| Interface {
                name: i.name,
                mac: i.mac,
                mtu: i.mtu,
                sandbox: i.sandbox,
                socket_path: i.socket_path,
                pci_id: i.pci_id,
            })
            .collect(),
        ips: r
            .ips
            .into_iter()
            .map(|ip| IpConfig {
                address: ip.address,
                gateway: ip.gateway,
                interface: ip.interface,
            })
            .collect(),
        routes: r
            .routes
            .into_iter()
            .map(|rt| Route {
                dst: rt.dst,
                gw: rt.gw,
                mtu: rt.mtu,
                advmss: rt.advmss,
                priority: rt.priority,
                table: rt.table,
                scope: rt.scope,
            })
            .collect(),
        dns: r.dns.map(|d| Dns {
            nameservers: d.nameservers,
            domain: d.domain,
            search: d.search,
            options: d.options,
        }),
    }
}
