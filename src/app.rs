//! Wiring: open the lease store, bind the listeners and run them until shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Config;
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::server::{self, Listener, ServerParts};
use crate::dhcp::socket::{self, SocketError};
use crate::dhcp::Engine;
use crate::lease::Membership;
use crate::lease::{LeaseStore, SledStore, StoreError};
use crate::tftp::{self, TftpMetrics};

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
    /// The Ironic owner resolver cannot be set up (its CA file).
    #[error(transparent)]
    Ironic(#[from] crate::owner::ironic::IronicError),
    /// Another member runs with a different member list.
    #[error(transparent)]
    Members(#[from] crate::owner::health::MemberListMismatch),
    /// A TLS certificate, key or CA file cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::http::tls::TlsError),
    /// The hosts directory cannot be read at start.
    #[error("dhcp.hostsdir: cannot read {}: {source}", dir.display())]
    HostsDir {
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
    /// The HTTP socket cannot be bound or the server failed.
    #[error("HTTP listener on {addr}: {source}")]
    Http {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TFTP server stopped with an error.
    #[error(transparent)]
    Tftp(#[from] tftp::TftpError),
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
    /// TFTP metrics.
    pub tftp: Arc<TftpMetrics>,
    /// HTTP metrics.
    pub http: Arc<crate::http::HttpMetrics>,
    /// Router-solicitation responder metrics.
    pub ra: Arc<crate::ra::server::RaMetrics>,
}

/// Runs every enabled listener until `shutdown` is cancelled. If one stops with an
/// error, the others are shut down and that error is returned.
pub async fn run(
    config: Config,
    handles: Handles,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    let mut tasks: JoinSet<Result<(), AppError>> = JoinSet::new();
    // One store for the DHCP server and the operator API.
    crate::limits::raise_open_files();
    let store = Arc::new(open_store(&config.state_dir)?);
    let policies = Arc::new(crate::dhcp::policy::HostPolicies::open(store.db()).map_err(
        |source| AppError::Store {
            path: lease_store_path(&config.state_dir),
            source,
        },
    )?);
    if let Some(dir) = config.dhcp.hostsdir.clone() {
        // Read before DHCP starts: an unfiltered first poll would let every machine
        // through.
        let files = crate::dhcp::hostsdir_watch::first_scan(&dir, &policies).map_err(|source| {
            AppError::HostsDir {
                dir: dir.clone(),
                source,
            }
        })?;
        let (policies, poll, stop) = (
            policies.clone(),
            config.dhcp.hostsdir_poll,
            shutdown.clone(),
        );
        tasks.spawn(async move {
            crate::dhcp::hostsdir_watch::run(dir, poll, policies, files, stop).await;
            Ok(())
        });
    }
    let (control_tx, control_rx) = tokio::sync::mpsc::channel(64);
    let mut control_rx = Some(control_rx);
    let (prefetch_tx, mut prefetch_rx) = tokio::sync::mpsc::channel(1024);
    let resolver = Arc::new(crate::owner::Resolver::new(&config)?.with_prefetch(prefetch_tx));
    if let Some(ironic) = resolver.ironic() {
        let (refresher, stop) = (ironic.clone(), shutdown.clone());
        tasks.spawn(async move {
            refresher.run_refresh(stop).await;
            Ok(())
        });
        // MACs the DHCP path found missing from the cache, looked up in the background
        // (the DHCP thread never waits on the network).
        let (ironic, stop) = (ironic.clone(), shutdown.clone());
        tasks.spawn(async move {
            loop {
                let mac = tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    m = prefetch_rx.recv() => match m { Some(m) => m, None => return Ok(()) },
                };
                let ironic = ironic.clone();
                tokio::spawn(async move { ironic.lookup(mac).await });
            }
        });
    }
    if config.members.len() > 1 {
        let (members, live, health, stop) = (
            config.members.clone(),
            resolver.live().clone(),
            config.health,
            shutdown.clone(),
        );
        tasks.spawn(async move {
            crate::owner::health::run_probes(members, live, health, stop).await;
            Ok(())
        });
    }
    // One root and file cache for TFTP and the HTTP file route: the same iPXE binaries.
    let files = tftp::FileRoot::new(config.tftp.settings.clone());
    if config.tftp.enabled {
        let addr = config.tftp.listen;
        let socket = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|source| AppError::TftpBind { addr, source })?;
        info!(listen = %addr, root = %config.tftp.settings.root.display(), "TFTP listening");
        let (files, metrics, stop) = (files.clone(), handles.tftp.clone(), shutdown.clone());
        tasks.spawn(async move { Ok(tftp::run(socket, files, metrics, stop).await?) });
    }
    if config.http.enabled {
        let addr = config.http.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AppError::Http { addr, source })?;
        info!(listen = %addr, "HTTP listening");
        let state = Arc::new(crate::http::HttpState {
            config: Arc::new(config.clone()),
            store: store.clone(),
            policies: policies.clone(),
            control: config.dhcp.enabled.then(|| control_tx.clone()),
            auth: crate::http::auth::TokenAuth::new(config.http.token_file.clone()),
            files: files.clone(),
            settings: config.http.clone(),
            resolver: resolver.clone(),
            handles: handles.clone(),
        });
        let tls = match &config.http.tls {
            Some(files) => Some(crate::http::tls::acceptor(files)?),
            None => None,
        };
        use crate::http::Serves;
        // With a separate operator listener, TLS (if any) goes there and the boot
        // listener stays plain HTTP, which every firmware speaks.
        let (main_serves, main_tls, operator) = match config.http.operator_listen {
            Some(op) => (Serves::Boot, None, Some((op, tls))),
            None => (Serves::Everything, tls, None),
        };
        if let Some((op_addr, op_tls)) = operator {
            let op_listener = tokio::net::TcpListener::bind(op_addr)
                .await
                .map_err(|source| AppError::Http {
                    addr: op_addr,
                    source,
                })?;
            info!(listen = %op_addr, tls = op_tls.is_some(), "operator API listening");
            let (state, stop) = (state.clone(), shutdown.clone());
            tasks.spawn(async move {
                crate::http::run_with(op_listener, state, Serves::Operator, op_tls, stop)
                    .await
                    .map_err(|source| AppError::Http {
                        addr: op_addr,
                        source,
                    })
            });
        }
        let stop = shutdown.clone();
        tasks.spawn(async move {
            crate::http::run_with(listener, state, main_serves, main_tls, stop)
                .await
                .map_err(|source| AppError::Http { addr, source })
        });
    }
    let mut peer_transition = 0;
    if config.dhcp.enabled && config.members.len() > 1 {
        peer_transition = crate::owner::health::check_member_lists(
            &config.members,
            config.owner.self_name.as_deref(),
            config.health.timeout,
        )
        .await?;
    }
    if config.dhcp.enabled {
        let mut parts = dhcp_parts(
            &config,
            &handles,
            store.clone(),
            policies.clone(),
            peer_transition,
        )?;
        parts.control = control_rx.take();
        parts.responsibility = responsibility_fn(&config, resolver.clone(), handles.dhcp.clone());
        let stop = shutdown.clone();
        tasks.spawn(async move { Ok(server::run(parts, stop).await?) });
        if config.ra.enabled {
            // The same segments DHCP serves, and only those. The responder only saves
            // boot time: an interface without IPv6 is logged and DHCP goes on.
            let interfaces = socket::resolve_interfaces(&config, &socket::host_addresses()?)?;
            let listeners: Vec<_> = interfaces
                .iter()
                .filter_map(|i| {
                    crate::ra::server::bind(&i.name)
                        .inspect_err(|e| warn!(error = %e, "ra.enabled: not answering router solicitations there"))
                        .ok()
                })
                .collect();
            let (metrics, stop) = (handles.ra.clone(), shutdown.clone());
            let stand_down = config.ra.stand_down_secs;
            tasks.spawn(async move {
                crate::ra::server::run(listeners, stand_down, metrics, stop).await;
                Ok(())
            });
        }
    } else {
        info!("DHCP disabled");
    }
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        if let Ok(Err(e)) = joined {
            shutdown.cancel();
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// With several members, who answers each client (ARCHITECTURE.md, "DHCP decisions" 2):
/// the resolver's owner from cache (never waiting on Ironic), else the RFC 3074 bucket
/// over the live members; others take over when the client's `secs` reaches
/// `takeover_secs`.
fn responsibility_fn(
    config: &Config,
    resolver: Arc<crate::owner::Resolver>,
    metrics: Arc<crate::dhcp::metrics::DhcpMetrics>,
) -> Option<server::ResponsibilityFn> {
    use crate::dhcp::responsibility::{decide, responsible};
    use dhcproto::v4::MessageType;
    if config.members.len() < 2 {
        return None;
    }
    let me = config.owner.self_name.clone()?;
    let takeover = config.dhcp.takeover_secs;
    Some(Arc::new(move |msg: &dhcproto::v4::Message, _now| {
        let asks = matches!(
            msg.opts().msg_type(),
            Some(MessageType::Discover | MessageType::Request)
        );
        let Some(mac) = crate::mac::MacAddr::from_chaddr(msg.chaddr()).filter(|_| asks) else {
            return crate::dhcp::Responsibility::Mine;
        };
        let owner = resolver.resolve_cached(&mac);
        let live = resolver.live().alive();
        let r = responsible(owner.member.as_deref(), &live, &mac);
        let (decision, why) = decide(&me, r, msg.secs(), takeover);
        metrics.responsibility.inc(why.as_str());
        tracing::debug!(%mac, responsible = ?r, source = owner.source, secs = msg.secs(), why = why.as_str(), "DHCP responsibility");
        decision
    }))
}

/// The membership transition to apply (ARCHITECTURE.md, "Members"; README,
/// "Changing the members"): the store remembers the member list it served; when the
/// configured list differs, fresh addresses are narrowed for one longest lease time.
/// A member on an empty store adopts the latest transition its peers report, handing
/// out nothing fresh until it ends (it cannot know which of its addresses they leased).
fn membership_transition(
    config: &Config,
    store: &SledStore,
    peer_transition: u64,
    now: u64,
) -> Result<Option<(Vec<String>, u64)>, StoreError> {
    let mut names: Vec<String> = config.members.iter().map(|m| m.name.clone()).collect();
    names.sort_unstable();
    let longest = config
        .subnets
        .iter()
        .map(|s| s.lease_time)
        .chain(config.hosts.iter().filter_map(|h| h.lease_time))
        .max()
        .unwrap_or(0);
    let span = u64::from(longest) + u64::from(config.dhcp.offer_hold_secs);
    let record = store.membership()?;
    let current = match record {
        Some(r) if r.names == names => r,
        Some(r) => {
            let m = Membership {
                names,
                since: now,
                previous: Some(r.names),
            };
            store.set_membership(&m)?;
            m
        }
        None => {
            let m = Membership {
                names,
                since: now,
                previous: None,
            };
            store.set_membership(&m)?;
            if peer_transition > now && !config.members.is_empty() {
                return Ok(Some((Vec::new(), peer_transition)));
            }
            return Ok(None);
        }
    };
    Ok(match current.previous {
        Some(prev) if current.since + span > now => Some((prev, current.since + span)),
        _ => None,
    })
}

/// Opens the store, loads the engine and binds the DHCP sockets.
fn dhcp_parts(
    config: &Config,
    handles: &Handles,
    store: Arc<SledStore>,
    policies: Arc<crate::dhcp::policy::HostPolicies>,
    peer_transition: u64,
) -> Result<ServerParts, AppError> {
    let store_err = |source| AppError::Store {
        path: lease_store_path(&config.state_dir),
        source,
    };
    let stored = store.load().map_err(store_err)?;
    info!(leases = stored.len(), state_dir = %config.state_dir.display(), "lease store open");
    let now = server::unix_now();
    let operator_store = store.clone();
    let mut engine = Engine::new(config, stored, now);
    for r in store.reservations().map_err(store_err)? {
        if let Err(e) = engine.reserve(&r, now) {
            warn!(mac = %r.mac, ip = %r.ip, error = %e, "stored reservation not applied");
        }
    }
    let transition =
        membership_transition(config, &store, peer_transition, now).map_err(store_err)?;
    if let (Some((previous, until)), Some(me)) = (transition, config.owner.self_name.as_deref()) {
        engine.begin_transition(&previous, me, until);
        handles.dhcp.transition_until.set(until);
        warn!(
            previous = ?previous,
            until,
            "member list changed: fresh addresses come only from the part of this member's \
             slice it also had before, until the longest lease has run out"
        );
    }
    let host = socket::host_addresses()?;
    let interfaces = socket::resolve_interfaces(config, &host)?;
    let mut listeners = Vec::with_capacity(interfaces.len());
    for interface in interfaces {
        let socket = socket::bind(&interface.name, config.dhcp.port)?;
        info!(interface = %interface.name, address = %interface.addr, port = config.dhcp.port, "DHCP listening");
        listeners.push(Listener { interface, socket });
    }
    Ok(ServerParts {
        listeners,
        engine,
        store,
        metrics: handles.dhcp.clone(),
        port: config.dhcp.port,
        reclaim_interval: Duration::from_secs(config.dhcp.reclaim_interval_secs.into()),
        responsibility: None,
        policies,
        control: None,
        operator_store: Some(operator_store),
    })
}
