//! Choosing an address in one range set: the reference checks for requested
//! addresses and duplicates, then this plugin's reuse policy.
//!
//! Reuse policy. A released address keeps its store entry (the host marks
//! it released) and is quarantined for `reuseIPWait`: a packet or a stale
//! DNS/conntrack entry meant for the old holder must not reach a new one.
//! Among free addresses, never-used ones come first (in the reference's
//! round-robin order), then the one released longest ago, so every address
//! is reused as late as possible. Only once the set's history holds
//! [`HISTORY_CAP`] entries does an expired one win over a never-used one,
//! which bounds the store for huge (IPv6) ranges.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::range::RangeSet;

/// Entries of one range set beyond which reuse beats extending the history.
pub const HISTORY_CAP: usize = 4096;

/// Who holds an address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub container_id: String,
    pub ifname: String,
}

/// What the store knows of one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub owner: Owner,
    /// Milliseconds since the epoch (host clock).
    pub released_at: Option<u64>,
}

impl Slot {
    pub fn is_live(&self) -> bool {
        self.released_at.is_none()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub reuse_wait_ms: u64,
    pub reuse_quarantined: bool,
}

/// Why no address could be chosen. `Display` gives the reference text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// Every address is held by a live allocation.
    Exhausted { set: String },
    /// Nothing is free now, but quarantined addresses will be.
    Quarantined {
        set: String,
        quarantined: usize,
        /// Until the first quarantined address becomes free.
        next_free_ms: u64,
    },
    /// Requested-address and duplicate checks, in the reference's words.
    Refused(String),
    /// The store could not answer: the whole message, with its CNI code.
    Store(wasm_cni_sdk::error::CniError),
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::Exhausted { set } | AllocError::Quarantined { set, .. } => {
                write!(f, "no IP addresses available in range set: {set}")
            }
            AllocError::Refused(m) => f.write_str(m),
            AllocError::Store(e) => f.write_str(&e.msg),
        }
    }
}

/// How an address was picked, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Requested,
    NeverUsed,
    /// Released this long ago.
    Reused {
        released_ms_ago: u64,
    },
    /// Taken from quarantine (`reuseQuarantined`), this long before its end.
    Quarantined {
        early_ms: u64,
    },
}

/// What one span of addresses holds (`Slots::span`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanCount {
    /// Entries, live and released.
    pub entries: usize,
    pub released: usize,
    /// The entry released longest ago: (release time, address), the lowest
    /// address among equals.
    pub oldest: Option<(u64, IpAddr)>,
}

