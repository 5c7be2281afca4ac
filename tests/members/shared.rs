//! Three members on one bridge agree through one database (a real MariaDB the test
//! starts in the members' namespace), no lease traffic between them. Machines arrive
//! and release in turn over a small range, so addresses are handed out again and
//! again, while:
//! - a member chosen at random is SIGKILLed at a random moment of a storm; the members
//!   file drops it, the others take its blocks at once; it comes back on its own disk
//!   or, every other round, on an empty one (a rescheduled pod), serving at once;
//! - the database itself is killed: the members go degraded (no fresh address ACKed,
//!   every machine that holds one keeps it on renewal), then it is restarted and they
//!   serve again by themselves.
//!
//! What must hold, judged by an independent checker from what the machines saw
//! (`common::checker`): no address is ACKed to a machine while another holds it; every
//! machine holding a lease keeps its address when it rebinds, whichever member answers;
//! and the database holds every live machine's binding. The nemesis (the second test)
//! adds partitions, pauses, stale disks, split member lists, clock offsets and a
//! database restart; `benches/nemesis.sh` runs it longer and prints its schedule.

use crate::common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use common::db::{DbServer, Kind};
use common::machines::{machine_mac as mac, Lost, Machines, Reconfirm, Rng};
use common::members::wait_until;
use common::segment::Segment;
use common::Server;
use shardboot::mac::MacAddr;

const NAMES: [&str; 3] = ["a", "b", "c"];
const TAKEOVER_SECS: u16 = 2;
const ROUNDS: usize = 8;
const PER_BATCH: u32 = 25;
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

fn config(
    interface: &str,
    i: usize,
    members_file: &Path,
    db_url: &str,
    credentials: &Path,
) -> String {
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
[store]
shared = "{db_url}"
credentials_dir = "{credentials}"
timeout_ms = 1000
poll_ms = 200
heartbeat_secs = 1
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.1.255"]
lease_time = 3600
"#,
        ip = member_ip(i),
        name = NAMES[i],
        file = members_file.display(),
        credentials = credentials.display(),
        secret = common::member_secret_line(),
    )
}

fn all_rebind(machines: &mut Machines, how: Reconfirm, when: &str) -> ([usize; 3], Lost) {
    let (by_server, lost) = machines.reconfirm_all(how, when);
    let mut by = [0; 3];
    for (i, n) in by.iter_mut().enumerate() {
        *n = by_server.get(&member_ip(i)).copied().unwrap_or(0);
    }
    (by, lost)
}

fn metric(seg: &Segment, i: usize, name: &str) -> Option<u64> {
    seg.metric(member_ip(i), name)
}

/// Fails with each member's warnings and its lines about the lost machines.
fn fail_with_logs(servers: &mut [Server], lost: &Lost) -> ! {
    let macs: Vec<String> = lost.iter().map(|(m, _)| MacAddr(*m).to_string()).collect();
    let keep = std::env::var_os("SB_KEEP_LOGS");
    for (i, s) in servers.iter_mut().enumerate() {
        s.stop();
        if let Some(dir) = &keep {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::copy(&s.log, Path::new(dir).join(format!("{}.log", NAMES[i])));
        }
        for line in s.log_text().lines().filter(|l| {
            l.contains("panicked")
                || l.contains("WARN")
                || l.contains("ERROR")
                || l.contains("shardboot::shared")
                || macs.iter().any(|m| l.contains(m))
        }) {
            eprintln!("{}: {line}", NAMES[i]);
        }
    }
    panic!("{lost:#?}");
}

/// Every bound v4 binding in the database: address → MAC text.
fn database_bindings(db: &DbServer, name: &str) -> std::collections::HashMap<Ipv4Addr, String> {
    let out = db.admin_in(
        Some(name),
        "SELECT addr, HEX(holder) FROM shardboot_lease4 WHERE state = 1 AND expires_ms > UNIX_TIMESTAMP() * 1000",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, hex) = l.split_once('\t')?;
            let ip = Ipv4Addr::from(addr.trim().parse::<u32>().ok()?);
            let bytes: Vec<String> = (0..6)
                .map(|i| hex[2 * i..2 * i + 2].to_lowercase())
                .collect();
            Some((ip, bytes.join(":")))
        })
        .collect()
}

