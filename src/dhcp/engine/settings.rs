//! What the DHCPv4 engine reads of the configuration, taken from it in one place
//! ([`EngineSettings::of`]) at start and on a reload: the engine sees its own sections,
//! not the whole `Config`.

use crate::config::{BootSettings, Config, DhcpSettings, Host, Subnet};
use crate::owner::MemberList;

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// `[dhcp]`.
    pub dhcp: DhcpSettings,
    /// `[boot]`.
    pub boot: BootSettings,
    /// `[[subnet]]`.
    pub subnets: Vec<Subnet>,
    /// `[[host]]`.
    pub hosts: Vec<Host>,
    /// The configured member list and this member's name in it. Read at start only: a
    /// running engine follows the list it is given (`Engine::change_members`).
    pub members: MemberList,
    /// This member's name (`owner.self`).
    pub me: Option<String>,
    /// How long the transition after a change of the member list lasts, and a
    /// set-aside address is held back: a longest lease and an offer
    /// (`owner::membership::transition_span`).
    pub transition_span: u64,
    /// Whether any machine can be known (`limits::reserve_for_known`).
    pub may_know: bool,
    /// Whether a shared lease store decides the bindings (`store.shared`).
    pub shared_store: bool,
}

impl EngineSettings {
    /// The engine's part of `config`.
    pub fn of(config: &Config) -> Self {
        Self {
            dhcp: config.dhcp.clone(),
            boot: config.boot.clone(),
            subnets: config.subnets.clone(),
            hosts: config.hosts.clone(),
            members: MemberList::of(&config.members),
            me: config.owner.self_name.clone(),
            transition_span: crate::owner::membership::transition_span(config),
            may_know: may_know(config),
            shared_store: config.store.shared.is_some(),
        }
    }
}

/// Whether any machine can be known (`limits::reserve_for_known`): something names
/// machines (hosts, Ironic's hosts directory, an owner resolver) or an operator can.
fn may_know(config: &Config) -> bool {
    !config.hosts.is_empty()
        || config.dhcp.hostsdir.is_some()
        || config.owner.ironic.is_some()
        || config.owner.inventory.is_some()
        || config.http.token_file.is_some()
        || config
            .http
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some())
}
