//! The operator API through a real socket, driven by curl, against `shardboot serve` in
//! a namespace with a DHCP client beside it: tokens (missing, wrong, rotated), leases
//! with filters and paging, allow/deny taking effect on the very next DISCOVER and
//! surviving a restart, and bad input answered with JSON 4xx, never a 500.

use crate::common;

use std::time::Duration;

use common::api_lab::{self, Api};
use common::segment::Seen;
use dhcproto::v4::MessageType;

const T1: &str = "operator-token-one-0123456789";
const T2: &str = "operator-token-two-abcdefghijk";

fn offers(seen: &[Seen]) -> usize {
    seen.iter().filter(|s| s.kind == MessageType::Offer).count()
}

#[test]
fn operator_api_end_to_end() {
    require_root!();
    let (lab, dir, mut server, mut client) = api_lab::start(T1, "");
    let api = Api {
        lab: &lab,
        token: T1,
    };

    // Tokens: none, wrong, right. Refusals carry no data.
    let (code, body) = api.call("GET", "/v1/leases", None, None);
    assert_eq!(code, 401, "{body}");
    assert!(
        body.contains("\"error\"") && !body.contains("leases"),
        "{body}"
    );
    assert_eq!(
        api.call(
            "GET",
            "/v1/leases",
            Some("operator-token-wrong-000000"),
            None
        )
        .0,
        401
    );
    assert_eq!(api.call("GET", "/v1/members", Some(&T1[1..]), None).0, 401);
    for public in ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"] {
        assert_eq!(api.call("GET", public, None, None).0, 200, "{public}");
    }
    let metrics_text = || api.call("GET", "/metrics", None, None).1;
    assert_eq!(
        api.json("GET", "/v1/leases", None)["leases"],
        serde_json::json!([])
    );

    // Four machines take leases; the API lists them in address order, page by page.
    let macs: Vec<[u8; 6]> = (1..=4u8).map(|n| [0x52, 0x54, 0, 0xaa, 0, n]).collect();
    let seen = client.discover(&macs, 0, Duration::from_millis(800));
    let requests: Vec<_> = macs
        .iter()
        .zip(&seen)
        .map(|(m, s)| (*m, s[0].server, s[0].yiaddr))
        .collect();
    for s in client.request(&requests, Duration::from_millis(800)) {
        assert_eq!(s[0].kind, MessageType::Ack);
    }
    let first = api.json("GET", "/v1/leases?limit=2", None);
    assert_eq!(first["leases"].as_array().unwrap().len(), 2);
    let cursor = first["next_cursor"].as_str().unwrap().to_string();
    let second = api.json("GET", &format!("/v1/leases?limit=2&cursor={cursor}"), None);
    assert_eq!(second["leases"].as_array().unwrap().len(), 2);
    assert!(second["next_cursor"].is_null());
    let mut ips: Vec<String> = first["leases"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["leases"].as_array().unwrap())
        .map(|l| l["ip"].as_str().unwrap().to_string())
        .collect();
    let sorted = {
        let mut v = ips.clone();
        v.sort_by_key(|ip| ip.parse::<std::net::Ipv4Addr>().unwrap());
        v
    };
    assert_eq!(ips, sorted);
    ips.dedup();
    assert_eq!(ips.len(), 4);
    let m1 = "52:54:00:aa:00:01";
    let by_mac = api.json("GET", &format!("/v1/leases?mac={m1}&state=bound"), None);
    let lease = &by_mac["leases"][0];
    assert_eq!(lease["mac"], m1);
    let ip1 = lease["ip"].as_str().unwrap().to_string();
    assert_eq!(
        api.json("GET", &format!("/v1/leases/{ip1}"), None)["mac"],
        m1
    );
    assert_eq!(
        api.json("GET", "/v1/leases/52-54-00-aa-00-01", None)["ip"],
        ip1.as_str()
    );
    assert_eq!(
        api.call("GET", "/v1/leases/192.0.2.250", Some(T1), None).0,
        404
    );

    // Metrics count what came in by type and what the server decided.
    let text = metrics_text();
    for line in [
        "shardboot_dhcp_requests_total{type=\"discover\"} 4",
        "shardboot_dhcp_requests_total{type=\"request\"} 4",
        "shardboot_dhcp_decisions_total{outcome=\"ack\"} 4",
        "shardboot_http_requests_total{route=\"/v1/leases\",status=\"401\"} 2",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }

    // Deny takes effect on the very next DISCOVER; default restores it.
    let m5 = [0x52, 0x54, 0, 0xaa, 0, 5];
    assert_eq!(
        offers(&client.discover(&[m5], 0, Duration::from_millis(500))[0]),
        1
    );
    let set = api.json(
        "PUT",
        "/v1/hosts/52:54:00:aa:00:05",
        Some(r#"{"policy": "deny"}"#),
    );
    assert_eq!(set["policy"], "deny");
    assert_eq!(
        offers(&client.discover(&[m5], 0, Duration::from_millis(500))[0]),
        0
    );
    assert_eq!(
        api.json("GET", "/v1/hosts", None)["hosts"][0]["mac"],
        "52:54:00:aa:00:05"
    );
    api.json(
        "PUT",
        "/v1/hosts/52-54-00-aa-00-05",
        Some(r#"{"policy": "default"}"#),
    );
    assert_eq!(
        offers(&client.discover(&[m5], 0, Duration::from_millis(500))[0]),
        1
    );

    // A run-time reservation: the next DISCOVER gets the address; nobody else can take
    // it; it survives the restart below.
    let m9 = [0x52, 0x54, 0, 0xaa, 0, 9];
    let r = api.json(
        "PUT",
        "/v1/reservations/52:54:00:aa:00:09",
        Some(r#"{"ip": "192.0.2.150", "hostname": "node-9"}"#),
    );
    assert_eq!(r["ip"], "192.0.2.150");
    let seen = client.discover(&[m9], 0, Duration::from_millis(500));
    assert_eq!(seen[0][0].yiaddr, std::net::Ipv4Addr::new(192, 0, 2, 150));
    for (body, want) in [
        (r#"{"ip": "192.0.2.150"}"#, 409),
        (r#"{"ip": "10.9.9.9"}"#, 400),
        (
            r#"{"ip": "192.0.2.151", "hostname": "bad name;reboot"}"#,
            400,
        ),
        (r#"{"ip": "not-an-ip"}"#, 400),
    ] {
        let (code, text) = api.call(
            "PUT",
            "/v1/reservations/52:54:00:aa:00:0a",
            Some(T1),
            Some(body),
        );
        assert_eq!(code, want, "{body}: {text}");
        assert!(!text.contains("reboot"), "{text}");
    }
    // An address another client holds cannot be reserved for someone else.
    let (code, _) = api.call(
        "PUT",
        "/v1/reservations/52:54:00:aa:00:0a",
        Some(T1),
        Some(&format!("{{\"ip\": \"{ip1}\"}}")),
    );
    assert_eq!(code, 409);

    // A deny survives a restart.
    api.json(
        "PUT",
        "/v1/hosts/525400aa0006",
        Some(r#"{"policy": "deny"}"#),
    );
    server.restart();
    let m6 = [0x52, 0x54, 0, 0xaa, 0, 6];
    assert_eq!(
        offers(&client.discover(&[m6], 0, Duration::from_millis(500))[0]),
        0
    );
    assert_eq!(
        api.json("GET", "/v1/hosts/52:54:00:aa:00:06", None)["policy"],
        "deny"
    );
    api.json("DELETE", "/v1/hosts/52:54:00:aa:00:06", None);
    let again = client.discover(&[m9], 0, Duration::from_millis(500));
    assert_eq!(again[0][0].yiaddr, std::net::Ipv4Addr::new(192, 0, 2, 150));
    assert_eq!(
        api.json("GET", "/v1/reservations", None)["reservations"][0]["hostname"],
        "node-9"
    );
    api.json("DELETE", "/v1/reservations/52:54:00:aa:00:09", None);
    assert_eq!(
        api.call("GET", "/v1/reservations/52:54:00:aa:00:09", Some(T1), None)
            .0,
        404
    );
    assert_eq!(
        api.call(
            "DELETE",
            "/v1/reservations/52:54:00:aa:00:09",
            Some(T1),
            None
        )
        .0,
        404
    );
    assert_eq!(
        offers(&client.discover(&[m6], 0, Duration::from_millis(500))[0]),
        1
    );

    // The CLI beside the running server: `leases` finds the store locked and asks the
    // API (listener and token from the same config); `hosts deny` acts at once.
    let cli = |args: &[&str]| {
        let out = lab
            .server
            .command(env!("CARGO_BIN_EXE_shardboot"))
            .arg("--config")
            .arg(dir.path().join("shardboot.toml"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let listed: serde_json::Value =
        serde_json::from_str(&cli(&["leases", "--json", "--mac", m1])).unwrap();
    assert_eq!(listed[0]["ip"], ip1.as_str());
    assert!(cli(&["leases"]).contains(m1));
    let m8 = [0x52, 0x54, 0, 0xaa, 0, 8];
    assert!(cli(&["hosts", "deny", "52:54:00:aa:00:08"]).contains("deny"));
    assert_eq!(
        offers(&client.discover(&[m8], 0, Duration::from_millis(500))[0]),
        0
    );
    cli(&["hosts", "default", "52:54:00:aa:00:08"]);
    assert_eq!(
        offers(&client.discover(&[m8], 0, Duration::from_millis(500))[0]),
        1
    );

    // Bad input: JSON 4xx, never a 500, never an echo.
    let big = format!("{{\"policy\": \"{}\"}}", "a".repeat(20_000));
    for (method, path, body, want) in [
        ("PUT", "/v1/hosts/52:54:00:aa:00:07", Some("{not json"), 400),
        (
            "PUT",
            "/v1/hosts/52:54:00:aa:00:07",
            Some(r#"{"policy": "maybe"}"#),
            400,
        ),
        (
            "PUT",
            "/v1/hosts/52:54:00:aa:00:07",
            Some(r#"{"policy": "deny", "x": 1}"#),
            400,
        ),
        (
            "PUT",
            "/v1/hosts/52:54:00:aa:00:07",
            Some(big.as_str()),
            413,
        ),
        (
            "PUT",
            "/v1/hosts/not-a-mac%3Cscript%3E",
            Some(r#"{"policy": "deny"}"#),
            400,
        ),
        ("GET", "/v1/leases/%3Cscript%3E", None, 400),
        ("GET", "/v1/leases?limit=0", None, 400),
        ("GET", "/v1/leases?mac=zz", None, 400),
        ("GET", "/v1/leases?bogus=1", None, 400),
        ("GET", "/v1/owners/zz", None, 400),
    ] {
        let (code, text) = api.call(method, path, Some(T1), body);
        assert_eq!(code, want, "{method} {path}: {text}");
        if code == 400 {
            assert!(text.contains("\"error\""), "{method} {path}: {text}");
        }
        assert!(!text.contains("script"), "{text}");
    }

    // Forgetting a lease: durable, gone from the API, a second time is a 404.
    let forgot = api.json("DELETE", &format!("/v1/leases/{ip1}"), None);
    assert_eq!(forgot["forgotten"], true);
    assert_eq!(
        api.call("GET", &format!("/v1/leases/{ip1}"), Some(T1), None)
            .0,
        404
    );
    assert_eq!(
        api.call("DELETE", &format!("/v1/leases/{ip1}"), Some(T1), None)
            .0,
        404
    );
    assert_eq!(
        api.call("DELETE", "/v1/leases/52:54:00:aa:00:01", Some(T1), None)
            .0,
        400
    );
    assert_eq!(
        api.call("DELETE", &format!("/v1/leases/{ip1}"), None, None)
            .0,
        401
    );

    // Members, stats, owners.
    let stats = api.json("GET", "/v1/stats", None);
    assert_eq!(stats["subnets"][0]["subnet"], "192.0.2.0/24");
    assert!(stats["subnets"][0]["in_use"].as_u64().unwrap() >= 4);
    assert!(api.json("GET", "/v1/members", None)["members"].is_array());
    let owner = api.json("GET", &format!("/v1/owners/{m1}"), None);
    assert_eq!(owner["mac"], m1);

    // Rotation: the new token works, the old one stops working, no restart. The file
    // is looked at once a second (`http::auth::RELOAD_INTERVAL`), not per request.
    std::fs::write(dir.path().join("tokens"), format!("{T2}\n")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while api.call("GET", "/v1/stats", Some(T2), None).0 != 200
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(api.call("GET", "/v1/stats", Some(T2), None).0, 200);
    assert_eq!(api.call("GET", "/v1/stats", Some(T1), None).0, 401);
}

#[test]
fn deeply_nested_json_is_a_json_400() {
    require_root!();
    let (lab, _dir, mut server, _client) = api_lab::start(T1, "");
    let api = Api {
        lab: &lab,
        token: T1,
    };
    // 10,000 levels, inside the 16 KiB body cap: serde_json's recursion limit refuses it
    // and the answer is the API's JSON 400, not a crash or a plain-text error.
    for body in ["[".repeat(10_000), "{\"a\":".repeat(2_000)] {
        for path in [
            "/v1/hosts/52:54:00:aa:00:09",
            "/v1/reservations/52:54:00:aa:00:09",
        ] {
            let (code, text) = api.call("PUT", path, Some(T1), Some(&body));
            assert_eq!(code, 400, "{path}: {text}");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(v["error"].is_string(), "{text}");
        }
    }
    // The server is still there.
    api.json("GET", "/v1/hosts", None);
    server.stop();
}

#[test]
fn operator_metrics_on_a_single_listener_need_the_token() {
    require_root!();
    let (lab, dir, _server, _client) = api_lab::start_with(T1, "", "metrics = \"operator\"\n");
    let api = Api {
        lab: &lab,
        token: T1,
    };
    assert_eq!(api.call("GET", "/metrics", None, None).0, 401);
    assert_eq!(api.call("GET", "/metrics", Some(T2), None).0, 401);
    let (code, body) = api.call("GET", "/metrics", Some(T1), None);
    assert_eq!(code, 200);
    assert!(body.contains("shardboot_dhcp_received_total"), "{body}");
    // Health stays open (Kubernetes probes send no token) and tells nothing.
    assert_eq!(
        api.call("GET", "/healthz", None, None),
        (200, "ok\n".to_string())
    );
    // `shardboot members` reads /v1/members with the token: a single instance.
    let out = lab
        .server
        .command(env!("CARGO_BIN_EXE_shardboot"))
        .args(["members", "--server", api_lab::API, "--token-file"])
        .arg(dir.path().join("tokens"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("source: static  generation: 0"), "{text}");
}
