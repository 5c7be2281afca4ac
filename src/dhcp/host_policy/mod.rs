//! Per-MAC allow/deny set at run time through the operator API: the replacement for
//! Ironic's dnsmasq `dhcp-hostsdir` PXE filter, which can add entries but not remove
//! them without a restart. A decision takes effect on the very next packet; every
//! change is durable (through the store's committer) before the API answers. Below it
//! sits what a watched hosts directory says (`dhcp.hostsdir`: `hostsdir.rs` reads it,
//! `watch.rs` follows it): the operator's word wins.

pub mod hostsdir;
pub mod optsdir;
pub mod watch;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::mac::MacAddr;
use crate::options::OptionRule;
pub use crate::store::HostPolicy;
use crate::store::{Change, CommitFailed, Committer};
use hostsdir::HostsDirPolicy;

/// The policies, in memory for the DHCP path; the store keeps them across restarts.
#[derive(Debug, Default)]
pub struct HostPolicies {
    map: RwLock<HashMap<MacAddr, HostPolicy>>,
    hostsdir: RwLock<HostsDirPolicy>,
    /// What a watched options directory says (`dhcp.optsdir`, `optsdir.rs`).
    node_options: RwLock<Arc<Vec<OptionRule>>>,
}

/// Where an effective policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    /// The operator API (or `shardboot hosts`).
    Api,
    /// The MAC's own file in the hosts directory.
    HostsDir,
    /// The hosts directory's `*:*:*:*:*:*` entry.
    HostsDirUnknown,
}

impl PolicySource {
    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Api => "api",
            PolicySource::HostsDir => "hostsdir",
            PolicySource::HostsDirUnknown => "hostsdir-unknown",
        }
    }
}

/// Why a machine is not served, from its policy and `[[host]]` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Denied (run-time policy, hosts directory, or a `[[host]]` deny).
    Denied,
    /// `dhcp.known_only` and nothing names the MAC.
    Unknown,
}

/// Whether a machine is refused, v4 and v6 alike. The operator's run-time allow/deny
/// wins over the configuration. A hosts directory's allow (Ironic's PXE filter) makes
/// a MAC known, like a dnsmasq dhcp-host line, but does not lift a `[[host]]` deny.
pub fn refusal(
    policy: Option<(HostPolicy, PolicySource)>,
    host_denies: Option<bool>,
    known_only: bool,
) -> Option<Refusal> {
    match (policy, host_denies) {
        (Some((HostPolicy::Deny, _)), _) => Some(Refusal::Denied),
        (Some((HostPolicy::Allow, PolicySource::Api)), _) => None,
        (_, Some(true)) => Some(Refusal::Denied),
        (Some((HostPolicy::Allow, _)), _) => None,
        (None, None) if known_only => Some(Refusal::Unknown),
        _ => None,
    }
}

impl HostPolicies {
    /// No policies (tests, offline commands).
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// The policies the store held at start.
    pub fn new(stored: Vec<(MacAddr, HostPolicy)>) -> Self {
        Self {
            map: RwLock::new(stored.into_iter().collect()),
            hostsdir: RwLock::default(),
            node_options: RwLock::default(),
        }
    }

    /// The effective policy for `mac` and where it comes from: the operator's own
    /// entry, else the hosts directory's entry for the MAC, else its wildcard.
    pub fn lookup(&self, mac: &MacAddr) -> Option<(HostPolicy, PolicySource)> {
        let own = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(mac)
            .copied();
        if let Some(p) = own {
            return Some((p, PolicySource::Api));
        }
        let dir = self.hostsdir.read().unwrap_or_else(|p| p.into_inner());
        dir.lookup(mac).map(|(p, wildcard)| {
            let source = if wildcard {
                PolicySource::HostsDirUnknown
            } else {
                PolicySource::HostsDir
            };
            (p, source)
        })
    }

    /// What the followed directories hold for `mac`: its hosts-directory `set:` tags
    /// (usually none: no allocation) and every options-directory entry.
    pub fn dnsmasq_for(&self, mac: &MacAddr) -> (Vec<String>, Arc<Vec<OptionRule>>) {
        let tags = {
            let dir = self.hostsdir.read().unwrap_or_else(|p| p.into_inner());
            dir.tags.get(mac).cloned().unwrap_or_default()
        };
        let options = self
            .node_options
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (tags, options)
    }

