//! Addresses held back at start because their stored records could not be read
//! (`store::SetAside`): who holds them and until when is unknown, so they go to no
//! client until every lease such a record could have held has ended. The same rule for
//! both families; each engine takes the records when it is built (`Engine::load`,
//! `Engine6::load`).

use std::net::Ipv4Addr;

use crate::mac::MacAddr;
use crate::store::{Lease, LeaseState, SetAside};

/// An address held back, and until when (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBack<A> {
    /// The address.
    pub ip: A,
    /// When it is free again.
    pub until: u64,
}

/// The v4 addresses the set-aside records name, each held for `span` seconds from when
/// its record was set aside (a longest lease and an offer: the record's lease cannot
/// outlast that). A record whose key is no address holds nothing back.
pub(super) fn held_back(set_aside: &[SetAside], span: u64) -> Vec<(HeldBack<Ipv4Addr>, u64)> {
    set_aside
        .iter()
        .filter_map(|r| {
            // `since` comes from the damaged record itself: saturate, never wrap.
            let until = r.since.saturating_add(span);
            Some((
                HeldBack {
                    ip: r.address()?,
                    until,
                },
                r.since,
            ))
        })
        .collect()
}

/// The record that holds `held` back in the engine: a declined lease of no client, as
/// a quarantined address is held.
pub(super) fn holding_lease(held: HeldBack<Ipv4Addr>, since: u64) -> Lease {
    Lease {
        ip: held.ip,
        mac: MacAddr([0; 6]),
        state: LeaseState::Declined,
        starts: since,
        expires: held.until,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    }
}
