//! A deterministic simulation of a whole site (issue 19): the pure DHCP engines of
//! several members on one simulated segment, thousands of simulated machines booting,
//! renewing and rebooting over simulated days, and members joining, crashing, being
//! replaced and leaving. One process, one thread, a simulated clock (µs), a seeded
//! xorshift generator and a priority queue of events: the same parameters give the same
//! run, to the packet.
//!
//! What each member does is what the shell does with its engine (`src/dhcp/shell/`):
//! - a decision's reply without lease effects (an OFFER, a NAK) is sent at once; one
//!   with effects (an ACK) is sent only after every peer of the list in force answered
//!   the replication batch, and never when one refused (the lease is withdrawn with
//!   `Engine::withdraw`, and the withdrawal replicated);
//! - a peer that does not answer within the replication timeout (500 ms) falls behind:
//!   its changes queue and are sent with `catch_up` every 0.5 s once it answers again;
//!   `set_replicated` follows whether every peer is in step;
//! - a peer new to the list (and every peer, for a member just started) gets a full
//!   resync of the live leases;
//! - a member starting (after a crash, on its old store or an empty one; a replacement;
//!   a join) first applies every running peer's `live_leases` with `catch_up`
//!   (`start.rs`), then serves;
//! - responsibility is `responsible(None, live, mac)` and `decide(…, takeover_secs)`
//!   over the list minus the members health probes found dead, which each member
//!   learns `detect` after a crash; a member list change reaches every member within
//!   `list_spread`.
//!
//! Checks: a map address → (machine, end) of every ACK a machine actually received.
//! An ACK for an address another machine holds live is a duplicate; a NAK to a
//! renewal, rebinding or INIT-REBOOT, a lease reaching its end unrenewed, or a machine
//! with a live lease coming back with another address is a lost address.
//!
//! Simplified, on purpose:
//! - no owner resolver: every machine's responsible member is its RFC 3074 bucket (as
//!   with `owner.source = "hash"`); every machine is "known" (Ironic's nodes), so the
//!   limits on unknown machines never apply;
//! - no conflict probes (nothing on the simulated segment would answer them);
//! - a decision's effects count as durable when it is made (no fsync delay, no lost
//!   write on a crash); replication batches are per decision, not per group commit;
//! - every member sees a crash at the same moment (`detect`) and a member's return
//!   `detect / 2` after it; a peer that is down when a batch is sent falls behind at
//!   once (the batch's reply waits the timeout) instead of each concurrent batch timing
//!   out on its own;
//! - one subnet, one range, no relays; clients take the first OFFER; PXE's second DHCP
//!   round (iPXE) is not modelled, a boot is one acquisition.

// The test and the bench use different parts of the simulation.
#![allow(dead_code)]

mod client;
mod member;
mod report;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::rc::Rc;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use shardboot::dhcp::engine::{Decision, Outcome, PacketContext, Responsibility};
use shardboot::dhcp::responsibility::{decide, responsible, Why};
use shardboot::owner::MemberList;
use shardboot::store::{Lease, LeaseEffect, Verdict};

use client::Client;
pub(crate) use member::ConfigError;
use member::{config_for, Member};
pub(crate) use report::{Churn, Lost, LostCounts, Report};

/// One simulated second, in the clock's unit (µs).
pub(crate) const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;
/// Unix seconds at simulated time 0 (the engine counts Unix seconds).
const EPOCH: u64 = 1_800_000_000;

