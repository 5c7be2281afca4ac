//! Migrating from dnsmasq without a conflict (issue 31): a single instance probes every
//! address its store never saw before offering it, as dnsmasq pings first, so a host
//! already on an address is never given away; `shardboot leases import --dnsmasq`
//! brings dnsmasq's bindings along, and every imported machine gets its address back by
//! INIT-REBOOT; a bad line imports nothing; export and import round-trip.
//!
//! Every packet stays on a segment the test builds in namespaces of its own.

use crate::common;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::segment::{Seen, Segment};
use common::Server;
use dhcproto::v4::MessageType;

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);
const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 0);
const RANGE_LEN: u32 = 16;

fn range_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(RANGE_START) + i)
}

fn config(interface: &str, extra: &str) -> String {
    config_http(interface, extra, "")
}

/// [`config`] with `http` lines added to its `[http]` table.
fn config_http(interface: &str, extra: &str, http: &str) -> String {
    let last = range_ip(RANGE_LEN - 1);
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
{extra}
[tftp]
enabled = false
[http]
listen = "{SERVER}:8080"
{http}
[[subnet]]
network = "198.18.0.0/16"
ranges = ["{RANGE_START} - {last}"]
lease_time = 3600
"#
    )
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x31, b[0], b[1], b[2], b[3]]
}

fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `shardboot ARGS --config CONFIG --state-dir STATE` (offline commands need no
/// namespace: they only read and write files).
fn shardboot(config: &Path, state: &Path, args: &[&str]) -> Output {
    shardboot_in(None, config, state, args)
}

/// [`shardboot`] inside `ns` when given (to reach a server's operator API there).
fn shardboot_in(ns: Option<&common::Netns>, config: &Path, state: &Path, args: &[&str]) -> Output {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = ns.command(common::shardboot_bin().to_str().unwrap());
            c.args(args);
            c
        }
        None => {
            let mut c = Command::new(common::shardboot_bin());
            c.args(args);
            c
        }
    };
    cmd.arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .env_remove("SHARDBOOT_CONFIG")
        .output()
        .unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn offers(seen: &[Seen]) -> Vec<Seen> {
    seen.iter()
        .filter(|s| s.kind == MessageType::Offer)
        .copied()
        .collect()
}

#[test]
fn a_squatter_on_an_address_the_store_never_saw_is_never_offered() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16"]);
    let dir = tempfile::tempdir().unwrap();
    // The default probe (200 ms): what a single instance does out of the box.
    let server = Server::start(&seg.servers, dir.path(), &config(&seg.member_ifs[0], ""));
    // A host already using an address of the range, with no lease anywhere (configured
    // by hand, or given by dnsmasq and never imported).
    let squatted = range_ip(3);
    let _squatter = seg.host(&format!("{squatted}/16"));
    let mut client = seg.client();

    let many: Vec<[u8; 6]> = (1..=RANGE_LEN + 4).map(mac).collect();
    let seen = client.discover(&many, 0, Duration::from_secs(5));
    let mut given = HashSet::new();
    for (m, s) in many.iter().zip(&seen) {
        let o = offers(s);
        assert!(o.len() <= 1, "{m:02x?}: {s:?}");
        if let Some(o) = o.first() {
            assert_ne!(
                o.yiaddr, squatted,
                "{m:02x?} was offered the squatter's address"
            );
            assert!(given.insert(o.yiaddr), "{} offered twice", o.yiaddr);
        }
    }
    assert_eq!(
        given.len(),
        RANGE_LEN as usize - 1,
        "every address but the squatter's: {given:?}\n{}",
        server.log_text()
    );
    let metric = |name| seg.metric(SERVER, name);
    assert_eq!(metric("shardboot_dhcp_probe_conflicts_total"), Some(1));
    // Each address probed once, before its first offer.
    assert_eq!(
        metric("shardboot_dhcp_probes_total"),
        Some(u64::from(RANGE_LEN))
    );
    assert!(
        server.log_text().contains("answered a probe"),
        "{}",
        server.log_text()
    );

    // Machines that had an offer ask again: their offers stand, nothing is probed
    // again. (The machine whose probe found the squatter found no address left.)
    let offered: Vec<([u8; 6], Ipv4Addr)> = many
        .iter()
        .zip(&seen)
        .filter_map(|(m, s)| Some((*m, offers(s).first()?.yiaddr)))
        .take(4)
        .collect();
    let macs: Vec<[u8; 6]> = offered.iter().map(|(m, _)| *m).collect();
    let again = client.discover(&macs, 0, Duration::from_secs(2));
    for ((m, ip), s) in offered.iter().zip(&again) {
        assert_eq!(
            offers(s).iter().map(|o| o.yiaddr).collect::<Vec<_>>(),
            vec![*ip],
            "{m:02x?}"
        );
    }
    assert_eq!(
        metric("shardboot_dhcp_probes_total"),
        Some(u64::from(RANGE_LEN))
    );
}

