//! The DHCPv6 engine (RFC 8415 §18.3), pure like the v4 one: it takes a checked client
//! message with its relay layers, the context the shell found (arrival, the client's
//! MAC, this member's responsibility, `now`) and returns a reply and the lease changes
//! that must be durable before it is sent. No socket, no clock, no file.
//!
//! Addresses come from the `[[subnet6]]` of the client's link: the innermost relay's
//! link-address, else the interface the message arrived on. An IA keeps its address
//! (the one it holds, else the free one it hints at, else the next free of this
//! member's share). With several members the ranges are shared as v4's are; a Solicit
//! for a client another member is responsible for gets no Advertise, and the Advertise
//! of the responsible member carries Preference 255 so the client does not wait for
//! others (RFC 8415 §18.2.1). Requests, Renews, Releases and Declines name their server
//! by its DUID; only that member answers them. A `[[host]] ip6` reservation (`hosts`)
//! replaces all of this for its MAC: that address, whichever member answers.

pub mod bindings;
mod decided;
mod decision;
#[cfg(test)]
mod host_tests;
mod hosts;
#[cfg(test)]
mod inputs_tests;
mod lifecycle;
#[cfg(test)]
mod option_tests;
mod options;
pub mod reply;
mod settings;
#[cfg(test)]
mod tests;

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, Status};

use super::relay::RelayHop;
use crate::config::{BootSettings, Config, Subnet6};
use crate::dhcp::engine::pool::Pool;
use crate::dhcp::engine::{gate, HeldBack, Inputs, Path, Refused, Responsibility};
use crate::owner::shares::Split;
use crate::owner::MemberList;
use crate::store::{Lease6, LeaseState};
use bindings::Bindings;
pub use settings::Engine6Settings;

pub use decision::{Arrival, Context6, Decision6, Ignore6, Outcome6};
use lifecycle::{client_fqdn_flags, Assign};

#[derive(Debug)]
struct SubnetState6 {
    cfg: Subnet6,
    pools: Vec<Pool<Ipv6Addr>>,
}

/// The key that makes two v6 ranges' shares independent: the range start's four
/// 32-bit words folded together.
fn range_key(first: Ipv6Addr) -> u32 {
    let n = u128::from(first);
    (0..4).fold(0u32, |k, w| k ^ (n >> (32 * w)) as u32)
}

fn shared_pool(
    first: Ipv6Addr,
    last: Ipv6Addr,
    members: &MemberList,
    me: Option<&str>,
) -> Pool<Ipv6Addr> {
    let len = crate::config::range6_len(first, last).expect("validated range");
    Pool::shared(
        first,
        last,
        members.share_of_offsets(Split::CURRENT, range_key(first), len, me),
    )
}

/// The DHCPv6 engine's state and decision logic.
#[derive(Debug)]
pub struct Engine6 {
    duid: Vec<u8>,
    boot: BootSettings,
    subnets: Vec<SubnetState6>,
    bindings: Bindings,
    offer_hold: u64,
    decline_hold: u64,
    members: MemberList,
    me: Option<String>,
    /// `[[host]]` entries (deny, host name, `ip6`), and `dhcp.known_only`.
    hosts: hosts::Hosts6,
    known_only: bool,
    /// The relays whose Relay-forward is believed (the IPv6 entries of `dhcp.relays`).
    relays: Vec<crate::config::RelayRule6>,
    /// The `option6:` entries of `[dhcp] options`.
    server_options: Vec<crate::options::OptionRule6>,
    /// The shared lease store does not answer: a Renew or Rebind is answered only up
    /// to the end of the binding already held, and nothing is bound afresh
    /// (`set_shared_store_up`).
    degraded: bool,
}

impl Engine6 {
    /// Builds the engine from configuration, this server's DUID and what the store
    /// held: the v6 leases, and the addresses of the records that did not decode, held
    /// back from `now` for a longest lease (`dhcp::engine::held`). Returns what was held
    /// back, for the shell to report.
    pub fn load(
        settings: Engine6Settings,
        duid: Vec<u8>,
        stored: Vec<Lease6>,
        set_aside: &[Ipv6Addr],
        now: u64,
    ) -> (Self, Vec<HeldBack<Ipv6Addr>>) {
        let mut engine = Self::with_settings(settings, duid, stored, now);
        let longest = engine
            .subnets
            .iter()
            .map(|s| u64::from(s.cfg.lease_time))
            .max()
            .unwrap_or(0);
        let held: Vec<HeldBack<Ipv6Addr>> = set_aside
            .iter()
            .map(|ip| HeldBack {
                ip: *ip,
                until: now + longest,
            })
            .collect();
        for h in &held {
            engine.hold_back(h.ip, h.until);
        }
        (engine, held)
    }

