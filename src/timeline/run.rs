//! The timeline's start-up and its background tasks: the disk writer (every
//! `timeline.flush_ms`, and once more at shutdown), the enrolled machines (leases,
//! reservations, `[[host]]`s, host policies and the MACs of Ironic's ports, read again
//! every [`ENROLLED_EVERY`]), which the timeline keeps with the known machines, and
//! the board's pool fill sample (every `pool_fill::EVERY`).
//!
//! A timeline that cannot be kept on disk never stops shardboot: it is logged once and
//! the timeline stays in memory.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::disk::{self, Disk};
use super::pool_fill::{self, Sample};
use super::{Limits, Timeline};
use crate::config::Config;
use crate::dhcp::host_policy::HostPolicies;
use crate::dhcp::metrics::DhcpMetrics;
use crate::mac::MacAddr;
use crate::owner::Resolver;
use crate::store::{LeaseQuery, Store};

/// How often the enrolled machines are read again.
pub const ENROLLED_EVERY: Duration = Duration::from_secs(5);
/// Most enrolled machines remembered (more than any provisioning network holds).
const MAX_ENROLLED: usize = 500_000;

/// A background task, run until shutdown.
pub type Background = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Sets the timeline's limits, reads it back from `<state_dir>/timeline/` and returns
/// the tasks that keep it on disk, keep its enrolled machines current and sample the
/// pools `dhcp` publishes for the board.
pub fn start(
    config: &Config,
    timeline: &Arc<Timeline>,
    store: Arc<dyn Store>,
    policies: Arc<HostPolicies>,
    resolver: &Arc<Resolver>,
    dhcp: Arc<DhcpMetrics>,
    shutdown: &CancellationToken,
) -> Vec<Background> {
    let settings = &config.timeline;
    let limits = Limits::from(settings);
    let mut tasks: Vec<Background> = Vec::new();
    let hosts: Vec<MacAddr> = config.hosts.iter().map(|h| h.mac).collect();
    timeline.configure(limits, settings.persist);
    let sources = Sources {
        store,
        policies,
        resolver: resolver.clone(),
        hosts,
    };
    timeline.set_enrolled(sources.enrolled());
    tasks.push(Box::pin(follow_enrolled(
        timeline.clone(),
        Arc::new(sources),
        shutdown.clone(),
    )));
    tasks.push(Box::pin(sample_pools(
        timeline.clone(),
        dhcp,
        shutdown.clone(),
    )));
    if settings.persist {
        match open(&config.state_dir.join(disk::DIR), limits, timeline) {
            Ok(d) => tasks.push(Box::pin(write(
                timeline.clone(),
                d,
                settings.flush,
                shutdown.clone(),
            ))),
            Err(e) => {
                warn!(error = %e, "the timeline is kept in memory only");
                timeline.configure(limits, false);
            }
        }
    }
    tasks
}

fn open(dir: &Path, limits: Limits, timeline: &Timeline) -> Result<Disk, disk::DiskError> {
    let (d, loaded) = Disk::open(dir, limits)?;
    for j in d.events() {
        timeline.replay(j);
    }
    info!(
        events = loaded.events,
        unreadable = loaded.unreadable,
        dir = %dir.display(),
        "timeline read back"
    );
    Ok(d)
}

/// Writes what was recorded every `every`, and once more at shutdown.
async fn write(timeline: Arc<Timeline>, d: Disk, every: Duration, shutdown: CancellationToken) {
    let d = Arc::new(Mutex::new(d));
    let mut failing = false;
    let mut spare = Vec::new();
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            _ = shutdown.cancelled() => true,
        };
        let (mut batch, dropped) = timeline.take_journal(std::mem::take(&mut spare));
        if dropped > 0 {
            warn!(dropped, "timeline events not written: the disk fell behind");
        }
        let d = d.clone();
        let written = tokio::task::spawn_blocking(move || {
            let r = d
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut batch);
            (r, batch)
        })
        .await;
        if let Ok((result, emptied)) = written {
            spare = emptied;
            match result {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    warn!(error = %e, "timeline events not written");
                }
                Err(_) => {}
            }
        }
        if stop {
            return;
        }
    }
}

/// Where the enrolled machines are read from.
struct Sources {
    store: Arc<dyn Store>,
    policies: Arc<HostPolicies>,
    resolver: Arc<Resolver>,
    hosts: Vec<MacAddr>,
}

impl Sources {
    /// Every MAC with a lease (v4, or v6 with a MAC), a reservation, a `[[host]]`, a
    /// host policy or a port in Ironic. A store that cannot be read gives what could
    /// be read.
    fn enrolled(&self) -> HashSet<MacAddr> {
        let mut out: HashSet<MacAddr> = self.hosts.iter().copied().collect();
        out.extend(self.policies.list().into_iter().map(|(mac, _)| mac));
        if let Some(ironic) = self.resolver.ironic() {
            out.extend(ironic.enrolled());
        }
        if let Ok(r) = self.store.reservations() {
            out.extend(r.into_iter().map(|r| r.mac));
        }
        if let Ok(leases) = self.store.leases(&LeaseQuery::default(), MAX_ENROLLED) {
            out.extend(leases.into_iter().map(|l| l.mac));
        }
        if let Ok(leases) = self.store.leases6(None, MAX_ENROLLED) {
            out.extend(leases.into_iter().filter_map(|l| l.mac));
        }
        out
    }
}

/// Reads the enrolled machines again every [`ENROLLED_EVERY`].
async fn follow_enrolled(
    timeline: Arc<Timeline>,
    sources: Arc<Sources>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ENROLLED_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
        let sources = sources.clone();
        if let Ok(macs) = tokio::task::spawn_blocking(move || sources.enrolled()).await {
            timeline.set_enrolled(macs);
        }
    }
}

/// Samples the pools every [`pool_fill::EVERY`] (the first a minute after start: the
/// board adds the pools of the moment to what it shows).
async fn sample_pools(
    timeline: Arc<Timeline>,
    dhcp: Arc<DhcpMetrics>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pool_fill::EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
        let pools = dhcp.pools.lock().map(|p| p.clone()).unwrap_or_default();
        let sample = Sample::of(
            crate::clock::unix_now_ms(),
            pools.iter().map(|p| (p.in_use, p.free)),
        );
        timeline.sample_pools(sample);
    }
}
