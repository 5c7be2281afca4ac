//! What the rest of shardboot asks the DHCPv6 server loop (bindings the shared lease
//! store decided, from `shared::follow`): sent through a [`Dhcp6Handle`], applied by the
//! task that owns the engine between messages, answered once durable.

use tokio::sync::{mpsc, oneshot};

use super::super::engine::{Engine6, Engine6Settings};
use crate::dhcp::shell::{ask, take_decided, ControlError};
use crate::store::{Change, CommitFailed, Committer, Lease6Effect};

/// One request, with where its answer goes.
#[derive(Debug)]
pub(super) enum Control6 {
    /// Bindings the shared lease store decided (other members' writes).
    Decided {
        changes: Vec<Lease6Effect>,
        done: oneshot::Sender<Result<(), CommitFailed>>,
    },
    /// A reloaded configuration's live parts (`config::reload`).
    Reconfigure {
        config: std::sync::Arc<crate::config::Config>,
        done: oneshot::Sender<()>,
    },
}

/// Where `shared::follow` sends requests for the DHCPv6 engine.
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

    /// Takes bindings the shared lease store decided; answered once durable here.
    pub async fn decided(&self, changes: Vec<Lease6Effect>) -> Result<(), ControlError> {
        let _ = ask(&self.tx, |done| Control6::Decided { changes, done }).await?;
        Ok(())
    }

    /// Gives the engine a reloaded configuration's live parts; answered once applied.
    pub async fn reconfigure(
        &self,
        config: std::sync::Arc<crate::config::Config>,
    ) -> Result<(), ControlError> {
        ask(&self.tx, |done| Control6::Reconfigure { config, done }).await
    }
}

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