impl SpanCount {
    /// Count another, disjoint span in with this one.
    fn add(&mut self, other: SpanCount) {
        self.entries += other.entries;
        self.released += other.released;
        self.oldest = match (self.oldest, other.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// The questions the reuse policy asks of the store. The component asks
/// the host (`store.lookup`, `store.span`: a call costs what it looks at,
/// not the whole history); a map of every slot answers the same in the
/// unit tests and for STATUS.
pub trait Slots {
    /// The slot of each address, in order (`None`: never used).
    fn get(&self, ips: &[IpAddr]) -> Result<Vec<Option<Slot>>, AllocError>;
    /// What `first..=last` holds (one family, in order).
    fn span(&self, first: IpAddr, last: IpAddr) -> Result<SpanCount, AllocError>;
    /// Addresses held live by `owner`.
    fn held_by(&self, owner: &Owner) -> Result<Vec<IpAddr>, AllocError>;
}

impl Slots for BTreeMap<IpAddr, Slot> {
    fn get(&self, ips: &[IpAddr]) -> Result<Vec<Option<Slot>>, AllocError> {
        Ok(ips
            .iter()
            .map(|ip| BTreeMap::get(self, ip).cloned())
            .collect())
    }

    fn span(&self, first: IpAddr, last: IpAddr) -> Result<SpanCount, AllocError> {
        let mut count = SpanCount::default();
        for (ip, slot) in self.range(first..=last) {
            count.entries += 1;
            if let Some(t) = slot.released_at {
                count.released += 1;
                if count.oldest.is_none_or(|o| (t, *ip) < o) {
                    count.oldest = Some((t, *ip));
                }
            }
        }
        Ok(count)
    }

    fn held_by(&self, owner: &Owner) -> Result<Vec<IpAddr>, AllocError> {
        Ok(self
            .iter()
            .filter(|(_, s)| s.is_live() && s.owner == *owner)
            .map(|(ip, _)| *ip)
            .collect())
    }
}

/// The slots as this node sees them while it takes from other nodes'
/// blocks last (a store several nodes share, `store.blocks-of-other-nodes`):
/// every address of those blocks shows as held, so the never-used walk
/// passes over them, and a span counts only what lies outside them, so
/// reuse and quarantine look at this node's own and unclaimed blocks. The
/// blocks are a preference, never a limit: the caller asks the plain slots
/// when these give nothing.
pub struct Elsewhere<'a, S: Slots + ?Sized> {
    slots: &'a S,
    /// Other nodes' blocks as `(first, last)`, sorted, disjoint.
    blocks: Vec<(IpAddr, IpAddr)>,
}

impl<'a, S: Slots + ?Sized> Elsewhere<'a, S> {
    /// Over `slots`, with `blocks` (CIDRs as the host gives them; one that
    /// does not parse is no block).
    pub fn new(slots: &'a S, blocks: &[String]) -> Self {
        let mut spans: Vec<(IpAddr, IpAddr)> = blocks
            .iter()
            .filter_map(|b| crate::ip::parse_cidr(b).ok())
            .map(|n| {
                (
                    crate::ip::canonical(n.network()),
                    crate::ip::canonical(n.broadcast()),
                )
            })
            .collect();
        spans.sort();
        // Merged, so that the gaps between them are the spans to ask about.
        let mut blocks: Vec<(IpAddr, IpAddr)> = Vec::with_capacity(spans.len());
        for (a, b) in spans {
            match blocks.last_mut() {
                Some(last) if a.is_ipv4() == last.1.is_ipv4() && a <= last.1 => {
                    last.1 = last.1.max(b);
                }
                _ => blocks.push((a, b)),
            }
        }
        Self { slots, blocks }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn claimed(&self, ip: &IpAddr) -> bool {
        let at = self.blocks.partition_point(|(_, last)| last < ip);
        self.blocks.get(at).is_some_and(|(first, _)| first <= ip)
    }

    /// The parts of `first..=last` outside every block.
    fn gaps(&self, first: IpAddr, last: IpAddr) -> Vec<(IpAddr, IpAddr)> {
        let family = crate::ip::Family::of(&first);
        let mut gaps = Vec::new();
        let mut from = Some(first);
        for &(a, b) in &self.blocks {
            let Some(start) = from else { break };
            if b < start || a.is_ipv4() != first.is_ipv4() {
                continue;
            }
            if a > last {
                break;
            }
            if a > start {
                // Above `start`, so `a` has an address before it.
                let end = crate::ip::to_u128(a).saturating_sub(1);
                gaps.push((start, crate::ip::from_u128(family, end)));
            }
            // The address after the block: none past the family's last,
            // where `next` wraps.
            from = Some(crate::ip::next(b)).filter(|n| *n > b);
        }
        if let Some(start) = from.filter(|s| *s <= last) {
            gaps.push((start, last));
        }
        gaps
    }
}

impl<S: Slots + ?Sized> Slots for Elsewhere<'_, S> {
    fn get(&self, ips: &[IpAddr]) -> Result<Vec<Option<Slot>>, AllocError> {
        let ask: Vec<IpAddr> = ips.iter().filter(|ip| !self.claimed(ip)).copied().collect();
        // A batch wholly inside other nodes' blocks costs no host call.
        let answers = if ask.is_empty() {
            Vec::new()
        } else {
            self.slots.get(&ask)?
        };
        let mut answers = answers.into_iter();
        let held = Slot {
            owner: Owner {
                container_id: "(another node's block)".into(),
                ifname: String::new(),
            },
            released_at: None,
        };
        Ok(ips
            .iter()
            .map(|ip| {
                if self.claimed(ip) {
                    Some(held.clone())
                } else {
                    answers.next().flatten()
                }
            })
            .collect())
    }

    fn span(&self, first: IpAddr, last: IpAddr) -> Result<SpanCount, AllocError> {
        let mut all = SpanCount::default();
        for (a, b) in self.gaps(first, last) {
            all.add(self.slots.span(a, b)?);
        }
        Ok(all)
    }

    fn held_by(&self, owner: &Owner) -> Result<Vec<IpAddr>, AllocError> {
        self.slots.held_by(owner)
    }
}

/// One range set over the store's slots.
pub struct Pool<'a, S: Slots + ?Sized> {
    pub set: &'a RangeSet,
    pub slots: &'a S,
}

/// When a released slot leaves quarantine.
fn free_at(released_at: u64, policy: &Policy) -> u64 {
    released_at.saturating_add(policy.reuse_wait_ms)
}

/// Candidates asked about at once in the never-used walk: the first batch
/// is small since the next address in round-robin order is usually free;
/// later ones grow up to what one `store.lookup` takes.
const FIRST_BATCH: usize = 8;
const MAX_BATCH: usize = crate::plugin::MAX_LOOKUP;

impl<S: Slots + ?Sized> Pool<'_, S> {
    /// What the whole set holds: its ranges' spans together.
    fn count(&self) -> Result<SpanCount, AllocError> {
        let mut all = SpanCount::default();
        for r in &self.set.0 {
            all.add(self.slots.span(r.start, r.end)?);
        }
        Ok(all)
    }