/// What to simulate.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) seed: u64,
    /// Members at the start (Ironic conductors).
    pub(crate) members: usize,
    pub(crate) machines: u32,
    /// Simulated time after the power-on.
    pub(crate) days: f64,
    pub(crate) lease_secs: u32,
    pub(crate) takeover_secs: u16,
    /// Every machine powers on within this long.
    pub(crate) power_on_spread: u64,
    /// A churn event (crash and restart, join, crash on a lost store, leave,
    /// replacement, in turn) every this long, the first one after the first.
    pub(crate) churn_every: u64,
    /// Machines that are enrolled later (powered on for the first time at a random
    /// moment of the run): fresh addresses handed out while members churn.
    pub(crate) enrolled_later: f64,
    /// Reboots per machine per simulated day.
    pub(crate) reboots_per_day: f64,
    /// Probability that one packet (either direction) is lost.
    pub(crate) loss: f64,
    /// Lease replication between members; off, each member knows only its own leases
    /// (the negative test: duplicates and lost addresses must appear).
    pub(crate) replication: bool,
    /// How far apart members see a change of Ironic's list.
    pub(crate) list_spread: u64,
    /// How long after a crash the others' health probes count the member dead.
    pub(crate) detect: u64,
    /// Print every packet of this machine and every answer it gets (debugging a
    /// reported loss or duplicate).
    pub(crate) trace: Option<u32>,
}

impl Params {
    /// CERN's size: 9 conductors, 10,000 machines.
    pub(crate) fn site(days: f64) -> Self {
        Self {
            seed: 0x5eed_0019,
            members: 9,
            machines: 10_000,
            days,
            lease_secs: 3600,
            takeover_secs: 5,
            power_on_spread: 5 * SEC,
            churn_every: 3 * 3600 * SEC,
            enrolled_later: 0.05,
            reboots_per_day: 0.5,
            loss: 0.01,
            replication: true,
            list_spread: 2 * SEC,
            detect: 600 * MS,
            trace: None,
        }
    }
}

/// An answer as the client reads it.
#[derive(Debug, Clone, Copy)]
struct Answer {
    kind: MessageType,
    xid: u32,
    ip: Ipv4Addr,
    server: Ipv4Addr,
    lease: u32,
    t1: u32,
    t2: u32,
}

impl Answer {
    fn of(m: &Message) -> Option<Self> {
        let o = m.opts();
        let u32_of = |code| match o.get(code) {
            Some(DhcpOption::AddressLeaseTime(v))
            | Some(DhcpOption::Renewal(v))
            | Some(DhcpOption::Rebinding(v)) => Some(*v),
            _ => None,
        };
        let server = match o.get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(ip)) => *ip,
            _ => return None,
        };
        let lease = u32_of(OptionCode::AddressLeaseTime).unwrap_or(0);
        Some(Self {
            kind: o.msg_type()?,
            xid: m.xid(),
            ip: m.yiaddr(),
            server,
            lease,
            t1: u32_of(OptionCode::Renewal).unwrap_or(lease / 2),
            t2: u32_of(OptionCode::Rebinding).unwrap_or(lease / 8 * 7),
        })
    }
}

#[derive(Debug)]
enum Event {
    ClientTimer {
        c: u32,
        generation: u32,
    },
    Reboot {
        c: u32,
    },
    ToMember {
        slot: usize,
        incarnation: u32,
        c: u32,
        m: Rc<Message>,
    },
    ToClient {
        c: u32,
        a: Answer,
    },
    /// A replication batch arrives at a peer.
    PeerBatch {
        commit: u64,
        peer: usize,
        incarnation: u32,
    },
    /// Every peer answered (or the timeout passed): the reply goes out or not.
    CommitDone {
        commit: u64,
    },
    CatchUp,
    Tick,
    Churn {
        n: u32,
    },
    Crash {
        slot: usize,
    },
    /// A replacement member starts on an empty store and Ironic lists it.
    Replace {
        slot: usize,
    },
    Start {
        slot: usize,
        keep: bool,
    },
    /// Ironic's list changes (a member added or removed) and each member reads it.
    List {
        names: Rc<Vec<String>>,
    },
    SeeList {
        slot: usize,
        incarnation: u32,
        list: Rc<Vec<String>>,
    },
    /// The members' health probes find `name` dead or alive again.
    Health {
        name: String,
        dead: bool,
    },
    Stop,
}

