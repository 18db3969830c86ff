//! The `network` import bodies, one per WIT function: each converts its
//! arguments, asks the guard ([`Ctx::act`](super)) with its policy
//! questions, and calls the backend.

use std::net::IpAddr;

use wasmtime::component::Resource;

use super::super::bindings::cni::plugin::network::{
    Address, Host, HostNetns, IpvlanMode as WitIpvlanMode, Link, LinkSettings,
    MacvlanMode as WitMode, NetError as WitError, Qdisc as WitQdisc, RateLimit as WitRateLimit,
    RouteSpec,
};
use super::super::fail::NetFail;
use super::super::live;
use super::super::policy::{Ask, Side};
use super::super::state::Ctx;
use super::{to_wit, Change, NetnsHandle, Undo, R};
use wasm_cni_base::log;
use wasm_cni_kernel::net::{
    self, IpvlanMode, LinkChange, LinkInfo, MacvlanMode, Net, NetError, NsId, RateLimit,
};

fn mode_from_wit(m: WitMode) -> MacvlanMode {
    match m {
        WitMode::Bridge => MacvlanMode::Bridge,
        WitMode::Private => MacvlanMode::Private,
        WitMode::Vepa => MacvlanMode::Vepa,
        WitMode::Passthru => MacvlanMode::Passthru,
    }
}

fn link_to_wit(l: LinkInfo) -> Link {
    Link {
        index: l.index,
        name: l.name,
        kind: l.kind,
        mac: l.mac,
        mtu: l.mtu,
        up: l.up,
        oper_up: l.oper_up,
        master: l.master,
        peer_index: l.peer_index,
        promisc: l.promisc,
        allmulti: l.allmulti,
        txqlen: l.txqlen,
        macvlan_mode: l.macvlan_mode.map(|m| match m {
            MacvlanMode::Bridge => WitMode::Bridge,
            MacvlanMode::Private => WitMode::Private,
            MacvlanMode::Vepa => WitMode::Vepa,
            MacvlanMode::Passthru => WitMode::Passthru,
        }),
        vlan_id: l.vlan_id,
        ipvlan_mode: l.ipvlan_mode.map(|m| match m {
            IpvlanMode::L2 => WitIpvlanMode::L2,
            IpvlanMode::L3 => WitIpvlanMode::L3,
            IpvlanMode::L3s => WitIpvlanMode::L3s,
        }),
    }
}

fn parse_ip(s: &str, what: &str) -> Result<IpAddr, NetError> {
    s.parse()
        .map_err(|_| NetError::Invalid(format!("{what}: {s:?} is not an IP address")))
}

fn route_from_wit(r: &RouteSpec) -> Result<net::Route, NetError> {
    Ok(net::Route {
        dst: net::parse_cidr(&r.dst)?,
        gw: r.gw.as_deref().map(|g| parse_ip(g, "gw")).transpose()?,
        dev: r.dev.clone(),
        src: r.src.as_deref().map(|s| parse_ip(s, "src")).transpose()?,
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    })
}

fn route_to_wit(r: net::Route) -> RouteSpec {
    RouteSpec {
        dst: r.dst.to_string(),
        gw: r.gw.map(|g| g.to_string()),
        dev: r.dev,
        src: r.src.map(|s| s.to_string()),
        mtu: r.mtu,
        advmss: r.advmss,
        priority: r.priority,
        table: r.table,
        scope: r.scope,
    }
}

/// `new` asks for a value other than `old`.
fn differs<T: PartialEq>(new: &Option<T>, old: &T) -> bool {
    new.as_ref().is_some_and(|n| n != old)
}