/// Three members on one bridge, one MariaDB in their namespace (each member reaching
/// it at its own loopback address), and the first machines bound.
struct Cluster {
    seg: Segment,
    db: DbServer,
    db_url: String,
    /// b's and c's members file.
    file: std::path::PathBuf,
    /// a's members file: the list a believes can be made to differ.
    file_a: std::path::PathBuf,
    dirs: Vec<tempfile::TempDir>,
    configs: Vec<String>,
    servers: Vec<Server>,
    machines: Machines,
    /// The members files: bind it (`_files`), or they are deleted at once.
    _files: tempfile::TempDir,
}

fn cluster() -> Cluster {
    common::require_root_or_fail();
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    // REBINDING machines are answered at their own address (RFC 2131 §4.1).
    seg.clients_take_unicast_to("198.18.1.0/24");
    let mut db = DbServer::start_on(Kind::MariaDb, Some(&seg.servers), "0.0.0.0");
    let (db_url, _) = db.database();
    let credentials = db.credentials_dir();
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("members.toml");
    let file_a = files.path().join("members-a.toml");
    write_members(&file, &[0, 1, 2]);
    write_members(&file_a, &[0, 1, 2]);
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<String> = (0..3)
        .map(|i| {
            let members = if i == 0 { &file_a } else { &file };
            config(
                &seg.member_ifs[i],
                i,
                members,
                &db_url_of(&db_url, i),
                &credentials,
            )
        })
        .collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| Server::start(&seg.servers, dirs[i].path(), &configs[i]))
        .collect();
    let mut machines = Machines::new(seg.client(), 1, TAKEOVER_SECS);
    machines.arrive(LIVE as u32, 0);
    Cluster {
        seg,
        db,
        db_url,
        file,
        file_a,
        dirs,
        configs,
        servers,
        machines,
        _files: files,
    }
}

