//! `host-local`: the reference host-local IPAM plugin as a component.
//!
//! Allocations live in the host's state store (scope: network, `host-local`)
//! instead of one file per address; the host serialises every call on the
//! scope in one transaction, which replaces the reference's flock and
//! O_EXCL files. On top of the reference semantics it quarantines released
//! addresses for `ipam.reuseIPWait` seconds (see [`alloc`]).
//!
//! Module map: [`ip`] and [`range`] (address math, ranges, iteration),
//! [`config`] (the request config), [`alloc`] (choosing an address),
//! [`dns`] (resolv.conf), [`plugin`] (the verbs over a [`plugin::Host`]);
//! this file binds the WIT world `ipam-plugin` to them. Errors, CIDR math
//! and the result's route and DNS types are the SDK's (`wasm-cni-sdk`, whose
//! `interface-plugin` bindings are not used here: the component imports
//! only what this crate calls).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod alloc;
pub mod config;
pub mod dns;
pub mod ip;
pub mod plugin;
pub mod range;
#[cfg(test)]
mod tests;

// The SDK binds world `interface-plugin`; host-local needs `ipam-plugin`
// with `store.now` and `files`, so it generates its own bindings.
wit_bindgen::generate!({
    path: "../../wit",
    world: "ipam-plugin",
});

use cni::plugin::files::{self, FileError};
use cni::plugin::log as wlog;
use cni::plugin::store::{self, StoreError};
use cni::plugin::types;
use exports::cni::plugin::plugin::Guest;

use alloc::Owner;
use plugin::{Entry, HostError, Level, Span};

fn entry(e: store::Entry) -> Entry {
    Entry {
        key: e.key,
        owner: Owner {
            container_id: e.owner.container_id,
            ifname: e.owner.ifname,
        },
        allocated_at: e.allocated_at,
        released_at: e.released_at,
    }
}

/// [`plugin::Host`] over the WIT imports.
struct WitHost;

fn store_err(e: StoreError) -> HostError {
    match e {
        StoreError::Refused(m) => HostError::Refused(m),
        StoreError::Io(m) => HostError::Io(m),
    }
}

impl plugin::Host for WitHost {
    fn now(&self) -> u64 {
        store::now()
    }
    fn list(&self) -> Result<Vec<Entry>, HostError> {
        Ok(store::list()
            .map_err(store_err)?
            .into_iter()
            .map(entry)
            .collect())
    }
    fn lookup(&self, keys: &[String]) -> Result<Vec<Option<Entry>>, HostError> {
        Ok(store::lookup(keys)
            .map_err(store_err)?
            .into_iter()
            .map(|e| e.map(entry))
            .collect())
    }
    fn span(&self, first: &str, last: &str) -> Result<Span, HostError> {
        let s = store::span(first, last).map_err(store_err)?;
        Ok(Span {
            entries: s.entries,
            released: s.released,
            oldest_released: s.oldest_released.map(entry),
        })
    }
    fn reserve(&self, key: &str) -> Result<bool, HostError> {
        store::reserve(key).map_err(store_err)
    }
    fn release_by_owner(&self) -> Result<Vec<String>, HostError> {
        store::release_by_owner().map_err(store_err)
    }
    fn release(&self, key: &str) -> Result<bool, HostError> {
        store::release(key).map_err(store_err)
    }
    fn get_by_owner(&self) -> Result<Vec<String>, HostError> {
        store::get_by_owner().map_err(store_err)
    }
    fn get_value(&self, name: &str) -> Result<Option<String>, HostError> {
        store::get_value(name).map_err(store_err)
    }
    fn set_value(&self, name: &str, value: Option<&str>) -> Result<(), HostError> {
        store::set_value(name, value).map_err(store_err)
    }
    fn blocks_of_other_nodes(&self) -> Result<Vec<String>, HostError> {
        store::blocks_of_other_nodes().map_err(store_err)
    }
    fn read_config_file(&self, path: &str) -> Result<String, HostError> {
        files::read_config_file(path).map_err(|e| match e {
            FileError::Refused(m) => HostError::Refused(m),
            FileError::Io(m) => HostError::Io(m),
        })
    }
    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Error => wlog::Level::Error,
            Level::Warn => wlog::Level::Warn,
            Level::Info => wlog::Level::Info,
            Level::Debug => wlog::Level::Debug,
        };
        wlog::log(level, message);
    }
}

fn request(r: types::Request) -> plugin::Request {
    plugin::Request {
        container_id: r.container_id,
        ifname: r.ifname,
        args: r.args,
        config: r.config,
    }
}

fn wit_error(e: wasm_cni_sdk::CniError) -> types::Error {
    types::Error {
        code: e.code,
        msg: e.msg,
        details: e.details,
    }
}

fn wit_result(r: plugin::IpamResult) -> types::CniResult {
    types::CniResult {
        interfaces: Vec::new(),
        ips: r
            .ips
            .into_iter()
            .map(|i| types::IpConfig {
                address: i.address,
                gateway: i.gateway,
                interface: None,
            })
            .collect(),
        routes: r
            .routes
            .into_iter()
            .map(|r| types::Route {
                dst: r.dst,
                gw: r.gw,
                mtu: r.mtu,
                advmss: r.advmss,
                priority: r.priority,
                table: r.table,
                scope: r.scope,
            })
            .collect(),
        dns: r.dns.map(|d| types::Dns {
            nameservers: d.nameservers,
            domain: d.domain,
            search: d.search,
            options: d.options,
        }),
    }
}

struct HostLocal;

impl Guest for HostLocal {
    fn add(req: types::Request) -> Result<types::CniResult, types::Error> {
        plugin::add(&WitHost, &request(req))
            .map(wit_result)
            .map_err(wit_error)
    }

    fn del(req: types::Request) -> Result<(), types::Error> {
        plugin::del(&WitHost, &request(req)).map_err(wit_error)
    }

    fn check(req: types::Request) -> Result<(), types::Error> {
        plugin::check(&WitHost, &request(req)).map_err(wit_error)
    }

    fn status(config: String) -> Result<(), types::Error> {
        plugin::status(&WitHost, &config).map_err(wit_error)
    }

    fn gc(config: String, valid: Vec<types::Attachment>) -> Result<(), types::Error> {
        let valid: Vec<Owner> = valid
            .into_iter()
            .map(|a| Owner {
                container_id: a.container_id,
                ifname: a.ifname,
            })
            .collect();
        plugin::gc(&WitHost, &config, &valid).map_err(wit_error)
    }
}

// Native builds (unit tests, clippy) only type-check the export: the
// export symbols' names are not valid in a native cdylib's version script.
#[cfg(target_arch = "wasm32")]
export!(HostLocal);
#[cfg(not(target_arch = "wasm32"))]
const _: fn() = || {
    fn exportable<T: Guest>() {}
    exportable::<HostLocal>();
};
