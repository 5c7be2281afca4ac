//! Requests from the rest of shardboot ([`Dhcp6Handle`](crate::dhcp6::control::Dhcp6Handle),
//! `dhcp6::control`), applied here by the task that owns the engine, between messages.

use super::super::engine::{Engine6, Engine6Settings};
use crate::dhcp::control::take_decided;
use crate::dhcp6::control::Control6;
use crate::store::{Change, Committer};

/// Applies one request in the server loop.
pub(super) fn apply(engine: &mut Engine6, cmd: Control6, committer: &Committer, now: u64) {
    match cmd {
        Control6::Decided { changes, done } => {
            take_decided(&changes, committer, done, |c| {
                engine.apply_decided_change(c, now).map(Change::Replica6)
            });
        }
        Control6::Reconfigure { config, done } => {
            engine.reconfigure(Engine6Settings::of(&config), now);
            let _ = done.send(());
        }
    }
}
