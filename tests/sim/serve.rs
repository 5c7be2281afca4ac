//! A member deciding one packet as the shell does, and lease replication between the
//! members: the batch to every peer before the reply, refusals withdrawn, peers that
//! fall behind caught up (`src/dhcp/shell/mod.rs`, `src/replication/send.rs`).

use dhcproto::v4::{Message, MessageType};
use shardboot::dhcp::engine::{Decision, Outcome, PacketContext, Responsibility};
use shardboot::dhcp::responsibility::{decide, responsible, Why};
use shardboot::store::{LeaseEffect, Verdict};

use super::{Answer, Commit, Event, Sim, MS, SEC};

impl Sim {
    pub(super) fn member_receives(&mut self, slot: usize, incarnation: u32, c: u32, msg: &Message) {
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
    pub(super) fn commit(
        &mut self,
        origin: usize,
        effects: Vec<LeaseEffect>,
        reply: Option<(u32, Answer)>,
    ) {
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

    pub(super) fn peer_batch(&mut self, commit: u64, peer: usize, incarnation: u32) {
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

    pub(super) fn commit_done(&mut self, id: u64) {
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
    pub(super) fn catch_up(&mut self) {
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

    pub(super) fn apply_catch_up(&mut self, peer: usize, changes: &[LeaseEffect], now: u64) {
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
}
