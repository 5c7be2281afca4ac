//! Members from Ironic or a file: every change of the roster is handed to the engine thread,
//! which reshares the ranges and starts a transition (`dhcp::control::Control::Members`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::dhcp::control::DhcpHandle;
use crate::dhcp::metrics::DhcpMetrics;
use crate::owner::roster::Roster;

/// Forwards roster changes to the engine until `shutdown`. The list in force when it
/// starts is sent too (the engine ignores a list it already serves), so a change made
/// between start-up and this task is not lost.
pub async fn follow_members(
    roster: Arc<Roster>,
    dhcp: DhcpHandle,
    metrics: Arc<DhcpMetrics>,
    shutdown: CancellationToken,
) {
    let mut changes = roster.subscribe();
    loop {
        let (list, conductors) = {
            let view = changes.borrow_and_update();
            (view.list.clone(), view.conductors())
        };
        match dhcp.change_members(list, conductors).await {
            Ok(Some(until)) => metrics.transition_until.set(until),
            Ok(None) => {}
            Err(e) => warn!(error = %e, "member change not applied to DHCP"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}