/// The settings `change` would alter on `before`, as they are: what puts
/// the link back. Hairpin cannot be read back and is left out (it applies
/// to bridge ports, which are the attachment's own veths).
fn restore_of(net: &mut dyn Net, ns: NsId, before: &LinkInfo, change: &LinkChange) -> LinkChange {
    let master_name = |net: &mut dyn Net, m: Option<u32>| match m {
        Some(i) => net.link_by_index(ns, i).map(|l| l.name).unwrap_or_default(),
        None => String::new(),
    };
    LinkChange {
        up: differs(&change.up, &before.up).then_some(before.up),
        mtu: differs(&change.mtu, &before.mtu).then_some(before.mtu),
        mac: change
            .mac
            .as_ref()
            .filter(|m| !m.eq_ignore_ascii_case(&before.mac) && !before.mac.is_empty())
            .map(|_| before.mac.clone()),
        master: change
            .master
            .as_ref()
            .map(|_| master_name(net, before.master)),
        promisc: differs(&change.promisc, &before.promisc).then_some(before.promisc),
        allmulti: differs(&change.allmulti, &before.allmulti).then_some(before.allmulti),
        txqlen: differs(&change.txqlen, &before.txqlen).then_some(before.txqlen),
        hairpin: None,
    }
}

impl Host for Ctx {
    fn convert_net_error(&mut self, e: NetFail) -> wasmtime::Result<WitError> {
        e.into_wit()
    }

