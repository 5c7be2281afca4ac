//! A disk that fills up under a storm: the store lives on a small tmpfs that a filler
//! file fills while clients keep asking. No ACK leaves without its lease on disk; once
//! commits fail the server says so (`/readyz` 503 with the reason, a metric) and offers
//! no new address; when the space is back it recovers by itself, with no restart, and
//! serves new clients again. At the end the store holds every lease ever ACKed. The
//! same for DHCPv6: no Advertise while the store fails.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::relay_client::{mac, Answer, RelayClient};
use common::storm::assert_store_holds;
use common::{sh, Netns};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Self {
        std::fs::create_dir_all(at).unwrap();
        sh(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size}"),
            "tmpfs",
            at.to_str().unwrap(),
        ]);
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Writes zeros into `path` until the file system is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

fn get(ns: &Netns, path: &str) -> (u16, String) {
    common::api_lab::curl(
        ns,
        "GET",
        &format!("http://198.18.0.1:8080{path}"),
        None,
        None,
    )
}

/// Obtains leases for `count` fresh MACs from `next` on; returns the ACKed ones and how
/// many got nothing.
fn obtain(
    client: &mut RelayClient,
    next: &mut u32,
    count: u32,
    acked: &mut HashMap<[u8; 6], Ipv4Addr>,
) -> (usize, usize) {
    let macs: Vec<[u8; 6]> = (*next..*next + count).map(mac).collect();
    *next += count;
    let (mut ok, mut silent) = (0, 0);
    for (m, a) in macs
        .iter()
        .zip(client.obtain(&macs, Duration::from_millis(300)))
    {
        match a {
            Answer::Ack(ip) => {
                assert!(
                    acked.values().all(|other| *other != ip),
                    "{ip} ACKed to two clients"
                );
                acked.insert(*m, ip);
                ok += 1;
            }
            _ => silent += 1,
        }
    }
    (ok, silent)
}

#[test]
fn a_full_disk_stops_offers_loudly_and_the_server_recovers_when_space_is_back() {
    require_root!();
    let scratch = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&scratch.path().join("disk"), "6m");
    let (lab, _dir, mut server) = common::relay_lab_storing_in(&disk.0.join("state"));
    assert_eq!(get(&lab.server, "/readyz").0, 200);

    // Made in the client namespace; its socket stays there whichever thread uses it.
    let mut client = lab
        .client
        .run(|| RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1)))
        .join()
        .unwrap();
    let mut acked = HashMap::new();
    let mut next = 0u32;
    let (ok, _) = obtain(&mut client, &mut next, 200, &mut acked);
    assert!(ok > 150, "only {ok} of 200 ACKed before the disk filled");

    fill(&disk.0.join("filler"));
    // The storm goes on until the store fails (bounded in count and time).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failing = false;
    while Instant::now() < deadline && next < 200_000 {
        obtain(&mut client, &mut next, 100, &mut acked);
        let (code, body) = get(&lab.server, "/readyz");
        if code == 503 {
            assert!(body.contains("lease store fails writes"), "{body}");
            failing = true;
            break;
        }
    }
    assert!(failing, "the store never failed with the disk full");
    let (_, metrics) = get(&lab.server, "/metrics");
    assert!(metrics.contains("shardboot_store_failing 1\n"), "{metrics}");
    assert!(
        !metrics.contains("shardboot_lease_commit_errors_total 0\n"),
        "{metrics}"
    );

    // While it fails, a new machine gets no OFFER, so no ACK.
    let before = acked.len();
    let (ok, _) = obtain(&mut client, &mut next, 20, &mut acked);
    assert_eq!((ok, acked.len()), (0, before), "ACKs while the store fails");
    let (_, metrics) = get(&lab.server, "/metrics");
    assert!(
        !metrics.contains("shardboot_dhcp_store_failing_unanswered_total 0\n"),
        "{metrics}"
    );

    // Space comes back: the server recovers by itself and serves new machines again.
    std::fs::remove_file(disk.0.join("filler")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&lab.server, "/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "still not ready with space back:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, _) = obtain(&mut client, &mut next, 50, &mut acked);
    assert!(ok >= 45, "only {ok} of 50 ACKed after recovery");

    server.stop();
    assert_store_holds(&server, &acked, "after the disk filled and emptied");
    let log = server.log_text();
    assert_eq!(
        log.matches("lease commit failed").count(),
        1,
        "said once:\n{log}"
    );
    assert!(log.contains("lease store writes again"), "{log}");
    eprintln!("{} ACKed leases checked across a full disk", acked.len());
}

