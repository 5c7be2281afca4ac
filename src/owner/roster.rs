//! The member list in force, and how it follows Ironic (a file: `members_file`).
//!
//! With `owner.members = "static"` the list is the `[[member]]` entries and never
//! changes. With `"ironic"` the members are Ironic's alive conductors (`/v1/conductors`,
//! optionally one conductor group), each member's URLs made from its conductor's host by
//! the configured templates, read every `owner.members_refresh_secs`. Ironic is the
//! membership authority; shardboot runs no consensus of its own. When Ironic cannot be
//! read, the last list it gave stays in force and the roster says it is stale.
//! With `"file"` the list is the `[[member]]` tables of `owner.members_file`, re-read
//! every `owner.members_poll_ms` (`members_file`), stale the same way.
//!
//! Everything that depends on the list (DHCP shares, the hash bucket, health probes,
//! owner routing) reads [`Roster::current`] or follows [`Roster::subscribe`].

use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::ironic_wire::Conductor;
use super::MemberList;
use crate::config::{member_name_for_conductor, IronicMembers, Member};
use crate::ipxe::is_safe_url;

/// One version of the member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterView {
    /// The members, sorted by name.
    pub members: Vec<Member>,
    /// Their names in the one order every member uses.
    pub list: MemberList,
    /// The fingerprint other members compare (`MemberList::fingerprint`).
    pub fingerprint: String,
    /// Counts replacements since start (0: the list at start; with Ironic as source,
    /// 0 means Ironic has not answered yet).
    pub generation: u64,
}

impl RosterView {
    fn of(mut members: Vec<Member>, generation: u64) -> Self {
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let list = MemberList::of(&members);
        Self {
            fingerprint: list.fingerprint(),
            list,
            members,
            generation,
        }
    }

    /// The conductors behind the members (members from Ironic), in member order.
    pub fn conductors(&self) -> Vec<String> {
        self.members
            .iter()
            .filter_map(|m| m.conductor.clone())
            .collect()
    }

    /// The member called `name`.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }
}

/// How the list is being kept, for `/v1/members` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RosterStatus {
    /// `static`, `ironic` or `file`.
    pub source: &'static str,
    /// Unix seconds of the last good read of the source (Ironic's conductors, the file).
    pub last_ok: Option<u64>,
    /// Since when (Unix seconds) the source has failed; the last list stays in force.
    pub stale_since: Option<u64>,
    /// The last error reading the source.
    pub last_error: Option<String>,
    /// Failed reads since start.
    pub failures: u64,
    /// Conductors left out of the last list, with why.
    pub skipped: Vec<String>,
}

/// The member list in force, replaceable while everything runs.
#[derive(Debug)]
pub struct Roster {
    view: RwLock<Arc<RosterView>>,
    changes: watch::Sender<Arc<RosterView>>,
    status: Mutex<RosterStatus>,
}

impl Roster {
    /// A roster starting with `members`, kept by `source`.
    pub fn new(members: Vec<Member>, source: &'static str) -> Self {
        let view = Arc::new(RosterView::of(members, 0));
        let (changes, _) = watch::channel(view.clone());
        Self {
            view: RwLock::new(view),
            changes,
            status: Mutex::new(RosterStatus {
                source,
                ..RosterStatus::default()
            }),
        }
    }

    /// The list in force.
    pub fn current(&self) -> Arc<RosterView> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every replacement of the list, from the current one on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RosterView>> {
        self.changes.subscribe()
    }

    /// Puts `members` in force. Returns the new view when it differs from the one in
    /// force (by names or URLs), `None` when nothing changed. The first list Ironic gives
    /// counts as a change even when it equals the start-up one, so waiters see it.
    pub fn replace(&self, members: Vec<Member>) -> Option<Arc<RosterView>> {
        let mut view = self.view.write().unwrap_or_else(|p| p.into_inner());
        let next = RosterView::of(members, view.generation + 1);
        if view.generation > 0 && next.members == view.members {
            return None;
        }
        let next = Arc::new(next);
        *view = next.clone();
        drop(view);
        self.changes.send_replace(next.clone());
        Some(next)
    }

    /// Puts `members` in force only if no list has been put in force since start (a
    /// remembered list must never overwrite one Ironic just gave).
    pub fn replace_if_unset(&self, members: Vec<Member>) -> Option<Arc<RosterView>> {
        let mut view = self.view.write().unwrap_or_else(|p| p.into_inner());
        if view.generation > 0 {
            return None;
        }
        let next = Arc::new(RosterView::of(members, 1));
        *view = next.clone();
        drop(view);
        self.changes.send_replace(next.clone());
        Some(next)
    }

