//! The store on sled. Lease records are keyed by the 4 address bytes, so an address can
//! only ever belong to one record, and iterate in address order (the index `/v1/leases`
//! pages from). Reservations, host policies and the membership record live in trees of
//! their own. `commit` applies a batch and then flushes before returning: callers answer
//! only after that.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    decode_lease, encode_lease, Change, HostPolicy, Lease, LeaseEffect, LeaseQuery, Membership,
    Reservation, SetAside, Snapshot, Store, StoreError, LEASE_FORMAT_VERSION,
};
use crate::mac::MacAddr;

const LEASES_TREE: &str = "leases";
const META_TREE: &str = "meta";
const FORMAT_KEY: &str = "format_version";
const MEMBERSHIP_KEY: &str = "membership";
/// Written by [`Store::probe`]: a write that needs the disk to take data.
const PROBE_KEY: &str = "probe";
const RESERVATIONS_TREE: &str = "reservations";
const HOST_POLICY_TREE: &str = "host_policy";
/// Lease records that did not decode, moved out of the way at start: key → the Unix
/// time they were set aside (u64 BE) and the record as it was.
const SET_ASIDE_TREE: &str = "set_aside";

/// The open database: its trees, the MAC index and the files to fsync. Replaced whole
/// when a failed write left it broken (sled's errors are sticky).
#[derive(Debug)]
struct Trees {
    db: sled::Db,
    leases: sled::Tree,
    meta: sled::Tree,
    reservations: sled::Tree,
    host_policies: sled::Tree,
    set_aside: sled::Tree,
    /// Which addresses each MAC has records on, so lookups by MAC read only those.
    by_mac: Mutex<MacIndex>,
    /// sled's log file and the store directory, for the fsync after each flush.
    durable: Durable,
}

/// What makes a sled flush durable. sled 0.34's `flush` ends in `sync_file_range`,
/// which writes the pages but neither the file's metadata (its grown size) nor a cache
/// flush to the drive (sync_file_range(2): "This system call is extremely dangerous and
/// should not be used in portable programs"). An `fdatasync` of the log (which sled
/// writes in place, one inode for the life of the store) and an `fsync` of the
/// directory (for the files sled creates and renames: `conf`, snapshots) after every
/// flush make a returned commit survive a power cut.
#[derive(Debug)]
struct Durable {
    log: std::fs::File,
    dir: std::fs::File,
}

impl Durable {
    fn open(dir: &Path) -> std::io::Result<Self> {
        // sled writes its `conf` once, at creation, and never syncs it.
        std::fs::File::open(dir.join("conf"))?.sync_all()?;
        let d = Self {
            log: std::fs::File::open(dir.join("db"))?,
            dir: std::fs::File::open(dir)?,
        };
        d.sync()?;
        Ok(d)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.log.sync_data()?;
        self.dir.sync_all()
    }
}

