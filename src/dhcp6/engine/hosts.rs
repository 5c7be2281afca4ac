//! `[[host]]` entries in the DHCPv6 engine, as v4 treats them: `deny` and
//! `dhcp.known_only` (the PXE filter), the host name, and `ip6` reservations. A reserved
//! address goes only to the MAC it is reserved for (`dhcp6::client_mac`), in or outside
//! the ranges, and the pools hold it back from everyone else. A machine with a
//! reservation gets that address or none, as with v4's `ip`; it may show another DUID
//! (firmware, then the OS it boots) and still get it.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use super::Engine6;
use crate::config::Host;
use crate::mac::MacAddr;
use crate::store::LeaseState;

/// The `[[host]]` entries by MAC and the `ip6` reservations by address.
#[derive(Debug, Default)]
pub(super) struct Hosts6 {
    by_mac: HashMap<MacAddr, Host>,
    reserved: HashMap<Ipv6Addr, MacAddr>,
}

impl Hosts6 {
    pub(super) fn new(hosts: &[Host]) -> Self {
        Self {
            by_mac: hosts.iter().map(|h| (h.mac, h.clone())).collect(),
            reserved: hosts.iter().filter_map(|h| Some((h.ip6?, h.mac))).collect(),
        }
    }

    /// Every reserved address.
    pub(super) fn reserved(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.reserved.keys().copied()
    }

    /// The `deny` flag of `mac`'s entry, when it has one (`host_policy::refusal`).
    pub(super) fn deny(&self, mac: Option<MacAddr>) -> Option<bool> {
        mac.and_then(|m| self.by_mac.get(&m)).map(|h| h.deny)
    }

    /// `mac`'s entry.
    pub(super) fn entry(&self, mac: Option<MacAddr>) -> Option<&Host> {
        mac.and_then(|m| self.by_mac.get(&m))
    }

    /// The host name of `mac`'s entry.
    pub(super) fn hostname(&self, mac: Option<MacAddr>) -> Option<&str> {
        mac.and_then(|m| self.by_mac.get(&m))?.hostname.as_deref()
    }

    /// The address reserved for `mac`.
    pub(super) fn reservation(&self, mac: Option<MacAddr>) -> Option<Ipv6Addr> {
        mac.and_then(|m| self.by_mac.get(&m))?.ip6
    }

    /// Whether `ip` is reserved for a machine other than `mac` (a client that shows no
    /// MAC is never the one).
    pub(super) fn reserved_for_other(&self, ip: Ipv6Addr, mac: Option<MacAddr>) -> bool {
        self.reserved.get(&ip).is_some_and(|m| Some(*m) != mac)
    }
}

impl Engine6 {
    /// The reserved address IA `iaid` of `client` (showing `mac`) gets on subnet `si`:
    /// `None` when the machine has no reservation. `Some(None)` when it has one that
    /// cannot be given now: on another link, quarantined by a Decline, held by another
    /// IA of the same client, or leased to another machine before it was reserved.
    pub(super) fn reserved_address(
        &self,
        (client, iaid): (&[u8], u32),
        mac: Option<MacAddr>,
        si: usize,
        now: u64,
    ) -> Option<Option<Ipv6Addr>> {
        let ip = self.hosts.reservation(mac)?;
        if !self.subnets[si].cfg.network.contains(&ip) {
            return Some(None);
        }
        let free = match self.bindings.get(ip) {
            None => true,
            Some(l) if l.state == LeaseState::Declined => !l.is_active(now),
            Some(l) if l.duid == client => l.iaid == iaid || !l.is_active(now),
            // The same machine under another DUID takes its address over.
            Some(l) => !l.is_active(now) || l.mac == mac,
        };
        Some(free.then_some(ip))
    }

    /// Forgets advertisements on reserved addresses outside the ranges that expired by
    /// `now` (those inside are the pools' to free).
    pub(super) fn expire_reserved_offers(&mut self, now: u64) -> usize {
        let due: Vec<Ipv6Addr> = self
            .hosts
            .reserved()
            .filter(|ip| {
                self.bindings
                    .get(*ip)
                    .is_some_and(|l| l.state == LeaseState::Offered && l.expires <= now)
                    && !self.subnets.iter().any(|s| s.cfg.in_ranges(*ip))
            })
            .collect();
        for ip in &due {
            self.bindings.remove(*ip);
        }
        due.len()
    }
}
