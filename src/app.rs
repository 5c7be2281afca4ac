//! Wiring: open the lease store, bind the listeners and run them until shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::server::{self, Listener, ServerParts};
use crate::dhcp::socket::{self, SocketError};
use crate::dhcp::Engine;
use crate::lease::{LeaseStore, SledStore, StoreError};

/// Errors that stop shardboot from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The state directory cannot be created.
    #[error("state_dir {path}: {source}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The lease store cannot be opened or read.
    #[error("lease store in {path}: {source}")]
    Store {
        /// The store directory.
        path: PathBuf,
        /// The store error.
        source: StoreError,
    },
    /// Interfaces or sockets.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The DHCP server stopped with an error.
    #[error(transparent)]
    Dhcp(#[from] server::ServerError),
}

/// Where the lease database lives inside `state_dir`.
pub fn lease_store_path(state_dir: &Path) -> PathBuf {
    state_dir.join("leases.sled")
}

/// Opens the lease store under `state_dir`, creating the directory if needed.
pub fn open_store(state_dir: &Path) -> Result<SledStore, AppError> {
    std::fs::create_dir_all(state_dir).map_err(|source| AppError::StateDir {
        path: state_dir.to_path_buf(),
        source,
    })?;
    let path = lease_store_path(state_dir);
    SledStore::open(&path).map_err(|source| AppError::Store { path, source })
}

/// Shared handles of a running instance, for the HTTP listener and tests.
#[derive(Clone, Default)]
pub struct Handles {
    /// DHCP metrics.
    pub dhcp: Arc<DhcpMetrics>,
}

/// Runs every enabled listener until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    handles: Handles,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    let store = Arc::new(open_store(&config.state_dir)?);
    let stored = store.load().map_err(|source| AppError::Store {
        path: lease_store_path(&config.state_dir),
        source,
    })?;
    info!(leases = stored.len(), state_dir = %config.state_dir.display(), "lease store open");
    let now = server::unix_now();
    let engine = Engine::new(&config, stored, now);

    if !config.dhcp.enabled {
        info!("DHCP disabled");
        shutdown.cancelled().await;
        return Ok(());
    }
    let host = socket::host_addresses()?;
    let interfaces = socket::resolve_interfaces(&config, &host)?;
    let mut listeners = Vec::with_capacity(interfaces.len());
    for interface in interfaces {
        let socket = socket::bind(&interface.name, config.dhcp.port)?;
        info!(interface = %interface.name, address = %interface.addr, port = config.dhcp.port, "DHCP listening");
        listeners.push(Listener { interface, socket });
    }
    let parts = ServerParts {
        listeners,
        engine,
        store,
        metrics: handles.dhcp.clone(),
        port: config.dhcp.port,
        reclaim_interval: Duration::from_secs(config.dhcp.reclaim_interval_secs.into()),
        responsibility: None,
    };
    server::run(parts, shutdown).await?;
    Ok(())
}
