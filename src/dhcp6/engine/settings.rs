//! What the DHCPv6 engine reads of the configuration, taken from it in one place
//! ([`Engine6Settings::of`]) at start and on a reload, as the v4 engine's
//! `EngineSettings`.

use crate::config::{BootSettings, Config, Host, RelayRule6, Subnet6};
use crate::options::OptionRule6;
use crate::owner::MemberList;

/// The DHCPv6 engine's settings.
#[derive(Debug, Clone)]
pub struct Engine6Settings {
    /// `[boot]`.
    pub boot: BootSettings,
    /// `[[subnet6]]`.
    pub subnets: Vec<Subnet6>,
    /// How long an Advertise holds its addresses (`dhcp.offer_hold_secs`).
    pub offer_hold: u64,
    /// How long a declined address is quarantined (`dhcp.decline_hold_secs`).
    pub decline_hold: u64,
    /// `[[host]]` (deny, host name, `ip6`).
    pub hosts: Vec<Host>,
    /// `dhcp.known_only`.
    pub known_only: bool,
    /// The IPv6 entries of `dhcp.relays`: the relays whose Relay-forward is believed.
    pub relays: Vec<RelayRule6>,
    /// The `option6:` entries of `[dhcp] options`.
    pub options: Vec<OptionRule6>,
    /// The configured member list. Read at start only: a running engine follows the
    /// list it is given (`Engine6::change_members`).
    pub members: MemberList,
    /// This member's name (`owner.self`).
    pub me: Option<String>,
}

impl Engine6Settings {
    /// The DHCPv6 engine's part of `config`.
    pub fn of(config: &Config) -> Self {
        Self {
            boot: config.boot.clone(),
            subnets: config.subnets6.clone(),
            offer_hold: u64::from(config.dhcp.offer_hold_secs),
            decline_hold: u64::from(config.dhcp.decline_hold_secs),
            hosts: config.hosts.clone(),
            known_only: config.dhcp.known_only,
            relays: config.dhcp.relays6.clone(),
            options: config.dhcp.options6.clone(),
            members: MemberList::of(&config.members),
            me: config.owner.self_name.clone(),
        }
    }
}
