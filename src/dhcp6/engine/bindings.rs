//! The DHCPv6 engine's view of who holds which address: stored leases and the
//! addresses advertised but not yet requested, by address and by IA (a client's DUID
//! and IAID, RFC 8415 §12.1: the server keeps its bindings per IA).

use std::collections::HashMap;
use std::net::Ipv6Addr;

use crate::store::{Lease6, LeaseState};

/// An IA as the map keys it: the IA_NA's IAID (4 octets, big-endian), then the
/// client's DUID. One byte string, so a lookup can borrow it from the stack instead of
/// allocating a key per message.
type IaKey = Vec<u8>;

/// Longest key looked up without allocating: a DUID is at most 130 octets (RFC 8415
/// §11.1: a 2-octet type and up to 128 more); a longer one takes the slow path.
const STACK_KEY: usize = 4 + 130;

fn ia_key(duid: &[u8], iaid: u32) -> IaKey {
    let mut key = Vec::with_capacity(4 + duid.len());
    key.extend_from_slice(&iaid.to_be_bytes());
    key.extend_from_slice(duid);
    key
}

/// Calls `f` with the IA's key, built on the stack when it fits.
fn with_ia_key<R>(duid: &[u8], iaid: u32, f: impl FnOnce(&[u8]) -> R) -> R {
    if duid.len() + 4 > STACK_KEY {
        return f(&ia_key(duid, iaid));
    }
    let mut key = [0u8; STACK_KEY];
    key[..4].copy_from_slice(&iaid.to_be_bytes());
    key[4..4 + duid.len()].copy_from_slice(duid);
    f(&key[..4 + duid.len()])
}

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
        let ip = with_ia_key(duid, iaid, |key| self.by_ia.get(key).copied())?;
        self.by_ip
            .get(&ip)
            .filter(|l| l.duid == duid && l.iaid == iaid)
    }

    /// Puts `lease` on its address, replacing whatever was there; the IA the address
    /// belonged to before (another client after an expiry) loses it.
    pub fn insert(&mut self, lease: Lease6) {
        if let Some(old) = self.by_ip.get(&lease.ip) {
            if old.duid != lease.duid || old.iaid != lease.iaid {
                let key = ia_key(&old.duid, old.iaid);
                if self.by_ia.get(&key) == Some(&lease.ip) {
                    self.by_ia.remove(&key);
                }
            }
        }
        // An IA holds one address here: the one it held before is let go.
        // The key is allocated only for an IA seen for the first time.
        let prev = with_ia_key(&lease.duid, lease.iaid, |key| {
            self.by_ia
                .get_mut(key)
                .map(|held| std::mem::replace(held, lease.ip))
        });
        if prev.is_none() {
            self.by_ia.insert(ia_key(&lease.duid, lease.iaid), lease.ip);
        }
        if let Some(prev) = prev {
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
        with_ia_key(&old.duid, old.iaid, |key| {
            if self.by_ia.get(key) == Some(&ip) {
                self.by_ia.remove(key);
            }
        });
        Some(old)
    }

    /// Detaches the IA from `ip` without forgetting the record (a declined address
    /// stays quarantined, but the client must get another).
    pub fn detach(&mut self, ip: Ipv6Addr) {
        if let Some(l) = self.by_ip.get(&ip) {
            with_ia_key(&l.duid, l.iaid, |key| {
                if self.by_ia.get(key) == Some(&ip) {
                    self.by_ia.remove(key);
                }
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ip: u128, duid: &[u8], iaid: u32) -> Lease6 {
        Lease6 {
            ip: Ipv6Addr::from(ip),
            duid: duid.to_vec(),
            iaid,
            mac: None,
            state: LeaseState::Bound,
            starts: 0,
            preferred: 50,
            expires: 100,
            hostname: None,
            arch: None,
        }
    }

    #[test]
    fn an_ia_is_found_by_its_duid_and_iaid_short_or_longer_than_any_rfc_duid() {
        // 10 octets (a DUID-LL) keys on the stack; 300 (longer than RFC 8415 §11.1
        // allows, but a packet may carry it) takes the allocating path.
        for len in [10, 130, 131, 300] {
            let duid: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut b = Bindings::default();
            b.insert(lease(1, &duid, 7));
            b.insert(lease(2, &duid, 8));
            assert_eq!(b.of_ia(&duid, 7).map(|l| l.ip), Some(Ipv6Addr::from(1)));
            assert_eq!(b.of_ia(&duid, 8).map(|l| l.ip), Some(Ipv6Addr::from(2)));
            assert!(b.of_ia(&duid[1..], 7).is_none(), "another DUID");
            // The IA moves to another address: the old key points there now.
            b.insert(lease(3, &duid, 7));
            assert_eq!(b.of_ia(&duid, 7).map(|l| l.ip), Some(Ipv6Addr::from(3)));
            b.remove(Ipv6Addr::from(3));
            assert!(b.of_ia(&duid, 7).is_none(), "len {len}");
            b.detach(Ipv6Addr::from(2));
            assert!(b.of_ia(&duid, 8).is_none());
            assert!(
                b.get(Ipv6Addr::from(2)).is_some(),
                "detached, not forgotten"
            );
        }
    }
}
