//! The engine's configured state: subnets and their pools (this member's share of
//! every range), host entries and reservations, built at start from its settings and
//! what the store held, and again on a reload (`config::reload`), keeping every lease,
//! offer and run-time reservation.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::held::{self, HeldBack};
use super::limits::Limits;
use super::pool::Pool;
use super::probe;
use super::table::LeaseTable;
use super::{Engine, EngineSettings, SubnetState};
use crate::config::{Config, Host, Subnet};
use crate::mac::MacAddr;
use crate::store::{Lease, LeaseState, SetAside};

/// Each configured subnet with its pools: this member's share of every range under
/// `members`.
pub(super) fn subnet_states(
    subnets: &[Subnet],
    members: &crate::owner::MemberList,
    me: Option<&str>,
) -> Vec<SubnetState> {
    let split = crate::owner::shares::Split::CURRENT;
    subnets
        .iter()
        .map(|s| SubnetState {
            cfg: s.clone(),
            pools: s
                .ranges
                .iter()
                .map(|(a, b)| Pool::shared(*a, *b, members.share_of(split, *a, *b, me)))
                .collect(),
        })
        .collect()
}

/// The addresses the host entries reserve.
pub(super) fn reserved_of(hosts: &HashMap<MacAddr, Host>) -> HashMap<Ipv4Addr, MacAddr> {
    hosts
        .values()
        .filter_map(|h| Some((h.ip?, h.mac)))
        .collect()
}

impl Engine {
    /// Builds the engine from its settings and what the store held: its leases, and
    /// the records that did not decode, whose addresses are held back ([`held`]).
    /// Returns what was held back, for the shell to report.
    pub fn load(
        settings: EngineSettings,
        mut stored: Vec<Lease>,
        set_aside: &[SetAside],
        now: u64,
    ) -> (Self, Vec<HeldBack<Ipv4Addr>>) {
        let held = held::held_back(set_aside, settings.transition_span);
        stored.extend(
            held.iter()
                .map(|(h, since)| held::holding_lease(*h, *since)),
        );
        let engine = Self::with_settings(settings, stored, now);
        (engine, held.into_iter().map(|(h, _)| h).collect())
    }

    /// Builds the engine from the whole configuration (its [`EngineSettings`]) and the
    /// leases loaded from the store.
    pub fn new(config: &Config, stored: Vec<Lease>, now: u64) -> Self {
        Self::with_settings(EngineSettings::of(config), stored, now)
    }

    /// Builds the engine from its settings and the leases loaded from the store.
    pub fn with_settings(settings: EngineSettings, stored: Vec<Lease>, now: u64) -> Self {
        let EngineSettings {
            dhcp,
            boot,
            subnets,
            hosts,
            members,
            me,
            transition_span,
            may_know,
            shared_store,
        } = settings;
        let hosts: HashMap<MacAddr, Host> = hosts.into_iter().map(|h| (h.mac, h)).collect();
        let mut engine = Self {
            settings: dhcp,
            boot,
            subnets: subnet_states(&subnets, &members, me.as_deref()),
            reserved: reserved_of(&hosts),
            hosts: hosts.clone(),
            table: LeaseTable::default(),
            transition_until: None,
            me,
            members,
            transition_span,
            past: Vec::new(),
            members_since: None,
            members_before: None,
            config_hosts: hosts,
            runtime_reserved: std::collections::HashSet::new(),
            limits: Limits::default(),
            shared_up: false,
            may_know,
            unknown_offers: Default::default(),
            degraded: false,
            // Off until the shell says it can send them (`set_probing`).
            probes: probe::Probes::new(false),
        };
        engine.block_configured();
        engine.track_fresh(shared_store, &stored);
        let mut stored = stored;
        // Oldest first, so a MAC's newest lease wins its by-MAC slot.
        stored.sort_by_key(|l| l.starts);
        for lease in stored
            .into_iter()
            .filter(|l| l.state != LeaseState::Offered)
        {
            let active = lease.is_active(now);
            let ip = lease.ip;
            if lease.state == LeaseState::Declined && active {
                engine.limits.declined(lease.expires);
            }
            engine.table.insert(lease);
            engine.set_used(ip, active);
        }
        engine
    }

    /// Takes a reloaded configuration's live parts (docs/configuration.md, "Reload"):
    /// subnets and their ranges, options, hosts and the `[dhcp]` limits. Every lease,
    /// offer, quarantine, probe and run-time reservation is kept, and the member list
    /// and any transition from a list change stay as they were: the result is the
    /// engine a restart on the new file would build, without what a restart loses. A
    /// lease outside every new range stays bound and is answered as after a restart.
    pub fn reconfigure(&mut self, settings: EngineSettings, now: u64) {
        self.settings = settings.dhcp;
        self.subnets = subnet_states(&settings.subnets, &self.members, self.me.as_deref());
        self.may_know = settings.may_know;
        // Run-time reservations stay over the new file, unless it now configures that
        // MAC's address or gives the address to another MAC: the file wins.
        let runtime: Vec<Host> = self
            .runtime_reserved
            .iter()
            .filter_map(|m| self.hosts.get(m).cloned())
            .collect();
        self.config_hosts = settings.hosts.iter().map(|h| (h.mac, h.clone())).collect();
        self.hosts = self.config_hosts.clone();
        self.reserved = reserved_of(&self.hosts);
        self.runtime_reserved.clear();
        for host in runtime {
            let Some(ip) = host.ip else { continue };
            let configured = self
                .config_hosts
                .get(&host.mac)
                .and_then(|h| h.ip)
                .is_some();
            if configured || self.reserved.contains_key(&ip) {
                continue;
            }
            self.reserved.insert(ip, host.mac);
            self.runtime_reserved.insert(host.mac);
            let mut merged = self
                .config_hosts
                .get(&host.mac)
                .cloned()
                .unwrap_or_else(|| Host::bare(host.mac));
            merged.ip = Some(ip);
            merged.hostname = host.hostname.clone().or(merged.hostname);
            self.hosts.insert(host.mac, merged);
        }
        self.block_configured();
        let known: Vec<Lease> = self.table.iter().cloned().collect();
        self.track_fresh(settings.shared_store, &known);
        for lease in &known {
            self.set_used(lease.ip, lease.is_active(now));
        }
        self.restrict_to_past_shares();
    }

    /// Keeps the excluded and reserved addresses out of the pools.
    pub(super) fn block_configured(&mut self) {
        let blocked: Vec<Ipv4Addr> = self
            .subnets
            .iter()
            .flat_map(|s| s.cfg.exclude.iter().copied())
            .chain(self.reserved.keys().copied())
            .collect();
        for ip in blocked {
            self.pools_for(ip).for_each(|p| p.block(ip));
        }
    }

    /// RFC 2131 §2.2, §3.1 step 2: a single instance probes every address its store
    /// has never named before its first offer, as dnsmasq pings every address it has
    /// no lease for (a host configured by hand, a lease dnsmasq gave and nobody
    /// imported). With several members the shared store has every member's
    /// bindings, and only what a member gains at a membership change is probed
    /// (`probe`): a first deployment would otherwise probe every address of every
    /// member.
    pub(super) fn track_fresh(&mut self, shared_store: bool, known: &[Lease]) {
        if self.settings.conflict_probe.is_some() && !shared_store && self.members.len() <= 1 {
            for pool in self.subnets.iter_mut().flat_map(|s| s.pools.iter_mut()) {
                pool.track_fresh();
            }
            for lease in known {
                self.pools_for(lease.ip).for_each(|p| p.seen(lease.ip));
            }
        }
    }
}
