//! A simulated machine: the RFC 2131 client state machine (§4.4, figure 5), with the
//! retransmission back-off of §4.1, `secs` counted from the start of each acquisition or
//! renewal (§2), the renewal and rebinding timers of §4.4.5 and INIT-REBOOT (§3.2).

use std::net::Ipv4Addr;
use std::rc::Rc;

use dhcproto::v4::{DhcpOption, Message, MessageType};
use shardboot::mac::MacAddr;

use super::{Answer, Event, Lost, Sim, SEC};

/// Where the client is in RFC 2131's figure 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Sending DISCOVERs (INIT and SELECTING: the first OFFER is taken).
    Selecting,
    /// A REQUEST for an OFFER sent; waiting for the ACK.
    Requesting,
    Bound,
    /// Past T1: REQUESTs unicast to the member that granted the lease.
    Renewing,
    /// Past T2: REQUESTs broadcast; any member holding the lease may answer.
    Rebinding,
    /// After a reboot with a live lease: INIT-REBOOT REQUESTs, broadcast.
    Rebooting,
}

/// The lease a client holds, in simulated microseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(crate) ip: Ipv4Addr,
    pub(crate) server: Ipv4Addr,
    pub(crate) expires: u64,
    pub(crate) t1: u64,
    pub(crate) t2: u64,
}

pub(super) struct Client {
    pub(crate) mac: MacAddr,
    pub(crate) state: State,
    pub(crate) xid: u32,
    /// Bumped whenever the client changes course: a timer of an older generation is void.
    pub(crate) generation: u32,
    /// When this acquisition or renewal began (for `secs`).
    pub(crate) began: u64,
    /// When the last REQUEST was sent: the lease runs from there (RFC 2131 §4.4.1).
    /// Retransmissions are seconds apart and answers take milliseconds, so an ACK
    /// answers the last one, and the lease never ends later for the client than for
    /// the server.
    pub(crate) request_sent: u64,
    pub(crate) tries: u32,
    pub(crate) held: Option<Held>,
    /// The OFFER taken: (address, server identifier).
    pub(crate) offer: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The `secs` of the DISCOVER answered, repeated in the REQUEST (§4.4.1).
    pub(crate) selecting_secs: u16,
    /// An address to ask for in DISCOVERs (option 50) after INIT-REBOOT went unanswered.
    pub(crate) wanted: Option<Ipv4Addr>,
    /// When the client was first bound, for the power-on figure.
    pub(crate) first_bound: Option<u64>,
    /// Enrolled after the power-on: not part of its figure.
    pub(crate) late: bool,
    /// When it was first powered on.
    pub(crate) powered_on: u64,
}

/// RFC 2131 §4.1: 4 s before the first retransmission, doubling up to 64 s, each
/// randomised by ±1 s.
fn backoff(tries: u32, jitter: u64) -> u64 {
    let base = 4u64 << tries.saturating_sub(1).min(4);
    base * SEC - SEC + jitter
}

impl Client {
    pub(crate) fn new(n: u32) -> Self {
        let b = n.to_be_bytes();
        Self {
            mac: MacAddr([0x52, 0x54, b[0], b[1], b[2], b[3]]),
            state: State::Selecting,
            xid: 0,
            generation: 0,
            began: 0,
            request_sent: 0,
            tries: 0,
            held: None,
            offer: None,
            selecting_secs: 0,
            wanted: None,
            first_bound: None,
            late: false,
            powered_on: 0,
        }
    }
}

impl Sim {
    fn message(&mut self, c: u32, kind: MessageType, ciaddr: Ipv4Addr) -> Message {
        let cl = &self.clients[c as usize];
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(cl.xid, ciaddr, z, z, z, &cl.mac.0);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        let secs = ((self.now.saturating_sub(cl.began)) / SEC).min(u64::from(u16::MAX));
        m.set_secs(secs as u16);
        m
    }

    fn after(&mut self, c: u32, delay: u64) {
        let cl = &mut self.clients[c as usize];
        // Wake at the lease's end at the latest, to notice it ran out.
        let at = match cl.held {
            Some(h) => (self.now + delay).min(h.expires.max(self.now)),
            None => self.now + delay,
        };
        let generation = cl.generation;
        self.at(at, Event::ClientTimer { c, generation });
    }

    fn change_course(&mut self, c: u32, state: State) {
        let xid = self.rng.next() as u32;
        let cl = &mut self.clients[c as usize];
        cl.state = state;
        cl.generation += 1;
        cl.xid = xid;
        cl.began = self.now;
        cl.tries = 0;
    }

    /// Starts (or restarts) acquisition from INIT at once.
    pub(super) fn init(&mut self, c: u32) {
        self.change_course(c, State::Selecting);
        self.send_discover(c);
    }

    /// The machine powers on or reboots: after `delay`, INIT-REBOOT with a live lease
    /// (RFC 2131 §3.2), else INIT.
    pub(super) fn boot(&mut self, c: u32, delay: u64) {
        let live = self.clients[c as usize]
            .held
            .is_some_and(|h| h.expires > self.now + delay);
        let state = if live {
            State::Rebooting
        } else {
            State::Selecting
        };
        self.change_course(c, state);
        let cl = &mut self.clients[c as usize];
        cl.began = self.now + delay;
        let generation = cl.generation;
        self.at(self.now + delay, Event::ClientTimer { c, generation });
    }