#[test]
fn members_and_the_database_killed_never_cost_a_duplicate_or_an_address() {
    let Cluster {
        seg,
        mut db,
        db_url,
        file,
        file_a,
        mut dirs,
        configs,
        mut servers,
        mut machines,
        _files,
        ..
    } = cluster();
    let db_name = db_url.rsplit('/').next().unwrap().to_string();
    let mut rng = Rng(0x5eed_1234_abcd_0042);
    for round in 1..=ROUNDS {
        let victim = rng.next(3) as usize;
        let kill_after = Duration::from_millis(rng.next(1400));
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        eprintln!(
            "round {round}: {} killed after {kill_after:?}",
            NAMES[victim]
        );
        std::thread::scope(|s| {
            let storm = s.spawn(|| machines.arrive(PER_BATCH, round));
            std::thread::sleep(kill_after);
            servers[victim].kill9();
            write_members(&file, &survivors);
            write_members(&file_a, &survivors);
            storm.join().unwrap();
        });
        wait_until(
            "the others follow the file",
            Duration::from_secs(10),
            || {
                survivors
                    .iter()
                    .all(|&i| metric(&seg, i, "shardboot_members") == Some(2))
            },
        );
        machines.arrive(PER_BATCH, round);
        if round % 2 == 0 {
            let when = format!("round {round}, {} dead", NAMES[victim]);
            let (by, lost) = all_rebind(&mut machines, Reconfirm::InitReboot, &when);
            if !lost.is_empty() {
                fail_with_logs(&mut servers, &lost);
            }
            machines.check(&when);
            assert_eq!(by[victim], 0, "a dead member answered");
        }
        if round % 2 == 0 {
            servers[victim].restart();
        } else {
            // A pod rescheduled onto an empty disk: it reads the database and serves.
            dirs[victim] = tempfile::tempdir().unwrap();
            servers[victim] = Server::start(&seg.servers, dirs[victim].path(), &configs[victim]);
            let log = servers[victim].log_text();
            assert!(
                log.contains("bindings read from the shared lease store"),
                "round {round}: {} did not read the database:\n{log}",
                NAMES[victim]
            );
        }
        write_members(&file, &[0, 1, 2]);
        write_members(&file_a, &[0, 1, 2]);
        wait_until("every member sees three", Duration::from_secs(10), || {
            (0..3).all(|i| metric(&seg, i, "shardboot_members") == Some(3))
        });
        machines.release_oldest(LIVE);
    }

    // The database dies: no member ACKs a fresh address, every machine holding one
    // keeps it when it rebinds (each renewal within its binding's current end).
    db.kill();
    wait_until(
        "every member sees the database gone",
        Duration::from_secs(15),
        || (0..3).all(|i| metric(&seg, i, "shardboot_shared_store_up") == Some(0)),
    );
    // Readiness says so, with the reason.
    let ready = seg
        .servers
        .command("curl")
        .args(["-s", "-m", "2", "-w", "%{http_code}", "--noproxy", "*"])
        .arg(format!("http://{}:8080/readyz", member_ip(0)))
        .output()
        .unwrap();
    let ready = String::from_utf8_lossy(&ready.stdout).into_owned();
    assert!(
        ready.contains("shared lease store unreachable") && ready.ends_with("503"),
        "{ready}"
    );
    let acked = machines.acked;
    machines.arrive(10, ROUNDS + 1);
    assert_eq!(
        machines.acked, acked,
        "a fresh address ACKed without the database"
    );
    let (_, lost) = all_rebind(&mut machines, Reconfirm::InitReboot, "database down");
    if !lost.is_empty() {
        fail_with_logs(&mut servers, &lost);
    }
    machines.check("database down");
    let covered: u64 = (0..3)
        .filter_map(|i| metric(&seg, i, "shardboot_shared_store_covered_renewals_total"))
        .sum();
    assert!(
        covered as usize >= machines.live.len(),
        "renewals answered: {covered}"
    );
    // Back: the members serve again by themselves.
    db.restart();
    wait_until(
        "every member sees the database back",
        Duration::from_secs(15),
        || (0..3).all(|i| metric(&seg, i, "shardboot_shared_store_up") == Some(1)),
    );
    machines.arrive(PER_BATCH, ROUNDS + 2);
    assert!(
        machines.acked >= acked + PER_BATCH as usize - 2,
        "after the database came back: {} ACKed, {acked} before",
        machines.acked
    );

    let (by, lost) = all_rebind(&mut machines, Reconfirm::InitReboot, "at the end");
    if !lost.is_empty() {
        fail_with_logs(&mut servers, &lost);
    }
    let verdict = machines.check("at the end");
    eprintln!(
        "{ROUNDS} rounds: {} leases ACKed, {} machines unanswered after 4 tries, rebinds \
         answered by a/b/c {by:?}; checker: {} ACKs, {} releases, {} re-confirmations, \
         0 overlapping, 0 lost",
        machines.acked, machines.unanswered, verdict.acks, verdict.releases, verdict.reconfirms
    );
    // The database holds every live machine's binding on its address.
    let held = database_bindings(&db, &db_name);
    for (m, ip) in &machines.live {
        assert_eq!(
            held.get(ip),
            Some(&MacAddr(*m).to_string()),
            "{ip} in the database"
        );
    }
    let refused: u64 = (0..3)
        .filter_map(|i| metric(&seg, i, "shardboot_shared_store_refused_total"))
        .sum();
    eprintln!("writes the database refused (withdrawn, never ACKed): {refused}");
    assert!(machines.unanswered * 20 < machines.acked);
    let _ = mac(0);
}

/// Member `i`'s own loopback address for the database: cutting it off cuts that member
/// alone.
fn db_url_of(url: &str, i: usize) -> String {
    url.replacen("127.0.0.1", &format!("127.0.1.{}", i + 1), 1)
}

