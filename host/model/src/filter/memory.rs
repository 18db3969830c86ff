//! [`Filter`] as a model: wasm-cni's tables as lists of commented rules, with
//! the kernel backend's rules for what exists when (tables appear with their
//! first rule and go with their last, a batch is all or nothing).

use super::{port_clash, Entry, Filter, FilterError, Owned, Rule, Tag};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Installed {
    family: &'static str,
    chain: &'static str,
    comment: String,
}

#[derive(Debug, Default)]
pub struct MemoryFilter {
    rules: Vec<Installed>,
    /// Fail the next `add` with this errno, as a full kernel would.
    fail_next_add: Option<i32>,
}

/// Where each kernel rule of `rule` goes, as `KernelFilter` places them.
fn placement(rule: &Rule) -> Vec<(&'static str, &'static str)> {
    match rule {
        Rule::Masquerade { .. } => vec![("inet", "postrouting")],
        Rule::PortMap { .. } => vec![("inet", "prerouting"), ("inet", "output")],
        Rule::HairpinMasquerade { dst } if dst.is_ipv4() => {
            vec![("inet", "postrouting"), ("inet", "postrouting")]
        }
        Rule::HairpinMasquerade { .. } => vec![("inet", "postrouting")],
        Rule::AllowForward { .. } => vec![("inet", "forward"), ("inet", "forward")],
        Rule::IsolateBridge { .. } => vec![("inet", "isolated"), ("inet", "isolation")],
        Rule::MacSpoofCheck { .. } => vec![("bridge", "prerouting")],
    }
}

impl MemoryFilter {
    pub fn new() -> Self {
        MemoryFilter::default()
    }

    /// Make the next `add` fail with `errno` (fault injection in tests).
    pub fn fail_next_add(&mut self, errno: i32) {
        self.fail_next_add = Some(errno);
    }

    /// Every kernel rule of `rule` is in place.
    fn complete(&self, tag: &Tag, rule: &Rule) -> bool {
        let c = tag.comment(rule);
        self.rules.iter().filter(|i| i.comment == c).count() >= placement(rule).len()
    }

    /// Delete one installed kernel rule of `rule`, as `nft delete rule`
    /// would (tests of partial rules).
    pub fn delete_one(&mut self, tag: &Tag, rule: &Rule) -> bool {
        let c = tag.comment(rule);
        match self.rules.iter().position(|i| i.comment == c) {
            Some(i) => {
                self.rules.remove(i);
                true
            }
            None => false,
        }
    }

    fn delete_where(&mut self, doomed: impl Fn(&Owned, &str) -> bool) -> usize {
        let mut gone: Vec<String> = Vec::new();
        self.rules.retain(|r| {
            let hit = Owned::parse(&r.comment).is_some_and(|o| doomed(&o, &r.comment));
            if hit && !gone.contains(&r.comment) {
                gone.push(r.comment.clone());
            }
            !hit
        });
        gone.len()
    }
}

impl Filter for MemoryFilter {
    fn add(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<Rule>, FilterError> {
        for r in rules {
            r.validate()?;
        }
        if let Some(errno) = self.fail_next_add.take() {
            return Err(FilterError::kernel(errno, "adding rules: injected failure"));
        }
        port_clash(
            tag,
            rules,
            self.rules
                .iter()
                .filter(|r| r.family == "inet")
                .map(|r| r.comment.as_str()),
        )?;
        let mut fresh = Vec::new();
        for r in rules {
            if self.complete(tag, r) || fresh.contains(r) {
                continue;
            }
            fresh.push(r.clone());
        }
        for r in &fresh {
            let comment = tag.comment(r);
            for (family, chain) in placement(r) {
                self.rules.push(Installed {
                    family,
                    chain,
                    comment: comment.clone(),
                });
            }
        }
        Ok(fresh)
    }

    fn present(&mut self, tag: &Tag, rules: &[Rule]) -> Result<Vec<bool>, FilterError> {
        Ok(rules.iter().map(|r| self.complete(tag, r)).collect())
    }

    fn remove(&mut self, tag: &Tag, rules: &[Rule]) -> Result<usize, FilterError> {
        let wanted: Vec<String> = rules.iter().map(|r| tag.comment(r)).collect();
        Ok(self.delete_where(|_, c| wanted.iter().any(|w| w == c)))
    }

    fn remove_all(&mut self, tag: &Tag) -> Result<usize, FilterError> {
        Ok(self.delete_where(|o, _| o.tag == *tag))
    }

    fn sweep(&mut self, network: &str, keep: &[String]) -> Result<usize, FilterError> {
        Ok(self.delete_where(|o, _| o.tag.network == network && !keep.contains(&o.tag.attachment)))
    }

    fn list(&mut self) -> Result<Vec<Entry>, FilterError> {
        let mut out: Vec<Entry> = Vec::new();
        // Grouped by family and chain, in insertion order within a chain,
        // as a dump of the kernel's tables lists them.
        for family in ["inet", "bridge"] {
            let mut chains: Vec<&str> = Vec::new();
            for r in self.rules.iter().filter(|r| r.family == family) {
                if !chains.contains(&r.chain) {
                    chains.push(r.chain);
                }
            }
            for chain in chains {
                out.extend(
                    self.rules
                        .iter()
                        .filter(|r| r.family == family && r.chain == chain)
                        .map(|r| Entry {
                            family,
                            chain: chain.to_string(),
                            comment: r.comment.clone(),
                        }),
                );
            }
        }
        Ok(out)
    }
}
