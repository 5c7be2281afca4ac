//! A store in memory: the second implementation the battery runs against, and a store
//! for tests and tools that need no disk. Nothing survives the process.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};

use super::{
    Change, HostPolicy, Lease, Lease6, Lease6Effect, LeaseEffect, LeaseQuery, Membership,
    Reservation, Snapshot, Store, StoreError,
};
use crate::mac::MacAddr;

#[derive(Debug, Default)]
struct Records {
    leases: BTreeMap<Ipv4Addr, Lease>,
    reservations: BTreeMap<[u8; 6], Reservation>,
    host_policies: BTreeMap<[u8; 6], HostPolicy>,
    membership: Option<Membership>,
    leases6: BTreeMap<Ipv6Addr, Lease6>,
    server_duid: Option<Vec<u8>>,
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
            leases6: r.leases6.values().cloned().collect(),
            set_aside6: Vec::new(),
            server_duid: r.server_duid.clone(),
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
                Change::Lease6(Lease6Effect::Put(l)) | Change::Replica6(Lease6Effect::Put(l)) => {
                    r.leases6.insert(l.ip, l);
                }
                Change::Lease6(Lease6Effect::Remove(ip, _))
                | Change::Replica6(Lease6Effect::Remove(ip, _)) => {
                    r.leases6.remove(&ip);
                }
                // Written once: the first server DUID stays (RFC 8415 §11).
                Change::ServerDuid(duid) => match &r.server_duid {
                    None => r.server_duid = Some(duid),
                    Some(kept) if *kept == duid => {}
                    Some(_) => {
                        tracing::warn!("a server DUID is already stored; it stays (a server DUID must not change)")
                    }
                },
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

    fn lease6(&self, ip: Ipv6Addr) -> Result<Option<Lease6>, StoreError> {
        Ok(self.records().leases6.get(&ip).cloned())
    }

    fn leases6(&self, after: Option<Ipv6Addr>, limit: usize) -> Result<Vec<Lease6>, StoreError> {
        let Some(low) = super::first_after6(after) else {
            return Ok(Vec::new());
        };
        Ok(self
            .records()
            .leases6
            .range(low..)
            .take(limit)
            .map(|(_, l)| l.clone())
            .collect())
    }

    fn leases6_of(&self, duid: &[u8]) -> Result<Vec<Lease6>, StoreError> {
        Ok(self
            .records()
            .leases6
            .values()
            .filter(|l| l.duid == duid)
            .cloned()
            .collect())
    }

    fn server_duid(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.records().server_duid.clone())
    }
}
