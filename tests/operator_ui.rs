//! `/ui` in a real browser: headless Chromium, inside the lab namespace, loads the page
//! with the operator token in the fragment and renders the lease table, pool use and
//! one machine's timeline from the operator API. A host name a client sent as markup stays text; a wrong token
//! shows the refusal and no data.

mod common;

use std::time::Duration;

use common::api_lab;
use common::Netns;

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

#[test]
fn the_page_shows_leases_and_pools_and_keeps_host_names_as_text() {
    require_root!();
    let (lab, _dir, _server, mut client) = api_lab::start(TOKEN, "");
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
}
