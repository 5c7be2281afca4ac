//! Kea's perfdhcp against the shardboot binary: more than 20,000 four-way exchanges from
//! distinct simulated clients, with no duplicate address, no malformed reply and every
//! acknowledged lease in the store. perfdhcp simulates a relay (giaddr set); one run
//! broadcasts on the link and one unicasts to the server address.

use crate::common;

use std::collections::HashSet;

/// DISCOVERs sent; a few may be dropped under load, so more than the 20,000 required.
const DISCOVERS: u32 = 24_000;

/// Both tests load the two cores fully; run them one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Stats {
    acks: u64,
    non_unique: u64,
    malformed: u64,
    rejected: u64,
}

/// Pulls the figures out of perfdhcp's report.
fn parse(report: &str) -> Stats {
    let section = |name: &str| -> &str {
        let start = report
            .find(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{report}"));
        &report[start..]
    };
    let field = |text: &str, key: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key}"));
        line.rsplit(':').next().unwrap().trim().parse().unwrap()
    };
    let ack = section("***Statistics for: REQUEST-ACK***");
    let offer = section("***Statistics for: DISCOVER-OFFER***");
    Stats {
        acks: field(ack, "received packets"),
        non_unique: field(ack, "non unique addresses") + field(offer, "non unique addresses"),
        malformed: field(report, "Malformed packets"),
        rejected: field(ack, "rejected leases") + field(offer, "rejected leases"),
    }
}

fn run_perfdhcp(target: Option<&str>) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (lab, dir, mut server) = common::relay_lab();
    let mut cmd = lab.client.command("perfdhcp");
    // -R: distinct client MACs; -n: DISCOVERs to send; -p: hard time limit (seconds);
    // -W: wait for late answers before counting them as drops (see docs/lab.md).
    cmd.current_dir(dir.path()).args([
        "-4",
        "-r",
        "2000",
        "-R",
        "50000",
        "-n",
        &DISCOVERS.to_string(),
        "-p",
        "60",
        "-W",
        "1000000",
        "-l",
    ]);
    match target {
        Some(server_addr) => cmd.args(["198.18.0.2", server_addr]),
        None => cmd.arg(&lab.client_if),
    };
    let out = cmd.output().expect("run perfdhcp");
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // Exit code 3 means "some exchanges failed" (drops); the counts below decide.
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "perfdhcp failed:\n{report}"
    );
    let stats = parse(&report);
    assert_eq!(stats.non_unique, 0, "duplicate addresses:\n{report}");
    assert_eq!(stats.malformed, 0, "malformed replies:\n{report}");
    assert_eq!(stats.rejected, 0, "rejected leases:\n{report}");
    assert!(stats.acks >= 20_000, "only {} ACKs:\n{report}", stats.acks);

    // Every ACK is in the store, one address per client.
    server.stop();
    let leases = server.leases_json();
    let leases = leases.as_array().unwrap();
    let bound: Vec<_> = leases.iter().filter(|l| l["state"] == "bound").collect();
    let macs: HashSet<&str> = bound.iter().map(|l| l["mac"].as_str().unwrap()).collect();
    let ips: HashSet<&str> = bound.iter().map(|l| l["ip"].as_str().unwrap()).collect();
    assert_eq!(macs.len(), bound.len(), "a client holds two addresses");
    assert_eq!(ips.len(), bound.len());
    // perfdhcp draws MACs at random from 50,000, so some clients repeat and keep their
    // address: expect roughly 50,000 × (1 − e^(−acks/50,000)) distinct bound clients.
    let expected = 50_000.0 * (1.0 - (-(stats.acks as f64) / 50_000.0).exp());
    assert!(
        bound.len() as f64 >= expected * 0.97,
        "store has {} bound leases, expected about {expected:.0} for {} ACKs",
        bound.len(),
        stats.acks
    );
}

#[test]
fn perfdhcp_broadcast_on_the_link() {
    require_root!();
    run_perfdhcp(None);
}

#[test]
fn perfdhcp_relayed_unicast_to_the_server() {
    require_root!();
    run_perfdhcp(Some("198.18.0.1"));
}
