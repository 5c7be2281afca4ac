//! The store battery's DHCPv6 half: lease records, mixed v4+v6 commits, paging and the
//! server DUID, run against every [`Store`] implementation through the
//! `store_battery!` invocations in `battery.rs`; then the sled-only tests (reopen, a
//! record set aside, a newer format) and the committer's arbiter filter.

use std::net::Ipv6Addr;
use std::sync::Arc;

use super::battery::lease;
use super::{Change, Lease6, Lease6Effect, LeaseEffect, LeaseState, SledStore, Store};
use crate::mac::MacAddr;

/// A bound lease on 2001:db8::`low` for the client with DUID-LL `client`, IA 1.
pub(crate) fn lease6(low: u16, client: u8) -> Lease6 {
    Lease6 {
        ip: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, low),
        duid: duid(client),
        iaid: 1,
        mac: Some(MacAddr([0x52, 0x54, 0, 0, 1, client])),
        state: LeaseState::Bound,
        starts: 100,
        preferred: 1900,
        expires: 3700,
        hostname: Some(format!("node-{client}")),
        arch: Some(7),
    }
}

/// A DUID-LL (RFC 8415 §11.4): type 3, hardware type 1, the MAC.
fn duid(client: u8) -> Vec<u8> {
    vec![0, 3, 0, 1, 0x52, 0x54, 0, 0, 1, client]
}

fn put6(l: &Lease6) -> Change {
    Change::Lease6(Lease6Effect::Put(l.clone()))
}

fn low(leases: &[Lease6]) -> Vec<u16> {
    leases.iter().map(|l| l.ip.segments()[7]).collect()
}

pub(crate) fn v6_put_replace_remove(store: &dyn Store) {
    let a = lease6(0x10, 1);
    store.commit(&[put6(&a)]).unwrap();
    assert_eq!(store.lease6(a.ip).unwrap(), Some(a.clone()));
    assert_eq!(store.leases6_of(&a.duid).unwrap(), vec![a.clone()]);
    // Renewed: the same address, new lifetimes, one record.
    let renewed = Lease6 {
        starts: 200,
        preferred: 2000,
        expires: 3800,
        ..a.clone()
    };
    store.commit(&[put6(&renewed)]).unwrap();
    assert_eq!(store.lease6(a.ip).unwrap(), Some(renewed.clone()));
    assert_eq!(store.load().unwrap().leases6, vec![renewed.clone()]);
    // The address goes to another client: the first holds nothing any more.
    let other = Lease6 {
        iaid: 7,
        ..lease6(0x10, 2)
    };
    store.commit(&[put6(&other)]).unwrap();
    assert_eq!(store.lease6(a.ip).unwrap(), Some(other.clone()));
    assert!(store.leases6_of(&a.duid).unwrap().is_empty());
    assert_eq!(store.leases6_of(&other.duid).unwrap(), vec![other.clone()]);
    // A removal forgets the address whoever holds it (the engine decided).
    store
        .commit(&[Change::Lease6(Lease6Effect::Remove(a.ip, a.duid.clone()))])
        .unwrap();
    assert_eq!(store.lease6(a.ip).unwrap(), None);
    assert!(store.leases6_of(&other.duid).unwrap().is_empty());
    assert!(store.load().unwrap().leases6.is_empty());
    // Removing what is not there is no error.
    store
        .commit(&[Change::Lease6(Lease6Effect::Remove(a.ip, a.duid))])
        .unwrap();
}

pub(crate) fn v6_records_keep_whatever_the_client_sent(store: &dyn Store) {
    // A DUID far past RFC 8415's 130 octets and a long non-ASCII host name, as a hostile
    // or broken client may send them: read back whole.
    let odd = Lease6 {
        duid: (0..=255u8).cycle().take(1400).collect(),
        hostname: Some("é\u{0}\\x".repeat(500)),
        mac: None,
        arch: Some(0xffff),
        state: LeaseState::Declined,
        ..lease6(0x20, 3)
    };
    let empty = Lease6 {
        duid: Vec::new(),
        hostname: None,
        arch: None,
        ..lease6(0x21, 4)
    };
    store.commit(&[put6(&odd), put6(&empty)]).unwrap();
    assert_eq!(store.lease6(odd.ip).unwrap(), Some(odd.clone()));
    assert_eq!(store.leases6_of(&odd.duid).unwrap(), vec![odd]);
    assert_eq!(store.leases6_of(&[]).unwrap(), vec![empty]);
}