#[test]
fn without_cap_net_raw_the_probe_uses_the_unprivileged_icmp_socket() {
    require_root!();
    if Command::new("setpriv").arg("--version").output().is_err() {
        common::skip_or_fail("tools", "needs setpriv (util-linux) to drop CAP_NET_RAW");
        return;
    }
    let seg = Segment::new(&["198.18.0.11/16"]);
    // The servers' namespace lets group 0 open ICMP datagram sockets (the sysctl is
    // per namespace); the server runs without CAP_NET_RAW, so no raw socket.
    seg.servers
        .command("sysctl")
        .args(["-qw", "net.ipv4.ping_group_range=0 0"])
        .status()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_wrapped(
        &seg.servers,
        dir.path(),
        &config(&seg.member_ifs[0], ""),
        &["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw"],
    );
    let squatted = range_ip(1);
    let _squatter = seg.host(&format!("{squatted}/16"));
    let mut client = seg.client();
    let macs: Vec<[u8; 6]> = (1..=4).map(mac).collect();
    let seen = client.discover(&macs, 0, Duration::from_secs(3));
    let given: Vec<Ipv4Addr> = seen
        .iter()
        .filter_map(|s| Some(offers(s).first()?.yiaddr))
        .collect();
    assert!(
        !given.contains(&squatted),
        "{given:?}\n{}",
        server.log_text()
    );
    assert_eq!(given.len(), macs.len(), "{seen:?}\n{}", server.log_text());
    assert_eq!(
        seg.metric(SERVER, "shardboot_dhcp_probe_conflicts_total"),
        Some(1),
        "{}",
        server.log_text()
    );
    assert!(
        server
            .log_text()
            .contains("conflict probes on an unprivileged ICMP datagram socket"),
        "{}",
        server.log_text()
    );
}

#[test]
fn conflict_probes_off_offer_at_once() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16"]);
    let dir = tempfile::tempdir().unwrap();
    let _server = Server::start(
        &seg.servers,
        dir.path(),
        &config(&seg.member_ifs[0], "conflict_probe_ms = 0"),
    );
    let mut client = seg.client();
    let (seen, _) = client
        .first_offer(&mac(1), 0, Duration::from_secs(2))
        .expect("an offer");
    assert_eq!(seen.yiaddr, RANGE_START);
    assert_eq!(seg.metric(SERVER, "shardboot_dhcp_probes_total"), Some(0));
}

