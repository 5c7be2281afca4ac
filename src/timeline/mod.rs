//! A per-machine boot timeline: every DHCP message and what was decided (answered, or
//! silent and why), every TFTP transfer (file, options, bytes, outcome) and every boot
//! request (route, owner, resolver, status, chained URL), with time, for the operator's
//! first question when a machine fails to boot: "what did it ask, and what did it get?".
//!
//! Bounded: at most `events_per_machine` events shown per MAC ([`PER_MAC`] by default),
//! in two rings: machines neither answered nor enrolled (every DISCOVER silent so far:
//! what a flood of random MACs is) share `unknown_events` ([`STRANGERS`]), so such a
//! flood churns only that ring and never evicts the machines that were given an
//! address or that the operator enrolled (`known_events`); a machine moves to the other
//! ring, with its earlier events, when DHCP or DHCPv6 gives it an address, it fetches a
//! file by TFTP, or it is enrolled. In each ring the oldest event goes first. An event is
//! about 136 octets with its links plus its detail text (a file name and options, or a
//! URL: at most [`MAX_DETAIL`]), so the default timeline stays under 30 MiB. TFTP and
//! the first-stage script know only the client's address: the MAC is the one DHCP (v4
//! or v6) last gave that address to, or for an IPv6 link-local address with a modified
//! EUI-64 interface identifier, the MAC it is made from (as `dhcp6::client_mac` reads a
//! DHCPv6 client's source).
//!
//! Every value is shardboot's own (a label, an address, a URL it built) or is escaped
//! before it is stored, so an event can be shown as it is.
//!
//! The limits are `[timeline]` settings ([`Limits`]); machines the operator enrolled
//! (a lease, a reservation, a `[[host]]`, a host policy, a port in Ironic:
//! [`Timeline::set_enrolled`]) are
//! kept with the answered ones from their first event. `disk` keeps the timeline across
//! a restart, `merge` joins the members' timelines of one machine, `stage` reads each
//! machine's boot stage for the board, `board_merge` joins the members' boards and
//! `pool_fill` keeps the board's hour of pool samples. `event` is what one event
//! holds (and how its text is made safe), `rings` the two rings that keep them; this
//! file is the API.

pub mod board;
pub mod board_merge;
pub mod disk;
mod event;
mod intern;
pub mod merge;
pub mod peers;
pub mod pool_fill;
mod rings;
pub mod run;
pub mod stage;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::mac::MacAddr;
pub(crate) use event::clean;
use event::{gives_address, log_exchange};
pub use event::{Event, Journaled, Report, Source};
use rings::Rings;
use stage::Progress;

/// Events kept per MAC, by default (`timeline.events_per_machine`).
pub const PER_MAC: usize = 48;
/// Events kept in all, by default.
pub const TOTAL: usize = 100_000;
/// Of them, events of machines never answered (`timeline.unknown_events`); the rest
/// (`timeline.known_events`) are the known machines'.
pub const STRANGERS: usize = TOTAL / 5;
/// Longest detail kept, in octets.
pub const MAX_DETAIL: usize = 160;
/// Addresses remembered per MAC for finding it by address (a machine has one or two).
const IPS_PER_MAC: usize = 8;
/// A boot request the same as the machine's newest event (same route, answer, client
/// address and detail) less than this after it is counted, not kept again: iPXE's own
/// retries and a client looping on one URL would otherwise push out the history of
/// every machine in its ring (anyone can write any MAC into a boot URL), and recording
/// and writing each one was a sixth of the boot route's CPU (docs/benchmarks.md).
pub const REPEAT_WINDOW_MS: u64 = 5_000;

/// How much the timeline keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Events shown per machine.
    pub per_machine: usize,
    /// Events of known machines (answered, or enrolled by the operator).
    pub known_events: usize,
    /// Events of machines never answered and not enrolled.
    pub unknown_events: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_machine: PER_MAC,
            known_events: TOTAL - STRANGERS,
            unknown_events: STRANGERS,
        }
    }
}

impl From<&crate::config::TimelineSettings> for Limits {
    fn from(s: &crate::config::TimelineSettings) -> Self {
        Self {
            per_machine: s.events_per_machine,
            known_events: s.known_events,
            unknown_events: s.unknown_events,
        }
    }
}

