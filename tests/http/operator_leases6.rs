//! The DHCPv6 lease table through the operator API, against `shardboot serve` in a
//! namespace, driven by curl: the store is seeded with v6 leases before the server
//! starts (no DHCPv6 server writes them yet), and `/v1/leases6` must show every one of
//! them exactly, page by page in address order, one client's by DUID, one by address,
//! only with the token; `shardboot leases --v6` shows the same through the server and,
//! once it has stopped, from the store itself.

use crate::common;

use std::net::Ipv6Addr;

use common::api_lab::{self, Api};
use shardboot::mac::MacAddr;
use shardboot::store::{Change, Lease6, Lease6Effect, LeaseState};

const TOKEN: &str = "operator-token-six-0123456789";

fn duid(client: u8) -> Vec<u8> {
    vec![0, 3, 0, 1, 0x52, 0x54, 0, 0, 6, client]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The seeded table: 10 clients, one to three IAs each, on addresses in three /64s
/// written out of order; one client with a DUID past RFC 8415's cap, a host name with
/// control characters and no MAC.
fn seeded() -> Vec<Lease6> {
    let mut out = Vec::new();
    for client in 1..=10u8 {
        for ia in 0..u32::from(client % 3 + 1) {
            let net = [0x30, 0x10, 0x20][usize::from(client) % 3];
            out.push(Lease6 {
                ip: Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    0,
                    net,
                    0,
                    0,
                    0,
                    0x100 - u16::from(client) * 4 + ia as u16,
                ),
                duid: duid(client),
                iaid: ia + 1,
                mac: Some(MacAddr([0x52, 0x54, 0, 0, 6, client])),
                state: if client == 4 {
                    LeaseState::Declined
                } else {
                    LeaseState::Bound
                },
                starts: 1_700_000_000,
                preferred: 1_700_001_800 + u64::from(client),
                expires: 1_700_003_600 + u64::from(client),
                hostname: Some(format!("node-{client}")),
                arch: Some(u16::from(client % 2) * 7),
            });
        }
    }
    out.push(Lease6 {
        ip: "2001:db8:0:40::1".parse().unwrap(),
        duid: (0..=255u8).cycle().take(300).collect(),
        iaid: u32::MAX,
        mac: None,
        state: LeaseState::Bound,
        starts: 1,
        preferred: 2,
        expires: 3,
        hostname: Some("evil\u{1b}[2J\nname".into()),
        arch: None,
    });
    out
}

/// What the API must show for `l`.
fn shown(l: &Lease6) -> serde_json::Value {
    serde_json::json!({
        "ip": l.ip.to_string(),
        "duid": hex(&l.duid),
        "iaid": l.iaid,
        "mac": l.mac.map(|m| m.to_string()),
        "state": l.state.as_str(),
        "starts": l.starts,
        "preferred": l.preferred,
        "expires": l.expires,
        "hostname": l.hostname.as_deref().map(shardboot::store::text::shown),
        "arch": l.arch,
    })
}

