//! The verbs against a fake host with the store's semantics: one
//! transaction per call, committed only on `Ok`; reserve during ADD only;
//! release during GC only; the owner set by the "host".

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use crate::alloc::Owner;
use std::net::IpAddr;

use crate::plugin::{self, Entry, Host, HostError, IpamResult, Level, Request, Span};
use wasm_cni_sdk::CniError;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    Add,
    Del,
    Check,
    Status,
    Gc,
}

#[derive(Clone, Default)]
struct Data {
    entries: BTreeMap<String, Entry>,
    values: BTreeMap<String, String>,
}

struct Fake {
    data: RefCell<Data>,
    now: Cell<u64>,
    verb: Cell<Verb>,
    owner: RefCell<Owner>,
    files: BTreeMap<String, String>,
    logs: RefCell<Vec<String>>,
    /// `store.list` calls: an ADD makes none.
    lists: Cell<usize>,
    /// `lookup` and `span` fail as a broken state directory does.
    fail_reads: Cell<bool>,
    /// What `blocks-of-other-nodes` answers: a cluster store's claims.
    others: RefCell<Vec<String>>,
}

impl Fake {
    fn new() -> Self {
        Fake {
            data: RefCell::default(),
            now: Cell::new(1_000_000),
            verb: Cell::new(Verb::Add),
            owner: RefCell::new(owner("x")),
            files: BTreeMap::new(),
            logs: RefCell::default(),
            lists: Cell::new(0),
            fail_reads: Cell::new(false),
            others: RefCell::default(),
        }
    }

    /// Run one verb as one transaction.
    fn call<T>(
        &self,
        verb: Verb,
        who: &Owner,
        f: impl FnOnce(&Self) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        self.verb.set(verb);
        *self.owner.borrow_mut() = who.clone();
        let before = self.data.borrow().clone();
        let out = f(self);
        if out.is_err() {
            *self.data.borrow_mut() = before;
        }
        out
    }

    fn add(&self, id: &str, config: &str) -> Result<IpamResult, CniError> {
        self.add_with(id, "eth0", config, &[])
    }

    fn add_with(
        &self,
        id: &str,
        ifname: &str,
        config: &str,
        args: &[(&str, &str)],
    ) -> Result<IpamResult, CniError> {
        let req = request(id, ifname, config, args);
        self.call(Verb::Add, &owner_if(id, ifname), |h| plugin::add(h, &req))
    }

    fn del(&self, id: &str, config: &str) {
        let req = request(id, "eth0", config, &[]);
        self.call(Verb::Del, &owner(id), |h| plugin::del(h, &req))
            .unwrap();
    }

    fn gc(&self, config: &str, valid: &[&str]) -> Result<(), CniError> {
        let valid: Vec<Owner> = valid.iter().map(|c| owner(c)).collect();
        self.call(Verb::Gc, &owner(""), |h| plugin::gc(h, config, &valid))
    }

    fn status(&self, config: &str) -> Result<(), CniError> {
        self.call(Verb::Status, &owner(""), |h| plugin::status(h, config))
    }

    fn live(&self) -> Vec<(String, String)> {
        self.data
            .borrow()
            .entries
            .values()
            .filter(|e| e.released_at.is_none())
            .map(|e| (e.key.clone(), e.owner.container_id.clone()))
            .collect()
    }

    fn tick(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }
}

fn owner(id: &str) -> Owner {
    owner_if(id, "eth0")
}

fn owner_if(id: &str, ifname: &str) -> Owner {
    Owner {
        container_id: id.into(),
        ifname: ifname.into(),
    }
}

fn request(id: &str, ifname: &str, config: &str, args: &[(&str, &str)]) -> Request {
    Request {
        container_id: id.into(),
        ifname: ifname.into(),
        args: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        config: config.into(),
    }
}