/// One machine on the board: its stage and whether it is known.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The machine.
    pub mac: MacAddr,
    /// Its stage, since when, the last thing seen.
    pub progress: Progress,
    /// Answered or enrolled (else a stranger).
    pub known: bool,
}

/// The timeline of every machine; shared by the listeners and the operator API.
#[derive(Debug)]
pub struct Timeline {
    inner: Mutex<Rings>,
    /// The key of HTTP events' fingerprints (`rings::RepeatKey`), random per process.
    repeat_hasher: std::hash::RandomState,
    /// The board's pool fill over the last hour (apart from the events' lock).
    pool_fill: Mutex<pool_fill::Ring>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

fn now_ms() -> u64 {
    crate::clock::unix_now_ms()
}

impl Timeline {
    /// An empty timeline keeping `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            inner: Mutex::new(Rings::new(limits)),
            repeat_hasher: std::hash::RandomState::new(),
            pool_fill: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts over with `limits`, keeping the enrolled machines; `journal`: keep every
    /// new event for [`Timeline::take_journal`] (the disk writer). Called at start-up,
    /// before anything is recorded: what was recorded is dropped.
    pub fn configure(&self, limits: Limits, journal: bool) {
        let mut g = self.lock();
        let enrolled = std::mem::take(&mut g.enrolled);
        *g = Rings::new(limits);
        g.enrolled = enrolled;
        g.journal = journal.then(Vec::new);
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.lock().limits
    }

    /// The machines the operator enrolled (leases, reservations, hosts, host policies):
    /// from now on their events are kept with the known machines, so a flood of
    /// strangers never evicts them. A machine already kept as a stranger moves over
    /// with its next event.
    pub fn set_enrolled(&self, macs: HashSet<MacAddr>) {
        self.lock().enrolled = macs;
    }

    /// The events recorded since the last call, oldest first, and how many were
    /// dropped because the writer fell behind (more than both rings hold). `spare`, the
    /// list the writer emptied last time, takes the journal's place: its room is used
    /// again rather than a new list grown from nothing on every flush.
    pub fn take_journal(&self, mut spare: Vec<Journaled>) -> (Vec<Journaled>, u64) {
        spare.clear();
        let mut g = self.lock();
        let dropped = std::mem::take(&mut g.journal_dropped);
        let taken = match g.journal.as_mut() {
            Some(journal) => std::mem::replace(journal, spare),
            None => Vec::new(),
        };
        (taken, dropped)
    }

    /// Puts back an event read from disk, with its seq and its place, as it was when
    /// recorded (no log line, not journaled again). Events must come in seq order.
    pub fn replay(&self, j: Journaled) {
        let mut g = self.lock();
        g.seq = g.seq.max(j.event.seq);
        let given = gives_address(&j.event);
        // Not a fingerprint: the first boot request after a restart is kept anew.
        g.place(j.mac, j.event, given, j.known, None);
    }

    /// Every event kept, oldest first (by seq), each with its place: what the disk
    /// snapshot holds.
    pub fn export(&self) -> Vec<Journaled> {
        let g = self.lock();
        let per = g.limits.per_machine;
        let mut out = Vec::with_capacity(g.known.slots.len() + g.strangers.slots.len());
        for (ring, known) in [(&g.known, true), (&g.strangers, false)] {
            for mac in ring.machines.keys() {
                out.extend(ring.events(mac, 0, per).into_iter().map(|event| Journaled {
                    mac: *mac,
                    event,
                    known,
                }));
            }
        }
        out.sort_by_key(|j| j.event.seq);
        out
    }

    /// Every machine whose newest event is at or after `since_ms`, with its stage.
    pub fn rows(&self, since_ms: u64) -> Vec<Row> {
        let g = self.lock();
        let mut out = Vec::new();
        for (ring, known) in [(&g.known, true), (&g.strangers, false)] {
            out.extend(
                ring.machines
                    .iter()
                    .filter(|(_, m)| m.progress.last_ms >= since_ms)
                    .map(|(mac, m)| Row {
                        mac: *mac,
                        progress: m.progress,
                        known,
                    }),
            );
        }
        out
    }