/// The queue holds only (time, sequence, slot): events wait in a slab, so the heap
/// moves 24 bytes per step, not a whole event.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slab: Vec<Option<Event>>,
    free: Vec<u32>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, at: u64, event: Event) {
        let slot = match self.free.pop() {
            Some(k) => {
                self.slab[k as usize] = Some(event);
                k
            }
            None => {
                self.slab.push(Some(event));
                (self.slab.len() - 1) as u32
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, slot)));
    }

    fn pop(&mut self) -> Option<(u64, Event)> {
        let Reverse((at, _, slot)) = self.heap.pop()?;
        self.free.push(slot);
        Some((at, self.slab[slot as usize].take()?))
    }
}

/// Spreads a seed over the whole word (xorshift's state must not be 0, and seeds 2 and
/// 3 must not give the same run).
fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// xorshift64* (Vigna): small, fast, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    /// An exponentially distributed wait with mean `mean`.
    fn exp(&mut self, mean: f64) -> u64 {
        let u = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        (-u.ln() * mean) as u64
    }
}

/// A lease change waiting for the peers' answers before its reply goes out.
struct Commit {
    origin: usize,
    incarnation: u32,
    effects: Vec<LeaseEffect>,
    reply: Option<(u32, Answer)>,
    refused: Vec<(Lease, Lease)>,
    /// The reply may go at this time (the last peer's answer, or the timeout).
    due: u64,
}

#[derive(Debug, Default)]
struct Stats {
    client_packets: u64,
    decisions: u64,
    acks: report::Acks,
    /// ACK decisions of the members (a broadcast REQUEST may be ACKed by several).
    member_acks: u64,
    takeover_offers: u64,
    naks_selecting: u64,
    refused: u64,
    late_refusals: u64,
    fell_behind: u64,
    reboots: u64,
    reboots_unanswered: u64,
    duplicates: u64,
    duplicate_examples: Vec<String>,
    lost: LostCounts,
    lost_examples: Vec<String>,
}

/// The simulation's state.
pub(crate) struct Sim {
    p: Params,
    now: u64,
    rng: Rng,
    queue: Queue,
    clients: Vec<Client>,
    members: Vec<Member>,
    by_name: HashMap<String, usize>,
    by_addr: HashMap<Ipv4Addr, usize>,
    range: (Ipv4Addr, Ipv4Addr),
    /// Ironic's list of live conductors.
    ironic: Vec<String>,
    /// Members the health probes count dead.
    dead: BTreeSet<String>,
    commits: HashMap<u64, Commit>,
    next_commit: u64,
    /// Address → (machine, end of its lease as the machine counts it).
    held: HashMap<Ipv4Addr, (u32, u64)>,
    stats: Stats,
    churn: Vec<Churn>,
    /// What each slot's store held when its process was killed.
    kept: Vec<Vec<Lease>>,
    end: u64,
}

impl Sim {
    /// A site of `p.members` members and `p.machines` machines, all off.
    pub(crate) fn new(p: Params) -> Result<Self, ConfigError> {
        // About 1.6 addresses per machine: room for a member's share to absorb a dead
        // member's machines, in whole 256-block ranges.
        let len = (p.machines * 8 / 5).next_power_of_two().max(1024);
        let first = u32::from(Ipv4Addr::new(10, 0, 64, 0));
        let range = (Ipv4Addr::from(first), Ipv4Addr::from(first + len - 1));
        let mut sim = Self {
            rng: Rng(splitmix(p.seed)),
            now: 0,
            queue: Queue::default(),
            clients: (0..p.machines).map(Client::new).collect(),
            members: Vec::new(),
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            range,
            ironic: Vec::new(),
            dead: BTreeSet::new(),
            commits: HashMap::new(),
            next_commit: 0,
            held: HashMap::new(),
            stats: Stats::default(),
            churn: Vec::new(),
            kept: Vec::new(),
            end: 0,
            p,
        };
        for k in 0..sim.p.members {
            let slot = sim.add_slot(format!("conductor-{k:02}"));
            sim.ironic.push(sim.members[slot].name.clone());
        }
        sim.ironic.sort();
        for slot in 0..sim.members.len() {
            sim.start(slot, false)?;
        }
        Ok(sim)
    }