    fn send_discover(&mut self, c: u32) {
        let mut m = self.message(c, MessageType::Discover, Ipv4Addr::UNSPECIFIED);
        if let Some(ip) = self.clients[c as usize].wanted {
            m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        }
        self.clients[c as usize].tries += 1;
        self.broadcast(c, m);
        let tries = self.clients[c as usize].tries;
        let j = self.rng.below(2 * SEC);
        self.after(c, backoff(tries, j));
    }

    fn send_selecting_request(&mut self, c: u32) {
        let (ip, server) = self.clients[c as usize].offer.expect("an offer was taken");
        let mut m = self.message(c, MessageType::Request, Ipv4Addr::UNSPECIFIED);
        m.set_secs(self.clients[c as usize].selecting_secs);
        m.opts_mut().insert(DhcpOption::ServerIdentifier(server));
        m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        let cl = &mut self.clients[c as usize];
        cl.request_sent = self.now;
        cl.tries += 1;
        let tries = cl.tries;
        self.broadcast(c, m);
        let j = self.rng.below(2 * SEC);
        self.after(c, backoff(tries, j));
    }

    /// RENEWING (unicast to the granting server) or REBINDING (broadcast), ciaddr set,
    /// no server identifier (RFC 2131 §4.3.2). Retransmitted after half the time left
    /// to T2 (renewing) or to the lease's end (rebinding), at least 60 s (§4.4.5).
    fn send_renewal(&mut self, c: u32) {
        let h = self.clients[c as usize].held.expect("a lease to renew");
        let m = self.message(c, MessageType::Request, h.ip);
        let cl = &mut self.clients[c as usize];
        cl.request_sent = self.now;
        cl.tries += 1;
        let (until, unicast) = match cl.state {
            State::Renewing => (h.t2, true),
            _ => (h.expires, false),
        };
        if unicast {
            self.unicast(c, h.server, m);
        } else {
            self.broadcast(c, m);
        }
        let wait = (until.saturating_sub(self.now) / 2).max(60 * SEC);
        self.after(c, wait.min(until.saturating_sub(self.now)).max(1));
    }

    /// INIT-REBOOT: option 50, no ciaddr, no server identifier, broadcast (§4.3.2).
    fn send_init_reboot(&mut self, c: u32) {
        let h = self.clients[c as usize]
            .held
            .expect("a lease to reboot with");
        let mut m = self.message(c, MessageType::Request, Ipv4Addr::UNSPECIFIED);
        m.opts_mut().insert(DhcpOption::RequestedIpAddress(h.ip));
        let cl = &mut self.clients[c as usize];
        cl.request_sent = self.now;
        cl.tries += 1;
        let tries = cl.tries;
        self.broadcast(c, m);
        let j = self.rng.below(2 * SEC);
        self.after(c, backoff(tries, j));
    }

    fn broadcast(&mut self, c: u32, m: Message) {
        self.stats.client_packets += 1;
        let m = Rc::new(m);
        for slot in 0..self.members.len() {
            if self.members[slot].running() {
                self.send_to_member(slot, c, m.clone());
            }
        }
    }

    fn unicast(&mut self, c: u32, server: Ipv4Addr, m: Message) {
        self.stats.client_packets += 1;
        // The granting member gone (crashed, left, replaced): nobody has its address.
        if let Some(&slot) = self.by_addr.get(&server) {
            if self.members[slot].running() {
                self.send_to_member(slot, c, Rc::new(m));
            }
        }
    }

    /// The client's address is gone: counted, forgotten, and INIT again.
    fn lose(&mut self, c: u32, why: Lost) {
        self.stats.lost.count(why);
        if self.stats.lost_examples.len() < 10 {
            let cl = &self.clients[c as usize];
            self.stats.lost_examples.push(format!(
                "t={:.3}s machine {} ({}) {:?} {:?} held {:?}",
                self.now as f64 / SEC as f64,
                c,
                cl.mac,
                why,
                cl.state,
                cl.held.map(|h| h.ip)
            ));
        }
        self.drop_lease(c);
        self.init(c);
    }

    fn drop_lease(&mut self, c: u32) {
        if let Some(h) = self.clients[c as usize].held.take() {
            if self.held.get(&h.ip).is_some_and(|(o, _)| *o == c) {
                self.held.remove(&h.ip);
            }
        }
    }

