//! One test battery for every [`Store`] implementation (docs/style.md §12). Each
//! implementation adds one line to the `store_battery!` invocations at the bottom. The
//! DHCPv6 half of the battery is in `battery6.rs`.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::battery6;
use super::{
    Change, HostPolicy, Lease, LeaseEffect, LeaseQuery, LeaseState, Membership, Reservation, Store,
};
use crate::mac::MacAddr;

pub(crate) fn lease(last_octet: u8, mac_last: u8) -> Lease {
    Lease {
        ip: Ipv4Addr::new(192, 0, 2, last_octet),
        mac: MacAddr([0x52, 0x54, 0, 0, 0, mac_last]),
        state: LeaseState::Bound,
        starts: 100,
        expires: 3700,
        hostname: None,
        client_id: None,
        machine_id: Some(vec![0; 17]),
        arch: Some(0),
    }
}

fn put(l: &Lease) -> Change {
    Change::Lease(LeaseEffect::Put(l.clone()))
}

pub(crate) fn put_get_remove(store: &dyn Store) {
    let a = lease(10, 1);
    store.commit(&[put(&a)]).unwrap();
    assert_eq!(store.lease(a.ip).unwrap(), Some(a.clone()));
    store
        .commit(&[Change::Lease(LeaseEffect::Remove(a.ip, a.mac))])
        .unwrap();
    assert_eq!(store.lease(a.ip).unwrap(), None);
    assert_eq!(store.lease_of(a.mac).unwrap(), None);
}

pub(crate) fn one_record_per_address(store: &dyn Store) {
    let first = lease(20, 1);
    let mut second = lease(20, 2);
    second.expires = 9000;
    store.commit(&[put(&first), put(&second)]).unwrap();
    let all = store.load().unwrap().leases;
    assert_eq!(all.iter().filter(|l| l.ip == second.ip).count(), 1);
    assert_eq!(store.lease(second.ip).unwrap(), Some(second.clone()));
    // The address moved to another MAC: the first one has no record left.
    assert_eq!(store.lease_of(first.mac).unwrap(), None);
    assert_eq!(store.lease_of(second.mac).unwrap(), Some(second));
}

pub(crate) fn load_returns_everything(store: &dyn Store) {
    let changes: Vec<_> = (1..=50).map(|i| put(&lease(i, i))).collect();
    store.commit(&changes).unwrap();
    let mut all = store.load().unwrap().leases;
    all.sort_by_key(|l| l.ip);
    assert_eq!(all.len(), 50);
    assert_eq!(all[49], lease(50, 50));
}

pub(crate) fn pages_follow_address_order_and_filters(store: &dyn Store) {
    let mut changes: Vec<_> = (1..=30).map(|i| put(&lease(i, i % 3))).collect();
    let mut released = lease(31, 0);
    released.state = LeaseState::Released;
    changes.push(put(&released));
    store.commit(&changes).unwrap();
    let ips = |v: Vec<Lease>| v.into_iter().map(|l| l.ip.octets()[3]).collect::<Vec<_>>();
    let first = store.leases(&LeaseQuery::default(), 4).unwrap();
    assert_eq!(ips(first), [1, 2, 3, 4]);
    let after = LeaseQuery {
        after: Some(Ipv4Addr::new(192, 0, 2, 4)),
        ..Default::default()
    };
    assert_eq!(ips(store.leases(&after, 2).unwrap()), [5, 6]);
    let by_mac = LeaseQuery {
        mac: Some(MacAddr([0x52, 0x54, 0, 0, 0, 0])),
        after: Some(Ipv4Addr::new(192, 0, 2, 20)),
        ..Default::default()
    };
    assert_eq!(
        ips(store.leases(&by_mac, 100).unwrap()),
        [21, 24, 27, 30, 31]
    );
    let in_subnet = LeaseQuery {
        subnet: Some("192.0.2.8/30".parse().unwrap()),
        ..Default::default()
    };
    assert_eq!(ips(store.leases(&in_subnet, 100).unwrap()), [8, 9, 10, 11]);
    let by_state = LeaseQuery {
        state: Some(LeaseState::Released),
        ..Default::default()
    };
    assert_eq!(ips(store.leases(&by_state, 100).unwrap()), [31]);
    let one = LeaseQuery {
        ip: Some(Ipv4Addr::new(192, 0, 2, 17)),
        ..Default::default()
    };
    assert_eq!(ips(store.leases(&one, 100).unwrap()), [17]);
}

