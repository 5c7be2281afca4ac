//! Lease replication under member deaths (issue: members follow the cluster). Three
//! members on one bridge take their member list from a file the test rewrites, as
//! Ironic's conductor list changes in production. Twenty rounds, each: machines
//! DISCOVER and REQUEST while one member, chosen at random, is SIGKILLed at a random
//! moment; the file drops it at once, so the other two take its blocks immediately and
//! hand out addresses from them while more machines arrive; the member comes back (on
//! its own store, or every other round on an empty one, as a pod rescheduled to another
//! node). The range is small (256 addresses) and machines release their leases in
//! turn, so every address is handed out again and again and the blocks of the member
//! just killed are used at once.
//!
//! What must hold, whatever the moment of the kill: no address is ACKed to a machine
//! while another holds it; every machine that holds a lease keeps its address when it
//! rebinds, whichever member answers; and at the end the three stores agree.

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use common::machines::{bound_leases, machine_mac as mac, Lost, Machines, Reconfirm, Rng};
use common::members::wait_until;
use common::segment::Segment;
use common::Server;
use dhcproto::v4::MessageType;
use shardboot::mac::MacAddr;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const TAKEOVER_SECS: u16 = 2;
const ROUNDS: usize = 20;
/// Machines that arrive while a member is killed, and again after its blocks moved.
const PER_BATCH: u32 = 25;
/// Machines holding a lease at once (the range has 256 addresses).
const LIVE: usize = 150;

fn member_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + i as u8)
}

fn write_members(path: &Path, members: &[usize]) {
    let list: Vec<(&str, String)> = members
        .iter()
        .map(|&k| (NAMES[k], format!("http://{}:8080", member_ip(k))))
        .collect();
    common::members::write_members_file(path, &list);
}

fn config(interface: &str, i: usize, members_file: &Path) -> String {
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
takeover_secs = {TAKEOVER_SECS}
[tftp]
enabled = false
[http]
listen = "{ip}:8080"
[health]
interval_ms = 200
timeout_ms = 150
dead_after = 2
[owner]
self = "{name}"
members = "file"
members_file = "{file}"
members_poll_ms = 100
{secret}
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.1.255"]
lease_time = 3600
"#,
        ip = member_ip(i),
        name = NAMES[i],
        file = members_file.display(),
        secret = common::member_secret_line(),
    )
}

/// Every machine holding a lease reboots (INIT-REBOOT); how many each member answered,
/// and the machines that lost their address.
fn all_rebind(machines: &mut Machines, when: &str) -> ([usize; 3], Lost) {
    let (by_server, lost) = machines.reconfirm_all(Reconfirm::InitReboot, when);
    let mut by = [0; 3];
    for (i, n) in by.iter_mut().enumerate() {
        *n = by_server.get(&member_ip(i)).copied().unwrap_or(0);
    }
    (by, lost)
}

fn members_seen(seg: &Segment, i: usize) -> Option<u64> {
    seg.metrics(member_ip(i))
        .lines()
        .find_map(|l| {
            l.strip_prefix("shardboot_members ")
                .map(|v| v.trim().parse().ok())
        })
        .flatten()
}

