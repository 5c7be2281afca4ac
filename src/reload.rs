//! Reloading the configuration while running: SIGHUP and `POST /v1/reload` ask, one
//! task reads the configuration again from where it came from, lets
//! `config::reload::plan` say what may change live, and hands the DHCP engines their
//! new live parts between packets. A file that does not validate changes nothing.

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
}

/// A reload request: the answer goes back on the sender.
type Request = oneshot::Sender<Result<ReloadReport, ReloadError>>;

/// Where reloads are asked for (signal handler, operator API) and the one task that
/// performs them takes them from.
#[derive(Debug)]
pub struct ReloadRequests {
    tx: mpsc::Sender<Request>,
    rx: Mutex<Option<mpsc::Receiver<Request>>>,
}

impl Default for ReloadRequests {
    fn default() -> Self {
        // A few requests may wait: reloads are quick, and one more SIGHUP while one
        // runs reads the file again after it.
        let (tx, rx) = mpsc::channel(4);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
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
    loop {
        let request = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        let outcome = match &loader {
            None => Err(ReloadError::Unavailable),
            Some(load) => reload_once(load, &mut running, &engines).await,
        };
        log(&outcome);
        let _ = request.send(outcome);
    }
}

async fn reload_once(
    load: &Loader,
    running: &mut Config,
    engines: &Engines,
) -> Result<ReloadReport, ReloadError> {
    let load = load.clone();
    let new = tokio::task::spawn_blocking(move || load())
        .await
        .map_err(|e| ReloadError::Invalid(e.to_string()))?
        .map_err(ReloadError::Invalid)?;
    let (next, report) = plan(running, &new);
    if report.applied.is_empty() {
        return Ok(report);
    }
    let next = Arc::new(next);
    if let Some(h) = &engines.dhcp {
        h.reconfigure(next.clone())
            .await
            .map_err(|source| ReloadError::Engine {
                family: "DHCPv4",
                source,
            })?;
    }
    if let Some(h) = &engines.dhcp6 {
        h.reconfigure(next.clone())
            .await
            .map_err(|source| ReloadError::Engine {
                family: "DHCPv6",
                source,
            })?;
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
