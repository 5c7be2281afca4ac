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
#[cfg(test)]
mod host_tests;
mod hosts;
#[cfg(test)]
mod option_tests;
mod options;
pub mod reply;
#[cfg(test)]
mod tests;

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, Status, IANA};

use super::boot::classify;
use super::relay::RelayHop;
use crate::config::{BootSettings, Config, Subnet6};
use crate::dhcp::engine::pool::Pool;
use crate::dhcp::engine::Responsibility;
use crate::mac::MacAddr;
use crate::owner::shares::Split;
use crate::owner::MemberList;
use crate::store::{Lease6, Lease6Effect, LeaseState};
use bindings::Bindings;
use reply::Lifetimes;

/// Where a message arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The interface's name.
    pub interface: &'a str,
    /// This server's addresses on it.
    pub addresses: &'a [Ipv6Addr],
    /// The message's destination (multicast for a client on the link, one of ours for
    /// a relay).
    pub destination: Ipv6Addr,
}

/// Per-message inputs besides the message.
#[derive(Debug, Clone, Copy)]
pub struct Context6<'a> {
    /// Where it arrived.
    pub arrival: Arrival<'a>,
    /// The client's MAC (`dhcp6::client_mac`), when one was found.
    pub mac: Option<MacAddr>,
    /// Whether this member is the one to answer the client.
    pub responsibility: Responsibility,
    /// The run-time allow/deny for the client's MAC (operator API, Ironic's hosts
    /// directory), if any: the same PXE filter as v4.
    pub policy: Option<(
        crate::dhcp::host_policy::HostPolicy,
        crate::dhcp::host_policy::PolicySource,
    )>,
    /// Unix seconds.
    pub now: u64,
}

/// Why a message got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ignore6 {
    /// Another member answers this client.
    NotResponsible,
    /// No `[[subnet6]]` for the client's link.
    NoSubnet,
    /// A message RFC 8415 §16 says to discard: no Client Identifier, a Server
    /// Identifier where none belongs, or none where one must be.
    Malformed,
    /// The Server Identifier is another server's.
    OtherServer,
    /// Nothing to answer (a Confirm without addresses, a Rebind for addresses this
    /// member never handed out).
    NothingToAnswer,
    /// Denied by a policy or `[[host]]` entry (Ironic's PXE filter).
    Denied,
    /// `dhcp.known_only` and nothing names the machine (or it shows no MAC).
    UnknownClient,
    /// A Solicit, Rebind, Confirm or Information-request a client on the link sent
    /// to one of our addresses rather than to the multicast group (RFC 8415 §16:
    /// discarded).
    Unicast,
}

impl Ignore6 {
    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotResponsible => "not_responsible",
            Self::NoSubnet => "no_subnet",
            Self::Malformed => "malformed",
            Self::OtherServer => "other_server",
            Self::NothingToAnswer => "nothing_to_answer",
            Self::Denied => "denied",
            Self::UnknownClient => "unknown_client",
            Self::Unicast => "unicast",
        }
    }
}

/// What the engine decided, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome6 {
    /// An Advertise with this many addresses.
    Advertise(usize),
    /// A Reply binding (or extending) this many addresses.
    Bound(usize),
    /// Addresses were released.
    Released,
    /// Addresses were declined and quarantined.
    Declined,
    /// A Confirm answered: whether the addresses are on the link.
    Confirmed(bool),
    /// An Information-request answered.
    Informed,
    /// An Advertise or Reply saying no address is available.
    NoAddresses,
    /// A Reply saying the client's binding is not known, or only withdrawing (with
    /// lifetimes 0) addresses it may not use.
    NoBinding,
    /// A Reply telling a client that sent to a unicast address to use multicast.
    UseMulticast,
    /// No reply.
    Ignored(Ignore6),
}

