//! A deterministic simulation of a whole site (issue 19): the pure DHCP engines of
//! several members on one simulated segment, thousands of simulated machines booting,
//! renewing and rebooting over simulated days, and members joining, crashing, being
//! replaced and leaving. One process, one thread, a simulated clock (µs), a seeded
//! xorshift generator and a priority queue of events: the same parameters give the same
//! run, to the packet.
//!
//! What each member does is what the shell does with its engine (`src/dhcp/shell/`):
//! - a decision's reply without lease effects (an OFFER, a NAK) is sent at once; one
//!   with effects (an ACK) is sent only after the shared lease store (a map of one row
//!   per address, as `src/shared/bindings.rs` writes it) decided every change, one hop
//!   away and one hop back, and never when it refused one (the row is another
//!   client's live binding): the lease is withdrawn with `Engine::withdraw`, locally;
//! - every `poll` each member takes the rows the other members wrote since its last
//!   look (`shared::follow`, `Engine::apply_decided_change`);
//! - a member starting (after a crash, on its old store or an empty one; a replacement;
//!   a join) first takes every row of the database over its own store
//!   (`shared::SharedStore::load`), then serves with the store up;
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
//! - no conflict probes (nothing on the simulated segment would answer them); every
//!   packet goes to `handle_message`, never to the raw-packet shortcut `handle_peeked`;
//! - a decision's effects count as durable when it is made (no fsync delay, no lost
//!   write on a crash); the database's writes are per decision, not per group commit;
//!   the database never fails (its outages are the nemesis test's, `shared_members`);
//! - every member sees a crash at the same moment (`detect`) and a member's return
//!   `detect / 2` after it;
//! - one subnet, one range, no relays; clients take the first OFFER; PXE's second DHCP
//!   round (iPXE) is not modelled, a boot is one acquisition; an INIT-REBOOT nobody
//!   answers (four tries) falls back to DISCOVER asking for the same address;
//! - a member list change is Ironic's: a member removed is out of every member's list
//!   (within `list_spread`), a starting member serves the list in force at once.

// The test and the bench use different parts of the simulation.
#![allow(dead_code)]

mod churn;
mod client;
mod member;
mod report;
mod serve;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::rc::Rc;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use shardboot::store::{Lease, LeaseEffect};

use client::Client;
pub(crate) use member::ConfigError;
use member::Member;
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
    /// The shared lease store decides every binding; off, each member knows only its
    /// own leases (the negative test: duplicates and lost addresses must appear).
    pub(crate) shared_store: bool,
    /// How often each member reads the rows the others wrote (`store.poll_ms`).
    pub(crate) poll: u64,
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
            shared_store: true,
            poll: SEC,
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
    /// A commit's changes arrive at the database, which decides each.
    DbWrite {
        commit: u64,
    },
    /// The database's answer is back: the reply goes out or not.
    CommitDone {
        commit: u64,
    },
    /// Every member reads the rows the others wrote since its last look.
    Follow,
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

/// A lease change waiting for the database's answer before its reply goes out.
struct Commit {
    origin: usize,
    incarnation: u32,
    effects: Vec<LeaseEffect>,
    reply: Option<(u32, Answer)>,
    refused: Vec<(Lease, Lease)>,
    /// The reply may go at this time (the database's answer is back).
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
    /// The shared lease store: one row per address, as the database holds it.
    db: HashMap<Ipv4Addr, Lease>,
    /// Every row the database took, in order, with the slot that wrote it: what the
    /// members follow.
    db_log: Vec<(usize, LeaseEffect)>,
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
            db: HashMap::new(),
            db_log: Vec::new(),
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
        if self.p.shared_store {
            self.at(self.p.poll, Event::Follow);
        }
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
            Event::DbWrite { commit } => self.db_write(commit),
            Event::CommitDone { commit } => self.commit_done(commit),
            Event::Follow => {
                self.follow();
                self.at(self.now + self.p.poll, Event::Follow);
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
}