    /// Records a good read of the conductors at `now` (Unix seconds).
    pub fn read_ok(&self, now: u64, skipped: Vec<String>) {
        let mut s = self.status();
        s.last_ok = Some(now);
        s.stale_since = None;
        s.last_error = None;
        s.skipped = skipped;
    }

    /// Records a failed read at `now`: the list in force stays, and is stale.
    pub fn read_failed(&self, now: u64, error: String) {
        let mut s = self.status();
        s.failures += 1;
        s.stale_since.get_or_insert(now);
        s.last_error = Some(error);
    }

    /// How the list is being kept.
    pub fn status_now(&self) -> RosterStatus {
        self.status().clone()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, RosterStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `shardboot_members`, `shardboot_members_stale` and
    /// `shardboot_members_refresh_failures_total`.
    pub fn render_prometheus(&self, out: &mut String) {
        use crate::metrics::{header, value};
        let s = self.status_now();
        header(
            out,
            "shardboot_members",
            "gauge",
            "members in the list in force",
        );
        value(
            out,
            "shardboot_members",
            self.current().members.len() as u64,
        );
        header(
            out,
            "shardboot_members_stale",
            "gauge",
            "1 while the member source (Ironic, the members file) cannot be read and the last list stays in force",
        );
        value(
            out,
            "shardboot_members_stale",
            u64::from(s.stale_since.is_some()),
        );
        header(
            out,
            "shardboot_members_refresh_failures_total",
            "counter",
            "failed reads of the member source",
        );
        value(out, "shardboot_members_refresh_failures_total", s.failures);
    }
}

/// The host part of a conductor name: without the `:port` Ironic appends when the
/// JSON-RPC port is not the default; an IPv6 address keeps its brackets.
pub fn conductor_host(conductor: &str) -> &str {
    if let Some(rest) = conductor.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &conductor[..end + 2],
            None => conductor,
        };
    }
    match conductor.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => conductor,
    }
}

/// The members beside Ironic's alive conductors (of the configured group), sorted by
/// name, and the conductors left out with why (a name no member name comes from, a URL
/// that would not be safe in a script, two conductors with one member name).
pub fn members_from_conductors(
    conductors: &[Conductor],
    settings: &IronicMembers,
) -> (Vec<Member>, Vec<String>) {
    let mut members: Vec<Member> = Vec::new();
    let mut skipped = Vec::new();
    let mut alive: Vec<&Conductor> = conductors
        .iter()
        .filter(|c| c.alive)
        .filter(|c| {
            settings
                .conductor_group
                .as_deref()
                .is_none_or(|g| c.conductor_group == g)
        })
        .collect();
    alive.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    for c in alive {
        // The conductor name came from the network: only its escaped form is logged.
        let shown = c.hostname.escape_default().to_string();
        let Some(name) = member_name_for_conductor(&c.hostname) else {
            skipped.push(format!("{shown}: not a host name"));
            continue;
        };
        let host = conductor_host(&c.hostname);
        let render = |tpl: &str| tpl.replace("{host}", host);
        let http_url = render(&settings.http_url);
        let conductor_url = settings.conductor_url.as_deref().map(render);
        if !is_safe_url(&http_url) || !conductor_url.as_deref().is_none_or(is_safe_url) {
            skipped.push(format!(
                "{shown}: its URLs would not be safe in a boot script"
            ));
            continue;
        }
        if members.iter().any(|m| m.name == name) {
            skipped.push(format!(
                "{shown}: another conductor has the member name {name}"
            ));
            continue;
        }
        members.push(Member {
            name,
            http_url,
            conductor: Some(c.hostname.clone()),
            conductor_url,
        });
    }
    members.sort_by(|a, b| a.name.cmp(&b.name));
    (members, skipped)
}