    pub(super) fn client_timer(&mut self, c: u32, generation: u32) {
        let cl = &self.clients[c as usize];
        if cl.generation != generation {
            return;
        }
        if self.p.trace == Some(c) {
            eprintln!(
                "{:.6} machine {c} timer in {:?}, tries {}, held {:?}",
                self.now as f64 / SEC as f64,
                cl.state,
                cl.tries,
                cl.held
            );
        }
        if cl.held.is_some_and(|h| self.now >= h.expires) {
            return self.lose(c, Lost::Expired);
        }
        match cl.state {
            State::Selecting => self.send_discover(c),
            // §4.4.1: no answer after the retransmissions: back to INIT.
            State::Requesting if cl.tries >= 4 => self.init(c),
            State::Requesting => self.send_selecting_request(c),
            State::Bound => {
                self.change_course(c, State::Renewing);
                self.send_renewal(c);
            }
            State::Renewing if cl.held.is_some_and(|h| self.now >= h.t2) => {
                self.change_course(c, State::Rebinding);
                self.send_renewal(c);
            }
            State::Renewing | State::Rebinding => self.send_renewal(c),
            State::Rebooting if cl.tries >= 4 => {
                // Nobody answered INIT-REBOOT: DISCOVER, asking for the same address.
                self.stats.reboots_unanswered += 1;
                let ip = cl.held.map(|h| h.ip);
                self.clients[c as usize].wanted = ip;
                self.init(c);
            }
            State::Rebooting => self.send_init_reboot(c),
        }
    }

    pub(super) fn client_answer(&mut self, c: u32, a: Answer) {
        let cl = &self.clients[c as usize];
        if self.p.trace == Some(c) {
            eprintln!(
                "{:.6} machine {c} in {:?} gets {:?} {} from {} lease {} t1 {} t2 {}{}",
                self.now as f64 / SEC as f64,
                cl.state,
                a.kind,
                a.ip,
                a.server,
                a.lease,
                a.t1,
                a.t2,
                if a.xid == cl.xid { "" } else { " (stale xid)" }
            );
        }
        if a.xid != cl.xid {
            return; // an answer to an earlier transaction, or a second one
        }
        match (cl.state, a.kind) {
            (State::Selecting, MessageType::Offer) => {
                let secs = self
                    .message(c, MessageType::Discover, Ipv4Addr::UNSPECIFIED)
                    .secs();
                let cl = &mut self.clients[c as usize];
                cl.offer = Some((a.ip, a.server));
                cl.selecting_secs = secs;
                cl.state = State::Requesting;
                cl.generation += 1;
                cl.tries = 0;
                self.send_selecting_request(c);
            }
            (State::Requesting, MessageType::Ack) => {
                self.stats.acks.fresh += 1;
                self.bind(c, a);
            }
            // §4.4.1: a NAK to a REQUEST for an OFFER: INIT again.
            (State::Requesting, MessageType::Nak) => {
                self.stats.naks_selecting += 1;
                self.init(c);
            }
            (State::Renewing | State::Rebinding | State::Rebooting, MessageType::Ack) => {
                match cl.state {
                    State::Renewing => self.stats.acks.renew += 1,
                    State::Rebinding => self.stats.acks.rebind += 1,
                    _ => self.stats.acks.reboot += 1,
                }
                self.bind(c, a);
            }
            (State::Renewing, MessageType::Nak) => self.lose(c, Lost::NakRenew),
            (State::Rebinding, MessageType::Nak) => self.lose(c, Lost::NakRebind),
            (State::Rebooting, MessageType::Nak) => self.lose(c, Lost::NakReboot),
            _ => {}
        }
    }

    /// An ACK: the global check that no live lease of another machine holds the
    /// address, then BOUND with the timers the ACK gave (§4.4.5: T1, T2 default to
    /// 0.5 and 0.875 of the lease).
    fn bind(&mut self, c: u32, a: Answer) {
        let sent = self.clients[c as usize].request_sent;
        // The server counts whole seconds; from the REQUEST's second the lease is never
        // longer in the client's eyes than in the server's.
        let from = sent / SEC * SEC;
        let expires = from + u64::from(a.lease) * SEC;
        if let Some(&(other, until)) = self.held.get(&a.ip) {
            let still = self.clients[other as usize]
                .held
                .is_some_and(|h| h.ip == a.ip && h.expires > self.now);
            if other != c && until > self.now && still {
                self.stats.duplicates += 1;
                if self.stats.duplicate_examples.len() < 10 {
                    self.stats.duplicate_examples.push(format!(
                        "t={:.3}s {} ACKed to machine {c} by {} while machine {other} holds it until {:.3}s",
                        self.now as f64 / SEC as f64,
                        a.ip,
                        a.server,
                        until as f64 / SEC as f64
                    ));
                }
            }
        }
        let previous = self.clients[c as usize].held;
        if previous.is_some_and(|p| p.ip != a.ip && p.expires > self.now) {
            // A machine that had a live lease came back with another address.
            self.stats.lost.count(Lost::Moved);
            self.drop_lease(c);
        }
        self.held.insert(a.ip, (c, expires));
        let t1 = from + u64::from(a.t1) * SEC;
        let t2 = from + u64::from(a.t2) * SEC;
        let now = self.now;
        let cl = &mut self.clients[c as usize];
        cl.held = Some(Held {
            ip: a.ip,
            server: a.server,
            expires,
            t1,
            t2,
        });
        cl.wanted = None;
        cl.first_bound.get_or_insert(now);
        cl.state = State::Bound;
        cl.generation += 1;
        let generation = cl.generation;
        self.at(t1.max(now + 1), Event::ClientTimer { c, generation });
    }
}
