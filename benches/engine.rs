//! Per-packet cost of the DHCP path without I/O: wire checks and decode → engine decision →
//! encode, for DISCOVERs captured from real clients (fixtures/packets/*.bin) and for a
//! full DISCOVER+REQUEST exchange; and what a member pays for another member's
//! DISCOVER, decided from the raw packet against after a full decode; and what following
//! the shared lease store costs per row without the network (a row's record, as the
//! database holds it, decoded and taken by another member's engine).

use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dhcproto::v4::{DhcpOption, Message, MessageType};
use dhcproto::Encodable;
use shardboot::config::{Config, DEFAULT_CONFIG_TOML};
use shardboot::dhcp::peek::peek;
use shardboot::dhcp::wire::{decode_request, encode_reply};
use shardboot::dhcp::{Engine, Interface, PacketContext, Responsibility};

const BIG_POOL: &str = r#"
[[subnet]]
network = "198.18.0.0/15"
ranges = ["198.18.1.0 - 198.19.255.254"]
"#;

fn engine() -> Engine {
    // Every DISCOVER is a new client whose offer is held 60 s: at 1,000 a simulated
    // second that is 60,000 offers outstanding, above the default cap on offers to
    // unknown machines (`dhcp.max_offers`), which would silence the engine mid-run.
    let overrides = [("dhcp.max_offers".to_string(), "1000000".to_string())];
    let cfg =
        Config::from_toml_with_overrides(&format!("{DEFAULT_CONFIG_TOML}{BIG_POOL}"), &overrides)
            .unwrap();
    Engine::new(&cfg, Vec::new(), 1_000_000)
}

/// Simulated time: `per_sec` new clients per second, so offers (60 s) and leases (1 h)
/// expire and the pool never runs dry however long criterion runs; reclaims once per
/// simulated second, as the server's tick does.
fn clock(e: &mut Engine, n: u32, per_sec: u32) -> u64 {
    let now = 1_000_000 + u64::from(n / per_sec);
    if n.is_multiple_of(per_sec) {
        e.handle_tick(now);
    }
    now
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/packets/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(path).unwrap()
}

/// Rewrites the MAC in a raw request so every iteration is a new client.
fn set_mac(raw: &mut [u8], n: u32) {
    raw[28..34].copy_from_slice(&[
        0x02,
        0x5b,
        (n >> 24) as u8,
        (n >> 16) as u8,
        (n >> 8) as u8,
        n as u8,
    ]);
}

