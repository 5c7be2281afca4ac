//! Bindings the shared lease store decided: taken into this engine's table so no fresh
//! address is handed out over them and their clients keep their addresses here, and the
//! engine's own lease withdrawn when the database refused it.

use super::Engine;
use crate::store::{Lease, LeaseEffect, LeaseState};

impl Engine {
    /// With a shared lease store: while it answers, every member may extend any lease
    /// it knows (the database refuses what is not the client's); while it does not,
    /// no lease is extended past its current end (degraded mode), since only the
    /// binding the database already holds may be answered.
    pub fn set_shared_store_up(&mut self, up: bool) {
        self.shared_up = up;
        self.degraded = !up;
    }

    /// A binding the shared database decided (another member's write, read by
    /// `shared::follow`, or read at start): it replaces whatever this engine holds on
    /// the address, an offer of its own included, unless it is that very record.
    /// Returns the change to make durable here.
    pub fn apply_decided_change(&mut self, change: &LeaseEffect, now: u64) -> Option<LeaseEffect> {
        match change {
            LeaseEffect::Put(lease) => {
                if lease.state == LeaseState::Offered {
                    return None;
                }
                // The database's word, even a shorter end for the same client: in
                // degraded mode a renewal runs to the end this engine holds, which must
                // be no later than the binding the database has.
                if self.table.get(lease.ip) == Some(lease) {
                    return None;
                }
                self.take_decided_lease(lease.clone(), now);
                Some(change.clone())
            }
            LeaseEffect::Remove(ip, mac) => {
                // Only that client's record goes: an address already bound again
                // (a later row) keeps its holder.
                if self.table.get(*ip).is_some_and(|l| &l.mac == mac) {
                    self.table.remove(*ip);
                    self.set_used(*ip, false);
                    return Some(change.clone());
                }
                None
            }
        }
    }

    fn take_decided_lease(&mut self, lease: Lease, now: u64) {
        let (ip, active) = (lease.ip, lease.is_active(now));
        if lease.state == LeaseState::Declined && active {
            self.limits.declined(lease.expires);
        }
        self.table.insert(lease);
        self.set_used(ip, active);
    }

    /// The shared store could not be reached for `ours`, and holds the same client's
    /// binding only until `until`: the lease this engine holds for it ends there, so a
    /// renewal in degraded mode never runs past what the database holds. A lease the
    /// database holds none of stays as it is (never acknowledged; the client asks again).
    pub fn cap_to_binding(&mut self, ours: &Lease, until: u64) {
        if let Some(l) = self
            .table
            .get(ours.ip)
            .filter(|l| l.mac == ours.mac && l.expires > until)
        {
            let mut capped = l.clone();
            capped.expires = until;
            self.table.insert(capped);
        }
    }

    /// The shared store refused `ours` because `holder` holds its address: the lease
    /// was never acknowledged, so it is withdrawn (the change to store), and the holder is remembered in memory so the address is not chosen
    /// again while it holds it.
    pub fn withdraw(&mut self, ours: &Lease, holder: &Lease, now: u64) -> Option<LeaseEffect> {
        let mine = self
            .table
            .get(ours.ip)
            .is_some_and(|l| l.mac == ours.mac && l.starts == ours.starts);
        let withdrawn = mine.then(|| {
            self.table.remove(ours.ip);
            self.set_used(ours.ip, false);
            LeaseEffect::Remove(ours.ip, ours.mac)
        });
        if holder.ip == ours.ip && holder.is_active(now) && self.table.get(holder.ip).is_none() {
            self.take_decided_lease(holder.clone(), now);
        }
        withdrawn
    }
}
