//! Which member is responsible for a machine: resolvers tried in the configured order
//! (Ironic API, inventory file, RFC 3074 hash bucket over the live members), each answer
//! naming a member.

pub mod hash;
pub mod health;
pub mod inventory;
pub mod ironic;
pub mod ironic_cache;
pub mod ironic_wire;
pub mod members;
pub mod members_file;
pub mod membership;
pub mod peer_auth;
pub mod roster;
pub mod shares;
pub mod token_bucket;

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub use hash::{responsible, responsible_member, rfc3074_hash};
pub use inventory::Inventory;
pub use members::{slice_of, MemberList};

use crate::config::{Config, Member, MembersSource, OwnerSettings, ResolverKind};
use crate::mac::MacAddr;
pub use health::LiveSet;
use ironic::{IronicError, IronicOwners};
use ironic_cache::{Cached, Known};
use peer_auth::MemberSecret;
use roster::Roster;

/// Why the resolver cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// The Ironic client (its CA file).
    #[error(transparent)]
    Ironic(#[from] IronicError),
    /// The member secret.
    #[error(transparent)]
    Secret(#[from] peer_auth::SecretError),
}

/// A task that keeps the owner view current, run until shutdown.
pub type Background = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Builds the resolver and the tasks that keep it current: the Ironic snapshot refresh,
/// the background lookups of MACs the DHCP path found missing, and (with several
/// members) the health probes of the other members. `stored_secret`: the member
/// secret the shared lease store keeps, used when no secret file is configured.
pub fn start(
    config: &Config,
    shutdown: &CancellationToken,
    stored_secret: Option<&str>,
) -> Result<(Arc<Resolver>, Vec<Background>), OwnerError> {
    let mut tasks: Vec<Background> = Vec::new();
    let mut resolver = Resolver::new(config)?;
    if let Some(path) = &config.owner.member_secret_file {
        resolver = resolver.with_member_secret(Arc::new(MemberSecret::load(path)?));
    } else if let Some(text) = stored_secret {
        let secret = MemberSecret::from_lines(text.as_bytes())
            .ok_or(peer_auth::SecretError::StoredTooShort)?;
        resolver = resolver.with_member_secret(Arc::new(secret));
    }
    for w in peer_auth::warnings(&config.owner, config.members.len()) {
        warn!(warning = %w, "members");
    }
    if let Some(ironic) = resolver.ironic().cloned() {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        resolver = resolver.with_prefetch(tx);
        tasks.push(Box::pin(ironic.clone().run_refresh(shutdown.clone())));
        tasks.push(Box::pin(ironic.run_prefetch(rx, shutdown.clone())));
    }
    match &config.owner.members {
        MembersSource::Ironic(settings) => {
            // Validation requires [owner.ironic] with members from Ironic.
            if let Some(ironic) = resolver.ironic().cloned() {
                tasks.push(Box::pin(roster::follow_ironic(
                    ironic,
                    resolver.roster().clone(),
                    resolver.live().clone(),
                    settings.clone(),
                    shutdown.clone(),
                )));
            }
        }
        MembersSource::File(settings) => {
            let names = resolver.roster().current().list.names().to_vec();
            members_file::warn_if_left_out(&settings.path, resolver.self_name(), &names);
            tasks.push(Box::pin(members_file::follow_file(
                resolver.roster().clone(),
                resolver.live().clone(),
                settings.clone(),
                resolver.self_name().map(str::to_string),
                shutdown.clone(),
            )));
        }
        MembersSource::Static => {}
    }
    // With a shared lease store, members are judged by their heartbeat rows
    // (`shared::follow::Liveness`): nothing is probed over HTTP.
    let probes = config.store.shared.is_none();
    if probes && (config.members.len() > 1 || config.owner.members.follows()) {
        tasks.push(Box::pin(health::run_probes(
            resolver.roster().clone(),
            resolver.live().clone(),
            config.health,
            resolver.member_secret().cloned(),
            shutdown.clone(),
        )));
    }
    Ok((Arc::new(resolver), tasks))
}

/// The answer for one MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The responsible member's name, if any resolver knew.
    pub member: Option<String>,
    /// Which resolver answered (`ironic`, `ironic-stale`, `inventory`, `hash`) or
    /// `none`.
    pub source: &'static str,
}

