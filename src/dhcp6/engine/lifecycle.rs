//! An IA's life on this server (RFC 8415 §18.3): which address it gets, Advertise,
//! Request and Rapid Commit binding it, Renew and Rebind extending it (or its
//! addresses returned with lifetimes 0 when no longer appropriate, §18.3.4–5),
//! Release and Confirm.

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, Status, IANA};

use super::reply::Lifetimes;
use crate::dhcp::engine::Responsibility;
use crate::dhcp6::boot::classify;
use crate::mac::MacAddr;
use crate::store::{Lease6, Lease6Effect, LeaseState};

use super::*;

impl Engine6 {
    /// The address for `ia` of `client` on subnet `si`: its machine's reservation (or
    /// none, if that cannot be given), else the one it holds (or was advertised), else
    /// the free one it hints at inside this member's share, else the next free one of
    /// the share.
    pub(super) fn address_for(
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

    pub(super) fn lease(
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

    pub(super) fn assign(
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
    pub(super) fn extend(
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
    pub(super) fn held_by_other(
        &self,
        ip: Ipv6Addr,
        (client, iaid): (&[u8], u32),
        now: u64,
    ) -> bool {
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
    pub(super) fn release(
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
    pub(super) fn confirm(&self, msg: &Message, si: usize, mac: Option<MacAddr>) -> Decision6 {
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
pub(super) enum Assign {
    /// An Advertise; with Preference 255 when this member is responsible.
    Advertise { preferred: bool },
    /// A Solicit with Rapid Commit, answered by a Reply.
    RapidCommit,
    /// A Request.
    Request,
}

pub(super) fn status_only(status: Status, msg: &str) -> dhcproto::v6::DhcpOptions {
    let mut o = dhcproto::v6::DhcpOptions::new();
    o.insert(reply::status(status, msg));
    o
}

/// The flags octet of the client's Client FQDN option (39), if it sent one.
pub(super) fn client_fqdn_flags(msg: &Message) -> Option<u8> {
    match msg.opts().get(OptionCode::ClientFqdn)? {
        DhcpOption::Unknown(u) => Some(u.data().first().copied().unwrap_or(0)),
        _ => None,
    }
}

/// The host name in a Client FQDN option (39, RFC 4704 §4: a flags octet, then the
/// name in DNS wire format), when it reads as one.
pub(super) fn client_fqdn(msg: &Message) -> Option<String> {
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
pub(super) fn remaining(lease: &Lease6, now: u64, configured: Lifetimes) -> Lifetimes {
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
