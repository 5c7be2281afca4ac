//! HTTP counters: requests by route pattern and status, boot answers by outcome, and
//! connections refused by a cap or closed by a timeout. A leaf beside `handles`, which
//! holds them, and `http`, which counts into them (also at `http::metrics`).

use std::sync::atomic::AtomicU64;

use crate::metrics::LabeledCounters;

/// Per route pattern: (status, count) pairs.
pub type RequestCounts =
    std::collections::HashMap<String, Vec<(u16, std::sync::atomic::AtomicU64)>>;

/// HTTP counters.
#[derive(Debug)]
pub struct HttpMetrics {
    /// Boot requests by outcome.
    pub boot: LabeledCounters<7>,
    /// Requests by route pattern and status; a read lock and an atomic add per request,
    /// the write lock only the first time a (route, status) pair is seen.
    pub requests: std::sync::RwLock<RequestCounts>,
    /// Connections closed at accept because a cap was full, by cap (`global`,
    /// `per_source`).
    pub refused: LabeledCounters<2>,
    /// Connections closed because a timeout ran out, by timeout (`header`: no request
    /// head or TLS handshake in time; `idle`: no byte moved; `request`: not answered in
    /// time).
    pub timed_out: LabeledCounters<3>,
    /// Connections open now, over every HTTP listener.
    pub open: AtomicU64,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            boot: LabeledCounters::new([
                "first_stage",
                "local",
                "remote",
                "fallback",
                "not_found",
                "miss",
                "bad_request",
            ]),
            requests: Default::default(),
            refused: LabeledCounters::new(["global", "per_source"]),
            timed_out: LabeledCounters::new(["header", "idle", "request"]),
            open: AtomicU64::new(0),
        }
    }
}

impl HttpMetrics {
    pub(super) fn count(&self, outcome: &str) {
        self.boot.inc(outcome);
    }

    /// Requests counted with `outcome`.
    pub fn get(&self, outcome: &str) -> u64 {
        self.boot.get(outcome)
    }

    /// Counts one answered request. `route` is the matched pattern (never the raw path,
    /// which is request data), or `unmatched`.
    pub fn request(&self, route: &str, status: u16) {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        {
            let map = self.requests.read().unwrap_or_else(|p| p.into_inner());
            if let Some((_, c)) = map
                .get(route)
                .and_then(|v| v.iter().find(|(s, _)| *s == status))
            {
                c.fetch_add(1, Relaxed);
                return;
            }
        }
        let mut map = self.requests.write().unwrap_or_else(|p| p.into_inner());
        let v = map.entry(route.to_string()).or_default();
        match v.iter().find(|(s, _)| *s == status) {
            Some((_, c)) => {
                c.fetch_add(1, Relaxed);
            }
            None => v.push((status, AtomicU64::new(1))),
        }
    }

    /// Writes the Prometheus exposition.
    pub fn render_prometheus(&self, out: &mut String) {
        crate::metrics::header(
            out,
            "shardboot_http_requests_total",
            "counter",
            "HTTP requests by route pattern and status",
        );
        let map = self.requests.read().unwrap_or_else(|p| p.into_inner());
        let mut routes: Vec<_> = map.iter().collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        for (route, counts) in routes {
            for (status, c) in counts {
                out.push_str(&format!(
                    "shardboot_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {}\n",
                    c.load(std::sync::atomic::Ordering::Relaxed)
                ));
            }
        }
        self.boot.render(
            out,
            "shardboot_http_boot_requests_total",
            "outcome",
            "Boot script requests by outcome",
        );
        self.refused.render(
            out,
            "shardboot_http_connections_refused_total",
            "cap",
            "HTTP connections closed at accept because a connection cap was full",
        );
        self.timed_out.render(
            out,
            "shardboot_http_connections_timed_out_total",
            "timeout",
            "HTTP connections closed because a timeout ran out",
        );
        crate::metrics::header(
            out,
            "shardboot_http_connections_open",
            "gauge",
            "HTTP connections open now",
        );
        out.push_str(&format!(
            "shardboot_http_connections_open {}\n",
            self.open.load(std::sync::atomic::Ordering::Relaxed)
        ));
    }
}
