//! Protocol behaviour over real sockets with a scriptable client: traversal refusals,
//! write requests, malformed datagrams, limits, lost and duplicated packets.

use crate::common::tftp_lab;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

use shardboot::config::TftpSettings;
use tftp_lab::*;

fn start(root: &Root, f: impl FnOnce(&mut TftpSettings)) -> TestServer {
    let mut s = settings(root.path());
    f(&mut s);
    TestServer::start(s, "127.0.0.1:0".parse().unwrap())
}

fn error_code(reply: &[u8]) -> Option<u16> {
    (reply.len() >= 4 && reply[1] == 5).then(|| u16::from_be_bytes([reply[2], reply[3]]))
}

#[test]
fn traversal_list_is_refused_with_error_packets() {
    let root = Root::new();
    let p = root.path();
    // Hostile layout inside the root: links out, a FIFO, a device node.
    std::os::unix::fs::symlink("/etc", p.join("etc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", p.join("passwd")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", p.join("zero")).unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    let fifo = std::ffi::CString::new(p.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    if is_root() {
        let dev = std::ffi::CString::new(p.join("null").to_str().unwrap()).unwrap();
        // SAFETY: valid path; (1, 3) is /dev/null.
        let rc = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) };
        assert_eq!(rc, 0);
    } else {
        eprintln!("not root: device-node case uses a symlink to /dev/null only");
    }
    std::fs::write(p.join(".hidden"), b"secret").unwrap();
    let server = start(&root, |_| {});
    let abs = format!("{}/../../../etc/passwd", p.display());
    let long = "a".repeat(300);
    let deep = "d/".repeat(40) + "x";
    let names: Vec<&[u8]> = vec![
        b"../etc/passwd",
        b"../../../../../../../../etc/shadow",
        b"/../etc/passwd",
        b"sub/../../etc/passwd",
        b"sub/..",
        b"..",
        b"..\\..\\etc\\passwd",
        b"sub\\..\\..\\etc\\passwd",
        b"%2e%2e/etc/passwd",
        b"%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        b"..%2fetc%2fpasswd",
        b"%252e%252e%252fetc",
        b"\xc0\xae\xc0\xae/etc/passwd",
        b"/etc/passwd",
        b"/etc/shadow",
        abs.as_bytes(),
        b"etc/passwd",
        b"etc/shadow",
        b"passwd",
        b"zero",
        b"fifo",
        b"null",
        b"sub",
        b"/",
        b"",
        b".hidden",
        b"sub/.hidden",
        long.as_bytes(),
        deep.as_bytes(),
        b"ipxe\x01.efi",
        b"ipxe\n.efi",
        b"C:\\Windows\\win.ini",
        b"file:///etc/passwd",
        b"snponly.efi ",
        b"....//....//etc/passwd",
    ];
    assert!(names.len() >= 25);
    let client = TestClient::new();
    let mut bad = Vec::new();
    for name in &names {
        let (reply, _) = client
            .request(server.addr, &TestClient::rrq(name, "octet", &[]))
            .unwrap_or_else(|| panic!("no reply for {:?}", String::from_utf8_lossy(name)));
        match error_code(&reply) {
            Some(1 | 2) => {}
            other => bad.push(format!("{:?} -> {other:?}", String::from_utf8_lossy(name))),
        }
    }
    // An embedded NUL ends the name; what follows is a bogus mode, refused too.
    let mut nul = b"\0\x01ipxe.efi\0../../etc/passwd\0octet\0".to_vec();
    nul.truncate(nul.len());
    let (reply, _) = client.request(server.addr, &nul).unwrap();
    assert_eq!(error_code(&reply), Some(4), "NUL-split request");
    assert!(bad.is_empty(), "not refused: {bad:#?}");
    // Missing-file answers are not policy refusals; everything else above is.
    assert!(server.metrics.refused_paths.load(Relaxed) >= 25);
    // The server still serves legitimate requests afterwards.
    let r = client
        .get(server.addr, "snponly.efi", &[], &Faults::default())
        .unwrap();
    assert_eq!(r.data, std::fs::read(p.join("snponly.efi")).unwrap());
}

#[test]
fn write_requests_are_refused() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let client = TestClient::new();
    let mut wrq = TestClient::rrq(b"new.bin", "octet", &[]);
    wrq[1] = 2;
    let (reply, _) = client.request(server.addr, &wrq).unwrap();
    assert_eq!(error_code(&reply), Some(2));
    assert!(!root.path().join("new.bin").exists());
}