impl Host for Fake {
    fn now(&self) -> u64 {
        self.now.get()
    }
    fn list(&self) -> Result<Vec<Entry>, HostError> {
        self.lists.set(self.lists.get() + 1);
        Ok(self.data.borrow().entries.values().cloned().collect())
    }
    /// As the host answers (`host_store.rs`): at most 1024 keys.
    fn lookup(&self, keys: &[String]) -> Result<Vec<Option<Entry>>, HostError> {
        if self.fail_reads.get() {
            return Err(HostError::Io(
                "read /var/lib/cni: input/output error".into(),
            ));
        }
        if keys.len() > plugin::MAX_LOOKUP {
            return Err(HostError::Refused("too many keys".into()));
        }
        let d = self.data.borrow();
        Ok(keys.iter().map(|k| d.entries.get(k).cloned()).collect())
    }
    /// As the host answers: keys read as addresses (IPv4-mapped as IPv4),
    /// the oldest release with the lowest address among equals.
    fn span(&self, first: &str, last: &str) -> Result<Span, HostError> {
        if self.fail_reads.get() {
            return Err(HostError::Io(
                "read /var/lib/cni: input/output error".into(),
            ));
        }
        let bound = |s: &str| {
            crate::ip::parse_ip(s).map_err(|e| HostError::Refused(format!("span bound: {e}")))
        };
        let (first, last) = (bound(first)?, bound(last)?);
        if first.is_ipv4() != last.is_ipv4() || first > last {
            return Err(HostError::Refused("bad span".into()));
        }
        let d = self.data.borrow();
        let mut span = Span {
            entries: 0,
            released: 0,
            oldest_released: None,
        };
        let mut oldest: Option<(u64, IpAddr)> = None;
        for (k, e) in &d.entries {
            let Ok(ip) = crate::ip::parse_ip(k) else {
                continue;
            };
            if ip < first || ip > last {
                continue;
            }
            span.entries += 1;
            if let Some(t) = e.released_at {
                span.released += 1;
                if oldest.is_none_or(|o| (t, ip) < o) {
                    oldest = Some((t, ip));
                    span.oldest_released = Some(e.clone());
                }
            }
        }
        Ok(span)
    }
    fn reserve(&self, key: &str) -> Result<bool, HostError> {
        if self.verb.get() != Verb::Add {
            return Err(HostError::Refused("reserve outside ADD".into()));
        }
        let mut d = self.data.borrow_mut();
        if d.entries.get(key).is_some_and(|e| e.released_at.is_none()) {
            return Ok(false);
        }
        let e = Entry {
            key: key.into(),
            owner: self.owner.borrow().clone(),
            allocated_at: self.now.get(),
            released_at: None,
        };
        d.entries.insert(key.into(), e);
        Ok(true)
    }
    fn release_by_owner(&self) -> Result<Vec<String>, HostError> {
        let me = self.owner.borrow().clone();
        let mut out = Vec::new();
        for e in self.data.borrow_mut().entries.values_mut() {
            if e.released_at.is_none() && e.owner == me {
                e.released_at = Some(self.now.get());
                out.push(e.key.clone());
            }
        }
        Ok(out)
    }
    fn release(&self, key: &str) -> Result<bool, HostError> {
        if self.verb.get() != Verb::Gc {
            return Err(HostError::Refused("release outside GC".into()));
        }
        match self.data.borrow_mut().entries.get_mut(key) {
            Some(e) if e.released_at.is_none() => {
                e.released_at = Some(self.now.get());
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    fn get_by_owner(&self) -> Result<Vec<String>, HostError> {
        let me = self.owner.borrow().clone();
        Ok(self
            .data
            .borrow()
            .entries
            .values()
            .filter(|e| e.released_at.is_none() && e.owner == me)
            .map(|e| e.key.clone())
            .collect())
    }
    fn blocks_of_other_nodes(&self) -> Result<Vec<String>, HostError> {
        Ok(self.others.borrow().clone())
    }
    fn get_value(&self, name: &str) -> Result<Option<String>, HostError> {
        Ok(self.data.borrow().values.get(name).cloned())
    }
    fn set_value(&self, name: &str, value: Option<&str>) -> Result<(), HostError> {
        let mut d = self.data.borrow_mut();
        match value {
            Some(v) => d.values.insert(name.into(), v.into()),
            None => d.values.remove(name),
        };
        Ok(())
    }
    fn read_config_file(&self, path: &str) -> Result<String, HostError> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| HostError::Io(format!("open {path}: no such file or directory")))
    }
    fn log(&self, _level: Level, message: &str) {
        self.logs.borrow_mut().push(message.into());
    }
}

fn conf(ipam: &str) -> String {
    format!(r#"{{"cniVersion":"1.1.0","name":"mynet","type":"host-local","ipam":{ipam}}}"#)
}

fn addrs(r: &IpamResult) -> Vec<String> {
    r.ips.iter().map(|i| i.address.clone()).collect()
}

#[test]
fn allocates_and_releases_like_the_reference() {
    let mut f = Fake::new();
    f.files.insert(
        "/etc/test-resolv.conf".into(),
        "nameserver 192.0.2.1\ndomain example.com\nsearch example.com\n".into(),
    );
    let c = conf(
        r#"{"type":"host-local","resolvConf":"/etc/test-resolv.conf",
            "ranges":[[{"subnet":"10.1.2.0/24"},{"subnet":"10.2.2.0/24"}],[{"subnet":"2001:db8:1::/64"}]],
            "routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"},{"dst":"192.168.0.0/16","gw":"1.1.1.1"},{"dst":"2001:db8:2::0/64","gw":"2001:db8:3::1"}]}"#,
    );
    let r = f.add("dummy", &c).unwrap();
    assert_eq!(addrs(&r), ["10.1.2.2/24", "2001:db8:1::2/64"]);
    assert_eq!(r.ips[0].gateway.as_deref(), Some("10.1.2.1"));
    assert_eq!(r.ips[1].gateway.as_deref(), Some("2001:db8:1::1"));
    assert_eq!(r.routes.len(), 4);
    assert_eq!(r.routes[3].dst, "2001:db8:2::/64");
    let dns = r.dns.unwrap();
    assert_eq!(dns.nameservers, ["192.0.2.1"]);
    assert_eq!(dns.domain.as_deref(), Some("example.com"));
    {
        let d = f.data.borrow();
        assert_eq!(d.values["last_reserved_ip.0"], "10.1.2.2");
        assert_eq!(d.values["last_reserved_ip.1"], "2001:db8:1::2");
        assert_eq!(d.values[plugin::REUSE_WAIT_VALUE], "60000");
        // 253 + 253 hosts of two /24s (less their gateways), and 2^64 - 2
        // of the /64 (from ::1's successor to the last).
        let v6 = (1u128 << 64) - 2;
        assert_eq!(d.values[plugin::POOL_SIZE_VALUE], (506 + v6).to_string());
    }
    // CHECK finds it; DEL releases both; CHECK then fails.
    let req = request("dummy", "eth0", &c, &[]);
    f.call(Verb::Check, &owner("dummy"), |h| plugin::check(h, &req))
        .unwrap();
    f.del("dummy", &c);
    assert!(f.live().is_empty());
    let e = f
        .call(Verb::Check, &owner("dummy"), |h| plugin::check(h, &req))
        .unwrap_err();
    assert_eq!(
        e.msg,
        "host-local: Failed to find address added by container dummy"
    );
}

