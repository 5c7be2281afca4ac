//! 500 transfers at once: all admitted, memory stays bounded (the file is cached once
//! and shared), the 501st is refused as busy, and aborts release every slot.

mod tftp_support;

use std::net::UdpSocket;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tftp_support::*;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn five_hundred_concurrent_transfers_stay_bounded() {
    const N: usize = 500;
    let root = Root::new();
    let mut s = settings(root.path());
    s.max_transfers = N;
    s.max_per_client = N;
    s.max_windowsize = 64;
    s.timeout = Duration::from_secs(5);
    let server = TestServer::start(s, "127.0.0.1:0".parse().unwrap());
    // Warm the cache so the baseline includes the one shared copy of the file.
    let warm = TestClient::new()
        .get(
            server.addr,
            "ipxe.efi",
            &[("blksize", "1468")],
            &Faults::default(),
        )
        .unwrap();
    let size = warm.data.len() as u64;
    let before = rss_kib();
    let rrq = TestClient::rrq(
        b"ipxe.efi",
        "octet",
        &[("blksize", "1468"), ("windowsize", "64"), ("tsize", "0")],
    );
    // RRQs go out in batches of 25, each batch answered before the next is sent, so
    // the test does not depend on the listener's receive buffer (a fresh machine's
    // net.core.rmem_max may hold fewer than 500 queued datagrams).
    let mut buf = [0u8; 2048];
    let mut socks: Vec<UdpSocket> = Vec::with_capacity(N);
    let mut tids = Vec::with_capacity(N);
    for batch in 0..N / 25 {
        let fresh: Vec<UdpSocket> = (0..25)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.send_to(&rrq, server.addr).unwrap();
                s
            })
            .collect();
        // Each transfer answers with an OACK; acknowledging it makes the server send a
        // full 64-block window and wait: 500 transfers in flight.
        for s in &fresh {
            let (n, tid) = s
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("OACK in batch {batch}: {e}"));
            assert_eq!(buf[1], 6, "expected OACK, got {:?}", &buf[..n.min(8)]);
            s.send_to(&[0, 4, 0, 0], tid).unwrap();
            tids.push(tid);
        }
        socks.extend(fresh);
    }
    wait_for("500 active", || {
        server.metrics.transfers_active.load(Relaxed) == N as u64
    });
    // Every transfer has sent its whole window (it sits in our socket buffers).
    for s in &socks {
        for block in 1..=64u16 {
            let n = s.recv(&mut buf).expect("DATA");
            assert_eq!(n, 4 + 1468);
            assert_eq!(&buf[..4], &[0, 3, (block >> 8) as u8, block as u8]);
        }
    }
    let grown = rss_kib().saturating_sub(before);
    eprintln!("RSS grew by {grown} KiB for {N} concurrent transfers of a {size}-octet file");
    // Without sharing, 500 copies of the file alone would be ~400 MiB.
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB");
    // The limit holds.
    let (reply, _) = TestClient::new().request(server.addr, &rrq).unwrap();
    assert_eq!(&reply[..4], &[0, 5, 0, 0]);
    assert!(String::from_utf8_lossy(&reply).contains("busy"));
    // Aborting releases every slot.
    for (s, tid) in socks.iter().zip(&tids) {
        s.send_to(b"\0\x05\0\0abort\0", tid).unwrap();
    }
    wait_for("all released", || {
        server.metrics.transfers_active.load(Relaxed) == 0
    });
    assert_eq!(server.metrics.transfers_failed.load(Relaxed), N as u64);
    server.stop().unwrap();
}
