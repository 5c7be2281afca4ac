//! The DHCP decision engine: a pure function of (request, context, lease state, now).
//! It reads no clock and touches no socket or disk; it returns the reply to send and the
//! lease changes to persist, and the server applies them (persisting before replying).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use dhcproto::v4::relay::{RelayCode, RelayInfo};
use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

use super::boot::{self, BootDirective};
use super::pool::Pool;
use super::reply::{self, Destination, ReplyParts, Timers};
use super::table::LeaseTable;
use crate::config::{BootSettings, Config, DhcpSettings, Host, Subnet};
use crate::lease::{Lease, LeaseEffect, LeaseState};
use crate::mac::MacAddr;

/// The interface a request arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Kernel name, e.g. `br-prov`.
    pub name: String,
    /// This server's address on it.
    pub addr: Ipv4Addr,
}

/// Whether this member is the one that should answer the client (ARCHITECTURE.md,
/// "DHCP decisions" 2). Computed outside the engine from the owner resolver and the
/// live member set; a single instance is always responsible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Responsibility {
    /// Answer.
    Mine,
    /// Another member answers; stay silent unless the client is already ours.
    NotMine,
}

/// Per-request inputs besides the message.
#[derive(Debug, Clone, Copy)]
pub struct PacketContext<'a> {
    /// Receiving interface.
    pub interface: &'a Interface,
    /// Ownership decision for the client.
    pub responsibility: Responsibility,
    /// Unix seconds.
    pub now: u64,
}

/// A reply and where it goes.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The message.
    pub message: Message,
    /// Its destination.
    pub destination: Destination,
}

/// Why a request got no reply and no lease change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// Another member is responsible.
    NotResponsible,
    /// The MAC is denied by a `[[host]]` entry.
    Denied,
    /// `known_only` is set and the MAC has no `[[host]]` entry.
    UnknownClient,
    /// No configured subnet matches the interface, relay or requested address.
    NoSubnet,
    /// No free address.
    PoolExhausted,
    /// The client chose another server's offer.
    OtherServer,
    /// No record of the client's address; RFC 2131 §4.3.2 says stay silent.
    NoRecord,
    /// A NAK was due but `never_nak` is set.
    NakSuppressed,
    /// A message type clients do not send, or a request missing a required field.
    Unsupported,
}

impl IgnoreReason {
    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotResponsible => "not_responsible",
            Self::Denied => "denied",
            Self::UnknownClient => "unknown_client",
            Self::NoSubnet => "no_subnet",
            Self::PoolExhausted => "pool_exhausted",
            Self::OtherServer => "other_server",
            Self::NoRecord => "no_record",
            Self::NakSuppressed => "nak_suppressed",
            Self::Unsupported => "unsupported",
        }
    }
}

/// What the engine decided, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// DHCPOFFER of this address.
    Offer(Ipv4Addr),
    /// DHCPACK binding this address.
    Ack(Ipv4Addr),
    /// DHCPNAK.
    Nak,
    /// DHCPACK to an INFORM.
    Inform,
    /// The client released this address.
    Release(Ipv4Addr),
    /// The client declined this address; it is quarantined.
    Decline(Ipv4Addr),
    /// No reply.
    Ignored(IgnoreReason),
}

/// The engine's answer to one request.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Reply to send, if any. When `effects` is non-empty it may be sent only after they
    /// are durable.
    pub reply: Option<Reply>,
    /// Lease changes to persist.
    pub effects: Vec<LeaseEffect>,
    /// Summary.
    pub outcome: Outcome,
}

impl Decision {
    fn ignore(reason: IgnoreReason) -> Self {
        Self {
            reply: None,
            effects: Vec::new(),
            outcome: Outcome::Ignored(reason),
        }
    }
}

/// Free and used addresses of one subnet, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    /// The subnet.
    pub network: ipnet::Ipv4Net,
    /// Addresses that can still be handed out.
    pub free: u64,
    /// Addresses held by leases or offers.
    pub in_use: u64,
}

struct SubnetState {
    cfg: Subnet,
    pools: Vec<Pool>,
}

/// The DHCP engine's state and decision logic.
pub struct Engine {
    settings: DhcpSettings,
    boot: BootSettings,
    subnets: Vec<SubnetState>,
    hosts: HashMap<MacAddr, Host>,
    reserved: HashMap<Ipv4Addr, MacAddr>,
    table: LeaseTable,
}