/// Reads Ironic's conductors now and every `settings.refresh` (sooner after a failure:
/// Ironic's own backoff) until `shutdown`, putting each changed list in force. A
/// failure keeps the last list and marks it stale. A change also asks the owner cache
/// to refresh at once, because Ironic's hash ring moves nodes when conductors come and
/// go, and routing must follow.
pub async fn follow_ironic(
    ironic: Arc<super::ironic::IronicOwners>,
    roster: Arc<Roster>,
    live: Arc<super::health::LiveSet>,
    settings: IronicMembers,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use crate::clock::unix_now;
    use tracing::{info, warn};
    let mut failing = false;
    loop {
        let wait = match ironic.conductors().await {
            Ok(conductors) => {
                let (members, skipped) = members_from_conductors(&conductors, &settings);
                for why in &skipped {
                    warn!(conductor = %why, "conductor left out of the members");
                }
                if failing {
                    info!("Ironic answers again; members follow its conductors");
                    failing = false;
                }
                roster.read_ok(unix_now(), skipped);
                let me = member_name_for_conductor(&settings.self_conductor);
                if let Some(view) = roster.replace(members) {
                    let names = view.list.names();
                    // New members count as alive until their probes say otherwise.
                    live.sync(names);
                    if me
                        .as_deref()
                        .is_some_and(|me| view.list.index_of(me).is_none())
                    {
                        warn!(conductor = %settings.self_conductor, "this member's conductor is not among Ironic's alive conductors: it hands out no fresh address until it is");
                    }
                    info!(members = ?names, generation = view.generation, "member list from Ironic's conductors");
                    ironic.refresh_soon();
                }
                settings.refresh
            }
            Err(e) => {
                if !failing {
                    warn!(error = %e, "cannot read Ironic's conductors; the last member list stays in force");
                    failing = true;
                }
                roster.read_failed(unix_now(), e.to_string());
                ironic.settings().backoff.min(settings.refresh)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conductor(name: &str, alive: bool, group: &str) -> Conductor {
        Conductor {
            hostname: name.into(),
            alive,
            conductor_group: group.into(),
        }
    }

    fn settings(group: Option<&str>) -> IronicMembers {
        IronicMembers {
            self_conductor: "127.0.0.1".into(),
            conductor_group: group.map(str::to_string),
            http_url: "http://{host}:8080".into(),
            conductor_url: Some("http://{host}:8088".into()),
            refresh: std::time::Duration::from_secs(10),
        }
    }

    #[test]
    fn conductor_hosts_drop_the_json_rpc_port_only() {
        assert_eq!(conductor_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(conductor_host("127.0.0.2:8090"), "127.0.0.2");
        assert_eq!(conductor_host("[fd00::2]:8090"), "[fd00::2]");
        assert_eq!(conductor_host("[fd00::2]"), "[fd00::2]");
        assert_eq!(conductor_host("node-1.example.org"), "node-1.example.org");
    }

    #[test]
    fn alive_conductors_of_the_group_become_members_with_their_urls() {
        let page = super::super::ironic_wire::parse_conductors(include_bytes!(
            "../../fixtures/ironic/conductors.json"
        ))
        .unwrap();
        let (members, skipped) = members_from_conductors(&page.conductors, &settings(None));
        assert!(skipped.is_empty());
        assert_eq!(
            members,
            [
                Member {
                    name: "127.0.0.1".into(),
                    http_url: "http://127.0.0.1:8080".into(),
                    conductor: Some("127.0.0.1".into()),
                    conductor_url: Some("http://127.0.0.1:8088".into()),
                },
                Member {
                    name: "127.0.0.2_8090".into(),
                    http_url: "http://127.0.0.2:8080".into(),
                    conductor: Some("127.0.0.2:8090".into()),
                    conductor_url: Some("http://127.0.0.2:8088".into()),
                },
            ]
        );
        let list = [
            conductor("10.0.0.1", true, "rack1"),
            conductor("10.0.0.2", false, "rack1"),
            conductor("10.0.0.3", true, "rack2"),
            conductor("bad name;", true, "rack1"),
        ];
        let (members, skipped) = members_from_conductors(&list, &settings(Some("rack1")));
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["10.0.0.1"]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].starts_with("bad name;"), "{skipped:?}");
    }

    #[test]
    fn a_replacement_is_seen_by_subscribers_and_an_equal_list_is_no_change() {
        let roster = Roster::new(Vec::new(), "ironic");
        let mut rx = roster.subscribe();
        let (members, _) = members_from_conductors(
            &[
                conductor("10.0.0.1", true, ""),
                conductor("10.0.0.2", true, ""),
            ],
            &settings(None),
        );
        let first = roster
            .replace(members.clone())
            .expect("first list is a change");
        assert_eq!(first.generation, 1);
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            rx.borrow_and_update().list.names(),
            ["10.0.0.1", "10.0.0.2"]
        );
        assert_eq!(roster.replace(members.clone()), None);
        assert!(!rx.has_changed().unwrap());
        let fewer = members[..1].to_vec();
        let second = roster.replace(fewer).unwrap();
        assert_eq!(second.generation, 2);
        assert_ne!(second.fingerprint, first.fingerprint);
        roster.read_failed(100, "connection refused".into());
        roster.read_failed(110, "connection refused".into());
        let s = roster.status_now();
        assert_eq!((s.stale_since, s.failures), (Some(100), 2));
        roster.read_ok(120, Vec::new());
        assert_eq!(roster.status_now().stale_since, None);
        assert_eq!(roster.current().members.len(), 1);
    }
}
