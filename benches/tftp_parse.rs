//! Read-request parsing: shardboot's decoder against the `tftpd` crate's (1.0), the
//! user's first choice, on requests real clients send and on the odd ones RFC 2347 says
//! a server should still answer. Prints which requests each parser accepts, then times
//! both on the accepted ones.
//!
//! `cargo bench --bench tftp_parse`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use shardboot::tftp::packet::Packet;

/// An RRQ from its NUL-separated fields; `terminated` adds the final NUL.
fn rrq(fields: &[&str], terminated: bool) -> Vec<u8> {
    let mut v = vec![0, 1];
    for (i, f) in fields.iter().enumerate() {
        v.extend_from_slice(f.as_bytes());
        if terminated || i + 1 < fields.len() {
            v.push(0);
        }
    }
    v
}

fn cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        // As OVMF's UEFI PXE sends them (seen in the QEMU lab's log).
        (
            "OVMF UEFI PXE",
            rrq(
                &[
                    "snponly.efi",
                    "octet",
                    "tsize",
                    "0",
                    "blksize",
                    "1468",
                    "windowsize",
                    "4",
                ],
                true,
            ),
        ),
        (
            "iPXE",
            rrq(
                &["undionly.kpxe", "octet", "blksize", "1432", "tsize", "0"],
                true,
            ),
        ),
        ("tftp-hpa, no options", rrq(&["ipxe.efi", "octet"], true)),
        (
            "upper-case names (RFC 2347: case-insensitive)",
            rrq(&["ipxe.efi", "OCTET", "BLKSIZE", "1468"], true),
        ),
        (
            "non-numeric blksize (to be ignored, RFC 2347 §2)",
            rrq(&["ipxe.efi", "octet", "blksize", "lots"], true),
        ),
        (
            "unknown option with an empty value",
            rrq(&["ipxe.efi", "octet", "multicast", ""], true),
        ),
        (
            "last option without its NUL",
            rrq(&["ipxe.efi", "octet", "blksize", "1468"], false),
        ),
        ("NUL padding after the options", {
            let mut v = rrq(&["ipxe.efi", "octet", "tsize", "0"], true);
            v.extend_from_slice(&[0, 0, 0]);
            v
        }),
    ]
}

fn parse(c: &mut Criterion) {
    let cases = cases();
    println!(
        "{:<52} {:>10} {:>12}",
        "request", "shardboot", "tftpd crate"
    );
    let mut both = Vec::new();
    for (name, bytes) in &cases {
        let ours = matches!(Packet::decode(bytes), Ok(Packet::Read(_)));
        let theirs = matches!(
            tftpd::Packet::deserialize(bytes),
            Ok(tftpd::Packet::Rrq { .. })
        );
        let word = |ok| if ok { "answers" } else { "drops" };
        println!("{name:<52} {:>10} {:>12}", word(ours), word(theirs));
        if ours && theirs {
            both.push(bytes.clone());
        }
    }
    let mut g = c.benchmark_group("rrq_parse");
    g.bench_function("shardboot", |b| {
        b.iter(|| {
            for r in &both {
                black_box(Packet::decode(black_box(r)).is_ok());
            }
        })
    });
    g.bench_function("tftpd_crate", |b| {
        b.iter(|| {
            for r in &both {
                black_box(tftpd::Packet::deserialize(black_box(r)).is_ok());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
