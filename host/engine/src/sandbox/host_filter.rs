//! `cni:plugin/filter`: packet-filter rules on the plugin's behalf. Every
//! rule passes [`policy::Grants::filter`] first (and its check on the live
//! links); the backend writes the attachment's tag into each rule.

use std::net::IpAddr;
use std::time::Instant;

use super::bindings::cni::plugin::filter::{
    FilterError as WitError, Host, Protocol as WitProto, Rule as WitRule,
};
use super::fail::FilterFail;
use super::host_network::{verify_created, FilterAccess, NetAccess};
use super::live;
use super::policy::{FilterNeed, FilterOp, Side};
use super::state::Ctx;
use wasm_cni_base::log;
use wasm_cni_kernel::filter::{FilterError, Proto, Rule};
use wasm_cni_kernel::net::{self, parse_mac, NsRef};

/// Rules one call may name.
const MAX_RULES: usize = 64;

type R<T> = Result<T, FilterFail>;

fn ip(s: &str, what: &str) -> Result<IpAddr, WitError> {
    s.parse()
        .map_err(|_| WitError::Invalid(format!("{what}: {s:?} is not an IP address")))
}

fn rule_from_wit(r: WitRule) -> Result<Rule, WitError> {
    Ok(match r {
        WitRule::Masquerade(m) => Rule::Masquerade {
            source: ip(&m.source, "masquerade source")?,
            except: m
                .except
                .iter()
                .map(|e| {
                    net::parse_cidr(e)
                        .map_err(|e| WitError::Invalid(format!("masquerade exception: {e}")))
                })
                .collect::<Result<_, _>>()?,
        },
        WitRule::PortMap(p) => Rule::PortMap {
            proto: match p.protocol {
                WitProto::Tcp => Proto::Tcp,
                WitProto::Udp => Proto::Udp,
                WitProto::Sctp => Proto::Sctp,
            },
            host_ip: p
                .host_ip
                .as_deref()
                .map(|h| ip(h, "port map host-ip"))
                .transpose()?,
            host_port: p.host_port,
            dst: ip(&p.address, "port map address")?,
            dst_port: p.port,
        },
        WitRule::HairpinMasquerade(a) => Rule::HairpinMasquerade {
            dst: ip(&a, "hairpin address")?,
        },
        WitRule::AllowForward(a) => Rule::AllowForward {
            addr: ip(&a, "forward address")?,
        },
        WitRule::IsolateBridge(b) => Rule::IsolateBridge { bridge: b },
        WitRule::MacSpoofCheck(m) => Rule::MacSpoofCheck {
            mac: parse_mac(&m.mac).map_err(|e| WitError::Invalid(e.to_string()))?,
            link: m.link,
        },
    })
}

fn to_wit(e: FilterError, fa: &FilterAccess) -> WitError {
    match e {
        FilterError::Invalid(m) => WitError::Invalid(m),
        FilterError::Kernel { errno, msg } => WitError::Kernel((errno, msg)),
        FilterError::PortTaken { what, holder } => {
            let who = (fa.holder)(&holder).unwrap_or_else(|| {
                format!(
                    "an attachment the host has no record of (owner tag {} {})",
                    holder.network, holder.attachment
                )
            });
            let me = (fa.holder)(&fa.tag).unwrap_or_else(|| "this attachment".into());
            WitError::PortTaken(format!(
                "{what} is already mapped to {who}; {me} cannot map it too"
            ))
        }
    }
}