fn bench_fixtures(c: &mut Criterion) {
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(198, 18, 0, 1),
        boot_server: false,
    };
    let mut group = c.benchmark_group("discover_to_offer");
    group.throughput(Throughput::Elements(1));
    for name in [
        "dhclient-discover.bin",
        "udhcpc-discover.bin",
        "perfdhcp-discover.bin",
        "ipxe-bios-discover.bin",
        "ovmf-pxe-x64-discover.bin",
    ] {
        let raw = fixture(name);
        let mut e = engine();
        let mut n = 0u32;
        let mut calls = 0u32;
        let mut out = Vec::with_capacity(600);
        group.bench_function(name.trim_end_matches(".bin"), |b| {
            b.iter_batched_ref(
                || {
                    n += 1;
                    let mut r = raw.clone();
                    set_mac(&mut r, n);
                    r
                },
                |r| {
                    calls += 1;
                    let now = clock(&mut e, calls, 1000);
                    let msg = decode_request(r).unwrap();
                    let ctx = PacketContext {
                        interface: &iface,
                        responsibility: Responsibility::Mine,
                        policy: None,
                        known: false,
                        dnsmasq: Default::default(),
                        source: std::net::Ipv4Addr::UNSPECIFIED,
                        now,
                    };
                    let d = e.handle_message(&msg, &ctx);
                    d.reply.unwrap().encode(&mut out).unwrap();
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn bench_exchange(c: &mut Criterion) {
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(198, 18, 0, 1),
        boot_server: false,
    };
    let mut e = engine();
    let mut n = 0u32;
    let mut out = Vec::with_capacity(600);
    let mut group = c.benchmark_group("four_way");
    group.throughput(Throughput::Elements(1));
    group.bench_function("discover_request_relayed", |b| {
        b.iter(|| {
            n += 1;
            let mac = [
                0x02,
                0x5c,
                (n >> 24) as u8,
                (n >> 16) as u8,
                (n >> 8) as u8,
                n as u8,
            ];
            let z = Ipv4Addr::UNSPECIFIED;
            let mut d = Message::new_with_id(n, z, z, z, Ipv4Addr::new(198, 18, 0, 2), &mac);
            d.opts_mut()
                .insert(DhcpOption::MessageType(MessageType::Discover));
            let raw = d.to_vec().unwrap();
            let now = clock(&mut e, n, 10);
            let ctx = PacketContext {
                interface: &iface,
                responsibility: Responsibility::Mine,
                policy: None,
                known: false,
                dnsmasq: Default::default(),
                source: std::net::Ipv4Addr::UNSPECIFIED,
                now,
            };
            let offer = e
                .handle_message(&decode_request(&raw).unwrap(), &ctx)
                .reply
                .unwrap()
                .message;
            encode_reply(&offer, &mut out).unwrap();
            let mut r = Message::new_with_id(n, z, z, z, Ipv4Addr::new(198, 18, 0, 2), &mac);
            r.opts_mut()
                .insert(DhcpOption::MessageType(MessageType::Request));
            r.opts_mut()
                .insert(DhcpOption::ServerIdentifier(iface.addr));
            r.opts_mut()
                .insert(DhcpOption::RequestedIpAddress(offer.yiaddr()));
            let raw = r.to_vec().unwrap();
            let ack = e.handle_message(&decode_request(&raw).unwrap(), &ctx);
            ack.reply.unwrap().encode(&mut out).unwrap();
        })
    });
    group.finish();
}

fn bench_silent(c: &mut Criterion) {
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(198, 18, 0, 1),
        boot_server: false,
    };
    let ctx = PacketContext {
        interface: &iface,
        responsibility: Responsibility::NotMine,
        policy: None,
        known: false,
        source: std::net::Ipv4Addr::UNSPECIFIED,
        now: 1_000_000,
        dnsmasq: Default::default(),
    };
    let mut group = c.benchmark_group("silent_other_member");
    group.throughput(Throughput::Elements(1));
    for name in ["perfdhcp-discover.bin", "ovmf-pxe-x64-discover.bin"] {
        let raw = fixture(name);
        let name = name.trim_end_matches("-discover.bin");
        let mut e = engine();
        group.bench_function(format!("{name}/full_decode"), |b| {
            b.iter(|| {
                let msg = decode_request(std::hint::black_box(&raw)).unwrap();
                e.handle_message(&msg, &ctx).outcome
            })
        });
        group.bench_function(format!("{name}/peek"), |b| {
            b.iter(|| {
                let p = peek(std::hint::black_box(&raw)).unwrap();
                e.handle_peeked(&p, &ctx)
            })
        });
    }
    group.finish();
}

fn bench_follow(c: &mut Criterion) {
    use shardboot::store::{decode_lease, encode_lease, Lease, LeaseEffect, LeaseState};
    const ROWS: u32 = 64;
    let lease = |n: u32| Lease {
        ip: Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 1, 0)) + n % 100_000),
        mac: shardboot::mac::MacAddr([0x02, 0x5d, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]),
        state: LeaseState::Bound,
        starts: 1_000_000 + u64::from(n),
        expires: 1_003_600 + u64::from(n),
        hostname: Some(format!("node-{n}")),
        client_id: Some(vec![1, 2, 3, 4, 5, 6, 7]),
        machine_id: None,
        arch: Some(7),
    };
    // What one poll of `shared::follow` reads: the address and the record of each row.
    let rows = move |round: u32| -> Vec<(u32, Vec<u8>)> {
        (0..ROWS)
            .map(|i| {
                let l = lease(round * ROWS + i);
                (u32::from(l.ip), encode_lease(&l))
            })
            .collect()
    };
    let mut group = c.benchmark_group("follow");
    group.throughput(Throughput::Elements(u64::from(ROWS)));
    let mut e = engine();
    let mut n = 0u32;
    group.bench_function("decode_and_take_64_rows", |b| {
        b.iter_batched(
            || {
                n += 1;
                (n, rows(n))
            },
            |(round, rows)| {
                let now = 1_000_000 + u64::from(round);
                for (ip, record) in &rows {
                    let l = decode_lease(&ip.to_be_bytes(), record).unwrap();
                    e.apply_decided_change(&LeaseEffect::Put(l), now);
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_fixtures,
    bench_exchange,
    bench_silent,
    bench_follow
);
criterion_main!(benches);