    /// The first never-used address in round-robin order after `last`.
    fn never_used(&self, last: Option<IpAddr>) -> Result<Option<IpAddr>, AllocError> {
        let mut walk = self.set.iter_from(last);
        let mut batch = FIRST_BATCH;
        loop {
            let ips: Vec<IpAddr> = walk.by_ref().take(batch).collect();
            if ips.is_empty() {
                return Ok(None);
            }
            let slots = self.slots.get(&ips)?;
            if let Some(i) = slots.iter().position(Option::is_none) {
                return Ok(ips.get(i).copied());
            }
            batch = (batch * 4).min(MAX_BATCH);
        }
    }

    /// Pick an address for `owner` (`IPAllocator.Get`, then the policy).
    pub fn choose(
        &self,
        owner: &Owner,
        requested: Option<IpAddr>,
        last_reserved: Option<IpAddr>,
        now: u64,
        policy: &Policy,
    ) -> Result<(IpAddr, How), AllocError> {
        if let Some(ip) = requested {
            let range = self.set.range_for(&ip).map_err(AllocError::Refused)?;
            if range.gateway == ip {
                return Err(AllocError::Refused(format!(
                    "requested ip {ip} is subnet's gateway"
                )));
            }
            // An explicit request is honoured even in quarantine: the
            // caller chose this address (often to get its own one back).
            let held = self.slots.get(&[ip])?;
            if held
                .first()
                .is_some_and(|s| s.as_ref().is_some_and(Slot::is_live))
            {
                return Err(AllocError::Refused(format!(
                    "requested IP address {ip} is not available in range set {}",
                    self.set
                )));
            }
            return Ok((ip, How::Requested));
        }
        if let Some(ip) = self
            .slots
            .held_by(owner)?
            .into_iter()
            .find(|ip| self.set.contains(ip))
        {
            return Err(AllocError::Refused(format!(
                "{ip} has been allocated to {}, duplicate allocation is not allowed",
                owner.container_id
            )));
        }

        let count = self.count()?;
        // The oldest release is the first to leave quarantine.
        let expired = count.oldest.filter(|(t, _)| free_at(*t, policy) <= now);

        if let (Some((t, ip)), true) = (expired, count.entries >= HISTORY_CAP) {
            return Ok((ip, reused(now, t)));
        }
        // Each step lands on a slot or on a never-used address, so this ends
        // within history + gateways + 1 steps even in a /64.
        if let Some(ip) = self.never_used(last_reserved)? {
            return Ok((ip, How::NeverUsed));
        }
        if let Some((t, ip)) = expired {
            return Ok((ip, reused(now, t)));
        }
        match count.oldest {
            Some((t, ip)) if policy.reuse_quarantined => Ok((
                ip,
                How::Quarantined {
                    early_ms: free_at(t, policy).saturating_sub(now),
                },
            )),
            Some((t, _)) => Err(AllocError::Quarantined {
                set: self.set.to_string(),
                quarantined: count.released,
                next_free_ms: free_at(t, policy).saturating_sub(now),
            }),
            None => Err(AllocError::Exhausted {
                set: self.set.to_string(),
            }),
        }
    }
}

impl Pool<'_, BTreeMap<IpAddr, Slot>> {
    fn in_set(&self) -> impl Iterator<Item = (&IpAddr, &Slot)> {
        self.slots.iter().filter(|(ip, _)| self.set.contains(ip))
    }

    /// Addresses an ADD could get right now (STATUS).
    pub fn allocatable(&self, now: u64, policy: &Policy) -> u128 {
        let held = self
            .in_set()
            .filter(|(ip, _)| self.set.0.iter().all(|r| r.gateway != **ip))
            .filter(|(_, s)| match s.released_at {
                None => true,
                Some(_) if policy.reuse_quarantined => false,
                Some(t) => free_at(t, policy) > now,
            })
            .count();
        self.set.size().saturating_sub(held as u128)
    }
}

