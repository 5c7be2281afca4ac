//! Members that follow a real Ironic's conductors (issue: members follow the cluster):
//! three conductors and three members on one bridge (`owner.members = "ironic"`), and
//! under a storm of machines that arrive (DISCOVER, REQUEST) and rebind, in turn: a
//! fourth conductor and member join; a conductor stops gracefully and its member leaves;
//! a member and its conductor are SIGKILLed together; a replacement (new name, new
//! address, empty store) takes the dead one's place; every member restarts in turn.
//!
//! After each step: no address was ever ACKed to a machine while another held it (the
//! storm checks every ACK as it comes), no machine lost its address on rebind, the
//! running members' stores hold every live lease on its address and no address for two
//! machines, and every enrolled machine is answered by the member beside the conductor
//! Ironic now reports for it, within a few refresh intervals.
//!
//! Ironic runs in the members' namespace, on its loopback (tests/ironic/lab.sh); DHCP
//! traffic stays on the test's own bridge.

use crate::common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::db::{DbServer, Kind};
use common::ironic_lab::{conductor_name, IronicLab, ONE_LAB_AT_A_TIME};
use common::machines::{bound_leases, Lost, Machines, Reconfirm};
use common::members::wait_until;
use common::segment::Segment;
use common::Server;
use dhcproto::v4::MessageType;
use shardboot::mac::MacAddr;

/// Member `i` stands beside conductor `i + 1`: a, b, c, d, and e (the replacement).
const MEMBERS: usize = 5;
const TAKEOVER_SECS: u16 = 2;
/// Enrolled in Ironic: the machines whose owner Ironic decides.
const ENROLLED: usize = 40;
/// Machines holding a lease at once, after each step (the range has 1,024 addresses).
const LIVE: usize = 400;
/// New machines per half-storm: with the rebinds of those holding leases, every step
/// runs while at least 300 machines DORA or rebind.
const ARRIVING: u32 = 100;
/// How long a change in Ironic may take to reach DHCP answers: Ironic's own refresh
/// (`owner.ironic.refresh_secs`) plus the members list's, twice over, plus slack.
const FOLLOW_LIMIT: Duration = Duration::from_secs(15);

fn member_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + i as u8)
}

/// Member `i`'s HTTP listener host: its conductor's host (the template
/// `http://{host}:8080` derives it from the conductor name).
fn host(i: usize) -> String {
    format!("127.0.0.{}", i + 1)
}

fn conductor_of(i: usize) -> String {
    conductor_name(i as u8 + 1)
}

/// Member `i`'s configuration; `store`: the members' shared lease store table.
fn config(interface: &str, i: usize, api: &str, dir: &std::path::Path, store: &str) -> String {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "ironic-members-operator-token\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
takeover_secs = {TAKEOVER_SECS}
[tftp]
enabled = false
[http]
listen = "{host}:8080"
token_file = "{tokens}"
[health]
interval_ms = 300
timeout_ms = 250
dead_after = 2
[owner]
members = "ironic"
self = "{conductor}"
member_http_url = "http://{{host}}:8080"
member_conductor_url = "http://{{host}}:8088"
members_refresh_secs = 1
{secret}[owner.ironic]
url = "{api}"
refresh_secs = 2
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.4.255"]
lease_time = 3600
# The storm's machines are unknown to Ironic and fill most of every share: no part of
# it is kept back for enrolled machines (the default with Ironic), which this test
# does not measure (tests/dhcp/starvation.rs does).
reserve_for_known = 0
{store}"#,
        host = host(i),
        tokens = tokens.display(),
        conductor = conductor_of(i),
        secret = common::member_secret_line(),
    )
}

/// The lab: Ironic, the segment and the members, by index (None: not running).
/// Dropped in field order: the members, then the shared store's database server, then
/// Ironic (stopped from inside the namespace), then the state directories, then the
/// namespaces.
struct Cluster {
    servers: Vec<Option<Server>>,
    _db: DbServer,
    store: String,
    lab: IronicLab,
    dirs: Vec<tempfile::TempDir>,
    enrolled: Vec<[u8; 6]>,
    seg: Segment,
}