impl Engine {
    /// Builds the engine from configuration and the leases loaded from the store.
    pub fn new(config: &Config, stored: Vec<Lease>, now: u64) -> Self {
        let mut engine = Self {
            settings: config.dhcp.clone(),
            boot: config.boot.clone(),
            subnets: config
                .subnets
                .iter()
                .map(|s| SubnetState {
                    cfg: s.clone(),
                    pools: s.ranges.iter().map(|(a, b)| Pool::new(*a, *b)).collect(),
                })
                .collect(),
            hosts: config.hosts.iter().map(|h| (h.mac, h.clone())).collect(),
            reserved: config
                .hosts
                .iter()
                .filter_map(|h| Some((h.ip?, h.mac)))
                .collect(),
            table: LeaseTable::default(),
        };
        let blocked: Vec<Ipv4Addr> = config
            .subnets
            .iter()
            .flat_map(|s| s.exclude.iter().copied())
            .chain(engine.reserved.keys().copied())
            .collect();
        for ip in blocked {
            engine.pools_for(ip).for_each(|p| p.block(ip));
        }
        let mut stored = stored;
        // Oldest first, so a MAC's newest lease wins its by-MAC slot.
        stored.sort_by_key(|l| l.starts);
        for lease in stored
            .into_iter()
            .filter(|l| l.state != LeaseState::Offered)
        {
            let active = lease.is_active(now);
            let ip = lease.ip;
            engine.table.insert(lease);
            engine.set_used(ip, active);
        }
        engine
    }

    fn pools_for(&mut self, ip: Ipv4Addr) -> impl Iterator<Item = &mut Pool> {
        self.subnets
            .iter_mut()
            .flat_map(|s| s.pools.iter_mut())
            .filter(move |p| p.contains(ip))
    }

    fn set_used(&mut self, ip: Ipv4Addr, used: bool) {
        self.pools_for(ip).for_each(|p| p.set_used(ip, used));
    }

    /// The lease or offer on `ip`.
    pub fn lease(&self, ip: Ipv4Addr) -> Option<&Lease> {
        self.table.get(ip)
    }

