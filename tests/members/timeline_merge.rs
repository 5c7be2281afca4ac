//! One machine answered by two members (two `shardboot serve` processes on loopback,
//! the member secret between them): either member's `/v1/machines/{mac}/events`
//! returns both members' events, complete and in time order, each naming its member;
//! a member that is down is named with why; the member route refuses a caller
//! without the secret; a restart keeps each member's part. The board merges the same
//! way: the machine once, with the members that saw it.

use crate::common;

use std::time::Duration;

use common::members::{free_port, wait_until, Member};

const TOKEN: &str = "merge-test-token-0123456789abc";
const MAC: &str = "52:54:00:ab:00:01";

/// Member `name` of a and b, with the operator token and the member secret, its
/// store and timeline in `state`.
fn member(name: &str, ports: (u16, u16), state: &std::path::Path) -> Member {
    let port = if name == "a" { ports.0 } else { ports.1 };
    Member::serve(port, |dir| {
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
        format!(
            r#"
state_dir = "{state}"
[dhcp]
enabled = false
[tftp]
enabled = false
[http]
listen = "127.0.0.1:{port}"
token_file = "{tokens}"
insecure_operator_api = true
[health]
interval_ms = 300
timeout_ms = 250
dead_after = 2
[timeline]
peer_timeout_ms = 1000
[[member]]
name = "a"
http_url = "http://127.0.0.1:{pa}"
[[member]]
name = "b"
http_url = "http://127.0.0.1:{pb}"
[owner]
self = "{name}"
{secret}
"#,
            state = state.display(),
            tokens = tokens.display(),
            pa = ports.0,
            pb = ports.1,
            secret = common::member_secret_line(),
        )
    })
}

fn timeline(m: &Member) -> serde_json::Value {
    let (code, body) = m.get_as(&format!("/v1/machines/{MAC}/events"), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn board(m: &Member, path: &str) -> serde_json::Value {
    let (code, body) = m.get_as(path, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// (member, what) of each event.
fn steps(v: &serde_json::Value) -> Vec<(String, String)> {
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["member"].as_str().unwrap().to_string(),
                e["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_machine_answered_by_two_members_has_one_ordered_timeline() {
    let ports = (free_port(), free_port());
    let states = tempfile::tempdir().unwrap();
    let (state_a, state_b) = (states.path().join("a"), states.path().join("b"));
    let a = member("a", ports, &state_a);
    let b = member("b", ports, &state_b);
    // The machine's boot requests go to a, then b, then a (each member records what it
    // answered), with time between them so the order is the clocks' and not a tie.
    let boot = |m: &Member, name: &str| {
        let (code, _) = m.get(&format!("/v1/boot/{MAC}/{name}"));
        assert!(code == 200 || code == 404, "{code}");
        std::thread::sleep(Duration::from_millis(20));
    };
    boot(&a, "one.ipxe");
    boot(&b, "two.ipxe");
    boot(&a, "three.ipxe");
    boot(&b, "four.ipxe");

    // b owns none of them (the hash names a): it chains each to a, which answers the
    // hop too. So a has four events, b two, and the names come in boot order.
    let want_names = ["one", "two", "two", "three", "four", "four"];
    let check = |v: &serde_json::Value, asked: &str| {
        assert_eq!(v["member"], asked);
        let events = v["events"].as_array().unwrap();
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["detail"].as_str().unwrap().split('.').next().unwrap())
            .collect();
        assert_eq!(names, want_names, "from {asked}: {v}");
        let count = |m: &str| steps(v).iter().filter(|(who, _)| who == m).count();
        assert_eq!((count("a"), count("b")), (4, 2), "{v}");
        let times: Vec<u64> = events
            .iter()
            .map(|e| e["at_ms"].as_u64().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        // Each member's own events keep their order.
        for m in ["a", "b"] {
            let seqs: Vec<u64> = events
                .iter()
                .filter(|e| e["member"] == m)
                .map(|e| e["seq"].as_u64().unwrap())
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{m}: {seqs:?}");
        }
    };
    for (asked, m) in [("a", &a), ("b", &b)] {
        let v = timeline(m);
        check(&v, asked);
        assert_eq!(v["unasked"], serde_json::json!([]));
        assert_eq!(v["answered"].as_array().unwrap().len(), 2);
    }
    // `?after=` follows this member only.
    let (_, body) = a.get_as(&format!("/v1/machines/{MAC}/events?after=0"), Some(TOKEN));
    let local: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(steps(&local).len(), 4);
    assert!(steps(&local).iter().all(|(m, _)| m == "a"));

    // The board, merged the same way: the machine once, with both members that saw
    // it, and every member with its pool fill; `?local=1` is one member's view.
    for (asked, m) in [("a", &a), ("b", &b)] {
        let v = board(m, "/v1/board");
        assert_eq!(v["unasked"], serde_json::json!([]), "from {asked}: {v}");
        assert_eq!(
            (v["seen"].as_u64(), v["local"].as_bool()),
            (Some(1), Some(false))
        );
        assert_eq!(v["machines"][0]["mac"], MAC);
        assert_eq!(v["machines"][0]["members"], serde_json::json!(["a", "b"]));
        for member in v["members"].as_array().unwrap() {
            assert_eq!(member["answered"], true, "{member}");
            assert!(!member["pool_fill"].as_array().unwrap().is_empty());
        }
    }
    let v = board(&a, "/v1/board?local=1");
    assert_eq!(v["machines"][0]["members"], serde_json::json!(["a"]));
    assert_eq!(v["members"][1]["answered"], false, "{v}");
    let (code, body) = b.get("/v1/peer/board");
    assert_eq!(code, 401);
    assert!(!body.contains(MAC), "{body}");

    // The member route: nothing without the secret's proof, nothing to a wrong one.
    let (code, body) = b.get(&format!("/v1/peer/machines/{MAC}/events"));
    assert_eq!(code, 401);
    assert!(!body.contains("boot"), "{body}");
    let mut curl = std::process::Command::new("curl");
    let out = curl
        .args([
            "-s",
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args([
            "-H",
            "x-shardboot-challenge: 0123456789abcdef0123456789abcdef",
        ])
        .args(["-H", "x-shardboot-prober-proof: 00ff"])
        .arg(format!("http://{}/v1/peer/machines/{MAC}/events", b.addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");

    // b restarts: its part is read back from its disk (after its writer's interval).
    std::thread::sleep(Duration::from_millis(1_500));
    drop(b);
    let v = timeline(&a);
    assert_eq!(steps(&v).len(), 4, "{v}");
    assert_eq!(
        v["unasked"],
        serde_json::json!([{"member": "b", "why": "unreachable"}])
    );
    let v = board(&a, "/v1/board");
    assert_eq!(
        v["unasked"],
        serde_json::json!([{"member": "b", "why": "unreachable"}])
    );
    assert_eq!(v["machines"][0]["members"], serde_json::json!(["a"]));
    let b = member("b", ports, &state_b);
    wait_until("b's part is back", Duration::from_secs(10), || {
        steps(&timeline(&a)).len() == 6
    });
    check(&timeline(&a), "a");
    check(&timeline(&b), "b");
}
