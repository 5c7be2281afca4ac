//! The DHCP decision engine: a pure function of (request, context, lease state, now).
//! It reads no clock and touches no socket or disk; it returns the reply to send and the
//! lease changes to persist, and the server applies them (persisting before replying).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

mod allocate;
mod configure;
pub mod decided;
pub mod decision;
pub mod gate;
pub mod held;
mod limits;
mod members;
pub mod pool;
mod preempt;
pub mod probe;
pub mod proxy;
pub mod reply;
pub mod reserve;
pub mod settings;
pub mod table;

#[cfg(test)]
mod tests;

use super::boot::{self, BootDirective};
use super::host_policy::HostPolicy;
use super::option_fit::Fit;
use super::peek::{Peek, PeekKind};
use crate::config::{BootSettings, DhcpSettings, Host, Subnet};
use crate::mac::MacAddr;
use crate::store::{Lease, LeaseEffect, LeaseState};
use allocate::{new_lease, requested_ip};
pub use decision::{
    Decision, DnsmasqDirs, IgnoreReason, Interface, Outcome, PacketContext, PoolUsage, Reply,
    Responsibility,
};
pub use gate::{Inputs, Path, Refused};
pub use held::HeldBack;
use limits::Limits;
use members::PastList;
use pool::Pool;
pub use probe::ProbeResult;
use reply::{ReplyParts, Timers};
pub use settings::EngineSettings;
use table::LeaseTable;

#[derive(Debug)]
struct SubnetState {
    cfg: Subnet,
    pools: Vec<Pool>,
}

/// The DHCP engine's state and decision logic.
#[derive(Debug)]
pub struct Engine {
    settings: DhcpSettings,
    boot: BootSettings,
    subnets: Vec<SubnetState>,
    hosts: HashMap<MacAddr, Host>,
    reserved: HashMap<Ipv4Addr, MacAddr>,
    table: LeaseTable,
    transition_until: Option<u64>,
    /// The member list the shares come from, this member's name in it, and how long a
    /// transition after a change of it lasts.
    members: crate::owner::MemberList,
    me: Option<String>,
    transition_span: u64,
    /// The lists served before, until their transitions end: fresh addresses come only
    /// from what this member's share was under every one of them.
    past: Vec<PastList>,
    /// Since when the current list is in force, and the list before it, when this
    /// engine saw the change.
    members_since: Option<u64>,
    members_before: Option<crate::owner::MemberList>,
    /// The `[[host]]` entries as configured (run-time reservations overlay `hosts`).
    config_hosts: HashMap<MacAddr, Host>,
    /// MACs whose reservation was made at run time.
    runtime_reserved: std::collections::HashSet<MacAddr>,
    /// The limits that keep known machines served while unknown ones misbehave.
    limits: Limits,
    /// The shared lease store answers: the database decides every binding, so any
    /// member may extend any lease it knows and takes a new share at once.
    shared_up: bool,
    /// Whether any machine can be known (`limits::reserve_for_known`).
    may_know: bool,
    /// Offers held for unknown machines, which known ones may take (`preempt`).
    unknown_offers: preempt::UnknownOffers,
    /// The shared lease store does not answer: no lease is extended past its
    /// current end (`set_shared_store_up`).
    degraded: bool,
    /// Probes of inherited addresses in flight (`probe`).
    probes: probe::Probes,
}

impl Engine {
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

    /// Frees addresses whose leases, offers or quarantines expired by `now`, ends the
    /// transitions and probe windows that are over. Nothing to persist: an expired
    /// record on disk is already free when loaded.
    pub fn handle_tick(&mut self, now: u64) -> usize {
        if self.transition_until.is_some_and(|u| now >= u) {
            self.past.retain(|p| p.until > now);
            self.restrict_to_past_shares();
        }
        self.end_probes(now);
        self.reclaim(now)
    }

    /// Frees every address whose lease, offer or quarantine (`decline_hold_secs`) ended
    /// by `now`. Every decision runs it first, so an expiry takes effect at its time,
    /// not at the next tick (`reclaim_interval_secs`): the pools' bitmaps say an address
    /// is used until then, and allocation trusts them.
    fn reclaim(&mut self, now: u64) -> usize {
        let expired = self.table.take_expired(now);
        let n = expired.len();
        for ip in expired {
            let still_held = self.table.get(ip).is_some_and(|l| l.is_active(now));
            self.set_used(ip, still_held);
        }
        n
    }

    /// A machine the operator knows: a `[[host]]` entry or run-time reservation, an
    /// allow (API or hosts directory), or an owner the resolver knows.
    fn is_known(&self, mac: &MacAddr, ctx: &PacketContext<'_>) -> bool {
        ctx.known
            || self.hosts.contains_key(mac)
            || matches!(ctx.policy, Some((HostPolicy::Allow, _)))
    }