    /// Replaces what the options directory says (re-read whole on every change).
    pub fn set_node_options(&self, rules: Vec<OptionRule>) {
        *self.node_options.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(rules);
    }

    /// Replaces what the hosts directory says (it is re-read whole on every change).
    pub fn set_hostsdir(&self, policy: HostsDirPolicy) {
        *self.hostsdir.write().unwrap_or_else(|p| p.into_inner()) = policy;
    }

    /// The hosts directory's per-MAC entries, sorted, and its wildcard entry.
    pub fn hostsdir(&self) -> (Vec<(MacAddr, HostPolicy)>, Option<HostPolicy>) {
        let dir = self.hostsdir.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = dir.macs.iter().map(|(m, p)| (*m, *p)).collect();
        v.sort_by_key(|(m, _)| m.0);
        (v, dir.unknown)
    }

    /// Every policy, sorted by MAC.
    pub fn list(&self) -> Vec<(MacAddr, HostPolicy)> {
        let mut v: Vec<_> = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(m, p)| (*m, *p))
            .collect();
        v.sort_by_key(|(m, _)| m.0);
        v
    }

    /// Sets (`Some`) or clears (`None`) the policy of `mac`: durable first, then in
    /// effect. The in-memory change is made on the committer's thread in commit order,
    /// so two quick changes to one MAC take effect in the order they became durable.
    pub async fn set(
        self: &Arc<Self>,
        committer: &Committer,
        mac: MacAddr,
        policy: Option<HostPolicy>,
    ) -> Result<(), CommitFailed> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        committer.submit(vec![Change::HostPolicy(mac, policy)], move |r| {
            if r.is_ok() {
                me.apply(mac, policy);
            }
            let _ = tx.send(r.map_err(|e| CommitFailed::Store(e.to_string())));
        })?;
        rx.await.unwrap_or(Err(CommitFailed::Stopped))
    }

    fn apply(&self, mac: MacAddr, policy: Option<HostPolicy>) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        match policy {
            Some(p) => map.insert(mac, p),
            None => map.remove(&mac),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn policies_persist_and_clear() {
        let store = Arc::new(crate::store::MemoryStore::new());
        let committer = Committer::start(store.clone(), Arc::new(Default::default())).unwrap();
        let m1 = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
        let m2 = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        {
            let p = Arc::new(HostPolicies::in_memory());
            p.set(&committer, m1, Some(HostPolicy::Deny)).await.unwrap();
            p.set(&committer, m2, Some(HostPolicy::Allow))
                .await
                .unwrap();
            p.set(&committer, m2, None).await.unwrap();
            assert_eq!(p.lookup(&m1).map(|(p, _)| p), Some(HostPolicy::Deny));
            assert_eq!(p.lookup(&m2), None);
        }
        let p = HostPolicies::new(crate::store::Store::load(&*store).unwrap().host_policies);
        assert_eq!(p.list(), vec![(m1, HostPolicy::Deny)]);
    }

    #[test]
    fn the_operator_wins_over_the_hosts_directory() {
        let p = HostPolicies::in_memory();
        let (m1, m2, m3) = (
            MacAddr([0x52, 0x54, 0, 0, 0, 1]),
            MacAddr([0x52, 0x54, 0, 0, 0, 2]),
            MacAddr([0x52, 0x54, 0, 0, 0, 3]),
        );
        let (dir, _) = hostsdir::build([
            ("a", "52:54:00:00:00:01,ignore\n52:54:00:00:00:02,ignore\n"),
            ("unknown_hosts_filter", "*:*:*:*:*:*\n"),
        ]);
        p.set_hostsdir(dir);
        p.apply(m1, Some(HostPolicy::Allow));
        assert_eq!(p.lookup(&m1), Some((HostPolicy::Allow, PolicySource::Api)));
        assert_eq!(
            p.lookup(&m2),
            Some((HostPolicy::Deny, PolicySource::HostsDir))
        );
        assert_eq!(
            p.lookup(&m3),
            Some((HostPolicy::Allow, PolicySource::HostsDirUnknown))
        );
        p.set_hostsdir(Default::default());
        assert_eq!(p.lookup(&m2), None);
    }
}
