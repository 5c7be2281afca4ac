//! A disk that fills up under a storm: the store lives on a small tmpfs that a filler
//! file fills while clients keep asking. No ACK leaves without its lease on disk; once
//! commits fail the server says so (`/readyz` 503 with the reason, a metric) and offers
//! no new address; when the space is back it recovers by itself, with no restart, and
//! serves new clients again. At the end the store holds every lease ever ACKed.

mod common;

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