impl Trees {
    fn open(dir: &Path) -> Result<Self, StoreError> {
        // Our own commits flush explicitly; the background flusher only adds I/O.
        let db = sled::Config::new()
            .path(dir)
            .flush_every_ms(None)
            .open()
            .map_err(|e| match e {
                // sled's exclusive lock on its log is taken: another process has it.
                sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                    StoreError::InUse(dir.to_path_buf())
                }
                other => StoreError::Db(other),
            })?;
        let meta = db.open_tree(META_TREE)?;
        match meta.get(FORMAT_KEY)? {
            Some(v) if v.first().copied().unwrap_or(0) > LEASE_FORMAT_VERSION => {
                return Err(StoreError::Version {
                    found: v[0],
                    supported: LEASE_FORMAT_VERSION,
                })
            }
            Some(v) if v.first() == Some(&LEASE_FORMAT_VERSION) => {}
            // An older format is read as it is; this build's records go in beside its
            // records, and an older build is told to stand back.
            found => {
                if let Some(v) = found {
                    tracing::info!(found = v.first().copied().unwrap_or(0), writes = LEASE_FORMAT_VERSION, "lease store of an older format: its records are read as they are, new ones written in this format");
                }
                meta.insert(FORMAT_KEY, &[LEASE_FORMAT_VERSION])?;
                db.flush()?;
            }
        }
        let durable = Durable::open(dir).map_err(StoreError::Sync)?;
        let leases = db.open_tree(LEASES_TREE)?;
        let set_aside = db.open_tree(SET_ASIDE_TREE)?;
        let mut index = MacIndex::default();
        let mut moved = 0;
        for kv in leases.iter() {
            let (k, v) = kv?;
            match decode_lease(&k, &v) {
                Ok(lease) => index.put(lease.ip, lease.mac),
                Err(e) => {
                    // One record a client could have poisoned must not stop every start:
                    // keep it for the operator, out of the way of everything else.
                    let since = unix_now();
                    let mut kept = since.to_be_bytes().to_vec();
                    kept.extend_from_slice(&v);
                    set_aside.insert(&k, kept)?;
                    leases.remove(&k)?;
                    moved += 1;
                    tracing::warn!(key = %hex(&k), error = %e, "lease record set aside: it does not decode; its address is held back");
                }
            }
        }
        if moved > 0 {
            db.flush()?;
            durable.sync().map_err(StoreError::Sync)?;
        }
        Ok(Self {
            durable,
            set_aside,
            reservations: db.open_tree(RESERVATIONS_TREE)?,
            host_policies: db.open_tree(HOST_POLICY_TREE)?,
            by_mac: Mutex::new(index),
            db,
            leases,
            meta,
        })
    }

    fn decode(key: &[u8], value: &[u8]) -> Result<Lease, StoreError> {
        decode_lease(key, value).map_err(|source| StoreError::Corrupt {
            key: key.to_vec(),
            source,
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, MacIndex> {
        self.by_mac.lock().unwrap_or_else(|p| p.into_inner())
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

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        let set_aside = self
            .set_aside
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                let since = v
                    .get(..8)
                    .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
                Ok(SetAside {
                    key: k.to_vec(),
                    since,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Snapshot {
            leases,
            reservations: self.reservations()?,
            host_policies: self.host_policies()?,
            membership: self.membership()?,
            set_aside,
        })
    }

    fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        // One batch per tree, then one flush for all of them. Each batch is atomic; a
        // crash between two may keep some of the changes, but none was answered yet.
        let mut leases = sled::Batch::default();
        let mut reservations = sled::Batch::default();
        let mut policies = sled::Batch::default();
        let mut meta = sled::Batch::default();
        let (mut any_reservation, mut any_policy, mut any_meta) = (false, false, false);
        for change in changes {
            match change {
                Change::Lease(LeaseEffect::Put(lease))
                | Change::Replica(LeaseEffect::Put(lease)) => {
                    leases.insert(&lease.ip.octets(), encode_lease(lease))
                }
                Change::Lease(LeaseEffect::Remove(ip, _))
                | Change::Replica(LeaseEffect::Remove(ip, _)) => leases.remove(&ip.octets()),
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
        self.leases.apply_batch(leases)?;
        {
            let mut index = self.index();
            for change in changes {
                match change {
                    Change::Lease(LeaseEffect::Put(l)) | Change::Replica(LeaseEffect::Put(l)) => {
                        index.put(l.ip, l.mac)
                    }
                    Change::Lease(LeaseEffect::Remove(ip, _))
                    | Change::Replica(LeaseEffect::Remove(ip, _)) => index.remove(*ip),
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
}

/// MAC → the addresses it has records on (sorted), and address → MAC.
#[derive(Debug, Default)]
struct MacIndex {
    by_mac: HashMap<MacAddr, Vec<Ipv4Addr>>,
    holder: HashMap<Ipv4Addr, MacAddr>,
}

impl MacIndex {
    fn put(&mut self, ip: Ipv4Addr, mac: MacAddr) {
        match self.holder.insert(ip, mac) {
            Some(old) if old == mac => return,
            Some(old) => self.unlink(old, ip),
            None => {}
        }
        let ips = self.by_mac.entry(mac).or_default();
        if let Err(at) = ips.binary_search(&ip) {
            ips.insert(at, ip);
        }
    }

    fn remove(&mut self, ip: Ipv4Addr) {
        if let Some(old) = self.holder.remove(&ip) {
            self.unlink(old, ip);
        }
    }

    fn unlink(&mut self, mac: MacAddr, ip: Ipv4Addr) {
        if let Some(ips) = self.by_mac.get_mut(&mac) {
            ips.retain(|i| *i != ip);
            if ips.is_empty() {
                self.by_mac.remove(&mac);
            }
        }
    }

    fn addresses(&self, mac: &MacAddr) -> Vec<Ipv4Addr> {
        self.by_mac.get(mac).cloned().unwrap_or_default()
    }
}
