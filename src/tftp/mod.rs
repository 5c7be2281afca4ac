//! Read-only TFTP server for PXE firmware loading iPXE (RFC 1350, with RFC 2347
//! option negotiation: blksize RFC 2348, timeout and tsize RFC 2349, windowsize
//! RFC 7440).
//!
//! Layout: [`packet`] (wire format), [`options`] (negotiation), [`transfer`] (the
//! sans-IO state machine), [`path`] (confinement), [`cache`] (file cache),
//! `boot_files` (the `check-config` report), [`metrics`]; `server` (one task and socket
//! per transfer) and `single_port` (everything on the listening socket) are the tokio
//! shells, `admission` the limits they share, `batch` the GSO window sender.
//!
//! Wiring: bind a UDP socket (port 69 in production, port 0 in tests) and call [`run`]
//! with the validated [`TftpSettings`](crate::config::TftpSettings) (from `config`),
//! shared [`TftpMetrics`] and a shutdown token.

mod admission;
mod batch;
mod boot_files;
pub mod cache;
pub mod metrics;
pub mod options;
pub mod packet;
pub mod path;
mod pktinfo;
mod server;
mod single_port;
pub mod transfer;

pub use boot_files::check_boot_files;
pub use metrics::TftpMetrics;
pub use server::run;

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
