//! Read-only TFTP server for PXE firmware loading iPXE (RFC 1350, with RFC 2347
//! option negotiation: blksize RFC 2348, timeout and tsize RFC 2349, windowsize
//! RFC 7440).
//!
//! Layout: [`packet`] (wire format), [`options`] (negotiation), [`transfer`] (the
//! sans-IO state machine), [`path`] (confinement), [`cache`] (file cache), [`FileRoot`]
//! (the root and its one cache, shared with HTTP), `boot_files` (the `check-config`
//! report), [`metrics`]; `server` (one task and socket per transfer) and `single_port`
//! (everything on the listening socket) are the tokio shells, `admission` the limits
//! they share, `shell` what they share once a transfer runs, `batch` the GSO window
//! sender.
//!
//! Wiring: bind a UDP socket (port 69 in production, port 0 in tests) and call [`run`]
//! with a [`FileRoot`] built from the validated
//! [`TftpSettings`](crate::config::TftpSettings) (the same one the HTTP file route
//! serves from), shared [`TftpMetrics`] and a shutdown token.

mod admission;
mod batch;
mod boot_files;
pub mod cache;
pub mod metrics;
pub mod options;
pub mod packet;
pub mod path;
mod pktinfo;
mod root;
mod server;
mod shell;
mod single_port;
pub mod transfer;

pub use boot_files::check_boot_files;
pub use metrics::TftpMetrics;
pub use root::FileRoot;

use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

/// Serves TFTP read requests arriving on `socket` from `root` (whose cache the HTTP file
/// route may share) until `shutdown` is cancelled, in the mode its settings choose.
/// Only an unrecoverable error on the listening socket ends it early.
pub async fn run(
    socket: UdpSocket,
    root: Arc<FileRoot>,
    metrics: Arc<TftpMetrics>,
    shutdown: CancellationToken,
) -> Result<(), TftpError> {
    let settings = &root.settings;
    let local = socket.local_addr().map_err(TftpError::LocalAddr)?;
    // Room for bursts: every machine in a rack powers on at once and sends its RRQ
    // within milliseconds.
    crate::sockopt::enlarge_recv_buffer(&socket, 4 << 20);
    tracing::info!(
        %local,
        root = %settings.root.display(),
        single_port = settings.single_port,
        "tftp listening"
    );
    let pktinfo = pktinfo::enable(&socket);
    let single_port = settings.single_port;
    let shared = admission::Shared::new(root, metrics);
    if single_port {
        single_port::run(socket, pktinfo, shared, shutdown).await
    } else {
        server::run(socket, local, pktinfo, shared, shutdown).await
    }
}

/// Errors that end the TFTP listener. Per-request and per-transfer problems never do:
/// they become TFTP error packets, metrics and log lines.
#[derive(Debug, thiserror::Error)]
pub enum TftpError {
    /// The listening socket has no local address.
    #[error("tftp: cannot read the listening socket's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    /// The listening socket failed in a way that is not about one peer.
    #[error("tftp: receive on the listening socket failed: {0}")]
    Recv(#[source] std::io::Error),
}
