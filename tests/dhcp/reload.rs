//! Reload without a restart (issue 31): SIGHUP makes `shardboot serve` read its file
//! again. Under a relayed load of fresh clients, a reload that moves the range and
//! changes an option takes effect for the next exchanges, and no exchange is dropped
//! across it; a file that does not validate changes nothing; a change that needs a
//! restart (the listening interfaces) is named in the log and left as it runs.

use crate::common;

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::relay_client::{mac, RelayClient};
use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

const BATCH: u32 = 50;

/// One batch of exchanges: whether it started after the reload was seen in the log,
/// and each client's ACK (address and NTP servers), `None` when none came.
type Batch = (bool, Vec<Option<(Ipv4Addr, Vec<Ipv4Addr>)>>);

fn ack_of(reply: Option<Message>) -> Option<(Ipv4Addr, Vec<Ipv4Addr>)> {
    let m = reply?;
    (m.opts().msg_type() == Some(MessageType::Ack)).then_some(())?;
    let ntp = match m.opts().get(OptionCode::NtpServers) {
        Some(DhcpOption::NtpServers(v)) => v.clone(),
        _ => Vec::new(),
    };
    Some((m.yiaddr(), ntp))
}

fn file(lab: &common::Lab, range: &str, ntp: &str, extra: &str) -> String {
    common::config(
        &lab.server_if,
        "198.18.0.0/16",
        range,
        &format!(
            "{}options = [\"option:ntp-server,{ntp}\"]\n{extra}",
            common::RELAYS
        ),
    )
}

fn in_range(ip: Ipv4Addr, first: [u8; 4], last: [u8; 4]) -> bool {
    (u32::from(Ipv4Addr::from(first))..=u32::from(Ipv4Addr::from(last))).contains(&u32::from(ip))
}