impl Ctx {
    fn filter_call(&mut self, rules: Vec<WitRule>, op: FilterOp) -> R<()> {
        self.acted = true;
        self.charge()?;
        let access = match self.access() {
            Ok(a) => a.clone(),
            Err(_) => return Err(self.refuse_filter("no network access in this call").into()),
        };
        let Some(fa) = access.filter.clone() else {
            return Err(self
                .refuse_filter("no packet-filter access in this call")
                .into());
        };
        if rules.len() > MAX_RULES {
            return Err(WitError::Invalid(format!(
                "{} rules in one call; at most {MAX_RULES}",
                rules.len()
            ))
            .into());
        }
        let parsed = rules
            .into_iter()
            .map(rule_from_wit)
            .collect::<Result<Vec<_>, _>>()?;
        if op == FilterOp::Add {
            use super::limits::caps;
            let cap = caps::RULES + caps::RULES_PER_PORT_MAPPING * access.ports.len();
            let added = access
                .ledger
                .lock()
                .map(|l| l.filter_added.len())
                .unwrap_or(0);
            if added + parsed.len() > cap {
                return Err(self
                    .refuse_filter(&format!(
                    "{} more rules: an attachment may add at most {cap} ({} and {} per port mapping the runtime asked for; the host's cap per attachment), it has {added}",
                    parsed.len(),
                    caps::RULES,
                        caps::RULES_PER_PORT_MAPPING
                    ))
                    .into());
            }
        }
        let grants = self.grants(&access);
        for rule in &parsed {
            let need = match grants.filter(rule, op) {
                Ok(n) => n,
                Err(why) => return Err(self.refuse_filter(&why).into()),
            };
            if let Err(why) = self.confirm(&access, need) {
                return Err(self.refuse_filter(&why).into());
            }
        }
        if self.inject(|| {
            format!(
                "filter {op:?} {}",
                parsed.first().map(ToString::to_string).unwrap_or_default()
            )
        }) {
            return Err(WitError::Kernel((
                super::faults::ENOMEM,
                "Cannot allocate memory (injected)".into(),
            ))
            .into());
        }
        let mut backend = match fa.backend.lock() {
            Ok(b) => b,
            Err(_) => return Err(wasmtime::Error::msg("filter backend poisoned").into()),
        };
        let started = Instant::now();
        let what = || {
            format!(
                "{op:?} {} rule(s): {}",
                parsed.len(),
                parsed.first().map(ToString::to_string).unwrap_or_default()
            )
        };
        let done = self.filter_op(&mut **backend, &fa, &access, &parsed, op);
        drop(backend);
        self.record("nftables", what, started, false);
        done
    }

    fn filter_op(
        &self,
        backend: &mut dyn wasm_cni_kernel::filter::Filter,
        fa: &FilterAccess,
        access: &NetAccess,
        parsed: &[Rule],
        op: FilterOp,
    ) -> R<()> {
        match op {
            FilterOp::Add => {
                let fresh = backend.add(&fa.tag, parsed).map_err(|e| to_wit(e, fa))?;
                // The host's own settings for these rules (route_localnet)
                // are made when the ADD completes, in its scope and
                // recorded with it (chain/effects.rs).
                if let Ok(mut l) = access.ledger.lock() {
                    l.filter_added.extend(fresh);
                }
                Ok(())
            }
            FilterOp::Check => {
                let present = backend
                    .present(&fa.tag, parsed)
                    .map_err(|e| to_wit(e, fa))?;
                match parsed.iter().zip(present).find(|(_, there)| !there) {
                    Some((rule, _)) => Err(WitError::Missing(format!(
                        "rule {rule} of this attachment is not in the node's ruleset"
                    ))
                    .into()),
                    None => Ok(()),
                }
            }
            FilterOp::Remove => {
                backend.remove(&fa.tag, parsed).map_err(|e| to_wit(e, fa))?;
                Ok(())
            }
        }
    }

    fn refuse_filter(&self, why: &str) -> WitError {
        self.record("nftables", || why.to_string(), Instant::now(), true);
        log::warn(format_args!("plugin {}: refused: {why}", self.plugin));
        WitError::Refused(why.to_string())
    }

    /// Check what a rule's grant rests on against the live node links.
    fn confirm(&mut self, access: &NetAccess, need: FilterNeed) -> Result<(), String> {
        if need == FilterNeed::Nothing {
            return Ok(());
        }
        let mut net = access
            .backend
            .lock()
            .map_err(|_| "network backend poisoned".to_string())?;
        let node = net.open(NsRef::Current).map_err(|e| e.to_string())?;
        match need {
            FilterNeed::Nothing => Ok(()),
            FilterNeed::Created(name, id) => {
                let key = (Side::Node, node, name.clone(), id.index);
                if self.verified.contains(&key) {
                    return Ok(());
                }
                verify_created(net.as_mut(), access, Side::Node, node, &name, &id)
                    .map_err(|e| e.to_string())?;
                self.verified.insert(key);
                Ok(())
            }
            FilterNeed::PortOf(bridge) => {
                let created = access
                    .ledger
                    .lock()
                    .map(|l| l.created.node.clone())
                    .unwrap_or_default();
                live::confirm_port_of(net.as_mut(), node, &bridge, &created)
            }
        }
    }
}

impl Host for Ctx {
    fn convert_filter_error(&mut self, e: FilterFail) -> wasmtime::Result<WitError> {
        e.into_wit()
    }

    fn add(&mut self, rules: Vec<WitRule>) -> R<()> {
        self.filter_call(rules, FilterOp::Add)
    }

    fn check(&mut self, rules: Vec<WitRule>) -> R<()> {
        self.filter_call(rules, FilterOp::Check)
    }

    fn remove(&mut self, rules: Vec<WitRule>) -> R<()> {
        self.filter_call(rules, FilterOp::Remove)
    }
}