impl Cluster {
    fn metric(&self, i: usize, name: &str) -> Option<u64> {
        self.seg
            .metrics(host(i))
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    fn running(&self) -> Vec<usize> {
        (0..MEMBERS)
            .filter(|&i| self.servers[i].is_some())
            .collect()
    }

    /// Starts member `i` on an empty store.
    fn start(&mut self, i: usize) {
        self.dirs[i] = tempfile::tempdir().unwrap();
        let config = config(
            &self.seg.member_ifs[i],
            i,
            &self.lab.api_url(),
            self.dirs[i].path(),
            &self.store,
        );
        self.servers[i] = Some(Server::start(
            &self.seg.servers,
            self.dirs[i].path(),
            &config,
        ));
    }

    /// Waits until every running member lists exactly `members` and reaches the shared
    /// store.
    fn wait_members(&self, members: &[usize]) {
        let n = members.len() as u64;
        wait_until(
            &format!("members {members:?} listed and the shared store up everywhere"),
            Duration::from_secs(60),
            || {
                members.iter().all(|&i| {
                    self.metric(i, "shardboot_members") == Some(n)
                        && self.metric(i, "shardboot_shared_store_up") == Some(1)
                })
            },
        );
    }

    /// Which member stands beside each enrolled machine's conductor, as Ironic reports
    /// it now.
    fn expected(&self) -> Vec<([u8; 6], usize)> {
        let by_conductor: HashMap<String, usize> =
            (0..MEMBERS).map(|i| (conductor_of(i), i)).collect();
        self.lab
            .owners()
            .into_iter()
            .map(|(mac, conductor)| {
                let mac = mac.parse::<MacAddr>().unwrap().0;
                let conductor = conductor.unwrap_or_else(|| panic!("{mac:02x?}: no conductor"));
                (mac, by_conductor[&conductor])
            })
            .collect()
    }

    /// Waits until every enrolled machine's DISCOVER is answered by the member beside
    /// its conductor, and by no other; returns how long that took.
    fn wait_routing(&self, machines: &mut Machines, when: &str) -> Duration {
        let expected = self.expected();
        let macs: Vec<[u8; 6]> = expected.iter().map(|(m, _)| *m).collect();
        let started = Instant::now();
        let mut last = String::new();
        let mut last_macs: Vec<[u8; 6]> = Vec::new();
        while started.elapsed() < FOLLOW_LIMIT {
            let seen = machines
                .client
                .discover(&macs, 0, Duration::from_millis(800));
            let wrong: Vec<String> = expected
                .iter()
                .zip(&seen)
                .filter_map(|((mac, beside), s)| {
                    let offers: Vec<Ipv4Addr> = s
                        .iter()
                        .filter(|x| x.kind == MessageType::Offer)
                        .map(|x| x.server)
                        .collect();
                    (offers != [member_ip(*beside)]).then(|| {
                        format!(
                            "{mac:02x?}: want {}, offered by {offers:?}",
                            member_ip(*beside)
                        )
                    })
                })
                .collect();
            if wrong.is_empty() {
                return started.elapsed();
            }
            last_macs = expected
                .iter()
                .zip(&seen)
                .filter(|((_, beside), s)| {
                    !s.iter()
                        .filter(|x| x.kind == MessageType::Offer)
                        .map(|x| x.server)
                        .eq([member_ip(*beside)])
                })
                .map(|((m, _), _)| *m)
                .collect();
            last = wrong.join("\n");
        }
        // What each member did with the first few (its timeline, `shardboot trace`):
        // which member heard them, what it decided and why.
        for mac in last_macs.iter().take(3) {
            eprintln!("{}", self.timelines(mac));
        }
        panic!("{when}: machines not answered by the member beside their conductor:\n{last}");
    }

    /// Every running member's timeline of `mac` (`GET /v1/machines/{mac}/events`).
    fn timelines(&self, mac: &[u8; 6]) -> String {
        let mac = MacAddr(*mac);
        let mut out = String::new();
        for i in self.running() {
            let body = self
                .seg
                .servers
                .command("curl")
                .args(["-s", "-m", "2", "--noproxy", "*", "-H"])
                .arg("Authorization: Bearer ironic-members-operator-token")
                .arg(format!("http://{}:8080/v1/machines/{mac}/events", host(i)))
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            out.push_str(&format!("{mac} as {} saw it: {body}\n", conductor_of(i)));
        }
        out
    }

    /// Fails on machines that lost their address, with what the members' logs say
    /// about them (with SB_TEST_LOG=shardboot::dhcp=debug, every decision).
    fn assert_none_lost(&self, lost: &Lost) {
        if lost.is_empty() {
            return;
        }
        let macs: Vec<String> = lost.iter().map(|(m, _)| MacAddr(*m).to_string()).collect();
        for i in self.running() {
            let log = self.servers[i].as_ref().unwrap().log_text();
            let keep = std::env::temp_dir().join(format!("sb-ironic-members-{i}.log"));
            std::fs::write(&keep, &log).unwrap();
            eprintln!("{}'s log: {}", conductor_of(i), keep.display());
            for line in log
                .lines()
                .filter(|l| {
                    l.contains("WARN") || l.contains("ERROR") || macs.iter().any(|m| l.contains(m))
                })
                .take(200)
            {
                eprintln!("{}: {line}", conductor_of(i));
            }
        }
        let shown: Vec<&String> = lost.iter().map(|(_, d)| d).take(20).collect();
        panic!("{} machines lost their address: {shown:#?}", lost.len());
    }

    /// The running members' stores: every live machine's lease on its address in each,
    /// and no address bound to two machines in any two.
    fn check_stores(&self, machines: &Machines, when: &str) {
        let mut everywhere: HashMap<Ipv4Addr, (String, usize)> = HashMap::new();
        for i in self.running() {
            let held = bound_leases(&self.servers[i].as_ref().unwrap().leases_json());
            for (ip, mac) in &held {
                let (first, by) = everywhere.entry(*ip).or_insert((mac.clone(), i));
                assert_eq!(
                    first,
                    mac,
                    "{when}: {ip} bound to {first} in {}'s store and to {mac} in {}'s",
                    conductor_of(*by),
                    conductor_of(i)
                );
            }
            for (m, ip) in &machines.live {
                let want = MacAddr(*m).to_string();
                assert_eq!(
                    held.get(ip),
                    Some(&want),
                    "{when}: {ip} in {}'s store",
                    conductor_of(i)
                );
            }
        }
    }
}

/// Machines arrive and those holding leases rebind while `event` runs; returns the
/// machines that lost their address.
fn under_storm(machines: &mut Machines, round: usize, what: &str, event: impl FnOnce()) -> Lost {
    std::thread::scope(|s| {
        let storm = s.spawn(|| {
            machines.arrive(ARRIVING, round);
            let (_, lost) = machines.reconfirm_all(Reconfirm::Rebind, what);
            machines.arrive(ARRIVING, round);
            lost
        });
        event();
        storm.join().unwrap()
    })
}

/// After a step: everyone rebinds on its own address, the stores agree, and the
/// enrolled machines are answered beside their conductors.
fn check(cluster: &Cluster, machines: &mut Machines, what: &str) -> Duration {
    let (by, lost) = machines.reconfirm_all(Reconfirm::Rebind, what);
    cluster.assert_none_lost(&lost);
    machines.check(what);
    for server in by.keys() {
        let i = (0..MEMBERS).find(|&i| member_ip(i) == *server).unwrap();
        assert!(
            cluster.servers[i].is_some(),
            "{what}: a stopped member answered"
        );
    }
    cluster.check_stores(machines, what);
    let routed = cluster.wait_routing(machines, what);
    eprintln!(
        "{what}: {} ACKed, {} unanswered so far; rebinds answered by {by:?}; every enrolled \
         machine answered beside its conductor {:.1} s after Ironic reported the change",
        machines.acked,
        machines.unanswered,
        routed.as_secs_f64()
    );
    machines.release_oldest(LIVE);
    routed
}

#[test]
fn members_follow_ironic_through_join_leave_crash_replacement_and_rolling_restart() {
    require_root!();
    let _turn = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let addrs: Vec<String> = (0..MEMBERS)
        .map(|i| format!("{}/16", member_ip(i)))
        .collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    for range in ["198.18.1.0/24", "198.18.2.0/23", "198.18.4.0/24"] {
        seg.clients_take_unicast_to(range);
    }
    let lab = IronicLab::start_in(Some(&seg.servers.name), &["--conductors", "3"]);
    let enrolled: Vec<[u8; 6]> = lab
        .run(&["enroll"], &[&ENROLLED.to_string()])
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["mac"].as_str().unwrap().parse::<MacAddr>().unwrap().0
        })
        .collect();
    assert_eq!(enrolled.len(), ENROLLED);
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let mut cluster = Cluster {
        servers: (0..MEMBERS).map(|_| None).collect(),
        _db: db,
        store,
        lab,
        dirs: (0..MEMBERS).map(|_| tempfile::tempdir().unwrap()).collect(),
        enrolled,
        seg,
    };
    for i in 0..3 {
        cluster.start(i);
    }
    cluster.wait_members(&[0, 1, 2]);
    wait_until("every member read Ironic's ports", FOLLOW_LIMIT, || {
        (0..3).all(|i| {
            cluster.metric(i, "shardboot_owner_ironic_snapshot_macs") == Some(ENROLLED as u64)
        })
    });
    let mut machines = Machines::new(cluster.seg.client(), 1, TAKEOVER_SECS);
    machines.arrive(300, 0);
    check(&cluster, &mut machines, "three conductors");

    // 1. A fourth conductor joins: its member starts first, on an empty store (it reads
    //    every binding from the shared store and hands out nothing until Ironic lists
    //    its conductor), then the conductor; Ironic gives it nodes.
    let lost = under_storm(&mut machines, 1, "d joins", || {
        cluster.start(3);
        cluster.lab.start_conductor(4);
    });
    cluster.assert_none_lost(&lost);
    assert!(cluster.servers[3]
        .as_ref()
        .unwrap()
        .log_text()
        .contains("bindings read from the shared lease store"));
    cluster.wait_members(&[0, 1, 2, 3]);
    wait_until(
        "Ironic gives conductor 4 nodes",
        Duration::from_secs(60),
        || cluster.expected().iter().any(|(_, i)| *i == 3),
    );
    check(&cluster, &mut machines, "after d joined");

    // 2. Conductor 3 stops gracefully (it deregisters; Ironic moves its nodes), then its
    //    member stops, as a drained pod does.
    let lost = under_storm(&mut machines, 2, "c's conductor stops", || {
        cluster.lab.stop_conductor(3, false);
    });
    cluster.assert_none_lost(&lost);
    cluster.wait_members(&[0, 1, 3]);
    cluster.servers[2].take().unwrap().stop();
    check(&cluster, &mut machines, "after c left");

    // 3. Member d and its conductor are SIGKILLed together: the others stop waiting for
    //    d at once (health probes), and Ironic moves d's nodes after its heartbeat
    //    timeout.
    let killed = std::cell::Cell::new(None);
    let lost = under_storm(&mut machines, 3, "d and its conductor killed", || {
        std::thread::sleep(Duration::from_millis(300));
        cluster.servers[3].as_mut().unwrap().kill9();
        killed.set(Some(Instant::now()));
        cluster.lab.stop_conductor(4, true);
    });
    cluster.assert_none_lost(&lost);
    // Ironic has just reported d's nodes on other conductors: DHCP follows at once.
    let moved = killed.get().unwrap().elapsed();
    let routed = cluster.wait_routing(&mut machines, "d's nodes moved");
    eprintln!(
        "d SIGKILLed with its conductor: Ironic reported its nodes moved {:.1} s later \
         (heartbeat timeout 10 s); every enrolled machine was answered beside its new \
         conductor by the first DISCOVER round after that, which ended {:.1} s later",
        moved.as_secs_f64(),
        routed.as_secs_f64()
    );
    cluster.servers[3] = None;
    cluster.wait_members(&[0, 1]);
    check(&cluster, &mut machines, "after d was killed");

    // 4. A replacement takes d's place: new conductor name (127.0.0.5:8093), new member
    //    address, empty store.
    let lost = under_storm(&mut machines, 4, "e replaces d", || {
        cluster.start(4);
        cluster.lab.start_conductor(5);
    });
    cluster.assert_none_lost(&lost);
    assert!(cluster.servers[4]
        .as_ref()
        .unwrap()
        .log_text()
        .contains("bindings read from the shared lease store"));
    cluster.wait_members(&[0, 1, 4]);
    wait_until(
        "Ironic gives conductor 5 nodes",
        Duration::from_secs(60),
        || cluster.expected().iter().any(|(_, i)| *i == 4),
    );
    check(&cluster, &mut machines, "after e replaced d");

    // 5. A rolling restart of a, b and e, one at a time, each on its own store.
    for (k, i) in [0usize, 1, 4].into_iter().enumerate() {
        let lost = under_storm(&mut machines, 5 + k, "rolling restart", || {
            std::thread::sleep(Duration::from_millis(200));
            let server = cluster.servers[i].as_mut().unwrap();
            server.stop();
            server.restart();
        });
        cluster.assert_none_lost(&lost);
        cluster.wait_members(&[0, 1, 4]);
        check(
            &cluster,
            &mut machines,
            &format!("after {} restarted", conductor_of(i)),
        );
    }
    eprintln!(
        "{} leases ACKed in all, {} machines unanswered after 4 tries",
        machines.acked, machines.unanswered
    );
    assert!(
        machines.unanswered * 20 < machines.acked,
        "{} unanswered of {}",
        machines.unanswered,
        machines.acked
    );
    assert_eq!(cluster.enrolled.len(), ENROLLED);
    // Conflict probes ran on inherited addresses; nothing on the segment holds an
    // address without a lease, so none may find one in use.
    for i in cluster.running() {
        let probes = cluster.metric(i, "shardboot_dhcp_probes_total");
        let conflicts = cluster.metric(i, "shardboot_dhcp_probe_conflicts_total");
        eprintln!(
            "{}: {probes:?} conflict probes since its last start",
            conductor_of(i)
        );
        assert_eq!(conflicts, Some(0), "{}", conductor_of(i));
    }
}
