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
//! machine's boot stage for the board.

pub mod board;
pub mod disk;
mod intern;
pub mod merge;
pub mod peers;
pub mod run;
pub mod stage;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

use serde::Serialize;

use crate::mac::MacAddr;
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

/// An event as the disk journal keeps it: its machine, and whether it went to the
/// known machines (so a restart puts it back where it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// The machine.
    pub mac: MacAddr,
    /// The event.
    pub event: Event,
    /// Kept with the known machines.
    pub known: bool,
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

/// Which listener saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// DHCPv4.
    Dhcp,
    /// DHCPv6.
    Dhcp6,
    /// TFTP.
    Tftp,
    /// The HTTP boot routes.
    Http,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Increases by one per event recorded (over all MACs): `?after=` pages on it.
    pub seq: u64,
    /// Unix time, milliseconds.
    pub at_ms: u64,
    /// Which listener.
    pub source: Source,
    /// What the machine asked: a DHCP or DHCPv6 message type, `RRQ`, an HTTP route.
    pub what: &'static str,
    /// What it got: `offer`, `ack`, `advertise`, `reply`, `silent`, `complete`, `200`, …
    pub outcome: &'static str,
    /// Why, for a silence or a failure (`not_responsible`, `timeout`, `miss`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
    /// The address given (DHCP, DHCPv6: the first of the reply's) or the client's
    /// (TFTP, HTTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// A file with its options, an owner and the URL chained, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<str>>,
}

/// What a listener reports; [`Timeline::record`] stamps it.
#[derive(Debug, Clone)]
pub struct Report {
    /// Which listener.
    pub source: Source,
    /// What was asked.
    pub what: &'static str,
    /// What it got.
    pub outcome: &'static str,
    /// Why.
    pub why: Option<&'static str>,
    /// The address.
    pub ip: Option<IpAddr>,
    /// Free text, escaped and cut to [`MAX_DETAIL`] when recorded.
    pub detail: Option<String>,
}

#[derive(Debug)]
struct Slot {
    mac: MacAddr,
    event: Event,
    /// The slot and seq of the same machine's event before this one.
    prev: Option<(u32, u64)>,
    /// The same machine has a later event: overwriting this slot leaves it some.
    superseded: bool,
}

#[derive(Debug)]
struct Machine {
    /// The slot and seq of its newest event.
    newest: (u32, u64),
    /// The addresses it was given, newest last (at most [`IPS_PER_MAC`]); exactly the
    /// addresses `by_ip` maps to it, so they go with it without a pass over every
    /// address (with tens of thousands of machines that pass cost more than everything
    /// else per packet).
    ips: Vec<IpAddr>,
    /// The newest of `ips`, kept here: most events name the address the machine was
    /// given last, and this answers that without reading the list.
    last_ip: Option<IpAddr>,
    /// Its boot stage (the board reads this, never the events).
    progress: Progress,
}

/// Every event of a ring in one ring of `cap` slots, oldest overwritten first, each linked to
/// its machine's previous one. Recording costs one lookup of the machine and a write
/// at the ring's head; the machine whose event is overwritten is looked up only when
/// that was its last (one map per machine and a fixed ring, where a queue per machine,
/// an order queue and an address list per machine cost four or five random cache
/// misses per event: the largest user-space cost of a DHCP exchange under load).
#[derive(Debug)]
struct Inner {
    slots: Vec<Slot>,
    /// The slot the next event goes to once the ring is full.
    head: usize,
    machines: HashMap<MacAddr, Machine>,
    /// The MAC each address was last given to.
    by_ip: HashMap<IpAddr, MacAddr>,
    /// Slots in the ring.
    cap: usize,
}

/// Both rings, and the sequence numbers they share.
#[derive(Debug)]
struct Rings {
    /// Machines given an address (or that fetched a file), or enrolled.
    known: Inner,
    /// Machines never answered.
    strangers: Inner,
    seq: u64,
    limits: Limits,
    /// Machines the operator enrolled: kept with the known ones from their first event.
    enrolled: HashSet<MacAddr>,
    /// Events not yet written to disk (None: the timeline is not kept on disk). Taken
    /// whole by the writer, so recording only pushes.
    journal: Option<Vec<Journaled>>,
    /// Events the writer fell too far behind to take.
    journal_dropped: u64,
}