#[test]
fn unsupported_mode_is_refused() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let (reply, _) = TestClient::new()
        .request(server.addr, &TestClient::rrq(b"one.bin", "mail", &[]))
        .unwrap();
    assert_eq!(error_code(&reply), Some(4));
}

#[test]
fn malformed_datagrams_are_counted_and_do_not_stop_the_loop() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let client = TestClient::new();
    let junk: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0, 9, 1, 2],
        vec![0xff; 1500],
        vec![0, 1, b'a'],
        vec![0, 2, b'a'],
        vec![0, 1]
            .into_iter()
            .chain(std::iter::repeat_n(b'a', 4000))
            .collect(),
    ];
    for j in &junk {
        client.sock.send_to(j, server.addr).unwrap();
    }
    wait_for("malformed counted", || {
        server.metrics.malformed_packets.load(Relaxed) >= 6
    });
    let r = client
        .get(server.addr, "b512.bin", &[], &Faults::default())
        .unwrap();
    assert_eq!(r.data.len(), 512);
}

#[test]
fn oack_reports_negotiated_values() {
    let root = Root::new();
    let server = start(&root, |s| s.max_windowsize = 4);
    let r = TestClient::new()
        .get(
            server.addr,
            "rand-300k.bin",
            &[
                ("blksize", "99999"),
                ("tsize", "0"),
                ("windowsize", "32"),
                ("timeout", "2"),
                ("x-vendor", "1"),
            ],
            &Faults::default(),
        )
        .unwrap();
    assert_eq!(r.data.len(), 300_001);
    let oack: Vec<(&str, &str)> = r
        .oack
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    // blksize 99999 is outside RFC 2348's range, so it is ignored, not clamped.
    assert_eq!(
        oack,
        vec![("tsize", "300001"), ("windowsize", "4"), ("timeout", "2")]
    );
}

fn faulty_get(window: &str, faults: Faults) {
    let root = Root::new();
    let server = start(&root, |_| {});
    let want = root
        .files
        .iter()
        .find(|(n, _)| n == "rand-300k.bin")
        .unwrap()
        .1
        .clone();
    let r = TestClient::new()
        .get(
            server.addr,
            "rand-300k.bin",
            &[("blksize", "1024"), ("windowsize", window)],
            &faults,
        )
        .unwrap();
    assert_eq!(r.data, want);
    let blocks = want.len() as u64 / 1024 + 1;
    // No sorcerer's apprentice: total DATA received stays within a small factor of
    // the block count even with every fault injected.
    assert!(
        r.data_packets < blocks * 3,
        "{} data packets for {blocks} blocks",
        r.data_packets
    );
    wait_for("completion counted", || {
        server.metrics.transfers_completed.load(Relaxed) == 1
    });
}

#[test]
fn lockstep_survives_dropped_acks() {
    faulty_get(
        "1",
        Faults {
            drop_ack_every: Some(7),
            ..Faults::default()
        },
    );
}

#[test]
fn lockstep_duplicate_acks_do_not_double_the_stream() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let faults = Faults {
        dup_ack_every: Some(1),
        ..Faults::default()
    };
    let r = TestClient::new()
        .get(
            server.addr,
            "rand-300k.bin",
            &[("blksize", "1024")],
            &faults,
        )
        .unwrap();
    let blocks = 300_001 / 1024 + 1;
    assert_eq!(r.data.len(), 300_001);
    // Every ACK was sent twice; a naive server would send every block twice.
    assert!(
        r.data_packets <= blocks + 2,
        "{} packets for {blocks} blocks",
        r.data_packets
    );
    wait_for("duplicates counted", || {
        server.metrics.duplicate_acks.load(Relaxed) >= blocks - 2
    });
}

#[test]
fn window_survives_lost_data_dropped_and_duplicate_acks() {
    faulty_get(
        "8",
        Faults {
            drop_ack_every: Some(5),
            dup_ack_every: Some(3),
            lose_data_every: Some(11),
        },
    );
}

#[test]
fn single_port_mode_answers_from_the_listening_port() {
    let root = Root::new();
    let server = start(&root, |s| s.single_port = true);
    let r = TestClient::new()
        .get(
            server.addr,
            "w8.bin",
            &[("blksize", "1468"), ("windowsize", "8")],
            &Faults {
                lose_data_every: Some(5),
                ..Faults::default()
            },
        )
        .unwrap();
    assert_eq!(r.data.len(), 1468 * 8);
    assert_eq!(r.server_tid, Some(server.addr));
}

