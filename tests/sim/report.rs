//! What a run measured, and the addresses each churn event moved between members.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use shardboot::owner::shares::{Shares, Split};

use super::{Sim, SEC};

/// How a machine lost its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// NAK to a RENEWING REQUEST.
    NakRenew,
    /// NAK to a REBINDING REQUEST.
    NakRebind,
    /// NAK to INIT-REBOOT.
    NakReboot,
    /// The lease ran out with no ACK.
    Expired,
    /// A machine with a live lease was bound to another address.
    Moved,
}

/// Lost addresses by cause.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LostCounts {
    pub(crate) nak_renew: u64,
    pub(crate) nak_rebind: u64,
    pub(crate) nak_reboot: u64,
    pub(crate) expired: u64,
    pub(crate) moved: u64,
}

impl LostCounts {
    pub(super) fn count(&mut self, why: Lost) {
        match why {
            Lost::NakRenew => self.nak_renew += 1,
            Lost::NakRebind => self.nak_rebind += 1,
            Lost::NakReboot => self.nak_reboot += 1,
            Lost::Expired => self.expired += 1,
            Lost::Moved => self.moved += 1,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.nak_renew + self.nak_rebind + self.nak_reboot + self.expired + self.moved
    }
}

/// ACKs the machines received, by the state they were in.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Acks {
    /// SELECTING → BOUND (a DISCOVER's exchange).
    pub(crate) fresh: u64,
    pub(crate) renew: u64,
    pub(crate) rebind: u64,
    pub(crate) reboot: u64,
}

impl Acks {
    pub(crate) fn total(&self) -> u64 {
        self.fresh + self.renew + self.rebind + self.reboot
    }
}

/// One churn event and the list changes it made.
#[derive(Debug, Clone)]
pub(crate) struct Churn {
    pub(crate) kind: &'static str,
    /// Simulated seconds.
    pub(crate) at: f64,
    pub(crate) list_changes: u32,
    /// Addresses whose owner (by name) changed, over every list change of the event:
    /// rendezvous blocks (the current split) and contiguous slices (the one before).
    pub(crate) moved_blocks: u32,
    pub(crate) moved_contiguous: u32,
    /// The least any split must move: one member's even share per change.
    pub(crate) unavoidable: u32,
}

impl Churn {
    pub(super) fn new(kind: &'static str, at: u64) -> Self {
        Self {
            kind,
            at: at as f64 / SEC as f64,
            list_changes: 0,
            moved_blocks: 0,
            moved_contiguous: 0,
            unavoidable: 0,
        }
    }

    /// Counts the addresses moved by a change from `before` to `after` (sorted names),
    /// as `cargo test --lib shares` does for the figure in docs/members.md.
    pub(super) fn list_change(
        &mut self,
        range: (Ipv4Addr, Ipv4Addr),
        before: &[String],
        after: &[String],
    ) {
        let first = u32::from(range.0);
        let len = u32::from(range.1) - first + 1;
        let moved = |split| {
            let (b, a) = (
                Shares::assign(split, first, len, before),
                Shares::assign(split, first, len, after),
            );
            (0..len)
                .filter(|&i| {
                    before[b.owner_of(i).unwrap_or(0)] != after[a.owner_of(i).unwrap_or(0)]
                })
                .count() as u32
        };
        self.list_changes += 1;
        self.moved_blocks += moved(Split::CURRENT);
        self.moved_contiguous += moved(Split::Contiguous);
        self.unavoidable += len / before.len().max(after.len()) as u32;
    }
}

/// The figures of one run.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) members: usize,
    pub(crate) machines: u32,
    pub(crate) range_len: u32,
    pub(crate) simulated_days: f64,
    pub(crate) client_packets: u64,
    pub(crate) decisions: u64,
    pub(crate) acks: Acks,
    /// ACK decisions of the members: a broadcast REQUEST (rebinding, INIT-REBOOT) is
    /// ACKed by every member that holds the lease.
    pub(crate) member_acks: u64,
    pub(crate) takeover_offers: u64,
    /// Leases the shared store refused (withdrawn, never ACKed).
    pub(crate) refused: u64,
    pub(crate) reboots: u64,
    pub(crate) reboots_unanswered: u64,
    pub(crate) duplicates: u64,
    pub(crate) duplicate_examples: Vec<String>,
    pub(crate) lost: LostCounts,
    pub(crate) lost_examples: Vec<String>,
    /// Simulated seconds from the power-on until the last machine was first bound;
    /// `None` if some never were.
    pub(crate) all_bound_after: Option<f64>,
    /// Machines without a live lease when the run ended (of those powered on five
    /// minutes before).
    pub(crate) unbound_at_end: u32,
    pub(crate) churn: Vec<Churn>,
}