    fn container_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.open_ns(Side::Container)
    }

    fn node_netns(&mut self) -> R<Resource<NetnsHandle>> {
        self.open_ns(Side::Node)
    }
}

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
        let (side, id) = self.handle(&ns)?;
        let (peer_side, peer_id) = self.handle(&peer_ns)?;
        let asks = [Ask::Create(side, &name), Ask::Create(peer_side, &peer_name)];
        let (link, peer) = self.act(&asks, |net, _| {
            let link = net.create_veth(id, &name, &peer_name, peer_id, mtu, mac.as_deref())?;
            let peer = net.link_by_name(peer_id, &peer_name);
            Ok(((link, peer), Vec::new()))
        })?;
        // Both ends in one update (one write of the pending record).
        self.update_created(|c| {
            c.side_mut(side).insert(link.name.clone(), link.id());
            match &peer {
                Ok(peer) => {
                    c.side_mut(peer_side).insert(peer.name.clone(), peer.id());
                }
                // Created a moment ago: only a concurrent delete explains
                // this, and then there is nothing left to own.
                Err(e) => log::warn(format_args!("veth peer {peer_name} vanished: {e}")),
            }
        });
        Ok(link_to_wit(link))
    }

    fn ensure_bridge(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        mtu: Option<u32>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        // In the node a bridge is shared by attachments: only the one the
        // config names (or one of the attachment's own), never recorded as
        // this attachment's. In the container it is a link like any other:
        // only CNI_IFNAME, and recorded, so that nothing the attachment
        // made there is unaccounted for. Either way, during ADD only.
        let asks = Ask::ensure_bridge(side, id, &name);
        let bridge = match side {
            Side::Node => self.act(&asks, |net, journal| {
                let existed = net.link_by_name(id, &name).is_ok();
                let bridge = net.ensure_bridge(id, &name, mtu)?;
                let undo = match existed {
                    true => None,
                    false => journal.change(Undo::Bridge {
                        name: name.clone(),
                        id: bridge.id(),
                    }),
                };
                Ok((bridge, undo.into_iter().collect()))
            })?,
            Side::Container => {
                let link = self.act(&asks, |net, _| {
                    Ok((net.ensure_bridge(id, &name, mtu)?, Vec::new()))
                })?;
                self.record_created(side, &link);
                link
            }
        };
        Ok(link_to_wit(bridge))
    }

    fn create_macvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.macvlan(ns, name, master, mode, mtu, mac, target, false)
    }

    fn create_macvtap(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.macvlan(ns, name, master, mode, mtu, mac, target, true)
    }

    fn create_vlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        vlan_id: u16,
        mtu: Option<u32>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        self.upper(ns, &name, &master, target, Upper::Vlan, |net, at, to| {
            net.create_vlan(at, &name, &master, vlan_id, mtu, to)
        })
    }

    fn create_ipvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitIpvlanMode,
        mtu: Option<u32>,
        target: Resource<NetnsHandle>,
    ) -> R<Link> {
        let mode = match mode {
            WitIpvlanMode::L2 => IpvlanMode::L2,
            WitIpvlanMode::L3 => IpvlanMode::L3,
            WitIpvlanMode::L3s => IpvlanMode::L3s,
        };
        self.upper(ns, &name, &master, target, Upper::Ipvlan, |net, at, to| {
            net.create_ipvlan(at, &name, &master, mode, mtu, to)
        })
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
        let (side, id) = self.handle(&ns)?;
        let link = self.act(&[Ask::CreateTap(side, &name, owner, group)], |net, _| {
            let link = net.create_tap(id, &name, mtu, mac.as_deref(), multi_queue, owner, group)?;
            Ok((link, Vec::new()))
        })?;
        self.record_created(side, &link);
        Ok(link_to_wit(link))
    }

    fn link_by_name(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.link_by_name(id, &name)?, Vec::new()))
        })
        .map(link_to_wit)
    }

    fn link_by_index(&mut self, ns: Resource<NetnsHandle>, index: u32) -> R<Link> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.link_by_index(id, index)?, Vec::new()))
        })
        .map(link_to_wit)
    }

    fn list_links(&mut self, ns: Resource<NetnsHandle>) -> R<Vec<Link>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| Ok((net.links(id)?, Vec::new())))
            .map(|v| v.into_iter().map(link_to_wit).collect())
    }

    fn set_link(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        settings: LinkSettings,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let master = settings.master.clone().unwrap_or_default();
        let asks = Ask::set_link(side, id, &name, &master);
        let change = LinkChange {
            up: settings.up,
            mtu: settings.mtu,
            mac: settings.mac,
            master: settings.master,
            promisc: settings.promisc,
            allmulti: settings.allmulti,
            txqlen: settings.txqlen,
            hairpin: settings.hairpin,
        };
        self.act(&asks, |net, journal| {
            let restore = match journal.on() {
                true => {
                    let before = net.link_by_name(id, &name)?;
                    Some((before.index, restore_of(net, id, &before, &change)))
                }
                false => None,
            };
            // A bridge without a MAC of its own takes its ports': when
            // the port goes, the bridge's MAC must come back too.
            let bridge = match journal.on_at(1) {
                true => net.link_by_name(id, &master).ok(),
                false => None,
            };
            let after = net.set_link(id, &name, &change)?;
            let mut undo: Vec<Change> = bridge
                .filter(|b| {
                    b.mac
                        != net
                            .link_by_index(id, b.index)
                            .map(|l| l.mac)
                            .unwrap_or_default()
                })
                .and_then(|b| {
                    journal.change_of(
                        1,
                        Undo::Link {
                            name: b.name,
                            index: b.index,
                            restore: LinkChange {
                                mac: Some(b.mac),
                                ..LinkChange::default()
                            },
                        },
                    )
                })
                .into_iter()
                .collect();
            undo.extend(
                restore
                    .filter(|(_, r)| *r != LinkChange::default())
                    .and_then(|(index, restore)| {
                        journal.change(Undo::Link {
                            name: name.clone(),
                            index,
                            restore,
                        })
                    }),
            );
            Ok((after, undo))
        })
        .map(link_to_wit)
    }

    fn delete_link(&mut self, ns: Resource<NetnsHandle>, name: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let out = self.act(&[Ask::Delete(side, id, &name)], |net, _| {
            Ok((net.delete_link(id, &name)?, Vec::new()))
        });
        self.verified.clear();
        if out.is_ok() || matches!(out, Err(NetFail::Plugin(WitError::NotFound(_)))) {
            self.forget_created(side, &name);
        }
        out
    }

    fn add_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        self.address(ns, link, address, true)
    }

    fn del_address(&mut self, ns: Resource<NetnsHandle>, link: String, address: Address) -> R<()> {
        self.address(ns, link, address, false)
    }

    fn list_addresses(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<Address>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.addresses(id, &link)?, Vec::new()))
        })
        .map(|v| {
            v.into_iter()
                .map(|a| Address {
                    cidr: a.to_string(),
                })
                .collect()
        })
    }

    fn add_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        self.route(ns, route, true)
    }

    fn del_route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec) -> R<()> {
        self.route(ns, route, false)
    }

    fn list_routes(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        table: Option<u32>,
    ) -> R<Vec<RouteSpec>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.routes(id, &link, table)?, Vec::new()))
        })
        .map(|v| v.into_iter().map(route_to_wit).collect())
    }

    fn get_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String) -> R<String> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, id, &key, false)], |net, _| {
            Ok((net.sysctl_get(id, &key)?, Vec::new()))
        })
    }

    fn set_sysctl(&mut self, ns: Resource<NetnsHandle>, key: String, value: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(&[Ask::Sysctl(side, id, &key, true)], |net, journal| {
            let old = match journal.on() {
                true => Some(net.sysctl_get(id, &key)?),
                false => None,
            };
            net.sysctl_set(id, &key, &value)?;
            let undo = old.filter(|old| *old != value.trim()).and_then(|old| {
                journal.change(Undo::Sysctl {
                    key: key.clone(),
                    old,
                    new: value.trim().to_string(),
                })
            });
            Ok(((), undo.into_iter().collect()))
        })
    }

    fn create_ifb(&mut self, ns: Resource<NetnsHandle>, name: String, mtu: Option<u32>) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let link = self.act(&[Ask::CreateIfb(side, &name)], |net, _| {
            Ok((net.create_ifb(id, &name, mtu)?, Vec::new()))
        })?;
        self.record_created(side, &link);
        Ok(link_to_wit(link))
    }

    fn limit_rate(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        limit: WitRateLimit,
    ) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let limit = RateLimit {
            rate: limit.rate,
            burst: limit.burst,
        };
        self.act(&[Ask::Shape(side, id, &link)], |net, _| {
            Ok((net.set_rate_limit(id, &link, &limit)?, Vec::new()))
        })
    }

    fn has_rate_limit(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        limit: WitRateLimit,
    ) -> R<bool> {
        let (_, id) = self.handle(&ns)?;
        let limit = RateLimit {
            rate: limit.rate,
            burst: limit.burst,
        };
        self.act(&[Ask::Read], |net, _| {
            let want = limit.tbf(net.ticks_per_us())?;
            let root = net
                .qdiscs(id, &link)?
                .into_iter()
                .find(|q| q.parent == net::TC_H_ROOT);
            Ok((
                root.is_some_and(|q| q.kind == "tbf" && q.tbf == Some(want)),
                Vec::new(),
            ))
        })
    }

    fn redirect_ingress(&mut self, ns: Resource<NetnsHandle>, link: String, to: String) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        self.act(
            &[Ask::Shape(side, id, &link), Ask::Shape(side, id, &to)],
            |net, _| Ok((net.redirect_ingress(id, &link, &to)?, Vec::new())),
        )
    }

    fn list_qdiscs(&mut self, ns: Resource<NetnsHandle>, link: String) -> R<Vec<WitQdisc>> {
        let (_, id) = self.handle(&ns)?;
        self.act(&[Ask::Read], |net, _| {
            Ok((net.qdiscs(id, &link)?, Vec::new()))
        })
        .map(|qs| {
            qs.into_iter()
                .map(|q| WitQdisc {
                    kind: q.kind,
                    handle: q.handle,
                    parent: q.parent,
                    tbf_rate: q.tbf.map(|t| t.rate),
                    tbf_buffer: q.tbf.map(|t| t.buffer),
                    tbf_limit: q.tbf.map(|t| t.limit),
                })
                .collect()
        })
    }

    fn drop(&mut self, ns: Resource<NetnsHandle>) -> wasmtime::Result<()> {
        self.charge()?;
        self.table.delete(ns)?;
        Ok(())
    }
}

