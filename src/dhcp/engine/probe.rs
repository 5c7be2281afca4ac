//! Conflict detection before offering an address inherited from a departed member.
//!
//! RFC 2131 §2.2 and §3.1 step 2: the server SHOULD probe a reused address before
//! allocating it, e.g. with an ICMP Echo Request. The shared lease store holds every
//! binding a member acknowledged, so this is defence in depth, not the guarantee: a
//! client on an address with no row (a machine configured by hand, a lease from
//! another server) is found this way. So for one window after a membership change (the
//! longest lease of the subnet, plus the offer hold: by then every client of the
//! departed member has renewed with someone or let its lease go), the first offer of a
//! free address this member gained at that change waits for a probe.
//!
//! The engine decides whether an address needs a probe and records the result; the
//! shell sends the echo and reports back (`dhcp::shell::probe`). Addresses this member
//! held before the change, a single instance, and a member whose share did not grow
//! never probe, so the ordinary path costs nothing.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use dhcproto::v4::Message;

use super::allocate::new_lease;
use super::decision::{Decision, Outcome};
use super::Engine;
use crate::mac::MacAddr;
use crate::owner::shares::Split;
use crate::owner::MemberList;
use crate::store::{Lease, LeaseEffect, LeaseState};

/// Probes outstanding at once; beyond it an address is offered without one rather than
/// queueing DISCOVERs without bound (a boot storm after a member's death).
pub const MAX_IN_FLIGHT: usize = 64;
/// Probes one client's DISCOVER may wait for (each answered one moves it to another
/// address); beyond it the next address is offered without one.
pub const PROBES_PER_CLIENT: u8 = 3;
/// A probe the shell never reported is forgotten after this long (its timeout is at
/// most 3 s: `dhcp.conflict_probe_ms`).
const STALE_SECS: u64 = 10;

/// What a probe of an address found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// Something answered: the address is in use by a host this member has no lease for.
    Answered,
    /// Nothing answered within the timeout (or the probe could not be sent).
    Clear,
}

/// One client's probe: in flight, or answered and waiting for its DISCOVER to be
/// decided again.
#[derive(Debug, Clone, Copy)]
enum Slot {
    InFlight { ip: Ipv4Addr, since: u64, chain: u8 },
    Resolved { chain: u8, at: u64 },
}

/// The probes in flight, per client.
#[derive(Debug, Default)]
pub(super) struct Probes {
    /// Probes are configured (`dhcp.conflict_probe_ms`) and the shell can send them.
    enabled: bool,
    slots: HashMap<MacAddr, Slot>,
    in_flight: usize,
    /// Addresses offered unprobed because a cap was reached.
    skipped: u64,
}

impl Probes {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }
}

impl Engine {
    /// Whether the shell can send probes: off (as a new engine is, until its shell
    /// says so; and when the shell cannot open an ICMP socket), every address is
    /// offered unprobed. Never turns probes on when `dhcp.conflict_probe_ms` is 0.
    pub fn set_probing(&mut self, on: bool) {
        self.probes.enabled = on && self.settings.conflict_probe.is_some();
    }

    /// Probes outstanding now.
    pub fn probes_in_flight(&self) -> usize {
        self.probes.in_flight
    }

    /// Addresses offered without a probe they needed, because a cap was reached.
    pub fn probes_skipped(&self) -> u64 {
        self.probes.skipped
    }

    /// How long after a membership change the addresses gained in subnet `si` are
    /// probed: the longest lease a client there can hold, plus the offer hold.
    fn probe_window(&self, si: usize) -> u64 {
        let cfg = &self.subnets[si].cfg;
        let longest = self
            .hosts
            .values()
            .filter(|h| h.ip.is_none_or(|ip| cfg.network.contains(&ip)))
            .filter_map(|h| h.lease_time)
            .chain([cfg.lease_time])
            .max()
            .unwrap_or(0);
        u64::from(longest) + u64::from(self.settings.offer_hold_secs)
    }

    /// After a change at `since`: what each pool's share holds now and did not in
    /// `before` is probed for the subnet's window.
    fn inherit_gained(&mut self, before: &[Vec<Vec<u64>>], since: u64) {
        for si in 0..self.subnets.len() {
            // `since` may come from a stored membership record: saturate.
            let until = since.saturating_add(self.probe_window(si));
            for (pi, pool) in self.subnets[si].pools.iter_mut().enumerate() {
                let old = before.get(si).and_then(|s| s.get(pi));
                let gained: Vec<u64> = pool
                    .share()
                    .iter()
                    .enumerate()
                    .map(|(w, now)| now & !old.and_then(|o| o.get(w)).copied().unwrap_or(0))
                    .collect();
                pool.inherit(&gained, until);
            }
        }
    }

    /// At start-up: the store says the member list changed from `previous` (shared by
    /// `split`) at `since`. What this member's share gained then is probed for the rest
    /// of the window, as if the change had happened while running; "probed clear" is
    /// not remembered across a restart, so those addresses are probed again.
    ///
    /// A member on an empty store probes nothing: there is no share it gained from, a
    /// first deployment would otherwise probe every address of every member, and what
    /// a rescheduled member could have missed is covered by the snapshots it pulls from
    /// every other member before it serves (`shell::start`), with its clients' own
    /// check (RFC 2131 §4.4.1: the client SHOULD probe and DECLINE) behind that.
    pub fn inherit_from(&mut self, previous: &[String], split: Split, since: u64, now: u64) {
        let list = MemberList::new(previous.iter().cloned());
        self.inherit_relative_to(&list, split, since);
        self.end_probes(now);
    }

