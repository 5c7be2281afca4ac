//! Membership: members starting (the database's rows first, `app.rs`), dying,
//! Ironic's list changing and each member reading it (`control.rs`), and the churn
//! events of issue 14 that drive them.

use std::net::Ipv4Addr;
use std::rc::Rc;

use shardboot::owner::MemberList;
use shardboot::store::{Lease, LeaseEffect};

use super::member::config_for;
use super::{Churn, ConfigError, Event, Sim, SEC};

impl Sim {
    pub(super) fn config_of(&self, slot: usize) -> Result<shardboot::config::Config, ConfigError> {
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
    /// Ironic's list, every row of the shared store taken over it first (`app.rs`,
    /// `shared::Loaded::over`).
    pub(super) fn start(&mut self, slot: usize, keep: bool) -> Result<(), ConfigError> {
        let config = self.config_of(slot)?;
        let now = self.secs();
        let stored = if keep {
            std::mem::take(&mut self.kept[slot])
        } else {
            Vec::new()
        };
        let list = MemberList::new(self.ironic.iter().cloned());
        self.members[slot].start(&config, stored, list, now);
        if self.p.shared_store {
            let mut rows: Vec<Lease> = self.db.values().cloned().collect();
            rows.sort_by_key(|l| l.ip);
            let followed = self.db_log.len();
            let m = &mut self.members[slot];
            let engine = m.engine.as_mut().expect("just started");
            engine.set_shared_store_up(true);
            for l in rows {
                engine.apply_decided_change(&LeaseEffect::Put(l), now);
            }
            m.followed = followed;
        }
        self.refresh_live(slot);
        if self.dead.contains(&self.members[slot].name) {
            let name = self.members[slot].name.clone();
            let at = self.now + self.p.detect / 2;
            self.at(at, Event::Health { name, dead: false });
        }
        Ok(())
    }

    pub(super) fn crash(&mut self, slot: usize) {
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

    pub(super) fn ironic_list(&mut self, names: Rc<Vec<String>>) {
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
    pub(super) fn see_list(&mut self, slot: usize, incarnation: u32, names: &[String]) {
        if self.members[slot].incarnation != incarnation || !self.members[slot].running() {
            return;
        }
        let list = MemberList::new(names.iter().cloned());
        let now = self.secs();
        let m = &mut self.members[slot];
        m.list = list.clone();
        let engine = m.engine.as_mut().expect("running");
        engine.change_members(list, now);
        self.refresh_live(slot);
    }

    pub(super) fn list_with(&self, add: Option<&str>, remove: Option<&str>) -> Rc<Vec<String>> {
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
    pub(super) fn pick(&mut self) -> usize {
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
    pub(super) fn churn_event(&mut self, n: u32) -> Result<(), ConfigError> {
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