#[test]
fn per_transfer_mode_answers_from_a_new_port() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let r = TestClient::new()
        .get(server.addr, "b1468.bin", &[], &Faults::default())
        .unwrap();
    let tid: SocketAddr = r.server_tid.unwrap();
    assert_eq!(tid.ip(), server.addr.ip());
    assert_ne!(tid.port(), server.addr.port());
}

#[test]
fn per_client_limit_refuses_extra_transfers() {
    let root = Root::new();
    let server = start(&root, |s| {
        s.max_per_client = 1;
        s.retries = 50;
    });
    // The first client ACKs its first block and then stalls: a real transfer, which
    // holds the address's one slot.
    let hog = TestClient::new();
    let (first, tid) = hog
        .request(server.addr, &TestClient::rrq(b"ipxe.efi", "octet", &[]))
        .unwrap();
    assert_eq!(first[1], 3, "first transfer starts with DATA 1");
    hog.sock.send_to(&[0, 4, 0, 1], tid).unwrap();
    // DATA 2 says the server took ACK 1 (a sleep would guess at it: on a loaded machine
    // the ACK could still be queued, and a transfer that never ACKed gives way).
    let (_, from) = hog.sock.recv_from(&mut [0u8; 600]).expect("DATA 2");
    assert_eq!(from, tid);
    let (reply, _) = TestClient::new()
        .request(server.addr, &TestClient::rrq(b"one.bin", "octet", &[]))
        .unwrap();
    assert_eq!(error_code(&reply), Some(0));
    assert!(String::from_utf8_lossy(&reply).contains("too many transfers"));
}

