//! The control channel to the DHCPv4 engine thread: what the operator API, a reload,
//! the member follower and the shared store's follower ask ([`DhcpHandle`]), and the
//! helpers both families' channels share ([`ask`], [`take_decided`]). Applied on the
//! engine thread by `dhcp::shell` between packets, answered once durable. Apart from
//! the shell, so that whoever holds a handle does not depend on the server loop.

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::dhcp::engine::reserve::{Reservation, ReserveError};
use crate::mac::MacAddr;
use crate::store::{Change, CommitFailed, Committer, LeaseEffect};

/// How long the API waits for the engine thread to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One change, with where its answer goes.
#[derive(Debug)]
pub(crate) enum Control {
    Forget {
        ip: Ipv4Addr,
        done: oneshot::Sender<Result<bool, CommitFailed>>,
    },
    Reserve {
        reservation: Reservation,
        done: oneshot::Sender<Result<(), ReserveError>>,
    },
    Unreserve {
        mac: MacAddr,
        done: oneshot::Sender<Result<(), ReserveError>>,
    },
    /// Bindings the shared lease store decided (other members' writes): taken, and
    /// answered once durable in this member's cache.
    Decided {
        changes: Vec<LeaseEffect>,
        done: oneshot::Sender<Result<(), CommitFailed>>,
    },
    /// A reloaded configuration's live parts (`config::reload`).
    Reconfigure {
        config: std::sync::Arc<crate::config::Config>,
        done: oneshot::Sender<()>,
    },
    /// The member list changed while running (members from Ironic).
    Members {
        list: crate::owner::MemberList,
        conductors: Vec<String>,
        done: oneshot::Sender<Option<u64>>,
    },
}

/// Why the engine gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The DHCP server is not running (stopped, or never started).
    #[error("DHCP is not running")]
    NotRunning,
    /// The engine did not answer in time.
    #[error("DHCP did not answer")]
    NoAnswer,
}

/// Sends the command `make` builds to a server loop and waits for its answer (the
/// DHCPv4 engine thread, the DHCPv6 task in `dhcp6::shell`).
pub(crate) async fn ask<C, T>(
    tx: &mpsc::Sender<C>,
    make: impl FnOnce(oneshot::Sender<T>) -> C,
) -> Result<T, ControlError> {
    let (done, answer) = oneshot::channel();
    tx.send(make(done))
        .await
        .map_err(|_| ControlError::NotRunning)?;
    match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(Ok(v)) => Ok(v),
        _ => Err(ControlError::NoAnswer),
    }
}

/// Takes bindings the shared store decided into an engine (`apply` gives what to
/// store of each) and answers `done` once what was taken is durable (the DHCPv4 engine
/// in `dhcp::shell`, the DHCPv6 one in `dhcp6::shell`).
pub(crate) fn take_decided<C>(
    changes: &[C],
    committer: &Committer,
    done: oneshot::Sender<Result<(), CommitFailed>>,
    apply: impl FnMut(&C) -> Option<Change>,
) {
    let taken: Vec<Change> = changes.iter().filter_map(apply).collect();
    if taken.is_empty() {
        let _ = done.send(Ok(()));
        return;
    }
    // Answered from the committer thread once durable. Not queued (a full queue): the
    // sender is dropped with the job, and the follower reads the rows again.
    let submitted = committer.submit(taken, move |r| {
        let _ = done.send(r.map_err(|e| CommitFailed::Store(e.to_string())));
    });
    if let Err(e) = submitted {
        tracing::debug!(error = %e, "decided bindings not queued");
    }
}

/// Where the operator API sends changes for the DHCP engine.
#[derive(Debug, Clone)]
pub struct DhcpHandle {
    tx: mpsc::Sender<Control>,
}

/// The engine's end of the control channel, given to `dhcp::shell::Server`.
#[derive(Debug)]
pub struct ControlReceiver(pub(crate) mpsc::Receiver<Control>);

impl DhcpHandle {
    /// A handle and the receiver the DHCP server reads.
    pub fn channel() -> (Self, ControlReceiver) {
        let (tx, rx) = mpsc::channel(64);
        (Self { tx }, ControlReceiver(rx))
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Control,
    ) -> Result<T, ControlError> {
        ask(&self.tx, make).await
    }

    /// Forgets the lease on `ip` (durably): `Ok(false)` when there was none.
    pub async fn forget(&self, ip: Ipv4Addr) -> Result<Result<bool, CommitFailed>, ControlError> {
        self.ask(|done| Control::Forget { ip, done }).await
    }

    /// Reserves an address for a MAC, durable before the answer.
    pub async fn reserve(
        &self,
        reservation: Reservation,
    ) -> Result<Result<(), ReserveError>, ControlError> {
        self.ask(|done| Control::Reserve { reservation, done })
            .await
    }

    /// Serves with the member list `list` from now on (new shares, with a transition
    /// from the list served until now). Answers with the end of the transition, `None`
    /// when the list was already in force.
    pub async fn change_members(
        &self,
        list: crate::owner::MemberList,
        conductors: Vec<String>,
    ) -> Result<Option<u64>, ControlError> {
        self.ask(|done| Control::Members {
            list,
            conductors,
            done,
        })
        .await
    }

    /// Takes bindings the shared lease store decided; answered once durable here.
    pub async fn decided(&self, changes: Vec<LeaseEffect>) -> Result<(), ControlError> {
        let _ = self.ask(|done| Control::Decided { changes, done }).await?;
        Ok(())
    }

    /// Gives the engine a reloaded configuration's live parts; answered once applied.
    pub async fn reconfigure(
        &self,
        config: std::sync::Arc<crate::config::Config>,
    ) -> Result<(), ControlError> {
        ask(&self.tx, |done| Control::Reconfigure { config, done }).await
    }

    /// Removes a MAC's run-time reservation, durable before the answer.
    pub async fn unreserve(&self, mac: MacAddr) -> Result<Result<(), ReserveError>, ControlError> {
        self.ask(|done| Control::Unreserve { mac, done }).await
    }
}