/// Cuts member `i` off from the database (`on`), or heals it: its packets to the
/// database are dropped, as on a partition, while it still reaches the clients.
fn cut_off(seg: &Segment, i: usize, port: u16, on: bool) {
    let rule = [
        if on { "-I" } else { "-D" },
        "INPUT",
        "-d",
        &format!("127.0.1.{}", i + 1),
        "-p",
        "tcp",
        "--dport",
        &port.to_string(),
        "-j",
        "DROP",
    ];
    let out = seg.servers.command("iptables").args(rule).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Passes over the nemesis' faults: one in the suite, more for a longer run
/// (`SB_NEMESIS_PASSES`, as `benches/nemesis.sh` sets it).
fn nemesis_passes() -> usize {
    std::env::var("SB_NEMESIS_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// libfaketime, multi-threaded build: shifts the wall clock of the process it is
/// preloaded into (`tests/install-deps.sh` installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Starts `server` again with its wall clock `offset_secs` off (monotonic time is
/// left alone, as NTP stepping a wrong clock would), or on the true clock (`None`).
fn restart_on_clock(server: &mut Server, offset_secs: Option<i64>) {
    let offset = offset_secs.map(|s| format!("{s:+}"));
    server.set_env("LD_PRELOAD", offset.as_ref().map(|_| LIBFAKETIME));
    server.set_env("FAKETIME", offset.as_deref());
    server.set_env("FAKETIME_DONT_FAKE_MONOTONIC", offset.as_ref().map(|_| "1"));
    server.restart();
}

/// How far `server`'s wall clock is from this one's, in seconds, read off the time
/// stamp of its last log line.
fn clock_offset_of(server: &Server) -> i64 {
    let log = server.log_text();
    let stamp = log
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &stamp, "+%s"])
        .output()
        .unwrap();
    let then: i64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no time stamp in {stamp:?}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    then - now
}

/// The nemesis: faults the members' own coordination could not survive, each under a
/// storm of machines arriving, releasing and rebooting. After each, every live machine
/// asks for its address again, and an independent checker (`common::checker`) judges
/// what the machines saw, from their side of the wire alone: no address ACKed to one
/// machine while another's lease interval on it runs, and no machine inside its
/// interval losing its address. The faults, in order (once per pass):
/// 1. a member cut off from the database while it still reaches every client;
/// 2. a member paused (SIGSTOP) mid-storm, then resumed;
/// 3. a member SIGKILLed and started again on a stale copy of its disk, after the
///    others handed out and took back addresses meanwhile;
/// 4. members that disagree on the member list (a believes it is alone, so every block
///    is its own, while b and c hand out theirs): the case member-to-member replication
///    admitted it could not cover. The database refuses the losing writes;
/// 5. a member whose wall clock is two hours ahead, then two hours behind
///    (libfaketime): ends are the database's clock, so it neither takes another's
///    live binding as ended nor cuts its own machines short;
/// 6. the database killed mid-storm and started again;
/// 7. a member SIGKILLed: how long until its machines' renewals are answered by the
///    others (the figure `benches/nemesis.sh` reports).
#[test]
fn a_member_cut_off_paused_or_back_on_a_stale_disk_never_costs_a_duplicate_or_an_address() {
    let Cluster {
        seg,
        mut db,
        db_url,
        file_a,
        dirs,
        mut servers,
        mut machines,
        _files,
        ..
    } = cluster();
    let db_name = db_url.rsplit('/').next().unwrap().to_string();
    let check = |machines: &mut Machines, servers: &mut [Server], when: &str| {
        let (by, lost) = all_rebind(machines, Reconfirm::InitReboot, when);
        if !lost.is_empty() {
            fail_with_logs(servers, &lost);
        }
        let verdict = machines.check(when);
        eprintln!(
            "{when}: {} live machines kept their addresses, answered by a/b/c {by:?}; \
             checker: {} ACKs, {} overlapping, {} lost",
            machines.live.len(),
            verdict.acks,
            verdict.overlaps.len(),
            verdict.lost.len()
        );
    };
    let mut takeovers = Vec::new();
    let passes = nemesis_passes();
    for pass in 0..passes {
        let round = pass * 20;

        // 1. a cut off from the database: it goes degraded by itself and ACKs nothing
        //    fresh; b and c serve the newcomers (takeover); everyone keeps their address.
        machines
            .history
            .fault("a cut off from the database (iptables)");
        cut_off(&seg, 0, db.port, true);
        machines.arrive(PER_BATCH, round + 1);
        wait_until("a sees the database gone", Duration::from_secs(15), || {
            metric(&seg, 0, "shardboot_shared_store_up") == Some(0)
        });
        let a_acks = metric(&seg, 0, "shardboot_shared_store_batches_total");
        machines.arrive(PER_BATCH, round + 1);
        check(&mut machines, &mut servers, "a cut off from the database");
        assert_eq!(
            metric(&seg, 0, "shardboot_shared_store_batches_total"),
            a_acks,
            "a committed while cut off"
        );
        cut_off(&seg, 0, db.port, false);
        machines.history.fault("a reaches the database again");
        wait_until("a sees the database again", Duration::from_secs(15), || {
            metric(&seg, 0, "shardboot_shared_store_up") == Some(1)
        });
        machines.release_oldest(LIVE);

        // 2. b paused mid-storm for 3 s, then resumed: what it answers late was
        //    committed.
        machines
            .history
            .fault("b paused (SIGSTOP) 300 ms into a storm, resumed 3 s later");
        std::thread::scope(|s| {
            let storm = s.spawn(|| machines.arrive(PER_BATCH, round + 2));
            std::thread::sleep(Duration::from_millis(300));
            let pid = servers[1].pid().unwrap().to_string();
            common::sh(&["kill", "-STOP", &pid]);
            std::thread::sleep(Duration::from_secs(3));
            common::sh(&["kill", "-CONT", &pid]);
            storm.join().unwrap();
        });
        check(&mut machines, &mut servers, "b paused and resumed");
        machines.release_oldest(LIVE);

        // 3. c back on a stale disk: its store as it was, after the others moved on.
        machines
            .history
            .fault("c SIGKILLed; its disk copied; 3 storms without it");
        servers[2].kill9();
        let state = dirs[2].path().join("state");
        let stale = dirs[2].path().join("stale");
        common::sh(&["cp", "-a", state.to_str().unwrap(), stale.to_str().unwrap()]);
        servers[2].restart();
        for r in 0..3 {
            machines.arrive(PER_BATCH, round + 3 + r);
            machines.release_oldest(LIVE - 40);
        }
        servers[2].kill9();
        common::sh(&["rm", "-rf", state.to_str().unwrap()]);
        common::sh(&["mv", stale.to_str().unwrap(), state.to_str().unwrap()]);
        servers[2].restart();
        machines.history.fault("c started again on the stale copy");
        machines.arrive(PER_BATCH * 2, round + 6);
        check(&mut machines, &mut servers, "c back on a stale disk");
        machines.release_oldest(LIVE - 60);

        // 4. a believes it is alone: it answers every machine from every block, racing
        //    b and c for the same free addresses.
        machines
            .history
            .fault("a's member list holds a alone (b and c list all three)");
        write_members(&file_a, &[0]);
        wait_until("a believes it is alone", Duration::from_secs(10), || {
            metric(&seg, 0, "shardboot_members") == Some(1)
        });
        for r in 0..4 {
            machines.arrive(PER_BATCH * 2, round + 7 + r);
            machines.release_oldest(LIVE - 60);
        }
        check(&mut machines, &mut servers, "a alone in its own list");
        write_members(&file_a, &[0, 1, 2]);
        machines
            .history
            .fault("a's member list holds all three again");
        // Until a's heartbeat row says so, a member starting refuses to (the lists
        // differ), as it should.
        wait_until(
            "every heartbeat row lists three",
            Duration::from_secs(10),
            || {
                let out = db.admin_in(
                    Some(&db_name),
                    "SELECT COUNT(DISTINCT fingerprint) FROM shardboot_member",
                );
                String::from_utf8_lossy(&out.stdout).trim() == "1"
            },
        );

        // 5. b's wall clock two hours ahead, then two hours behind.
        for offset in [7200, -7200] {
            machines
                .history
                .fault(&format!("b restarted with its wall clock {offset:+} s off"));
            restart_on_clock(&mut servers[1], Some(offset));
            let seen = clock_offset_of(&servers[1]);
            assert!(
                (seen - offset).abs() < 60,
                "b's clock is {seen} s off, not {offset}"
            );
            for r in 0..2 {
                machines.arrive(PER_BATCH, round + 11 + r);
                machines.release_oldest(LIVE - 40);
            }
            check(
                &mut machines,
                &mut servers,
                &format!("b's clock {offset:+} s off"),
            );
        }
        restart_on_clock(&mut servers[1], None);
        machines.history.fault("b back on the true clock");
        machines.release_oldest(LIVE - 60);

        // 6. The database killed 300 ms into a storm and started again 2 s later.
        machines
            .history
            .fault("database killed 300 ms into a storm, started again 2 s later");
        std::thread::scope(|s| {
            let storm = s.spawn(|| machines.arrive(PER_BATCH * 2, round + 13));
            std::thread::sleep(Duration::from_millis(300));
            db.kill();
            std::thread::sleep(Duration::from_secs(2));
            db.restart();
            storm.join().unwrap();
        });
        wait_until(
            "every member sees the database back",
            Duration::from_secs(15),
            || (0..3).all(|i| metric(&seg, i, "shardboot_shared_store_up") == Some(1)),
        );
        machines.arrive(PER_BATCH, round + 14);
        check(&mut machines, &mut servers, "the database restarted");
        machines.release_oldest(LIVE - 40);

        // 7. c SIGKILLed: its machines rebind until a and b answer them.
        let theirs = machines.acked_first_by(member_ip(2));
        machines.history.fault(&format!(
            "c SIGKILLed; its {} machines rebind every 0.5 s",
            theirs.len()
        ));
        servers[2].kill9();
        let took = match machines.rebind_until_answered(&theirs, Duration::from_secs(60)) {
            Ok(took) => took,
            Err(lost) => fail_with_logs(&mut servers, &lost),
        };
        eprintln!(
            "c's {} machines renewed by a and b {:.1} s after c died",
            theirs.len(),
            took.as_secs_f64()
        );
        takeovers.push(took);
        servers[2].restart();
        machines.history.fault("c started again");
        check(&mut machines, &mut servers, "c killed and started again");
        machines.release_oldest(LIVE);
    }
    let verdict = machines.check("at the end");
    let refused: u64 = (0..3)
        .filter_map(|i| metric(&seg, i, "shardboot_shared_store_refused_total"))
        .sum();
    takeovers.sort();
    eprintln!(
        "nemesis, {passes} pass(es): {} ACKs, {} releases, {} re-confirmations seen; \
         checker: {} overlapping bindings, {} lost addresses; {} machines unanswered \
         after 4 tries; {refused} writes the database refused; a dead member's machines \
         renewed by the others after {:?} (heartbeat 1 s, dead after 2 missed)",
        verdict.acks,
        verdict.releases,
        verdict.reconfirms,
        verdict.overlaps.len(),
        verdict.lost.len(),
        machines.unanswered,
        takeovers
            .iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>(),
    );
    drop(db);
}

/// The checker itself: it must see what it exists to see.
#[test]
fn the_checker_finds_an_overlap_and_a_lost_address() {
    use common::checker::{check, Event};
    use common::segment::Seen;
    use dhcproto::v4::MessageType;
    let ip = Ipv4Addr::new(10, 0, 0, 5);
    let ack = |ms, m: u8| Event::Ack {
        ms,
        mac: [m; 6],
        addr: ip,
        server: Ipv4Addr::new(10, 0, 0, 1),
        lease_secs: 60,
    };
    assert_eq!(check(&[ack(0, 1), ack(1_000, 2)]).overlaps.len(), 1);
    // Ended, released or renewed by its holder: no overlap.
    assert!(check(&[ack(0, 1), ack(60_000, 2)]).overlaps.is_empty());
    let release = Event::Release {
        ms: 500,
        mac: [1; 6],
        addr: ip,
    };
    assert!(check(&[ack(0, 1), release, ack(1_000, 2)])
        .overlaps
        .is_empty());
    assert!(check(&[ack(0, 1), ack(1_000, 1)]).overlaps.is_empty());
    // A NAK inside the interval is a lost address; after it, nothing is lost.
    let nak = |ms| Event::Reconfirm {
        ms,
        mac: [1; 6],
        addr: ip,
        answers: vec![Seen {
            kind: MessageType::Nak,
            server: Ipv4Addr::new(10, 0, 0, 1),
            yiaddr: Ipv4Addr::UNSPECIFIED,
            lease_secs: None,
        }],
    };
    assert_eq!(check(&[ack(0, 1), nak(2_000)]).lost.len(), 1);
    assert!(check(&[ack(0, 1), nak(61_000)]).lost.is_empty());
}
