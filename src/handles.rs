//! The metric sets of one running instance: each listener updates its own, `/metrics`
//! renders them all, and tests read them.

use std::sync::Arc;

use crate::dhcp::metrics::DhcpMetrics;
use crate::http_metrics::HttpMetrics;
use crate::ra::server::RaMetrics;
use crate::store::StoreMetrics;
use crate::tftp::TftpMetrics;
use crate::timeline::Timeline;

/// Shared handles of a running instance, for the HTTP listener and tests.
#[derive(Debug, Clone)]
pub struct Handles {
    /// Every machine's boot timeline (DHCP, TFTP and HTTP report to it).
    pub timeline: Arc<Timeline>,
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
    /// DHCPv6 metrics.
    pub dhcp6: Arc<crate::dhcp6::metrics::Dhcp6Metrics>,
    /// Where SIGHUP and the operator API ask for a configuration reload.
    pub reload: Arc<crate::reload::ReloadRequests>,
}

impl Default for Handles {
    fn default() -> Self {
        let timeline = Arc::new(Timeline::default());
        Self {
            tftp: Arc::new(TftpMetrics::with_timeline(timeline.clone())),
            timeline,
            dhcp: Arc::default(),
            store: Arc::default(),
            http: Arc::default(),
            ra: Arc::default(),
            dhcp6: Arc::default(),
            reload: Arc::default(),
        }
    }
}
