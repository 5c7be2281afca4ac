//! Reloading the configuration while running: SIGHUP and `POST /v1/reload` ask, one
//! task reads the configuration again from where it came from, lets
//! `config::reload::plan` say what may change live, and hands the DHCP engines their
//! new live parts between packets, and swaps the log filter when `log_level` changed
//! (unless `SHARDBOOT_LOG` set it at start: the variable wins). A file that does not
//! validate changes nothing.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::reload::{plan, ReloadReport};
use crate::config::Config;
use crate::dhcp::shell::{ControlError, DhcpHandle};
use crate::dhcp6::shell::Dhcp6Handle;

/// Reads the configuration again, the way the running one was read (file, built-in
/// default or ironic-image's variables, with the same overrides on top).
pub type Loader = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// Replaces the running log filter with a `log_level` directive (the tracing
/// subscriber's reload handle, installed by `main`).
pub type LogFilter = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The configuration read again does not validate.
    #[error("the configuration does not validate, nothing changed: {0}")]
    Invalid(String),
    /// This server was started without a way to read its configuration again.
    #[error("this server cannot reload its configuration")]
    Unavailable,
    /// A DHCP engine did not take the change.
    #[error("the {family} engine did not take the new configuration: {source}")]
    Engine {
        /// "DHCPv4" or "DHCPv6".
        family: &'static str,
        /// Why.
        source: ControlError,
    },
    /// The log filter could not be swapped.
    #[error("the log filter did not take log_level: {0}")]
    LogLevel(String),
}

/// A reload request: the answer goes back on the sender.
type Request = oneshot::Sender<Result<ReloadReport, ReloadError>>;

/// Where reloads are asked for (signal handler, operator API) and the one task that
/// performs them takes them from.
pub struct ReloadRequests {
    tx: mpsc::Sender<Request>,
    rx: Mutex<Option<mpsc::Receiver<Request>>>,
    /// `None`: the log filter is fixed (`SHARDBOOT_LOG`, or no subscriber of ours).
    log_filter: Mutex<Option<LogFilter>>,
}

impl std::fmt::Debug for ReloadRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadRequests").finish_non_exhaustive()
    }
}

impl Default for ReloadRequests {
    fn default() -> Self {
        // A few requests may wait: reloads are quick, and one more SIGHUP while one
        // runs reads the file again after it.
        let (tx, rx) = mpsc::channel(4);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            log_filter: Mutex::new(None),
        }
    }
}

impl ReloadRequests {
    /// Asks for a reload and waits for what it did.
    pub async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        let (done, answer) = oneshot::channel();
        self.tx
            .send(done)
            .await
            .map_err(|_| ReloadError::Unavailable)?;
        answer.await.unwrap_or(Err(ReloadError::Unavailable))
    }

    /// Asks for a reload without waiting (a signal): the task logs what it did.
    pub fn reload_detached(&self) {
        let (done, _answer) = oneshot::channel();
        if self.tx.try_send(done).is_err() {
            warn!("reload not queued: reloads already wait, or this server cannot reload");
        }
    }

    /// Lets reloads apply `log_level` through `filter` (set before the server starts).
    pub fn set_log_filter(&self, filter: LogFilter) {
        *self.log_filter.lock().unwrap_or_else(|e| e.into_inner()) = Some(filter);
    }

    fn log_filter(&self) -> Option<LogFilter> {
        self.log_filter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The receiving end, taken once by the task that performs reloads.
    fn take(&self) -> Option<mpsc::Receiver<Request>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The engines a reload reconfigures (`None`: that family is not served).
#[derive(Debug, Clone, Default)]
pub struct Engines {
    /// DHCPv4.
    pub dhcp: Option<DhcpHandle>,
    /// DHCPv6.
    pub dhcp6: Option<Dhcp6Handle>,
}

/// Performs reloads until `shutdown`, starting from `running`. Without a `loader`,
/// every request is answered [`ReloadError::Unavailable`].
pub async fn serve(
    requests: Arc<ReloadRequests>,
    loader: Option<Loader>,
    running: Config,
    engines: Engines,
    shutdown: CancellationToken,
) {
    let Some(mut rx) = requests.take() else {
        return;
    };
    let mut running = running;
    let log_filter = requests.log_filter();
    loop {
        let request = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        let outcome = match &loader {
            None => Err(ReloadError::Unavailable),
            Some(load) => reload_once(load, &mut running, &engines, log_filter.as_ref()).await,
        };
        log(&outcome);
        let _ = request.send(outcome);
    }
}

async fn reload_once(
    load: &Loader,
    running: &mut Config,
    engines: &Engines,
    log_filter: Option<&LogFilter>,
) -> Result<ReloadReport, ReloadError> {
    let load = load.clone();
    let new = tokio::task::spawn_blocking(move || load())
        .await
        .map_err(|e| ReloadError::Invalid(e.to_string()))?
        .map_err(ReloadError::Invalid)?;
    let (mut next, mut report) = plan(running, &new);
    let log_level = report.applied.iter().any(|k| k == "log_level");
    if log_level && log_filter.is_none() {
        // SHARDBOOT_LOG chose the filter at start and keeps it.
        report.applied.retain(|k| k != "log_level");
        report
            .needs_restart
            .push("log_level (SHARDBOOT_LOG is set and wins)".into());
        next.log_level = running.log_level.clone();
    }
    if report.applied.is_empty() {
        return Ok(report);
    }
    let next = Arc::new(next);
    let engines_too = report.applied.iter().any(|k| k != "log_level");
    if let Some(h) = engines.dhcp.as_ref().filter(|_| engines_too) {
        h.reconfigure(next.clone())
            .await
            .map_err(|source| ReloadError::Engine {
                family: "DHCPv4",
                source,
            })?;
    }
    if let Some(h) = engines.dhcp6.as_ref().filter(|_| engines_too) {
        h.reconfigure(next.clone())
            .await
            .map_err(|source| ReloadError::Engine {
                family: "DHCPv6",
                source,
            })?;
    }
    // Last, once the engines took theirs: a reload applies whole or not at all, and the
    // filter was checked when the configuration validated.
    if let Some(set) = log_filter.filter(|_| log_level) {
        set(&next.log_level).map_err(ReloadError::LogLevel)?;
    }
    *running = Arc::unwrap_or_clone(next);
    Ok(report)
}

fn log(outcome: &Result<ReloadReport, ReloadError>) {
    match outcome {
        Ok(r) if r.unchanged() => info!("configuration reloaded: nothing changed"),
        Ok(r) => {
            info!(applied = %r.applied.join(", "), "configuration reloaded");
            if !r.needs_restart.is_empty() {
                warn!(
                    keys = %r.needs_restart.join(", "),
                    "configuration reloaded, but these changes need a restart and were left as they run"
                );
            }
        }
        Err(e) => error!(error = %e, "configuration reload refused"),
    }
}