    fn add_slot(&mut self, name: String) -> usize {
        let slot = self.members.len();
        let addr = Ipv4Addr::new(10, 0, 1, (slot + 1) as u8);
        self.by_name.insert(name.clone(), slot);
        self.by_addr.insert(addr, slot);
        self.members.push(Member::new(name, addr));
        self.kept.push(Vec::new());
        slot
    }

    fn at(&mut self, at: u64, event: Event) {
        self.queue.push(at, event);
    }

    fn secs(&self) -> u64 {
        EPOCH + self.now / SEC
    }

    /// One hop on the segment: 0.1–2 ms.
    fn hop(&mut self) -> u64 {
        100 + self.rng.below(1900)
    }

    /// Runs the power-on and the days after it; returns the figures.
    pub(crate) fn run(mut self) -> Result<Report, ConfigError> {
        self.end = self.p.power_on_spread + (self.p.days * 86_400.0 * SEC as f64) as u64;
        for c in 0..self.p.machines {
            let at = if self.rng.chance(self.p.enrolled_later) {
                self.clients[c as usize].late = true;
                self.p.power_on_spread + self.rng.below(self.end - self.p.power_on_spread)
            } else {
                self.rng.below(self.p.power_on_spread)
            };
            self.boot_at(c, at);
            self.schedule_reboot(c);
        }
        self.at(500 * MS, Event::CatchUp);
        self.at(10 * SEC, Event::Tick);
        self.at(self.p.churn_every, Event::Churn { n: 0 });
        self.at(self.end, Event::Stop);
        while let Some((at, event)) = self.queue.pop() {
            self.now = at;
            match event {
                Event::Stop => break,
                e => self.handle(e)?,
            }
        }
        Ok(self.report())
    }

    fn boot_at(&mut self, c: u32, at: u64) {
        let now = self.now;
        self.now = at;
        self.clients[c as usize].powered_on = at;
        self.boot(c, 0);
        self.now = now;
    }

    fn schedule_reboot(&mut self, c: u32) {
        if self.p.reboots_per_day > 0.0 {
            let wait = self.rng.exp(86_400.0 * SEC as f64 / self.p.reboots_per_day);
            self.at(
                self.now.max(self.p.power_on_spread) + wait,
                Event::Reboot { c },
            );
        }
    }

    fn handle(&mut self, e: Event) -> Result<(), ConfigError> {
        match e {
            Event::ClientTimer { c, generation } => self.client_timer(c, generation),
            Event::Reboot { c } => {
                self.stats.reboots += 1;
                // POST and the NIC's firmware take a while before the first DHCP packet.
                let delay = 20 * SEC + self.rng.below(40 * SEC);
                self.boot(c, delay);
                self.schedule_reboot(c);
            }
            Event::ToMember {
                slot,
                incarnation,
                c,
                m,
            } => self.member_receives(slot, incarnation, c, &m),
            Event::ToClient { c, a } => self.client_answer(c, a),
            Event::PeerBatch {
                commit,
                peer,
                incarnation,
            } => self.peer_batch(commit, peer, incarnation),
            Event::CommitDone { commit } => self.commit_done(commit),
            Event::CatchUp => {
                self.catch_up();
                self.at(self.now + 500 * MS, Event::CatchUp);
            }
            Event::Tick => {
                let now = self.secs();
                for m in &mut self.members {
                    if let Some(e) = m.engine.as_mut() {
                        e.handle_tick(now);
                    }
                }
                self.at(self.now + 10 * SEC, Event::Tick);
            }
            Event::Churn { n } => {
                self.churn_event(n)?;
                self.at(self.now + self.p.churn_every, Event::Churn { n: n + 1 });
            }
            Event::Crash { slot } => self.crash(slot),
            Event::Replace { slot } => {
                let name = self.members[slot].name.clone();
                self.ironic_list(self.list_with(Some(&name), None));
                self.start(slot, false)?;
            }
            Event::Start { slot, keep } => self.start(slot, keep)?,
            Event::List { names } => self.ironic_list(names),
            Event::SeeList {
                slot,
                incarnation,
                list,
            } => self.see_list(slot, incarnation, &list),
            Event::Health { name, dead } => {
                if dead {
                    self.dead.insert(name);
                } else {
                    self.dead.remove(&name);
                }
                for slot in 0..self.members.len() {
                    self.refresh_live(slot);
                }
            }
            Event::Stop => {}
        }
        Ok(())
    }

