//! 500 transfers at once: all admitted, memory stays bounded (the file is cached once
//! and shared), the 501st is refused as busy, and aborts release every slot.

use crate::common::tftp_lab;

use std::net::UdpSocket;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tftp_lab::*;

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

/// Sends ACK `block` to `tid` and waits for DATA `block + 1` from it (skipping DATA
/// resent meanwhile): the server took the ACK. Waiting for it, rather than sleeping,
/// orders the ACK before whatever the test sends next (the ACK goes to the transfer's
/// own port, the next RRQs to the listener's, which a loaded server may serve first).
fn ack_and_wait_data(sock: &UdpSocket, tid: std::net::SocketAddr, block: u16) {
    let b = block.to_be_bytes();
    sock.send_to(&[0, 4, b[0], b[1]], tid).unwrap();
    let want = (block + 1).to_be_bytes();
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = sock.recv_from(&mut buf).expect("transfer alive");
        assert_eq!(from, tid);
        assert_ne!(buf[1], 5, "transfer got {:?}", &buf[..n]);
        if buf[..4] == [0, 3, want[0], want[1]] {
            return;
        }
    }
}

/// Spoofed RRQs (many source ports on several loopback addresses, `timeout 255`, never
/// an ACK) fill the table; a real client is still served within seconds, a transfer
/// that has ACKed keeps its slot, and the evictions are counted.
fn spoofed_flood_does_not_lock_out_real_clients(single_port: bool) {
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;
    const TABLE: usize = 64;
    const ADDRS: u8 = 10;
    const PORTS: usize = 30;
    let root = Root::new();
    let mut s = settings(root.path());
    s.single_port = single_port;
    s.max_transfers = TABLE;
    s.max_per_client = TABLE;
    // Slow retransmission, as a 255 s timeout would be if it were accepted: without
    // eviction nothing frees a slot for the duration of the test.
    s.timeout = Duration::from_secs(5);
    let server = TestServer::start(s, "127.0.0.1:0".parse().unwrap());
    let rrq = TestClient::rrq(
        b"ipxe.efi",
        "octet",
        &[("timeout", "255"), ("blksize", "1468"), ("tsize", "0")],
    );
    // A real, slow transfer that has ACKed once before the flood: it must survive it.
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    held.send_to(
        &TestClient::rrq(b"rand-300k.bin", "octet", &[]),
        server.addr,
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let (_, held_tid) = held.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..4], &[0, 3, 0, 1]);
    ack_and_wait_data(&held, held_tid, 1);
    // Sources: 127.0.0.2..=127.0.0.11 (all of 127/8 is local on Linux), many ports each.
    let spoofers: Vec<UdpSocket> = (0..ADDRS)
        .flat_map(|a| {
            (0..PORTS).map(move |_| UdpSocket::bind((format!("127.0.0.{}", a + 2), 0)).unwrap())
        })
        .collect();
    let mut sent = 0usize;
    for (i, sock) in spoofers.iter().enumerate() {
        sock.send_to(&rrq, server.addr).unwrap();
        sent += 1;
        if i % 25 == 24 {
            // Let the listener keep up, as the 500-transfer test does.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    wait_for("flood admitted", || {
        let m = &server.metrics;
        m.transfers_evicted.load(Relaxed) + m.errors(shardboot::tftp::metrics::Reason::Busy)
            >= (sent + 1 - TABLE) as u64
    });
    assert_eq!(server.metrics.transfers_active.load(Relaxed), TABLE as u64);
    // Keep flooding from the same sockets while the real clients run.
    let stop = AtomicBool::new(false);
    let (took, background) = std::thread::scope(|sc| {
        let bg = sc.spawn(|| {
            let mut n = 0usize;
            while !stop.load(Relaxed) {
                spoofers[n % spoofers.len()]
                    .send_to(&rrq, server.addr)
                    .unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        });
        let mut took = Vec::new();
        for tool in [Tool::TftpHpa, Tool::Atftp, Tool::Curl] {
            if !have(match tool {
                Tool::TftpHpa => "tftp",
                Tool::Atftp => "atftp",
                _ => "curl",
            }) {
                skip_or_fail(
                    "tools",
                    &format!("{tool:?} is not installed (tests/install-deps.sh)"),
                );
                continue;
            }
            let dest = scratch(root.path(), &format!("{tool:?}"));
            let began = Instant::now();
            let (ok, out) = download(tool, None, server.addr, "ipxe.efi", &dest);
            let t = began.elapsed();
            let same = ok && std::fs::read(&dest).is_ok_and(|d| d == root.files[0].1);
            took.push((tool, t, same, out));
        }
        // Stop the flood before any assertion, or a failure would leave the scope
        // waiting on it forever.
        stop.store(true, Relaxed);
        (took, bg.join().unwrap())
    });
    for (tool, t, same, out) in &took {
        assert!(same, "{tool:?} failed under the flood after {t:?}: {out}");
        // Locked out, a client fails (a busy ERROR) or is served only after several of
        // its retransmission timeouts (5 s each in tftp-hpa and atftp); served at once,
        // it takes well under a second, or a few seconds on a loaded machine.
        assert!(*t < Duration::from_secs(30), "{tool:?} took {t:?}");
    }
    let took: Vec<_> = took.iter().map(|(tool, t, ..)| (*tool, *t)).collect();
    assert!(!took.is_empty(), "no real TFTP client installed");
    // The transfer that ACKed was never evicted: ACK 2 brings DATA 3 from the same TID
    // (after any DATA 2 resent meanwhile), not an ERROR.
    ack_and_wait_data(&held, held_tid, 2);
    let m = &server.metrics;
    let evicted = m.transfers_evicted.load(Relaxed);
    eprintln!(
        "single_port={single_port}: {sent} spoofed RRQs up front + {background} during the \
         downloads, {evicted} evictions; real clients took {took:?}"
    );
    assert!(evicted >= (sent - TABLE) as u64, "{evicted} evictions");
    assert_eq!(m.errors(shardboot::tftp::metrics::Reason::Busy), 0);
    server.stop().unwrap();
}

