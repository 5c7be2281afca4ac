//! A store in memory: the second implementation the battery runs against, and a store
//! for tests and tools that need no disk. Nothing survives the process.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard};

use super::{
    Change, HostPolicy, Lease, LeaseEffect, LeaseQuery, Membership, Reservation, Snapshot, Store,
    StoreError,
};
use crate::mac::MacAddr;

#[derive(Debug, Default)]
struct Records {
    leases: BTreeMap<Ipv4Addr, Lease>,
    reservations: BTreeMap<[u8; 6], Reservation>,
    host_policies: BTreeMap<[u8; 6], HostPolicy>,
    membership: Option<Membership>,
}

/// A [`Store`] that keeps everything in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    records: Mutex<Records>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for MemoryStore {
    fn load(&self) -> Result<Snapshot, StoreError> {
        let r = self.records();
        Ok(Snapshot {
            leases: r.leases.values().cloned().collect(),
            reservations: r.reservations.values().cloned().collect(),
            host_policies: r
                .host_policies
                .iter()
                .map(|(m, p)| (MacAddr(*m), *p))
                .collect(),
            membership: r.membership.clone(),
            set_aside: Vec::new(),
        })
    }

    fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut r = self.records();
        for change in changes {
            match change.clone() {
                Change::Lease(LeaseEffect::Put(l)) | Change::Replica(LeaseEffect::Put(l)) => {
                    r.leases.insert(l.ip, l);
                }
                Change::Lease(LeaseEffect::Remove(ip, _))
                | Change::Replica(LeaseEffect::Remove(ip, _)) => {
                    r.leases.remove(&ip);
                }
                Change::Reservation(mac, Some(res)) => {
                    r.reservations.insert(mac.0, res);
                }
                Change::Reservation(mac, None) => {
                    r.reservations.remove(&mac.0);
                }
                Change::HostPolicy(mac, Some(p)) => {
                    r.host_policies.insert(mac.0, p);
                }
                Change::HostPolicy(mac, None) => {
                    r.host_policies.remove(&mac.0);
                }
                Change::Membership(m) => r.membership = Some(m),
            }
        }
        Ok(())
    }

    fn lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError> {
        Ok(self.records().leases.get(&ip).cloned())
    }

    fn lease_of(&self, mac: MacAddr) -> Result<Option<Lease>, StoreError> {
        Ok(self
            .records()
            .leases
            .values()
            .filter(|l| l.mac == mac)
            .max_by_key(|l| l.starts)
            .cloned())
    }

    fn leases(&self, query: &LeaseQuery, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let Some((low, high)) = query.address_bounds() else {
            return Ok(Vec::new());
        };
        Ok(self
            .records()
            .leases
            .range(low..=high)
            .map(|(_, l)| l)
            .filter(|l| query.matches(l))
            .take(limit)
            .cloned()
            .collect())
    }

    fn reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        Ok(self.records().reservations.values().cloned().collect())
    }
}