    fn send_to_member(&mut self, slot: usize, c: u32, m: Rc<Message>) {
        if self.rng.chance(self.p.loss) {
            return;
        }
        let at = self.now + self.hop();
        let incarnation = self.members[slot].incarnation;
        self.at(
            at,
            Event::ToMember {
                slot,
                incarnation,
                c,
                m,
            },
        );
    }

    fn send_to_client(&mut self, c: u32, a: Answer) {
        if self.rng.chance(self.p.loss) {
            return;
        }
        let at = self.now + self.hop();
        self.at(at, Event::ToClient { c, a });
    }

    fn refresh_live(&mut self, slot: usize) {
        let m = &mut self.members[slot];
        m.live = m
            .list
            .names()
            .iter()
            .filter(|n| !self.dead.contains(*n))
            .cloned()
            .collect();
    }

    fn in_step(&self, slot: usize) -> bool {
        self.p.replication && self.members[slot].in_step(|n| self.by_name.get(n).copied())
    }

    fn member_receives(&mut self, slot: usize, incarnation: u32, c: u32, msg: &Message) {
        let in_step = self.in_step(slot);
        let now = self.secs();
        let takeover = self.p.takeover_secs;
        let mac = self.clients[c as usize].mac;
        let m = &mut self.members[slot];
        if m.incarnation != incarnation {
            return;
        }
        let Some(engine) = m.engine.as_mut() else {
            return;
        };
        let asks = matches!(
            msg.opts().msg_type(),
            Some(MessageType::Discover | MessageType::Request)
        );
        let (responsibility, why) = if asks {
            decide(
                &m.name,
                responsible(None, &m.live, &mac),
                msg.secs(),
                takeover,
            )
        } else {
            (Responsibility::Mine, Why::Responsible)
        };
        let ctx = PacketContext {
            interface: &m.iface,
            responsibility,
            policy: None,
            known: true,
            dnsmasq: Default::default(),
            now,
        };
        engine.set_replicated(in_step);
        let Decision {
            reply,
            effects,
            outcome,
        } = engine.handle_message(msg, &ctx);
        self.stats.decisions += 1;
        if self.p.trace == Some(c) {
            eprintln!(
                "{:.6} {} got {:?} secs {} ({:?}): {:?}, {} effects",
                self.now as f64 / SEC as f64,
                self.members[slot].name,
                msg.opts().msg_type(),
                msg.secs(),
                responsibility,
                outcome,
                effects.len()
            );
        }
        if matches!(outcome, Outcome::Ack(_)) {
            self.stats.member_acks += 1;
        }
        if why == Why::Takeover && matches!(outcome, Outcome::Offer(_)) {
            self.stats.takeover_offers += 1;
        }
        let reply = reply.and_then(|r| Answer::of(&r.message)).map(|a| (c, a));
        if effects.is_empty() {
            if let Some((c, a)) = reply {
                self.send_to_client(c, a);
            }
        } else {
            self.commit(slot, effects, reply);
        }
    }

    /// Hands `effects` to every peer of `origin`'s list (the shell's replication hook);
    /// the reply waits for their answers.
    fn commit(&mut self, origin: usize, effects: Vec<LeaseEffect>, reply: Option<(u32, Answer)>) {
        let id = self.next_commit;
        self.next_commit += 1;
        let mut due = self.now;
        if self.p.replication {
            let peers: Vec<usize> = self.members[origin]
                .list
                .names()
                .iter()
                .filter(|n| **n != self.members[origin].name)
                .filter_map(|n| self.by_name.get(n).copied())
                .collect();
            for peer in peers {
                if let Some(backlog) = self.members[origin].behind.get_mut(&peer) {
                    backlog.extend(effects.iter().cloned());
                    continue;
                }
                if !self.members[peer].running() {
                    // The batch times out: the peer falls behind, the reply waits.
                    self.stats.fell_behind += 1;
                    self.members[origin].behind.insert(peer, effects.clone());
                    due = due.max(self.now + 500 * MS);
                    continue;
                }
                let (there, back) = (self.hop(), self.hop());
                let incarnation = self.members[peer].incarnation;
                self.at(
                    self.now + there,
                    Event::PeerBatch {
                        commit: id,
                        peer,
                        incarnation,
                    },
                );
                due = due.max(self.now + there + back);
            }
        }
        let incarnation = self.members[origin].incarnation;
        self.commits.insert(
            id,
            Commit {
                origin,
                incarnation,
                effects,
                reply,
                refused: Vec::new(),
                due,
            },
        );
        self.at(due, Event::CommitDone { commit: id });
    }

