//! One test battery for every [`LeaseStore`] implementation (STYLE.md §12). Each
//! implementation adds one line to the `store_battery!` invocations at the bottom.

use std::net::Ipv4Addr;

use super::{Lease, LeaseEffect, LeaseState, LeaseStore};
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

pub(crate) fn put_get_remove(store: &dyn LeaseStore) {
    let a = lease(10, 1);
    store.commit(&[LeaseEffect::Put(a.clone())]).unwrap();
    assert_eq!(store.get(a.ip).unwrap(), Some(a.clone()));
    store.commit(&[LeaseEffect::Remove(a.ip)]).unwrap();
    assert_eq!(store.get(a.ip).unwrap(), None);
}

pub(crate) fn one_record_per_address(store: &dyn LeaseStore) {
    let first = lease(20, 1);
    let mut second = lease(20, 2);
    second.expires = 9000;
    store
        .commit(&[LeaseEffect::Put(first), LeaseEffect::Put(second.clone())])
        .unwrap();
    let all = store.load().unwrap();
    assert_eq!(all.iter().filter(|l| l.ip == second.ip).count(), 1);
    assert_eq!(store.get(second.ip).unwrap(), Some(second));
}

pub(crate) fn load_returns_everything(store: &dyn LeaseStore) {
    let effects: Vec<_> = (1..=50).map(|i| LeaseEffect::Put(lease(i, i))).collect();
    store.commit(&effects).unwrap();
    let mut all = store.load().unwrap();
    all.sort_by_key(|l| l.ip);
    assert_eq!(all.len(), 50);
    assert_eq!(all[49], lease(50, 50));
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
        }
    };
}

store_battery!(sled, {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::lease::SledStore::open(dir.path()).unwrap();
    (dir, store)
});

#[test]
fn sled_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = super::SledStore::open(dir.path()).unwrap();
        store.commit(&[LeaseEffect::Put(lease(7, 7))]).unwrap();
    }
    let store = super::SledStore::open(dir.path()).unwrap();
    assert_eq!(store.load().unwrap(), vec![lease(7, 7)]);
}
