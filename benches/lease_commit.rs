//! The lease store's commit path: one durable flush for batches of 1, 16, 256 and 4096
//! lease writes. Group commit makes the per-lease cost fall with the batch size.

use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shardboot::mac::MacAddr;
use shardboot::store::{Change, Lease, LeaseEffect, LeaseState, SledStore, Store};

fn lease(n: u32) -> Lease {
    Lease {
        ip: Ipv4Addr::from(0xc612_0000 + (n % 0x1_0000)),
        mac: MacAddr([
            0x02,
            0x5b,
            (n >> 24) as u8,
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
        ]),
        state: LeaseState::Bound,
        starts: 1_000_000,
        expires: 1_003_600,
        hostname: Some("node".into()),
        client_id: None,
        machine_id: None,
        arch: Some(7),
    }
}

fn bench_commit(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    let mut group = c.benchmark_group("lease_commit");
    group.sample_size(20);
    let mut n = 0u32;
    for batch in [1usize, 16, 256, 4096] {
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(format!("batch_{batch}"), |b| {
            b.iter(|| {
                let changes: Vec<Change> = (0..batch)
                    .map(|_| {
                        n = n.wrapping_add(1);
                        Change::Lease(LeaseEffect::Put(lease(n)))
                    })
                    .collect();
                store.commit(&changes).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_commit);
criterion_main!(benches);
