//! Counters of the shared lease store, for `/metrics`.

use crate::metrics::{header, value, Counter, Histogram};

/// Counters of the shared lease store.
#[derive(Debug, Default)]
pub struct SharedMetrics {
    /// Transactions committed.
    pub batches: Counter,
    /// Group commits with lease changes written: one transaction takes every group
    /// commit that queued while the one before it ran.
    pub group_commits: Counter,
    /// Lease changes in them.
    pub changes: Counter,
    /// Writes the database refused (another client's live binding): withdrawn, never
    /// acknowledged.
    pub refused: Counter,
    /// Attempts tried again after a transient error (a failover, a deadlock, a Galera
    /// certification conflict).
    pub retries: Counter,
    /// Times the database became unreachable.
    pub outages: Counter,
    /// Lease changes not acknowledged because the database was unreachable.
    pub unavailable: Counter,
    /// Renewals acknowledged while unreachable, within the binding's current end.
    pub covered: Counter,
    /// Other members' binding changes read into this member's cache.
    pub followed: Counter,
    /// Rows this build could not read (skipped).
    pub unreadable: Counter,
    /// Time of one transaction, retries included.
    pub latency: Histogram,
}

impl SharedMetrics {
    /// Writes the Prometheus exposition, with whether the database is reachable.
    pub fn render_prometheus(&self, out: &mut String, up: bool) {
        for (name, help, c) in [
            (
                "shardboot_shared_store_batches_total",
                "Transactions of lease changes committed to the shared store",
                &self.batches,
            ),
            (
                "shardboot_shared_store_group_commits_total",
                "Group commits written to the shared store (those that queued behind a transaction share the next one)",
                &self.group_commits,
            ),
            (
                "shardboot_shared_store_changes_total",
                "Lease changes committed to the shared store",
                &self.changes,
            ),
            (
                "shardboot_shared_store_refused_total",
                "Lease writes the shared store refused (address held by another client; never acknowledged)",
                &self.refused,
            ),
            (
                "shardboot_shared_store_retries_total",
                "Shared store transactions tried again after a transient error",
                &self.retries,
            ),
            (
                "shardboot_shared_store_outages_total",
                "Times the shared store became unreachable",
                &self.outages,
            ),
            (
                "shardboot_shared_store_unavailable_total",
                "Lease changes not acknowledged while the shared store was unreachable",
                &self.unavailable,
            ),
            (
                "shardboot_shared_store_covered_renewals_total",
                "Renewals acknowledged while the shared store was unreachable, within the binding's current end",
                &self.covered,
            ),
            (
                "shardboot_shared_store_followed_total",
                "Other members' binding changes read into this member's cache",
                &self.followed,
            ),
            (
                "shardboot_shared_store_unreadable_rows_total",
                "Shared store rows this build could not read",
                &self.unreadable,
            ),
        ] {
            header(out, name, "counter", help);
            value(out, name, c.get());
        }
        header(
            out,
            "shardboot_shared_store_up",
            "gauge",
            "1 while the shared lease store answers",
        );
        value(out, "shardboot_shared_store_up", u64::from(up));
        self.latency.render(
            out,
            "shardboot_shared_store_seconds",
            "Time of one shared store transaction, retries included",
        );
    }
}
