//! The lasting timeline's costs (docs/timeline.md): recording with the journal on, the
//! board's read of every machine and one page, appending, compacting and reading the
//! files back. Prints figures; `cargo bench --bench timeline_disk`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use shardboot::mac::MacAddr;
use shardboot::timeline::board::{page, Query};
use shardboot::timeline::disk::{load_into, Disk};
use shardboot::timeline::{Limits, Report, Source, Timeline};

fn report(outcome: &'static str, ip: Ipv4Addr) -> Report {
    Report {
        source: Source::Dhcp,
        what: "DISCOVER",
        outcome,
        why: (outcome == "silent").then_some("not_responsible"),
        ip: Some(IpAddr::V4(ip)),
        detail: Some("boot snponly.efi".into()),
    }
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits::default();
    let t = Timeline::new(limits);
    t.configure(limits, true);
    let n = 200_000u32;
    let started = Instant::now();
    for i in 0..n {
        let mac = MacAddr([2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        let outcome = if i % 5 == 0 { "silent" } else { "ack" };
        t.record_at(mac, report(outcome, Ipv4Addr::from(0x0a00_0000 + i)), 1);
    }
    let record = started.elapsed();
    // The board's read holds the lock while every machine's record is copied.
    let started = Instant::now();
    let rows = t.rows(0);
    let board = started.elapsed();
    let machines = rows.len();
    let started = Instant::now();
    let q = Query {
        limit: 100,
        ..Default::default()
    };
    page(rows, 2, 1, &q);
    let paged = started.elapsed();
    let (mut d, _) = Disk::open(dir.path(), limits).unwrap();
    let (batch, _) = t.take_journal(Vec::new());
    let started = Instant::now();
    let mut batch = batch;
    let mut rest = batch.split_off(50_000);
    d.append(&mut batch).unwrap();
    let append = started.elapsed();
    d.append(&mut rest).unwrap();
    let started = Instant::now();
    d.compact().unwrap();
    let compact = started.elapsed();
    let size = d.size();
    let again = Timeline::new(limits);
    let started = Instant::now();
    let loaded = load_into(dir.path(), &again).unwrap();
    let read = started.elapsed();
    println!("timeline: record {n} events with the journal: {record:?}");
    println!(
        "timeline: rows of {machines} machines under the lock: {board:?}; one page: {paged:?}"
    );
    println!("timeline: append and fsync 50,000 events: {append:?}; compact: {compact:?}; {size} octets on disk");
    println!("timeline: read back {} events: {read:?}", loaded.events);
}
