//! Leases other members gave (lease replication): taken into this engine's table so no
//! fresh address is handed out over them and their clients keep their addresses here;
//! refused when the address is held by another client; and the engine's own lease
//! withdrawn when a peer refused it.

use super::Engine;
use crate::store::{Lease, LeaseEffect, LeaseState, Verdict};

impl Engine {
    /// With every peer in step, any member may extend any lease it knows and take its
    /// new share at once after a membership change: every other member knows every
    /// lease. Without, the rules for unshared leases hold (see `timers` and
    /// `change_members`).
    pub fn set_replicated(&mut self, in_step: bool) {
        self.replicated = in_step;
    }

    /// With a shared lease store: while it answers, every member may extend any lease
    /// it knows (the database refuses what is not the client's); while it does not,
    /// no lease is extended past its current end (degraded mode), since only the
    /// binding the database already holds may be answered.
    pub fn set_shared_store_up(&mut self, up: bool) {
        self.replicated = up;
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
                self.take_peer_lease(lease.clone(), now);
                Some(change.clone())
            }
            LeaseEffect::Remove(..) => self.apply_peer_change(change, now, true).1,
        }
    }

    /// A peer's lease change. Returns the verdict, and the change to make durable here
    /// (`None`: nothing to store). A live change (`catch_up` false) on an address
    /// another client holds is refused: its granter has not answered its client yet.
    /// A change sent to catch this member up was answered long ago: when it conflicts,
    /// the lease that began later wins, since the other must have ended (released,
    /// forgotten) while one of the two members did not hear of it.
    pub fn apply_peer_change(
        &mut self,
        change: &LeaseEffect,
        now: u64,
        catch_up: bool,
    ) -> (Verdict, Option<LeaseEffect>) {
        match change {
            LeaseEffect::Put(lease) => self.apply_peer_lease(lease, now, catch_up),
            LeaseEffect::Remove(ip, mac) => {
                if self.table.get(*ip).is_some_and(|l| &l.mac == mac) {
                    self.table.remove(*ip);
                    self.set_used(*ip, false);
                    return (Verdict::Accepted, Some(change.clone()));
                }
                (Verdict::Accepted, None)
            }
        }
    }

    fn apply_peer_lease(
        &mut self,
        lease: &Lease,
        now: u64,
        catch_up: bool,
    ) -> (Verdict, Option<LeaseEffect>) {
        if lease.state == LeaseState::Offered {
            // Offers are never shared; a peer that sends one is not believed.
            return (Verdict::Accepted, None);
        }
        match self.table.get(lease.ip) {
            // Another client's live lease (an offer is no promise: the peer's lease wins
            // over it, and the offered client is NAKed when it asks).
            Some(held)
                if held.mac != lease.mac
                    && held.state != LeaseState::Offered
                    && held.is_active(now)
                    && lease.is_active(now)
                    && !(catch_up && lease.starts > held.starts) =>
            {
                return (Verdict::Refused(held.clone()), None);
            }
            // The same client's lease, already known to run longer: a late copy.
            Some(held)
                if held.mac == lease.mac
                    && held.state == lease.state
                    && held.expires >= lease.expires =>
            {
                return (Verdict::Accepted, None);
            }
            _ => {}
        }
        self.take_peer_lease(lease.clone(), now);
        (Verdict::Accepted, Some(LeaseEffect::Put(lease.clone())))
    }

    fn take_peer_lease(&mut self, lease: Lease, now: u64) {
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

    /// A peer refused `ours` because `holder` holds its address: the lease was never
    /// acknowledged, so it is withdrawn (the change to store and hand to the peers that
    /// took it), and the holder is remembered in memory so the address is not chosen
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
            self.take_peer_lease(holder.clone(), now);
        }
        withdrawn
    }

    /// Every lease that holds its address at `now` (bound or declined), for a member
    /// starting: offers are this member's alone.
    pub fn live_leases(&self, now: u64) -> Vec<Lease> {
        self.table
            .iter()
            .filter(|l| l.state != LeaseState::Offered && l.is_active(now))
            .cloned()
            .collect()
    }
}
