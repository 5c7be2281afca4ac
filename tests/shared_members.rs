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
//! What must hold: no address is ACKed to a machine while another holds it; every
//! machine holding a lease keeps its address when it rebinds, whichever member answers;
//! and the database holds every live machine's binding.

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use common::db::{DbServer, Kind};
use common::machines::{machine_mac as mac, Lost, Machines, Reconfirm};
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

/// The same small xorshift as the replication test: random, the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
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
    for (i, s) in servers.iter_mut().enumerate() {
        s.stop();
        for line in s.log_text().lines().filter(|l| {
            l.contains("WARN")
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

#[test]
fn members_and_the_database_killed_never_cost_a_duplicate_or_an_address() {
    common::require_root_or_fail();
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    let mut db = DbServer::start(Kind::MariaDb, Some(&seg.servers));
    let (db_url, _) = db.database();
    let db_name = db_url.rsplit('/').next().unwrap().to_string();
    let credentials = db.credentials_dir();
    let shared = tempfile::tempdir().unwrap();
    let file = shared.path().join("members.toml");
    write_members(&file, &[0, 1, 2]);
    let mut dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<String> = (0..3)
        .map(|i| config(&seg.member_ifs[i], i, &file, &db_url, &credentials))
        .collect();
    let mut servers: Vec<Server> = (0..3)
        .map(|i| Server::start(&seg.servers, dirs[i].path(), &configs[i]))
        .collect();
    let mut machines = Machines::new(seg.client(), 1, TAKEOVER_SECS);
    machines.arrive(LIVE as u32, 0);
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
    eprintln!(
        "{ROUNDS} rounds: {} leases ACKed, {} machines unanswered after 4 tries, rebinds \
         answered by a/b/c {by:?}",
        machines.acked, machines.unanswered
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
