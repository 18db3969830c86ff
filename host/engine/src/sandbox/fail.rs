//! How an import fails, as its host function returns it: with the WIT
//! error the plugin is expected to handle, or with a trap that ends the
//! call (a host bug or an exhausted budget, never an ordinary failure).
//! The bindings map each interface's error variant to one of these
//! (`trappable_error_type`), so an import body is a plain
//! `Result<T, Fail<E>>` whose `?` carries both.

use super::bindings::cni::plugin::{
    files::FileError, filter::FilterError, network::NetError, store::StoreError,
};

#[derive(Debug)]
pub enum Fail<E> {
    /// What the plugin gets back.
    Plugin(E),
    /// Ends the plugin's call.
    Trap(wasmtime::Error),
}

impl<E> From<wasmtime::Error> for Fail<E> {
    fn from(e: wasmtime::Error) -> Self {
        Fail::Trap(e)
    }
}

impl<E> Fail<E> {
    /// The WIT error for the plugin, or the trap: what the bindings'
    /// `convert_*` functions return.
    pub fn into_wit(self) -> wasmtime::Result<E> {
        match self {
            Fail::Plugin(e) => Ok(e),
            Fail::Trap(t) => Err(t),
        }
    }
}

/// A result in the bindings' untrappable shape (trap outside, WIT error
/// inside), as the released contract versions' forwarders and the harness
/// take it.
pub fn split<T, E>(r: Result<T, Fail<E>>) -> wasmtime::Result<Result<T, E>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(f) => f.into_wit().map(Err),
    }
}

pub type NetFail = Fail<NetError>;
pub type FilterFail = Fail<FilterError>;
pub type StoreFail = Fail<StoreError>;
pub type FileFail = Fail<FileError>;

impl From<NetError> for NetFail {
    fn from(e: NetError) -> Self {
        Fail::Plugin(e)
    }
}

impl From<FilterError> for FilterFail {
    fn from(e: FilterError) -> Self {
        Fail::Plugin(e)
    }
}

impl From<StoreError> for StoreFail {
    fn from(e: StoreError) -> Self {
        Fail::Plugin(e)
    }
}

impl From<FileError> for FileFail {
    fn from(e: FileError) -> Self {
        Fail::Plugin(e)
    }
}
