//! The store on sled. Lease records are keyed by the 4 address bytes, so an address can
//! only ever belong to one record, and iterate in address order (the index `/v1/leases`
//! pages from); DHCPv6 lease records likewise by their 16 address bytes, in a tree of
//! their own (`/v1/leases6`). Reservations, host policies and the membership record live
//! in trees of their own, the DHCPv6 server DUID in the meta tree. `commit` applies a
//! batch and then flushes before returning: callers answer only after that.

mod open;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::unix_now;
use open::{hex, set_aside_records, Durable};

use super::index::HolderIndex;
use super::{
    decode_lease, decode_lease6, encode_lease, encode_lease6, Change, HostPolicy, Lease, Lease6,
    Lease6Effect, LeaseEffect, LeaseQuery, Membership, Reservation, Snapshot, Store, StoreError,
};
use crate::mac::MacAddr;

const LEASES_TREE: &str = "leases";
/// DHCPv6 lease records: the 16 address bytes → `encode_lease6`.
const LEASES6_TREE: &str = "leases6";
const META_TREE: &str = "meta";
const FORMAT_KEY: &str = "format_version";
/// The DHCPv6 record format (`LEASE6_FORMAT_VERSION`): an older build, which would set
/// aside every record of a newer format, is refused instead.
const FORMAT6_KEY: &str = "lease6_format_version";
const MEMBERSHIP_KEY: &str = "membership";
/// The DHCPv6 server DUID, written once.
const SERVER_DUID_KEY: &str = "server_duid";
/// Written by [`Store::probe`]: a write that needs the disk to take data.
const PROBE_KEY: &str = "probe";
const RESERVATIONS_TREE: &str = "reservations";
const HOST_POLICY_TREE: &str = "host_policy";
/// Lease records that did not decode, moved out of the way at start: key → the Unix
/// time they were set aside (u64 BE) and the record as it was.
const SET_ASIDE_TREE: &str = "set_aside";
/// The same for DHCPv6 lease records.
const SET_ASIDE6_TREE: &str = "set_aside6";

/// The open database: its trees, the MAC and DUID indexes and the files to fsync.
/// Replaced whole when a failed write left it broken (sled's errors are sticky).
#[derive(Debug)]
struct Trees {
    db: sled::Db,
    leases: sled::Tree,
    leases6: sled::Tree,
    meta: sled::Tree,
    reservations: sled::Tree,
    host_policies: sled::Tree,
    set_aside: sled::Tree,
    set_aside6: sled::Tree,
    /// Which addresses each MAC has records on, so lookups by MAC read only those.
    by_mac: Mutex<HolderIndex<MacAddr, Ipv4Addr>>,
    /// Which v6 addresses each DUID has records on.
    by_duid: Mutex<HolderIndex<Vec<u8>, Ipv6Addr>>,
    /// sled's log file and the store directory, for the fsync after each flush.
    durable: Durable,
}

impl Trees {
    fn decode(key: &[u8], value: &[u8]) -> Result<Lease, StoreError> {
        decode_lease(key, value).map_err(|source| StoreError::Corrupt {
            key: key.to_vec(),
            source,
        })
    }

