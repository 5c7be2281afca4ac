//! The engine's in-memory view of every lease and offer: by address, by MAC, and by
//! expiry time, kept in step with the address pools' bitmaps.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use crate::mac::MacAddr;
use crate::store::{Lease, LeaseState};

/// Leases and offers, indexed three ways.
#[derive(Debug, Default)]
pub struct LeaseTable {
    by_ip: HashMap<Ipv4Addr, Lease>,
    by_mac: HashMap<MacAddr, Ipv4Addr>,
    /// (expires, ip) for reclaiming; entries may be stale and are checked when popped.
    expiry: BTreeSet<(u64, Ipv4Addr)>,
    /// Records in the Offered state (the cap on outstanding offers counts them).
    offered: usize,
}

impl LeaseTable {
    /// The lease or offer on `ip`.
    pub fn get(&self, ip: Ipv4Addr) -> Option<&Lease> {
        self.by_ip.get(&ip)
    }

    /// The most recent lease or offer of `mac`, active or not.
    pub fn by_mac(&self, mac: &MacAddr) -> Option<&Lease> {
        let ip = self.by_mac.get(mac)?;
        self.by_ip.get(ip).filter(|l| &l.mac == mac)
    }

    /// Inserts or replaces the record for `lease.ip`.
    pub fn insert(&mut self, lease: Lease) {
        self.count(lease.state, 1);
        if let Some(old) = self.by_ip.get(&lease.ip) {
            let state = old.state;
            self.count(state, -1);
        }
        if let Some(old) = self.by_ip.get(&lease.ip) {
            if old.mac != lease.mac && self.by_mac.get(&old.mac) == Some(&lease.ip) {
                self.by_mac.remove(&old.mac);
            }
        }
        if lease.state != LeaseState::Declined {
            self.by_mac.insert(lease.mac, lease.ip);
        } else if self.by_mac.get(&lease.mac) == Some(&lease.ip) {
            // The decliner must not be steered back to the address it found in use.
            self.by_mac.remove(&lease.mac);
        }
        self.expiry.insert((lease.expires, lease.ip));
        self.by_ip.insert(lease.ip, lease);
    }

    /// Forgets the record for `ip`.
    pub fn remove(&mut self, ip: Ipv4Addr) -> Option<Lease> {
        let old = self.by_ip.remove(&ip)?;
        self.count(old.state, -1);
        if self.by_mac.get(&old.mac) == Some(&ip) {
            self.by_mac.remove(&old.mac);
        }
        Some(old)
    }

    /// Pops every record whose expiry is at or before `now` and returns their addresses.
    /// Expired offers are dropped from the table; other records stay (the client's
    /// address affinity) but no longer hold their address.
    pub fn take_expired(&mut self, now: u64) -> Vec<Ipv4Addr> {
        let mut out = Vec::new();
        while let Some(&(t, ip)) = self.expiry.first() {
            if t > now {
                break;
            }
            self.expiry.pop_first();
            let Some(lease) = self.by_ip.get(&ip) else {
                continue;
            };
            if lease.expires != t {
                continue; // renewed since; a later entry covers it
            }
            if lease.state == LeaseState::Offered {
                self.remove(ip);
            }
            out.push(ip);
        }
        out
    }

    fn count(&mut self, state: LeaseState, by: isize) {
        if state == LeaseState::Offered {
            self.offered = self.offered.saturating_add_signed(by);
        }
    }

    /// Offers held (expired ones until the next reclaim).
    pub fn offered(&self) -> usize {
        self.offered
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }

    /// Every record.
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.by_ip.values()
    }
}