    /// Builds the engine from the whole configuration (its [`Engine6Settings`]), this
    /// server's DUID and the v6 leases loaded from the store.
    pub fn new(config: &Config, duid: Vec<u8>, stored: Vec<Lease6>, now: u64) -> Self {
        Self::with_settings(Engine6Settings::of(config), duid, stored, now)
    }

    /// Builds the engine from its settings, this server's DUID and the v6 leases
    /// loaded from the store.
    pub fn with_settings(
        settings: Engine6Settings,
        duid: Vec<u8>,
        stored: Vec<Lease6>,
        now: u64,
    ) -> Self {
        let mut engine = Self {
            duid,
            boot: settings.boot.clone(),
            subnets: Vec::new(),
            bindings: Bindings::default(),
            offer_hold: 0,
            decline_hold: 0,
            members: settings.members.clone(),
            me: settings.me.clone(),
            hosts: hosts::Hosts6::new(&[]),
            known_only: false,
            relays: Vec::new(),
            server_options: Vec::new(),
            degraded: false,
        };
        engine.take_settings(settings);
        let mut stored = stored;
        // Oldest first, so an IA's newest lease wins its slot.
        stored.sort_by_key(|l| l.starts);
        for lease in stored
            .into_iter()
            .filter(|l| l.state != LeaseState::Offered)
        {
            let (ip, held) = (lease.ip, lease.is_active(now));
            engine.bindings.insert(lease);
            engine.set_used(ip, held);
        }
        engine
    }

    /// Takes the configuration's parts that a reload may change: the `[[subnet6]]`
    /// ranges and options, the hosts, `known_only`, the server options and the holds.
    /// The pools start empty; the caller marks what the bindings hold.
    fn take_settings(&mut self, settings: Engine6Settings) {
        self.subnets = settings
            .subnets
            .iter()
            .map(|s| {
                let mut pools: Vec<_> = s
                    .ranges
                    .iter()
                    .map(|(a, b)| shared_pool(*a, *b, &self.members, self.me.as_deref()))
                    .collect();
                for ip in &s.exclude {
                    pools.iter_mut().for_each(|p| p.block(*ip));
                }
                SubnetState6 {
                    cfg: s.clone(),
                    pools,
                }
            })
            .collect();
        self.offer_hold = settings.offer_hold;
        self.decline_hold = settings.decline_hold;
        self.hosts = hosts::Hosts6::new(&settings.hosts);
        self.known_only = settings.known_only;
        self.relays = settings.relays;
        self.server_options = settings.options;
        // A reserved address inside a range is never handed out dynamically.
        let reserved: Vec<Ipv6Addr> = self.hosts.reserved().collect();
        for ip in reserved {
            if let Some(p) = self.pool_of(ip) {
                p.block(ip);
            }
        }
    }

    /// Takes a reloaded configuration's live parts ([`Engine6::take_settings`]), keeping
    /// every binding, offer and hold, and the member list as it is.
    pub fn reconfigure(&mut self, settings: Engine6Settings, now: u64) {
        self.take_settings(settings);
        let held: Vec<(Ipv6Addr, bool)> = self
            .bindings
            .iter()
            .map(|l| (l.ip, l.is_active(now)))
            .collect();
        for (ip, active) in held {
            self.set_used(ip, active);
        }
    }

    /// Keeps `ip` from every client until `until` (its stored record is unreadable).
    fn hold_back(&mut self, ip: Ipv6Addr, until: u64) {
        self.bindings.insert(Lease6 {
            ip,
            duid: Vec::new(),
            iaid: 0,
            mac: None,
            state: LeaseState::Declined,
            starts: until,
            preferred: until,
            expires: until,
            hostname: None,
            arch: None,
        });
        self.set_used(ip, true);
    }

    /// How a message reached this server: directly, or in Relay-forward layers,
    /// trusted when `sender` (the datagram's source: the outermost relay, RFC 8415
    /// §19.1.1) lies in an IPv6 `dhcp.relays` entry allowed on `interface`. Only the
    /// outermost relay is checked: it is the one this server hears, and the inner
    /// layers are as good as its word. The source port is not: RFC 8357 lets a relay
    /// send from a port other than 547.
    pub fn relay_path(&self, hops: &[RelayHop], sender: Ipv6Addr, interface: &str) -> Path {
        if hops.is_empty() {
            return Path::Direct;
        }
        let trusted = self.relays.iter().any(|r| r.allows(sender, interface));
        Path::Relayed { trusted }
    }

    /// Whether a message is decided at all (`dhcp::engine::gate`, the v4 rule): a
    /// Solicit gets no Advertise while the store cannot write.
    pub fn admit(&self, inputs: Inputs, kind: MessageType) -> Result<(), Refused> {
        gate::admit(inputs, kind == MessageType::Solicit)
    }