#[test]
fn the_operator_api_shows_the_stored_dhcpv6_leases() {
    require_root!();
    let leases = seeded();
    let changes: Vec<Change> = leases
        .iter()
        .map(|l| Change::Lease6(Lease6Effect::Put(l.clone())))
        .chain([Change::ServerDuid(vec![0, 2, 0, 0, 0x99, 0x99, 1])])
        .collect();
    let (lab, dir, mut server, _client) = api_lab::start_seeded(TOKEN, "", "", |state| {
        let store = shardboot::store::open(state).unwrap();
        store.commit(&changes).unwrap();
    });
    let api = Api {
        lab: &lab,
        token: TOKEN,
    };
    let mut expected = leases.clone();
    expected.sort_by_key(|l| l.ip);
    let expected: Vec<serde_json::Value> = expected.iter().map(shown).collect();

    // Only with the token; refusals carry no data.
    let some_ip = leases[0].ip.to_string();
    for path in ["/v1/leases6".to_string(), format!("/v1/leases6/{some_ip}")] {
        let (code, body) = api.call("GET", &path, None, None);
        assert_eq!(code, 401, "{path}: {body}");
        assert!(!body.contains("2001:db8"), "{body}");
        let wrong = api.call("GET", &path, Some("operator-token-wrong-000000"), None);
        assert_eq!(wrong.0, 401, "{path}");
    }

    // Every lease, exactly, page by page in address order.
    let mut paged = Vec::new();
    let mut path = "/v1/leases6?limit=4".to_string();
    let mut pages = 0;
    loop {
        let page = api.json("GET", &path, None);
        let items = page["leases"].as_array().unwrap();
        assert!(items.len() <= 4, "{page}");
        paged.extend(items.iter().cloned());
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(c, items.last().unwrap()["ip"], "{page}");
                path = format!("/v1/leases6?limit=4&cursor={c}");
            }
            None => break,
        }
    }
    assert_eq!(paged, expected);
    assert_eq!(pages, expected.len().div_ceil(4));
    let all = api.json("GET", "/v1/leases6", None);
    assert_eq!(all["leases"].as_array().unwrap(), &expected);
    assert!(all["next_cursor"].is_null());
    // The v4 table is apart, and empty.
    assert_eq!(
        api.json("GET", "/v1/leases", None)["leases"],
        serde_json::json!([])
    );

    // One client's records by DUID, with or without colons, paged the same way.
    let three: Vec<&serde_json::Value> = expected
        .iter()
        .filter(|l| l["duid"] == hex(&duid(5)))
        .collect();
    assert_eq!(three.len(), 3);
    let by_duid = api.json("GET", &format!("/v1/leases6?duid={}", hex(&duid(5))), None);
    assert_eq!(
        by_duid["leases"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        three
    );
    let colons: Vec<String> = duid(5).iter().map(|b| format!("{b:02X}")).collect();
    let first = api.json(
        "GET",
        &format!("/v1/leases6?duid={}&limit=2", colons.join(":")),
        None,
    );
    assert_eq!(first["leases"].as_array().unwrap().len(), 2);
    let cursor = first["next_cursor"].as_str().unwrap();
    let rest = api.json(
        "GET",
        &format!("/v1/leases6?duid={}&limit=2&cursor={cursor}", hex(&duid(5))),
        None,
    );
    assert_eq!(rest["leases"][0], *three[2]);
    assert!(rest["next_cursor"].is_null());
    let nobody = api.json("GET", "/v1/leases6?duid=0003000152540000ffff", None);
    assert_eq!(nobody["leases"], serde_json::json!([]));

    // One lease by address; the odd client's whole DUID and its escaped host name.
    let odd = &leases[leases.len() - 1];
    let one = api.json("GET", &format!("/v1/leases6/{}", odd.ip), None);
    assert_eq!(one, shown(odd));
    assert_eq!(one["duid"].as_str().unwrap().len(), 600);
    assert_eq!(one["hostname"], "evil\\x1b[2J\\x0aname");
    let (code, body) = api.call("GET", "/v1/leases6/2001:db8::dead", Some(TOKEN), None);
    assert_eq!(code, 404, "{body}");

    // Bad input is a JSON 400.
    for bad in [
        "/v1/leases6?limit=0",
        "/v1/leases6?limit=1001",
        "/v1/leases6?cursor=192.0.2.1",
        "/v1/leases6?duid=xyz",
        "/v1/leases6?duid=0:1",
        "/v1/leases6?mac=52:54:00:00:06:01",
        "/v1/leases6/192.0.2.10",
        "/v1/leases6/not-an-address",
    ] {
        let (code, body) = api.call("GET", bad, Some(TOKEN), None);
        assert_eq!(code, 400, "{bad}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].is_string(), "{bad}: {body}");
    }

    // The OpenAPI document describes the route.
    let doc = api.json("GET", "/v1/openapi.json", None);
    assert!(doc["paths"]["/v1/leases6"]["get"].is_object(), "{doc}");

    // `shardboot leases --v6` through the running server (it holds the store), with
    // `--mac` for one client.
    let via_server = server.leases_json_with(&["--v6"]);
    assert_eq!(via_server.as_array().unwrap(), &expected);
    let one_mac = server.leases_json_with(&["--v6", "--mac", "52-54-00-00-06-05"]);
    assert_eq!(
        one_mac.as_array().unwrap().iter().collect::<Vec<_>>(),
        three
    );

    // And from the store once the server has stopped: the same table, and the server
    // DUID still the one written before the start.
    server.stop();
    let offline = server.leases_json_with(&["--v6"]);
    assert_eq!(offline.as_array().unwrap(), &expected);
    let store = shardboot::store::open(&dir.path().join("state")).unwrap();
    assert_eq!(
        store.server_duid().unwrap(),
        Some(vec![0, 2, 0, 0, 0x99, 0x99, 1])
    );
    assert_eq!(store.load().unwrap().leases6.len(), leases.len());
}
