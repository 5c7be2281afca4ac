//! What the rest of shardboot asks the DHCPv6 server loop (bindings the shared lease
//! store decided, from `shared::follow`; a reload): sent through a [`Dhcp6Handle`],
//! applied by `dhcp6::shell` between messages, answered once durable. Apart from the
//! shell, so that whoever holds a handle does not depend on the server loop.

use tokio::sync::{mpsc, oneshot};

use crate::dhcp::control::{ask, ControlError};
use crate::store::{CommitFailed, Lease6Effect};

/// One request, with where its answer goes.
#[derive(Debug)]
pub(crate) enum Control6 {
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

/// The server loop's end, given to `dhcp6::shell::run` in `dhcp6::shell::Parts6`.
#[derive(Debug)]
pub struct Control6Receiver(pub(crate) mpsc::Receiver<Control6>);

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
