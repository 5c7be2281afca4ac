//! The timeline that lasts and the boot board, against `shardboot serve` in a namespace
//! with a real DHCP client: a machine's history survives a crash and restart; a flood
//! of random MACs leaves an enrolled machine's events alone; `/v1/board`, `shardboot
//! board --once` and `/ui` in headless Chromium show a boot storm of thousands of
//! machines, stuck ones first, one page at a time, with the member's pool fill over
//! the last hour as a chart, and nothing without the token.

use crate::common;

use std::time::{Duration, Instant};

use common::api_lab::{self, Api};
use common::Netns;
use shardboot::mac::MacAddr;
use shardboot::timeline::{disk, Report, Source, Timeline};

const TOKEN: &str = "timeline-test-token-0123456789";

fn events_of(api: &Api<'_>, mac: &str) -> Vec<serde_json::Value> {
    api.json("GET", &format!("/v1/machines/{mac}/events"), None)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn whats(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["what"].as_str().unwrap(),
                e["outcome"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_machines_history_survives_a_crash_and_restart_and_the_board_shows_it() {
    require_root!();
    let (lab, dir, mut server, mut client) = api_lab::start(TOKEN, "");
    let api = Api {
        lab: &lab,
        token: TOKEN,
    };
    let mac = [0x52, 0x54, 0, 0xdd, 0, 1];
    let seen = client.discover(&[mac], 0, Duration::from_millis(800));
    let offer = seen[0][0];
    let acked = client.request(
        &[(mac, offer.server, offer.yiaddr)],
        Duration::from_millis(800),
    );
    assert!(!acked[0].is_empty(), "no ACK");
    let text = "52:54:00:dd:00:01";
    let before = events_of(&api, text);
    // The first DISCOVER may wait for a conflict probe (`DISCOVER probe`) first.
    let seen_steps = whats(&before);
    assert!(
        seen_steps.ends_with(&["DISCOVER offer".into(), "REQUEST ack".into()]),
        "{seen_steps:?}"
    );
    assert!(before.iter().all(|e| e["member"] == "local"));

    // Killed (no shutdown flush) after the writer's interval: the history is on disk.
    std::thread::sleep(Duration::from_millis(1_500));
    server.restart();
    let after = events_of(&api, text);
    assert_eq!(
        after, before,
        "the same events, times and numbers after a restart"
    );

    // The board: bound, known, with the address given; the member named.
    let board = api.json("GET", "/v1/board", None);
    assert_eq!(board["member"], "local");
    assert_eq!(board["seen"], 1);
    let m = &board["machines"][0];
    assert_eq!(m["mac"], text);
    assert_eq!(m["stage"], "bound");
    assert_eq!(m["known"], true);
    assert_eq!(m["ip"], offer.yiaddr.to_string());
    assert_eq!(m["members"], serde_json::json!(["local"]));
    assert_eq!(board["stages"]["bound"]["machines"], 1);
    // The pool fill of the moment closes the member's hour of samples: the address
    // leased is in use (once the DHCP loop has published its pools).
    let in_use_now = || {
        let b = api.json("GET", "/v1/board", None);
        b["members"][0]["pool_fill"]
            .as_array()
            .and_then(|f| f.last())
            .and_then(|s| s["in_use"].as_u64())
    };
    common::members::wait_until(
        "the pool fill counts the lease",
        Duration::from_secs(10),
        || in_use_now().is_some_and(|n| n >= 1),
    );

    // The same view in a terminal.
    let out = lab
        .server
        .command(common::shardboot_bin().to_str().unwrap())
        .args(["board", "--once", "--server", api_lab::API, "--token-file"])
        .arg(dir.path().join("tokens"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.starts_with("shardboot board: member local, "),
        "{printed}"
    );
    assert!(
        printed.contains("1 machines seen in the last 1h00m, 0 stuck"),
        "{printed}"
    );
    let line = printed
        .lines()
        .find(|l| l.starts_with(text))
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(
        line.contains("bound") && line.contains(&offer.yiaddr.to_string()),
        "{line}"
    );
    assert!(printed.ends_with("shown 1-1 of 1 matching\n"), "{printed}");
    // `trace --once` prints the same history, each event with its member.
    let out = lab
        .server
        .command(common::shardboot_bin().to_str().unwrap())
        .args([
            "trace",
            text,
            "--once",
            "--server",
            api_lab::API,
            "--token-file",
        ])
        .arg(dir.path().join("tokens"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        printed
            .lines()
            .filter(|l| l.contains("[local] dhcp"))
            .count(),
        seen_steps.len(),
        "{printed}"
    );
    assert!(
        printed.contains("REQUEST                    ack"),
        "{printed}"
    );
}

#[test]
fn a_flood_of_random_macs_leaves_an_enrolled_machines_events_alone() {
    require_root!();
    // Small budgets, so the flood is many times what strangers may keep.
    let (lab, _dir, _server, _client) = api_lab::start_with(
        TOKEN,
        "",
        "\n[timeline]\nknown_events = 200\nunknown_events = 100\n",
    );
    let api = Api {
        lab: &lab,
        token: TOKEN,
    };
    // Enrolled by a reservation; its only events are boot requests, which name a MAC
    // anyone can write, so only the enrollment keeps it.
    let enrolled = "52:54:00:dd:01:01";
    api.json(
        "PUT",
        &format!("/v1/reservations/{enrolled}"),
        Some(r#"{"ip":"192.0.2.150"}"#),
    );
    // The enrolled machines are read again every 5 s.
    std::thread::sleep(shardboot::timeline::run::ENROLLED_EVERY + Duration::from_secs(1));
    // Each `mac/name` asked for in turn, on one connection.
    let boot = |paths: &[String]| {
        let mut curl = lab.server.command("curl");
        curl.args(["-s", "-o", "/dev/null", "-m", "60", "--noproxy", "*"]);
        for p in paths {
            curl.arg(format!("{}/v1/boot/{p}", api_lab::API));
        }
        let status = curl.stdout(std::process::Stdio::null()).status().unwrap();
        assert!(status.success());
    };
    // The same request again at once is counted, not kept: two events of three requests.
    boot(&[
        format!("{enrolled}/boot.ipxe"),
        format!("{enrolled}/boot.ipxe"),
        format!("{enrolled}/other.ipxe"),
    ]);
    assert_eq!(events_of(&api, enrolled).len(), 2);
    let metrics = lab
        .server
        .command("curl")
        .args(["-s", "--noproxy", "*"])
        .arg(format!("{}/metrics", api_lab::API))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&metrics.stdout).contains("\nshardboot_timeline_repeats_total 1\n"),
        "{}",
        String::from_utf8_lossy(&metrics.stdout)
    );
    // 1,000 random MACs, ten times what strangers keep, one connection.
    let flood: Vec<String> = (0..1000u32)
        .map(|n| {
            format!(
                "{}/boot.ipxe",
                MacAddr([0x06, 0xee, 0, 0, (n >> 8) as u8, n as u8])
            )
        })
        .collect();
    let started = Instant::now();
    boot(&flood);
    let took = started.elapsed();
    let kept = events_of(&api, enrolled);
    assert_eq!(
        kept.len(),
        2,
        "the enrolled machine's events survived the flood"
    );
    assert!(kept.iter().all(|e| e["source"] == "http"));
    assert!(
        events_of(&api, &flood[0][..17]).is_empty(),
        "the flood's first went first"
    );
    assert_eq!(events_of(&api, &flood[999][..17]).len(), 1);
    // On the board: known, never given an address here, the boot request's answer.
    let board = api.json("GET", "/v1/board?q=52:54:00:dd:01:01", None);
    assert_eq!(board["matching"], 1);
    let m = &board["machines"][0];
    assert_eq!(
        (&m["known"], &m["stage"], &m["why"]),
        (&true.into(), &"silent".into(), &"not_found".into())
    );
    let strangers = api.json("GET", "/v1/board?limit=500", None)["seen"]
        .as_u64()
        .unwrap();
    assert!(strangers <= 101, "{strangers}");
    eprintln!("1000 boot requests with random MACs: {took:?}");
}

/// A boot storm's timeline, written where `shardboot serve` reads it back: `n`
/// machines, a seventh at each stage, some there for ten minutes (stuck).
fn seed_storm(state: &std::path::Path, n: u32) {
    let t = Timeline::default();
    let now = shardboot::clock::unix_now_ms();
    let steps: [(Source, &'static str, &'static str); 7] = [
        (Source::Dhcp, "DISCOVER", "silent"),
        (Source::Dhcp, "DISCOVER", "offer"),
        (Source::Dhcp, "REQUEST", "ack"),
        (Source::Tftp, "RRQ", "complete"),
        (Source::Http, "GET /boot.ipxe", "200"),
        (Source::Http, "GET /v1/boot/{mac}/{name}", "200"),
        (Source::Http, "GET /v1/boot/fallback.ipxe", "200"),
    ];
    for i in 0..n {
        let mac = MacAddr([0x52, 0x54, 0, 0xee, (i >> 8) as u8, i as u8]);
        let ip = std::net::Ipv4Addr::from(0xc000_0200 + (i % 250));
        let at = now - if i % 10 == 0 { 600_000 } else { 5_000 };
        let (source, what, outcome) = steps[(i % 7) as usize];
        let why = (outcome == "silent").then_some("pool_exhausted");
        // Every machine but the silent ones was offered an address first.
        if i % 7 > 0 {
            t.record_at(
                mac,
                Report {
                    source: Source::Dhcp,
                    what: "DISCOVER",
                    outcome: "offer",
                    why: None,
                    ip: Some(ip.into()),
                    detail: None,
                },
                at,
            );
        }
        t.record_at(
            mac,
            Report {
                source,
                what,
                outcome,
                why,
                ip: Some(ip.into()),
                detail: None,
            },
            at,
        );
    }
    let dir = state.join(disk::DIR);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("snapshot.jsonl"), disk::encode(&t.export())).unwrap();
}

/// The DOM after the page's script has run, and a screenshot of it in `shot`.
fn rendered(ns: &Netns, url: &str, shot: &std::path::Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| {
        ns.command("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--virtual-time-budget=8000",
                "--window-size=1400,2400",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(url)
            .output()
            .expect("chromium (tests/install-deps.sh installs it)")
    };
    let _ = run(&[format!("--screenshot={}", shot.display())]);
    let out = run(&["--dump-dom".to_string()]);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_board_at_a_boot_storm_of_three_thousand_machines_in_json_and_in_a_browser() {
    require_root!();
    let (lab, dir, _server, _client) =
        api_lab::start_seeded(TOKEN, "", "", |state| seed_storm(state, 3_000));
    let api = Api {
        lab: &lab,
        token: TOKEN,
    };
    let started = Instant::now();
    let board = api.json("GET", "/v1/board", None);
    let took = started.elapsed();
    assert_eq!(board["seen"], 3_000);
    // Every tenth machine has been in its stage ten minutes; those not at an end
    // (chained, fallback) are stuck: 300 less the ends' share.
    let stuck = board["stuck"].as_u64().unwrap();
    let ends = (0..3_000u32)
        .filter(|i| i % 10 == 0 && matches!(i % 7, 5 | 6))
        .count() as u64;
    assert_eq!(stuck, 300 - ends);
    assert_eq!(board["machines"].as_array().unwrap().len(), 100);
    assert!(board["machines"][0]["stuck"] == true && board["machines"][0]["known"] == true);
    assert_eq!(board["stages"]["silent"]["machines"], 429);
    let page2 = api.json("GET", "/v1/board?offset=100&limit=500", None);
    assert_eq!(page2["machines"].as_array().unwrap().len(), 500);
    assert_eq!(
        api.json("GET", "/v1/board?stuck=1&limit=500", None)["matching"],
        stuck
    );
    let one = api.json("GET", "/v1/board?q=52-54-00-ee-0b-b7", None);
    assert_eq!(one["matching"], 1);
    assert_eq!(one["machines"][0]["mac"], "52:54:00:ee:0b:b7");
    for bad in [
        "/v1/board?stage=nope",
        "/v1/board?q=%3Cscript%3E",
        "/v1/board?limit=x",
    ] {
        let (code, body) = api.call("GET", bad, Some(TOKEN), None);
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(!body.contains("script"), "{body}");
    }
    assert_eq!(api.call("GET", "/v1/board", None, None).0, 401);
    eprintln!("/v1/board over 3000 machines: {took:?} (curl in the namespace, first page)");

    let shots = dir.path();
    let dom = rendered(
        &lab.server,
        &format!("http://192.0.2.1:8080/ui#token={TOKEN}"),
        &shots.join("board.png"),
    );
    for want in [
        "Looking at member <span id=\"who\">local</span>",
        "3000 machines seen in the last 1h00m",
        "shown 1-100 of 3000 matching",
        "<tr class=\"stuck\">",
        "silent 429",
        // Each member's pool fill over the last hour, drawn as an inline SVG chart.
        "<svg class=\"fill-chart\"",
        "<polyline points=\"",
        "full now; ",
    ] {
        assert!(dom.contains(want), "{want} missing from the page");
    }
    // One page of rows, not three thousand.
    let board_rows = dom
        .split("<tbody id=\"board\">")
        .nth(1)
        .and_then(|rest| rest.split("</tbody>").next())
        .unwrap();
    assert_eq!(board_rows.matches("<tr").count(), 100);
    assert!(!dom.contains(TOKEN));
    let png = std::fs::metadata(shots.join("board.png"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(png > 10_000, "screenshot of {png} octets");

    // Without a token, and with a wrong one: no machine on the page.
    let none = rendered(
        &lab.server,
        "http://192.0.2.1:8080/ui",
        &shots.join("none.png"),
    );
    assert!(none.contains("Enter an operator token."), "{none}");
    assert!(!none.contains("52:54:00:ee"));
    let wrong = rendered(
        &lab.server,
        "http://192.0.2.1:8080/ui#token=not-the-token-000000",
        &shots.join("wrong.png"),
    );
    assert!(wrong.contains("HTTP 401"), "{wrong}");
    assert!(!wrong.contains("52:54:00:ee"));
    // Kept for a person to look at.
    let keep = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("board-screenshots");
    std::fs::create_dir_all(&keep).unwrap();
    for f in ["board.png", "none.png", "wrong.png"] {
        let _ = std::fs::copy(shots.join(f), keep.join(f));
    }
}
