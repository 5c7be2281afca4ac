//! A member deciding one packet as the shell does, and the shared lease store between
//! the members: every change decided by the database before the reply, refusals
//! withdrawn, the other members' rows followed (`src/dhcp/shell/mod.rs`,
//! `src/shared/`).

use dhcproto::v4::{Message, MessageType};
use shardboot::dhcp::engine::{Decision, Outcome, PacketContext, Responsibility};
use shardboot::dhcp::responsibility::{decide, responsible, Why};
use shardboot::store::{LeaseEffect, LeaseState};

use super::{Answer, Commit, Event, Sim, SEC};

impl Sim {
    pub(super) fn member_receives(&mut self, slot: usize, incarnation: u32, c: u32, msg: &Message) {
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
            source: std::net::Ipv4Addr::UNSPECIFIED,
            now,
        };
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

    /// Hands `effects` to the shared store (the shell's committer hook); the reply
    /// waits for its answer, one hop there and one back.
    pub(super) fn commit(
        &mut self,
        origin: usize,
        effects: Vec<LeaseEffect>,
        reply: Option<(u32, Answer)>,
    ) {
        let id = self.next_commit;
        self.next_commit += 1;
        let mut due = self.now;
        if self.p.shared_store {
            let (there, back) = (self.hop(), self.hop());
            self.at(self.now + there, Event::DbWrite { commit: id });
            due = self.now + there + back;
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

    /// The database decides each change of a commit as `shared::bindings` writes it: a
    /// row is replaced only when it is the same client's, or free (released, or ended
    /// by the database's clock); otherwise the change is refused with the holder's row.
    /// Offers are never written. The write happens even if its member died meanwhile.
    pub(super) fn db_write(&mut self, commit: u64) {
        let now = self.secs();
        let Some(k) = self.commits.get_mut(&commit) else {
            return;
        };
        for e in &k.effects {
            match e {
                LeaseEffect::Put(l) if l.state == LeaseState::Offered => {}
                LeaseEffect::Put(l) => match self.db.get(&l.ip) {
                    Some(row) if row.mac != l.mac && row.is_active(now) => {
                        k.refused.push((l.clone(), row.clone()));
                    }
                    _ => {
                        self.db.insert(l.ip, l.clone());
                        self.db_log.push((k.origin, e.clone()));
                    }
                },
                LeaseEffect::Remove(ip, mac) => {
                    if self.db.get(ip).is_some_and(|row| &row.mac == mac) {
                        self.db.remove(ip);
                        self.db_log.push((k.origin, e.clone()));
                    }
                }
            }
        }
    }

    pub(super) fn commit_done(&mut self, id: u64) {
        let Some(k) = self.commits.remove(&id) else {
            return;
        };
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
        // Never acknowledged; withdrawn here only (the database holds the other row).
        self.stats.refused += k.refused.len() as u64;
        for (ours, holder) in &k.refused {
            engine.withdraw(ours, holder, now);
        }
    }

    /// Every running member takes the rows the others wrote since its last look
    /// (`shared::follow`).
    pub(super) fn follow(&mut self) {
        let now = self.secs();
        let end = self.db_log.len();
        for slot in 0..self.members.len() {
            let m = &mut self.members[slot];
            let Some(engine) = m.engine.as_mut() else {
                continue;
            };
            for (writer, change) in &self.db_log[m.followed..end] {
                if *writer != slot {
                    engine.apply_decided_change(change, now);
                }
            }
            m.followed = end;
        }
    }
}