    fn peer_batch(&mut self, commit: u64, peer: usize, incarnation: u32) {
        let now = self.secs();
        let Some(k) = self.commits.get_mut(&commit) else {
            return;
        };
        let m = &mut self.members[peer];
        match m.engine.as_mut().filter(|_| m.incarnation == incarnation) {
            Some(engine) => {
                for e in &k.effects {
                    if let (Verdict::Refused(holder), LeaseEffect::Put(ours)) =
                        (engine.apply_peer_change(e, now, false).0, e)
                    {
                        k.refused.push((ours.clone(), holder));
                    }
                }
            }
            None => {
                // It died with the batch on the way: no answer, the origin waits out
                // the timeout and the peer falls behind.
                k.due = k.due.max(self.now + 500 * MS);
                let effects = k.effects.clone();
                let o = &mut self.members[k.origin];
                if o.incarnation == k.incarnation {
                    self.stats.fell_behind += 1;
                    o.behind.entry(peer).or_default().extend(effects);
                }
            }
        }
    }

    fn commit_done(&mut self, id: u64) {
        let Some(k) = self.commits.get(&id) else {
            return;
        };
        if k.due > self.now {
            let due = k.due;
            self.at(due, Event::CommitDone { commit: id });
            return;
        }
        let k = self.commits.remove(&id).expect("looked up above");
        let now = self.secs();
        let o = &mut self.members[k.origin];
        if o.incarnation != k.incarnation {
            return; // the member died before it could answer
        }
        let Some(engine) = o.engine.as_mut() else {
            return;
        };
        if k.refused.is_empty() {
            if let Some((c, a)) = k.reply {
                self.send_to_client(c, a);
            }
            return;
        }
        self.stats.refused += k.refused.len() as u64;
        let withdrawn: Vec<LeaseEffect> = k
            .refused
            .iter()
            .filter_map(|(ours, holder)| engine.withdraw(ours, holder, now))
            .collect();
        if !withdrawn.is_empty() {
            self.commit(k.origin, withdrawn, None);
        }
    }

    /// Every 0.5 s each member sends what its peers that are behind lack, and a full
    /// resync to peers new to it, with `catch_up` (`Replicator::catch_up`).
    fn catch_up(&mut self) {
        if !self.p.replication {
            return;
        }
        let now = self.secs();
        for slot in 0..self.members.len() {
            if !self.members[slot].running() {
                continue;
            }
            let behind: Vec<usize> = self.members[slot].behind.keys().copied().collect();
            for peer in behind {
                if !self.members[peer].running() {
                    continue;
                }
                let changes = self.members[slot].behind.remove(&peer).unwrap_or_default();
                self.apply_catch_up(peer, &changes, now);
            }
            let resync: Vec<usize> = self.members[slot].resync.iter().copied().collect();
            for peer in resync {
                if !self.members[peer].running() {
                    continue;
                }
                self.members[slot].resync.remove(&peer);
                let mut leases = self.members[slot]
                    .engine
                    .as_ref()
                    .map(|e| e.live_leases(now))
                    .unwrap_or_default();
                leases.sort_by_key(|l| l.ip);
                let changes: Vec<LeaseEffect> = leases.into_iter().map(LeaseEffect::Put).collect();
                self.apply_catch_up(peer, &changes, now);
            }
        }
    }