impl Rings {
    fn new(limits: Limits) -> Self {
        Self {
            known: Inner::new(limits.known_events),
            strangers: Inner::new(limits.unknown_events),
            seq: 0,
            limits,
            enrolled: HashSet::new(),
            journal: None,
            journal_dropped: 0,
        }
    }

    /// Files `event` for `mac`: with the known machines when `to_known` (the machine's
    /// earlier events move over with it), else with the strangers.
    fn place(&mut self, mac: MacAddr, event: Event, given: bool, to_known: bool) {
        if self.known.machines.contains_key(&mac) {
            self.known.push(mac, event, given);
        } else if to_known {
            for earlier in self.strangers.forget(&mac, self.limits.per_machine) {
                self.known.push(mac, earlier, false);
            }
            self.known.push(mac, event, given);
        } else {
            self.strangers.push(mac, event, false);
        }
    }
}

impl Inner {
    fn new(cap: usize) -> Self {
        Self {
            slots: Vec::new(),
            head: 0,
            machines: HashMap::new(),
            by_ip: HashMap::new(),
            cap,
        }
    }

    /// Frees the slot the next event goes to; returns its index. A machine whose last
    /// event goes is forgotten, with its addresses.
    fn take_slot(&mut self) -> Option<usize> {
        if self.slots.len() < self.cap {
            return None;
        }
        let i = self.head;
        self.head = (i + 1) % self.cap;
        let old = &self.slots[i];
        if !old.superseded {
            let (mac, seq) = (old.mac, old.event.seq);
            if self.machines.get(&mac).is_some_and(|m| m.newest.1 == seq) {
                if let Some(m) = self.machines.remove(&mac) {
                    for ip in m.ips {
                        self.by_ip.remove(&ip);
                    }
                }
            }
        }
        Some(i)
    }

    /// Adds `event` for `mac` at the ring's head; `given`: its address was given to it.
    fn push(&mut self, mac: MacAddr, event: Event, given: bool) {
        let seq = event.seq;
        let taken = self.take_slot();
        let index = taken.unwrap_or(self.slots.len());
        let machine = self.machines.entry(mac).or_insert(Machine {
            newest: (u32::MAX, 0),
            ips: Vec::new(),
            last_ip: None,
            progress: Progress::new(event.at_ms),
        });
        machine.progress.advance(&event);
        let (prev_index, prev_seq) = machine.newest;
        let prev = self
            .slots
            .get_mut(prev_index as usize)
            .filter(|p| p.event.seq == prev_seq)
            .map(|p| {
                p.superseded = true;
                (prev_index, prev_seq)
            });
        machine.newest = (index as u32, seq);
        let new_ip = event
            .ip
            .filter(|ip| given && machine.last_ip != Some(*ip) && !machine.ips.contains(ip));
        let slot = Slot {
            mac,
            event,
            prev,
            superseded: false,
        };
        match taken {
            Some(i) => self.slots[i] = slot,
            None => self.slots.push(slot),
        }
        if let Some(ip) = new_ip {
            self.remember_ip(ip, mac);
        }
    }

    /// The events of `mac` after `after` (a seq), oldest first, at most `per_mac`.
    fn events(&self, mac: &MacAddr, after: u64, per_mac: usize) -> Vec<Event> {
        let mut out = Vec::new();
        let mut at = self.machines.get(mac).map(|m| m.newest);
        while let Some((i, seq)) = at {
            let Some(slot) = self.slots.get(i as usize) else {
                break;
            };
            if out.len() == per_mac || seq <= after || slot.event.seq != seq {
                break;
            }
            out.push(slot.event.clone());
            at = slot.prev;
        }
        out.reverse();
        out
    }

    /// Forgets `mac` (its slots stay until overwritten, reachable from nothing);
    /// returns its events, oldest first.
    fn forget(&mut self, mac: &MacAddr, per_mac: usize) -> Vec<Event> {
        let events = self.events(mac, 0, per_mac);
        if let Some(m) = self.machines.remove(mac) {
            for ip in m.ips {
                self.by_ip.remove(&ip);
            }
        }
        events
    }

    /// `ip` was given to `mac` (which has an entry): `by_ip` and the machines' address
    /// lists change only when the address is new to it.
    fn remember_ip(&mut self, ip: IpAddr, mac: MacAddr) {
        if let Some(other) = self.by_ip.insert(ip, mac).filter(|o| *o != mac) {
            if let Some(m) = self.machines.get_mut(&other) {
                m.ips.retain(|x| *x != ip);
                m.last_ip = m.ips.last().copied();
            }
        }
        let Some(m) = self.machines.get_mut(&mac) else {
            return;
        };
        m.ips.push(ip);
        m.last_ip = Some(ip);
        if m.ips.len() > IPS_PER_MAC {
            let old = m.ips.remove(0);
            self.by_ip.remove(&old);
        }
    }
}