    /// After a change at `since`: what this member's share holds now and did not under
    /// `list` (shared by `split`) is probed for the subnet's window.
    pub(super) fn inherit_relative_to(&mut self, list: &MemberList, split: Split, since: u64) {
        let me = self.me.clone();
        let before: Vec<Vec<Vec<u64>>> = self
            .subnets
            .iter()
            .map(|s| {
                s.pools
                    .iter()
                    .map(|p| {
                        let (first, last) = p.bounds();
                        list.share_of(split, first, last, me.as_deref())
                    })
                    .collect()
            })
            .collect();
        self.inherit_gained(&before, since);
    }

    /// Whether a free address must be probed before it is offered at `now`.
    fn needs_probe(&self, ip: Ipv4Addr, now: u64) -> bool {
        self.probes.enabled
            && !self.reserved.contains_key(&ip)
            && self
                .subnets
                .iter()
                .flat_map(|s| s.pools.iter())
                .any(|p| p.needs_probe(ip, now))
            // The client's own lease (or a peer's for it): its address, in use by it.
            && !self
                .table
                .get(ip)
                .is_some_and(|l| l.state == LeaseState::Bound && l.is_active(now))
    }

    /// Before deciding a DISCOVER: the probes its client has waited for so far, or
    /// `None` while one is in flight (a retransmission: the shell keeps the newest and
    /// answers it when the probe ends).
    pub(super) fn probe_chain(&mut self, mac: &MacAddr) -> Option<u8> {
        match self.probes.slots.get(mac).copied() {
            Some(Slot::InFlight { .. }) => None,
            Some(Slot::Resolved { chain, .. }) => {
                self.probes.slots.remove(mac);
                Some(chain)
            }
            None => Some(0),
        }
    }

    /// RFC 2131 §3.1 step 2: when `ip` was inherited and not yet found clear, hold it
    /// for the client and ask for a probe instead of offering it now. `None`: offer.
    pub(super) fn probe_first(
        &mut self,
        msg: &Message,
        ip: Ipv4Addr,
        mac: &MacAddr,
        chain: u8,
        now: u64,
    ) -> Option<Decision> {
        if !self.needs_probe(ip, now) {
            return None;
        }
        if chain >= PROBES_PER_CLIENT || self.probes.in_flight >= MAX_IN_FLIGHT {
            self.probes.skipped += 1;
            return None;
        }
        // Held like an offer, so no other client is given it meanwhile; the hold ends
        // with the offer hold if the probe's answer never comes.
        let hold = new_lease(
            msg,
            ip,
            *mac,
            LeaseState::Offered,
            now,
            self.settings.offer_hold_secs,
        );
        self.table.insert(hold);
        self.set_used(ip, true);
        self.probes.slots.insert(
            *mac,
            Slot::InFlight {
                ip,
                since: now,
                chain: chain + 1,
            },
        );
        self.probes.in_flight += 1;
        Some(Decision {
            reply: None,
            effects: Vec::new(),
            outcome: Outcome::Probe(ip),
        })
    }

    /// The shell's report of the probe of `ip` for `mac`. Answered: the address is
    /// quarantined as a DECLINE quarantines it (RFC 2131 §4.3.3), for
    /// `decline_hold_secs`, under no client's MAC (a host we cannot name holds it), and
    /// the change is returned to persist and hand to the peers. Clear: not probed again
    /// in this window, and the client's hold stays for its offer. Either way the
    /// client's DISCOVER is then decided again. A report for no probe in flight (late,
    /// or for another address) changes nothing.
    pub fn handle_probe_result(
        &mut self,
        mac: &MacAddr,
        ip: Ipv4Addr,
        result: ProbeResult,
        now: u64,
    ) -> Option<LeaseEffect> {
        let chain = match self.probes.slots.get(mac) {
            Some(Slot::InFlight { ip: p, chain, .. }) if *p == ip => *chain,
            _ => return None,
        };
        self.probes.in_flight -= 1;
        self.probes
            .slots
            .insert(*mac, Slot::Resolved { chain, at: now });
        match result {
            ProbeResult::Clear => {
                self.pools_for(ip).for_each(|p| p.probed_clear(ip));
                None
            }
            // A client that bound the address meanwhile keeps it: its lease is ours.
            ProbeResult::Answered
                if self
                    .table
                    .get(ip)
                    .is_some_and(|l| l.state == LeaseState::Bound && l.is_active(now)) =>
            {
                None
            }
            ProbeResult::Answered => {
                let hold = self.settings.decline_hold_secs;
                let lease = Lease {
                    ip,
                    mac: MacAddr([0; 6]),
                    state: LeaseState::Declined,
                    starts: now,
                    expires: now + u64::from(hold),
                    hostname: None,
                    client_id: None,
                    machine_id: None,
                    arch: None,
                };
                self.limits.declined(lease.expires);
                self.table.insert(lease.clone());
                self.set_used(ip, true);
                Some(LeaseEffect::Put(lease))
            }
        }
    }

    /// Forgets probes the shell never reported and windows that have ended.
    pub(super) fn end_probes(&mut self, now: u64) {
        let before = self.probes.slots.len();
        self.probes.slots.retain(|_, s| match *s {
            Slot::InFlight { since, .. } => since + STALE_SECS > now,
            Slot::Resolved { at, .. } => at + STALE_SECS > now,
        });
        if self.probes.slots.len() != before {
            self.probes.in_flight = self
                .probes
                .slots
                .values()
                .filter(|s| matches!(s, Slot::InFlight { .. }))
                .count();
        }
        for pool in self.subnets.iter_mut().flat_map(|s| s.pools.iter_mut()) {
            pool.end_probes(now);
        }
    }
}