/// A relayed exchange of `inner` on `sock` (the relay's socket), one try: the first
/// answer of its kind (Advertise to a Solicit, else Reply) within `wait`, unwrapped. A
/// late Reply to an earlier exchange is skipped.
fn exchange6(
    sock: &std::net::UdpSocket,
    inner: &dhcproto::v6::Message,
    wait: Duration,
) -> Option<dhcproto::v6::Message> {
    use common::lab6::{forward_of, SERVER6};
    use dhcproto::v6::MessageType;
    let want = match inner.msg_type() {
        MessageType::Solicit => MessageType::Advertise,
        _ => MessageType::Reply,
    };
    let to = std::net::SocketAddrV6::new(SERVER6.parse().unwrap(), 547, 0, 0);
    sock.send_to(&forward_of(inner), to).unwrap();
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let Ok((n, _)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let m = common::relay6::relay_reply(&buf[..n]).message;
        if m.msg_type() == want {
            return Some(m);
        }
    }
}

#[test]
fn a_full_disk_stops_advertises_and_the_server_advertises_again_when_space_is_back() {
    use common::lab6::{client_message, ia_address};
    use dhcproto::v6::{DhcpOption, MessageType, OptionCode};
    require_root!();
    let scratch = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&scratch.path().join("disk"), "6m");
    let lab = common::lab6::lab(&["fd00:1::2/64"]);
    let (_dir, server) = common::lab6::serve_storing_in(&lab, "", "", Some(&disk.0.join("state")));
    let get6 = |path: &str| {
        common::api_lab::curl(
            &lab.server,
            "GET",
            &format!("http://[fd00:1::1]:8080{path}"),
            None,
            None,
        )
    };
    let unanswered = || {
        let (_, m) = get6("/metrics");
        m.lines()
            .find_map(|l| {
                l.strip_prefix("shardboot_dhcp6_dropped_total{reason=\"store_unavailable\"} ")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0)
    };
    let duid = |n: u8| [0, 3, 0, 1, 0x52, 0x54, 0, 0, 0x6d, n];
    let solicit = move |n: u8| client_message(MessageType::Solicit, &duid(n), None, None);
    let filler = disk.0.join("filler");
    // Made in the client namespace; the socket stays there whichever thread uses it.
    let sock = lab
        .client
        .run(|| common::bind_fixed_port("[fd00:1::2]:547"))
        .join()
        .unwrap();
    // Eight machines bound; then the disk fills and they renew until a commit fails.
    let mut bound = Vec::new();
    for n in 0..8 {
        let adv = exchange6(&sock, &solicit(n), Duration::from_secs(2)).expect("an Advertise");
        let Some(DhcpOption::ServerId(sid)) = adv.opts().get(OptionCode::ServerId).cloned() else {
            panic!("{adv:?}")
        };
        let ip = ia_address(&adv).expect("an address");
        let req = client_message(MessageType::Request, &duid(n), Some(&sid), Some(ip));
        let reply = exchange6(&sock, &req, Duration::from_secs(2)).expect("a Reply");
        assert_eq!(ia_address(&reply), Some(ip));
        bound.push((n, sid, ip));
    }
    fill(&filler);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failing = false;
    while Instant::now() < deadline {
        // Pipelined: each Renew is a commit, and many of them are needed before the
        // store's file runs out of the room it already has.
        let to = std::net::SocketAddrV6::new(common::lab6::SERVER6.parse().unwrap(), 547, 0, 0);
        for _ in 0..25 {
            for (n, sid, ip) in &bound {
                let renew = client_message(MessageType::Renew, &duid(*n), Some(sid), Some(*ip));
                sock.send_to(&common::lab6::forward_of(&renew), to).unwrap();
            }
        }
        // Whatever came back is read and dropped.
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        while sock.recv(&mut [0u8; 4096]).is_ok() {}
        let (code, body) = get6("/readyz");
        if code == 503 {
            assert!(body.contains("lease store fails writes"), "{body}");
            failing = true;
            break;
        }
    }
    assert!(failing, "the store never failed with the disk full");

    // While it fails, a new machine's Solicit gets no Advertise, counted (Renews are
    // answered as v4's renewals are; only fresh addresses wait for the store).
    assert_eq!(unanswered(), 0);
    let adv = exchange6(&sock, &solicit(100), Duration::from_secs(1));
    assert!(adv.is_none(), "Advertise while the store fails: {adv:?}");
    assert_eq!(unanswered(), 1);

    // Space comes back: the server recovers by itself and advertises again.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get6("/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "still not ready with space back:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let adv = exchange6(&sock, &solicit(101), Duration::from_secs(2)).expect("an Advertise");
    assert!(ia_address(&adv).is_some(), "{adv:?}");
}