    fn apply_catch_up(&mut self, peer: usize, changes: &[LeaseEffect], now: u64) {
        let Some(engine) = self.members[peer].engine.as_mut() else {
            return;
        };
        for c in changes {
            if let (Verdict::Refused(_), _) = engine.apply_peer_change(c, now, true) {
                // Answered long ago; nothing can take that ACK back (counted as the
                // shell counts `conflicts`).
                self.stats.late_refusals += 1;
            }
        }
    }

    fn config_of(&self, slot: usize) -> Result<shardboot::config::Config, ConfigError> {
        let me = &self.members[slot].name;
        let mut names: Vec<(String, Ipv4Addr)> = self
            .ironic
            .iter()
            .map(|n| (n.clone(), self.members[self.by_name[n]].iface.addr))
            .collect();
        if !self.ironic.contains(me) {
            names.push((me.clone(), self.members[slot].iface.addr));
        }
        config_for(
            me,
            &names,
            self.range,
            self.p.lease_secs,
            self.p.takeover_secs,
        )
    }

    /// A member's process starts: on its old store (`keep`) or an empty one, with
    /// Ironic's list, every running peer's live leases taken first (`start.rs`).
    fn start(&mut self, slot: usize, keep: bool) -> Result<(), ConfigError> {
        let config = self.config_of(slot)?;
        let now = self.secs();
        let stored = if keep {
            std::mem::take(&mut self.kept[slot])
        } else {
            Vec::new()
        };
        let list = MemberList::new(self.ironic.iter().cloned());
        self.members[slot].start(&config, stored, list, now);
        if self.p.replication {
            let mut snapshot: Vec<Lease> = Vec::new();
            for peer in 0..self.members.len() {
                if peer != slot {
                    if let Some(e) = self.members[peer].engine.as_ref() {
                        snapshot.extend(e.live_leases(now));
                    }
                }
            }
            snapshot.sort_by_key(|l| (l.ip, l.starts));
            let engine = self.members[slot].engine.as_mut().expect("just started");
            for l in snapshot {
                engine.apply_peer_change(&LeaseEffect::Put(l), now, true);
            }
            // Every peer is new to a process just started: each gets a full resync.
            let peers: Vec<usize> = self
                .ironic
                .iter()
                .filter_map(|n| self.by_name.get(n).copied())
                .filter(|&p| p != slot)
                .collect();
            self.members[slot].resync.extend(peers);
        }
        self.refresh_live(slot);
        if self.dead.contains(&self.members[slot].name) {
            let name = self.members[slot].name.clone();
            let at = self.now + self.p.detect / 2;
            self.at(at, Event::Health { name, dead: false });
        }
        Ok(())
    }

    fn crash(&mut self, slot: usize) {
        if self.p.trace.is_some() {
            eprintln!(
                "{:.6} {} killed",
                self.now as f64 / SEC as f64,
                self.members[slot].name
            );
        }
        self.kept[slot] = self.members[slot].kill();
        let name = self.members[slot].name.clone();
        let at = self.now + self.p.detect;
        self.at(at, Event::Health { name, dead: true });
    }

    fn ironic_list(&mut self, names: Rc<Vec<String>>) {
        let (before, after) = (self.ironic.clone(), names.as_ref().clone());
        self.churn
            .last_mut()
            .expect("a list changes within a churn event")
            .list_change(self.range, &before, &after);
        self.ironic = after;
        for slot in 0..self.members.len() {
            if self.members[slot].running() {
                let at = self.now + self.rng.below(self.p.list_spread.max(1));
                let incarnation = self.members[slot].incarnation;
                self.at(
                    at,
                    Event::SeeList {
                        slot,
                        incarnation,
                        list: names.clone(),
                    },
                );
            }
        }
    }

