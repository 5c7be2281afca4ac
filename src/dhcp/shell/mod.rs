//! The DHCP socket loop: the I/O shell around the pure engine.
//!
//! - One thread ("dhcp-engine", its own single-threaded runtime) reads every interface
//!   socket and decides each request in arrival order against one in-memory state: no
//!   locks, no cross-thread hand-off per packet.
//! - Replies without lease changes (OFFER, NAK, INFORM) are sent at once.
//! - Lease changes go to the store's committer, which writes everything queued since its
//!   last flush with one flush (group commit), and only then sends the ACKs that depended
//!   on them. An ACK never leaves before its lease is durable.

pub mod arp;
mod control;
mod decisions;
mod follow;
mod outputs;
mod probe;
mod report;
mod run_loop;
pub mod socket;
mod start;

use run_loop::engine_loop;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::engine::{Engine, Interface};
use super::host_policy::HostPolicies;
use super::metrics::DhcpMetrics;
use super::responsibility::Responder;
pub use crate::dhcp::control::{ControlError, ControlReceiver, DhcpHandle};
use crate::store::{Committer, StoreMetrics};
pub use follow::follow_members;
pub use probe::ProbeError;
pub use start::{prepare, Parts, StartError, Stored};

/// One bound socket and the interface it serves.
#[derive(Debug)]
pub struct Listener {
    /// The interface.
    pub interface: Interface,
    /// Its socket, non-blocking (see [`socket::bind`]).
    pub socket: std::net::UdpSocket,
}

/// A DHCP server ready to run: sockets bound, engine loaded.
#[derive(Debug)]
pub struct Server {
    /// Bound sockets.
    pub listeners: Vec<Listener>,
    /// The engine, already loaded with the stored leases and reservations.
    pub engine: Engine,
    /// Where lease changes are made durable.
    pub committer: Committer,
    /// Whether the store takes writes (and its counters).
    pub store: Arc<StoreMetrics>,
    /// Metrics to update.
    pub metrics: Arc<DhcpMetrics>,
    /// Server port; relays are answered on it and clients on `port + 1` (67 → 68).
    pub port: u16,
    /// How often expired leases are reclaimed.
    pub reclaim_interval: Duration,
    /// Who answers with several members; `None` answers everything.
    pub responder: Option<Responder>,
    /// Which machines the owner resolver knows (Ironic, an inventory); `None` when no
    /// such resolver is configured.
    pub owners: Option<Arc<crate::owner::Resolver>>,
    /// The operator's run-time allow/deny per MAC.
    pub policies: Arc<HostPolicies>,
    /// Every machine's timeline, told of each decision.
    pub timeline: Arc<crate::timeline::Timeline>,
    /// Operator changes to apply; `None`: no operator API.
    pub control: Option<ControlReceiver>,
    /// Whether a shared lease store decides the bindings (`store.shared`).
    pub shared: bool,
    /// How long a conflict probe waits (`dhcp.conflict_probe_ms`);
    /// `None`: no probes.
    pub conflict_probe: Option<Duration>,
}

/// Errors that end the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A socket failed in a way that cannot be retried.
    #[error("DHCP socket on {interface}: {source}")]
    Socket {
        /// Interface name.
        interface: String,
        /// OS error.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("starting the DHCP threads: {0}")]
    Thread(std::io::Error),
}

/// Runs until `shutdown` is cancelled or a socket fails. On shutdown, changes already
/// queued are flushed and their replies sent before returning.
pub async fn run(server: Server, shutdown: CancellationToken) -> Result<(), ServerError> {
    crate::engine_thread::run_on_own_thread("dhcp-engine", move || engine_loop(server, shutdown))
        .await
        .map_err(ServerError::Thread)?
}
