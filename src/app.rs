//! Wiring: open the store, start each listener with its settings, its handles and the
//! shutdown token, and run them until shutdown. Decides nothing: every rule lives in
//! the module it belongs to.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::dhcp::host_policy::{watch, HostPolicies};
use crate::dhcp::shell::{self as dhcp, DhcpHandle, ServerError, StartError, Stored};
use crate::handles::Handles;
use crate::http::{HttpError, HttpState};
use crate::store::{self, Committer, StoreError};
use crate::tftp;

/// Errors that stop shardboot from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The lease store cannot be opened or read.
    #[error("lease store in {}: {source}", path.display())]
    Store {
        /// The store directory.
        path: PathBuf,
        /// The store error.
        source: StoreError,
    },
    /// The committer thread cannot be started.
    #[error("starting the lease store committer: {0}")]
    Committer(std::io::Error),
    /// The DHCP server cannot start.
    #[error(transparent)]
    DhcpStart(#[from] StartError),
    /// The DHCP server stopped with an error.
    #[error(transparent)]
    Dhcp(#[from] ServerError),
    /// The owner resolver cannot be set up (the Ironic CA file, the member secret).
    #[error(transparent)]
    Owner(#[from] crate::owner::OwnerError),
    /// An HTTP listener cannot start or failed.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The hosts directory cannot be read at start.
    #[error("dhcp.hostsdir: cannot read {}: {source}", dir.display())]
    HostsDir {
        /// The configured directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The options directory cannot be read at start.
    #[error("dhcp.optsdir: cannot read {}: {source}", dir.display())]
    OptsDir {
        /// The configured directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TFTP socket cannot be bound.
    #[error("cannot bind TFTP socket on {addr}: {source}")]
    TftpBind {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The DHCPv6 server cannot start or failed.
    #[error(transparent)]
    Dhcp6(#[from] crate::dhcp6::shell::Server6Error),
    /// The TFTP server stopped with an error.
    #[error(transparent)]
    Tftp(#[from] tftp::TftpError),
    /// The shared lease store cannot be used.
    #[error(transparent)]
    Shared(#[from] crate::shared::SharedError),
    /// The member secret cannot be read from the shared lease store.
    #[error(transparent)]
    SharedSecret(#[from] crate::shared::member_secret::MemberSecretError),
}

/// The tasks of a running instance. The first to fail stops the others.
struct Tasks(JoinSet<Result<(), AppError>>);

impl Tasks {
    fn run<E: Into<AppError>>(
        &mut self,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) {
        self.0.spawn(async move { task.await.map_err(Into::into) });
    }

    fn background(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(async move {
            task.await;
            Ok(())
        });
    }
}

/// Runs every enabled listener until `shutdown` is cancelled. If one stops with an
/// error, the others are shut down and that error is returned. `loader` reads the
/// configuration again for a reload (SIGHUP, `POST /v1/reload`); without one, a
/// reload is refused.
pub async fn run(
    config: Config,
    loader: Option<crate::reload::Loader>,
    handles: Handles,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    let mut tasks = Tasks(JoinSet::new());
    crate::limits::raise_open_files();
    // Before any HTTPS client is built (member probes, checks, timeline asks).
    if let Some(ca) = &config.http.chain_ca {
        crate::site_ca::install(ca).map_err(HttpError::from)?;
    }
    let config = Arc::new(config);
    let store_err = |source| AppError::Store {
        path: store::path_in(&config.state_dir),
        source,
    };
    let store = store::open(&config.state_dir).map_err(store_err)?;
    let mut snapshot = store.load().map_err(store_err)?;
    // With a shared lease store: the database's bindings over this member's cache,
    // before anything is answered.
    let mut shared = None;
    let mut followed_since = 0;
    if let Some(settings) = &config.store.shared {
        let s = crate::shared::SharedStore::connect(
            settings,
            member_name(&config),
            crate::owner::MemberList::of(&config.members).fingerprint(),
            handles.store.clone(),
            &shutdown,
        )
        .await?;
        let loaded = s.load(crate::clock::unix_now()).await?;
        info!(
            leases = loaded.leases.len(),
            leases6 = loaded.leases6.len(),
            "bindings read from the shared lease store"
        );
        // The cache takes the database's word too: what this member answers renewals
        // from while the database is unreachable, after a restart included.
        let cached = loaded.over(&mut snapshot.leases, &mut snapshot.leases6);
        if !cached.is_empty() {
            store.commit(&cached).map_err(store_err)?;
        }
        s.seed(
            &loaded,
            &mut snapshot.leases,
            &mut snapshot.leases6,
            crate::clock::unix_now(),
        )
        .await;
        followed_since = loaded.newest_ms;
        shared = Some(s);
    }
    handles
        .store
        .set_aside
        .set((snapshot.set_aside.len() + snapshot.set_aside6.len()) as u64);
    // Without a secret file, members of one shared store share the secret the store
    // keeps (`shared::member_secret`): they already trust that database with every
    // binding. A configured file wins.
    let stored_secret = match (&shared, &config.owner.member_secret_file) {
        (Some(s), None) => Some(s.member_secret().await?),
        _ => None,
    };
    let (resolver, owner_tasks) =
        crate::owner::start(&config, &shutdown, stored_secret.as_deref())?;
    owner_tasks.into_iter().for_each(|t| tasks.background(t));
    // With a shared lease store the database decides every binding before its ACK.
    let arbiter = shared.as_ref().map(|s| {
        Arc::new(crate::shared::hook::Hook::start(
            s.clone(),
            &tokio::runtime::Handle::current(),
        )) as Arc<dyn store::Arbiter>
    });
    let committer = Committer::start_decided(store.clone(), handles.store.clone(), arbiter)
        .map_err(AppError::Committer)?;
    let policies = Arc::new(HostPolicies::new(snapshot.host_policies));
    // The timeline read back from disk before any listener records to it.
    let timeline = &handles.timeline;
    for t in crate::timeline::run::start(
        &config,
        timeline,
        store.clone(),
        policies.clone(),
        &resolver,
        handles.dhcp.clone(),
        &shutdown,
    ) {
        tasks.background(t);
    }
    let dirs = [
        (&config.dhcp.hostsdir, watch::Watched::Hosts),
        (&config.dhcp.optsdir, watch::Watched::Options),
    ];
    for (dir, kind) in dirs {
        let Some(dir) = dir.clone() else { continue };
        let poll = config.dhcp.hostsdir_poll;
        let watcher = watch::follow(dir.clone(), kind, poll, policies.clone(), shutdown.clone())
            .map_err(|source| match kind {
                watch::Watched::Hosts => AppError::HostsDir { dir, source },
                watch::Watched::Options => AppError::OptsDir { dir, source },
            })?;
        tasks.background(watcher);
    }
    // One root and file cache for TFTP and the HTTP file route: the same iPXE binaries.
    let files = tftp::FileRoot::new(config.tftp.settings.clone());
    if config.tftp.enabled {
        let addr = config.tftp.listen;
        let socket = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|source| AppError::TftpBind { addr, source })?;
        info!(listen = %addr, root = %config.tftp.settings.root.display(), "TFTP listening");
        tasks.run(tftp::run(
            socket,
            files.clone(),
            handles.tftp.clone(),
            shutdown.clone(),
        ));
    }
    let (dhcp_handle, control) = DhcpHandle::channel();
    let (dhcp6_handle, control6) = crate::dhcp6::shell::Dhcp6Handle::channel();
    if config.http.enabled {
        let mut state = HttpState::new(
            config.clone(),
            store.clone(),
            committer.clone(),
            policies.clone(),
            config.dhcp.enabled.then(|| dhcp_handle.clone()),
            files,
            resolver.clone(),
            handles.clone(),
        );
        state.shared = shared.clone();
        state.dhcp6 = (!config.subnets6.is_empty()).then(|| dhcp6_handle.clone());
        for listener in crate::http::start(Arc::new(state), shutdown.clone()).await? {
            tasks.run(listener);
        }
    }
    if !config.subnets6.is_empty() {
        let parts = crate::dhcp6::shell::Parts6 {
            leases: snapshot.leases6.clone(),
            duid: snapshot.server_duid.clone(),
            set_aside: snapshot
                .set_aside6
                .iter()
                .filter_map(|s| s.address6())
                .collect(),
            committer: committer.clone(),
            store: handles.store.clone(),
            responder: crate::dhcp::responsibility::Responder::new(
                &config,
                resolver.clone(),
                handles.dhcp.clone(),
            ),
            roster: config
                .owner
                .members
                .follows()
                .then(|| resolver.roster().clone()),
            policies: policies.clone(),
            metrics: handles.dhcp6.clone(),
            control: Some(control6),
            timeline: handles.timeline.clone(),
        };
        tasks.run(crate::dhcp6::shell::run(
            config.clone(),
            parts,
            shutdown.clone(),
        ));
    }
    let mut ra_interfaces: Vec<(String, Vec<u8>)> = Vec::new();
    if config.dhcp.enabled {
        let stored = Stored {
            leases: snapshot.leases,
            reservations: snapshot.reservations,
            membership: snapshot.membership,
            set_aside: snapshot.set_aside,
        };
        let parts = dhcp::Parts {
            stored,
            committer,
            store: handles.store.clone(),
            policies,
            resolver: resolver.clone(),
            metrics: handles.dhcp.clone(),
            timeline: handles.timeline.clone(),
            control: Some(control),
            shared: shared.clone(),
        };
        let server = dhcp::prepare(&config, parts).await?;
        let interfaces: Vec<String> = server
            .listeners
            .iter()
            .map(|l| l.interface.name.clone())
            .collect();
        tasks.run(dhcp::run(server, shutdown.clone()));
        if config.owner.members.follows() {
            tasks.background(Box::pin(crate::dhcp::shell::follow_members(
                resolver.roster().clone(),
                dhcp_handle.clone(),
                handles.dhcp.clone(),
                shutdown.clone(),
            )));
        }
        if let Some(path) = config.dhcp.leasefile.clone() {
            tasks.background(crate::dhcp::leasefile::follow(
                path,
                store.clone(),
                shutdown.clone(),
            ));
        }
        ra_interfaces.extend(
            interfaces
                .into_iter()
                .map(|i| (i, crate::ra::wire::no_router_advertisement().to_vec())),
        );
    } else {
        info!("DHCP (IPv4) disabled");
    }
    if config.ra.enabled {
        // A [[subnet6]] link gets the managed advertisement, whatever v4 serves on it.
        for (name, ra) in crate::dhcp6::shell::socket::managed_advertisements(&config) {
            ra_interfaces.retain(|(n, _)| *n != name);
            ra_interfaces.push((name, ra));
        }
        tasks.background(crate::ra::server::start(
            &ra_interfaces,
            config.ra.stand_down_secs,
            handles.ra.clone(),
            shutdown.clone(),
        ));
    }
    if let (Some(s), Some(settings)) = (&shared, &config.store.shared) {
        let several = config.owner.members.several(config.members.len());
        let to = crate::shared::follow::Followers {
            dhcp: config.dhcp.enabled.then(|| dhcp_handle.clone()),
            dhcp6: (!config.subnets6.is_empty()).then(|| dhcp6_handle.clone()),
            liveness: several.then(|| {
                crate::shared::follow::Liveness::new(
                    resolver.roster().clone(),
                    resolver.live().clone(),
                    settings.heartbeat,
                    config.health.dead_after,
                )
            }),
        };
        tasks.background(crate::shared::follow::follow(
            s.clone(),
            to,
            followed_since,
            settings.poll,
            settings.heartbeat,
            shutdown.clone(),
        ));
    }
    // Reloads (SIGHUP, POST /v1/reload) hand the engines their new live parts.
    let engines = crate::reload::Engines {
        dhcp: config.dhcp.enabled.then(|| dhcp_handle.clone()),
        dhcp6: (!config.subnets6.is_empty()).then(|| dhcp6_handle.clone()),
    };
    tasks.background(Box::pin(crate::reload::serve(
        handles.reload.clone(),
        loader,
        (*config).clone(),
        engines,
        shutdown.clone(),
    )));
    let mut first_error = None;
    while let Some(joined) = tasks.0.join_next().await {
        if let Ok(Err(e)) = joined {
            shutdown.cancel();
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// This member's name in the shared store: `owner.self`, else the host's name (a
/// single instance).
fn member_name(config: &Config) -> String {
    config.owner.self_name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().chars().take(64).collect())
            .unwrap_or_else(|_| "shardboot".into())
    })
}
