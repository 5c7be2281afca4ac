//! Leases: the record, its on-disk encoding, and the durable store behind the DHCP engine.

mod codec;
mod sled_store;
mod view;

use std::net::Ipv4Addr;

use crate::mac::MacAddr;

pub use codec::{decode_lease, encode_lease, CodecError, LEASE_FORMAT_VERSION};
pub use sled_store::{Membership, SledStore};
pub use view::LeaseView;

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

/// A change to the store, produced by the engine and applied by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEffect {
    /// Insert or replace the lease for `lease.ip`.
    Put(Lease),
    /// Forget the lease for this address.
    Remove(Ipv4Addr),
}

/// Errors from a lease store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The underlying database failed.
    #[error("lease database: {0}")]
    Db(#[from] sled::Error),
    /// A stored record could not be decoded; refusing to guess keeps addresses unique.
    #[error("lease record for key {key:?} is unreadable: {source}")]
    Corrupt {
        /// The record's key bytes.
        key: Vec<u8>,
        /// What was wrong.
        source: CodecError,
    },
    /// A metadata record could not be read or written.
    #[error("lease store metadata: {0}")]
    Meta(String),
    /// The store was written by a newer, incompatible shardboot.
    #[error("lease store format {found} is newer than this build supports ({supported})")]
    Version {
        /// Version found on disk.
        found: u8,
        /// Version this build writes.
        supported: u8,
    },
}

/// A durable lease store. `commit` returns only once its effects survive a crash.
pub trait LeaseStore: Send + Sync + 'static {
    /// Every stored lease.
    fn load(&self) -> Result<Vec<Lease>, StoreError>;
    /// Applies `effects` atomically and makes them durable before returning.
    fn commit(&self, effects: &[LeaseEffect]) -> Result<(), StoreError>;
    /// The stored lease for `ip`.
    fn get(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError>;
}

#[cfg(test)]
mod battery;