pub(crate) fn v6_client_records_are_found_by_duid(store: &dyn Store) {
    // One client, three IAs (one address each), written out of address order.
    let ias: Vec<Lease6> = [(0x33, 3), (0x31, 1), (0x32, 2)]
        .into_iter()
        .map(|(ip, iaid)| Lease6 {
            iaid,
            ..lease6(ip, 5)
        })
        .collect();
    let neighbour = lease6(0x34, 6);
    let mut changes: Vec<_> = ias.iter().map(put6).collect();
    changes.push(put6(&neighbour));
    store.commit(&changes).unwrap();
    let found = store.leases6_of(&duid(5)).unwrap();
    assert_eq!(low(&found), [0x31, 0x32, 0x33]);
    assert_eq!(found.iter().map(|l| l.iaid).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(store.leases6_of(&duid(9)).unwrap().is_empty());
    // A DUID that only starts like another one is another client.
    assert!(store.leases6_of(&duid(5)[..9]).unwrap().is_empty());
}

pub(crate) fn a_mixed_commit_keeps_v4_and_v6_together(store: &dyn Store) {
    let v4 = lease(10, 1);
    let v6 = lease6(0x10, 1);
    store
        .commit(&[
            Change::Lease(LeaseEffect::Put(v4.clone())),
            put6(&v6),
            Change::ServerDuid(duid(0xee)),
        ])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.leases, vec![v4.clone()]);
    assert_eq!(snap.leases6, vec![v6.clone()]);
    assert_eq!(snap.server_duid, Some(duid(0xee)));
    // The families are apart: a v4 removal leaves the v6 record, and back.
    store
        .commit(&[
            Change::Lease(LeaseEffect::Remove(v4.ip, v4.mac)),
            put6(&lease6(0x11, 2)),
        ])
        .unwrap();
    assert_eq!(store.lease(v4.ip).unwrap(), None);
    assert_eq!(low(&store.leases6(None, 10).unwrap()), [0x10, 0x11]);
    store
        .commit(&[
            Change::Lease(LeaseEffect::Put(v4.clone())),
            Change::Lease6(Lease6Effect::Remove(v6.ip, v6.duid.clone())),
        ])
        .unwrap();
    assert_eq!(store.lease(v4.ip).unwrap(), Some(v4.clone()));
    assert_eq!(store.lease_of(v4.mac).unwrap(), Some(v4));
    assert_eq!(low(&store.leases6(None, 10).unwrap()), [0x11]);
}

pub(crate) fn v6_pages_follow_address_order(store: &dyn Store) {
    // Addresses that differ in every part, written in a scrambled order.
    let mut ips: Vec<Ipv6Addr> = (0..40u16)
        .map(|i| {
            Ipv6Addr::new(
                0x2001,
                0xdb8,
                i % 3,
                0,
                0,
                0,
                0x100 * (i % 5),
                (i * 37) % 101,
            )
        })
        .collect();
    ips.push(Ipv6Addr::UNSPECIFIED);
    ips.push(Ipv6Addr::from(u128::MAX));
    let changes: Vec<_> = ips
        .iter()
        .enumerate()
        .map(|(n, ip)| {
            put6(&Lease6 {
                ip: *ip,
                ..lease6(0, n as u8)
            })
        })
        .collect();
    store.commit(&changes).unwrap();
    let mut sorted = ips.clone();
    sorted.sort();
    sorted.dedup();
    // Page by page, each after the previous page's last address.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.leases6(after, 7).unwrap();
        assert!(page.len() <= 7);
        paged.extend(page.iter().map(|l| l.ip));
        match page.last() {
            Some(l) if page.len() == 7 => after = Some(l.ip),
            _ => break,
        }
    }
    assert_eq!(paged, sorted);
    assert_eq!(
        store
            .load()
            .unwrap()
            .leases6
            .iter()
            .map(|l| l.ip)
            .collect::<Vec<_>>(),
        sorted
    );
    // The first page starts at the first address; nothing follows the last one.
    assert_eq!(store.leases6(None, 1).unwrap()[0].ip, Ipv6Addr::UNSPECIFIED);
    assert!(store
        .leases6(Some(Ipv6Addr::from(u128::MAX)), 10)
        .unwrap()
        .is_empty());
    assert!(store.leases6(None, 0).unwrap().is_empty());
    // A cursor on an address nobody holds (freed between two pages) still pages on.
    let gap = Ipv6Addr::from(u128::from(sorted[3]) + 1);
    assert_eq!(store.leases6(Some(gap), 1).unwrap()[0].ip, sorted[4]);
}