    /// Records `report` for `mac` at the current time.
    pub fn record(&self, mac: MacAddr, report: Report) {
        self.record_at(mac, report, now_ms());
    }

    /// Records `report` for `mac` at `at_ms`.
    pub fn record_at(&self, mac: MacAddr, report: Report, at_ms: u64) {
        let detail = report.detail.as_deref().map(clean);
        let mut event = Event {
            seq: 0,
            at_ms,
            source: report.source,
            what: report.what,
            outcome: report.outcome,
            why: report.why,
            ip: report.ip,
            detail,
        };
        log_exchange(mac, &event);
        // Only the boot routes repeat themselves at a rate worth folding; hashed before
        // the lock is taken.
        let fingerprint = (event.source == Source::Http).then(|| {
            std::hash::BuildHasher::hash_one(
                &self.repeat_hasher,
                (
                    event.what,
                    event.outcome,
                    event.why,
                    event.ip,
                    &event.detail,
                ),
            )
        });
        let mut g = self.lock();
        if let Some(fingerprint) = fingerprint {
            if g.absorb_repeat(mac, &event, fingerprint, REPEAT_WINDOW_MS) {
                g.repeats += 1;
                return;
            }
        }
        g.seq += 1;
        event.seq = g.seq;
        let given = gives_address(&event);
        // An HTTP boot request names its MAC in the URL, which anyone can write: it
        // moves nobody to the known ring. A TFTP transfer needs an address given first.
        let to_known = given
            || event.source == Source::Tftp
            || g.known.machines.contains_key(&mac)
            || g.enrolled.contains(&mac);
        let g = &mut *g;
        if let Some(journal) = g.journal.as_mut() {
            // The writer takes the journal every flush; one that falls behind by more
            // than both rings hold would write only what is overwritten anyway.
            if journal.len() < g.limits.known_events + g.limits.unknown_events {
                journal.push(Journaled {
                    mac,
                    event: event.clone(),
                    known: to_known,
                });
            } else {
                g.journal_dropped += 1;
            }
        }
        g.place(mac, event, given, to_known, fingerprint);
    }
    /// Records `report` for the MAC that DHCP or DHCPv6 last gave `ip` to, else (an
    /// IPv6 link-local address with a modified EUI-64 interface identifier) the MAC in
    /// it; `false` (nothing recorded) when no MAC is known for it. An IPv4-mapped IPv6
    /// address is its IPv4 address.
    pub fn record_for_ip(&self, ip: impl Into<IpAddr>, report: Report) -> bool {
        let ip = ip.into().to_canonical();
        let mac = {
            let g = self.lock();
            // Only machines given an address have one here.
            g.known.by_ip.get(&ip).copied()
        };
        let mac = mac.or_else(|| match ip {
            IpAddr::V6(v6) => crate::mac::from_link_local(v6),
            IpAddr::V4(_) => None,
        });
        match mac {
            Some(mac) => {
                self.record(mac, report);
                true
            }
            None => false,
        }
    }

    /// The events of `mac` after `after` (a seq), oldest first: its newest
    /// `events_per_machine` at most.
    pub fn events(&self, mac: &MacAddr, after: u64) -> Vec<Event> {
        let g = self.lock();
        let per = g.limits.per_machine;
        if g.known.machines.contains_key(mac) {
            g.known.events(mac, after, per)
        } else {
            g.strangers.events(mac, after, per)
        }
    }

    /// Boot requests not kept because they repeated the machine's newest event within
    /// [`REPEAT_WINDOW_MS`], since start.
    pub fn repeats(&self) -> u64 {
        self.lock().repeats
    }

    /// The newest seq given.
    pub fn last_seq(&self) -> u64 {
        self.lock().seq
    }

    /// Events recorded and not yet overwritten (at most [`TOTAL`]; a machine shows its
    /// newest [`PER_MAC`] of them).
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.known.slots.len() + g.strangers.slots.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps `s`, this minute's pool fill, for the board (the oldest of an hour goes).
    pub fn sample_pools(&self, s: pool_fill::Sample) {
        self.pool_fill
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(s);
    }

    /// The pool fill samples of the last hour, oldest first.
    pub fn pool_fill(&self) -> Vec<pool_fill::Sample> {
        self.pool_fill
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .samples()
    }
}
