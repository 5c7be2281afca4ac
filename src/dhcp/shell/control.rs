//! Operator changes to the DHCP engine's state: sent by the operator API through a
//! [`DhcpHandle`], applied on the engine thread between packets, answered once durable.

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::info;

use crate::dhcp::engine::reserve::{Reservation, ReserveError};
use crate::dhcp::engine::{Engine, EngineSettings};
use crate::mac::MacAddr;
use crate::store::{Change, CommitFailed, Committer, LeaseEffect};

/// How long the API waits for the engine thread to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One change, with where its answer goes.
#[derive(Debug)]
pub(super) enum Control {
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
/// DHCPv4 engine thread here, the DHCPv6 task in `dhcp6::shell`).
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
/// here, the DHCPv6 one in `dhcp6::shell`).
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

/// The engine's end of the control channel, given to [`super::Server`].
#[derive(Debug)]
pub struct ControlReceiver(pub(super) mpsc::Receiver<Control>);

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

/// Applies one change on the engine thread. A reservation change is checked, made
/// durable (waiting for its flush: operator changes are rare) and only then applied, so
/// the engine never holds a reservation the store lacks. A reload's relays
/// (`dhcp.relays`) are the engine's too (`Engine::relay_path`).
pub(super) fn apply(engine: &mut Engine, cmd: Control, committer: &Committer, now: u64) {
    let stored = |change: Change| {
        committer.commit_blocking(vec![change]).map_err(|e| {
            tracing::error!(error = %e, "reservation not stored");
            ReserveError::Store
        })
    };
    match cmd {
        Control::Reconfigure { config, done } => {
            engine.reconfigure(EngineSettings::of(&config), now);
            let _ = done.send(());
        }
        Control::Reserve { reservation, done } => {
            let result = engine
                .check_reservation(&reservation, now)
                .and_then(|()| {
                    stored(Change::Reservation(
                        reservation.mac,
                        Some(reservation.clone()),
                    ))
                })
                .and_then(|()| engine.reserve(&reservation, now));
            if result.is_ok() {
                info!(mac = %reservation.mac, ip = %reservation.ip, "reservation set by the operator");
            }
            let _ = done.send(result);
        }
        Control::Unreserve { mac, done } => {
            let result = engine
                .check_unreserve(&mac)
                .and_then(|()| stored(Change::Reservation(mac, None)))
                .and_then(|()| engine.unreserve(&mac));
            let _ = done.send(result);
        }
        Control::Members {
            list,
            conductors,
            done,
        } => {
            // Applied at once: the transition only narrows what this member hands out
            // fresh, so it is safe before the record is durable. If the process dies
            // first, start-up finds the old list in the store and starts the same
            // transition then, later and so longer.
            let names = list.names().to_vec();
            let Some(mut record) = engine.change_members(list, now) else {
                let _ = done.send(None);
                return;
            };
            let until = engine.transition_until();
            if until.is_some_and(|u| u > now) {
                tracing::warn!(
                    members = ?names,
                    previous = ?record.previous,
                    until,
                    "member list changed: new shares now; fresh addresses only from what \
                     this member also held before, until the longest lease has run out"
                );
            } else {
                // Every peer in step (each knows every lease), or a join that only
                // narrows this member's share: nothing to wait out.
                tracing::info!(
                    members = ?names,
                    previous = ?record.previous,
                    "member list changed: new shares now, with no transition"
                );
            }
            record.conductors = conductors;
            if let Err(e) = committer.commit_blocking(vec![Change::Membership(record)]) {
                tracing::error!(error = %e, "membership record not stored");
            }
            let _ = done.send(until);
        }
        Control::Decided { changes, done } => {
            take_decided(&changes, committer, done, |c| {
                engine.apply_decided_change(c, now).map(Change::Replica)
            });
        }
        Control::Forget { ip, done } => match engine.forget(ip) {
            None => {
                let _ = done.send(Ok(false));
            }
            Some(effect) => {
                info!(%ip, "lease forgotten by the operator");
                let submitted = committer.submit(vec![Change::Lease(effect)], move |r| {
                    let _ = done.send(
                        r.map(|()| true)
                            .map_err(|e| CommitFailed::Store(e.to_string())),
                    );
                });
                // The committer is gone: the sender was dropped with the job, and the
                // API hears "no answer".
                let _ = submitted;
            }
        },
    }
}
