//! The durable store: the only door to disk for leases (DHCPv4 and DHCPv6), run-time
//! reservations, host policies, the membership record and the DHCPv6 server DUID. Every change is a [`Change`] applied through the
//! [`Committer`], which makes a batch of them durable with one flush before anyone is
//! answered (a DHCP ACK, an operator API 2xx). Nothing outside this module names the
//! database underneath.

mod codec;
mod codec6;
mod committer;
pub mod dump;
mod index;
mod lease;
mod lease6;
mod memory;
mod query;
mod records;
mod sled_store;
pub mod text;
mod view;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::mac::MacAddr;

pub use codec::{decode_lease, encode_lease, CodecError, LEASE_FORMAT_VERSION};
pub use codec6::{decode_lease6, encode_lease6, LEASE6_FORMAT_VERSION};
pub use committer::{
    Arbiter, CommitFailed, Committer, Finish, Flushed, Reply, StoreMetrics, StoreStatus,
};
pub use lease::{Lease, LeaseEffect, LeaseState, SharedChange, Verdict};
pub use lease6::{Lease6, Lease6Effect};
pub use memory::MemoryStore;
pub use query::LeaseQuery;
pub use records::{HostPolicy, Membership, PastMembership, Reservation};
pub use sled_store::SledStore;
pub use view::{Lease6View, LeaseView};

/// One durable change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A lease written or removed by the DHCP engine (or forgotten by the operator);
    /// with a shared lease store, decided by it before anyone is answered.
    Lease(LeaseEffect),
    /// A binding the shared lease store decided for another member (or read at
    /// start): stored like its own, never written back.
    Replica(LeaseEffect),
    /// A run-time reservation set (`Some`) or removed (`None`) for a MAC.
    Reservation(MacAddr, Option<Reservation>),
    /// A host policy set (`Some`) or cleared (`None`) for a MAC.
    HostPolicy(MacAddr, Option<HostPolicy>),
    /// The member list this instance now serves with.
    Membership(Membership),
    /// A DHCPv6 lease written or removed by the DHCPv6 engine; with a shared lease
    /// store, decided by it before anyone is answered, as [`Change::Lease`]. A removal
    /// forgets the address whoever holds it, as a v4 removal does.
    Lease6(Lease6Effect),
    /// A DHCPv6 binding the shared lease store decided for another member: stored
    /// like its own, never written back.
    Replica6(Lease6Effect),
    /// The DHCPv6 server's DUID (RFC 8415 §11: it must not change once chosen). Written
    /// once: the first one a store takes stays, and a later, different one is not
    /// written (it is logged); read it back with [`Store::server_duid`] or
    /// [`Snapshot::server_duid`].
    ServerDuid(Vec<u8>),
}

/// Everything a store holds, read once at start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Every lease record.
    pub leases: Vec<Lease>,
    /// Run-time reservations, sorted by MAC.
    pub reservations: Vec<Reservation>,
    /// The operator's host policies, sorted by MAC.
    pub host_policies: Vec<(MacAddr, HostPolicy)>,
    /// The membership record, if one was written.
    pub membership: Option<Membership>,
    /// Lease records that did not decode and were set aside.
    pub set_aside: Vec<SetAside>,
    /// Every DHCPv6 lease record, in address order.
    pub leases6: Vec<Lease6>,
    /// DHCPv6 lease records that did not decode and were set aside, apart from the v4
    /// ones (a damaged v4 key could be 16 octets long too). Their addresses
    /// ([`SetAside::address6`]) must be held back by the DHCPv6 server as the v4 ones
    /// are by the DHCPv4 server.
    pub set_aside6: Vec<SetAside>,
    /// The DHCPv6 server DUID, once one was written ([`Change::ServerDuid`]).
    pub server_duid: Option<Vec<u8>>,
}

/// A lease record that did not decode, kept aside for the operator. Its address (the
/// key) is held back from new clients for a longest lease, since its holder and expiry
/// cannot be read. [`Snapshot::set_aside`] lists the v4 records, [`Snapshot::set_aside6`]
/// the v6 ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The record's key: the address's 4 octets (v4) or 16 octets (v6), unless the key
    /// itself is damaged.
    pub key: Vec<u8>,
    /// Unix seconds when it was set aside.
    pub since: u64,
}

impl SetAside {
    /// The address the record was about, when its key is one.
    pub fn address(&self) -> Option<Ipv4Addr> {
        <[u8; 4]>::try_from(self.key.as_slice())
            .ok()
            .map(Ipv4Addr::from)
    }

    /// The IPv6 address the record was about, when its key is one (a record of
    /// [`Snapshot::set_aside6`]).
    pub fn address6(&self) -> Option<Ipv6Addr> {
        <[u8; 16]>::try_from(self.key.as_slice())
            .ok()
            .map(Ipv6Addr::from)
    }
}