/// Owner lookups for this member.
#[derive(Debug)]
pub struct Resolver {
    settings: OwnerSettings,
    inventory: Option<Inventory>,
    ironic: Option<Arc<IronicOwners>>,
    live: Arc<LiveSet>,
    prefetch: Option<tokio::sync::mpsc::Sender<MacAddr>>,
    roster: Arc<Roster>,
    secret: Option<Arc<MemberSecret>>,
}

impl Resolver {
    /// Builds the resolver from the validated configuration. Fails only when the Ironic
    /// client cannot be built (an unreadable CA file).
    pub fn new(config: &Config) -> Result<Self, IronicError> {
        let ironic = match &config.owner.ironic {
            Some(s) => Some(Arc::new(IronicOwners::new(s.clone())?)),
            None => None,
        };
        Ok(Self {
            settings: config.owner.clone(),
            inventory: config.owner.inventory.as_deref().map(Inventory::new),
            ironic,
            live: Arc::new(LiveSet::new(
                &config.members,
                config.owner.self_name.as_deref(),
            )),
            prefetch: None,
            roster: Arc::new(Roster::new(
                config.members.clone(),
                config.owner.members.name(),
            )),
            secret: None,
        })
    }

    /// Where `resolve_cached` sends MACs Ironic has not been asked about, so that a
    /// task can look them up before the client's next retransmission.
    pub fn with_prefetch(mut self, tx: tokio::sync::mpsc::Sender<MacAddr>) -> Self {
        self.prefetch = Some(tx);
        self
    }

    /// The secret this member proves its health answers with and checks its peers'
    /// against (`owner.member_secret_file`).
    pub fn with_member_secret(mut self, secret: Arc<MemberSecret>) -> Self {
        self.secret = Some(secret);
        self
    }

    /// This member's name.
    pub fn self_name(&self) -> Option<&str> {
        self.settings.self_name.as_deref()
    }

    /// Owner settings.
    pub fn settings(&self) -> &OwnerSettings {
        &self.settings
    }

    /// The member called `name`, in the list in force.
    pub fn member(&self, name: &str) -> Option<Member> {
        self.roster.current().member(name).cloned()
    }

    /// The fingerprint of the member list in force (see [`MemberList::fingerprint`]).
    pub fn members_fingerprint(&self) -> String {
        self.roster.current().fingerprint.clone()
    }

    /// The member list in force, and how it is kept.
    pub fn roster(&self) -> &Arc<Roster> {
        &self.roster
    }

    /// The secret members prove their health answers with (None: not configured).
    pub fn member_secret(&self) -> Option<&Arc<MemberSecret>> {
        self.secret.as_ref()
    }

    /// The Ironic resolver, when configured (its refresh task and metrics).
    pub fn ironic(&self) -> Option<&Arc<IronicOwners>> {
        self.ironic.as_ref()
    }

    /// Members' health, fed by the probes.
    pub fn live(&self) -> &Arc<LiveSet> {
        &self.live
    }

    /// Maps an owner name (member name or conductor host name) to a member's name.
    fn member_for(&self, owner: &str) -> Option<String> {
        let view = self.roster.current();
        view.member(owner)
            .map(|m| m.name.clone())
            .or_else(|| self.member_for_conductor(owner))
    }

    /// Maps Ironic's `node.conductor` to a member: by the member's `conductor`, which is
    /// the name Ironic reports (`host`, with `:port` when the RPC port is not the
    /// default).
    fn member_for_conductor(&self, conductor: &str) -> Option<String> {
        self.roster
            .current()
            .members
            .iter()
            .find(|m| m.conductor.as_deref() == Some(conductor))
            .map(|m| m.name.clone())
    }

    /// Tries each resolver in order; the first that names a member wins. A MAC Ironic
    /// has not been asked about yet is looked up once (shared by concurrent callers).
    pub async fn resolve(&self, mac: &MacAddr) -> Resolution {
        self.resolve_with(mac, true).await
    }

