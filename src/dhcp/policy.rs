//! Per-MAC allow/deny set at run time through the operator API: the replacement for
//! Ironic's dnsmasq `dhcp-hostsdir` PXE filter, which can add entries but not remove
//! them without a restart. A decision takes effect on the very next packet; every
//! change is durable (sled) before the API answers.

use std::collections::HashMap;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

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
}

impl HostPolicies {
    /// No policies, nothing persisted (tests, offline commands).
    pub fn in_memory() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            tree: None,
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
        })
    }

    /// The policy for `mac`, if any.
    pub fn get(&self, mac: &MacAddr) -> Option<HostPolicy> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(mac)
            .copied()
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
}
