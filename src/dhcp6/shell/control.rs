//! What the rest of shardboot asks the DHCPv6 server loop (lease replication, from the
//! member channel): sent through a [`Dhcp6Handle`], applied by the task that owns the
//! engine between messages, answered once durable.

use tokio::sync::{mpsc, oneshot};

use super::super::engine::Engine6;
use crate::dhcp::shell::{ask, take_peer_changes, ControlError};
use crate::store::{Change, CommitFailed, Committer, Lease6, Lease6Effect, Verdict};

/// One request, with where its answer goes.
#[derive(Debug)]
pub(super) enum Control6 {
    /// A peer's v6 lease changes: answered once what was taken is durable.
    PeerChanges {
        changes: Vec<Lease6Effect>,
        catch_up: bool,
        done: oneshot::Sender<Result<Vec<Verdict>, CommitFailed>>,
    },
    /// Bindings the shared lease store decided (other members' writes).
    Decided {
        changes: Vec<Lease6Effect>,
        done: oneshot::Sender<Result<Vec<Verdict>, CommitFailed>>,
    },
    /// Every live v6 lease, for a member starting.
    Snapshot { done: oneshot::Sender<Vec<Lease6>> },
}

/// Where the member channel sends requests for the DHCPv6 engine.
#[derive(Debug, Clone)]
pub struct Dhcp6Handle {
    tx: mpsc::Sender<Control6>,
}

/// The server loop's end, given to [`super::run`] in [`super::Parts6`].
#[derive(Debug)]
pub struct Control6Receiver(pub(super) mpsc::Receiver<Control6>);

impl Dhcp6Handle {
    /// A handle and the receiver the DHCPv6 server reads.
    pub fn channel() -> (Self, Control6Receiver) {
        let (tx, rx) = mpsc::channel(64);
        (Self { tx }, Control6Receiver(rx))
    }

    /// Applies a peer's v6 lease changes; the verdicts once what was taken is durable.
    pub async fn peer_changes(
        &self,
        changes: Vec<Lease6Effect>,
        catch_up: bool,
    ) -> Result<Result<Vec<Verdict>, CommitFailed>, ControlError> {
        ask(&self.tx, |done| Control6::PeerChanges {
            changes,
            catch_up,
            done,
        })
        .await
    }

    /// Takes bindings the shared lease store decided; answered once durable here.
    pub async fn decided(&self, changes: Vec<Lease6Effect>) -> Result<(), ControlError> {
        let _ = ask(&self.tx, |done| Control6::Decided { changes, done }).await?;
        Ok(())
    }

    /// Every v6 lease that holds its address now.
    pub async fn live_leases(&self) -> Result<Vec<Lease6>, ControlError> {
        ask(&self.tx, |done| Control6::Snapshot { done }).await
    }
}

/// Applies one request in the server loop.
pub(super) fn apply(engine: &mut Engine6, cmd: Control6, committer: &Committer, now: u64) {
    match cmd {
        Control6::PeerChanges {
            changes,
            catch_up,
            done,
        } => {
            take_peer_changes(&changes, committer, done, |c| {
                let (verdict, store) = engine.apply_peer_change(c, now, catch_up);
                (verdict, store.map(Change::Replica6))
            });
        }
        Control6::Decided { changes, done } => {
            take_peer_changes(&changes, committer, done, |c| {
                let store = engine.apply_decided_change(c, now);
                (Verdict::Accepted, store.map(Change::Replica6))
            });
        }
        Control6::Snapshot { done } => {
            let _ = done.send(engine.live_leases(now));
        }
    }
}