impl Sim {
    pub(super) fn report(&self) -> Report {
        let firsts: Vec<Option<u64>> = self
            .clients
            .iter()
            .filter(|c| !c.late)
            .map(|c| c.first_bound)
            .collect();
        let all_bound_after = firsts
            .iter()
            .copied()
            .collect::<Option<Vec<u64>>>()
            .and_then(|v| v.into_iter().max())
            .map(|t| t as f64 / SEC as f64);
        let s = &self.stats;
        Report {
            members: self.p.members,
            machines: self.p.machines,
            range_len: u32::from(self.range.1) - u32::from(self.range.0) + 1,
            simulated_days: self.p.days,
            client_packets: s.client_packets,
            decisions: s.decisions,
            acks: s.acks,
            member_acks: s.member_acks,
            takeover_offers: s.takeover_offers,
            refused: s.refused,
            reboots: s.reboots,
            reboots_unanswered: s.reboots_unanswered,
            duplicates: s.duplicates,
            duplicate_examples: s.duplicate_examples.clone(),
            lost: s.lost,
            lost_examples: s.lost_examples.clone(),
            all_bound_after,
            unbound_at_end: self
                .clients
                .iter()
                .filter(|c| c.powered_on + 300 * SEC < self.now)
                .filter(|c| c.held.is_none_or(|h| h.expires <= self.now))
                .count() as u32,
            churn: self.churn.clone(),
        }
    }
}

impl Report {
    /// Churn events of each kind: (events, list changes, moved by blocks, moved by
    /// contiguous slices, unavoidable), summed.
    pub(crate) fn churn_by_kind(&self) -> BTreeMap<&'static str, (u32, u32, u32, u32, u32)> {
        let mut m = BTreeMap::new();
        for c in &self.churn {
            let e = m.entry(c.kind).or_insert((0, 0, 0, 0, 0));
            e.0 += 1;
            e.1 += c.list_changes;
            e.2 += c.moved_blocks;
            e.3 += c.moved_contiguous;
            e.4 += c.unavoidable;
        }
        m
    }

    /// The figures as Markdown tables; `wall` is the run's wall-clock time.
    pub(crate) fn table(&self, wall: std::time::Duration) -> String {
        let mut out = String::new();
        let bound = self
            .all_bound_after
            .map_or("never".to_string(), |s| format!("{s:.1} s"));
        let _ = writeln!(
            out,
            "| members | machines | simulated days | wall | exchanges (ACKs) | decisions | duplicates | lost | all bound after power-on |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.2} s | {} | {} | {} | {} | {bound} |",
            self.members,
            self.machines,
            self.simulated_days,
            wall.as_secs_f64(),
            self.acks.total(),
            self.decisions,
            self.duplicates,
            self.lost.total(),
        );
        let _ = writeln!(
            out,
            "\nACKs: {} fresh, {} renewals, {} rebindings, {} INIT-REBOOT ({} ACK decisions by the members); {} reboots ({} INIT-REBOOT unanswered); \
             {} offers by takeover; {} leases refused by the shared store; \
             {} machines unbound at the end; lost {:?}",
            self.acks.fresh,
            self.acks.renew,
            self.acks.rebind,
            self.acks.reboot,
            self.member_acks,
            self.reboots,
            self.reboots_unanswered,
            self.takeover_offers,
            self.refused,
            self.unbound_at_end,
            self.lost,
        );
        let _ = writeln!(
            out,
            "\n| churn ({} addresses) | events | list changes | moved per event, blocks | contiguous slices | unavoidable |",
            self.range_len
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for (kind, (n, changes, blocks, contiguous, ideal)) in self.churn_by_kind() {
            let per = |x: u32| x / n.max(1);
            let _ = writeln!(
                out,
                "| {kind} | {n} | {changes} | {} | {} | {} |",
                per(blocks),
                per(contiguous),
                per(ideal)
            );
        }
        for e in self.duplicate_examples.iter().chain(&self.lost_examples) {
            let _ = writeln!(out, "  {e}");
        }
        out
    }
}
