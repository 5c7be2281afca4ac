//! The lease record and the change the DHCP engine asks the store to make to it.

use std::net::Ipv4Addr;

use crate::mac::MacAddr;

/// Where a lease is in its life. Expiry is not a state: a lease whose `expires` has passed
/// is free whatever its state says (RFC 2131 §3.1: the server may reuse it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// Offered, not yet requested. Held in memory only; never written to the store.
    Offered,
    /// Acknowledged to the client.
    Bound,
    /// Released by the client; kept so the client gets the same address back.
    Released,
    /// Declined by a client (address conflict); quarantined until `expires`.
    Declined,
}

impl LeaseState {
    /// Stable name for logs and the API.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Offered => "offered",
            Self::Bound => "bound",
            Self::Released => "released",
            Self::Declined => "declined",
        }
    }
}

/// One address and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The leased address; the store's key, so no address is ever held twice.
    pub ip: Ipv4Addr,
    /// The client's hardware address.
    pub mac: MacAddr,
    /// Lifecycle state.
    pub state: LeaseState,
    /// Unix seconds when the lease was granted.
    pub starts: u64,
    /// Unix seconds when the lease ends.
    pub expires: u64,
    /// Client host name (option 12), if sent.
    pub hostname: Option<String>,
    /// Client identifier (option 61), if sent.
    pub client_id: Option<Vec<u8>>,
    /// Client machine UUID (option 97, RFC 4578 §2.3), if sent.
    pub machine_id: Option<Vec<u8>>,
    /// Client system architecture (option 93), if sent.
    pub arch: Option<u16>,
}

impl Lease {
    /// Whether the lease still holds its address at `now`.
    pub fn is_active(&self, now: u64) -> bool {
        self.expires > now && self.state != LeaseState::Released
    }
}

/// A lease change, produced by the DHCP engine and made durable through the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEffect {
    /// Insert or replace the lease for `lease.ip`.
    Put(Lease),
    /// Forget the lease for this address, held by this MAC. The store forgets the
    /// address whoever holds it; a member that takes the change from the shared store
    /// forgets it only when the record it holds is this MAC's (it may hold a newer one).
    Remove(Ipv4Addr, MacAddr),
}

impl LeaseEffect {
    /// The address the change is about.
    pub fn ip(&self) -> Ipv4Addr {
        match self {
            Self::Put(l) => l.ip,
            Self::Remove(ip, _) => *ip,
        }
    }
}

/// What the arbiter (the shared lease store) answers for one lease change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Written (or forgotten) as asked; durable before the answer.
    Accepted,
    /// The address is held by another client: this is the lease that holds it. The
    /// change must not be acknowledged to its client.
    Refused(Lease),
    /// The same for a DHCPv6 change: this v6 lease holds the address.
    Refused6(super::Lease6),
    /// The shared store could not be reached and does not already hold this binding:
    /// the change must not be acknowledged. With the end (this member's clock) of the
    /// binding the database holds for the same client, if any: the client's lease must
    /// not be taken to run past it.
    Unavailable(Option<u64>),
}

impl Verdict {
    /// Whether the change was refused.
    pub fn is_refused(&self) -> bool {
        !matches!(self, Self::Accepted)
    }
}

/// A lease change handed to the arbiter (the shared lease store): a DHCPv4 or a
/// DHCPv6 one, in the order the engines made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedChange {
    /// A DHCPv4 lease change ([`super::Change::Lease`]).
    V4(LeaseEffect),
    /// A DHCPv6 lease change ([`super::Change::Lease6`]).
    V6(super::Lease6Effect),
}
