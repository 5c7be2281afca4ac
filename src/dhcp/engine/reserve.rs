//! Reservations made at run time through the operator API: a fixed address (and host
//! name) for a MAC, checked against the engine's state so that an address is never
//! reserved for one MAC while another holds it. Pure: the shell checks a change, makes
//! it durable through the store, and only then applies it.

use std::net::Ipv4Addr;

use super::Engine;
use crate::config::Host;
use crate::mac::MacAddr;
pub use crate::store::Reservation;

/// Why a reservation cannot be made or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReserveError {
    /// The address is in no configured subnet.
    #[error("{0} is in no configured subnet")]
    NoSubnet(Ipv4Addr),
    /// Reserved for another MAC already.
    #[error("{ip} is reserved for {mac}")]
    Reserved {
        /// The address.
        ip: Ipv4Addr,
        /// Its holder.
        mac: MacAddr,
    },
    /// Another client holds an active lease on it.
    #[error("{ip} is leased to {mac} until it expires or is forgotten")]
    Leased {
        /// The address.
        ip: Ipv4Addr,
        /// The client holding it.
        mac: MacAddr,
    },
    /// The configuration reserves an address for this MAC; change it there.
    #[error("{0} has a reservation in the configuration file")]
    Configured(MacAddr),
    /// No run-time reservation for this MAC.
    #[error("{0} has no run-time reservation")]
    NotFound(MacAddr),
    /// The store failed; nothing changed.
    #[error("the reservation could not be stored")]
    Store,
    /// A host name that is not letters, digits, '-' and '.'.
    #[error("hostname must be 1-253 letters, digits, '-' or '.'")]
    BadHostname,
}

fn hostname_ok(h: &str) -> bool {
    (1..=253).contains(&h.len())
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

impl Engine {
    /// Whether [`Engine::reserve`] would accept `r` at `now`, changing nothing.
    pub fn check_reservation(&self, r: &Reservation, now: u64) -> Result<(), ReserveError> {
        if r.hostname.as_deref().is_some_and(|h| !hostname_ok(h)) {
            return Err(ReserveError::BadHostname);
        }
        let configured = self.config_hosts.get(&r.mac).and_then(|h| h.ip).is_some();
        if configured {
            return Err(ReserveError::Configured(r.mac));
        }
        if !self.subnets.iter().any(|s| s.cfg.network.contains(&r.ip)) {
            return Err(ReserveError::NoSubnet(r.ip));
        }
        if let Some(other) = self.reserved.get(&r.ip).filter(|m| **m != r.mac) {
            return Err(ReserveError::Reserved {
                ip: r.ip,
                mac: *other,
            });
        }
        if let Some(l) = self
            .table
            .get(r.ip)
            .filter(|l| l.mac != r.mac && l.is_active(now))
        {
            return Err(ReserveError::Leased {
                ip: r.ip,
                mac: l.mac,
            });
        }
        Ok(())
    }

    /// Reserves `r.ip` for `r.mac` (replacing the MAC's previous run-time reservation).
    pub fn reserve(&mut self, r: &Reservation, now: u64) -> Result<(), ReserveError> {
        self.check_reservation(r, now)?;
        if self.runtime_reserved.contains(&r.mac) {
            self.unreserve(&r.mac)?;
        }
        let mut host = self
            .config_hosts
            .get(&r.mac)
            .cloned()
            .unwrap_or_else(|| Host::bare(r.mac));
        host.ip = Some(r.ip);
        if r.hostname.is_some() {
            host.hostname = r.hostname.clone();
        }
        self.hosts.insert(r.mac, host);
        self.reserved.insert(r.ip, r.mac);
        self.runtime_reserved.insert(r.mac);
        self.pools_for(r.ip).for_each(|p| p.block(r.ip));
        Ok(())
    }

    /// Whether `mac` has a run-time reservation [`Engine::unreserve`] could remove.
    pub fn check_unreserve(&self, mac: &MacAddr) -> Result<(), ReserveError> {
        if self.runtime_reserved.contains(mac) {
            Ok(())
        } else if self.config_hosts.get(mac).and_then(|h| h.ip).is_some() {
            Err(ReserveError::Configured(*mac))
        } else {
            Err(ReserveError::NotFound(*mac))
        }
    }

    /// Removes `mac`'s run-time reservation; its configured host entry, if any, applies
    /// again.
    pub fn unreserve(&mut self, mac: &MacAddr) -> Result<(), ReserveError> {
        self.check_unreserve(mac)?;
        self.runtime_reserved.remove(mac);
        let ip = self.hosts.get(mac).and_then(|h| h.ip);
        match self.config_hosts.get(mac) {
            Some(h) => self.hosts.insert(*mac, h.clone()),
            None => self.hosts.remove(mac),
        };
        if let Some(ip) = ip {
            self.reserved.remove(&ip);
            let excluded = self.subnets.iter().any(|s| s.cfg.exclude.contains(&ip));
            if !excluded {
                self.pools_for(ip).for_each(|p| p.unblock(ip));
            }
        }
        Ok(())
    }

    /// The run-time reservations, sorted by MAC.
    pub fn reservations(&self) -> Vec<Reservation> {
        let mut v: Vec<Reservation> = self
            .runtime_reserved
            .iter()
            .filter_map(|m| {
                let h = self.hosts.get(m)?;
                Some(Reservation {
                    mac: *m,
                    ip: h.ip?,
                    hostname: h.hostname.clone(),
                })
            })
            .collect();
        v.sort_by_key(|r| r.mac.0);
        v
    }
}