/// The engine's answer to one message.
#[derive(Debug, Clone)]
pub struct Decision6 {
    /// The reply to the client (the shell wraps it in the relay layers). When
    /// `effects` is non-empty it may be sent only once they are durable.
    pub reply: Option<Message>,
    /// Lease changes to persist.
    pub effects: Vec<Lease6Effect>,
    /// Summary.
    pub outcome: Outcome6,
}

impl Decision6 {
    fn ignore(why: Ignore6) -> Self {
        Self {
            reply: None,
            effects: Vec::new(),
            outcome: Outcome6::Ignored(why),
        }
    }
}

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
    /// The `option6:` entries of `[dhcp] options`.
    server_options: Vec<crate::options::OptionRule6>,
    /// The shared lease store does not answer: a Renew or Rebind is answered only up
    /// to the end of the binding already held, and nothing is bound afresh
    /// (`set_shared_store_up`).
    degraded: bool,
}

impl Engine6 {
    /// Builds the engine from configuration, this server's DUID and the v6 leases
    /// loaded from the store.
    pub fn new(config: &Config, duid: Vec<u8>, stored: Vec<Lease6>, now: u64) -> Self {
        let members = MemberList::of(&config.members);
        let me = config.owner.self_name.clone();
        let mut engine = Self {
            duid,
            boot: config.boot.clone(),
            subnets: Vec::new(),
            bindings: Bindings::default(),
            offer_hold: 0,
            decline_hold: 0,
            members,
            me,
            hosts: hosts::Hosts6::new(&[]),
            known_only: false,
            server_options: Vec::new(),
            degraded: false,
        };
        engine.take_settings(config);
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
    fn take_settings(&mut self, config: &Config) {
        self.subnets = config
            .subnets6
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
        self.offer_hold = u64::from(config.dhcp.offer_hold_secs);
        self.decline_hold = u64::from(config.dhcp.decline_hold_secs);
        self.hosts = hosts::Hosts6::new(&config.hosts);
        self.known_only = config.dhcp.known_only;
        self.server_options = config.dhcp.options6.clone();
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
    pub fn reconfigure(&mut self, config: &Config, now: u64) {
        self.take_settings(config);
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
    pub fn hold_back(&mut self, ip: Ipv6Addr, until: u64) {
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

    /// The address for `ia` of `client` on subnet `si`: its machine's reservation (or
    /// none, if that cannot be given), else the one it holds (or was advertised), else
    /// the free one it hints at inside this member's share, else the next free one of
    /// the share.
    fn address_for(
        &mut self,
        client: &[u8],
        ia: &IANA,
        si: usize,
        ctx: &Context6<'_>,
    ) -> Option<Ipv6Addr> {
        let now = ctx.now;
        if let Some(reserved) = self.reserved_address((client, ia.id), ctx.mac, si, now) {
            return reserved;
        }
        let subnet = &self.subnets[si];
        if let Some(l) = self.bindings.of_ia(client, ia.id) {
            let ip = l.ip;
            let usable = l.state != LeaseState::Declined
                && subnet.cfg.in_ranges(ip)
                && !self.hosts.reserved_for_other(ip, ctx.mac)
                && (l.is_active(now) || !subnet.pools.iter().any(|p| p.is_used(ip)));
            if usable {
                return Some(ip);
            }
        }
        let hinted = reply::addresses_in(ia)
            .into_iter()
            .find(|ip| self.free_in_share(si, *ip));
        if hinted.is_some() {
            return hinted;
        }
        self.subnets[si]
            .pools
            .iter_mut()
            .find_map(|p| p.next_free())
    }

    fn lease(
        &self,
        (client, iaid): (&[u8], u32),
        ip: Ipv6Addr,
        msg: &Message,
        si: usize,
        ctx: &Context6<'_>,
        state: LeaseState,
    ) -> Lease6 {
        let life = Lifetimes::of(&self.subnets[si].cfg);
        let (preferred, expires) = match state {
            LeaseState::Offered => (ctx.now + self.offer_hold, ctx.now + self.offer_hold),
            _ => (
                ctx.now + u64::from(life.preferred),
                ctx.now + u64::from(life.valid),
            ),
        };
        Lease6 {
            ip,
            duid: client.to_vec(),
            iaid,
            mac: ctx.mac,
            state,
            starts: ctx.now,
            preferred,
            expires,
            hostname: self
                .hosts
                .hostname(ctx.mac)
                .map(str::to_string)
                .or_else(|| client_fqdn(msg)),
            arch: classify(msg.opts()).arch,
        }
    }

    fn assign(
        &mut self,
        msg: &Message,
        client: &[u8],
        si: usize,
        ctx: &Context6<'_>,
        how: Assign,
    ) -> Decision6 {
        let kind = match how {
            Assign::Advertise { .. } => MessageType::Advertise,
            _ => MessageType::Reply,
        };
        let mut r = reply::start(kind, msg, &self.duid);
        let life = Lifetimes::of(&self.subnets[si].cfg);
        let mut effects = Vec::new();
        let mut given = 0;
        let ias = reply::ia_nas(msg);
        for ia in &ias {
            match self.address_for(client, ia, si, ctx) {
                Some(ip) => {
                    let state = if kind == MessageType::Advertise {
                        LeaseState::Offered
                    } else {
                        LeaseState::Bound
                    };
                    let lease = self.lease((client, ia.id), ip, msg, si, ctx, state);
                    if state == LeaseState::Bound {
                        effects.push(Lease6Effect::Put(lease.clone()));
                    }
                    // An IA that holds a bound lease keeps it through an Advertise.
                    let keeps = self.bindings.get(ip).is_some_and(|l| {
                        l.state == LeaseState::Bound && l.duid == client && l.iaid == ia.id
                    });
                    if state == LeaseState::Bound || !keeps {
                        self.bindings.insert(lease);
                    }
                    self.set_used(ip, true);
                    let stale = reply::addresses_in(ia);
                    r.opts_mut().insert(reply::ia_with(ia.id, ip, life, &stale));
                    given += 1;
                }
                // RFC 8415 §18.3.1, §18.3.2: the IA gets NoAddrsAvail.
                None => r.opts_mut().insert(reply::ia_status(
                    ia.id,
                    Status::NoAddrsAvail,
                    "no address available",
                    &[],
                )),
            }
        }
        for code in [OptionCode::IATA, OptionCode::IAPD] {
            for o in msg.opts().get_all(code).unwrap_or(&[]) {
                r.opts_mut().insert(match o {
                    DhcpOption::IATA(ta) => DhcpOption::IATA(dhcproto::v6::IATA {
                        id: ta.id,
                        opts: status_only(
                            Status::NoAddrsAvail,
                            "temporary addresses are not served",
                        ),
                    }),
                    DhcpOption::IAPD(pd) => DhcpOption::IAPD(dhcproto::v6::IAPD {
                        id: pd.id,
                        t1: 0,
                        t2: 0,
                        opts: status_only(Status::NoPrefixAvail, "prefixes are not delegated"),
                    }),
                    other => other.clone(),
                });
            }
        }
        if ias.is_empty() || given == 0 {
            r.opts_mut()
                .insert(reply::status(Status::NoAddrsAvail, "no address available"));
        }
        match how {
            Assign::Advertise { preferred: true } => {
                r.opts_mut().insert(DhcpOption::Preference(255))
            }
            Assign::RapidCommit => r.opts_mut().insert(DhcpOption::RapidCommit),
            _ => {}
        }
        self.configure(&mut r, msg, si, ctx);
        let outcome = match (given, kind) {
            (0, _) => Outcome6::NoAddresses,
            (n, MessageType::Advertise) => Outcome6::Advertise(n),
            (n, _) => Outcome6::Bound(n),
        };
        Decision6 {
            reply: Some(r),
            effects,
            outcome,
        }
    }

    /// Renew (RFC 8415 §18.3.4) and Rebind (§18.3.5): extend what the IA holds here.
    fn extend(
        &mut self,
        msg: &Message,
        client: &[u8],
        si: usize,
        ctx: &Context6<'_>,
        rebind: bool,
    ) -> Decision6 {
        let mut r = reply::start(MessageType::Reply, msg, &self.duid);
        let life = Lifetimes::of(&self.subnets[si].cfg);
        let mut effects = Vec::new();
        let (mut bound, mut unknown) = (0, 0);
        for ia in reply::ia_nas(msg) {
            let asked = reply::addresses_in(ia);
            let network = self.subnets[si].cfg.network;
            // The IA's binding is extended even when the client names other addresses
            // (RFC 8415 §18.3.4: the server may change the list; those it names get
            // lifetimes 0 below). An advertisement counts only when the client names
            // it. §18.3.5: an address no longer on the client's link is not extended.
            let held = self
                .bindings
                .of_ia(client, ia.id)
                .filter(|l| match l.state {
                    LeaseState::Bound => {
                        asked.is_empty() || asked.contains(&l.ip) || l.is_active(ctx.now)
                    }
                    LeaseState::Offered => asked.is_empty() || asked.contains(&l.ip),
                    _ => false,
                })
                .map(|l| l.ip)
                .filter(|ip| network.contains(ip));
            // An address reserved for another machine since it was leased is not
            // extended: it is withdrawn and released, so its machine can have it.
            let taken = held.filter(|ip| self.hosts.reserved_for_other(*ip, ctx.mac));
            if let Some(ip) = taken {
                if let Some(mut lease) = self.bindings.get(ip).cloned() {
                    lease.state = LeaseState::Released;
                    effects.push(Lease6Effect::Put(lease.clone()));
                    self.bindings.insert(lease);
                    self.set_used(ip, false);
                }
            }
            let held = held.filter(|ip| Some(*ip) != taken);
            // A reserved machine is given its address (RFC 8415 §18.3.4 lets a Reply
            // add one; what it asked about gets lifetimes 0). Otherwise a binding lost
            // with a store (or never replicated) is made again when the address it asks
            // for is free in this member's share.
            // The shared store unreachable (degraded mode): only the binding this IA
            // already holds is answered, with what is left of it; the database may
            // hold nothing longer, and nothing new can be written to it.
            if self.degraded {
                let left = held
                    .and_then(|ip| self.bindings.get(ip))
                    .filter(|l| l.state == LeaseState::Bound && l.is_active(ctx.now))
                    .map(|l| (l.ip, remaining(l, ctx.now, life)));
                if let Some((ip, capped)) = left {
                    r.opts_mut()
                        .insert(reply::ia_with(ia.id, ip, capped, &asked));
                    bound += 1;
                }
                continue;
            }
            let ip = match self.reserved_address((client, ia.id), ctx.mac, si, ctx.now) {
                Some(reserved) => reserved,
                None => {
                    held.or_else(|| asked.iter().copied().find(|ip| self.free_in_share(si, *ip)))
                }
            };
            match ip {
                Some(ip) => {
                    let lease = self.lease((client, ia.id), ip, msg, si, ctx, LeaseState::Bound);
                    effects.push(Lease6Effect::Put(lease.clone()));
                    self.bindings.insert(lease);
                    self.set_used(ip, true);
                    // §18.3.4: what the client named besides (another IA's address,
                    // one it no longer holds) and one taken back go with lifetimes 0.
                    let mut stale = asked.clone();
                    stale.extend(taken.filter(|t| !asked.contains(t)));
                    r.opts_mut().insert(reply::ia_with(ia.id, ip, life, &stale));
                    bound += 1;
                }
                None => {
                    unknown += 1;
                    // §18.3.4, §18.3.5: addresses not on the link, held by another IA,
                    // or taken back for a reservation get lifetimes 0, never extended.
                    let mut withdraw: Vec<_> = asked
                        .iter()
                        .copied()
                        .filter(|a| {
                            !network.contains(a)
                                || Some(*a) == taken
                                || self.held_by_other(*a, (client, ia.id), ctx.now)
                        })
                        .collect();
                    if let Some(t) = taken.filter(|t| !withdraw.contains(t)) {
                        withdraw.push(t);
                    }
                    // NoBinding (the client asks again) goes to an IA naming an
                    // address unknown here, or whose binding was just taken back for a
                    // reservation; one whose addresses are all withdrawn otherwise gets
                    // them back with lifetimes 0 and no status.
                    let all_withdrawn = taken.is_none()
                        && !withdraw.is_empty()
                        && asked.iter().all(|a| withdraw.contains(a));
                    r.opts_mut().insert(if all_withdrawn {
                        reply::ia_withdrawn(ia.id, &withdraw)
                    } else {
                        reply::ia_status(
                            ia.id,
                            Status::NoBinding,
                            "no binding for this IA",
                            &withdraw,
                        )
                    });
                }
            }
        }
        // (A withdrawal for a reservation is answered: its release must be stored.)
        if bound == 0
            && effects.is_empty()
            && (unknown == 0 || (rebind && ctx.responsibility != Responsibility::Mine))
        {
            return Decision6::ignore(Ignore6::NothingToAnswer);
        }
        self.configure(&mut r, msg, si, ctx);
        let outcome = if bound > 0 {
            Outcome6::Bound(bound)
        } else {
            Outcome6::NoBinding
        };
        Decision6 {
            reply: Some(r),
            effects,
            outcome,
        }
    }

    /// Whether another IA than `ia` has a live record on `ip` (a binding, an
    /// advertisement, a quarantine): not an address `ia` may be given.
    fn held_by_other(&self, ip: Ipv6Addr, (client, iaid): (&[u8], u32), now: u64) -> bool {
        self.bindings.get(ip).is_some_and(|l| {
            (l.duid != client || l.iaid != iaid)
                && l.state != LeaseState::Released
                && l.is_active(now)
        })
    }

    /// While the shared lease store answers, any binding may be extended (it decides);
    /// while it does not, a Renew or Rebind runs only to the binding's current end.
    pub fn set_shared_store_up(&mut self, up: bool) {
        self.degraded = !up;
    }

    /// Release (RFC 8415 §18.3.7) and Decline (§18.3.8): the client gives addresses up,
    /// or reports them in use by another host; a declined address is quarantined.
    /// Unlike a v4 RELEASE, no source address is checked: the client sends from its
    /// link-local address (§18.2.7), so its DUID and IAID are all that name the binding.
    fn release(
        &mut self,
        msg: &Message,
        client: &[u8],
        ctx: &Context6<'_>,
        decline: bool,
    ) -> Decision6 {
        let mut r = reply::start(MessageType::Reply, msg, &self.duid);
        let mut effects = Vec::new();
        for ia in reply::ia_nas(msg) {
            let mut known = false;
            for ip in reply::addresses_in(ia) {
                // RFC 8415 §18.3.7: only a binding is released; an address that was
                // only advertised, or is released already, is none (NoBinding below).
                let Some(held) = self
                    .bindings
                    .get(ip)
                    .filter(|l| l.duid == client && l.iaid == ia.id)
                    .filter(|l| decline || l.state == LeaseState::Bound)
                    .cloned()
                else {
                    continue;
                };
                known = true;
                let mut lease = held;
                if decline {
                    lease.state = LeaseState::Declined;
                    lease.expires = ctx.now + self.decline_hold;
                    lease.preferred = lease.expires;
                } else {
                    lease.state = LeaseState::Released;
                }
                effects.push(Lease6Effect::Put(lease.clone()));
                self.bindings.insert(lease);
                if decline {
                    self.bindings.detach(ip);
                } else {
                    self.set_used(ip, false);
                }
            }
            if !known {
                r.opts_mut().insert(reply::ia_status(
                    ia.id,
                    Status::NoBinding,
                    "no binding for this IA",
                    &[],
                ));
            }
        }
        r.opts_mut().insert(reply::status(
            Status::Success,
            if decline { "declined" } else { "released" },
        ));
        Decision6 {
            reply: Some(r),
            effects,
            outcome: if decline {
                Outcome6::Declined
            } else {
                Outcome6::Released
            },
        }
    }

    /// Confirm (RFC 8415 §18.3.3): whether the client's addresses fit its link. An
    /// address reserved for another machine does not, nor, for a machine with a
    /// reservation, any other than its own: NotOnLink makes the client solicit again,
    /// and so get the right one.
    fn confirm(&self, msg: &Message, si: usize, mac: Option<MacAddr>) -> Decision6 {
        let asked: Vec<Ipv6Addr> = reply::ia_nas(msg)
            .into_iter()
            .flat_map(reply::addresses_in)
            .collect();
        if asked.is_empty() {
            return Decision6::ignore(Ignore6::NothingToAnswer);
        }
        let own = self.hosts.reservation(mac);
        let on_link = asked.iter().all(|a| {
            self.subnets[si].cfg.network.contains(a)
                && !self.hosts.reserved_for_other(*a, mac)
                && own.is_none_or(|r| r == *a)
        });
        let mut r = reply::start(MessageType::Reply, msg, &self.duid);
        r.opts_mut().insert(if on_link {
            reply::status(Status::Success, "addresses are on link")
        } else {
            reply::status(Status::NotOnLink, "addresses are not on this link")
        });
        Decision6 {
            reply: Some(r),
            effects: Vec::new(),
            outcome: Outcome6::Confirmed(on_link),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Assign {
    /// An Advertise; with Preference 255 when this member is responsible.
    Advertise { preferred: bool },
    /// A Solicit with Rapid Commit, answered by a Reply.
    RapidCommit,
    /// A Request.
    Request,
}

fn status_only(status: Status, msg: &str) -> dhcproto::v6::DhcpOptions {
    let mut o = dhcproto::v6::DhcpOptions::new();
    o.insert(reply::status(status, msg));
    o
}

/// The flags octet of the client's Client FQDN option (39), if it sent one.
fn client_fqdn_flags(msg: &Message) -> Option<u8> {
    match msg.opts().get(OptionCode::ClientFqdn)? {
        DhcpOption::Unknown(u) => Some(u.data().first().copied().unwrap_or(0)),
        _ => None,
    }
}

/// The host name in a Client FQDN option (39, RFC 4704 §4: a flags octet, then the
/// name in DNS wire format), when it reads as one.
fn client_fqdn(msg: &Message) -> Option<String> {
    let data = match msg.opts().get(OptionCode::ClientFqdn)? {
        DhcpOption::Unknown(u) => u.data(),
        _ => return None,
    };
    let mut labels = Vec::new();
    let mut rest = data.get(1..)?;
    while let Some((&len, tail)) = rest.split_first() {
        if len == 0 {
            break;
        }
        let label = tail.get(..usize::from(len))?;
        labels.push(std::str::from_utf8(label).ok()?);
        rest = &tail[usize::from(len)..];
    }
    (!labels.is_empty()).then(|| labels.join("."))
}

/// The lifetimes left of `lease` at `now`, for a renewal that may not extend it: valid
/// and preferred run to the binding's ends, and T1 and T2 keep their proportions of the
/// subnet's lifetimes within what is left (RFC 8415 §21.4: T1 ≤ T2 ≤ preferred).
fn remaining(lease: &Lease6, now: u64, configured: Lifetimes) -> Lifetimes {
    let secs = |end: u64| u32::try_from(end.saturating_sub(now)).unwrap_or(u32::MAX);
    let valid = secs(lease.expires);
    let preferred = secs(lease.preferred).min(valid);
    let share = |t: u32| {
        let whole = u64::from(configured.preferred.max(1));
        u32::try_from(u64::from(t) * u64::from(preferred) / whole).unwrap_or(preferred)
    };
    Lifetimes {
        t1: share(configured.t1).min(preferred),
        t2: share(configured.t2).min(preferred),
        preferred,
        valid,
    }
}
