//! One member of the simulated segment: a pure [`Engine`] (its table is the member's
//! "in-memory store") and what the shell keeps beside it: the member list in force,
//! the live members it answers for, and how far it has followed the shared store.

use std::net::Ipv4Addr;

use shardboot::config::Config;
use shardboot::dhcp::engine::{Engine, Interface};
use shardboot::owner::MemberList;
use shardboot::store::Lease;

/// Why a member's configuration did not parse (a bug in the simulation's template).
#[derive(Debug, thiserror::Error)]
#[error("simulated member {member}: {source}")]
pub(crate) struct ConfigError {
    member: String,
    #[source]
    source: shardboot::config::ConfigError,
}

/// A member slot. A replacement takes a new slot (a new name and address); a restart
/// keeps the slot and bumps `incarnation`, so packets and answers addressed to the
/// process that died are dropped.
pub(super) struct Member {
    pub(crate) name: String,
    pub(crate) iface: Interface,
    /// `None`: not running.
    pub(crate) engine: Option<Engine>,
    pub(crate) incarnation: u32,
    /// The member list this member serves with (Ironic's, as it last read it).
    pub(crate) list: MemberList,
    /// `list` without the members its health probes found dead: the bucket is taken
    /// over these (`responsibility::responsible`).
    pub(crate) live: Vec<String>,
    /// How many of the database's writes (`Sim::db_log`) it has taken.
    pub(crate) followed: usize,
}

impl Member {
    pub(crate) fn new(name: String, addr: Ipv4Addr) -> Self {
        Self {
            name,
            iface: Interface {
                name: "br-prov".into(),
                addr,
                boot_server: false,
            },
            engine: None,
            incarnation: 0,
            list: MemberList::default(),
            live: Vec::new(),
            followed: 0,
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.engine.is_some()
    }

    /// Starts the process: an engine on `stored` (its old store, or nothing for an
    /// empty one) serving `list`.
    pub(crate) fn start(
        &mut self,
        config: &Config,
        stored: Vec<Lease>,
        list: MemberList,
        now: u64,
    ) {
        let mut engine = Engine::new(config, stored, now);
        engine.adopt_members(list.clone());
        self.engine = Some(engine);
        self.list = list;
        self.incarnation += 1;
    }

    /// SIGKILL: returns what its store held (every lease but offers, which are never
    /// stored; the sim counts a decision's effects durable when it is made).
    pub(crate) fn kill(&mut self) -> Vec<Lease> {
        self.incarnation += 1;
        self.engine
            .take()
            .map(|e| e.leases().cloned().collect())
            .unwrap_or_default()
    }
}

/// The configuration of member `me` among `names` (static `[[member]]` entries; the
/// list in force is then set with `adopt_members`/`change_members`, as the shell does
/// with a list from Ironic). Probes are off: the sim has no hosts to answer them.
pub(super) fn config_for(
    me: &str,
    names: &[(String, Ipv4Addr)],
    range: (Ipv4Addr, Ipv4Addr),
    lease_secs: u32,
    takeover_secs: u16,
) -> Result<Config, ConfigError> {
    let mut text = format!(
        "state_dir = \"/nonexistent/shardboot-sim\"\n\
         [dhcp]\ninterfaces = []\nconflict_probe_ms = 0\ntakeover_secs = {takeover_secs}\n\
         [store]\nshared = \"postgres://db.sim/shardboot\"\n\
         [owner]\ninsecure_members = true\nself = \"{me}\"\n"
    );
    for (name, addr) in names {
        text.push_str(&format!(
            "[[member]]\nname = \"{name}\"\nhttp_url = \"http://{addr}:8080\"\n"
        ));
    }
    text.push_str(&format!(
        "[[subnet]]\nnetwork = \"10.0.0.0/16\"\nranges = [\"{} - {}\"]\nlease_time = {lease_secs}\n",
        range.0, range.1
    ));
    Config::from_toml_with_overrides(&text, &[]).map_err(|source| ConfigError {
        member: me.to_string(),
        source,
    })
}
