//! Operator changes to the DHCP engine's state, sent through a
//! [`DhcpHandle`](crate::dhcp::control::DhcpHandle) (`dhcp::control`): applied here, on
//! the engine thread between packets, answered once durable.

use tracing::info;

use crate::dhcp::control::{take_decided, Control};
use crate::dhcp::engine::reserve::ReserveError;
use crate::dhcp::engine::{Engine, EngineSettings};
use crate::store::{Change, CommitFailed, Committer};

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
