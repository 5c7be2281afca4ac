//! Lease replication between members (ARCHITECTURE.md, "Members"; README, "Lease
//! replication"). Every lease change a member makes is handed to every other member of
//! the list in force, over the member channel (the boot listener, each message proven
//! with the member secret), while the local flush runs; the ACK waits for both. A peer
//! stores what it is sent and refuses a lease on an address it knows another client
//! holds, and a refused lease is never acknowledged. So another member knows every
//! acknowledged lease before its client does, and when a member dies its clients keep
//! their addresses with whichever member answers them next.
//!
//! - [`wire`]: the messages, pure.
//! - [`send`]: the sending side (the committer's hook, peers that fall behind and catch
//!   up, the snapshot a starting member asks for).
//! - [`ReplayGuard`]: the receiving side's check that a proven batch is not a replay.

pub mod send;
pub mod wire;

use std::collections::HashMap;
use std::sync::Mutex;

use crate::metrics::{header, Counter, Histogram};
pub use send::{Hook, PeerStatus, Replicator};
use wire::Epoch;

/// Where a member takes a batch of lease changes.
pub const BATCH_PATH: &str = "/v1/members/leases";
/// Where a member gives every lease it knows, to a member starting.
pub const SNAPSHOT_PATH: &str = "/v1/members/leases/snapshot";

/// Counters of lease replication.
#[derive(Debug, Default)]
pub struct ReplicationMetrics {
    /// Batches sent to peers in step (one per flush).
    pub batches: Counter,
    /// Changes in them.
    pub changes: Counter,
    /// Changes a peer refused (their ACKs withheld).
    pub refused: Counter,
    /// Refusals of changes already answered, sent while the peer was behind.
    pub conflicts: Counter,
    /// Times a peer fell behind.
    pub fell_behind: Counter,
    /// Batches received from peers.
    pub received: Counter,
    /// Received messages refused: bad proof, replay, malformed.
    pub rejected: Counter,
    /// Time from sending a flush's changes to the last peer's answer.
    pub latency: Histogram,
}

impl ReplicationMetrics {
    /// Writes the Prometheus exposition, with `behind` peers and `in_step`.
    pub fn render_prometheus(&self, out: &mut String, behind: usize, in_step: bool) {
        for (name, help, c) in [
            (
                "shardboot_replication_batches_total",
                "Lease change batches sent to members in step",
                &self.batches,
            ),
            (
                "shardboot_replication_changes_total",
                "Lease changes sent to members in step",
                &self.changes,
            ),
            (
                "shardboot_replication_refused_total",
                "Lease changes a member refused (address held for another client; ACK withheld)",
                &self.refused,
            ),
            (
                "shardboot_replication_conflicts_total",
                "Refusals of lease changes already acknowledged while the member was behind",
                &self.conflicts,
            ),
            (
                "shardboot_replication_fell_behind_total",
                "Times a member stopped answering lease changes in time",
                &self.fell_behind,
            ),
            (
                "shardboot_replication_received_total",
                "Lease change batches received from members",
                &self.received,
            ),
            (
                "shardboot_replication_rejected_total",
                "Replication messages refused (no valid proof, replayed, malformed)",
                &self.rejected,
            ),
        ] {
            header(out, name, "counter", help);
            out.push_str(&format!("{name} {}\n", c.get()));
        }
        header(
            out,
            "shardboot_replication_members_behind",
            "gauge",
            "Members that do not have every lease change (ACKs do not wait for them)",
        );
        out.push_str(&format!("shardboot_replication_members_behind {behind}\n"));
        header(
            out,
            "shardboot_replication_in_step",
            "gauge",
            "1 while every other member has every lease change",
        );
        out.push_str(&format!(
            "shardboot_replication_in_step {}\n",
            u8::from(in_step)
        ));
        self.latency.render(
            out,
            "shardboot_replication_seconds",
            "Time from sending a flush's lease changes to the last member's answer",
        );
    }
}

/// How far behind the newest sequence number a message may arrive and still be taken
/// (messages of one run travel on several connections at once, so they may overtake
/// each other).
const REPLAY_WINDOW: u64 = 128;

/// The receiving side's memory of each sender's run and the sequence numbers it took:
/// a proven message is taken once, never from an earlier run, and never from further
/// behind the newest than [`REPLAY_WINDOW`] (as IPsec's anti-replay window, RFC 4303
/// §3.4.3).
#[derive(Debug, Default)]
pub struct ReplayGuard {
    seen: Mutex<HashMap<String, Seen>>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    epoch: Epoch,
    newest: u64,
    /// Bit i: `newest - i` was taken.
    window: u128,
}

impl ReplayGuard {
    /// Whether a message of `member` (already proven) is new; records it if so.
    pub fn admit(&self, member: &str, epoch: Epoch, seq: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = Seen {
            epoch,
            newest: seq,
            window: 1,
        };
        let Some(s) = seen.get_mut(member) else {
            seen.insert(member.to_string(), fresh);
            return true;
        };
        if epoch < s.epoch {
            return false;
        }
        if epoch > s.epoch {
            *s = fresh;
            return true;
        }
        if seq > s.newest {
            let shift = seq - s.newest;
            s.window = if shift >= REPLAY_WINDOW {
                0
            } else {
                s.window << shift
            };
            s.window |= 1;
            s.newest = seq;
            return true;
        }
        let behind = s.newest - seq;
        if behind >= REPLAY_WINDOW || s.window & (1 << behind) != 0 {
            return false;
        }
        s.window |= 1 << behind;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_taken_once_and_an_earlier_run_never() {
        let g = ReplayGuard::default();
        let run = |started, nonce| Epoch { started, nonce };
        assert!(g.admit("a", run(10, 1), 1));
        assert!(!g.admit("a", run(10, 1), 1), "replayed");
        assert!(g.admit("a", run(10, 1), 3), "gaps are fine");
        assert!(g.admit("a", run(10, 1), 2), "overtaken, inside the window");
        assert!(!g.admit("a", run(10, 1), 2), "but only once");
        assert!(g.admit("a", run(10, 1), 300));
        assert!(!g.admit("a", run(10, 1), 100), "behind the window");
        assert!(g.admit("b", run(10, 1), 1), "per sender");
        assert!(g.admit("a", run(11, 0), 1), "a restart");
        assert!(!g.admit("a", run(10, 1), 9), "the run before the restart");
    }
}
