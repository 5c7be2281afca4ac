//! The two rings that hold the events: one slot ring per class of machine (known,
//! strangers), each event linked to its machine's previous one, and the machines and
//! addresses that point into it. The [`super::Timeline`] API locks them.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::stage::Progress;
use super::{Event, Journaled, Limits, IPS_PER_MAC};
use crate::mac::MacAddr;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) mac: MacAddr,
    pub(super) event: Event,
    /// The slot and seq of the same machine's event before this one.
    pub(super) prev: Option<(u32, u64)>,
    /// The same machine has a later event: overwriting this slot leaves it some.
    pub(super) superseded: bool,
}

#[derive(Debug)]
pub(super) struct Machine {
    /// The slot and seq of its newest event.
    pub(super) newest: (u32, u64),
    /// The addresses it was given, newest last (at most [`IPS_PER_MAC`]); exactly the
    /// addresses `by_ip` maps to it, so they go with it without a pass over every
    /// address (with tens of thousands of machines that pass cost more than everything
    /// else per packet).
    pub(super) ips: Vec<IpAddr>,
    /// The newest of `ips`, kept here: most events name the address the machine was
    /// given last, and this answers that without reading the list.
    pub(super) last_ip: Option<IpAddr>,
    /// Its boot stage (the board reads this, never the events).
    pub(super) progress: Progress,
    /// When its newest event is an HTTP one: that event's time and fingerprint
    /// ([`super::Timeline::record`]), so a repeat is told from this entry alone, without
    /// reading the event's slot and detail (two more cache misses per boot request over
    /// thousands of machines).
    pub(super) newest_http: Option<RepeatKey>,
}

/// An HTTP event's time and the keyed hash of everything but its time and seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RepeatKey {
    pub(super) at_ms: u64,
    pub(super) fingerprint: u64,
}

/// Every event of a ring in one ring of `cap` slots, oldest overwritten first, each linked to
/// its machine's previous one. Recording costs one lookup of the machine and a write
/// at the ring's head; the machine whose event is overwritten is looked up only when
/// that was its last (one map per machine and a fixed ring, where a queue per machine,
/// an order queue and an address list per machine cost four or five random cache
/// misses per event: the largest user-space cost of a DHCP exchange under load).
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) slots: Vec<Slot>,
    /// The slot the next event goes to once the ring is full.
    head: usize,
    pub(super) machines: HashMap<MacAddr, Machine>,
    /// The MAC each address was last given to.
    pub(super) by_ip: HashMap<IpAddr, MacAddr>,
    /// Slots in the ring.
    cap: usize,
}

/// Both rings, and the sequence numbers they share.
#[derive(Debug)]
pub(super) struct Rings {
    /// Machines given an address (or that fetched a file), or enrolled.
    pub(super) known: Inner,
    /// Machines never answered.
    pub(super) strangers: Inner,
    pub(super) seq: u64,
    pub(super) limits: Limits,
    /// Machines the operator enrolled: kept with the known ones from their first event.
    pub(super) enrolled: HashSet<MacAddr>,
    /// Events not yet written to disk (None: the timeline is not kept on disk). Taken
    /// whole by the writer, so recording only pushes.
    pub(super) journal: Option<Vec<Journaled>>,
    /// Events the writer fell too far behind to take.
    pub(super) journal_dropped: u64,
    /// Events not kept as repeats ([`Rings::absorb_repeat`]).
    pub(super) repeats: u64,
}

impl Rings {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            known: Inner::new(limits.known_events),
            strangers: Inner::new(limits.unknown_events),
            seq: 0,
            limits,
            enrolled: HashSet::new(),
            journal: None,
            journal_dropped: 0,
            repeats: 0,
        }
    }

    /// Files `event` for `mac`: with the known machines when `to_known` (the machine's
    /// earlier events move over with it), else with the strangers.
    /// `fingerprint`: an HTTP event's, for [`Rings::absorb_repeat`].
    pub(super) fn place(
        &mut self,
        mac: MacAddr,
        event: Event,
        given: bool,
        to_known: bool,
        fingerprint: Option<u64>,
    ) {
        if self.known.machines.contains_key(&mac) {
            self.known.push(mac, event, given, fingerprint);
        } else if to_known {
            for earlier in self.strangers.forget(&mac, self.limits.per_machine) {
                self.known.push(mac, earlier, false, None);
            }
            self.known.push(mac, event, given, fingerprint);
        } else {
            self.strangers.push(mac, event, false, fingerprint);
        }
    }

    /// Whether `event` (of `fingerprint`) is `mac`'s newest event again (everything but
    /// the time the same) less than `window_ms` after it: then it is not kept, and only
    /// the machine's last-seen time moves. A machine in the map always has its newest
    /// event in the ring ([`Inner::take_slot`] forgets it with that event), so its entry
    /// answers alone. The fingerprint is keyed per process: a request cannot be made to
    /// pass for another's repeat.
    pub(super) fn absorb_repeat(
        &mut self,
        mac: MacAddr,
        event: &Event,
        fingerprint: u64,
        window_ms: u64,
    ) -> bool {
        let machine = match self.known.machines.get_mut(&mac) {
            Some(m) => m,
            None => match self.strangers.machines.get_mut(&mac) {
                Some(m) => m,
                None => return false,
            },
        };
        let Some(newest) = machine.newest_http else {
            return false;
        };
        let repeat = newest.fingerprint == fingerprint
            && event.at_ms >= newest.at_ms
            && event.at_ms - newest.at_ms < window_ms;
        if repeat {
            machine.progress.advance(event);
        }
        repeat
    }
}

impl Inner {
    pub(super) fn new(cap: usize) -> Self {
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
    fn push(&mut self, mac: MacAddr, event: Event, given: bool, fingerprint: Option<u64>) {
        let seq = event.seq;
        let taken = self.take_slot();
        let index = taken.unwrap_or(self.slots.len());
        let machine = self.machines.entry(mac).or_insert(Machine {
            newest: (u32::MAX, 0),
            ips: Vec::new(),
            last_ip: None,
            progress: Progress::new(event.at_ms),
            newest_http: None,
        });
        machine.progress.advance(&event);
        machine.newest_http = fingerprint.map(|fingerprint| RepeatKey {
            at_ms: event.at_ms,
            fingerprint,
        });
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
    pub(super) fn events(&self, mac: &MacAddr, after: u64, per_mac: usize) -> Vec<Event> {
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