pub(crate) fn the_server_duid_is_written_once(store: &dyn Store) {
    assert_eq!(store.server_duid().unwrap(), None);
    assert_eq!(store.load().unwrap().server_duid, None);
    let first = vec![0, 1, 0, 1, 0x2e, 0x4f, 0x11, 0x22, 0x52, 0x54, 0, 0, 0, 1];
    store.commit(&[Change::ServerDuid(first.clone())]).unwrap();
    assert_eq!(store.server_duid().unwrap(), Some(first.clone()));
    // The same one again (every start) changes nothing; another one is not taken,
    // alone or in a batch with other changes, which still apply.
    store
        .commit(&[
            Change::ServerDuid(first.clone()),
            Change::ServerDuid(duid(9)),
            put6(&lease6(0x40, 4)),
        ])
        .unwrap();
    assert_eq!(store.server_duid().unwrap(), Some(first.clone()));
    assert_eq!(store.load().unwrap().server_duid, Some(first));
    assert!(store.lease6(lease6(0x40, 4).ip).unwrap().is_some());
}

pub(crate) fn two_server_duids_in_one_commit_keep_the_first(store: &dyn Store) {
    store
        .commit(&[Change::ServerDuid(duid(1)), Change::ServerDuid(duid(2))])
        .unwrap();
    assert_eq!(store.server_duid().unwrap(), Some(duid(1)));
}

#[test]
fn sled_keeps_v6_leases_and_the_server_duid_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let server_duid = vec![0, 2, 0, 0, 0x12, 0x34, 0xab];
    let (a, b) = (
        lease6(0x10, 1),
        Lease6 {
            iaid: 2,
            ..lease6(0x11, 1)
        },
    );
    {
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(store.server_duid().unwrap(), None);
        store
            .commit(&[
                Change::Lease(LeaseEffect::Put(lease(7, 7))),
                put6(&a),
                put6(&b),
                Change::ServerDuid(server_duid.clone()),
            ])
            .unwrap();
    }
    for _ in 0..2 {
        let store = SledStore::open(dir.path()).unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.leases, vec![lease(7, 7)]);
        assert_eq!(snap.leases6, vec![a.clone(), b.clone()]);
        assert_eq!(snap.server_duid, Some(server_duid.clone()));
        assert!(snap.set_aside.is_empty() && snap.set_aside6.is_empty());
        // The DUID index is rebuilt from disk, and the DUID stays whatever comes.
        assert_eq!(
            store.leases6_of(&a.duid).unwrap(),
            vec![a.clone(), b.clone()]
        );
        store.commit(&[Change::ServerDuid(duid(3))]).unwrap();
        assert_eq!(store.server_duid().unwrap(), Some(server_duid.clone()));
    }
    // A fresh store has none.
    let fresh = tempfile::tempdir().unwrap();
    let store = SledStore::open(fresh.path()).unwrap();
    assert_eq!(store.load().unwrap().server_duid, None);
}

#[test]
fn a_v6_record_that_does_not_decode_is_set_aside_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (a, c) = (lease6(1, 1), lease6(3, 3));
    {
        let store = SledStore::open(dir.path()).unwrap();
        store
            .commit(&[
                put6(&a),
                put6(&c),
                Change::Lease(LeaseEffect::Put(lease(1, 1))),
            ])
            .unwrap();
    }
    let damaged = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    {
        // Damage records behind the store's back, as a bug or a bad disk would: a cut
        // record, a record of an unknown format and a key that is no address.
        let db = super::battery::raw_sled(dir.path());
        let leases6 = db.open_tree("leases6").unwrap();
        let cut = super::encode_lease6(&lease6(2, 2));
        leases6
            .insert(damaged.octets(), &cut[..cut.len() - 3])
            .unwrap();
        let mut future = super::encode_lease6(&lease6(4, 4));
        future[0] = 9;
        leases6.insert(lease6(4, 4).ip.octets(), future).unwrap();
        leases6.insert([1, 2, 3], vec![1]).unwrap();
        db.flush().unwrap();
    }
    for _ in 0..2 {
        let store = SledStore::open(dir.path()).unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.leases6, vec![a.clone(), c.clone()]);
        assert_eq!(snap.leases, vec![lease(1, 1)]);
        // Kept apart from the v4 ones, each with its address to hold back.
        assert!(snap.set_aside.is_empty());
        let held: Vec<_> = snap.set_aside6.iter().map(|s| s.address6()).collect();
        assert_eq!(held, vec![None, Some(damaged), Some(lease6(4, 4).ip)]);
        assert_eq!(snap.set_aside6[0].key, vec![1, 2, 3]);
        assert!(snap
            .set_aside6
            .iter()
            .all(|s| s.since > 0 && s.address().is_none()));
        // Pages and lookups skip nothing readable and fail on nothing.
        assert_eq!(low(&store.leases6(None, 10).unwrap()), [1, 3]);
        assert_eq!(store.lease6(damaged).unwrap(), None);
        assert!(store.leases6_of(&duid(2)).unwrap().is_empty());
    }
}

