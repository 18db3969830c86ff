//! `{{name}}`: after an interface plugin, adds the routes its config lists
//! (`"routes": [{"dst": "192.168.0.0/16", "gw": "10.88.0.1"}]`) to CNI_IFNAME.

use serde::Deserialize;
use wasm_cni_sdk::net::{Ops, RouteSpec};
use wasm_cni_sdk::{check, config, plugin, CniError, CniResult, Host, Plugin, Request, Route};

#[derive(Deserialize)]
struct Conf {
    #[serde(default)]
    routes: Vec<Route>,
}

fn spec(r: &Route, dev: &str) -> RouteSpec {
    RouteSpec { dst: r.dst.clone(), gw: r.gw.clone(), dev: Some(dev.into()), ..RouteSpec::default() }
}

pub struct Routes;

impl Plugin for Routes {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError> {
        let conf: Conf = config::from_str(&req.config)?;
        let mut result = check::require_prev_result(req.prev_result.as_ref())?.clone();
        let cont = plugin::open_container(host, req)?;
        for r in &conf.routes {
            match cont.add_route(&spec(r, &req.ifname)) {
                Ok(()) => {}
                Err(e) if e.is_exists() => {}
                Err(e) => return Err(e.into_cni(format_args!("adding route {}", r.dst))),
            }
            result.routes.push(r.clone());
        }
        Ok(result)
    }

    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf: Conf = config::from_str(&req.config)?;
        let Some(cont) = plugin::container_if_exists(host)? else { return Ok(()) };
        for r in &conf.routes {
            match cont.del_route(&spec(r, &req.ifname)) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into_cni(format_args!("deleting route {}", r.dst))),
            }
        }
        Ok(())
    }

    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError> {
        let conf: Conf = config::from_str(&req.config)?;
        let cont = plugin::open_container(host, req)?;
        let have = cont.list_routes(&req.ifname, None).map_err(|e| e.into_cni("listing routes"))?;
        match conf.routes.iter().find(|r| !have.iter().any(|h| h.dst == r.dst)) {
            Some(r) => Err(CniError::internal(format!("route {} is missing", r.dst))),
            None => Ok(()),
        }
    }
}

wasm_cni_sdk::export_plugin!(Routes);