#[test]
fn repeat_allocation_for_the_same_attachment_fails() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.1.2.0/24"}"#);
    f.add("a", &c).unwrap();
    let e = f.add("a", &c).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (999, "failed to allocate for range 0: 10.1.2.2 has been allocated to a, duplicate allocation is not allowed")
    );
    assert_eq!(addrs(&f.add("b", &c).unwrap()), ["10.1.2.3/24"]);
    assert!(f.add("b", &c).is_err());
    // Same container, another interface: a second attachment.
    assert_eq!(
        addrs(&f.add_with("a", "net1", &c, &[]).unwrap()),
        ["10.1.2.4/24"]
    );
}

#[test]
fn del_releases_only_what_the_attachment_owns() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.1.2.0/24"}"#);
    f.add("a", &c).unwrap();
    f.add_with("a", "net1", &c, &[]).unwrap();
    f.del("b", &c);
    f.del("unknown", &c);
    assert_eq!(f.live().len(), 2);
    f.del("a", &c);
    assert_eq!(f.live(), [("10.1.2.3".to_string(), "a".to_string())]);
    // Repeated DEL is fine.
    f.del("a", &c);
}

#[test]
fn quarantine_then_longest_released_first() {
    let f = Fake::new();
    // /29: 5 usable addresses.
    let c = conf(r#"{"subnet":"10.9.0.0/29","reuseIPWait":60}"#);
    for id in ["a", "b", "c", "d", "e"] {
        f.add(id, &c).unwrap();
    }
    f.del("b", &c);
    f.tick(1_000);
    f.del("d", &c);
    // All quarantined or held: code 11, reference text first.
    let e = f.add("x", &c).unwrap_err();
    assert_eq!(e.code, 11);
    assert_eq!(
        e.msg,
        "failed to allocate for range 0: no IP addresses available in range set: 10.9.0.1-10.9.0.6"
    );
    assert!(e.details.contains("reuseQuarantined"), "{}", e.details);
    let st = f.status(&c).unwrap_err();
    assert_eq!(st.code, 50);
    // The failed ADD left nothing behind.
    assert_eq!(f.live().len(), 3);
    f.tick(59_500);
    assert_eq!(addrs(&f.add("x", &c).unwrap()), ["10.9.0.3/29"]);
    assert_eq!(f.add("y", &c).unwrap_err().code, 11);
    f.tick(1_000);
    f.status(&c).unwrap();
    assert_eq!(addrs(&f.add("y", &c).unwrap()), ["10.9.0.5/29"]);
}

#[test]
fn reuse_quarantined_when_asked() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.9.0.0/30","reuseIPWait":600,"reuseQuarantined":true}"#);
    f.add("a", &c).unwrap();
    f.del("a", &c);
    f.status(&c).unwrap();
    assert_eq!(addrs(&f.add("b", &c).unwrap()), ["10.9.0.2/30"]);
    // Truly exhausted: the reference error, code 999.
    let e = f.add("c", &c).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (999, "failed to allocate for range 0: no IP addresses available in range set: 10.9.0.1-10.9.0.2")
    );
}

