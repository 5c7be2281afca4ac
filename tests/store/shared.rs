//! The shared lease store against real servers: MariaDB and PostgreSQL from Debian,
//! each started by the test in a temporary directory on loopback. One battery runs
//! against both: the database refuses a second live binding of an address whatever the
//! members' clocks say, takes a free, released, forgotten or ended one, keeps every
//! value a client sent, settles two members racing for the same addresses one winner
//! each, and, while unreachable, lets only renewals within a standing binding through,
//! then serves again by itself once it is back.

use crate::common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use common::db::{DbServer, Kind};
use shardboot::config::{Dialect, SharedStoreSettings};
use shardboot::mac::MacAddr;
use shardboot::shared::SharedStore;
use shardboot::store::{
    Lease, Lease6, Lease6Effect, LeaseEffect, LeaseState, SharedChange, StoreMetrics, Verdict,
};
use tokio_util::sync::CancellationToken;

fn now() -> u64 {
    shardboot::clock::unix_now()
}

fn settings(kind: Kind, url: &str, credentials: Option<std::path::PathBuf>) -> SharedStoreSettings {
    SharedStoreSettings {
        url: url.to_string(),
        dialect: match kind {
            Kind::MariaDb => Dialect::MySql,
            Kind::Postgres => Dialect::Postgres,
        },
        credentials_dir: credentials,
        ca_file: None,
        timeout: Duration::from_millis(1500),
        poll: Duration::from_millis(200),
        heartbeat: Duration::from_secs(1),
    }
}

async fn member(s: &SharedStoreSettings, name: &str) -> (Arc<SharedStore>, Arc<StoreMetrics>) {
    let metrics = Arc::new(StoreMetrics::default());
    let store = SharedStore::connect(
        s,
        name.into(),
        format!("list-of-{name}"),
        metrics.clone(),
        &CancellationToken::new(),
    )
    .await
    .expect("connect");
    (store, metrics)
}

fn ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 1, n)
}

fn lease(n: u8, mac: u8, state: LeaseState, starts: u64, secs: u64) -> Lease {
    Lease {
        ip: ip(n),
        // Octets past 0x7f: no text anywhere on the way.
        mac: MacAddr([0xfe, 0xed, 0xc0, 0xde, 0x80, mac]),
        state,
        starts,
        expires: starts + secs,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    }
}

fn put(l: &Lease) -> SharedChange {
    SharedChange::V4(LeaseEffect::Put(l.clone()))
}

fn holder(v: &Verdict) -> Option<&Lease> {
    match v {
        Verdict::Refused(l) => Some(l),
        _ => None,
    }
}

async fn one(s: &SharedStore, c: SharedChange) -> Verdict {
    s.commit(&[c]).await.pop().unwrap()
}

/// Two members on one database: who holds what.
async fn refuses_a_second_live_binding(kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let (b, _) = member(&s, "b").await;
    let t = now();
    let mine = lease(10, 1, LeaseState::Bound, t, 600);
    assert_eq!(one(&a, put(&mine)).await, Verdict::Accepted);
    // Another client on the same address: refused, with the binding that holds it.
    let theirs = lease(10, 2, LeaseState::Bound, t, 600);
    let v = one(&b, put(&theirs)).await;
    let h = holder(&v).unwrap_or_else(|| panic!("{kind:?}: {v:?}"));
    assert_eq!(h.mac, mine.mac);
    assert!((t + 598..=t + 601).contains(&h.expires), "{h:?}");
    // The holder renews through any member.
    let renewed = lease(10, 1, LeaseState::Bound, t, 1200);
    assert_eq!(one(&b, put(&renewed)).await, Verdict::Accepted);
    // A member whose clock runs two hours ahead sees the binding as long over: the
    // database's clock decides, and it is still refused.
    let ahead = lease(10, 2, LeaseState::Bound, t + 7200, 600);
    assert!(b.commit_at(&[put(&ahead)], t + 7200).await[0].is_refused());
    // A member two hours behind still gives a binding its whole duration.
    let behind = lease(11, 3, LeaseState::Bound, t - 7200, 600);
    assert_eq!(
        a.commit_at(&[put(&behind)], t - 7200).await,
        [Verdict::Accepted]
    );
    assert!(one(&b, put(&lease(11, 4, LeaseState::Bound, t, 600)))
        .await
        .is_refused());
    // Released: free for anyone.
    assert_eq!(
        one(&a, put(&lease(10, 1, LeaseState::Released, t, 1200))).await,
        Verdict::Accepted
    );
    assert_eq!(one(&b, put(&theirs)).await, Verdict::Accepted);
    // Forgotten by its holder: free (a removal by another client changes nothing).
    let other_remove = SharedChange::V4(LeaseEffect::Remove(ip(10), mine.mac));
    assert_eq!(one(&a, other_remove).await, Verdict::Accepted);
    assert!(one(&a, put(&mine)).await.is_refused(), "b's binding stands");
    let removal = SharedChange::V4(LeaseEffect::Remove(ip(10), theirs.mac));
    assert_eq!(one(&b, removal).await, Verdict::Accepted);
    assert_eq!(one(&a, put(&mine)).await, Verdict::Accepted);
    // Ended by the database's clock: free.
    // Three seconds from the member's `t` exactly (not from a clock read later, which
    // a loaded machine may have moved past a second boundary).
    let short = lease(12, 5, LeaseState::Bound, t, 3);
    assert_eq!(a.commit_at(&[put(&short)], t).await, [Verdict::Accepted]);
    assert!(one(&b, put(&lease(12, 6, LeaseState::Bound, t, 600)))
        .await
        .is_refused());
    tokio::time::sleep(Duration::from_millis(3600)).await;
    assert_eq!(
        one(&b, put(&lease(12, 6, LeaseState::Bound, now(), 600))).await,
        Verdict::Accepted
    );
    // Declined: nobody's until it ends.
    assert_eq!(
        one(&a, put(&lease(13, 7, LeaseState::Declined, t, 600))).await,
        Verdict::Accepted
    );
    assert!(one(&b, put(&lease(13, 8, LeaseState::Bound, t, 600)))
        .await
        .is_refused());
    // One batch, one transaction, a verdict per change in order.
    let batch = [
        put(&lease(20, 9, LeaseState::Bound, t, 600)),
        put(&lease(13, 9, LeaseState::Bound, t, 600)),
        put(&lease(21, 9, LeaseState::Bound, t, 600)),
    ];
    let v = b.commit(&batch).await;
    assert_eq!(v[0], Verdict::Accepted);
    assert!(v[1].is_refused());
    assert_eq!(v[2], Verdict::Accepted);
    assert_eq!(b.metrics.refused.get(), 6, "every refusal counted");
}