#[test]
fn spoofed_rrq_flood_cannot_lock_out_a_real_client() {
    spoofed_flood_does_not_lock_out_real_clients(false);
}

#[test]
fn spoofed_rrq_flood_cannot_lock_out_a_real_client_in_single_port_mode() {
    spoofed_flood_does_not_lock_out_real_clients(true);
}

/// Spoofed RRQs under a real client's own address fill that address's share of the
/// table (`max_per_client`) with transfers that never ACK; the real client from that
/// address is still served, because the oldest silent transfer of the address gives
/// way, and a transfer of the address that has ACKed keeps its slot.
#[test]
fn spoofed_rrqs_under_a_clients_own_address_cannot_refuse_it() {
    const PER_CLIENT: usize = 8;
    let root = Root::new();
    let mut s = settings(root.path());
    s.max_per_client = PER_CLIENT;
    s.timeout = Duration::from_secs(5);
    let server = TestServer::start(s, "127.0.0.1:0".parse().unwrap());
    // A real transfer from 127.0.0.1 that has ACKed once: it must keep its slot.
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    held.send_to(
        &TestClient::rrq(b"rand-300k.bin", "octet", &[]),
        server.addr,
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let (_, held_tid) = held.recv_from(&mut buf).unwrap();
    ack_and_wait_data(&held, held_tid, 1);
    // Five times the share, from the same address, never answering.
    let rrq = TestClient::rrq(b"ipxe.efi", "octet", &[("timeout", "255")]);
    let spoofers: Vec<UdpSocket> = (0..5 * PER_CLIENT)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for sock in &spoofers {
        sock.send_to(&rrq, server.addr).unwrap();
    }
    wait_for("flood admitted", || {
        server.metrics.transfers_evicted.load(Relaxed) >= (4 * PER_CLIENT) as u64
    });
    assert_eq!(
        server.metrics.transfers_active.load(Relaxed),
        PER_CLIENT as u64
    );
    let mut served = 0;
    for tool in [Tool::TftpHpa, Tool::Curl] {
        if !have(if tool == Tool::TftpHpa {
            "tftp"
        } else {
            "curl"
        }) {
            skip_or_fail(
                "tools",
                &format!("{tool:?} is not installed (tests/install-deps.sh)"),
            );
            continue;
        }
        let dest = scratch(root.path(), &format!("own-{tool:?}"));
        let (ok, out) = download(tool, None, server.addr, "ipxe.efi", &dest);
        assert!(ok, "{tool:?} refused under its own address's flood: {out}");
        assert_eq!(std::fs::read(&dest).unwrap(), root.files[0].1);
        served += 1;
    }
    assert!(served > 0, "no real TFTP client installed");
    assert_eq!(
        server
            .metrics
            .errors(shardboot::tftp::metrics::Reason::PerClientLimit),
        0
    );
    // The held transfer is alive: ACK 2 brings DATA 3.
    ack_and_wait_data(&held, held_tid, 2);
    server.stop().unwrap();
}
