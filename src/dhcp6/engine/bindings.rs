//! The DHCPv6 engine's view of who holds which address: stored leases and the
//! addresses advertised but not yet requested, by address and by IA (a client's DUID
//! and IAID, RFC 8415 §12.1: the server keeps its bindings per IA).

use std::collections::HashMap;
use std::net::Ipv6Addr;

use crate::store::{Lease6, LeaseState};

/// An IA: the client's DUID and the IA_NA's IAID.
pub type IaKey = (Vec<u8>, u32);

/// Leases and advertised addresses (state `Offered`, held in memory only).
#[derive(Debug, Default)]
pub struct Bindings {
    by_ip: HashMap<Ipv6Addr, Lease6>,
    by_ia: HashMap<IaKey, Ipv6Addr>,
}

impl Bindings {
    /// The record on `ip`.
    pub fn get(&self, ip: Ipv6Addr) -> Option<&Lease6> {
        self.by_ip.get(&ip)
    }

    /// The record of the IA, if it still names it (an address re-leased to another IA
    /// after expiry no longer does).
    pub fn of_ia(&self, duid: &[u8], iaid: u32) -> Option<&Lease6> {
        let ip = self.by_ia.get(&(duid.to_vec(), iaid))?;
        self.by_ip
            .get(ip)
            .filter(|l| l.duid == duid && l.iaid == iaid)
    }

    /// Puts `lease` on its address, replacing whatever was there; the IA the address
    /// belonged to before (another client after an expiry) loses it.
    pub fn insert(&mut self, lease: Lease6) {
        if let Some(old) = self.by_ip.get(&lease.ip) {
            if old.duid != lease.duid || old.iaid != lease.iaid {
                let key = (old.duid.clone(), old.iaid);
                if self.by_ia.get(&key) == Some(&lease.ip) {
                    self.by_ia.remove(&key);
                }
            }
        }
        // An IA holds one address here: the one it held before is let go.
        let key = (lease.duid.clone(), lease.iaid);
        if let Some(prev) = self.by_ia.insert(key, lease.ip) {
            if prev != lease.ip {
                if let Some(p) = self.by_ip.get(&prev) {
                    if p.state == LeaseState::Offered {
                        self.by_ip.remove(&prev);
                    }
                }
            }
        }
        self.by_ip.insert(lease.ip, lease);
    }

    /// Forgets the record on `ip`.
    pub fn remove(&mut self, ip: Ipv6Addr) -> Option<Lease6> {
        let old = self.by_ip.remove(&ip)?;
        let key = (old.duid.clone(), old.iaid);
        if self.by_ia.get(&key) == Some(&ip) {
            self.by_ia.remove(&key);
        }
        Some(old)
    }

    /// Detaches the IA from `ip` without forgetting the record (a declined address
    /// stays quarantined, but the client must get another).
    pub fn detach(&mut self, ip: Ipv6Addr) {
        if let Some(l) = self.by_ip.get(&ip) {
            let key = (l.duid.clone(), l.iaid);
            if self.by_ia.get(&key) == Some(&ip) {
                self.by_ia.remove(&key);
            }
        }
    }

    /// Every record.
    pub fn iter(&self) -> impl Iterator<Item = &Lease6> {
        self.by_ip.values()
    }

    /// Addresses whose record stopped holding them by `now`: expired advertisements are
    /// forgotten, other records are kept (the same IA gets its address back if nobody
    /// took it meanwhile).
    pub fn take_expired(&mut self, now: u64, held: impl Fn(Ipv6Addr) -> bool) -> Vec<Ipv6Addr> {
        let due: Vec<Ipv6Addr> = self
            .by_ip
            .values()
            .filter(|l| l.expires <= now && held(l.ip))
            .map(|l| l.ip)
            .collect();
        for ip in &due {
            if self
                .by_ip
                .get(ip)
                .is_some_and(|l| l.state == LeaseState::Offered)
            {
                self.remove(*ip);
            }
        }
        due
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }
}