fn lease6(last: u16, duid: u8, iaid: u32, t: u64) -> Lease6 {
    Lease6 {
        ip: Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, last),
        duid: vec![0, 3, 0, 1, 2, 0, 0, 0, 0, duid],
        iaid,
        mac: Some(MacAddr([2, 0, 0, 0, 0, duid])),
        state: LeaseState::Bound,
        starts: t,
        preferred: t + 300,
        expires: t + 600,
        hostname: Some("node-6".into()),
        arch: Some(7),
    }
}

/// An address is one IA's: the DUID and the IAID together.
async fn v6_bindings_are_one_ias(kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let (b, _) = member(&s, "b").await;
    let t = now();
    let put6 = |l: &Lease6| SharedChange::V6(Lease6Effect::Put(l.clone()));
    let mine = lease6(0x100, 1, 7, t);
    assert_eq!(a.commit(&[put6(&mine)]).await, [Verdict::Accepted]);
    for other in [lease6(0x100, 2, 7, t), lease6(0x100, 1, 8, t)] {
        match b.commit(&[put6(&other)]).await.pop().unwrap() {
            Verdict::Refused6(h) => assert_eq!((h.duid.clone(), h.iaid), (mine.duid.clone(), 7)),
            v => panic!("{kind:?}: {v:?}"),
        }
    }
    assert_eq!(b.commit(&[put6(&mine)]).await, [Verdict::Accepted]);
    let forget = SharedChange::V6(Lease6Effect::Remove(mine.ip, mine.duid.clone()));
    assert_eq!(a.commit(&[forget]).await, [Verdict::Accepted]);
    assert_eq!(
        b.commit(&[put6(&lease6(0x100, 2, 7, t))]).await,
        [Verdict::Accepted]
    );
    let loaded = a.load(now()).await.unwrap();
    assert_eq!(loaded.leases6.len(), 1);
    assert_eq!(loaded.leases6[0].duid, lease6(0x100, 2, 7, t).duid);
    assert_eq!(loaded.leases6[0].hostname.as_deref(), Some("node-6"));
}

/// Whatever a client sent comes back whole, and a member on an empty disk reads every
/// binding, with the ends in its own clock.
async fn every_value_round_trips(kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let t = now();
    let mut l = lease(30, 1, LeaseState::Bound, t, 900);
    l.hostname = Some("n\\x00de\\xc3\\xa9-'; DROP TABLE shardboot_lease4; --".into());
    l.client_id = Some((0..=255).collect());
    l.machine_id = Some(vec![0; 17]);
    l.arch = Some(0x0fff);
    assert_eq!(a.commit(&[put(&l)]).await, [Verdict::Accepted]);
    let (fresh, _) = member(&s, "fresh").await;
    let loaded = fresh.load(now()).await.unwrap();
    let got = loaded
        .leases
        .iter()
        .find(|g| g.ip == l.ip)
        .expect("read back");
    assert_eq!(
        (
            &got.hostname,
            &got.client_id,
            &got.machine_id,
            got.arch,
            got.mac,
            got.starts
        ),
        (
            &l.hostname,
            &l.client_id,
            &l.machine_id,
            l.arch,
            l.mac,
            l.starts
        )
    );
    assert!((t + 898..=t + 901).contains(&got.expires), "{got:?}");
}