#[test]
fn at_the_per_client_limit_a_transfer_that_never_acked_gives_way() {
    let root = Root::new();
    let server = start(&root, |s| {
        s.max_per_client = 1;
        s.retries = 50;
    });
    // A request (perhaps spoofed under this address) that never ACKs does not keep the
    // address's next real client out: it is evicted for the newer request.
    let silent = TestClient::new();
    let (first, _) = silent
        .request(server.addr, &TestClient::rrq(b"ipxe.efi", "octet", &[]))
        .unwrap();
    assert_eq!(first[1], 3);
    let r = TestClient::new()
        .get(server.addr, "one.bin", &[], &Faults::default())
        .unwrap();
    assert!(!r.data.is_empty());
    assert_eq!(
        server
            .metrics
            .transfers_evicted
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn unacknowledged_transfer_gives_up_after_retries() {
    let root = Root::new();
    let server = start(&root, |s| {
        s.retries = 3;
        s.timeout = std::time::Duration::from_millis(50);
    });
    let hog = TestClient::new();
    hog.request(server.addr, &TestClient::rrq(b"ipxe.efi", "octet", &[]))
        .unwrap();
    wait_for("timeout counted", || {
        server.metrics.transfers_failed.load(Relaxed) == 1
    });
    assert_eq!(server.metrics.transfers_active.load(Relaxed), 0);
    // The slot is free again.
    let r = TestClient::new()
        .get(server.addr, "one.bin", &[], &Faults::default())
        .unwrap();
    assert_eq!(r.data.len(), 1);
}

#[test]
fn block_numbers_roll_over_on_large_files() {
    let root = Root::new();
    let data = random_bytes(70_000 * 16 + 5, 3);
    std::fs::write(root.path().join("big.bin"), &data).unwrap();
    let server = start(&root, |_| {});
    let r = TestClient::new()
        .get(
            server.addr,
            "big.bin",
            &[("blksize", "16"), ("windowsize", "32")],
            &Faults::default(),
        )
        .unwrap();
    assert!(r.data == data, "rolled-over download differs");
}

#[test]
fn missing_file_is_an_error_packet_not_a_crash() {
    let root = Root::new();
    let server = start(&root, |_| {});
    let (reply, _) = TestClient::new()
        .request(
            server.addr,
            &TestClient::rrq(b"undionly-missing.kpxe", "octet", &[]),
        )
        .unwrap();
    assert_eq!(error_code(&reply), Some(1));
    server.stop().expect("clean shutdown");
}

#[test]
fn a_file_over_the_size_limit_is_refused_and_a_smaller_one_served() {
    let root = Root::new();
    std::fs::write(root.path().join("big.bin"), random_bytes(4097, 5)).unwrap();
    std::fs::write(root.path().join("small.bin"), random_bytes(4096, 6)).unwrap();
    let server = start(&root, |s| s.max_file_size = 4096);
    let (reply, _) = TestClient::new()
        .request(server.addr, &TestClient::rrq(b"big.bin", "octet", &[]))
        .unwrap();
    // RFC 1350 error 3, "disk full or allocation exceeded": the nearest code for a
    // file the server will not send.
    assert_eq!(error_code(&reply), Some(3));
    assert!(String::from_utf8_lossy(&reply).contains("too large"));
    let r = TestClient::new()
        .get(server.addr, "small.bin", &[], &Faults::default())
        .unwrap();
    assert_eq!(r.data, random_bytes(4096, 6));
}

#[test]
fn a_wildcard_listener_answers_from_the_address_the_client_asked() {
    // On loopback, 127.0.0.2 is as local as 127.0.0.1, but the route back to a client at
    // 127.0.0.1 would pick 127.0.0.1 as the source: a PXE ROM that asked 127.0.0.2 (a
    // VIP, a secondary address) would drop such DATA as coming from a stranger.
    // The same through a dual-stack [::] listener, which sees the IPv4 request's
    // address as ::ffff:127.0.0.2.
    let root = Root::new();
    for (listen, single_port) in [
        ("0.0.0.0:0", false),
        ("0.0.0.0:0", true),
        ("[::]:0", false),
        ("[::]:0", true),
    ] {
        let mut s = settings(root.path());
        s.single_port = single_port;
        let server = TestServer::start(s, listen.parse().unwrap());
        let how = format!("{listen} single_port={single_port}");
        let asked: SocketAddr = format!("127.0.0.2:{}", server.addr.port()).parse().unwrap();
        let r = TestClient::new()
            .get(
                asked,
                "b1468.bin",
                &[("blksize", "1468")],
                &Faults::default(),
            )
            .unwrap();
        assert_eq!(r.data.len(), 1468, "{how}");
        let tid = r.server_tid.unwrap();
        assert_eq!(tid.ip(), asked.ip(), "{how}");
        // Error packets come from there too.
        let (reply, from) = TestClient::new()
            .request(asked, &TestClient::rrq(b"missing.bin", "octet", &[]))
            .unwrap();
        assert_eq!(error_code(&reply), Some(1));
        assert_eq!(from.ip(), asked.ip(), "{how}");
    }
}

#[test]
fn a_dual_stack_listener_serves_ipv6_clients() {
    let Ok(sock) = std::net::UdpSocket::bind("[::1]:0") else {
        skip_or_fail("ipv6", "no IPv6 loopback");
        return;
    };
    sock.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let client = TestClient { sock };
    let root = Root::new();
    for single_port in [false, true] {
        let mut s = settings(root.path());
        s.single_port = single_port;
        let server = TestServer::start(s, "[::]:0".parse().unwrap());
        let asked: SocketAddr = format!("[::1]:{}", server.addr.port()).parse().unwrap();
        let r = client
            .get(
                asked,
                "b1468.bin",
                &[("blksize", "1468")],
                &Faults::default(),
            )
            .unwrap();
        assert_eq!(r.data.len(), 1468, "single_port={single_port}");
        assert_eq!(r.server_tid.unwrap().ip(), asked.ip());
    }
}

#[test]
fn a_timeout_above_the_cap_is_left_out_of_the_oack() {
    let root = Root::new();
    let server = start(&root, |s| s.max_timeout = std::time::Duration::from_secs(5));
    let oack = |timeout: &str| {
        let r = TestClient::new()
            .get(
                server.addr,
                "one.bin",
                &[("timeout", timeout), ("tsize", "0")],
                &Faults::default(),
            )
            .unwrap();
        assert_eq!(r.data.len(), 1);
        r.oack
    };
    // RFC 2349 §2: echo the exact value or omit it; 255 is above the cap, so omitted.
    assert_eq!(oack("255"), vec![("tsize".to_string(), "1".to_string())]);
    assert_eq!(
        oack("5"),
        vec![
            ("timeout".to_string(), "5".to_string()),
            ("tsize".to_string(), "1".to_string())
        ]
    );
}

/// A client that ACKs every block, slowly: it always progresses, so only the deadline
/// ends it, with an ERROR packet, counted.
///
/// The bounds hold on a loaded machine and still catch a deadline that never fires or
/// fires early: at 100 ms per block the 587 blocks take a minute, so an end within
/// [`NO_DEADLINE`] is the deadline's, and not before it (1.5 s) either.
fn slow_client_hits_the_deadline(single_port: bool) {
    use std::time::{Duration, Instant};
    const NO_DEADLINE: Duration = Duration::from_secs(10);
    let root = Root::new();
    let server = start(&root, |s| {
        s.single_port = single_port;
        s.transfer_deadline = Duration::from_millis(1500);
        s.timeout = Duration::from_millis(500);
    });
    let c = TestClient::new();
    let began = Instant::now();
    c.sock
        .send_to(
            &TestClient::rrq(b"rand-300k.bin", "octet", &[]),
            server.addr,
        )
        .unwrap();
    let mut buf = [0u8; 2048];
    let mut blocks = 0u32;
    let error = loop {
        assert!(began.elapsed() < NO_DEADLINE, "no deadline");
        let Ok((n, tid)) = c.sock.recv_from(&mut buf) else {
            continue;
        };
        match buf[1] {
            3 => {
                blocks += 1;
                std::thread::sleep(Duration::from_millis(100));
                c.sock.send_to(&[0, 4, buf[2], buf[3]], tid).unwrap();
            }
            5 => break buf[..n].to_vec(),
            x => panic!("opcode {x}"),
        }
    };
    let took = began.elapsed();
    eprintln!("single_port={single_port}: deadline error after {took:?}, {blocks} blocks");
    assert_eq!(error_code(&error), Some(0));
    assert!(String::from_utf8_lossy(&error).contains("deadline"));
    assert!(took >= Duration::from_millis(1400) && took < NO_DEADLINE);
    // It progressed (more than the first block), so no retransmission timeout ended it.
    assert!(blocks >= 2, "progressed only {blocks} blocks");
    wait_for("deadline counted", || {
        server.metrics.transfers_deadline.load(Relaxed) == 1
    });
    let m = &server.metrics;
    assert_eq!(m.errors(shardboot::tftp::metrics::Reason::Deadline), 1);
    assert_eq!(m.transfers_failed.load(Relaxed), 1);
    assert_eq!(m.transfers_active.load(Relaxed), 0);
}

#[test]
fn a_progressing_transfer_past_its_deadline_ends_with_an_error() {
    slow_client_hits_the_deadline(false);
}

#[test]
fn a_progressing_transfer_past_its_deadline_ends_with_an_error_in_single_port_mode() {
    slow_client_hits_the_deadline(true);
}

fn parallel_netascii_costs_one_conversion(single_port: bool) {
    let root = Root::new();
    let text: Vec<u8> = b"#!ipxe\nchain http://10.0.0.1/boot.ipxe\r\n"
        .iter()
        .copied()
        .cycle()
        .take(200_000)
        .collect();
    std::fs::write(root.path().join("menu.ipxe"), &text).unwrap();
    let want = shardboot::tftp::transfer::to_netascii(&text);
    const N: usize = 24;
    let server = start(&root, |s| {
        s.single_port = single_port;
        s.max_per_client = N;
    });
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|_| {
                s.spawn(|| {
                    TestClient::new()
                        .get_mode(
                            server.addr,
                            "menu.ipxe",
                            "netascii",
                            &[("blksize", "1468"), ("tsize", "0")],
                            &Faults::default(),
                        )
                        .unwrap()
                })
            })
            .collect();
        for h in handles {
            let r = h.join().unwrap();
            assert!(r.data == want, "netascii data differs");
            // RFC 2349 §3: tsize is the size as sent, i.e. converted.
            assert!(r
                .oack
                .contains(&("tsize".to_string(), want.len().to_string())));
        }
    });
    let m = &server.metrics;
    assert_eq!(m.transfers_completed.load(Relaxed), N as u64);
    assert_eq!(m.netascii_conversions.load(Relaxed), 1);
    // The octets were read from disk once, too.
    assert_eq!(m.cache_misses.load(Relaxed), 1);
}

#[test]
fn parallel_netascii_transfers_of_one_file_cost_one_conversion() {
    parallel_netascii_costs_one_conversion(false);
}

#[test]
fn parallel_netascii_transfers_cost_one_conversion_in_single_port_mode() {
    parallel_netascii_costs_one_conversion(true);
}