/// The timeline of every machine; shared by the listeners and the operator API.
#[derive(Debug)]
pub struct Timeline {
    inner: Mutex<Rings>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

fn now_ms() -> u64 {
    crate::clock::unix_now_ms()
}

/// `text` with every control or non-ASCII character escaped, at most [`MAX_DETAIL`]
/// (the escaped text is ASCII: octets and characters are the same count). One
/// allocation: DHCPv6 keeps a detail for every message.
pub(crate) fn clean(text: &str) -> Box<str> {
    let mut out = String::with_capacity(text.len().min(MAX_DETAIL));
    for c in text.chars() {
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
        if out.len() >= MAX_DETAIL {
            out.truncate(MAX_DETAIL);
            break;
        }
    }
    out.into_boxed_str()
}

/// The exchange as one log line, as dnsmasq's `log-dhcp` gives one per message (what
/// ironic-image's operators read with `kubectl logs`): on target `exchange`, at info
/// for what was answered or served, at debug for a silence (on several members, two
/// of three stay silent for every machine, and a flood of strangers is all silences).
/// `SHARDBOOT_LOG=info,exchange=warn` turns them off. Every field is shardboot's own
/// or escaped (`clean`).
fn log_exchange(mac: MacAddr, e: &Event) {
    let source = match e.source {
        Source::Dhcp => "dhcp",
        Source::Dhcp6 => "dhcp6",
        Source::Tftp => "tftp",
        Source::Http => "http",
    };
    let ip = e.ip.map(tracing::field::display);
    let detail = e.detail.as_deref();
    if e.outcome == "silent" {
        tracing::debug!(target: "exchange", source, %mac, what = e.what, outcome = e.outcome, why = e.why, ip, detail, "{} {mac}: {}", e.what, e.outcome);
    } else {
        tracing::info!(target: "exchange", source, %mac, what = e.what, outcome = e.outcome, why = e.why, ip, detail, "{} {mac}: {}", e.what, e.outcome);
    }
}

/// Whether `e` gave the machine an address (DHCP OFFER/ACK, DHCPv6 ADVERTISE/REPLY).
fn gives_address(e: &Event) -> bool {
    match e.source {
        Source::Dhcp => matches!(e.outcome, "offer" | "ack"),
        Source::Dhcp6 => matches!(e.outcome, "advertise" | "reply"),
        Source::Tftp | Source::Http => false,
    }
}

impl Timeline {
    /// An empty timeline keeping `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            inner: Mutex::new(Rings::new(limits)),
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
    /// dropped because the writer fell behind (more than both rings hold).
    pub fn take_journal(&self) -> (Vec<Journaled>, u64) {
        let mut g = self.lock();
        let dropped = std::mem::take(&mut g.journal_dropped);
        let taken = g.journal.as_mut().map(std::mem::take).unwrap_or_default();
        (taken, dropped)
    }

