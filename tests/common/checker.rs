//! The member tests' independent checker. It knows nothing of the members, the
//! database or the test's own bookkeeping: it reads only what the machines saw on the
//! wire, logged as it happened (every ACK with the lease interval it grants, every
//! RELEASE sent, every re-confirmation and its answer), and judges from that alone:
//! - **overlapping bindings**: an address ACKed to one machine while another's
//!   interval on it has neither ended nor been released (must be 0);
//! - **lost addresses**: a machine whose interval still runs asks for its address
//!   again while the database and a member are reachable, and is NAKed, offered
//!   another address, or not answered at all (must be 0).
//!
//! `SB_HISTORY_LOG=<file>` also writes the events as JSON lines, for a longer run's
//! record (`benches/nemesis.sh`).

use std::collections::HashMap;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::time::Instant;

use dhcproto::v4::MessageType;

use super::segment::Seen;

/// One thing a machine saw or did, at `ms` since the history began.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// An ACK: `addr` is `mac`'s from `ms` for `lease_secs`.
    Ack {
        ms: u64,
        mac: [u8; 6],
        addr: Ipv4Addr,
        server: Ipv4Addr,
        lease_secs: u32,
    },
    /// A RELEASE sent: `mac`'s interval on `addr` ends at `ms`.
    Release {
        ms: u64,
        mac: [u8; 6],
        addr: Ipv4Addr,
    },
    /// `mac` asked for `addr` again (INIT-REBOOT or REBIND) and got `answers`.
    Reconfirm {
        ms: u64,
        mac: [u8; 6],
        addr: Ipv4Addr,
        answers: Vec<Seen>,
    },
    /// A fault the test injected or healed (for the schedule; not judged).
    Fault { ms: u64, what: String },
}

/// The events, in the order they happened.
pub(crate) struct History {
    start: Instant,
    pub events: Vec<Event>,
    log: Option<std::fs::File>,
}

impl Default for History {
    fn default() -> Self {
        let log = std::env::var_os("SB_HISTORY_LOG").map(|p| {
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(p)
                .expect("SB_HISTORY_LOG")
        });
        Self {
            start: Instant::now(),
            events: Vec::new(),
            log,
        }
    }
}

fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl History {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn push(&mut self, e: Event) {
        if let Some(f) = self.log.as_mut() {
            let line = match &e {
                Event::Ack {
                    ms,
                    mac,
                    addr,
                    server,
                    lease_secs,
                } => serde_json::json!({"ms": ms, "ack": mac_text(mac), "addr": addr.to_string(),
                    "server": server.to_string(), "lease_secs": lease_secs}),
                Event::Release { ms, mac, addr } => {
                    serde_json::json!({"ms": ms, "release": mac_text(mac), "addr": addr.to_string()})
                }
                Event::Reconfirm {
                    ms,
                    mac,
                    addr,
                    answers,
                } => {
                    serde_json::json!({"ms": ms, "reconfirm": mac_text(mac), "addr": addr.to_string(),
                    "answers": answers.iter().map(|s| format!("{:?} {} from {}", s.kind, s.yiaddr, s.server)).collect::<Vec<_>>()})
                }
                Event::Fault { ms, what } => serde_json::json!({"ms": ms, "fault": what}),
            };
            let _ = writeln!(f, "{line}");
        }
        self.events.push(e);
    }

    /// An ACK seen by `mac`. One without option 51 grants nothing the checker can
    /// bound, so it counts as the longest lease (never hides an overlap).
    pub(crate) fn ack(&mut self, mac: [u8; 6], seen: &Seen) {
        let ms = self.now();
        self.push(Event::Ack {
            ms,
            mac,
            addr: seen.yiaddr,
            server: seen.server,
            lease_secs: seen.lease_secs.unwrap_or(u32::MAX),
        });
    }

    /// A RELEASE `mac` sent for `addr`.
    pub(crate) fn release(&mut self, mac: [u8; 6], addr: Ipv4Addr) {
        let ms = self.now();
        self.push(Event::Release { ms, mac, addr });
    }

    /// `mac` asked for `addr` again and saw `answers`.
    pub(crate) fn reconfirm(&mut self, mac: [u8; 6], addr: Ipv4Addr, answers: &[Seen]) {
        let ms = self.now();
        self.push(Event::Reconfirm {
            ms,
            mac,
            addr,
            answers: answers.to_vec(),
        });
    }

    /// A fault injected or healed; printed with its time, as the run's schedule.
    pub(crate) fn fault(&mut self, what: &str) {
        let ms = self.now();
        eprintln!("fault at {:>7.1} s: {what}", ms as f64 / 1000.0);
        self.push(Event::Fault {
            ms,
            what: what.to_string(),
        });
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub acks: usize,
    pub releases: usize,
    pub reconfirms: usize,
    pub overlaps: Vec<String>,
    pub lost: Vec<String>,
}

/// Judges `events` (in the order they happened).
pub(crate) fn check(events: &[Event]) -> Verdict {
    let mut v = Verdict::default();
    // Address → (holder, end of its interval in ms).
    let mut held: HashMap<Ipv4Addr, ([u8; 6], u64)> = HashMap::new();
    for e in events {
        match e {
            Event::Ack {
                ms,
                mac,
                addr,
                server,
                lease_secs,
            } => {
                v.acks += 1;
                if let Some((other, end)) = held.get(addr) {
                    if other != mac && *end > *ms {
                        v.overlaps.push(format!(
                            "{addr} ACKed to {} by {server} at {ms} ms while {}'s interval runs to {end} ms",
                            mac_text(mac),
                            mac_text(other)
                        ));
                    }
                }
                let end = ms.saturating_add(u64::from(*lease_secs) * 1000);
                held.insert(*addr, (*mac, end));
            }
            Event::Release { ms, mac, addr } => {
                v.releases += 1;
                if let Some((holder, end)) = held.get_mut(addr) {
                    if holder == mac {
                        *end = (*end).min(*ms);
                    }
                }
            }
            Event::Reconfirm {
                ms,
                mac,
                addr,
                answers,
            } => {
                v.reconfirms += 1;
                let runs = matches!(held.get(addr), Some((h, end)) if h == mac && *end > *ms);
                let kept = !answers.is_empty()
                    && answers
                        .iter()
                        .all(|s| s.kind == MessageType::Ack && s.yiaddr == *addr);
                if runs && !kept {
                    v.lost.push(format!(
                        "{} asked for {addr} at {ms} ms inside its interval and got {answers:?}",
                        mac_text(mac)
                    ));
                }
                for s in answers.iter().filter(|s| s.kind == MessageType::Ack) {
                    if let Some((other, end)) = held.get(&s.yiaddr) {
                        if other != mac && *end > *ms {
                            v.overlaps.push(format!(
                                "{} re-ACKed to {} by {} at {ms} ms while {}'s interval runs to {end} ms",
                                s.yiaddr,
                                mac_text(mac),
                                s.server,
                                mac_text(other)
                            ));
                        }
                    }
                    let end = ms.saturating_add(u64::from(s.lease_secs.unwrap_or(u32::MAX)) * 1000);
                    held.insert(s.yiaddr, (*mac, end));
                }
            }
            Event::Fault { .. } => {}
        }
    }
    v
}

impl Verdict {
    /// Panics with every finding unless there are none.
    pub(crate) fn assert_clean(&self, when: &str) {
        assert!(
            self.overlaps.is_empty() && self.lost.is_empty(),
            "{when}: the checker found {} overlapping bindings and {} lost addresses:\n{}",
            self.overlaps.len(),
            self.lost.len(),
            self.overlaps
                .iter()
                .chain(&self.lost)
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
