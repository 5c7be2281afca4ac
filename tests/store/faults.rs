//! The lease store against records a client (or a bad disk) could have poisoned: a
//! store holding a first-format record whose host name was cut inside a character, and
//! a record that does not decode at all, still starts; the operator API, the metrics
//! and `shardboot leases` show everything readable; the unreadable record is set aside
//! once, and its address is held back from new clients.

use crate::common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::api_lab::{Api, API};
use common::segment::BroadcastClient;
use common::{config, Lab, Server};

const TOKEN: &str = "store-faults-token-0123456789";

/// A lease record as shardboot's first format wrote it: version 1, bound, MAC, start,
/// end, no architecture, then u8-length fields (0xff: absent).
fn first_format_record(mac: [u8; 6], hostname: &[u8], expires: u64) -> Vec<u8> {
    let mut v = vec![1, 1];
    v.extend_from_slice(&mac);
    v.extend_from_slice(&(expires - 3600).to_be_bytes());
    v.extend_from_slice(&expires.to_be_bytes());
    v.extend_from_slice(&0xffffu16.to_be_bytes());
    v.push(hostname.len() as u8);
    v.extend_from_slice(hostname);
    v.extend_from_slice(&[0xff, 0xff]);
    v
}

#[test]
fn a_poisoned_store_starts_and_serves_everything_it_can_read() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    {
        // The store as an older shardboot left it, written behind the server's back.
        // No background flusher: it would hold the lock a moment after `db` is dropped.
        let db = sled::Config::new()
            .path(dir.path().join("state/leases.sled"))
            .flush_every_ms(None)
            .open()
            .unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert("format_version", &[1])
            .unwrap();
        let leases = db.open_tree("leases").unwrap();
        // 253 ASCII octets and the first octet of "é": cut inside a character.
        let mut cut = vec![b'n'; 253];
        cut.push(0xc3);
        let record = first_format_record([0x52, 0x54, 0, 0xdd, 0, 1], &cut, now + 3600);
        leases.insert([192, 0, 2, 150], record).unwrap();
        // Not a lease record at all.
        leases.insert([192, 0, 2, 151], vec![2, 7, 7, 7]).unwrap();
        db.flush().unwrap();
    }
    let cfg = config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.150 - 192.0.2.152",
        &format!(
            "\n[tftp]\nenabled = false\n[http]\nlisten = \"192.0.2.1:8080\"\n\
             insecure_operator_api = true\ntoken_file = \"{}\"",
            tokens.display()
        ),
    );
    let mut server = Server::start(&lab.server, dir.path(), &cfg);
    let log = server.log_text();
    assert_eq!(
        log.matches("lease record set aside").count(),
        1,
        "one line for the one bad record:\n{log}"
    );
    assert!(log.contains("c0000297"), "the line names the key:\n{log}");

    let api = Api {
        lab: &lab,
        token: TOKEN,
    };
    let leases = api.json("GET", "/v1/leases", None);
    let list = leases["leases"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{leases}");
    assert_eq!(list[0]["ip"], "192.0.2.150");
    let name = list[0]["hostname"].as_str().unwrap();
    assert_eq!(name, format!("{}\\xef\\xbf\\xbd", "n".repeat(253)));
    let (_, metrics) = api.call("GET", "/metrics", None, None);
    assert!(
        metrics.contains("shardboot_store_set_aside_records 1\n"),
        "{metrics}"
    );
    let _ = API;

    // A new machine gets neither the leased address nor the held-back one.
    let client_if = lab.client_if.clone();
    let seen = lab
        .client
        .run(move || {
            let mut c = BroadcastClient::new(&client_if);
            c.discover(
                &[[0x52, 0x54, 0, 0xdd, 0, 2]],
                0,
                Duration::from_millis(800),
            )
        })
        .join()
        .unwrap();
    let offered: Vec<Ipv4Addr> = seen[0].iter().map(|s| s.yiaddr).collect();
    assert_eq!(offered, vec![Ipv4Addr::new(192, 0, 2, 152)]);

    // Restarted, the bad record is not set aside again, and the CLI reads the store.
    server.restart();
    assert_eq!(
        server.log_text().matches("lease record set aside").count(),
        1
    );
    server.stop();
    let rows = server.leases_json();
    let ips: Vec<_> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ip"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ips, ["192.0.2.150"]);
}