#[test]
fn a_store_with_newer_v6_records_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    {
        let db = super::battery::raw_sled(dir.path());
        let meta = db.open_tree("meta").unwrap();
        assert_eq!(
            meta.get("lease6_format_version").unwrap().as_deref(),
            Some(&[super::LEASE6_FORMAT_VERSION][..])
        );
        meta.insert("lease6_format_version", &[9]).unwrap();
        db.flush().unwrap();
    }
    let err = SledStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            super::StoreError::Version6 {
                found: 9,
                supported: 1
            }
        ),
        "{err}"
    );
}

/// An arbiter that records what it is handed and refuses the v6 puts on
/// `refuse` (held by `holder`), accepting everything else.
#[derive(Debug, Default)]
struct Recorder {
    seen: std::sync::Mutex<Vec<super::SharedChange>>,
    refuse: Option<Lease6>,
}

impl super::Arbiter for Recorder {
    fn decide(
        &self,
        changes: Vec<super::SharedChange>,
        flushed: super::Flushed,
        finish: super::Finish,
    ) {
        self.seen.lock().unwrap().extend(changes.iter().cloned());
        let verdicts = changes
            .iter()
            .map(|c| match (c, &self.refuse) {
                (super::SharedChange::V6(Lease6Effect::Put(l)), Some(holder))
                    if l.ip == holder.ip =>
                {
                    super::Verdict::Refused6(holder.clone())
                }
                _ => super::Verdict::Accepted,
            })
            .collect();
        std::thread::spawn(move || {
            let flush = flushed
                .blocking_recv()
                .unwrap_or(Err(super::StoreError::Closed));
            finish(flush, changes, verdicts);
        });
    }
}

fn decided_committer(hook: &Arc<Recorder>) -> (Arc<super::MemoryStore>, super::Committer) {
    let store = Arc::new(super::MemoryStore::new());
    let committer = super::Committer::start_decided(
        store.clone(),
        Arc::default(),
        Some(hook.clone() as Arc<dyn super::Arbiter>),
    )
    .unwrap();
    (store, committer)
}

#[test]
fn the_committer_hands_v4_and_v6_lease_changes_to_the_peers_and_nothing_else() {
    use super::SharedChange;
    let hook = Arc::new(Recorder::default());
    let (store, committer) = decided_committer(&hook);
    let v4 = LeaseEffect::Put(lease(10, 1));
    let remove6 = Lease6Effect::Remove(lease6(0x11, 1).ip, duid(1));
    committer
        .commit_blocking(vec![
            put6(&lease6(0x10, 1)),
            Change::Lease(v4.clone()),
            Change::ServerDuid(duid(1)),
            Change::Lease6(remove6.clone()),
        ])
        .unwrap();
    // A peer's own change is stored, never handed on.
    committer
        .commit_blocking(vec![Change::Replica6(Lease6Effect::Put(lease6(0x12, 2)))])
        .unwrap();
    assert_eq!(
        *hook.seen.lock().unwrap(),
        vec![
            SharedChange::V6(Lease6Effect::Put(lease6(0x10, 1))),
            SharedChange::V4(v4),
            SharedChange::V6(remove6),
        ]
    );
    assert_eq!(low(&store.leases6(None, 10).unwrap()), [0x10, 0x12]);
    assert_eq!(store.server_duid().unwrap(), Some(duid(1)));
}

#[test]
fn a_v6_lease_a_peer_refuses_is_durable_here_but_not_acknowledged() {
    let holder = lease6(0x20, 9);
    let hook = Arc::new(Recorder {
        refuse: Some(holder.clone()),
        ..Recorder::default()
    });
    let (store, committer) = decided_committer(&hook);
    let ours = lease6(0x20, 1);
    let err = committer.commit_blocking(vec![put6(&ours)]).unwrap_err();
    assert!(err.to_string().contains("held by another client"), "{err}");
    // Another job of the same flush is answered as usual.
    committer
        .commit_blocking(vec![put6(&lease6(0x21, 2))])
        .unwrap();
    assert_eq!(low(&store.leases6(None, 10).unwrap()), [0x20, 0x21]);
}
