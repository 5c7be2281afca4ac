//! Getting a DHCP server ready: membership settled, engine loaded from the store,
//! sockets bound. Decides nothing itself: the membership rule is `owner::membership`,
//! the engine's rules are the engine's.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::socket::{self, SocketError};
use super::{ControlReceiver, Listener, Server};
use crate::clock::unix_now;
use crate::config::Config;
use crate::dhcp::engine::{Engine, EngineSettings, Interface};
use crate::dhcp::host_policy::HostPolicies;
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::responsibility::Responder;
use crate::owner::health::{check_member_lists, MemberListMismatch};
use crate::owner::membership::{settle, transition_span};
use crate::owner::Resolver;
use crate::store::{
    Change, CommitFailed, Committer, Lease, Membership, Reservation, SetAside, StoreMetrics,
};

/// Why the DHCP server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Interfaces or sockets.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// Another member runs with a different member list.
    #[error(transparent)]
    Members(#[from] MemberListMismatch),
    /// The membership record could not be stored.
    #[error("membership record: {0}")]
    Store(#[from] CommitFailed),
}

/// What the store held at start that the DHCP server needs.
#[derive(Debug, Default)]
pub struct Stored {
    /// Every lease record.
    pub leases: Vec<Lease>,
    /// Run-time reservations.
    pub reservations: Vec<Reservation>,
    /// The member list this store last served with.
    pub membership: Option<Membership>,
    /// Lease records that did not decode: their addresses are held back.
    pub set_aside: Vec<SetAside>,
}

/// Everything [`prepare`] wires together.
#[derive(Debug)]
pub struct Parts {
    /// What the store held.
    pub stored: Stored,
    /// Where changes are made durable.
    pub committer: Committer,
    /// The store's counters and whether it takes writes.
    pub store: Arc<StoreMetrics>,
    /// Host policies, shared with the operator API and the hosts-directory watcher.
    pub policies: Arc<HostPolicies>,
    /// Owner lookups, for who answers.
    pub resolver: Arc<Resolver>,
    /// DHCP metrics.
    pub metrics: Arc<DhcpMetrics>,
    /// Every machine's timeline, told of each decision.
    pub timeline: Arc<crate::timeline::Timeline>,
    /// Operator changes; `None`: no operator API.
    pub control: Option<ControlReceiver>,
    /// The shared lease store, where the other members' heartbeat rows say which
    /// member list each serves; `None`: none configured.
    pub shared: Option<Arc<crate::shared::SharedStore>>,
}

/// With members from Ironic: waits for Ironic's first conductor list, since the shares
/// depend on the whole list and nothing may be handed out before it is known. When
/// Ironic does not answer in time and the store remembers the conductors it last gave,
/// that list is put in force (and shown stale) until Ironic answers; without one, the
/// wait goes on.
async fn first_member_list(
    settings: &crate::config::IronicMembers,
    stored: &Stored,
    resolver: &Resolver,
) {
    use crate::owner::ironic_wire::Conductor;
    let roster = resolver.roster();
    let mut changes = roster.subscribe();
    if changes.borrow_and_update().generation > 0 {
        return;
    }
    info!("waiting for Ironic's conductor list before serving DHCP");
    let patience = resolver
        .ironic()
        .map_or(Duration::from_secs(10), |i| i.settings().timeout * 2)
        + Duration::from_secs(1);
    if tokio::time::timeout(patience, changes.changed())
        .await
        .is_ok()
    {
        return;
    }
    let last: Vec<Conductor> = stored
        .membership
        .iter()
        .flat_map(|m| m.conductors.iter())
        .map(|c| Conductor {
            hostname: c.clone(),
            alive: true,
            conductor_group: settings.conductor_group.clone().unwrap_or_default(),
        })
        .collect();
    if last.is_empty() {
        warn!("Ironic does not answer and the store holds no earlier conductor list; DHCP waits for Ironic");
        while changes.borrow_and_update().generation == 0 {
            if changes.changed().await.is_err() {
                return;
            }
        }
        return;
    }
    let (members, _) = crate::owner::roster::members_from_conductors(&last, settings);
    warn!(conductors = ?stored.membership.as_ref().map(|m| &m.conductors), "Ironic does not answer; serving with the conductor list it last gave, until it does");
    // Stale until Ironic answers: the refresh task's next good read clears it.
    roster.read_failed(unix_now(), "not read since start".into());
    roster.replace_if_unset(members);
}

/// With a shared lease store: a member whose heartbeat row is fresh and names another
/// member list than this one's refuses this start, as a member answering `/healthz`
/// with another fingerprint did before (its shares would overlap this member's). A
/// stale row (a member that is down) does not count: it takes this list when it
/// starts again.
async fn check_lists_in_rows(
    shared: &crate::shared::SharedStore,
    view: &crate::owner::roster::RosterView,
    config: &Config,
) -> Result<(), MemberListMismatch> {
    let Ok(rows) = shared.members().await else {
        return Ok(());
    };
    let fresh_ms = config.store.shared.as_ref().map_or(0, |s| {
        i64::try_from((s.heartbeat * config.health.dead_after.max(1)).as_millis())
            .unwrap_or(i64::MAX)
    });
    let me = config.owner.self_name.as_deref();
    for r in rows {
        let listed = view.members.iter().find(|m| m.name == r.name);
        if Some(r.name.as_str()) == me || r.fingerprint.is_empty() || r.heartbeat_age_ms > fresh_ms
        {
            continue;
        }
        if let Some(m) = listed.filter(|_| r.fingerprint != view.fingerprint) {
            return Err(MemberListMismatch {
                member: r.name.clone(),
                url: m.http_url.clone(),
                theirs: r.fingerprint,
                ours: view.fingerprint.clone(),
            });
        }
    }
    Ok(())
}

/// Checks the member list against the running members, settles the membership record,
/// loads the engine and binds one socket per served interface.
pub async fn prepare(config: &Config, parts: Parts) -> Result<Server, StartError> {
    let Parts {
        stored,
        committer,
        store,
        policies,
        resolver,
        metrics,
        timeline,
        control,
        shared,
    } = parts;
    if let crate::config::MembersSource::Ironic(settings) = &config.owner.members {
        first_member_list(settings, &stored, &resolver).await;
    }
    let view = resolver.roster().current();
    let mut peer_transition = 0;
    if let (true, Some(s)) = (view.members.len() > 1, &shared) {
        s.set_fingerprint(&view.fingerprint);
        check_lists_in_rows(s, &view, config).await?;
    } else if view.members.len() > 1 {
        peer_transition = check_member_lists(
            &view.members,
            config.owner.self_name.as_deref(),
            config.health.timeout,
            resolver.member_secret(),
        )
        .await?;
    }
    info!(leases = stored.leases.len(), state_dir = %config.state_dir.display(), "lease store open");
    let now = unix_now();
    // An address whose record could not be read may still be in use by a client we
    // cannot name: the engine holds it back (`dhcp::engine::held`).
    let span = transition_span(config);
    let (mut engine, held) = Engine::load(
        EngineSettings::of(config),
        stored.leases,
        &stored.set_aside,
        now,
    );
    for h in held {
        warn!(ip = %h.ip, until = h.until, "address held back: its lease record was set aside");
    }
    // The DHCP loop sends the probes (`shell::probe`); it turns them off again if it
    // cannot open an ICMP socket.
    engine.set_probing(true);
    engine.adopt_members(view.list.clone());
    // What this member's share gained at the last change of the list (while running
    // before this start, or while it was down) is probed before its first offer, for
    // the rest of that change's window.
    if let Some((previous, split, since)) =
        crate::owner::membership::last_change(stored.membership.as_ref(), &view.list, now)
    {
        engine.inherit_from(&previous, split, since, now);
    }
    for r in &stored.reservations {
        if let Err(e) = engine.reserve(r, now) {
            warn!(mac = %r.mac, ip = %r.ip, error = %e, "stored reservation not applied");
        }
    }
    // With a shared lease store the database decides every binding, and this
    // member's engine already holds what it read from it (`shared::SharedStore::load`):
    // no transition from an earlier list to wait out.
    let synced = config.store.shared.is_some();
    let settled = settle(stored.membership, &view.list, span, peer_transition, now);
    let settled = if synced {
        crate::owner::membership::Settled {
            transition: None,
            earlier: Vec::new(),
            ..settled
        }
    } else {
        settled
    };
    if let Some(mut record) = settled.record {
        record.conductors = view.conductors();
        committer.commit_blocking(vec![Change::Membership(record)])?;
    }
    if let Some(me) = config.owner.self_name.as_deref() {
        for t in &settled.earlier {
            engine.begin_transition(&t.previous, t.previous_split, me, t.until);
        }
    }
    if let (Some(t), Some(me)) = (settled.transition, config.owner.self_name.as_deref()) {
        engine.begin_transition(&t.previous, t.previous_split, me, t.until);
        metrics.transition_until.set(t.until);
        warn!(
            previous = ?t.previous,
            until = t.until,
            "member list changed: fresh addresses come only from the part of this member's \
             share it also had before, until the longest lease has run out"
        );
    }
    let host = socket::host_addresses()?;
    for i in config.subnets_out_of_reach(&host) {
        warn!(subnet = %config.subnets[i].network, "no interface of this host is on this subnet and dhcp.relays is empty: its relayed clients are dropped; name the relays in dhcp.relays");
    }
    let interfaces = socket::resolve_interfaces(config, &host)?;
    let mut listeners = Vec::with_capacity(interfaces.len());
    for interface in interfaces {
        let socket = socket::bind(
            &interface.name,
            config.dhcp.port,
            config.dhcp.receive_buffer_kib,
        )?;
        info!(interface = %interface.name, address = %interface.addr, port = config.dhcp.port, proxy = config.dhcp.proxy, "DHCP listening");
        if config.dhcp.proxy {
            // ProxyDHCP also answers on the PXE boot-server port (PXE spec §2.2.6).
            let port = config.dhcp.proxy_port;
            let boot_server = Interface {
                boot_server: true,
                ..interface.clone()
            };
            let socket = socket::bind(&interface.name, port, config.dhcp.receive_buffer_kib)?;
            info!(interface = %interface.name, port, "ProxyDHCP boot-server port listening");
            listeners.push(Listener {
                interface: boot_server,
                socket,
            });
        }
        listeners.push(Listener { interface, socket });
    }
    Ok(Server {
        listeners,
        engine,
        committer,
        store,
        owners: resolver.can_know().then(|| resolver.clone()),
        responder: Responder::new(config, resolver, metrics.clone()),
        metrics,
        port: config.dhcp.port,
        reclaim_interval: Duration::from_secs(config.dhcp.reclaim_interval_secs.into()),
        policies,
        timeline,
        control,
        shared: config.store.shared.is_some(),
        conflict_probe: config.dhcp.conflict_probe,
    })
}
