//! Opening the sled database: the format checks, the records that do not decode set
//! aside (v4 and v6 alike), the indexes rebuilt, and what makes a flush durable.

use std::path::Path;

use super::{
    Trees, FORMAT6_KEY, FORMAT_KEY, HOST_POLICY_TREE, LEASES6_TREE, LEASES_TREE, META_TREE,
    RESERVATIONS_TREE, SET_ASIDE6_TREE, SET_ASIDE_TREE,
};
use crate::clock::unix_now;
use crate::store::index::HolderIndex;
use crate::store::{
    decode_lease, decode_lease6, CodecError, SetAside, StoreError, LEASE6_FORMAT_VERSION,
    LEASE_FORMAT_VERSION,
};

/// What makes a sled flush durable. sled 0.34's `flush` ends in `sync_file_range`,
/// which writes the pages but neither the file's metadata (its grown size) nor a cache
/// flush to the drive (sync_file_range(2): "This system call is extremely dangerous and
/// should not be used in portable programs"). An `fdatasync` of the log (which sled
/// writes in place, one inode for the life of the store) and an `fsync` of the
/// directory (for the files sled creates and renames: `conf`, snapshots) after every
/// flush make a returned commit survive a power cut.
#[derive(Debug)]
pub(super) struct Durable {
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

    pub(super) fn sync(&self) -> std::io::Result<()> {
        self.log.sync_data()?;
        self.dir.sync_all()
    }
}

impl Trees {
    pub(super) fn open(dir: &Path) -> Result<Self, StoreError> {
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
        let mut marked = false;
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
                marked = true;
            }
        }
        match meta.get(FORMAT6_KEY)? {
            Some(v) if v.first().copied().unwrap_or(0) > LEASE6_FORMAT_VERSION => {
                return Err(StoreError::Version6 {
                    found: v[0],
                    supported: LEASE6_FORMAT_VERSION,
                })
            }
            Some(v) if v.first() == Some(&LEASE6_FORMAT_VERSION) => {}
            _ => {
                meta.insert(FORMAT6_KEY, &[LEASE6_FORMAT_VERSION])?;
                marked = true;
            }
        }
        if marked {
            db.flush()?;
        }
        let durable = Durable::open(dir).map_err(StoreError::Sync)?;
        let leases = db.open_tree(LEASES_TREE)?;
        let set_aside = db.open_tree(SET_ASIDE_TREE)?;
        let leases6 = db.open_tree(LEASES6_TREE)?;
        let set_aside6 = db.open_tree(SET_ASIDE6_TREE)?;
        let mut by_mac = HolderIndex::default();
        let mut by_duid = HolderIndex::default();
        let moved = set_aside_undecodable(&leases, &set_aside, decode_lease, |l| {
            by_mac.put(l.ip, &l.mac)
        })? + set_aside_undecodable(&leases6, &set_aside6, decode_lease6, |l| {
            by_duid.put(l.ip, &l.duid[..])
        })?;
        if moved > 0 {
            db.flush()?;
            durable.sync().map_err(StoreError::Sync)?;
        }
        Ok(Self {
            durable,
            set_aside,
            set_aside6,
            reservations: db.open_tree(RESERVATIONS_TREE)?,
            host_policies: db.open_tree(HOST_POLICY_TREE)?,
            by_mac: std::sync::Mutex::new(by_mac),
            by_duid: std::sync::Mutex::new(by_duid),
            db,
            leases,
            leases6,
            meta,
        })
    }
}

/// Moves every record of `tree` that `decode` refuses into `aside` (key → the Unix time
/// it was set aside, u64 BE, and the record as it was), hands each record that decodes
/// to `keep`, and says how many were moved.
fn set_aside_undecodable<T>(
    tree: &sled::Tree,
    aside: &sled::Tree,
    decode: impl Fn(&[u8], &[u8]) -> Result<T, CodecError>,
    mut keep: impl FnMut(T),
) -> Result<usize, StoreError> {
    let mut moved = 0;
    for kv in tree.iter() {
        let (k, v) = kv?;
        match decode(&k, &v) {
            Ok(record) => keep(record),
            Err(e) => {
                // One record a client could have poisoned must not stop every start:
                // keep it for the operator, out of the way of everything else.
                let since = unix_now();
                let mut kept = since.to_be_bytes().to_vec();
                kept.extend_from_slice(&v);
                aside.insert(&k, kept)?;
                tree.remove(&k)?;
                moved += 1;
                tracing::warn!(tree = %String::from_utf8_lossy(&tree.name()), key = %hex(&k), error = %e, "lease record set aside: it does not decode; its address is held back");
            }
        }
    }
    Ok(moved)
}

/// The records of a set-aside tree.
pub(super) fn set_aside_records(aside: &sled::Tree) -> Result<Vec<SetAside>, StoreError> {
    aside
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
        .collect()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
