//! `cni:plugin/ipam`: delegation to the IPAM plugin as an in-process call.
//! The chain executor decides which delegate runs and whether the verb is
//! allowed; this only forwards and converts.

use super::bindings::cni::plugin::ipam::Host;
use super::bindings::types::{CniResult, Error};
use super::state::Ctx;
use super::IpamOp;
use wasm_cni_protocol::CniError;

fn to_wit(e: CniError) -> Error {
    Error {
        code: e.code,
        msg: e.msg,
        details: e.details,
    }
}

impl Ctx {
    fn delegate(&mut self, op: IpamOp) -> wasmtime::Result<Result<Option<CniResult>, Error>> {
        self.acted = true;
        self.charge()?;
        if self.remaining().is_zero() {
            return Err(self.deadline_reached());
        }
        Ok(self.services.ipam(op, self.deadline).map_err(to_wit))
    }
}

impl Host for Ctx {
    fn add(&mut self) -> wasmtime::Result<Result<CniResult, Error>> {
        Ok(self.delegate(IpamOp::Add)?.and_then(|r| {
            r.ok_or_else(|| Error {
                code: 999,
                msg: "IPAM plugin returned missing IP config".into(),
                details: String::new(),
            })
        }))
    }

    fn del(&mut self) -> wasmtime::Result<Result<(), Error>> {
        Ok(self.delegate(IpamOp::Del)?.map(|_| ()))
    }

    fn check(&mut self) -> wasmtime::Result<Result<(), Error>> {
        Ok(self.delegate(IpamOp::Check)?.map(|_| ()))
    }

    fn status(&mut self) -> wasmtime::Result<Result<(), Error>> {
        Ok(self.delegate(IpamOp::Status)?.map(|_| ()))
    }

    fn gc(&mut self) -> wasmtime::Result<Result<(), Error>> {
        Ok(self.delegate(IpamOp::Gc)?.map(|_| ()))
    }
}