#[test]
fn a_failure_in_a_later_set_allocates_nothing() {
    let f = Fake::new();
    let c = conf(r#"{"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.9.0.0/30"}]]}"#);
    f.add("a", &c).unwrap();
    let e = f.add("b", &c).unwrap_err();
    assert!(
        e.msg.starts_with("failed to allocate for range 1: "),
        "{}",
        e.msg
    );
    assert_eq!(f.live().len(), 2);
    assert_eq!(f.data.borrow().values["last_reserved_ip.0"], "10.1.2.2");
}

#[test]
fn requested_addresses_from_args_config_and_runtime() {
    let f = Fake::new();
    let c = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
        "ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.3.0/24"}],[{"subnet":"2001:db8:1::/64"}]]},
        "args":{"cni":{"ips":["10.1.2.88"]}},"runtimeConfig":{"ips":["2001:db8:1::999/64"]}}"#;
    let r = f.add_with("a", "eth0", c, &[("IP", "10.1.3.77")]).unwrap();
    assert_eq!(
        addrs(&r),
        ["10.1.2.88/24", "10.1.3.77/24", "2001:db8:1::999/64"]
    );
    // Two requested addresses in one set: one is left over.
    let c2 = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local","subnet":"10.1.2.0/24"},
        "args":{"cni":{"ips":["10.1.2.88","10.1.2.89"]}}}"#;
    let e = f.add("b", c2).unwrap_err();
    assert_eq!(e.msg, "failed to allocate for range 0: requested IP address 10.1.2.88 is not available in range set 10.1.2.1-10.1.2.254");
    let c3 = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local","subnet":"10.1.2.0/24"},
        "args":{"cni":{"ips":["10.1.2.90","10.1.2.91"]}}}"#;
    let e = f.add("b", c3).unwrap_err();
    assert_eq!(e.msg, "failed to allocate all requested IPs: 10.1.2.91");
    assert_eq!(f.live().len(), 3);
}

#[test]
fn resolv_conf_problems() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.1.2.0/24","resolvConf":"/nope"}"#);
    let e = f.add("a", &c).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (5, "open /nope: no such file or directory")
    );
    assert!(f.live().is_empty());
}

#[test]
fn gc_releases_what_is_not_valid() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.1.2.0/24"}"#);
    for id in ["a", "b", "c"] {
        f.add(id, &c).unwrap();
    }
    f.gc(&c, &["a", "c"]).unwrap();
    let live: Vec<String> = f.live().into_iter().map(|(_, o)| o).collect();
    assert_eq!(live, ["a", "c"]);
    // The released address is quarantined, not handed out again.
    assert_eq!(addrs(&f.add("d", &c).unwrap()), ["10.1.2.5/24"]);
    f.gc(&c, &[]).unwrap();
    assert!(f.live().is_empty());
    assert!(f
        .logs
        .borrow()
        .iter()
        .any(|l| l.contains("gc: released 10.1.2.2 of stale a eth0")));
}