    fn decode6(key: &[u8], value: &[u8]) -> Result<Lease6, StoreError> {
        decode_lease6(key, value).map_err(|source| StoreError::Corrupt {
            key: key.to_vec(),
            source,
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, HolderIndex<MacAddr, Ipv4Addr>> {
        self.by_mac.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index6(&self) -> std::sync::MutexGuard<'_, HolderIndex<Vec<u8>, Ipv6Addr>> {
        self.by_duid.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the server DUID unless one is there: the first one stays (RFC 8415 §11).
    fn keep_server_duid(&self, duid: &[u8]) -> Result<(), StoreError> {
        let swapped = self
            .meta
            .compare_and_swap(SERVER_DUID_KEY, None::<&[u8]>, Some(duid))?;
        if let Err(held) = swapped {
            if held.current.as_deref() != Some(duid) {
                tracing::warn!(kept = %hex(held.current.as_deref().unwrap_or_default()), refused = %hex(duid), "a server DUID is already stored; it stays (a server DUID must not change)");
            }
        }
        Ok(())
    }

    fn membership(&self) -> Result<Option<Membership>, StoreError> {
        match self.meta.get(MEMBERSHIP_KEY)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Meta(format!("membership record: {e}"))),
        }
    }

    fn host_policies(&self) -> Result<Vec<(MacAddr, HostPolicy)>, StoreError> {
        let mut out = Vec::new();
        for kv in self.host_policies.iter() {
            let (k, v) = kv?;
            let (Ok(mac), Some(policy)) = (<[u8; 6]>::try_from(&k[..]), HostPolicy::parse(&v))
            else {
                return Err(StoreError::Meta(format!(
                    "host policy record {k:?} is unreadable"
                )));
            };
            out.push((MacAddr(mac), policy));
        }
        Ok(out)
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Meta(e.to_string()))
}

/// A [`Store`] in a sled database directory.
pub struct SledStore {
    dir: std::path::PathBuf,
    /// `None` after a failed reopen: every call fails until [`Store::recover`] works.
    trees: std::sync::RwLock<Option<Arc<Trees>>>,
    /// A write failed: the database is reopened before the next one.
    broken: AtomicBool,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("dir", &self.dir)
            .field("broken", &self.broken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            dir: dir.to_path_buf(),
            trees: std::sync::RwLock::new(Some(Arc::new(Trees::open(dir)?))),
            broken: AtomicBool::new(false),
        })
    }

    fn trees(&self) -> Result<Arc<Trees>, StoreError> {
        self.trees
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(StoreError::Closed)
    }

    /// Runs a write; a failure marks the database for reopening.
    fn write(&self, w: impl FnOnce(&Trees) -> Result<(), StoreError>) -> Result<(), StoreError> {
        let result = self.trees().and_then(|t| w(&t));
        if result.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        result
    }
}

impl Store for SledStore {
    fn load(&self) -> Result<Snapshot, StoreError> {
        self.trees()?.load()
    }

    fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        self.write(|t| t.commit(changes))
    }

    fn lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError> {
        self.trees()?.lease(ip)
    }

    fn lease_of(&self, mac: MacAddr) -> Result<Option<Lease>, StoreError> {
        self.trees()?.lease_of(mac)
    }

    fn leases(&self, query: &LeaseQuery, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.trees()?.leases(query, limit)
    }

    fn reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        self.trees()?.reservations()
    }

    fn lease6(&self, ip: Ipv6Addr) -> Result<Option<Lease6>, StoreError> {
        self.trees()?.lease6(ip)
    }

    fn leases6(&self, after: Option<Ipv6Addr>, limit: usize) -> Result<Vec<Lease6>, StoreError> {
        self.trees()?.leases6(after, limit)
    }

    fn leases6_of(&self, duid: &[u8]) -> Result<Vec<Lease6>, StoreError> {
        self.trees()?.leases6_of(duid)
    }

    fn server_duid(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.trees()?.server_duid()
    }

    fn probe(&self) -> Result<(), StoreError> {
        self.write(|t| {
            t.meta.insert(PROBE_KEY, &unix_now().to_be_bytes())?;
            t.db.flush()?;
            t.durable.sync().map_err(StoreError::Sync)
        })
    }

    fn recover(&self) -> Result<(), StoreError> {
        if !self.broken.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut slot = self.trees.write().unwrap_or_else(|p| p.into_inner());
        // The old database must be gone (its lock released) before it opens again;
        // what it held in memory but never made durable is dropped with it.
        *slot = None;
        let trees = Trees::open(&self.dir)?;
        *slot = Some(Arc::new(trees));
        self.broken.store(false, Ordering::Relaxed);
        tracing::info!(dir = %self.dir.display(), "lease store reopened");
        Ok(())
    }
}