pub(crate) fn the_newest_record_of_a_mac_is_found(store: &dyn Store) {
    let mut old = lease(40, 9);
    old.starts = 10;
    let mut newer = lease(41, 9);
    newer.starts = 20;
    store.commit(&[put(&newer), put(&old)]).unwrap();
    assert_eq!(store.lease_of(old.mac).unwrap(), Some(newer));
}

pub(crate) fn other_records_round_trip(store: &dyn Store) {
    let mac = MacAddr([0x52, 0x54, 0, 0, 0, 7]);
    let r = Reservation {
        mac,
        ip: Ipv4Addr::new(192, 0, 2, 77),
        hostname: Some("node-7".into()),
    };
    let m = Membership {
        names: vec!["a".into(), "b".into()],
        since: 42,
        previous: Some(vec!["a".into()]),
        split: Some("blocks-v1".into()),
        previous_split: None,
        earlier: vec![crate::store::PastMembership {
            names: vec!["a".into(), "c".into()],
            split: None,
            until: 99,
        }],
        conductors: vec!["10.0.0.1".into(), "10.0.0.3:8090".into()],
    };
    let other = MacAddr([0x52, 0x54, 0, 0, 0, 8]);
    store
        .commit(&[
            Change::Reservation(mac, Some(r.clone())),
            Change::HostPolicy(mac, Some(HostPolicy::Deny)),
            Change::HostPolicy(other, Some(HostPolicy::Allow)),
            Change::HostPolicy(other, None),
            Change::Membership(m.clone()),
        ])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.reservations, vec![r.clone()]);
    assert_eq!(store.reservations().unwrap(), vec![r]);
    assert_eq!(snap.host_policies, vec![(mac, HostPolicy::Deny)]);
    assert_eq!(snap.membership, Some(m));
    store.commit(&[Change::Reservation(mac, None)]).unwrap();
    assert!(store.reservations().unwrap().is_empty());
}

macro_rules! store_battery {
    ($name:ident, $make:expr) => {
        mod $name {
            #[test]
            fn put_get_remove() {
                let (_guard, store) = $make;
                super::put_get_remove(&store);
            }
            #[test]
            fn one_record_per_address() {
                let (_guard, store) = $make;
                super::one_record_per_address(&store);
            }
            #[test]
            fn load_returns_everything() {
                let (_guard, store) = $make;
                super::load_returns_everything(&store);
            }
            #[test]
            fn pages_follow_address_order_and_filters() {
                let (_guard, store) = $make;
                super::pages_follow_address_order_and_filters(&store);
            }
            #[test]
            fn the_newest_record_of_a_mac_is_found() {
                let (_guard, store) = $make;
                super::the_newest_record_of_a_mac_is_found(&store);
            }
            #[test]
            fn other_records_round_trip() {
                let (_guard, store) = $make;
                super::other_records_round_trip(&store);
            }
            #[test]
            fn v6_put_replace_remove() {
                let (_guard, store) = $make;
                super::battery6::v6_put_replace_remove(&store);
            }
            #[test]
            fn v6_records_keep_whatever_the_client_sent() {
                let (_guard, store) = $make;
                super::battery6::v6_records_keep_whatever_the_client_sent(&store);
            }
            #[test]
            fn v6_client_records_are_found_by_duid() {
                let (_guard, store) = $make;
                super::battery6::v6_client_records_are_found_by_duid(&store);
            }
            #[test]
            fn a_mixed_commit_keeps_v4_and_v6_together() {
                let (_guard, store) = $make;
                super::battery6::a_mixed_commit_keeps_v4_and_v6_together(&store);
            }
            #[test]
            fn v6_pages_follow_address_order() {
                let (_guard, store) = $make;
                super::battery6::v6_pages_follow_address_order(&store);
            }
            #[test]
            fn the_server_duid_is_written_once() {
                let (_guard, store) = $make;
                super::battery6::the_server_duid_is_written_once(&store);
            }
            #[test]
            fn two_server_duids_in_one_commit_keep_the_first() {
                let (_guard, store) = $make;
                super::battery6::two_server_duids_in_one_commit_keep_the_first(&store);
            }
        }
    };
}

