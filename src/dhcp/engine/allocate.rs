//! Address choice for the engine: which subnet a request belongs to, whether an address
//! may go to a client, and which address to offer (reservation, the client's previous
//! address, the requested one, then the next free in the pools).

use std::net::Ipv4Addr;

use dhcproto::v4::relay::{RelayCode, RelayInfo};
use dhcproto::v4::{DhcpOption, Message, OptionCode};

use super::decision::PacketContext;
use super::pool::Pool;
use super::Engine;
use crate::mac::MacAddr;
use crate::store::{Lease, LeaseState};

impl Engine {
    pub(super) fn pools_for(&mut self, ip: Ipv4Addr) -> impl Iterator<Item = &mut Pool> {
        self.subnets
            .iter_mut()
            .flat_map(|s| s.pools.iter_mut())
            .filter(move |p| p.contains(ip))
    }

    pub(super) fn set_used(&mut self, ip: Ipv4Addr, used: bool) {
        self.pools_for(ip).for_each(|p| p.set_used(ip, used));
    }

    /// RFC 3527 link selection, RFC 3011 subnet selection, then giaddr (RFC 2131 §4.3.1),
    /// then the receiving interface.
    pub(super) fn select_subnet(&self, msg: &Message, ctx: &PacketContext<'_>) -> Option<usize> {
        let giaddr = Some(msg.giaddr()).filter(|g| !g.is_unspecified());
        // Link selection is a relay agent's statement (RFC 3527 §2); in a packet that
        // came through no relay it is the client's own claim, and is not trusted.
        let link = match msg.opts().get(OptionCode::RelayAgentInformation) {
            _ if giaddr.is_none() => None,
            Some(DhcpOption::RelayAgentInformation(info)) => {
                match info.get(RelayCode::LinkSelection) {
                    Some(RelayInfo::LinkSelection(ip)) => Some(*ip),
                    _ => None,
                }
            }
            _ => None,
        };
        // Subnet selection (RFC 3011) is likewise believed only from a relay: a client
        // on the link must not choose another network's addresses for itself.
        let selection = match msg.opts().get(OptionCode::SubnetSelection) {
            _ if giaddr.is_none() => None,
            Some(DhcpOption::SubnetSelection(ip)) => Some(*ip),
            _ => None,
        };
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
    pub(super) fn available_for(&self, ip: Ipv4Addr, mac: &MacAddr, now: u64) -> bool {
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
    pub(super) fn servable(&self, si: usize, ip: Ipv4Addr, mac: &MacAddr) -> bool {
        match self.hosts.get(mac).and_then(|h| h.ip) {
            Some(reserved) => reserved == ip,
            None => self.subnets[si]
                .pools
                .iter()
                .any(|p| p.contains(ip) && !p.is_blocked(ip)),
        }
    }

    /// Whether `ip` is one this member hands out fresh: in its share (as narrowed
    /// after a membership change) or reserved for the MAC.
    pub(super) fn fresh_allowed(&self, si: usize, ip: Ipv4Addr, mac: &MacAddr) -> bool {
        self.subnets[si].pools.iter().any(|p| p.in_share(ip)) || self.reserved.get(&ip) == Some(mac)
    }

    /// Whether this member may give `ip` to `mac` without overlapping another member:
    /// a fresh address of its own, or a lease it already holds for the MAC that has not
    /// expired (kept after a membership change, but never extended: see `ack`).
    pub(super) fn partition_allows(
        &self,
        si: usize,
        ip: Ipv4Addr,
        mac: &MacAddr,
        now: u64,
    ) -> bool {
        self.fresh_allowed(si, ip, mac)
            || self
                .table
                .get(ip)
                .is_some_and(|l| &l.mac == mac && l.is_active(now))
    }

    pub(super) fn choose_address(
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
        // The client's own record, anywhere in the range: this member holds it. A
        // requested address this member holds no record of must be in its own share,
        // or two members could hand out the same address.
        let previous = self.table.by_mac(mac).map(|l| l.ip);
        if let Some(ip) = previous {
            if self.partition_allows(si, ip, mac, now)
                && self.servable(si, ip, mac)
                && self.available_for(ip, mac, now)
            {
                return Some(ip);
            }
        }
        if let Some(ip) = requested.filter(|ip| Some(*ip) != previous) {
            if self.partition_allows(si, ip, mac, now)
                && self.servable(si, ip, mac)
                && self.available_for(ip, mac, now)
            {
                return Some(ip);
            }
        }
        // Each pass marks one stale bitmap bit used, so the shares' size bounds the
        // loop (counting the free bits instead would scan every bitmap per request).
        let bound: usize = self.subnets[si]
            .pools
            .iter()
            .map(|p| p.share_len() as usize)
            .sum();
        for _ in 0..=bound {
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
}

pub(super) fn requested_ip(msg: &Message) -> Option<Ipv4Addr> {
    match msg.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(ip)) if !ip.is_unspecified() => Some(*ip),
        _ => None,
    }
}

pub(super) fn new_lease(
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
        // Kept the way every reader shows it (see `store::text`).
        hostname: match opts.get(OptionCode::Hostname) {
            Some(DhcpOption::Hostname(h)) => Some(crate::store::text::shown(h)),
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