impl Store for Trees {
    fn load(&self) -> Result<Snapshot, StoreError> {
        let leases = self
            .leases
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                Self::decode(&k, &v)
            })
            .collect::<Result<_, _>>()?;
        let leases6 = self
            .leases6
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                Self::decode6(&k, &v)
            })
            .collect::<Result<_, _>>()?;
        Ok(Snapshot {
            leases,
            reservations: self.reservations()?,
            host_policies: self.host_policies()?,
            membership: self.membership()?,
            set_aside: set_aside_records(&self.set_aside)?,
            leases6,
            set_aside6: set_aside_records(&self.set_aside6)?,
            server_duid: self.server_duid()?,
        })
    }

    fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        // One batch per tree, then one flush for all of them. Each batch is atomic; a
        // crash between two may keep some of the changes, but none was answered yet.
        // The v4 and v6 lease batches of one commit go in as one sled transaction: a
        // crash keeps both or neither.
        let mut leases = sled::Batch::default();
        let mut leases6 = sled::Batch::default();
        let mut reservations = sled::Batch::default();
        let mut policies = sled::Batch::default();
        let mut meta = sled::Batch::default();
        let (mut any_reservation, mut any_policy, mut any_meta) = (false, false, false);
        let (mut any_lease, mut any_lease6) = (false, false);
        let mut server_duids = Vec::new();
        for change in changes {
            match change {
                Change::Lease(LeaseEffect::Put(lease))
                | Change::Replica(LeaseEffect::Put(lease)) => {
                    any_lease = true;
                    leases.insert(&lease.ip.octets(), encode_lease(lease))
                }
                Change::Lease(LeaseEffect::Remove(ip, _))
                | Change::Replica(LeaseEffect::Remove(ip, _)) => {
                    any_lease = true;
                    leases.remove(&ip.octets())
                }
                Change::Lease6(Lease6Effect::Put(lease))
                | Change::Replica6(Lease6Effect::Put(lease)) => {
                    any_lease6 = true;
                    leases6.insert(&lease.ip.octets(), encode_lease6(lease))
                }
                Change::Lease6(Lease6Effect::Remove(ip, _))
                | Change::Replica6(Lease6Effect::Remove(ip, _)) => {
                    any_lease6 = true;
                    leases6.remove(&ip.octets())
                }
                Change::ServerDuid(duid) => server_duids.push(duid),
                Change::Reservation(mac, r) => {
                    any_reservation = true;
                    match r {
                        Some(r) => reservations.insert(&mac.0, json(r)?),
                        None => reservations.remove(&mac.0),
                    }
                }
                Change::HostPolicy(mac, p) => {
                    any_policy = true;
                    match p {
                        Some(p) => policies.insert(&mac.0, p.as_str().as_bytes()),
                        None => policies.remove(&mac.0),
                    }
                }
                Change::Membership(m) => {
                    any_meta = true;
                    meta.insert(MEMBERSHIP_KEY, json(m)?);
                }
            }
        }
        match (any_lease, any_lease6) {
            (true, true) => {
                use sled::transaction::{ConflictableTransactionError, TransactionError};
                use sled::Transactional;
                (&self.leases, &self.leases6)
                    .transaction(|(l4, l6)| {
                        l4.apply_batch(&leases)?;
                        l6.apply_batch(&leases6)?;
                        Ok::<_, ConflictableTransactionError<()>>(())
                    })
                    .map_err(|e| match e {
                        TransactionError::Storage(e) => StoreError::Db(e),
                        TransactionError::Abort(()) => {
                            StoreError::Meta("lease transaction aborted".into())
                        }
                    })?
            }
            (false, true) => self.leases6.apply_batch(leases6)?,
            _ => self.leases.apply_batch(leases)?,
        }
        if any_lease {
            let mut index = self.index();
            for change in changes {
                match change {
                    Change::Lease(LeaseEffect::Put(l)) | Change::Replica(LeaseEffect::Put(l)) => {
                        index.put(l.ip, &l.mac)
                    }
                    Change::Lease(LeaseEffect::Remove(ip, _))
                    | Change::Replica(LeaseEffect::Remove(ip, _)) => index.remove(*ip),
                    _ => {}
                }
            }
        }
        if any_lease6 {
            let mut index = self.index6();
            for change in changes {
                match change {
                    Change::Lease6(Lease6Effect::Put(l))
                    | Change::Replica6(Lease6Effect::Put(l)) => index.put(l.ip, &l.duid[..]),
                    Change::Lease6(Lease6Effect::Remove(ip, _))
                    | Change::Replica6(Lease6Effect::Remove(ip, _)) => index.remove(*ip),
                    _ => {}
                }
            }
        }
        if any_reservation {
            self.reservations.apply_batch(reservations)?;
        }
        if any_policy {
            self.host_policies.apply_batch(policies)?;
        }
        if any_meta {
            self.meta.apply_batch(meta)?;
        }
        for duid in server_duids {
            self.keep_server_duid(duid)?;
        }
        self.db.flush()?;
        self.durable.sync().map_err(StoreError::Sync)?;
        Ok(())
    }

    fn lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError> {
        match self.leases.get(ip.octets())? {
            None => Ok(None),
            Some(v) => Self::decode(&ip.octets(), &v).map(Some),
        }
    }

    fn lease_of(&self, mac: MacAddr) -> Result<Option<Lease>, StoreError> {
        let ips = self.index().addresses(&mac);
        let mut newest: Option<Lease> = None;
        for ip in ips {
            // `>=`: on equal start times the higher address wins, as a scan in address
            // order with `max_by_key` would pick.
            if let Some(l) = self.lease(ip)?.filter(|l| l.mac == mac) {
                if newest.as_ref().is_none_or(|n| l.starts >= n.starts) {
                    newest = Some(l);
                }
            }
        }
        Ok(newest)
    }

    fn leases(&self, query: &LeaseQuery, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let Some((low, high)) = query.address_bounds() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        if let Some(mac) = query.mac {
            for ip in self.index().addresses(&mac) {
                if out.len() == limit {
                    break;
                }
                if ip < low || ip > high {
                    continue;
                }
                if let Some(l) = self.lease(ip)?.filter(|l| query.matches(l)) {
                    out.push(l);
                }
            }
            return Ok(out);
        }
        for kv in self.leases.range(low.octets()..=high.octets()) {
            if out.len() == limit {
                break;
            }
            let (k, v) = kv?;
            let lease = Self::decode(&k, &v)?;
            if query.matches(&lease) {
                out.push(lease);
            }
        }
        Ok(out)
    }

    fn reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        self.reservations
            .iter()
            .map(|kv| {
                let (_, v) = kv?;
                serde_json::from_slice(&v)
                    .map_err(|e| StoreError::Meta(format!("reservation record: {e}")))
            })
            .collect()
    }

    fn lease6(&self, ip: Ipv6Addr) -> Result<Option<Lease6>, StoreError> {
        match self.leases6.get(ip.octets())? {
            None => Ok(None),
            Some(v) => Self::decode6(&ip.octets(), &v).map(Some),
        }
    }

    fn leases6(&self, after: Option<Ipv6Addr>, limit: usize) -> Result<Vec<Lease6>, StoreError> {
        let Some(low) = super::first_after6(after) else {
            return Ok(Vec::new());
        };
        self.leases6
            .range(low.octets()..)
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                Self::decode6(&k, &v)
            })
            .collect()
    }

    fn leases6_of(&self, duid: &[u8]) -> Result<Vec<Lease6>, StoreError> {
        let ips = self.index6().addresses(duid);
        let mut out = Vec::with_capacity(ips.len());
        for ip in ips {
            if let Some(l) = self.lease6(ip)?.filter(|l| l.duid == duid) {
                out.push(l);
            }
        }
        Ok(out)
    }

    fn server_duid(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta.get(SERVER_DUID_KEY)?.map(|v| v.to_vec()))
    }
}