store_battery!(sled, {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::SledStore::open(dir.path()).unwrap();
    (dir, store)
});

store_battery!(memory, ((), crate::store::MemoryStore::new()));

#[test]
fn sled_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let m = Membership {
        names: vec!["a".into()],
        since: 1,
        previous: None,
        split: None,
        previous_split: None,
        earlier: Vec::new(),
        conductors: Vec::new(),
    };
    let mac = MacAddr([0x52, 0x54, 0, 0, 0, 7]);
    {
        let store = super::SledStore::open(dir.path()).unwrap();
        store
            .commit(&[
                put(&lease(7, 7)),
                Change::HostPolicy(mac, Some(HostPolicy::Allow)),
                Change::Membership(m.clone()),
            ])
            .unwrap();
    }
    let store = super::SledStore::open(dir.path()).unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.leases, vec![lease(7, 7)]);
    assert_eq!(snap.host_policies, vec![(mac, HostPolicy::Allow)]);
    assert_eq!(snap.membership, Some(m));
    // The MAC index is rebuilt from disk.
    assert_eq!(store.lease_of(lease(7, 7).mac).unwrap(), Some(lease(7, 7)));
}

#[test]
fn the_committer_answers_after_the_commit_in_order() {
    use std::sync::Arc;
    let store = Arc::new(crate::store::MemoryStore::new());
    let metrics = Arc::new(super::StoreMetrics::default());
    let committer = super::Committer::start(store.clone(), metrics.clone()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 1..=20u8 {
        let (tx, store) = (tx.clone(), store.clone());
        committer
            .submit(vec![put(&lease(i, i))], move |r| {
                // The change is visible to readers by the time its waiter hears.
                assert!(r.is_ok());
                tx.send((i, store.lease(lease(i, i).ip).unwrap().is_some()))
                    .unwrap();
            })
            .unwrap();
    }
    committer.commit_blocking(Vec::new()).unwrap();
    let heard: Vec<_> = rx.try_iter().collect();
    assert_eq!(heard, (1..=20).map(|i| (i, true)).collect::<Vec<_>>());
    assert_eq!(metrics.committed_changes.get(), 20);
}

#[test]
fn a_store_held_by_another_opener_is_refused_with_a_message_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let _held = super::SledStore::open(dir.path()).unwrap();
    let err = super::SledStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, super::StoreError::InUse(_)), "{err}");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
}

#[test]
fn a_record_that_does_not_decode_is_set_aside_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = super::SledStore::open(dir.path()).unwrap();
        store
            .commit(&[put(&lease(1, 1)), put(&lease(3, 3))])
            .unwrap();
    }
    {
        // Damage one record behind the store's back, as a bug or a bad disk would.
        let db = raw_sled(dir.path());
        let leases = db.open_tree("leases").unwrap();
        leases.insert([192, 0, 2, 2], vec![2, 9, 9]).unwrap();
        leases.insert([1, 2, 3], vec![2]).unwrap();
        db.flush().unwrap();
    }
    for _ in 0..2 {
        let store = super::SledStore::open(dir.path()).unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.leases, vec![lease(1, 1), lease(3, 3)]);
        let aside: Vec<_> = snap.set_aside.iter().map(|s| s.key.clone()).collect();
        assert_eq!(aside, vec![vec![1, 2, 3], vec![192, 0, 2, 2]]);
        assert_eq!(
            snap.set_aside[1].address(),
            Some(Ipv4Addr::new(192, 0, 2, 2))
        );
        // Pages and lookups skip nothing readable and fail on nothing.
        assert_eq!(store.leases(&LeaseQuery::default(), 10).unwrap().len(), 2);
        assert_eq!(store.lease(Ipv4Addr::new(192, 0, 2, 2)).unwrap(), None);
    }
}

#[test]
fn a_first_format_store_opens_and_is_marked_for_this_format() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = raw_sled(dir.path());
        db.open_tree("meta")
            .unwrap()
            .insert("format_version", &[1])
            .unwrap();
        db.flush().unwrap();
    }
    let store = super::SledStore::open(dir.path()).unwrap();
    store.commit(&[put(&lease(5, 5))]).unwrap();
    drop(store);
    let db = raw_sled(dir.path());
    let v = db.open_tree("meta").unwrap().get("format_version").unwrap();
    assert_eq!(v.as_deref(), Some(&[super::LEASE_FORMAT_VERSION][..]));
}