/// A member upgraded from lease replication: what its disk holds and the database
/// lacks is written at start, so no other member can hand those addresses out.
async fn a_disk_seeds_what_the_database_lacks(kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let (b, _) = member(&s, "b").await;
    let t = now();
    assert_eq!(
        one(&b, put(&lease(50, 2, LeaseState::Bound, t, 600))).await,
        Verdict::Accepted
    );
    let loaded = a.load(t).await.unwrap();
    let mut disk = vec![
        lease(50, 1, LeaseState::Bound, t, 600), // the database says b's client: replaced
        lease(51, 1, LeaseState::Bound, t, 600), // missing: written
        lease(52, 1, LeaseState::Released, t, 600), // not live: left out
    ];
    loaded.over(&mut disk, &mut Vec::new());
    a.seed(&loaded, &mut disk, &mut [], t).await;
    assert!(one(&b, put(&lease(51, 3, LeaseState::Bound, t, 600)))
        .await
        .is_refused());
    assert_eq!(
        one(&b, put(&lease(52, 3, LeaseState::Bound, t, 600))).await,
        Verdict::Accepted
    );
    let held = disk.iter().find(|l| l.ip == ip(50)).unwrap();
    assert_eq!(held.mac, lease(50, 2, LeaseState::Bound, t, 1).mac);
}

/// Two members racing for the same 64 addresses, batch against batch: each address
/// has exactly one winner.
async fn a_race_has_one_winner_per_address(kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let (b, _) = member(&s, "b").await;
    let t = now();
    let run = |m: Arc<SharedStore>, mac: u8| {
        tokio::spawn(async move {
            let mut verdicts = Vec::new();
            for chunk in (100..164u8).collect::<Vec<_>>().chunks(8) {
                let batch: Vec<SharedChange> = chunk
                    .iter()
                    .map(|&n| put(&lease(n, mac, LeaseState::Bound, t, 600)))
                    .collect();
                verdicts.extend(m.commit(&batch).await);
            }
            verdicts
        })
    };
    let (va, vb) = tokio::join!(run(a.clone(), 1), run(b.clone(), 2));
    let (va, vb) = (va.unwrap(), vb.unwrap());
    for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
        let winners = [x, y].iter().filter(|v| **v == &Verdict::Accepted).count();
        assert_eq!(winners, 1, "{kind:?}: address {i}: {x:?} / {y:?}");
        assert!(x.is_refused() != y.is_refused());
    }
}

