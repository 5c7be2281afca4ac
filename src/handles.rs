//! The metric sets of one running instance: each listener updates its own, `/metrics`
//! renders them all, and tests read them.

use std::sync::Arc;

use crate::dhcp::metrics::DhcpMetrics;
use crate::http::metrics::HttpMetrics;
use crate::ra::server::RaMetrics;
use crate::store::StoreMetrics;
use crate::tftp::TftpMetrics;

/// Shared handles of a running instance, for the HTTP listener and tests.
#[derive(Debug, Clone, Default)]
pub struct Handles {
    /// DHCP metrics.
    pub dhcp: Arc<DhcpMetrics>,
    /// The store's commit path.
    pub store: Arc<StoreMetrics>,
    /// TFTP metrics.
    pub tftp: Arc<TftpMetrics>,
    /// HTTP metrics.
    pub http: Arc<HttpMetrics>,
    /// Router-solicitation responder metrics.
    pub ra: Arc<RaMetrics>,
}