    /// Whether an unknown machine may take a fresh address of subnet `si`: offers
    /// outstanding are under the cap, and more than the subnet's reserve for known
    /// machines is left in this member's share (counted from the pools' use counters;
    /// excluded and reserved addresses count as free, so the reserve errs generous).
    fn unknown_may_take(&self, si: usize) -> bool {
        if self.table.offered() >= self.settings.max_offers as usize {
            return false;
        }
        let s = &self.subnets[si];
        let (share, free) = s.pools.iter().fold((0u64, 0u64), |(share, free), p| {
            let len = p.share_len();
            (
                share + u64::from(len),
                free + u64::from(len.saturating_sub(p.in_use_in_share())),
            )
        });
        free > limits::reserve_for_known(s.cfg.reserve_for_known, share, self.may_know)
    }

    fn server_id(&self, ctx: &PacketContext<'_>) -> Ipv4Addr {
        self.settings.server_id.unwrap_or(ctx.interface.addr)
    }

    /// Decides the answer to one validated request.
    pub fn handle_message(&mut self, msg: &Message, ctx: &PacketContext<'_>) -> Decision {
        self.reclaim(ctx.now);
        let Some(mac) = MacAddr::from_chaddr(msg.chaddr()) else {
            return Decision::ignore(IgnoreReason::Unsupported);
        };
        if let Some(reason) = self.refused(&mac, ctx) {
            return Decision::ignore(reason);
        }
        if self.settings.proxy {
            return self.proxy(msg, &mac, ctx);
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

    /// Why `mac` is refused whatever it asks, if it is.
    fn refused(&self, mac: &MacAddr, ctx: &PacketContext<'_>) -> Option<IgnoreReason> {
        use crate::dhcp::host_policy::{refusal, Refusal};
        let host_denies = self.hosts.get(mac).map(|h| h.deny);
        refusal(ctx.policy, host_denies, self.settings.known_only).map(|r| match r {
            Refusal::Denied => IgnoreReason::Denied,
            Refusal::Unknown => IgnoreReason::UnknownClient,
        })
    }

    /// Decides a request from its [`Peek`] alone when the answer is silence: the reason
    /// [`Self::handle_message`] would give the decoded request, with the same change to
    /// the state (a REQUEST for another server releases this member's offer). `None`
    /// when the decision needs the whole message.
    pub fn handle_peeked(&mut self, peek: &Peek, ctx: &PacketContext<'_>) -> Option<IgnoreReason> {
        if let Some(reason) = self.refused(&peek.mac, ctx) {
            return Some(reason);
        }
        // A ProxyDHCP answers boot firmware whoever is responsible, and weighs option 60,
        // 77 and 175 first (`proxy`): decided on the whole message.
        if self.settings.proxy {
            return None;
        }
        match peek.kind {
            PeekKind::Discover => (ctx.responsibility == Responsibility::NotMine)
                .then_some(IgnoreReason::NotResponsible),
            PeekKind::Selecting { server_id } if server_id != self.server_id(ctx) => {
                self.release_offer(&peek.mac);
                Some(IgnoreReason::OtherServer)
            }
            PeekKind::Selecting { .. } => None,
        }
    }

    /// The client took another server's offer: release ours at once.
    fn release_offer(&mut self, mac: &MacAddr) {
        if let Some(l) = self
            .table
            .by_mac(mac)
            .filter(|l| l.state == LeaseState::Offered)
        {
            let ip = l.ip;
            self.table.remove(ip);
            self.set_used(ip, false);
        }
    }

    fn discover(&mut self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        if ctx.responsibility == Responsibility::NotMine {
            return Decision::ignore(IgnoreReason::NotResponsible);
        }
        let Some(chain) = self.probe_chain(mac) else {
            return Decision::ignore(IgnoreReason::Probing);
        };
        let known = self.is_known(mac, ctx);
        let rate = self.settings.unknown_discovers_per_sec;
        if !known
            && !self
                .limits
                .admit(ctx.interface.addr, msg.giaddr(), rate, ctx.now)
        {
            return Decision::ignore(IgnoreReason::Limited);
        }
        let Some(si) = self.select_subnet(msg, ctx) else {
            return Decision::ignore(IgnoreReason::NoSubnet);
        };
        let chosen = match self.choose_address(si, mac, requested_ip(msg), ctx.now) {
            None if known => self.take_unknown_offer(si, mac, ctx.now),
            chosen => chosen,
        };
        let Some(ip) = chosen else {
            return Decision::ignore(IgnoreReason::PoolExhausted);
        };
        let fresh = !self.pools_for(ip).any(|p| p.is_used(ip));
        if !known && fresh && !self.unknown_may_take(si) {
            return Decision::ignore(IgnoreReason::Limited);
        }
        if let Some(probe) = self.probe_first(msg, ip, mac, chain, ctx.now) {
            return probe;
        }
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
            if !known {
                self.note_unknown_offer(ip, *mac, ctx.now);
            }
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
                self.release_offer(mac);
                return Decision::ignore(IgnoreReason::OtherServer);
            }
            let Some(ip) = requested_ip(msg).or(ciaddr) else {
                return Decision::ignore(IgnoreReason::Unsupported);
            };
            let Some(si) = self.select_subnet(msg, ctx) else {
                return Decision::ignore(IgnoreReason::NoSubnet);
            };
            // SELECTING answers an OFFER (RFC 2131 §4.3.2): the address must be one this
            // server offered or leased to the client, or reserved for it. Otherwise any
            // client could bind any free address for a full lease without a DISCOVER.
            let answered_offer = self.table.get(ip).is_some_and(|l| &l.mac == mac)
                || self.reserved.get(&ip) == Some(mac);
            if !answered_offer {
                return self.nak(msg, ours);
            }
            if self.servable(si, ip, mac)
                && self.partition_allows(si, ip, mac, ctx.now)
                && self.available_for(ip, mac, ctx.now)
            {
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
            // RFC 2131 §4.3.2: an INIT-REBOOT address on the wrong network gets a NAK,
            // and so does one this server never hands the client: on its network but
            // outside every range and not reserved for it. Run-time reservations are
            // each member's own, so with several members only one that has a record of
            // the client judges the latter; another stays silent.
            if let Some(s) = si {
                let subnet = &self.subnets[s];
                let servable = subnet.pools.iter().any(|p| p.contains(ip))
                    || self.reserved.get(&ip) == Some(mac);
                let judged = self.members.len() <= 1 || self.table.by_mac(mac).is_some();
                if !subnet.cfg.network.contains(&ip) || (!servable && judged) {
                    return self.nak(msg, ours);
                }
            }
            si
        };
        let Some(si) = si else {
            return Decision::ignore(IgnoreReason::NoSubnet);
        };
        match self.table.get(ip) {
            // Every member that holds the client's lease answers, the responsible one or
            // not (a binding another member wrote to the shared store included): the
            // responsible member may be dead, and the same ACK twice costs the client
            // nothing.
            Some(l) if &l.mac == mac && l.state != LeaseState::Declined => {
                let servable = self.servable(si, ip, mac) && self.available_for(ip, mac, ctx.now);
                if servable && self.partition_allows(si, ip, mac, ctx.now) {
                    self.ack(msg, ip, si, mac, ctx)
                } else if servable && self.members.len() > 1 {
                    // This member's record of the binding ran out and the address is
                    // another member's to hand out: that member, whose record a renewal
                    // this one has not seen yet may have extended, answers. RFC 2131
                    // §4.3.2 NAKs only a notion known to be wrong, and a stale copy
                    // does not know that.
                    Decision::ignore(IgnoreReason::NotResponsible)
                } else {
                    self.nak(msg, ours)
                }
            }
            // Another client holds the address. RFC 2131 §4.3.2: a server with no record
            // of an INIT-REBOOT client stays silent (another server may have bound it);
            // one that knows the client says its notion is wrong. With several members,
            // an offer of this member's to another client proves nothing: another
            // member may have bound the address to this client through the shared store
            // after this member's copy last heard of it.
            Some(l)
                if l.is_active(ctx.now)
                    && ctx.responsibility == Responsibility::Mine
                    && (ciaddr.is_some() || self.table.by_mac(mac).is_some())
                    && (self.members.len() <= 1 || l.state != LeaseState::Offered) =>
            {
                self.nak(msg, ours)
            }
            // RFC 2131 §4.3.2: a client in INIT-REBOOT whose notion of its address
            // differs from this server's record of its binding gets a NAK, and
            // DISCOVERs again. Only when no other member can hold that binding: the
            // address is one only this member hands out (its share, or reserved for the
            // MAC), this member is responsible for the client, and its record is a live
            // binding, not an offer.
            _ if ciaddr.is_none()
                && ctx.responsibility == Responsibility::Mine
                && self.fresh_allowed(si, ip, mac)
                && self.table.by_mac(mac).is_some_and(|l| {
                    l.ip != ip && l.state == LeaseState::Bound && l.is_active(ctx.now)
                }) =>
            {
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
        let timers = self.timers(si, ip, mac, ctx.now);
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
        // Bound: a client now uses the address, so the store has seen it.
        self.pools_for(ip).for_each(|p| p.seen(ip));
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
            server_options: &[],
            dnsmasq: DnsmasqDirs::default(),
        };
        Decision {
            reply: Some(Reply {
                message: reply::build(msg, &parts),
                destination: reply::destination(msg, MessageType::Nak, Ipv4Addr::UNSPECIFIED),
                fit: Fit::for_request(msg.opts()),
            }),
            effects: Vec::new(),
            outcome: Outcome::Nak,
        }
    }

    /// The client's timers. A lease this member holds outside the addresses it may
    /// hand out fresh (its share moved with a membership change) runs to its current
    /// expiry and is never extended, so it is gone before another member may hand the
    /// address out.
    fn timers(&self, si: usize, ip: Ipv4Addr, mac: &MacAddr, now: u64) -> Timers {
        let full = Timers::for_client(&self.subnets[si].cfg, self.hosts.get(mac));
        // While the shared store answers, it decides every extension; while it does
        // not, none may be extended.
        if !self.degraded && (self.shared_up || self.fresh_allowed(si, ip, mac)) {
            return full;
        }
        match self
            .table
            .get(ip)
            .filter(|l| &l.mac == mac && l.is_active(now))
        {
            Some(l) => {
                let left = u32::try_from(l.expires.saturating_sub(now))
                    .unwrap_or(u32::MAX)
                    .min(full.lease);
                Timers {
                    lease: left,
                    renewal: left / 2,
                    rebinding: left / 8 * 7,
                }
            }
            None => full,
        }
    }

    /// The operator frees `ip` (DELETE /v1/leases/{ip}): the record is forgotten and
    /// the address can go to any client. Returns the change to persist, or `None` when
    /// no record holds the address.
    pub fn forget(&mut self, ip: Ipv4Addr) -> Option<LeaseEffect> {
        let mac = self.table.get(ip)?.mac;
        self.table.remove(ip);
        self.set_used(ip, false);
        Some(LeaseEffect::Remove(ip, mac))
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
            timers: Some(self.timers(si, ip, mac, ctx.now)),
            boot: boot.as_ref(),
            server_options: &self.settings.options,
            dnsmasq: ctx.dnsmasq,
        };
        Reply {
            message: reply::build(msg, &parts),
            destination: reply::destination(msg, kind, ip),
            fit: Fit::for_request(msg.opts()),
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
        // RFC 2131 §4.3.3: a client declines the address it was offered or bound, so
        // only while it holds it: not one it released, let lapse or declined already.
        let holds = self.table.get(ip).is_some_and(|l| {
            &l.mac == mac
                && matches!(l.state, LeaseState::Offered | LeaseState::Bound)
                && l.is_active(ctx.now)
        });
        if !holds {
            return Decision::ignore(IgnoreReason::NoRecord);
        }
        // Each DECLINE quarantines an address, durably: a client cannot take the pool
        // out of service by declining everything it is offered. The per-MAC cap holds
        // for every client (a known MAC can be sniffed and spoofed); the overall cap
        // only for unknown ones, so that they cannot use it up for known machines.
        let cap = (!self.is_known(mac, ctx)).then_some(self.settings.max_declined);
        let (per_mac, hold) = (
            self.settings.declines_per_mac,
            self.settings.decline_hold_secs,
        );
        if !self.limits.may_decline(mac, cap, per_mac, hold, ctx.now) {
            return Decision::ignore(IgnoreReason::Limited);
        }
        self.limits.declined(ctx.now + u64::from(hold));
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
        // RFC 2131 §4.4.6: the client unicasts its RELEASE from the address it gives
        // up. chaddr and ciaddr prove nothing (anyone on the link can copy a victim's),
        // but the source must then be routable back to the sender: a RELEASE sent
        // directly from elsewhere would free another client's address (on every member,
        // through the shared store). A relayed one comes from a relay the shell trusts
        // (`dhcp.relays`), so its source is the relay's.
        if msg.giaddr().is_unspecified() && ctx.source != ip {
            return Decision::ignore(IgnoreReason::NotFromClient);
        }
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
        // RFC 2131 §4.3.5: the answer goes to ciaddr. Only for an address on a served
        // subnet: otherwise any client could aim this server's answers at any host (a
        // spoofed source and ciaddr make it a reflector).
        let ciaddr = msg.ciaddr();
        let Some(si) = self
            .subnets
            .iter()
            .position(|s| s.cfg.network.contains(&ciaddr))
        else {
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
            server_options: &self.settings.options,
            dnsmasq: ctx.dnsmasq,
        };
        Decision {
            reply: Some(Reply {
                message: reply::build(msg, &parts),
                destination: reply::destination(msg, MessageType::Ack, Ipv4Addr::UNSPECIFIED),
                fit: Fit::for_request(msg.opts()),
            }),
            effects: Vec::new(),
            outcome: Outcome::Inform,
        }
    }
}
