//! Which lease records a page of `/v1/leases` (or `shardboot leases`) asks for.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::{Lease, LeaseState};
use crate::mac::MacAddr;

/// Filters over lease records; every one given must match.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeaseQuery {
    /// Only addresses above this one: the last address of the previous page. Pages are
    /// in address order, so a cursor stays valid while leases come and go.
    pub after: Option<Ipv4Addr>,
    /// Only this client's records.
    pub mac: Option<MacAddr>,
    /// Only this address.
    pub ip: Option<Ipv4Addr>,
    /// Only addresses in this network.
    pub subnet: Option<Ipv4Net>,
    /// Only records in this state.
    pub state: Option<LeaseState>,
}

impl LeaseQuery {
    /// Whether `lease` passes every filter.
    pub fn matches(&self, lease: &Lease) -> bool {
        self.after.is_none_or(|c| lease.ip > c)
            && self.mac.is_none_or(|m| lease.mac == m)
            && self.ip.is_none_or(|i| lease.ip == i)
            && self.subnet.is_none_or(|n| n.contains(&lease.ip))
            && self.state.is_none_or(|s| lease.state == s)
    }

    /// The smallest and largest address a match can have, or `None` when none can.
    pub fn address_bounds(&self) -> Option<(Ipv4Addr, Ipv4Addr)> {
        let mut low = Ipv4Addr::UNSPECIFIED;
        let mut high = Ipv4Addr::BROADCAST;
        if let Some(after) = self.after {
            low = Ipv4Addr::from(u32::from(after).checked_add(1)?);
        }
        if let Some(n) = self.subnet {
            low = low.max(n.network());
            high = high.min(n.broadcast());
        }
        if let Some(ip) = self.ip {
            low = low.max(ip);
            high = high.min(ip);
        }
        (low <= high).then_some((low, high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_cursor_subnet_and_address() {
        let q = LeaseQuery {
            after: Some(Ipv4Addr::new(192, 0, 2, 9)),
            subnet: Some("192.0.2.0/28".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(
            q.address_bounds(),
            Some((Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 15)))
        );
        let past_end = LeaseQuery {
            after: Some(Ipv4Addr::BROADCAST),
            ..Default::default()
        };
        assert_eq!(past_end.address_bounds(), None);
        let outside = LeaseQuery {
            ip: Some(Ipv4Addr::new(10, 0, 0, 1)),
            subnet: Some("192.0.2.0/24".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(outside.address_bounds(), None);
    }
}