/// The kinds of link stacked on a master.
#[derive(Clone, Copy)]
enum Upper {
    Macvlan(MacvlanMode),
    Vlan,
    Ipvlan,
}

impl Ctx {
    #[allow(clippy::too_many_arguments)]
    fn macvlan(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: String,
        master: String,
        mode: WitMode,
        mtu: Option<u32>,
        mac: Option<String>,
        target: Resource<NetnsHandle>,
        tap: bool,
    ) -> R<Link> {
        let mode = mode_from_wit(mode);
        self.upper(
            ns,
            &name,
            &master,
            target,
            Upper::Macvlan(mode),
            |net, at, to| {
                net.create_macvlan(at, &name, &master, mode, mtu, mac.as_deref(), to, tap)
            },
        )
    }

    /// A link stacked on `master` (a link of `ns`), created in `target`:
    /// the master is the plugin's to use only if its config names it, or it
    /// is the default-route link and the plugin's type and config allow that.
    fn upper(
        &mut self,
        ns: Resource<NetnsHandle>,
        name: &str,
        master: &str,
        target: Resource<NetnsHandle>,
        kind: Upper,
        create: impl FnOnce(&mut dyn Net, NsId, NsId) -> Result<LinkInfo, NetError>,
    ) -> R<Link> {
        let (side, id) = self.handle(&ns)?;
        let (target_side, target_id) = self.handle(&target)?;
        let made = match kind {
            Upper::Macvlan(mode) => Ask::CreateMacvlan(target_side, name, mode),
            Upper::Vlan => Ask::CreateStacked(target_side, name, "vlan"),
            Upper::Ipvlan => Ask::CreateStacked(target_side, name, "ipvlan"),
        };
        let asks = match self.access() {
            Ok(access) => Ask::stacked(made, &access.config, side, id, master, || {
                self.carries_default_route(id, master)
            }),
            // Refused by `act` below, naming why.
            Err(_) => vec![made],
        };
        let link = self.act(&asks, |net, _| {
            Ok((create(net, id, target_id)?, Vec::new()))
        })?;
        self.record_created(target_side, &link);
        Ok(link_to_wit(link))
    }