    /// Every lease and live offer.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.table.iter()
    }

    /// Pool usage per subnet.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        self.subnets
            .iter()
            .map(|s| PoolUsage {
                network: s.cfg.network,
                free: s.pools.iter().map(|p| u64::from(p.free())).sum(),
                in_use: s.pools.iter().map(|p| u64::from(p.in_use())).sum(),
            })
            .collect()
    }

    /// Frees addresses whose leases or offers expired by `now`. Nothing to persist: an
    /// expired record on disk is already free when loaded.
    pub fn handle_tick(&mut self, now: u64) -> usize {
        let expired = self.table.take_expired(now);
        let n = expired.len();
        for ip in expired {
            let still_held = self.table.get(ip).is_some_and(|l| l.is_active(now));
            self.set_used(ip, still_held);
        }
        n
    }

    fn server_id(&self, ctx: &PacketContext<'_>) -> Ipv4Addr {
        self.settings.server_id.unwrap_or(ctx.interface.addr)
    }

    /// RFC 3527 link selection, RFC 3011 subnet selection, then giaddr (RFC 2131 §4.3.1),
    /// then the receiving interface.
    fn select_subnet(&self, msg: &Message, ctx: &PacketContext<'_>) -> Option<usize> {
        let link = match msg.opts().get(OptionCode::RelayAgentInformation) {
            Some(DhcpOption::RelayAgentInformation(info)) => {
                match info.get(RelayCode::LinkSelection) {
                    Some(RelayInfo::LinkSelection(ip)) => Some(*ip),
                    _ => None,
                }
            }
            _ => None,
        };
        let selection = match msg.opts().get(OptionCode::SubnetSelection) {
            Some(DhcpOption::SubnetSelection(ip)) => Some(*ip),
            _ => None,
        };
        let giaddr = Some(msg.giaddr()).filter(|g| !g.is_unspecified());
        if let Some(addr) = link.or(selection).or(giaddr) {
            return self
                .subnets
                .iter()
                .position(|s| s.cfg.network.contains(&addr));
        }
        let iface = ctx.interface;
        self.subnets
            .iter()
            .position(|s| s.cfg.interface.as_deref() == Some(iface.name.as_str()))
            .or_else(|| {
                self.subnets
                    .iter()
                    .position(|s| s.cfg.interface.is_none() && s.cfg.network.contains(&iface.addr))
            })
    }

    /// Whether `mac` may be given `ip` now.
    fn available_for(&self, ip: Ipv4Addr, mac: &MacAddr, now: u64) -> bool {
        if self.reserved.get(&ip).is_some_and(|owner| owner != mac) {
            return false;
        }
        match self.table.get(ip) {
            None => true,
            Some(l) if l.state == LeaseState::Declined => !l.is_active(now),
            Some(l) if &l.mac == mac => true,
            Some(l) => !l.is_active(now),
        }
    }

    /// Whether `ip` may be bound for `mac` in subnet `si`: its reservation, or a dynamic
    /// address when it has no reservation elsewhere.
    fn servable(&self, si: usize, ip: Ipv4Addr, mac: &MacAddr) -> bool {
        match self.hosts.get(mac).and_then(|h| h.ip) {
            Some(reserved) => reserved == ip,
            None => self.subnets[si]
                .pools
                .iter()
                .any(|p| p.contains(ip) && !p.is_blocked(ip)),
        }
    }

    fn choose_address(
        &mut self,
        si: usize,
        mac: &MacAddr,
        requested: Option<Ipv4Addr>,
        now: u64,
    ) -> Option<Ipv4Addr> {
        let net = self.subnets[si].cfg.network;
        if let Some(ip) = self.hosts.get(mac).and_then(|h| h.ip) {
            return (net.contains(&ip) && self.available_for(ip, mac, now)).then_some(ip);
        }
        let previous = self.table.by_mac(mac).map(|l| l.ip);
        for candidate in previous.into_iter().chain(requested) {
            if self.servable(si, candidate, mac) && self.available_for(candidate, mac, now) {
                return Some(candidate);
            }
        }
        let total: usize = self.subnets[si]
            .pools
            .iter()
            .map(|p| u32::from(p.free()) as usize)
            .sum();
        for _ in 0..=total {
            let ip = self.subnets[si]
                .pools
                .iter_mut()
                .find_map(Pool::next_free)?;
            if self.available_for(ip, mac, now) {
                return Some(ip);
            }
            // The bitmap said free but a record holds it; fix the bitmap and go on.
            self.set_used(ip, true);
        }
        None
    }

    /// Decides the answer to one validated request.
    pub fn handle_message(&mut self, msg: &Message, ctx: &PacketContext<'_>) -> Decision {
        let Some(mac) = MacAddr::from_chaddr(msg.chaddr()) else {
            return Decision::ignore(IgnoreReason::Unsupported);
        };
        match self.hosts.get(&mac) {
            Some(h) if h.deny => return Decision::ignore(IgnoreReason::Denied),
            None if self.settings.known_only => {
                return Decision::ignore(IgnoreReason::UnknownClient)
            }
            _ => {}
        }
        match msg.opts().msg_type() {
            Some(MessageType::Discover) => self.discover(msg, &mac, ctx),
            Some(MessageType::Request) => self.request(msg, &mac, ctx),
            Some(MessageType::Decline) => self.decline(msg, &mac, ctx),
            Some(MessageType::Release) => self.release(msg, &mac, ctx),
            Some(MessageType::Inform) => self.inform(msg, &mac, ctx),
            _ => Decision::ignore(IgnoreReason::Unsupported),
        }
    }

    fn discover(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        if ctx.responsibility == Responsibility::NotMine {
            return Decision::ignore(IgnoreReason::NotResponsible);
        }
        let Some(si) = self.select_subnet(msg, ctx) else {
            return Decision::ignore(IgnoreReason::NoSubnet);
        };
        let Some(ip) = self.choose_address(si, mac, requested_ip(msg), ctx.now) else {
            return Decision::ignore(IgnoreReason::PoolExhausted);
        };
        let already_bound = self
            .table
            .get(ip)
            .is_some_and(|l| &l.mac == mac && l.state == LeaseState::Bound && l.is_active(ctx.now));
        if !already_bound {
            // RFC 2131 §4.3.1: hold the offered address for the client for a while.
            let offer = new_lease(
                msg,
                ip,
                *mac,
                LeaseState::Offered,
                ctx.now,
                self.settings.offer_hold_secs,
            );
            self.table.insert(offer);
            self.set_used(ip, true);
        }
        let reply = self.positive_reply(msg, MessageType::Offer, ip, si, mac, ctx);
        Decision {
            reply: Some(reply),
            effects: Vec::new(),
            outcome: Outcome::Offer(ip),
        }
    }

    fn request(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        let server_id = match msg.opts().get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
            _ => None,
        };
        let ours = self.server_id(ctx);
        let ciaddr = Some(msg.ciaddr()).filter(|c| !c.is_unspecified());
        if let Some(sid) = server_id {
            // RFC 2131 §4.3.2 SELECTING.
            if sid != ours {
                // The client took another server's offer: release ours at once.
                if let Some(l) = self
                    .table
                    .by_mac(mac)
                    .filter(|l| l.state == LeaseState::Offered)
                {
                    let ip = l.ip;
                    self.table.remove(ip);
                    self.set_used(ip, false);
                }
                return Decision::ignore(IgnoreReason::OtherServer);
            }
            let Some(ip) = requested_ip(msg).or(ciaddr) else {
                return Decision::ignore(IgnoreReason::Unsupported);
            };
            let Some(si) = self.select_subnet(msg, ctx) else {
                return Decision::ignore(IgnoreReason::NoSubnet);
            };
            if self.servable(si, ip, mac) && self.available_for(ip, mac, ctx.now) {
                return self.ack(msg, ip, si, mac, ctx);
            }
            return self.nak(msg, ours);
        }
        // INIT-REBOOT (no ciaddr, option 50) or RENEWING/REBINDING (ciaddr).
        let Some(ip) = ciaddr.or(requested_ip(msg)) else {
            return Decision::ignore(IgnoreReason::Unsupported);
        };
        let si = if ciaddr.is_some() {
            self.subnets
                .iter()
                .position(|s| s.cfg.network.contains(&ip))
        } else {
            let si = self.select_subnet(msg, ctx);
            // RFC 2131 §4.3.2: an INIT-REBOOT address on the wrong network gets a NAK.
            if let Some(s) = si {
                if !self.subnets[s].cfg.network.contains(&ip) {
                    return self.nak(msg, ours);
                }
            }
            si
        };
        let Some(si) = si else {
            return Decision::ignore(IgnoreReason::NoSubnet);
        };
        match self.table.get(ip) {
            Some(l) if &l.mac == mac && l.state != LeaseState::Declined => {
                if self.servable(si, ip, mac) && self.available_for(ip, mac, ctx.now) {
                    self.ack(msg, ip, si, mac, ctx)
                } else {
                    self.nak(msg, ours)
                }
            }
            Some(l) if l.is_active(ctx.now) && ctx.responsibility == Responsibility::Mine => {
                self.nak(msg, ours)
            }
            _ if ctx.responsibility == Responsibility::NotMine => {
                Decision::ignore(IgnoreReason::NotResponsible)
            }
            _ => Decision::ignore(IgnoreReason::NoRecord),
        }
    }

    fn ack(
        &mut self,
        msg: &Message,
        ip: Ipv4Addr,
        si: usize,
        mac: &MacAddr,
        ctx: &PacketContext<'_>,
    ) -> Decision {
        let timers = Timers::for_client(&self.subnets[si].cfg, self.hosts.get(mac));
        let mut lease = new_lease(msg, ip, *mac, LeaseState::Bound, ctx.now, timers.lease);
        if let Some(old) = self
            .table
            .get(ip)
            .filter(|l| &l.mac == mac && l.state == LeaseState::Bound)
        {
            lease.starts = old.starts;
        }
        self.table.insert(lease.clone());
        self.set_used(ip, true);
        let reply = self.positive_reply(msg, MessageType::Ack, ip, si, mac, ctx);
        Decision {
            reply: Some(reply),
            effects: vec![LeaseEffect::Put(lease)],
            outcome: Outcome::Ack(ip),
        }
    }

    fn nak(&self, msg: &Message, server_id: Ipv4Addr) -> Decision {
        if self.settings.never_nak {
            return Decision::ignore(IgnoreReason::NakSuppressed);
        }
        let parts = ReplyParts {
            kind: MessageType::Nak,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            server_id,
            subnet: None,
            host: None,
            timers: None,
            boot: None,
        };
        Decision {
            reply: Some(Reply {
                message: reply::build(msg, &parts),
                destination: reply::destination(msg, MessageType::Nak),
            }),
            effects: Vec::new(),
            outcome: Outcome::Nak,
        }
    }

    fn positive_reply(
        &self,
        msg: &Message,
        kind: MessageType,
        ip: Ipv4Addr,
        si: usize,
        mac: &MacAddr,
        ctx: &PacketContext<'_>,
    ) -> Reply {
        let subnet = &self.subnets[si].cfg;
        let host = self.hosts.get(mac);
        let boot = self.boot_for(msg, host, ctx);
        let parts = ReplyParts {
            kind,
            yiaddr: ip,
            server_id: self.server_id(ctx),
            subnet: Some(subnet),
            host,
            timers: Some(Timers::for_client(subnet, host)),
            boot: boot.as_ref(),
        };
        Reply {
            message: reply::build(msg, &parts),
            destination: reply::destination(msg, kind),
        }
    }

    fn boot_for(
        &self,
        msg: &Message,
        host: Option<&Host>,
        ctx: &PacketContext<'_>,
    ) -> Option<BootDirective> {
        let class = boot::classify(msg.opts());
        boot::select(
            class,
            &self.boot,
            self.server_id(ctx),
            host.and_then(|h| h.boot_file.as_deref()),
        )
    }

    fn decline(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        let Some(ip) = requested_ip(msg) else {
            return Decision::ignore(IgnoreReason::Unsupported);
        };
        if !self.table.get(ip).is_some_and(|l| &l.mac == mac) {
            return Decision::ignore(IgnoreReason::NoRecord);
        }
        // RFC 2131 §4.3.3: mark the address as not available.
        let lease = new_lease(
            msg,
            ip,
            *mac,
            LeaseState::Declined,
            ctx.now,
            self.settings.decline_hold_secs,
        );
        self.table.insert(lease.clone());
        self.set_used(ip, true);
        Decision {
            reply: None,
            effects: vec![LeaseEffect::Put(lease)],
            outcome: Outcome::Decline(ip),
        }
    }

    fn release(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        let ip = msg.ciaddr();
        let Some(held) = self
            .table
            .get(ip)
            .filter(|l| &l.mac == mac && l.is_active(ctx.now))
        else {
            return Decision::ignore(IgnoreReason::NoRecord);
        };
        // RFC 2131 §4.3.4: the address is free again; the record stays so the client gets
        // the same address next time if it is still free.
        let mut lease = held.clone();
        lease.state = LeaseState::Released;
        lease.expires = ctx.now;
        self.table.insert(lease.clone());
        self.set_used(ip, false);
        Decision {
            reply: None,
            effects: vec![LeaseEffect::Put(lease)],
            outcome: Outcome::Release(ip),
        }
    }

    fn inform(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        let ciaddr = msg.ciaddr();
        let si = self
            .subnets
            .iter()
            .position(|s| s.cfg.network.contains(&ciaddr))
            .or_else(|| self.select_subnet(msg, ctx));
        let Some(si) = si else {
            return Decision::ignore(IgnoreReason::NoSubnet);
        };
        let host = self.hosts.get(mac);
        let boot = self.boot_for(msg, host, ctx);
        // RFC 2131 §4.3.5: no yiaddr and no lease time in the reply to an INFORM.
        let parts = ReplyParts {
            kind: MessageType::Ack,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            server_id: self.server_id(ctx),
            subnet: Some(&self.subnets[si].cfg),
            host,
            timers: None,
            boot: boot.as_ref(),
        };
        Decision {
            reply: Some(Reply {
                message: reply::build(msg, &parts),
                destination: reply::destination(msg, MessageType::Ack),
            }),
            effects: Vec::new(),
            outcome: Outcome::Inform,
        }
    }
}

fn requested_ip(msg: &Message) -> Option<Ipv4Addr> {
    match msg.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(ip)) if !ip.is_unspecified() => Some(*ip),
        _ => None,
    }
}

fn new_lease(
    msg: &Message,
    ip: Ipv4Addr,
    mac: MacAddr,
    state: LeaseState,
    now: u64,
    secs: u32,
) -> Lease {
    let opts = msg.opts();
    Lease {
        ip,
        mac,
        state,
        starts: now,
        expires: now + u64::from(secs),
        hostname: match opts.get(OptionCode::Hostname) {
            Some(DhcpOption::Hostname(h)) => Some(h.clone()),
            _ => None,
        },
        client_id: match opts.get(OptionCode::ClientIdentifier) {
            Some(DhcpOption::ClientIdentifier(c)) => Some(c.clone()),
            _ => None,
        },
        machine_id: match opts.get(OptionCode::ClientMachineIdentifier) {
            Some(DhcpOption::ClientMachineIdentifier(u)) => Some(u.clone()),
            _ => None,
        },
        arch: match opts.get(OptionCode::ClientSystemArchitecture) {
            Some(DhcpOption::ClientSystemArchitecture(a)) => Some(a.0),
            _ => None,
        },
    }
}
