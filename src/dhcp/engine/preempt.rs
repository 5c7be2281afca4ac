//! Offers held for unknown machines give way to known ones. A flood of DISCOVERs from
//! random MACs holds every free address for `offer_hold_secs` without ever binding one;
//! a machine the operator knows that finds the pool empty takes the oldest such offer.
//!
//! RFC 2131 §4.3.1 says a server SHOULD NOT reuse an offered address before the client
//! answers: a deviation for machines nobody vouches for, in favour of those somebody
//! does. The unknown client, if real, is NAKed on its REQUEST and starts over.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use super::Engine;
use crate::mac::MacAddr;
use crate::store::LeaseState;

/// Offers made to unknown machines, oldest first. Entries go stale when the offer is
/// taken, replaced or ends; they are checked against the lease table when used.
#[derive(Debug, Default)]
pub(super) struct UnknownOffers(VecDeque<(Ipv4Addr, MacAddr)>);

impl UnknownOffers {
    /// Entries held, live or stale.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Entries kept beyond the live offers before stale ones are swept out.
pub(super) const SLACK: usize = 1024;

impl Engine {
    /// Records an offer of `ip` to the unknown machine `mac`.
    pub(super) fn note_unknown_offer(&mut self, ip: Ipv4Addr, mac: MacAddr, now: u64) {
        let queue = &mut self.unknown_offers.0;
        if queue.len() >= self.table.offered() + SLACK {
            // Each DISCOVER adds one; repeats and ended offers must not grow it for ever.
            // A client asking again is offered the same address: only its first entry
            // is kept (the offer is as old as that one). Without that, a few thousand
            // clients repeating their DISCOVERs kept the list above this mark, and every
            // DISCOVER swept the whole list (half the engine's time under perfdhcp -R
            // 50000); with it, a sweep leaves at most one entry per live offer, so the
            // next one is at least SLACK DISCOVERs away.
            let table = &self.table;
            let mut seen = std::collections::HashSet::with_capacity(queue.len());
            queue.retain(|(ip, m)| is_live_offer(table, *ip, m, now) && seen.insert(*ip));
        }
        self.unknown_offers.0.push_back((ip, mac));
    }

    /// Frees, for the known machine `mac` in subnet `si`, the oldest live offer held for
    /// an unknown machine that `mac` may be given. Stale entries met on the way are
    /// dropped; live ones of other subnets are kept.
    pub(super) fn take_unknown_offer(
        &mut self,
        si: usize,
        mac: &MacAddr,
        now: u64,
    ) -> Option<Ipv4Addr> {
        let mut k = 0;
        while k < self.unknown_offers.0.len() {
            let (ip, holder) = self.unknown_offers.0[k];
            if !is_live_offer(&self.table, ip, &holder, now) {
                self.unknown_offers.0.remove(k);
                continue;
            }
            let fits = self.subnets[si].pools.iter().any(|p| p.contains(ip))
                && self.servable(si, ip, mac)
                && self.fresh_allowed(si, ip, mac)
                && !self.reserved.contains_key(&ip);
            if !fits {
                k += 1;
                continue;
            }
            self.unknown_offers.0.remove(k);
            self.table.remove(ip);
            self.set_used(ip, false);
            return Some(ip);
        }
        None
    }
}

fn is_live_offer(table: &super::LeaseTable, ip: Ipv4Addr, mac: &MacAddr, now: u64) -> bool {
    table
        .get(ip)
        .is_some_and(|l| l.state == LeaseState::Offered && &l.mac == mac && l.is_active(now))
}