#[test]
fn sighup_moves_a_range_and_changes_an_option_under_load_without_dropping_an_exchange() {
    require_root!();
    let lab = common::Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let old = file(&lab, "198.18.1.0 - 198.18.40.255", "198.18.0.1", "");
    let server = common::Server::start(&lab.server, dir.path(), &old);

    // The load: batches of fresh clients, one after another, until told to stop
    // (bounded in count and time whatever happens).
    let stop = Arc::new(AtomicBool::new(false));
    let reloaded = Arc::new(AtomicBool::new(false));
    let batches_done = Arc::new(AtomicUsize::new(0));
    let load = {
        let (stop, reloaded, batches_done) = (stop.clone(), reloaded.clone(), batches_done.clone());
        lab.client.run(move || {
            let mut client =
                RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
            let mut batches: Vec<Batch> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut next = 0u32;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && next < 200_000 {
                let after = reloaded.load(Ordering::SeqCst);
                let macs: Vec<[u8; 6]> = (next..next + BATCH).map(mac).collect();
                next += BATCH;
                let acks = client
                    .obtain_replies(&macs, Duration::from_secs(2))
                    .into_iter()
                    .map(ack_of)
                    .collect();
                batches.push((after, acks));
                batches_done.fetch_add(1, Ordering::SeqCst);
            }
            batches
        })
    };
    let wait_batches = |n: usize| {
        let until = Instant::now() + Duration::from_secs(30);
        let target = batches_done.load(Ordering::SeqCst) + n;
        while batches_done.load(Ordering::SeqCst) < target {
            assert!(Instant::now() < until, "the load stalled");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_batches(4);

    // Mid-load: the range moves and the NTP server changes.
    let new = file(&lab, "198.18.41.0 - 198.18.80.255", "198.18.0.9", "");
    std::fs::write(dir.path().join("shardboot.toml"), &new).unwrap();
    let pid = server.pid().unwrap().to_string();
    common::sh(&["kill", "-HUP", &pid]);
    common::members::wait_until("the reload", Duration::from_secs(10), || {
        server.log_text().contains("configuration reloaded")
    });
    reloaded.store(true, Ordering::SeqCst);
    wait_batches(4);
    stop.store(true, Ordering::SeqCst);
    let batches = load.join().unwrap();

    let total: usize = batches.iter().map(|(_, b)| b.len()).sum();
    let dropped = batches
        .iter()
        .flat_map(|(_, b)| b)
        .filter(|a| a.is_none())
        .count();
    assert_eq!(
        dropped, 0,
        "{dropped} of {total} exchanges got no ACK across the reload"
    );
    let log = server.log_text();
    assert!(
        log.contains("applied=\"subnet, dhcp.options\"") || log.contains("subnet, dhcp.options"),
        "the reload line names what changed: {log}"
    );
    // Before the reload: the old range and option; batches begun after it: the new.
    let first = &batches[0].1;
    for (ip, ntp) in first.iter().flatten() {
        assert!(
            in_range(*ip, [198, 18, 1, 0], [198, 18, 40, 255]),
            "{ip} before the reload"
        );
        assert_eq!(ntp, &[Ipv4Addr::new(198, 18, 0, 1)]);
    }
    let after: Vec<_> = batches
        .iter()
        .filter(|(a, _)| *a)
        .flat_map(|(_, b)| b.iter().flatten())
        .collect();
    assert!(after.len() >= 4 * BATCH as usize);
    for (ip, ntp) in after {
        assert!(
            in_range(*ip, [198, 18, 41, 0], [198, 18, 80, 255]),
            "{ip} handed out from the old range after the reload"
        );
        assert_eq!(
            ntp,
            &[Ipv4Addr::new(198, 18, 0, 9)],
            "the option after the reload"
        );
    }
    eprintln!(
        "{total} exchanges in {} batches, {} after the reload, 0 dropped",
        batches.len(),
        batches.iter().filter(|(a, _)| *a).count()
    );
}

#[test]
fn a_file_that_does_not_validate_changes_nothing_and_a_listener_change_waits_for_a_restart() {
    require_root!();
    let lab = common::Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let old = file(&lab, "198.18.1.0 - 198.18.1.255", "198.18.0.1", "");
    let server = common::Server::start(&lab.server, dir.path(), &old);
    let pid = server.pid().unwrap().to_string();
    let path = dir.path().join("shardboot.toml");
    let one = |first: u32| {
        lab.client
            .run(move || {
                let mut client =
                    RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
                client
                    .obtain_replies(&[mac(first)], Duration::from_secs(2))
                    .into_iter()
                    .map(ack_of)
                    .next()
                    .flatten()
            })
            .join()
            .unwrap()
    };

    // A range that is not one, and an NTP server that moved: nothing of it applies.
    let broken = file(&lab, "198.18.9.0 - banana", "198.18.0.9", "");
    std::fs::write(&path, &broken).unwrap();
    common::sh(&["kill", "-HUP", &pid]);
    common::members::wait_until("the refusal", Duration::from_secs(10), || {
        server.log_text().contains("configuration reload refused")
    });
    let (ip, ntp) = one(1).expect("still served after a refused reload");
    assert!(in_range(ip, [198, 18, 1, 0], [198, 18, 1, 255]), "{ip}");
    assert_eq!(
        ntp,
        [Ipv4Addr::new(198, 18, 0, 1)],
        "the option did not change"
    );

    // Another listening interface needs new sockets: named, left as it runs, while
    // the option beside it takes effect.
    let moved = common::config(
        "eth-not-here",
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.1.255",
        &format!(
            "{}options = [\"option:ntp-server,198.18.0.9\"]\n",
            common::RELAYS
        ),
    );
    std::fs::write(&path, &moved).unwrap();
    common::sh(&["kill", "-HUP", &pid]);
    common::members::wait_until("the restart warning", Duration::from_secs(10), || {
        server.log_text().contains("need a restart")
    });
    let log = server.log_text();
    let line = log.lines().find(|l| l.contains("need a restart")).unwrap();
    assert!(line.contains("dhcp.interfaces"), "{line}");
    let (ip, ntp) = one(2).expect("served on the running interface");
    assert!(in_range(ip, [198, 18, 1, 0], [198, 18, 1, 255]), "{ip}");
    assert_eq!(
        ntp,
        [Ipv4Addr::new(198, 18, 0, 9)],
        "the option took effect"
    );
}

/// The debug line a relayed packet from an untrusted source leaves.
const DEBUG_LINE: &str = "relayed packet from an untrusted source dropped";

#[test]
fn a_reload_raises_and_lowers_the_log_level_and_refuses_a_filter_that_is_none() {
    require_root!();
    let lab = common::Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shardboot.toml");
    let with_level = |level: &str| {
        format!(
            "log_level = {level:?}\n{}",
            file(&lab, "198.18.1.0 - 198.18.1.255", "198.18.0.1", "")
        )
    };
    let mut server = common::Server::start(&lab.server, dir.path(), &with_level("info"));
    // One probe: a relayed DISCOVER from a port no relay sends from (dropped, with a
    // debug line), then an exchange through the trusted relay. Once its ACK is back,
    // the engine has handled the first (one thread, arrival order). Returns what the
    // server logged meanwhile.
    let probe = |server: &common::Server, n: u32| -> String {
        let before = server.log_text().len();
        let ack = lab
            .client
            .run(move || {
                let mut client =
                    RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
                let stray = std::net::UdpSocket::bind("198.18.0.2:0").unwrap();
                let bytes = client.discover_raw(&mac(1000 + n), &[]);
                stray.send_to(&bytes, "198.18.0.1:67").unwrap();
                client
                    .obtain_replies(&[mac(n)], Duration::from_secs(2))
                    .into_iter()
                    .map(ack_of)
                    .next()
                    .flatten()
            })
            .join()
            .unwrap();
        assert!(ack.is_some(), "probe {n} was not answered");
        server.log_text()[before..].to_string()
    };
    // Writes `text`, sends SIGHUP and returns the first new log line holding `line`.
    let reload = |server: &common::Server, text: &str, line: &str| -> String {
        let before = server.log_text().len();
        std::fs::write(&path, text).unwrap();
        common::sh(&["kill", "-HUP", &server.pid().unwrap().to_string()]);
        common::members::wait_until(line, Duration::from_secs(10), || {
            server.log_text()[before..].contains(line)
        });
        let log = server.log_text();
        log[before..]
            .lines()
            .find(|l| l.contains(line))
            .unwrap()
            .to_string()
    };

    // The harness sets SHARDBOOT_LOG: it wins, and the reload says so.
    let said = reload(
        &server,
        &with_level("info,shardboot=debug"),
        "need a restart",
    );
    assert!(
        said.contains("log_level (SHARDBOOT_LOG is set and wins)"),
        "{said}"
    );
    assert!(!probe(&server, 1).contains(DEBUG_LINE));

    // Without it, log_level rules.
    std::fs::write(&path, with_level("info")).unwrap();
    server.set_env("SHARDBOOT_LOG", Some(""));
    server.restart();
    let quiet = probe(&server, 2);
    assert!(!quiet.contains(DEBUG_LINE), "debug line at info: {quiet}");

    // Raised: the debug line appears.
    let said = reload(
        &server,
        &with_level("info,shardboot=debug"),
        "configuration reloaded",
    );
    assert!(said.contains("applied=log_level"), "{said}");
    let loud = probe(&server, 3);
    assert!(
        loud.contains(DEBUG_LINE),
        "no debug line after raising: {loud}"
    );

    // A filter that is none: refused, the key named, the level as it was.
    let said = reload(
        &server,
        &with_level("info,shardboot=loudest"),
        "configuration reload refused",
    );
    assert!(said.contains("log_level: "), "{said}");
    assert!(probe(&server, 4).contains(DEBUG_LINE), "the level stayed");

    // Lowered: the debug line is gone again.
    reload(&server, &with_level("info"), "configuration reloaded");
    let quiet = probe(&server, 5);
    assert!(
        !quiet.contains(DEBUG_LINE),
        "debug line after lowering: {quiet}"
    );
}