    /// Puts back an event read from disk, with its seq and its place, as it was when
    /// recorded (no log line, not journaled again). Events must come in seq order.
    pub fn replay(&self, j: Journaled) {
        let mut g = self.lock();
        g.seq = g.seq.max(j.event.seq);
        let given = gives_address(&j.event);
        g.place(j.mac, j.event, given, j.known);
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
        let mut g = self.lock();
        g.seq += 1;
        let seq = g.seq;
        let event = Event {
            seq,
            at_ms,
            source: report.source,
            what: report.what,
            outcome: report.outcome,
            why: report.why,
            ip: report.ip,
            detail,
        };
        log_exchange(mac, &event);
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
        g.place(mac, event, given, to_known);
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
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn dhcp(what: &'static str, outcome: &'static str, ip: Option<Ipv4Addr>) -> Report {
        Report {
            source: Source::Dhcp,
            what,
            outcome,
            why: None,
            ip: ip.map(IpAddr::V4),
            detail: None,
        }
    }

    fn dhcp6(what: &'static str, outcome: &'static str, ip: Option<Ipv6Addr>) -> Report {
        Report {
            source: Source::Dhcp6,
            ip: ip.map(IpAddr::V6),
            ..dhcp(what, outcome, None)
        }
    }

    const A: MacAddr = MacAddr([0x52, 0x54, 0, 0, 0, 1]);

    #[test]
    fn a_machines_events_in_order_and_tftp_found_by_its_address() {
        let t = Timeline::default();
        let ip = Ipv4Addr::new(192, 0, 2, 100);
        t.record_at(A, dhcp("DISCOVER", "offer", Some(ip)), 1);
        t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 2);
        let tftp = Report {
            source: Source::Tftp,
            what: "RRQ",
            outcome: "complete",
            why: None,
            ip: Some(ip.into()),
            detail: Some("snponly.efi blksize=1468\n\u{1b}[31m".into()),
        };
        assert!(t.record_for_ip(ip, tftp.clone()));
        assert!(!t.record_for_ip(Ipv4Addr::new(192, 0, 2, 9), tftp));
        let ev = t.events(&A, 0);
        let whats: Vec<&str> = ev.iter().map(|e| e.what).collect();
        assert_eq!(whats, ["DISCOVER", "REQUEST", "RRQ"]);
        // Control characters from a packet never reach a reader unescaped.
        assert_eq!(
            ev[2].detail.as_deref(),
            Some("snponly.efi blksize=1468\\n\\u{1b}[31m")
        );
        assert_eq!(t.events(&A, ev[1].seq).len(), 1);
    }