    /// Whether `ip` lies in this member's share of a range (where it hands out fresh
    /// addresses).
    pub fn in_share(&self, ip: Ipv6Addr) -> bool {
        self.subnets
            .iter()
            .flat_map(|s| &s.pools)
            .any(|p| p.in_share(ip))
    }

    /// This server's DUID (option 2).
    pub fn duid(&self) -> &[u8] {
        &self.duid
    }

    /// Every lease and live advertisement.
    pub fn leases(&self) -> impl Iterator<Item = &Lease6> {
        self.bindings.iter()
    }

    /// Frees what expired by `now`; returns how many addresses came free.
    pub fn handle_tick(&mut self, now: u64) -> usize {
        let subnets = &self.subnets;
        let held = |ip| subnets.iter().flat_map(|s| &s.pools).any(|p| p.is_used(ip));
        let freed = self.bindings.take_expired(now, held);
        for ip in &freed {
            self.set_used(*ip, false);
        }
        freed.len() + self.expire_reserved_offers(now)
    }

    /// Shares the ranges by a new member list (Ironic's conductors changed).
    pub fn change_members(&mut self, list: MemberList) {
        self.members = list;
        for s in &mut self.subnets {
            for p in &mut s.pools {
                let (a, b) = p.bounds();
                let len = crate::config::range6_len(a, b).expect("validated range");
                p.reshare(self.members.share_of_offsets(
                    Split::CURRENT,
                    range_key(a),
                    len,
                    self.me.as_deref(),
                ));
            }
        }
    }

    fn pool_of(&mut self, ip: Ipv6Addr) -> Option<&mut Pool<Ipv6Addr>> {
        self.subnets
            .iter_mut()
            .flat_map(|s| &mut s.pools)
            .find(|p| p.contains(ip))
    }

    /// Whether `ip` may be handed to a client of subnet `si` fresh: in this member's
    /// share, neither held nor excluded.
    fn free_in_share(&self, si: usize, ip: Ipv6Addr) -> bool {
        self.subnets[si]
            .pools
            .iter()
            .any(|p| p.in_share(ip) && !p.is_used(ip) && !p.is_blocked(ip))
    }

    fn set_used(&mut self, ip: Ipv6Addr, used: bool) {
        if let Some(p) = self.pool_of(ip) {
            p.set_used(ip, used);
        }
    }

    /// The subnet of the client's link: the one whose `interface_id` the innermost
    /// relay sent (option 18, RFC 8415 §21.18: the relay's name for the client's link),
    /// else the one holding that relay's link-address (§19.1.1); a client on the
    /// segment is on the interface's link.
    fn subnet_for(&self, hops: &[RelayHop], arrival: &Arrival<'_>) -> Option<usize> {
        if let Some(hop) = hops.last() {
            let by_id = hop.interface_id.as_deref().and_then(|id| {
                self.subnets
                    .iter()
                    .position(|s| s.cfg.interface_id.as_deref() == Some(id))
            });
            if by_id.is_some() {
                return by_id;
            }
            return self.subnets.iter().position(|s| {
                !hop.link_addr.is_unspecified() && s.cfg.network.contains(&hop.link_addr)
            });
        }
        self.subnets
            .iter()
            .position(|s| s.cfg.interface.as_deref() == Some(arrival.interface))
            .or_else(|| {
                self.subnets.iter().position(|s| {
                    s.cfg.interface.is_none()
                        && arrival.addresses.iter().any(|a| s.cfg.network.contains(a))
                })
            })
    }

    /// The address boot URLs name: the one the relay reached us on, else ours on the
    /// client's link, else any global one of the interface.
    fn server_address(&self, si: usize, arrival: &Arrival<'_>) -> Option<Ipv6Addr> {
        let global = |a: &Ipv6Addr| {
            !a.is_multicast() && !a.is_unspecified() && (a.segments()[0] & 0xffc0) != 0xfe80
        };
        let net = &self.subnets[si].cfg.network;
        Some(arrival.destination)
            .filter(global)
            .or_else(|| arrival.addresses.iter().copied().find(|a| net.contains(a)))
            .or_else(|| arrival.addresses.iter().copied().find(global))
    }