/// The database goes away and comes back.
async fn degraded_then_back(server: &mut DbServer, kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    let (a, metrics) = member(&s, "a").await;
    let t = now();
    let held = lease(40, 1, LeaseState::Bound, t, 600);
    assert_eq!(one(&a, put(&held)).await, Verdict::Accepted);
    server.kill();
    // A renewal within the binding's current end stands; an extension, a fresh address
    // and another client do not.
    assert_eq!(one(&a, put(&held)).await, Verdict::Accepted);
    assert!(!a.is_up(), "{kind:?}: unreachable is noticed");
    assert!(metrics
        .status
        .reason()
        .unwrap()
        .contains("shared lease store unreachable"));
    assert!(!metrics.status.offers_fresh());
    for c in [
        lease(40, 1, LeaseState::Bound, t, 1200),
        lease(41, 1, LeaseState::Bound, t, 600),
        lease(40, 2, LeaseState::Bound, t, 100),
    ] {
        let v = one(&a, put(&c)).await;
        assert!(matches!(v, Verdict::Unavailable(_)), "{c:?}: {v:?}");
    }
    assert_eq!(a.metrics.covered.get(), 1);
    assert_eq!(a.metrics.unavailable.get(), 3);
    server.restart();
    // Back by itself: once a heartbeat reaches it (`shared::follow` writes one every
    // `store.heartbeat_secs`), writes go through again.
    let started = std::time::Instant::now();
    loop {
        a.heartbeat().await;
        if one(&a, put(&lease(41, 1, LeaseState::Bound, now(), 600))).await == Verdict::Accepted {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{kind:?}: never back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(a.is_up());
    assert!(metrics.status.offers_fresh());
    assert_eq!(metrics.status.reason(), None);
}

/// A database a newer build migrated is refused by name; the same version twice is fine.
async fn schema_versions(server: &DbServer, kind: Kind, url: &str) {
    let s = settings(kind, url, None);
    member(&s, "a").await;
    member(&s, "a").await;
    let db = url.rsplit('/').next().unwrap();
    let admin = |sql: &str| {
        let out = server.admin_in(Some(db), sql);
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // A step another member already ran (its column exists, its version row not yet
    // written): taken as done, on MySQL too, which has no ADD COLUMN IF NOT EXISTS.
    admin("DELETE FROM shardboot_schema WHERE version = 2");
    let (a, _) = member(&s, "a").await;
    // A database of the first schema (no fingerprints): migrated.
    admin("DELETE FROM shardboot_schema WHERE version = 2");
    admin("ALTER TABLE shardboot_member DROP COLUMN fingerprint");
    let (b, _) = member(&s, "b").await;
    let rows = b.members().await.unwrap();
    let of = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| r.fingerprint.clone())
    };
    assert_eq!(of("b").as_deref(), Some("list-of-b"), "{kind:?}: {rows:?}");
    // The heartbeat writes the list this member serves now.
    a.set_fingerprint("changed");
    a.heartbeat().await;
    let rows = b.members().await.unwrap();
    let a_row = rows.iter().find(|r| r.name == "a").unwrap();
    assert_eq!(a_row.fingerprint, "changed", "{kind:?}");
    assert!(a_row.heartbeat_age_ms < 5_000, "{kind:?}: {a_row:?}");
    let out = server.admin_in(Some(db), "INSERT INTO shardboot_schema VALUES (99, 0)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = SharedStore::connect(
        &s,
        "b".into(),
        String::new(),
        Arc::new(StoreMetrics::default()),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("newer than this build"), "{err}");
}

/// A member knows which addresses have a row and writes their bindings without an
/// insert; a row deleted behind its back (an operator's cleanup, a purge) is written
/// again, and one another client took meanwhile is still refused.
async fn a_row_gone_behind_a_members_back_is_written_again(
    server: &DbServer,
    kind: Kind,
    url: &str,
) {
    let name = url.rsplit('/').next().unwrap().to_string();
    let s = settings(kind, url, None);
    let (a, _) = member(&s, "a").await;
    let (b, _) = member(&s, "b").await;
    let t = now();
    let mine = lease(40, 1, LeaseState::Bound, t, 600);
    assert_eq!(one(&a, put(&mine)).await, Verdict::Accepted);
    let out = server.admin_in(Some(&name), "DELETE FROM shardboot_lease4");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let renewed = lease(40, 1, LeaseState::Bound, t, 900);
    assert_eq!(one(&a, put(&renewed)).await, Verdict::Accepted);
    let (fresh, _) = member(&s, "fresh").await;
    let loaded = fresh.load(now()).await.unwrap();
    assert!(
        loaded
            .leases
            .iter()
            .any(|l| l.ip == mine.ip && l.mac == mine.mac),
        "the binding was not written again: {:?}",
        loaded.leases
    );
    // Gone again, and another client's binding in its place: refused, not replaced.
    let out = server.admin_in(Some(&name), "DELETE FROM shardboot_lease4");
    assert!(out.status.success());
    let theirs = lease(40, 2, LeaseState::Bound, t, 600);
    assert_eq!(one(&b, put(&theirs)).await, Verdict::Accepted);
    match one(&a, put(&renewed)).await {
        Verdict::Refused(l) => assert_eq!(l.mac, theirs.mac),
        v => panic!("{v:?}"),
    }
}

fn battery(kind: Kind) {
    common::require_root_or_fail();
    let mut server = DbServer::start(kind, None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, url) = server.database();
    rt.block_on(refuses_a_second_live_binding(kind, &url));
    let (_, url) = server.database();
    rt.block_on(v6_bindings_are_one_ias(kind, &url));
    let (_, url) = server.database();
    rt.block_on(every_value_round_trips(kind, &url));
    let (_, url) = server.database();
    rt.block_on(a_race_has_one_winner_per_address(kind, &url));
    let (_, url) = server.database();
    rt.block_on(a_disk_seeds_what_the_database_lacks(kind, &url));
    let (_, url) = server.database();
    rt.block_on(schema_versions(&server, kind, &url));
    let (_, url) = server.database();
    rt.block_on(a_row_gone_behind_a_members_back_is_written_again(
        &server, kind, &url,
    ));
    // Credentials from a Secret's files, the URL without them.
    let (bare, _) = server.database();
    let s = settings(kind, &bare, Some(server.credentials_dir()));
    rt.block_on(member(&s, "from-files"));
    let (_, url) = server.database();
    rt.block_on(degraded_then_back(&mut server, kind, &url));
}

#[test]
fn the_battery_on_mariadb() {
    battery(Kind::MariaDb);
}

#[test]
fn the_battery_on_postgresql() {
    battery(Kind::Postgres);
}
