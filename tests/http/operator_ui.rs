//! `/ui` in a real browser: headless Chromium, inside the lab namespace, loads the page
//! with the operator token in the fragment and renders the v4 and DHCPv6 lease tables,
//! pool use and one machine's timeline from the operator API. A host name a client sent
//! as markup stays text; a wrong token shows the refusal and no data.

use crate::common;

use std::time::Duration;

use common::api_lab;
use common::Netns;
use shardboot::mac::MacAddr;
use shardboot::store::{Change, Lease6, Lease6Effect, LeaseState};

const TOKEN: &str = "ui-test-token-0123456789abc";
const HOSTILE: &str = "<img src=x onerror=alert(1)>";

/// The DOM after the page's script has run.
fn rendered(ns: &Netns, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = ns
        .command("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("chromium (tests/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two DHCPv6 leases, written to the store before the server starts (the lab's client
/// speaks DHCPv4 only): one with a MAC, one without and with markup for a host name.
fn leases6() -> Vec<Change> {
    let lease = |ip: &str, client: u8, mac: Option<MacAddr>, hostname: &str| Lease6 {
        ip: ip.parse().unwrap(),
        duid: vec![0, 3, 0, 1, 0x52, 0x54, 0, 0xcc, 6, client],
        iaid: 7,
        mac,
        state: LeaseState::Bound,
        starts: 1_700_000_000,
        preferred: 1_700_001_800,
        expires: 1_700_003_600,
        hostname: Some(hostname.into()),
        arch: Some(7),
    };
    vec![
        lease(
            "2001:db8::5",
            1,
            Some(MacAddr([0x52, 0x54, 0, 0xcc, 6, 1])),
            "node-six",
        ),
        lease("2001:db8::6", 2, None, HOSTILE),
    ]
    .into_iter()
    .map(|l| Change::Lease6(Lease6Effect::Put(l)))
    .collect()
}

#[test]
fn the_page_shows_leases_and_pools_and_keeps_host_names_as_text() {
    require_root!();
    let (lab, _dir, _server, mut client) = api_lab::start_seeded(TOKEN, "", "", |state| {
        let store = shardboot::store::open(state).unwrap();
        store.commit(&leases6()).unwrap();
    });
    // Two machines take leases; the first names itself with markup.
    let macs = [[0x52, 0x54, 0, 0xcc, 0, 1], [0x52, 0x54, 0, 0xcc, 0, 2]];
    for (i, mac) in macs.iter().enumerate() {
        client.hostname = (i == 0).then(|| HOSTILE.to_string());
        let seen = client.discover(&[*mac], 0, Duration::from_millis(500));
        let offer = seen[0][0];
        let acked = client.request(
            &[(*mac, offer.server, offer.yiaddr)],
            Duration::from_millis(500),
        );
        assert!(!acked[0].is_empty(), "no ACK for {mac:?}");
    }

    let dom = rendered(
        &lab.server,
        &format!("http://192.0.2.1:8080/ui#token={TOKEN}&machine=52:54:00:cc:00:01"),
    );
    for want in [
        "<td>52:54:00:cc:00:01</td>",
        "<td>52:54:00:cc:00:02</td>",
        "<td>bound</td>",
        // The pool figures agree with the lease list read beside them, at once.
        "<td>192.0.2.0/24</td><td>2</td>",
        "2 leases",
        // The first machine's timeline: what it asked and what it got.
        "events for 52:54:00:cc:00:01",
        "<td>dhcp</td><td>DISCOVER</td><td>offer</td>",
        "<td>dhcp</td><td>REQUEST</td><td>ack</td>",
        // The host name is text in a cell, not an element.
        "<td>&lt;img src=x onerror=alert(1)&gt;</td>",
        // The DHCPv6 leases, each with its DUID in hex and its IAID.
        "2 DHCPv6 leases",
        "<td>2001:db8::5</td><td>00030001525400cc0601</td><td>7</td>\
         <td>52:54:00:cc:06:01</td><td>bound</td><td>2023-11-14T23:13:20Z</td>\
         <td>node-six</td>",
        "<td>2001:db8::6</td><td>00030001525400cc0602</td><td>7</td><td></td>\
         <td>bound</td><td>2023-11-14T23:13:20Z</td>\
         <td>&lt;img src=x onerror=alert(1)&gt;</td>",
    ] {
        assert!(dom.contains(want), "{want} missing from:\n{dom}");
    }
    assert!(!dom.contains("<img"), "{dom}");
    // The token is not left in the address or the page.
    assert!(!dom.contains(TOKEN), "{dom}");

    let refused = rendered(
        &lab.server,
        "http://192.0.2.1:8080/ui#token=not-the-token-000000",
    );
    assert!(refused.contains("/v1/stats: HTTP 401"), "{refused}");
    assert!(!refused.contains("52:54:00:cc"), "{refused}");
    assert!(!refused.contains("2001:db8"), "{refused}");
}