    /// Whether `master` carries the node's default route.
    fn carries_default_route(&self, node: NsId, master: &str) -> bool {
        let Some(access) = &self.net else {
            return false;
        };
        let Ok(mut net) = access.backend.lock() else {
            return false;
        };
        live::carries_default_route(net.as_mut(), node, master)
    }

    fn address(
        &mut self,
        ns: Resource<NetnsHandle>,
        link: String,
        address: Address,
        add: bool,
    ) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let addr = match net::parse_cidr(&address.cidr) {
            Ok(a) => a,
            Err(e) => {
                self.charge()?;
                return Err(to_wit(e).into());
            }
        };
        self.act(
            &[Ask::Address(side, id, &link, &addr, add)],
            |net, journal| {
                if add {
                    net.add_address(id, &link, &addr)?;
                } else {
                    net.del_address(id, &link, &addr)?;
                }
                let undo = journal.change(Undo::Address {
                    link: link.clone(),
                    addr,
                    added: add,
                });
                Ok(((), undo.into_iter().collect()))
            },
        )
    }

    fn route(&mut self, ns: Resource<NetnsHandle>, route: RouteSpec, add: bool) -> R<()> {
        let (side, id) = self.handle(&ns)?;
        let Some(dev) = route.dev.clone() else {
            self.charge()?;
            return Err(self.refuse("a route must name its device".into()).into());
        };
        let r = match route_from_wit(&route) {
            Ok(r) => r,
            Err(e) => {
                self.charge()?;
                return Err(to_wit(e).into());
            }
        };
        let ask = Ask::Route(side, id, &dev, &r.dst, r.table, add);
        self.act(&[ask], |net, journal| {
            if add {
                net.add_route(id, &r)?;
            } else {
                net.del_route(id, &r)?;
            }
            let undo = journal.change(Undo::Route {
                route: r.clone(),
                added: add,
            });
            Ok(((), undo.into_iter().collect()))
        })
    }
}
