//! Per-MAC allow/deny set at run time through the operator API: the replacement for
//! Ironic's dnsmasq `dhcp-hostsdir` PXE filter, which can add entries but not remove
//! them without a restart. A decision takes effect on the very next packet; every
//! change is durable (sled) before the API answers. Below it sits what a watched
//! hosts directory says (`dhcp.hostsdir`, see `hostsdir.rs`): the operator's word wins.

use std::collections::HashMap;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use super::hostsdir::HostsDirPolicy;
use crate::lease::StoreError;
use crate::mac::MacAddr;

/// What the operator said about a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostPolicy {
    /// Answer it, even with `known_only` set (and over a `[[host]]` deny).
    Allow,
    /// Never answer it.
    Deny,
}

const TREE: &str = "host_policy";

/// The policies, in memory for the DHCP path and in sled for restarts.
pub struct HostPolicies {
    map: RwLock<HashMap<MacAddr, HostPolicy>>,
    tree: Option<sled::Tree>,
    hostsdir: RwLock<HostsDirPolicy>,
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

impl HostPolicies {
    /// No policies, nothing persisted (tests, offline commands).
    pub fn in_memory() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            tree: None,
            hostsdir: RwLock::default(),
        }
    }

    /// Loads the policies stored in `db`.
    pub fn open(db: &sled::Db) -> Result<Self, StoreError> {
        let tree = db.open_tree(TREE)?;
        let mut map = HashMap::new();
        for kv in tree.iter() {
            let (k, v) = kv?;
            let (Ok(mac), Some(policy)) = (<[u8; 6]>::try_from(&k[..]), decode(&v)) else {
                return Err(StoreError::Meta(format!(
                    "host policy record {k:?} is unreadable"
                )));
            };
            map.insert(MacAddr(mac), policy);
        }
        Ok(Self {
            map: RwLock::new(map),
            tree: Some(tree),
            hostsdir: RwLock::default(),
        })
    }

    /// The effective policy for `mac`, if any.
    pub fn get(&self, mac: &MacAddr) -> Option<HostPolicy> {
        self.lookup(mac).map(|(p, _)| p)
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
    /// effect.
    pub fn set(&self, mac: MacAddr, policy: Option<HostPolicy>) -> Result<(), StoreError> {
        if let Some(tree) = &self.tree {
            match policy {
                Some(p) => tree.insert(mac.0, encode(p))?,
                None => tree.remove(mac.0)?,
            };
            tree.flush()?;
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        match policy {
            Some(p) => map.insert(mac, p),
            None => map.remove(&mac),
        };
        Ok(())
    }
}

fn encode(p: HostPolicy) -> &'static [u8] {
    match p {
        HostPolicy::Allow => b"allow",
        HostPolicy::Deny => b"deny",
    }
}

fn decode(v: &[u8]) -> Option<HostPolicy> {
    match v {
        b"allow" => Some(HostPolicy::Allow),
        b"deny" => Some(HostPolicy::Deny),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_persist_and_clear() {
        let dir = tempfile::tempdir().unwrap();
        let m1 = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
        let m2 = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        {
            let db = sled::open(dir.path()).unwrap();
            let p = HostPolicies::open(&db).unwrap();
            p.set(m1, Some(HostPolicy::Deny)).unwrap();
            p.set(m2, Some(HostPolicy::Allow)).unwrap();
            p.set(m2, None).unwrap();
            assert_eq!(p.get(&m1), Some(HostPolicy::Deny));
            assert_eq!(p.get(&m2), None);
        }
        let db = sled::open(dir.path()).unwrap();
        let p = HostPolicies::open(&db).unwrap();
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
        let (dir, _) = crate::dhcp::hostsdir::build([
            ("a", "52:54:00:00:00:01,ignore\n52:54:00:00:00:02,ignore\n"),
            ("unknown_hosts_filter", "*:*:*:*:*:*\n"),
        ]);
        p.set_hostsdir(dir);
        p.set(m1, Some(HostPolicy::Allow)).unwrap();
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
        assert_eq!(p.get(&m2), None);
    }
}