    /// Decides `msg` (a client message that passed `dhcp6::wire`'s checks).
    pub fn handle_message(
        &mut self,
        msg: &Message,
        hops: &[RelayHop],
        ctx: &Context6<'_>,
    ) -> Decision6 {
        let client = match msg.opts().get(OptionCode::ClientId) {
            Some(DhcpOption::ClientId(id)) if !id.is_empty() => id.clone(),
            // Information-request may come without one (RFC 8415 §18.2.6).
            _ if msg.msg_type() == MessageType::InformationRequest => Vec::new(),
            _ => return Decision6::ignore(Ignore6::Malformed),
        };
        let server = match msg.opts().get(OptionCode::ServerId) {
            Some(DhcpOption::ServerId(id)) => Some(id.as_slice()),
            _ => None,
        };
        // RFC 8415 §16: which messages must, and must not, name a server.
        let named = matches!(
            msg.msg_type(),
            MessageType::Request | MessageType::Renew | MessageType::Release | MessageType::Decline
        );
        match (named, server) {
            (true, None) => return Decision6::ignore(Ignore6::Malformed),
            (true, Some(s)) if s != self.duid.as_slice() => {
                return Decision6::ignore(Ignore6::OtherServer)
            }
            (false, Some(_))
                if matches!(
                    msg.msg_type(),
                    MessageType::Solicit | MessageType::Rebind | MessageType::Confirm
                ) =>
            {
                return Decision6::ignore(Ignore6::Malformed)
            }
            (false, Some(s)) if s != self.duid.as_slice() => {
                return Decision6::ignore(Ignore6::OtherServer)
            }
            _ => {}
        }
        // RFC 8415 §16, §18.4: this server never offers Server Unicast, so a client on
        // the link must multicast; what it unicast anyway is discarded, or, for the
        // messages that name this server, answered UseMulticast. A relay's message
        // arrives by unicast by design.
        let unicast = hops.is_empty()
            && !ctx.arrival.destination.is_multicast()
            && !ctx.arrival.destination.is_unspecified();
        if unicast {
            if !named {
                return Decision6::ignore(Ignore6::Unicast);
            }
            let mut r = reply::start(MessageType::Reply, msg, &self.duid);
            r.opts_mut().insert(reply::status(
                Status::UseMulticast,
                "send to All_DHCP_Relay_Agents_and_Servers",
            ));
            return Decision6 {
                reply: Some(r),
                effects: Vec::new(),
                outcome: Outcome6::UseMulticast,
            };
        }
        // Giving addresses back is always heard; everything else follows the filter.
        if !matches!(msg.msg_type(), MessageType::Release | MessageType::Decline) {
            use crate::dhcp::host_policy::{refusal, Refusal};
            match refusal(ctx.policy, self.hosts.deny(ctx.mac), self.known_only) {
                Some(Refusal::Denied) => return Decision6::ignore(Ignore6::Denied),
                Some(Refusal::Unknown) => return Decision6::ignore(Ignore6::UnknownClient),
                None => {}
            }
        }
        let Some(si) = self.subnet_for(hops, &ctx.arrival) else {
            return Decision6::ignore(Ignore6::NoSubnet);
        };
        let ours = ctx.responsibility == Responsibility::Mine;
        let holds_any = reply::ia_nas(msg).iter().any(|ia| {
            self.bindings
                .of_ia(&client, ia.id)
                .is_some_and(|l| l.is_active(ctx.now))
        });
        match msg.msg_type() {
            MessageType::Solicit if !ours && !holds_any => {
                Decision6::ignore(Ignore6::NotResponsible)
            }
            MessageType::Solicit => {
                let rapid = msg.opts().get(OptionCode::RapidCommit).is_some()
                    && self.subnets[si].cfg.rapid_commit;
                self.assign(
                    msg,
                    &client,
                    si,
                    ctx,
                    if rapid {
                        Assign::RapidCommit
                    } else {
                        Assign::Advertise { preferred: ours }
                    },
                )
            }
            MessageType::Request => self.assign(msg, &client, si, ctx, Assign::Request),
            MessageType::Renew => self.extend(msg, &client, si, ctx, false),
            MessageType::Rebind if !ours && !holds_any => {
                Decision6::ignore(Ignore6::NotResponsible)
            }
            MessageType::Rebind => self.extend(msg, &client, si, ctx, true),
            MessageType::Release => self.release(msg, &client, ctx, false),
            MessageType::Decline => self.release(msg, &client, ctx, true),
            MessageType::Confirm if !ours && !holds_any => {
                Decision6::ignore(Ignore6::NotResponsible)
            }
            MessageType::Confirm => self.confirm(msg, si, ctx.mac),
            MessageType::InformationRequest if !ours => Decision6::ignore(Ignore6::NotResponsible),
            MessageType::InformationRequest => {
                let mut r = reply::start(MessageType::Reply, msg, &self.duid);
                self.configure(&mut r, msg, si, ctx);
                Decision6 {
                    reply: Some(r),
                    effects: Vec::new(),
                    outcome: Outcome6::Informed,
                }
            }
            _ => Decision6::ignore(Ignore6::Malformed),
        }
    }
}