fn reused(now: u64, released_at: u64) -> How {
    How::Reused {
        released_ms_ago: now.saturating_sub(released_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::RangeConf;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn owner(c: &str) -> Owner {
        Owner {
            container_id: c.into(),
            ifname: "eth0".into(),
        }
    }

    fn set(subnet: &str) -> RangeSet {
        RangeSet::canonicalize(&[RangeConf {
            subnet: Some(subnet.into()),
            ..RangeConf::default()
        }])
        .unwrap()
    }

    /// A tiny store: allocate/release with the host's semantics.
    struct Sim {
        set: RangeSet,
        slots: BTreeMap<IpAddr, Slot>,
        last: Option<IpAddr>,
        policy: Policy,
    }

    impl Sim {
        fn new(subnet: &str, wait_ms: u64) -> Self {
            Sim {
                set: set(subnet),
                slots: BTreeMap::new(),
                last: None,
                policy: Policy {
                    reuse_wait_ms: wait_ms,
                    reuse_quarantined: false,
                },
            }
        }
        fn pool(&self) -> Pool<'_, BTreeMap<IpAddr, Slot>> {
            Pool {
                set: &self.set,
                slots: &self.slots,
            }
        }
        fn add(&mut self, c: &str, now: u64) -> Result<String, AllocError> {
            let (ip, _) = self
                .pool()
                .choose(&owner(c), None, self.last, now, &self.policy)?;
            self.slots.insert(
                ip,
                Slot {
                    owner: owner(c),
                    released_at: None,
                },
            );
            self.last = Some(ip);
            Ok(ip.to_string())
        }
        fn del(&mut self, c: &str, now: u64) {
            for s in self.slots.values_mut() {
                if s.is_live() && s.owner == owner(c) {
                    s.released_at = Some(now);
                }
            }
        }
    }

    #[test]
    fn round_robin_like_the_reference() {
        // A gets .2, B gets .3, A is released, C gets .4 (not .2).
        let mut s = Sim::new("10.200.1.0/24", 0);
        assert_eq!(s.add("a", 0).unwrap(), "10.200.1.2");
        assert_eq!(s.add("b", 0).unwrap(), "10.200.1.3");
        s.del("a", 1);
        assert_eq!(s.add("c", 2).unwrap(), "10.200.1.4");
        let mut s6 = Sim::new("2001:db8:1::/64", 0);
        assert_eq!(s6.add("a", 0).unwrap(), "2001:db8:1::2");
    }

    #[test]
    fn never_used_first_then_longest_released() {
        // /29: .2 .. .6 usable.
        let mut s = Sim::new("192.168.1.0/29", 0);
        for (i, c) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            assert_eq!(s.add(c, 0).unwrap(), format!("192.168.1.{}", i + 2));
        }
        // Release in the order d, b, e: reuse follows release order, not
        // address order nor the round-robin cursor.
        s.del("d", 10);
        s.del("b", 20);
        s.del("e", 30);
        assert_eq!(s.add("f", 40).unwrap(), "192.168.1.5");
        assert_eq!(s.add("g", 41).unwrap(), "192.168.1.3");
        s.del("a", 42);
        assert_eq!(s.add("h", 43).unwrap(), "192.168.1.6");
        assert_eq!(s.add("i", 44).unwrap(), "192.168.1.2");
    }

    #[test]
    fn never_used_beats_an_expired_release() {
        let mut s = Sim::new("192.168.1.0/29", 1000);
        assert_eq!(s.add("a", 0).unwrap(), "192.168.1.2");
        s.del("a", 1);
        // Long after the quarantine: still a fresh address first.
        assert_eq!(s.add("b", 1_000_000).unwrap(), "192.168.1.3");
    }

    #[test]
    fn quarantine_blocks_reuse_until_the_wait_is_over() {
        let mut s = Sim::new("10.200.9.0/29", 60_000);
        for c in ["a", "b", "c", "d", "e"] {
            s.add(c, 0).unwrap();
        }
        s.del("c", 1_000);
        s.del("a", 2_000);
        let err = s.add("x", 30_000).unwrap_err();
        assert_eq!(
            err,
            AllocError::Quarantined {
                set: "10.200.9.1-10.200.9.6".into(),
                quarantined: 2,
                next_free_ms: 31_000,
            }
        );
        assert_eq!(
            err.to_string(),
            "no IP addresses available in range set: 10.200.9.1-10.200.9.6"
        );
        assert_eq!(s.pool().allocatable(30_000, &s.policy), 0);
        // c's quarantine ends first.
        assert_eq!(s.pool().allocatable(61_000, &s.policy), 1);
        assert_eq!(s.add("x", 61_000).unwrap(), "10.200.9.4");
        assert!(s.add("y", 61_500).is_err());
        assert_eq!(s.add("y", 62_000).unwrap(), "10.200.9.2");
    }

    #[test]
    fn reuse_quarantined_takes_the_longest_released() {
        let mut s = Sim::new("10.200.9.0/29", 60_000);
        s.policy.reuse_quarantined = true;
        for c in ["a", "b", "c", "d", "e"] {
            s.add(c, 0).unwrap();
        }
        s.del("d", 5);
        s.del("b", 6);
        let (ip, how) = s
            .pool()
            .choose(&owner("x"), None, s.last, 10, &s.policy)
            .unwrap();
        assert_eq!(ip.to_string(), "10.200.9.5");
        assert_eq!(how, How::Quarantined { early_ms: 59_995 });
        assert_eq!(s.pool().allocatable(10, &s.policy), 2);
    }

    #[test]
    fn exhaustion_error_text() {
        let mut s = Sim::new("10.200.9.0/30", 0);
        assert_eq!(s.add("a", 0).unwrap(), "10.200.9.2");
        let err = s.add("b", 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no IP addresses available in range set: 10.200.9.1-10.200.9.2"
        );
        assert!(matches!(err, AllocError::Exhausted { .. }));
        assert_eq!(s.pool().allocatable(0, &s.policy), 0);
    }

    #[test]
    fn duplicate_allocation_is_refused() {
        let mut s = Sim::new("10.200.9.0/29", 0);
        s.add("a", 0).unwrap();
        assert_eq!(
            s.add("a", 0).unwrap_err().to_string(),
            "10.200.9.2 has been allocated to a, duplicate allocation is not allowed"
        );
        // Another ifname of the same container is another attachment.
        let other = Owner {
            container_id: "a".into(),
            ifname: "net1".into(),
        };
        assert!(s.pool().choose(&other, None, s.last, 0, &s.policy).is_ok());
    }

    #[test]
    fn requested_addresses() {
        let mut s = Sim::new("192.168.1.0/29", 60_000);
        let get = |s: &Sim, r: &str| {
            s.pool()
                .choose(&owner("x"), Some(ip(r)), None, 0, &s.policy)
                .map(|(ip, _)| ip.to_string())
                .map_err(|e| e.to_string())
        };
        assert_eq!(get(&s, "192.168.1.5").unwrap(), "192.168.1.5");
        s.slots.insert(
            ip("192.168.1.5"),
            Slot {
                owner: owner("a"),
                released_at: None,
            },
        );
        assert_eq!(
            get(&s, "192.168.1.5").unwrap_err(),
            "requested IP address 192.168.1.5 is not available in range set 192.168.1.1-192.168.1.6"
        );
        assert_eq!(
            get(&s, "192.168.1.1").unwrap_err(),
            "requested ip 192.168.1.1 is subnet's gateway"
        );
        assert_eq!(
            get(&s, "192.168.1.7").unwrap_err(),
            "192.168.1.7 not in range set 192.168.1.1-192.168.1.6"
        );
        // Quarantine does not stop an explicit request.
        s.del("a", 1);
        assert_eq!(get(&s, "192.168.1.5").unwrap(), "192.168.1.5");
        // Before rangeStart / after rangeEnd.
        let r = RangeSet::canonicalize(&[RangeConf {
            subnet: Some("192.168.1.0/24".into()),
            range_start: Some("192.168.1.10".into()),
            range_end: Some("192.168.1.20".into()),
            gateway: None,
        }])
        .unwrap();
        let pool = Pool {
            set: &r,
            slots: &s.slots,
        };
        for bad in ["192.168.1.9", "192.168.1.21"] {
            assert!(pool
                .choose(&owner("x"), Some(ip(bad)), None, 0, &s.policy)
                .is_err());
        }
    }

    #[test]
    fn last_reserved_at_the_end_of_a_range_moves_to_the_next() {
        let r = RangeSet::canonicalize(&[
            RangeConf {
                subnet: Some("192.168.1.0/24".into()),
                range_start: Some("192.168.1.5".into()),
                range_end: Some("192.168.1.6".into()),
                gateway: None,
            },
            RangeConf {
                subnet: Some("192.168.2.0/24".into()),
                range_start: Some("192.168.2.5".into()),
                range_end: Some("192.168.2.6".into()),
                gateway: None,
            },
        ])
        .unwrap();
        let slots = BTreeMap::new();
        let pool = Pool {
            set: &r,
            slots: &slots,
        };
        let p = Policy {
            reuse_wait_ms: 0,
            reuse_quarantined: false,
        };
        let (ip1, _) = pool
            .choose(&owner("x"), None, Some(ip("192.168.1.6")), 0, &p)
            .unwrap();
        assert_eq!(ip1.to_string(), "192.168.2.5");
        let (ip2, _) = pool.choose(&owner("x"), None, None, 0, &p).unwrap();
        assert_eq!(ip2.to_string(), "192.168.1.5");
    }

    #[test]
    fn a_full_history_reuses_instead_of_growing() {
        let set = set("2001:db8::/64");
        let mut slots = BTreeMap::new();
        let mut cur = ip("2001:db8::2");
        for i in 0..HISTORY_CAP as u64 {
            slots.insert(
                cur,
                Slot {
                    owner: owner("old"),
                    released_at: Some(1_000 + i),
                },
            );
            cur = crate::ip::next(cur);
        }
        let pool = Pool {
            set: &set,
            slots: &slots,
        };
        let p = Policy {
            reuse_wait_ms: 10,
            reuse_quarantined: false,
        };
        let (got, how) = pool.choose(&owner("x"), None, None, 1_000_000, &p).unwrap();
        assert_eq!(got, ip("2001:db8::2"));
        assert!(matches!(how, How::Reused { .. }));
        // While all are quarantined, a fresh address is still fine.
        let (got, _) = pool.choose(&owner("x"), None, None, 1_005, &p).unwrap();
        assert_eq!(got, cur);
    }

    /// What a span asks of the plain slots around other nodes' blocks: the
    /// gaps, at the edges of the family too, and nothing inside a block.
    #[test]
    fn elsewhere_asks_only_about_the_gaps() {
        let slots: BTreeMap<IpAddr, Slot> = BTreeMap::new();
        let blocks = |b: &[&str]| b.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let gaps = |e: &Elsewhere<'_, BTreeMap<IpAddr, Slot>>, a: &str, b: &str| {
            e.gaps(ip(a), ip(b))
                .into_iter()
                .map(|(x, y)| format!("{x}-{y}"))
                .collect::<Vec<_>>()
        };
        let e = Elsewhere::new(
            &slots,
            &blocks(&[
                "10.0.0.64/26",
                "10.0.0.0/26",
                "10.0.0.32/27",
                "fd00::40/122",
                "x",
            ]),
        );
        // Overlapping blocks merge, adjacent ones leave no gap between
        // them; one that is not a CIDR is no block.
        assert_eq!(
            gaps(&e, "10.0.0.1", "10.0.0.254"),
            ["10.0.0.128-10.0.0.254"]
        );
        assert_eq!(gaps(&e, "10.0.0.10", "10.0.0.20"), Vec::<String>::new());
        assert_eq!(
            gaps(&e, "9.255.255.250", "10.0.0.1"),
            ["9.255.255.250-9.255.255.255"]
        );
        assert_eq!(
            gaps(&e, "fd00::1", "fd00::ff"),
            ["fd00::1-fd00::3f", "fd00::80-fd00::ff"]
        );
        assert!(e.claimed(&ip("10.0.0.127")) && !e.claimed(&ip("10.0.0.128")));
        assert!(!e.claimed(&ip("fd00::3f")) && e.claimed(&ip("fd00::7f")));
        // A block at the very end of the family leaves nothing after it.
        let top = Elsewhere::new(&slots, &blocks(&["255.255.255.192/26"]));
        assert_eq!(
            gaps(&top, "255.255.255.0", "255.255.255.255"),
            ["255.255.255.0-255.255.255.191"]
        );
        let none = Elsewhere::new(&slots, &[]);
        assert!(none.is_empty());
        assert_eq!(gaps(&none, "10.0.0.1", "10.0.0.2"), ["10.0.0.1-10.0.0.2"]);
    }
}