    /// Whether Ironic (from its cache) or the inventory knows the machine, whatever
    /// member owns it; never waits. Such machines are never held back by the DHCP
    /// limits on unknown ones.
    pub fn knows(&self, mac: &MacAddr) -> bool {
        let in_ironic = self
            .ironic
            .as_ref()
            .is_some_and(|i| matches!(i.cached(mac, Instant::now()), Cached::Hit(Known::Node(_))));
        in_ironic
            || self
                .inventory
                .as_ref()
                .is_some_and(|inv| inv.lookup(mac).0.is_some())
    }

    /// Whether a resolver that can know machines (Ironic, an inventory) is configured.
    pub fn can_know(&self) -> bool {
        self.ironic.is_some() || self.inventory.is_some()
    }

    /// Like `resolve`, but answers from what is cached without waiting for Ironic (for
    /// the DHCP path, which must never wait on the network).
    pub fn resolve_cached(&self, mac: &MacAddr) -> Resolution {
        use std::future::Future as _;
        // Without lookups no step awaits anything; polling once completes it.
        let fut = self.resolve_with(mac, false);
        let mut fut = std::pin::pin!(fut);
        let waker = std::task::Waker::noop();
        match fut
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => Resolution {
                member: None,
                source: "none",
            },
        }
    }

    async fn resolve_with(&self, mac: &MacAddr, ask_ironic: bool) -> Resolution {
        for kind in &self.settings.resolvers {
            match kind {
                ResolverKind::Ironic => {
                    let Some(ironic) = &self.ironic else { continue };
                    let (cached, stale) = ironic.cached_and_stale(mac, Instant::now());
                    let (known, stale) = match cached {
                        Cached::Hit(k) => (Some(k), stale),
                        // The lookup may have found Ironic back (or gone).
                        Cached::Miss if ask_ironic => {
                            (ironic.lookup(*mac).await, ironic.is_stale())
                        }
                        Cached::Miss => {
                            if let Some(tx) = &self.prefetch {
                                // Full queue: the next retransmission asks again.
                                let _ = tx.try_send(*mac);
                            }
                            (None, stale)
                        }
                    };
                    match known {
                        Some(Known::Node(Some(conductor))) => {
                            match self.member_for_conductor(&conductor) {
                                Some(name) => {
                                    let source = if stale { "ironic-stale" } else { "ironic" };
                                    debug!(%mac, conductor = %conductor, member = %name, source, "owner from Ironic");
                                    return Resolution {
                                        member: Some(name),
                                        source,
                                    };
                                }
                                None => {
                                    debug!(%mac, conductor = %conductor, "Ironic's conductor is not a member")
                                }
                            }
                        }
                        Some(Known::Node(None)) => {
                            debug!(%mac, "Ironic knows the node but no conductor has it")
                        }
                        Some(Known::NoPort) => debug!(%mac, "Ironic has no port with this MAC"),
                        None => debug!(%mac, "Ironic not asked or did not answer"),
                    }
                }
                ResolverKind::Inventory => {
                    let Some(inv) = &self.inventory else { continue };
                    let (owner, err) = inv.lookup(mac);
                    if let Some(e) = err {
                        warn!(error = %e, "inventory not reloaded; using the last good contents");
                    }
                    if let Some(owner) = owner {
                        match self.member_for(&owner) {
                            Some(name) => {
                                debug!(%mac, member = %name, "owner from the inventory");
                                return Resolution {
                                    member: Some(name),
                                    source: "inventory",
                                };
                            }
                            None => debug!(%mac, "inventory owner is not a member"),
                        }
                    }
                }
                ResolverKind::Hash => {
                    let alive = self.live.alive();
                    let names: Vec<&str> = alive.iter().map(String::as_str).collect();
                    if let Some(name) = responsible_member(mac, &names) {
                        debug!(%mac, member = name, live = names.len(), "owner by hash bucket");
                        return Resolution {
                            member: Some(name.to_string()),
                            source: "hash",
                        };
                    }
                }
            }
        }
        debug!(%mac, "no resolver knows this machine");
        Resolution {
            member: None,
            source: "none",
        }
    }
}