    #[test]
    fn bounded_per_machine_and_in_all() {
        // What the module's size bound counts on (an address of either family).
        assert!(std::mem::size_of::<Event>() <= 104);
        assert!(
            std::mem::size_of::<Slot>() <= 136,
            "{}",
            std::mem::size_of::<Slot>()
        );
        let t = Timeline::default();
        for i in 0..(PER_MAC as u64 + 10) {
            t.record_at(A, dhcp("DISCOVER", "offer", None), i);
        }
        let ev = t.events(&A, 0);
        assert_eq!(ev.len(), PER_MAC);
        assert_eq!(ev[0].at_ms, 10, "the oldest went first");
        for n in 0..(TOTAL / PER_MAC + 10) {
            let mac = MacAddr([2, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            for _ in 0..PER_MAC {
                t.record_at(mac, dhcp("DISCOVER", "offer", None), 0);
            }
        }
        assert!(t.len() <= TOTAL, "{}", t.len());
        assert!(
            t.events(&A, 0).is_empty(),
            "the oldest machine's events went first"
        );
        let long = "x".repeat(1000);
        t.record(
            A,
            Report {
                detail: Some(long),
                ..dhcp("DISCOVER", "offer", None)
            },
        );
        assert_eq!(
            t.events(&A, 0)[0].detail.as_ref().unwrap().len(),
            MAX_DETAIL
        );
    }

    #[test]
    fn a_flood_of_random_macs_never_answered_evicts_no_machine_that_was() {
        let t = Timeline::default();
        let ip = Ipv4Addr::new(192, 0, 2, 100);
        t.record_at(A, dhcp("DISCOVER", "offer", Some(ip)), 1);
        t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 2);
        // A stranger, silent at first, then answered: its earlier events move with it.
        let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        t.record_at(b, dhcp("DISCOVER", "silent", None), 3);
        // Three times more random MACs than the whole timeline holds, each silent.
        for n in 0..(3 * TOTAL) {
            let mac = MacAddr([6, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            t.record_at(mac, dhcp("DISCOVER", "silent", None), 10);
        }
        assert!(t.len() <= TOTAL, "{}", t.len());
        let whats: Vec<&str> = t.events(&A, 0).iter().map(|e| e.what).collect();
        assert_eq!(whats, ["DISCOVER", "REQUEST"]);
        assert!(t.record_for_ip(
            ip,
            Report {
                source: Source::Tftp,
                ..dhcp("RRQ", "complete", None)
            }
        ));
        // b's silent DISCOVER went with the flood; a new one and its answer are kept.
        assert!(t.events(&b, 0).is_empty());
        t.record_at(b, dhcp("DISCOVER", "silent", None), 20);
        t.record_at(
            b,
            dhcp("DISCOVER", "offer", Some(Ipv4Addr::new(192, 0, 2, 101))),
            24,
        );
        for n in 0..(2 * STRANGERS) {
            let mac = MacAddr([6, 1, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            t.record_at(mac, dhcp("DISCOVER", "silent", None), 30);
        }
        let b_events: Vec<(u64, &str)> = t
            .events(&b, 0)
            .iter()
            .map(|e| (e.at_ms, e.outcome))
            .collect();
        assert_eq!(b_events, [(20, "silent"), (24, "offer")]);
        // An HTTP request names any MAC it likes: it is no reason to keep one.
        let c = MacAddr([6, 2, 0, 0, 0, 1]);
        t.record_at(
            c,
            Report {
                source: Source::Http,
                ..dhcp("GET /v1/boot/{mac}/{name}", "200", None)
            },
            40,
        );
        assert!(!t.inner.lock().unwrap().known.machines.contains_key(&c));
    }

    #[test]
    fn an_enrolled_machine_only_ever_met_with_silence_outlives_a_flood() {
        // Small rings, so the flood is many times what they hold.
        let limits = Limits {
            per_machine: 8,
            known_events: 100,
            unknown_events: 100,
        };
        let t = Timeline::new(limits);
        // Enrolled (a reservation, say) and answered by another member: this member
        // stays silent for it, and its boot requests name it only in the URL.
        t.set_enrolled([A].into_iter().collect());
        t.record_at(A, dhcp("DISCOVER", "silent", None), 1);
        t.record_at(
            A,
            Report {
                source: Source::Http,
                ..dhcp("GET /v1/boot/{mac}/{name}", "200", None)
            },
            2,
        );
        // A stranger kept before the operator enrolled it moves over with its next event.
        let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        t.record_at(b, dhcp("DISCOVER", "silent", None), 3);
        t.set_enrolled([A, b].into_iter().collect());
        t.record_at(b, dhcp("DISCOVER", "silent", None), 4);
        for n in 0..10_000u32 {
            let mac = MacAddr([6, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            t.record_at(mac, dhcp("DISCOVER", "silent", None), 10);
        }
        assert_eq!(t.events(&A, 0).len(), 2);
        assert_eq!(t.events(&b, 0).len(), 2, "both of b's events moved");
        assert!(t.len() <= 200);
        // The board sees the flood as silent strangers and A as known.
        let rows = t.rows(0);
        let a = rows.iter().find(|r| r.mac == A).unwrap();
        assert!(a.known);
        assert_eq!(a.progress.stage, stage::Stage::Chained);
        assert!(rows.iter().filter(|r| !r.known).count() <= 100);
    }

    #[test]
    fn an_address_finds_its_machine_until_the_machine_is_forgotten() {
        let t = Timeline::default();
        let ip = |n: usize| Ipv4Addr::from(0x0a00_0000 + n as u32);
        let mac = |n: usize| MacAddr([2, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        let rrq = || Report {
            source: Source::Tftp,
            ..dhcp("RRQ", "complete", None)
        };
        // More machines than the timeline keeps: each one offered an address.
        let machines = TOTAL + 1000;
        for n in 0..machines {
            t.record_at(mac(n), dhcp("DISCOVER", "offer", Some(ip(n))), 0);
        }
        assert!(t.record_for_ip(ip(machines - 1), rrq()));
        assert!(
            !t.record_for_ip(ip(0), rrq()),
            "a forgotten machine's address finds nothing"
        );
        // An address given to another machine since finds the new one, also after the
        // first is forgotten.
        t.record_at(mac(1), dhcp("DISCOVER", "offer", Some(ip(1001))), 0);
        for n in 0..TOTAL {
            t.record_at(mac(machines + n), dhcp("DISCOVER", "offer", None), 0);
        }
        assert!(!t.record_for_ip(ip(1001), rrq()));
        assert_eq!(
            t.inner.lock().unwrap().known.by_ip.len(),
            0,
            "nothing left behind"
        );
        // One machine given many addresses keeps only its newest few.
        let m = mac(7_000_000);
        for n in 0..(IPS_PER_MAC + 5) {
            t.record_at(m, dhcp("DISCOVER", "offer", Some(ip(2_000_000 + n))), 0);
        }
        assert!(t.record_for_ip(ip(2_000_000 + IPS_PER_MAC + 4), rrq()));
        assert!(!t.record_for_ip(ip(2_000_000), rrq()));
        assert_eq!(t.inner.lock().unwrap().known.by_ip.len(), IPS_PER_MAC);
    }

    #[test]
    fn an_address_given_back_finds_its_new_machine_after_the_old_is_forgotten() {
        let t = Timeline::default();
        let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
        let ip = Ipv4Addr::new(192, 0, 2, 100);
        let rrq = || Report {
            source: Source::Tftp,
            ..dhcp("RRQ", "complete", None)
        };
        t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1);
        t.record_at(b, dhcp("REQUEST", "ack", Some(ip)), 2);
        assert!(t.record_for_ip(ip, rrq()));
        assert_eq!(t.events(&b, 0).len(), 2, "the address went to b");
        t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 3);
        // b's events are all overwritten by A's: b is forgotten, the address stays A's.
        for n in 0..TOTAL {
            t.record_at(A, dhcp("DISCOVER", "silent", None), 4 + n as u64);
        }
        assert!(t.events(&b, 0).is_empty());
        let before = t.events(&A, 0).len();
        assert!(t.record_for_ip(ip, rrq()));
        assert_eq!(t.events(&A, 0).len(), before, "PER_MAC shown at most");
        assert_eq!(t.events(&A, 0).last().map(|e| e.what), Some("RRQ"));
        let g = t.inner.lock().unwrap();
        assert_eq!(g.known.machines.len(), 1);
        assert_eq!(g.known.by_ip.get(&IpAddr::V4(ip)), Some(&A));
    }

    #[test]
    fn an_ipv6_boot_is_found_by_its_dhcpv6_address_or_its_link_local_mac() {
        let t = Timeline::default();
        let given: Ipv6Addr = "fd00:1::105".parse().unwrap();
        let rrq = |ip: IpAddr| Report {
            source: Source::Tftp,
            ip: Some(ip),
            ..dhcp("RRQ", "complete", None)
        };
        // Nothing given yet: a global address finds no machine, a silence gives none.
        assert!(!t.record_for_ip(given, rrq(given.into())));
        t.record_at(A, dhcp6("SOLICIT", "silent", Some(given)), 1);
        assert!(!t.record_for_ip(given, rrq(given.into())));
        t.record_at(A, dhcp6("SOLICIT", "advertise", Some(given)), 2);
        t.record_at(A, dhcp6("REQUEST", "reply", Some(given)), 3);
        assert!(t.record_for_ip(given, rrq(given.into())));
        // The link-local address firmware makes from its NIC (modified EUI-64) names
        // the MAC without any DHCP; one that is not EUI-64, or not link-local, does not.
        let eui64: Ipv6Addr = "fe80::5054:ff:fe00:1".parse().unwrap();
        assert!(t.record_for_ip(
            eui64,
            Report {
                source: Source::Http,
                ..rrq(eui64.into())
            }
        ));
        let (b, b_ip) = (MacAddr([0x52, 0x54, 0, 0, 0, 2]), "fe80::5054:ff:fe00:2");
        let b_ip: Ipv6Addr = b_ip.parse().unwrap();
        assert!(t.record_for_ip(b_ip, rrq(b_ip.into())));
        assert_eq!(t.events(&b, 0).len(), 1);
        for other in ["fe80::1234:5678:9abc:def0", "fd00:1::5054:ff:fe00:3"] {
            let ip: Ipv6Addr = other.parse().unwrap();
            assert!(!t.record_for_ip(ip, rrq(ip.into())), "{other}");
        }
        let sources: Vec<(Source, &str)> =
            t.events(&A, 0).iter().map(|e| (e.source, e.what)).collect();
        assert_eq!(
            sources,
            [
                (Source::Dhcp6, "SOLICIT"),
                (Source::Dhcp6, "SOLICIT"),
                (Source::Dhcp6, "REQUEST"),
                (Source::Tftp, "RRQ"),
                (Source::Http, "RRQ"),
            ]
        );
        // The JSON names the source and the address as an operator reads them.
        let json = serde_json::to_value(&t.events(&A, 0)[2]).unwrap();
        assert_eq!(json["source"], "dhcp6");
        assert_eq!(json["ip"], "fd00:1::105");
    }

    #[test]
    fn an_ipv4_client_of_a_dual_stack_listener_is_its_ipv4_address() {
        let t = Timeline::default();
        let ip = Ipv4Addr::new(192, 0, 2, 100);
        t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1);
        let mapped = IpAddr::V6(ip.to_ipv6_mapped());
        assert!(t.record_for_ip(mapped, dhcp("RRQ", "complete", None)));
        assert_eq!(t.events(&A, 0).len(), 2);
    }
}