#[test]
fn dnsmasq_leases_imported_are_acked_back_by_init_reboot() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16"]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "migrate-test-token-0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // The operator API behind a token, for the export while the server runs.
    let cfg_text = config_http(
        &seg.member_ifs[0],
        "",
        &format!(
            "insecure_operator_api = true\ntoken_file = \"{}\"",
            tokens.display()
        ),
    );
    let cfg = dir.path().join("import.toml");
    std::fs::write(&cfg, &cfg_text).unwrap();
    let state = dir.path().join("state");

    // dnsmasq's file as ironic-image leaves it: eight live leases (one infinite, one
    // with a client identifier), one expired, and a DHCPv6 section.
    let end = unix_now() + 3000;
    let imported: Vec<([u8; 6], Ipv4Addr)> =
        (0..8).map(|i| (mac(100 + i), range_ip(2 + i))).collect();
    let mut file = String::new();
    for (i, (m, ip)) in imported.iter().enumerate() {
        let expiry = if i == 5 { 0 } else { end };
        let id = if i == 2 { "01:02:31:00:00:00:66" } else { "*" };
        file.push_str(&format!("{expiry} {} {ip} node-{i} {id}\n", mac_text(m)));
    }
    file.push_str(&format!(
        "1000 {} {} gone *\n",
        mac_text(&mac(99)),
        range_ip(12)
    ));
    file.push_str("duid 00:01:00:01:2c:5f:1b:7e:52:54:00:00:00:01\n");
    file.push_str(&format!("{end} 1131 fd00:1:2::13 node-1 00:04:aa:bb\n"));
    let leases = dir.path().join("dnsmasq.leases");
    std::fs::write(&leases, &file).unwrap();

    let out = shardboot(
        &cfg,
        &state,
        &["leases", "import", "--dnsmasq", leases.to_str().unwrap()],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    assert!(stdout.contains("imported 8 leases"), "{stdout}");
    assert!(stdout.contains("1 expired: skipped"), "{stdout}");
    assert!(stdout.contains("1 DHCPv6 lines: skipped"), "{stdout}");
    assert!(stdout.contains("1 infinite"), "{stdout}");

    // Before the server runs (its ACKs rewrite each lease from the client's REQUEST):
    // export, import into an empty store, export again: the same lines, names and
    // client identifiers included.
    let first = shardboot(&cfg, &state, &["leases", "export", "--dnsmasq"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let exported = text(&first.stdout);
    for (m, ip) in &imported {
        assert!(
            exported.contains(&format!(" {} {ip} ", mac_text(m))),
            "{exported}"
        );
    }
    assert!(exported.contains(" node-0 *\n"), "{exported}");
    assert!(
        exported.contains(" node-2 01:02:31:00:00:00:66\n"),
        "{exported}"
    );
    let copy = dir.path().join("exported.leases");
    let written = shardboot(
        &cfg,
        &state,
        &[
            "leases",
            "export",
            "--dnsmasq",
            "--output",
            copy.to_str().unwrap(),
        ],
    );
    assert!(written.status.success(), "{}", text(&written.stderr));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), exported);
    let other = dir.path().join("state2");
    let back = shardboot(
        &cfg,
        &other,
        &["leases", "import", "--dnsmasq", copy.to_str().unwrap()],
    );
    assert!(back.status.success(), "{}", text(&back.stderr));
    let again = shardboot(&cfg, &other, &["leases", "export", "--dnsmasq"]);
    assert_eq!(text(&again.stdout), exported);

    let mut server = Server::start_with_state(&seg.servers, dir.path(), &cfg_text, &state);
    // The running server holds the store: an import says so and writes nothing.
    let out = shardboot(
        &cfg,
        &state,
        &["leases", "import", "--dnsmasq", leases.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("locked by a running `shardboot serve`"),
        "{}",
        text(&out.stderr)
    );

    // Every imported machine, rebooting, asks for its address without a server id
    // (RFC 2131 §4.3.2 INIT-REBOOT) and is ACKed it.
    let mut client = seg.client();
    let seen = client.init_reboot(&imported, Duration::from_secs(3));
    for ((m, ip), s) in imported.iter().zip(&seen) {
        assert_eq!(
            s.iter().map(|x| (x.kind, x.yiaddr)).collect::<Vec<_>>(),
            vec![(MessageType::Ack, *ip)],
            "{m:02x?}\n{}",
            server.log_text()
        );
    }
    // A new machine gets none of them; the imported addresses are not probed (the
    // store has seen them).
    let fresh = client.discover(&[mac(500)], 0, Duration::from_secs(2));
    let o = offers(&fresh[0]);
    assert_eq!(o.len(), 1, "{fresh:?}");
    assert!(imported.iter().all(|(_, ip)| *ip != o[0].yiaddr), "{o:?}");
    assert_eq!(seg.metric(SERVER, "shardboot_dhcp_probes_total"), Some(1));
    // While it runs, the export asks its operator API (client identifiers unknown
    // there: `*`).
    let live = shardboot_in(
        Some(&seg.servers),
        &cfg,
        &state,
        &["leases", "export", "--dnsmasq"],
    );
    assert!(live.status.success(), "{}", text(&live.stderr));
    let live = text(&live.stdout);
    assert_eq!(live.lines().count(), imported.len(), "{live}");
    for (m, ip) in &imported {
        assert!(
            live.contains(&format!(" {} {ip} * *\n", mac_text(m))),
            "{live}"
        );
    }
    server.stop();

    // The whole store as JSON (the leases as ACKed since): restored
    // into an empty store, it exports the same document; into a full one, refused.
    let doc = |state: &Path| {
        let out = shardboot(&cfg, state, &["leases", "export", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_object_mut().unwrap().remove("exported_at");
        v
    };
    let backup = dir.path().join("store.json");
    let saved = shardboot(
        &cfg,
        &state,
        &["leases", "export", "--json", "-o", backup.to_str().unwrap()],
    );
    assert!(saved.status.success(), "{}", text(&saved.stderr));
    let restored = dir.path().join("state3");
    let out = shardboot(
        &cfg,
        &restored,
        &["leases", "import", "--json", backup.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let original = doc(&state);
    assert_eq!(original["leases"].as_array().unwrap().len(), imported.len());
    assert_eq!(doc(&restored), original);
    let out = shardboot(
        &cfg,
        &restored,
        &["leases", "import", "--json", backup.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("restores into an empty store"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_bad_lease_line_is_named_and_nothing_is_imported() {
    // Offline files only: no namespace, no root.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("shardboot.toml");
    std::fs::write(&cfg, config("lo", "")).unwrap();
    let state = dir.path().join("state");
    let end = unix_now() + 3000;
    let good = |n: u32| format!("{end} {} {} node-{n} *\n", mac_text(&mac(n)), range_ip(n));
    let cases = [
        (
            format!("{end} {} {}\n", mac_text(&mac(9)), range_ip(9)),
            "line 3: expected 5 fields",
        ),
        (
            format!("{end} {} 10.0.0.9 * *\n", mac_text(&mac(9))),
            "line 3: 10.0.0.9 is on no configured [[subnet]]",
        ),
        (
            format!("{end} {} 198.18.2.9 * *\n", mac_text(&mac(9))),
            "line 3: 198.18.2.9 is outside the subnet's ranges",
        ),
        (
            format!("{end} {} {} * *\n", mac_text(&mac(9)), range_ip(1)),
            "line 3: address 198.18.1.1 is also leased on line 1",
        ),
        (
            format!("{end} zz:{} {} * *\n", &mac_text(&mac(9))[3..], range_ip(9)),
            "line 3: hardware address",
        ),
    ];
    for (bad, want) in cases {
        let file = dir.path().join("dnsmasq.leases");
        std::fs::write(&file, format!("{}{}{bad}{}", good(1), good(2), good(4))).unwrap();
        let out = shardboot(
            &cfg,
            &state,
            &["leases", "import", "--dnsmasq", file.to_str().unwrap()],
        );
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{bad:?} was imported");
        assert!(stderr.contains(want), "{bad:?}: {stderr}");
        assert!(stderr.contains("nothing imported"), "{stderr}");
        let listed = shardboot(&cfg, &state, &["leases", "--json"]);
        assert_eq!(
            text(&listed.stdout).trim(),
            "[]",
            "{bad:?} left leases behind"
        );
    }
}

#[test]
fn with_a_shared_store_imported_leases_reach_the_database_at_the_next_start() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16"]);
    let mut db = common::db::DbServer::start(common::db::Kind::Postgres, Some(&seg.servers));
    let cfg_text = config(&seg.member_ifs[0], "") + &db.store_table();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("import.toml");
    std::fs::write(&cfg, &cfg_text).unwrap();
    let state = dir.path().join("state");
    let end = unix_now() + 3000;
    let imported: Vec<([u8; 6], Ipv4Addr)> =
        (0..4).map(|i| (mac(200 + i), range_ip(5 + i))).collect();
    let file: String = imported
        .iter()
        .map(|(m, ip)| format!("{end} {} {ip} * *\n", mac_text(m)))
        .collect();
    let leases = dir.path().join("dnsmasq.leases");
    std::fs::write(&leases, file).unwrap();
    let out = shardboot(
        &cfg,
        &state,
        &["leases", "import", "--dnsmasq", leases.to_str().unwrap()],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("imported 4 leases"), "{stdout}");
    assert!(
        stdout.contains("the database takes these bindings"),
        "{stdout}"
    );

    // The member starts and, before it serves, writes them to the database (the bound
    // v4 rows, addresses as numbers); then ACKs them by INIT-REBOOT.
    let server = Server::start_with_state(&seg.servers, dir.path(), &cfg_text, &state);
    let rows = db.admin_in(
        Some("sb1"),
        "SELECT addr FROM shardboot_lease4 WHERE state = 1 ORDER BY addr",
    );
    assert!(rows.status.success(), "{}", text(&rows.stderr));
    let in_db: Vec<Ipv4Addr> = text(&rows.stdout)
        .lines()
        .filter_map(|l| Some(Ipv4Addr::from(l.trim().parse::<u32>().ok()?)))
        .collect();
    assert_eq!(
        in_db,
        imported.iter().map(|(_, ip)| *ip).collect::<Vec<_>>(),
        "{}",
        server.log_text()
    );
    let mut client = seg.client();
    let seen = client.init_reboot(&imported, Duration::from_secs(3));
    for ((m, ip), s) in imported.iter().zip(&seen) {
        assert_eq!(
            s.iter().map(|x| (x.kind, x.yiaddr)).collect::<Vec<_>>(),
            vec![(MessageType::Ack, *ip)],
            "{m:02x?}\n{}",
            server.log_text()
        );
    }
}
