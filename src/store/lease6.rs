//! The DHCPv6 lease record (RFC 8415 §6.2: one address of one IA_NA) and the change the
//! DHCPv6 engine asks the store to make to it. Kept apart from the v4 [`super::Lease`]:
//! a v6 client is named by its DUID and IAID, not its hardware address, and the MAC is
//! only what `dhcp6::client_mac` could find.

use std::net::Ipv6Addr;

use super::LeaseState;
use crate::mac::MacAddr;

/// One IPv6 address and the IA that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease6 {
    /// The leased address; the store's key, so no address is ever held twice.
    pub ip: Ipv6Addr,
    /// The client's DUID (option 1, RFC 8415 §11), as it sent it.
    pub duid: Vec<u8>,
    /// The IA_NA's identifier (RFC 8415 §21.4): a client may hold one address per IA.
    pub iaid: u32,
    /// The client's MAC, when one was found (`dhcp6::client_mac`).
    pub mac: Option<MacAddr>,
    /// Lifecycle state (never `Offered` in the store: an Advertise is not stored).
    pub state: LeaseState,
    /// Unix seconds when the lease was granted.
    pub starts: u64,
    /// Unix seconds when the preferred lifetime ends (RFC 8415 §21.6).
    pub preferred: u64,
    /// Unix seconds when the valid lifetime ends: the address is free after this.
    pub expires: u64,
    /// The host name: its `[[host]]`'s, else the client's own (Client FQDN option 39,
    /// RFC 4704), if it sent one.
    pub hostname: Option<String>,
    /// Client system architecture (option 61, else the vendor class), if found.
    pub arch: Option<u16>,
}

impl Lease6 {
    /// Whether the lease still holds its address at `now`.
    pub fn is_active(&self, now: u64) -> bool {
        self.expires > now && self.state != LeaseState::Released
    }
}

/// A v6 lease change, produced by the DHCPv6 engine and made durable through the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease6Effect {
    /// Insert or replace the lease for `lease.ip`.
    Put(Lease6),
    /// Forget the lease for this address, held by this DUID.
    Remove(Ipv6Addr, Vec<u8>),
}

impl Lease6Effect {
    /// The address the change is about.
    pub fn ip(&self) -> Ipv6Addr {
        match self {
            Self::Put(l) => l.ip,
            Self::Remove(ip, _) => *ip,
        }
    }
}