#[test]
fn members_killed_at_random_moments_never_cost_a_duplicate_or_an_address() {
    require_root!();
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    let shared = tempfile::tempdir().unwrap();
    let file = shared.path().join("members.toml");
    write_members(&file, &[0, 1, 2]);
    let mut dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<String> = (0..3)
        .map(|i| config(&seg.member_ifs[i], i, &file))
        .collect();
    let mut servers: Vec<Server> = (0..3)
        .map(|i| Server::start(&seg.servers, dirs[i].path(), &configs[i]))
        .collect();
    let mut machines = Machines::new(seg.client(), 1, TAKEOVER_SECS);
    machines.arrive(LIVE as u32, 0);
    let mut rng = Rng(0x5eed_1234_abcd_0042);
    let mut rebinds = [0usize; 3];
    for round in 1..=ROUNDS {
        let victim = rng.next(3) as usize;
        let kill_after = Duration::from_millis(rng.next(1400));
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        eprintln!(
            "round {round}: {} killed after {kill_after:?}",
            NAMES[victim]
        );
        // Machines arrive; the victim dies somewhere in the middle of their exchanges,
        // and its blocks go to the others at once.
        std::thread::scope(|s| {
            let storm = s.spawn(|| machines.arrive(PER_BATCH, round));
            std::thread::sleep(kill_after);
            servers[victim].kill9();
            write_members(&file, &survivors);
            storm.join().unwrap();
        });
        wait_until(
            "the others follow the file",
            Duration::from_secs(10),
            || survivors.iter().all(|&i| members_seen(&seg, i) == Some(2)),
        );
        // More machines, now into the victim's former blocks too.
        machines.arrive(PER_BATCH, round);
        if round % 5 == 0 {
            let (by, lost) = all_rebind(
                &mut machines,
                &format!("round {round}, {} dead", NAMES[victim]),
            );
            if !lost.is_empty() {
                // For the failure: what each member's log says about those machines
                // (with SB_TEST_LOG=shardboot::dhcp=debug, every decision).
                let macs: Vec<String> = lost.iter().map(|(m, _)| MacAddr(*m).to_string()).collect();
                for (i, s) in servers.iter_mut().enumerate() {
                    s.stop();
                    for line in s.log_text().lines().filter(|l| {
                        l.contains("WARN")
                            || l.contains("ERROR")
                            || macs.iter().any(|m| l.contains(m))
                    }) {
                        eprintln!("{}: {line}", NAMES[i]);
                    }
                }
                panic!("{lost:#?}");
            }
            for i in 0..3 {
                rebinds[i] += by[i];
            }
            assert_eq!(by[victim], 0, "a dead member answered");
        }
        // Back: on its own store, or (every other round) on an empty one.
        if round % 2 == 0 {
            servers[victim].restart();
        } else {
            dirs[victim] = tempfile::tempdir().unwrap();
            servers[victim] = Server::start(&seg.servers, dirs[victim].path(), &configs[victim]);
            assert!(
                servers[victim].log_text().contains("every_member=true"),
                "round {round}: {} did not read both members' leases:\n{}",
                NAMES[victim],
                servers[victim].log_text()
            );
        }
        write_members(&file, &[0, 1, 2]);
        wait_until("every member sees three", Duration::from_secs(10), || {
            (0..3).all(|i| members_seen(&seg, i) == Some(3))
        });
        machines.release_oldest(LIVE);
    }
    // A figure, not an assertion: from b's SIGKILL (no list change: only the health
    // probes know) to a machine b ACKed being ACKed again on reboot, and to a new
    // machine whose bucket is b being offered an address without waiting to take over.
    let b_machine = machines.live.iter().copied().find(|(m, _)| {
        machines
            .acked_by
            .get(m)
            .is_some_and(|(s, _)| *s == member_ip(1))
    });
    let fresh = (900_000..)
        .map(mac)
        .find(|m| shardboot::owner::responsible_member(&MacAddr(*m), &NAMES[..3]) == Some("b"))
        .unwrap();
    let killed = std::time::Instant::now();
    servers[1].kill9();
    let mut rebooted = None;
    let mut offered = None;
    while killed.elapsed() < Duration::from_secs(10) && (rebooted.is_none() || offered.is_none()) {
        if let (None, Some(lease)) = (rebooted, b_machine) {
            let got = machines
                .client
                .init_reboot(&[lease], Duration::from_millis(50));
            if got[0].iter().any(|x| x.kind == MessageType::Ack) {
                rebooted = Some(killed.elapsed());
            }
        }
        if offered.is_none() {
            let got = machines
                .client
                .discover(&[fresh], 0, Duration::from_millis(50));
            if got[0].iter().any(|x| x.kind == MessageType::Offer) {
                offered = Some(killed.elapsed());
            }
        }
    }
    eprintln!(
        "b SIGKILLed: one of its machines ACKed on reboot after {rebooted:?}; a new machine \
         of b's bucket offered after {offered:?} (health: 2 failed probes 200 ms apart)"
    );
    servers[1].restart();
    wait_until("b in step again", Duration::from_secs(15), || {
        (0..3).all(|i| in_step(&seg, i))
    });
    let (by, lost) = all_rebind(&mut machines, "after the last round");
    assert!(lost.is_empty(), "{lost:#?}");
    eprintln!(
        "{ROUNDS} rounds: {} leases ACKed, {} machines unanswered after 4 tries, rebinds \
         answered by a/b/c {:?} (at the end {by:?})",
        machines.acked, machines.unanswered, rebinds
    );
    // The stores agree: every live machine's lease is in each, on its address.
    for (i, s) in servers.iter_mut().enumerate() {
        s.stop();
        let held = bound_leases(&s.leases_json());
        for (m, ip) in &machines.live {
            let want = MacAddr(*m).to_string();
            assert_eq!(held.get(ip), Some(&want), "{ip} in {}'s store", NAMES[i]);
        }
    }
    // Most machines were served at all (a machine may give up in a kill's window).
    assert!(
        machines.unanswered * 20 < machines.acked,
        "{} unanswered of {}",
        machines.unanswered,
        machines.acked
    );
}

