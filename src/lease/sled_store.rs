//! The lease store on sled. Records are keyed by the 4 address bytes, so an address can
//! only ever belong to one record. `commit` applies a batch atomically and then flushes
//! (fsync) before returning: callers send an ACK only after that.

use std::net::Ipv4Addr;
use std::path::Path;

use super::{
    decode_lease, encode_lease, Lease, LeaseEffect, LeaseStore, StoreError, LEASE_FORMAT_VERSION,
};

const LEASES_TREE: &str = "leases";
const META_TREE: &str = "meta";
const FORMAT_KEY: &str = "format_version";
const MEMBERSHIP_KEY: &str = "membership";
const RESERVATIONS_TREE: &str = "reservations";

/// The member list this store's instance last served with, since when, and the list
/// before it (for the transition after a membership change).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Membership {
    /// Sorted member names (empty for a single instance).
    pub names: Vec<String>,
    /// Unix seconds when this list was first served.
    pub since: u64,
    /// The list served before, if it differed.
    pub previous: Option<Vec<String>>,
}

/// A [`LeaseStore`] in a sled database directory.
pub struct SledStore {
    db: sled::Db,
    leases: sled::Tree,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        // Our own commits flush explicitly; the background flusher only adds I/O.
        let db = sled::Config::new().path(dir).flush_every_ms(None).open()?;
        let meta = db.open_tree(META_TREE)?;
        match meta.get(FORMAT_KEY)? {
            Some(v) if v.first().copied().unwrap_or(0) > LEASE_FORMAT_VERSION => {
                return Err(StoreError::Version {
                    found: v[0],
                    supported: LEASE_FORMAT_VERSION,
                })
            }
            Some(_) => {}
            None => {
                meta.insert(FORMAT_KEY, &[LEASE_FORMAT_VERSION])?;
                db.flush()?;
            }
        }
        let leases = db.open_tree(LEASES_TREE)?;
        Ok(Self { db, leases })
    }

    /// The database, for other trees kept beside the leases (host policies).
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The run-time reservations.
    pub fn reservations(&self) -> Result<Vec<crate::dhcp::reserve::Reservation>, StoreError> {
        let tree = self.db.open_tree(RESERVATIONS_TREE)?;
        let mut out = Vec::new();
        for kv in tree.iter() {
            let (_, v) = kv?;
            out.push(
                serde_json::from_slice(&v)
                    .map_err(|e| StoreError::Meta(format!("reservation record: {e}")))?,
            );
        }
        Ok(out)
    }

    /// Stores (`Some`) or removes (`None`, for `mac`) a run-time reservation, durably.
    pub fn set_reservation(
        &self,
        mac: crate::mac::MacAddr,
        r: Option<&crate::dhcp::reserve::Reservation>,
    ) -> Result<(), StoreError> {
        let tree = self.db.open_tree(RESERVATIONS_TREE)?;
        match r {
            Some(r) => {
                let v = serde_json::to_vec(r).map_err(|e| StoreError::Meta(e.to_string()))?;
                tree.insert(mac.0, v)?;
            }
            None => {
                tree.remove(mac.0)?;
            }
        }
        tree.flush()?;
        Ok(())
    }

    /// The membership record, if one was written.
    pub fn membership(&self) -> Result<Option<Membership>, StoreError> {
        let meta = self.db.open_tree(META_TREE)?;
        match meta.get(MEMBERSHIP_KEY)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Meta(format!("membership record: {e}"))),
        }
    }

    /// Writes the membership record durably.
    pub fn set_membership(&self, m: &Membership) -> Result<(), StoreError> {
        let meta = self.db.open_tree(META_TREE)?;
        let v = serde_json::to_vec(m).map_err(|e| StoreError::Meta(e.to_string()))?;
        meta.insert(MEMBERSHIP_KEY, v)?;
        self.db.flush()?;
        Ok(())
    }

    /// Number of stored lease records.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether the store holds no lease.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }
}

impl LeaseStore for SledStore {
    fn load(&self) -> Result<Vec<Lease>, StoreError> {
        self.leases
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                decode_lease(&k, &v).map_err(|source| StoreError::Corrupt {
                    key: k.to_vec(),
                    source,
                })
            })
            .collect()
    }

    fn commit(&self, effects: &[LeaseEffect]) -> Result<(), StoreError> {
        if effects.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for effect in effects {
            match effect {
                LeaseEffect::Put(lease) => batch.insert(&lease.ip.octets(), encode_lease(lease)),
                LeaseEffect::Remove(ip) => batch.remove(&ip.octets()),
            }
        }
        self.leases.apply_batch(batch)?;
        self.db.flush()?;
        Ok(())
    }

    fn get(&self, ip: Ipv4Addr) -> Result<Option<Lease>, StoreError> {
        let Some(v) = self.leases.get(ip.octets())? else {
            return Ok(None);
        };
        decode_lease(&ip.octets(), &v)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                key: ip.octets().to_vec(),
                source,
            })
    }
}

#[cfg(test)]
mod membership_tests {
    use super::*;

    #[test]
    fn membership_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let m = Membership {
            names: vec!["a".into(), "b".into()],
            since: 42,
            previous: Some(vec!["a".into()]),
        };
        {
            let s = SledStore::open(dir.path()).unwrap();
            assert_eq!(s.membership().unwrap(), None);
            s.set_membership(&m).unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.membership().unwrap(), Some(m));
    }
}