/// A store whose writes fail while `failing` is set, and whose commits wait while
/// `gate` is held: the faults a disk gives the committer.
#[derive(Debug, Default)]
struct FaultyStore {
    inner: crate::store::MemoryStore,
    failing: std::sync::atomic::AtomicBool,
    gate: std::sync::Mutex<()>,
}

impl Store for FaultyStore {
    fn load(&self) -> Result<super::Snapshot, super::StoreError> {
        self.inner.load()
    }
    fn commit(&self, changes: &[Change]) -> Result<(), super::StoreError> {
        let _wait = self.gate.lock().unwrap();
        if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(super::StoreError::Meta("no space left on device".into()));
        }
        self.inner.commit(changes)
    }
    fn lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, super::StoreError> {
        self.inner.lease(ip)
    }
    fn lease_of(&self, mac: MacAddr) -> Result<Option<Lease>, super::StoreError> {
        self.inner.lease_of(mac)
    }
    fn leases(&self, q: &LeaseQuery, limit: usize) -> Result<Vec<Lease>, super::StoreError> {
        self.inner.leases(q, limit)
    }
    fn reservations(&self) -> Result<Vec<Reservation>, super::StoreError> {
        self.inner.reservations()
    }
    fn lease6(&self, ip: Ipv6Addr) -> Result<Option<super::Lease6>, super::StoreError> {
        self.inner.lease6(ip)
    }
    fn leases6(
        &self,
        after: Option<Ipv6Addr>,
        limit: usize,
    ) -> Result<Vec<super::Lease6>, super::StoreError> {
        self.inner.leases6(after, limit)
    }
    fn leases6_of(&self, duid: &[u8]) -> Result<Vec<super::Lease6>, super::StoreError> {
        self.inner.leases6_of(duid)
    }
    fn server_duid(&self) -> Result<Option<Vec<u8>>, super::StoreError> {
        self.inner.server_duid()
    }
    fn probe(&self) -> Result<(), super::StoreError> {
        self.commit(&[])
    }
}

#[test]
fn a_failing_store_is_reported_and_recovers_by_itself() {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    let store = Arc::new(FaultyStore::default());
    let metrics = Arc::new(super::StoreMetrics::default());
    let committer = super::Committer::start(store.clone(), metrics.clone()).unwrap();
    store.failing.store(true, Relaxed);
    let err = committer
        .commit_blocking(vec![put(&lease(1, 1))])
        .unwrap_err();
    assert!(err.to_string().contains("no space left"), "{err}");
    assert!(metrics.status.is_failing());
    assert!(metrics.status.reason().unwrap().contains("no space left"));
    assert_eq!(store.lease(lease(1, 1).ip).unwrap(), None);
    // Space comes back; nothing else is asked, and the committer notices on its own.
    store.failing.store(false, Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while metrics.status.is_failing() {
        assert!(std::time::Instant::now() < deadline, "never recovered");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    committer.commit_blocking(vec![put(&lease(1, 1))]).unwrap();
    assert_eq!(metrics.commit_errors.get(), 1);
}

#[test]
fn a_full_commit_queue_drops_and_counts_instead_of_growing() {
    use std::sync::Arc;
    let store = Arc::new(FaultyStore::default());
    let metrics = Arc::new(super::StoreMetrics::default());
    let committer = super::Committer::start(store.clone(), metrics.clone()).unwrap();
    let stalled = store.gate.lock().unwrap();
    let mut refused = 0;
    for i in 0..40_000u32 {
        let l = lease((i % 250) as u8 + 1, 1);
        if committer.submit(vec![put(&l)], |_| {}) == Err(super::CommitFailed::QueueFull) {
            refused += 1;
        }
    }
    drop(stalled);
    assert!(refused > 0 && refused < 40_000, "{refused}");
    assert_eq!(metrics.queue_full.get(), refused);
    committer.commit_blocking(Vec::new()).unwrap();
}

/// The store's sled database opened behind its back, to damage it as a bug or a bad
/// disk would. Without the background flusher, as the store opens it: that thread
/// keeps the database (and its file lock) a moment after the handle is dropped, so the
/// store reopened right after would find it in use.
pub(super) fn raw_sled(dir: &std::path::Path) -> ::sled::Db {
    ::sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .open()
        .expect("open the store's sled database")
}