#[test]
fn status_and_errors_for_bad_configs() {
    let f = Fake::new();
    f.status(&conf(r#"{"subnet":"10.1.2.0/24"}"#)).unwrap();
    let e = f.status(&conf(r#"{"subnet":"10.1.2.0/31"}"#)).unwrap_err();
    assert_eq!(e.code, 7);
    let e = f.add("a", &conf(r#"{"type":"host-local"}"#)).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (7, "no IP ranges specified"));
    // DEL does not need a valid config to release.
    let good = conf(r#"{"subnet":"10.1.2.0/24"}"#);
    f.add("a", &good).unwrap();
    f.del("a", r#"{"name":"mynet"}"#);
    assert!(f.live().is_empty());
}

#[test]
fn ipv6_only() {
    let f = Fake::new();
    let c = conf(
        r#"{"ranges":[[{"subnet":"2001:db8:5::/120","rangeStart":"2001:db8:5::10","rangeEnd":"2001:db8:5::11"}]],"reuseIPWait":0}"#,
    );
    assert_eq!(addrs(&f.add("a", &c).unwrap()), ["2001:db8:5::10/120"]);
    assert_eq!(addrs(&f.add("b", &c).unwrap()), ["2001:db8:5::11/120"]);
    assert_eq!(f.add("c", &c).unwrap_err().code, 999);
    f.del("b", &c);
    f.tick(1);
    f.del("a", &c);
    // No wait: the longest released comes back first.
    assert_eq!(addrs(&f.add("c", &c).unwrap()), ["2001:db8:5::11/120"]);
}

/// The pool asked through `store.lookup` and `store.span` chooses what the
/// whole map of slots chooses, over a long history with quarantine and two
/// ranges in a set; an ADD lists nothing.
#[test]
fn lookups_and_spans_choose_what_the_whole_history_chooses() {
    use crate::alloc::{Pool, Slot};
    let f = Fake::new();
    let c =
        conf(r#"{"ranges":[[{"subnet":"10.7.0.0/27"},{"subnet":"10.7.1.0/28"}]],"reuseIPWait":3}"#);
    let parsed = crate::config::load(&c, &[]).unwrap();
    let set = &parsed.ranges[0];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut live: Vec<String> = Vec::new();
    for step in 0..3_000u32 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        match seed % 4 {
            0 | 1 => {
                let (slots, last) = {
                    let d = f.data.borrow();
                    let slots: BTreeMap<IpAddr, Slot> = d
                        .entries
                        .iter()
                        .map(|(k, e)| {
                            let slot = Slot {
                                owner: e.owner.clone(),
                                released_at: e.released_at,
                            };
                            (k.parse().unwrap(), slot)
                        })
                        .collect();
                    let last = d
                        .values
                        .get("last_reserved_ip.0")
                        .map(|s| s.parse().unwrap());
                    (slots, last)
                };
                let id = format!("c{step}");
                let want = Pool { set, slots: &slots }
                    .choose(&owner(&id), None, last, f.now.get(), &parsed.policy)
                    .map(|(ip, _)| ip.to_string());
                let got = f
                    .add(&id, &c)
                    .map(|r| r.ips[0].address.split('/').next().unwrap().to_string());
                match (&want, &got) {
                    (Ok(w), Ok(g)) => {
                        assert_eq!(w, g, "step {step}");
                        live.push(id);
                    }
                    (Err(w), Err(e)) => {
                        let code = match w {
                            crate::alloc::AllocError::Quarantined { .. } => 11,
                            _ => 999,
                        };
                        assert_eq!(e.code, code, "step {step}: {}", e.msg);
                        assert!(e.msg.ends_with(&w.to_string()), "step {step}: {}", e.msg);
                    }
                    _ => panic!("step {step}: whole map {want:?}, lookups {got:?}"),
                }
            }
            2 if !live.is_empty() => {
                let id = live.swap_remove((seed >> 8) as usize % live.len());
                f.del(&id, &c);
            }
            _ => f.tick(seed % 1_500),
        }
    }
    assert!(f.data.borrow().entries.len() > 30, "the history filled up");
    assert_eq!(f.lists.get(), 0, "an ADD lists the whole scope");
}

/// The never-used walk asks in batches, past what one lookup takes.
#[test]
fn the_never_used_walk_crosses_more_than_one_lookup() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.8.0.0/21"}"#);
    for i in 0..1_100 {
        f.add(&format!("c{i}"), &c).unwrap();
    }
    // Back to the start: 1 100 used addresses before a never-used one.
    f.data
        .borrow_mut()
        .values
        .insert("last_reserved_ip.0".into(), "10.8.0.1".into());
    // 10.8.0.2 + 1 100 = 10.8.4.78.
    assert_eq!(addrs(&f.add("next", &c).unwrap()), ["10.8.4.78/21"]);
}

/// A store that cannot answer fails the ADD with its code and allocates
/// nothing.
#[test]
fn a_store_read_failure_allocates_nothing() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"10.1.2.0/24"}"#);
    f.add("a", &c).unwrap();
    f.fail_reads.set(true);
    let e = f.add("b", &c).unwrap_err();
    assert_eq!(e.code, 5, "{}", e.msg);
    assert!(e.msg.starts_with("reading allocations: "), "{}", e.msg);
    f.fail_reads.set(false);
    assert_eq!(f.live().len(), 1);
    assert_eq!(addrs(&f.add("b", &c).unwrap()), ["10.1.2.3/24"]);
}

/// At the history's cap the oldest expired address is reused, as the spans
/// count it, instead of a never-used one.
#[test]
fn a_full_history_reuses_through_spans() {
    let f = Fake::new();
    let c = conf(r#"{"subnet":"2001:db8:9::/64","reuseIPWait":1}"#);
    {
        let mut d = f.data.borrow_mut();
        let mut ip: IpAddr = "2001:db8:9::2".parse().unwrap();
        for i in 0..crate::alloc::HISTORY_CAP as u64 {
            let key = ip.to_string();
            // Released in reverse address order: the last is the oldest.
            let e = Entry {
                key: key.clone(),
                owner: owner("old"),
                allocated_at: 1,
                released_at: Some(500_000 - i),
            };
            d.entries.insert(key, e);
            ip = crate::ip::next(ip);
        }
    }
    assert_eq!(addrs(&f.add("a", &c).unwrap()), ["2001:db8:9::1001/64"]);
    assert_eq!(f.lists.get(), 0);
}

/// A store several nodes share: other nodes' blocks are taken from last.
/// The node walks past them, reuses and quarantines within its own and the
/// unclaimed ones, and borrows from others' only when those have nothing;
/// a requested address is given wherever it is.
#[test]
fn other_nodes_blocks_are_taken_from_last() {
    let f = Fake::new();
    // A /26 pool split in four /28 "blocks" for the test: .0/28 and .32/28
    // are other nodes'; .16/28 and .48/28 are free to claim.
    *f.others.borrow_mut() = vec!["10.9.0.0/28".into(), "10.9.0.32/28".into(), "junk".into()];
    let c = conf(r#"{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/26"}]],"reuseIPWait":60}"#);
    let first = f.add("a", &c).unwrap();
    assert_eq!(addrs(&first), ["10.9.0.16/26"]);
    // Fill .16..=.31 and .48..=.62 (15 + 15 addresses, .63 is broadcast).
    let mut got = vec!["10.9.0.16".to_string()];
    for i in 1..31 {
        let r = f.add(&format!("c{i}"), &c).unwrap();
        got.push(addrs(&r)[0].trim_end_matches("/26").to_string());
    }
    let in_others = |ip: &String| {
        let last: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
        last < 16 || (32..48).contains(&last)
    };
    assert!(!got.iter().any(in_others), "{got:?}");
    // Released ones are quarantined: the next borrows a never-used one
    // from another node's block instead of waiting.
    f.del("c1", &c);
    let borrowed = f.add("b1", &c).unwrap();
    assert_eq!(addrs(&borrowed), ["10.9.0.2/26"], "gateway .1 skipped");
    assert!(f
        .logs
        .borrow()
        .iter()
        .any(|l| l.contains("borrowing from other nodes' blocks")));
    // Once quarantine is over, the node's own released address comes
    // back before another node's never-used ones.
    f.tick(61_000);
    let own = f.add("b2", &c).unwrap();
    assert_eq!(addrs(&own), ["10.9.0.17/26"]);
    // A requested address in another node's block is given.
    let asked = f.add_with("r", "eth0", &c, &[("IP", "10.9.0.40")]).unwrap();
    assert_eq!(addrs(&asked), ["10.9.0.40/26"]);
    // A duplicate is refused as such, not borrowed around.
    let seen = f.logs.borrow().len();
    let e = f.add("b2", &c).unwrap_err();
    assert!(
        e.msg.contains("duplicate allocation is not allowed"),
        "{}",
        e.msg
    );
    assert!(!f.logs.borrow()[seen..]
        .iter()
        .any(|l| l.contains("borrowing")));
    // A store of one node: no preference, the round-robin as before.
    let g = Fake::new();
    assert_eq!(addrs(&g.add("a", &c).unwrap()), ["10.9.0.2/26"]);
}