/// A member's name in the members list `/v1/members` of member `i` shows as in step.
fn in_step(seg: &Segment, i: usize) -> bool {
    seg.metrics(member_ip(i))
        .lines()
        .any(|l| l == "shardboot_replication_in_step 1")
}

#[test]
fn a_member_joins_another_leaves_and_all_restart_in_turn_under_load() {
    require_root!();
    let addrs: Vec<String> = (0..4).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    let shared = tempfile::tempdir().unwrap();
    let file = shared.path().join("members.toml");
    write_members(&file, &[0, 1, 2]);
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<String> = (0..4)
        .map(|i| config(&seg.member_ifs[i], i, &file))
        .collect();
    let mut servers: Vec<Option<Server>> = (0..3)
        .map(|i| Some(Server::start(&seg.servers, dirs[i].path(), &configs[i])))
        .collect();
    servers.push(None);
    let mut machines = Machines::new(seg.client(), 100_001, TAKEOVER_SECS);
    machines.arrive(120, 0);
    let check = |machines: &mut Machines, when: &str| {
        eprintln!(
            "{when}: {} ACKed, {} unanswered so far",
            machines.acked, machines.unanswered
        );
        let (_, lost) = all_rebind(machines, when);
        assert!(lost.is_empty(), "{lost:#?}");
    };

    // d joins (a fourth conductor) while machines arrive: it starts on an empty store,
    // reads every member's leases, and the file lists it.
    std::thread::scope(|s| {
        let storm = s.spawn(|| machines.arrive(40, 1));
        servers[3] = Some(Server::start(&seg.servers, dirs[3].path(), &configs[3]));
        write_members(&file, &[0, 1, 2, 3]);
        storm.join().unwrap();
    });
    let log = servers[3].as_ref().unwrap().log_text();
    assert!(log.contains("every_member=true"), "{log}");
    wait_until("four members everywhere", Duration::from_secs(10), || {
        (0..4).all(|i| members_seen(&seg, i) == Some(4))
    });
    machines.arrive(40, 1);
    check(&mut machines, "after d joined");
    // Room in the 256 addresses for the next machines.
    machines.release_oldest(LIVE);

    // c leaves gracefully (its conductor stops): out of the file, then stopped.
    std::thread::scope(|s| {
        let storm = s.spawn(|| machines.arrive(40, 2));
        write_members(&file, &[0, 1, 3]);
        std::thread::sleep(Duration::from_millis(300));
        servers[2].as_mut().unwrap().stop();
        storm.join().unwrap();
    });
    servers[2] = None;
    wait_until("three members", Duration::from_secs(10), || {
        [0, 1, 3].iter().all(|&i| members_seen(&seg, i) == Some(3))
    });
    machines.arrive(40, 2);
    machines.release_oldest(LIVE);
    check(&mut machines, "after c left");

    // A rolling restart of a, b and d, one at a time, while machines arrive; each
    // comes back in step before the next goes.
    for (round, i) in [0usize, 1, 3].into_iter().enumerate() {
        std::thread::scope(|s| {
            let storm = s.spawn(|| machines.arrive(30, 3 + round));
            std::thread::sleep(Duration::from_millis(200));
            servers[i].as_mut().unwrap().stop();
            servers[i].as_mut().unwrap().restart();
            storm.join().unwrap();
        });
        wait_until("every member back in step", Duration::from_secs(15), || {
            [0, 1, 3].iter().all(|&k| in_step(&seg, k))
        });
        machines.release_oldest(LIVE);
        check(&mut machines, &format!("after {} restarted", NAMES[i]));
    }
    eprintln!(
        "join, leave, rolling restart: {} leases ACKed, {} machines unanswered after 4 tries",
        machines.acked, machines.unanswered
    );
    assert!(
        machines.unanswered * 20 < machines.acked,
        "{} unanswered of {}",
        machines.unanswered,
        machines.acked
    );
}