    /// A member reads the new list (`control::apply`, `Control::Members`).
    fn see_list(&mut self, slot: usize, incarnation: u32, names: &[String]) {
        if self.members[slot].incarnation != incarnation || !self.members[slot].running() {
            return;
        }
        let list = MemberList::new(names.iter().cloned());
        let old: Vec<usize> = self.members[slot]
            .list
            .names()
            .iter()
            .filter_map(|n| self.by_name.get(n).copied())
            .collect();
        let new: Vec<usize> = list
            .names()
            .iter()
            .filter_map(|n| self.by_name.get(n).copied())
            .filter(|&p| p != slot)
            .collect();
        let m = &mut self.members[slot];
        m.list = list.clone();
        m.behind.retain(|p, _| new.contains(p));
        m.resync.retain(|p| new.contains(p));
        if self.p.replication {
            m.resync.extend(new.iter().filter(|p| !old.contains(p)));
        }
        let in_step = self.in_step(slot);
        let now = self.secs();
        let engine = self.members[slot].engine.as_mut().expect("running");
        engine.set_replicated(in_step);
        engine.change_members(list, now);
        self.refresh_live(slot);
    }

    fn list_with(&self, add: Option<&str>, remove: Option<&str>) -> Rc<Vec<String>> {
        let mut l: Vec<String> = self
            .ironic
            .iter()
            .filter(|n| Some(n.as_str()) != remove)
            .cloned()
            .collect();
        l.extend(add.map(str::to_string));
        l.sort();
        l.dedup();
        Rc::new(l)
    }

    /// A running member of Ironic's list, chosen by the seeded generator.
    fn pick(&mut self) -> usize {
        let running: Vec<usize> = self
            .ironic
            .iter()
            .map(|n| self.by_name[n])
            .filter(|&s| self.members[s].running())
            .collect();
        running[self.rng.below(running.len() as u64) as usize]
    }

    /// Issue 14's churn, in turn: SIGKILL and restart on the same store before Ironic
    /// notices; a join; SIGKILL on a lost store (Ironic drops the conductor after its
    /// heartbeat timeout, the pod comes back empty and registers again); a graceful
    /// leave; a replacement (a new name on an empty store after the dead member left
    /// the list).
    fn churn_event(&mut self, n: u32) -> Result<(), ConfigError> {
        let t = self.now;
        let kinds = [
            "crash-restart",
            "join",
            "crash-lost-store",
            "leave",
            "replace",
        ];
        let kind = kinds[n as usize % kinds.len()];
        self.churn.push(Churn::new(kind, t));
        if self.p.trace.is_some() {
            eprintln!("{:.6} churn: {kind}", t as f64 / SEC as f64);
        }
        match kind {
            "crash-restart" => {
                let slot = self.pick();
                self.crash(slot);
                self.at(t + 20 * SEC, Event::Start { slot, keep: true });
            }
            "join" => {
                let slot = self.add_slot(format!("joined-{n:02}"));
                let name = self.members[slot].name.clone();
                self.ironic_list(self.list_with(Some(&name), None));
                self.start(slot, false)?;
            }
            "crash-lost-store" => {
                let slot = self.pick();
                let name = self.members[slot].name.clone();
                self.crash(slot);
                self.kept[slot].clear();
                let gone = self.list_with(None, Some(&name));
                let back = self.list_with(Some(&name), None);
                self.at(t + 60 * SEC, Event::List { names: gone });
                // Registers again as it starts (the list without it has been in force).
                self.at(t + 90 * SEC, Event::List { names: back });
                self.at(t + 90 * SEC, Event::Start { slot, keep: false });
            }
            "leave" => {
                // The member that joined last leaves, if any: the site stays near its size.
                let slot = self
                    .ironic
                    .iter()
                    .map(|n| self.by_name[n])
                    .filter(|&s| self.members[s].running())
                    .max()
                    .expect("members run");
                let name = self.members[slot].name.clone();
                self.ironic_list(self.list_with(None, Some(&name)));
                self.members[slot].kill();
            }
            _ => {
                let slot = self.pick();
                let name = self.members[slot].name.clone();
                self.crash(slot);
                let gone = self.list_with(None, Some(&name));
                self.at(t + 60 * SEC, Event::List { names: gone });
                let new = self.add_slot(format!("replaced-{n:02}"));
                self.at(t + 120 * SEC, Event::Replace { slot: new });
            }
        }
        Ok(())
    }
}