/// Errors from a store.
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
    /// The store's DHCPv6 lease records were written by a newer, incompatible shardboot.
    #[error("DHCPv6 lease record format {found} is newer than this build supports ({supported})")]
    Version6 {
        /// Version found on disk.
        found: u8,
        /// Version this build writes.
        supported: u8,
    },
    /// Another process holds the store (a running `shardboot serve`).
    #[error("{} is in use by another process (is `shardboot serve` running on this state_dir?)", .0.display())]
    InUse(PathBuf),
    /// The store could not be reopened after a failure; it is tried again.
    #[error("the lease store is closed after a failure and not yet reopened")]
    Closed,
    /// The flush could not be made durable (fsync failed).
    #[error("lease store fsync: {0}")]
    Sync(std::io::Error),
    /// The shared store holds the address for another client: the change is durable
    /// here but must not be acknowledged.
    #[error("the shared store refused the lease on {}: held for {} until {}", .holder.ip, .holder.mac, .holder.expires)]
    HeldByAnother {
        /// The change that was refused.
        ours: Box<Lease>,
        /// The lease that holds the address.
        holder: Box<Lease>,
    },
    /// The same for a DHCPv6 lease.
    #[error("the shared store refused the lease on {}: held by another client until {}", .holder.ip, .holder.expires)]
    HeldByAnother6 {
        /// The change that was refused.
        ours: Box<Lease6>,
        /// The lease that holds the address.
        holder: Box<Lease6>,
    },
    /// The shared lease store could not be reached, and does not already hold this
    /// binding: the change is durable here but must not be acknowledged.
    #[error("shared lease store unreachable: the change to {ip} is not acknowledged")]
    SharedUnavailable {
        /// The address.
        ip: std::net::IpAddr,
        /// The v4 lease that was not acknowledged, when the change was one.
        ours: Option<Box<Lease>>,
        /// Until when (this member's clock) the database holds the same client's
        /// binding, if it does.
        bound_until: Option<u64>,
    },
    /// The state directory cannot be created.
    #[error("state_dir {}: {source}", path.display())]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A durable store. `commit` returns only once its changes survive a crash; reads may
/// run on any thread while the committer writes.
pub trait Store: std::fmt::Debug + Send + Sync + 'static {
    /// Everything stored (start-up, offline commands).
    fn load(&self) -> Result<Snapshot, StoreError>;
    /// Applies `changes` atomically, in order, and makes them durable before returning.
    fn commit(&self, changes: &[Change]) -> Result<(), StoreError>;
    /// The lease record on `ip`.
    fn lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError>;
    /// The newest lease record (by start time) of `mac`; a MAC may hold records on
    /// several addresses over time.
    fn lease_of(&self, mac: MacAddr) -> Result<Option<Lease>, StoreError>;
    /// Up to `limit` lease records matching `query`, in address order, from an index:
    /// the cost follows the page, not the size of the store.
    fn leases(&self, query: &LeaseQuery, limit: usize) -> Result<Vec<Lease>, StoreError>;
    /// The run-time reservations, sorted by MAC.
    fn reservations(&self) -> Result<Vec<Reservation>, StoreError>;
    /// The DHCPv6 lease record on `ip`.
    fn lease6(&self, ip: Ipv6Addr) -> Result<Option<Lease6>, StoreError>;
    /// Up to `limit` DHCPv6 lease records on addresses above `after` (the last address
    /// of the previous page; `None`: from the first), in address order, read from the
    /// store's address order: the cost follows the page, not the size of the store.
    fn leases6(&self, after: Option<Ipv6Addr>, limit: usize) -> Result<Vec<Lease6>, StoreError>;
    /// Every DHCPv6 lease record of the client `duid` (one per IA and address), in
    /// address order, from an index: the cost follows that client's records.
    fn leases6_of(&self, duid: &[u8]) -> Result<Vec<Lease6>, StoreError>;
    /// The DHCPv6 server DUID, once one was written.
    fn server_duid(&self) -> Result<Option<Vec<u8>>, StoreError>;
    /// A small durable write, to learn whether the store takes writes again after a
    /// failure (a full disk, an I/O error).
    fn probe(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Makes the store usable again after a failed write, if the failure left it
    /// broken (reopening it); a store that is not broken does nothing.
    fn recover(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Where the store lives inside `state_dir`.
pub fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join("leases.sled")
}

/// Opens (or creates) the store under `state_dir`, creating the directory if needed.
pub fn open(state_dir: &Path) -> Result<Arc<dyn Store>, StoreError> {
    let dir_err = |source| StoreError::StateDir {
        path: state_dir.to_path_buf(),
        source,
    };
    // The directories created here, deepest last: their names are durable only once
    // their parents are fsynced (a power cut could otherwise take the whole store).
    let created: Vec<&Path> = state_dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    std::fs::create_dir_all(state_dir).map_err(dir_err)?;
    let store = SledStore::open(&path_in(state_dir))?;
    sync_dir(state_dir).map_err(dir_err)?;
    for dir in created {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent).map_err(dir_err)?;
        }
    }
    Ok(Arc::new(store))
}

/// fsync of a directory: makes the entries in it durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The lowest address a page of v6 leases after `after` can hold (`after` of `None`:
/// the first address), or `None` when `after` is the last address.
fn first_after6(after: Option<Ipv6Addr>) -> Option<Ipv6Addr> {
    match after {
        None => Some(Ipv6Addr::UNSPECIFIED),
        Some(a) => u128::from(a).checked_add(1).map(Ipv6Addr::from),
    }
}

#[cfg(test)]
mod battery;
#[cfg(test)]
mod battery6;
