//! Members of one shared lease store need no hand-made member secret: two `shardboot
//! serve` processes on loopback, started at the same moment, no
//! `owner.member_secret_file`, one real MariaDB or PostgreSQL database. Either
//! member's `/v1/machines/{mac}/events` and `/v1/board` hold both members' parts (each
//! verified under the secret the store keeps), the store holds one secret for both,
//! and a member given a secret file of its own uses that file: the two then refuse
//! each other, and each names the other as not asked.

use crate::common;

use common::db::{DbServer, Kind};
use common::members::{free_port, Member};

const TOKEN: &str = "shared-secret-test-token-012345";
const MAC: &str = "52:54:00:ab:00:02";

/// Member `name` of a and b with the store table `store`; `secret`: an
/// `owner.member_secret_file` line, or nothing.
fn member(name: &str, ports: (u16, u16), store: &str, secret: &str) -> Member {
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
{store}"#,
            state = dir.join("state").display(),
            tokens = tokens.display(),
            pa = ports.0,
            pb = ports.1,
        )
    })
}

fn timeline(m: &Member) -> serde_json::Value {
    let (code, body) = m.get_as(&format!("/v1/machines/{MAC}/events"), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// How many of the merged events each of a and b gave.
fn counts(v: &serde_json::Value) -> (usize, usize) {
    let events = v["events"].as_array().unwrap();
    let of = |m: &str| events.iter().filter(|e| e["member"] == m).count();
    (of("a"), of("b"))
}

fn two_members_merge_under_the_stores_secret(kind: Kind) {
    let mut db = DbServer::start(kind, None);
    let store = db.store_table();
    let ports = (free_port(), free_port());
    // Both start at once: each may find no secret and insert its own; the store keeps
    // the first, and both read that one.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| member("a", ports, &store, ""));
        let b = scope.spawn(|| member("b", ports, &store, ""));
        (a.join().unwrap(), b.join().unwrap())
    });
    // One boot request to each member: each records what it was asked.
    for m in [&a, &b] {
        let (code, _) = m.get(&format!("/v1/boot/{MAC}/one.ipxe"));
        assert!(code == 200 || code == 404, "{code}");
    }
    for (asked, m) in [("a", &a), ("b", &b)] {
        let v = timeline(m);
        assert_eq!(v["unasked"], serde_json::json!([]), "from {asked}: {v}");
        let (from_a, from_b) = counts(&v);
        assert!(from_a >= 1 && from_b >= 1, "from {asked}: {v}");
        // The board too: the machine once, seen by both.
        let (code, body) = m.get_as("/v1/board", Some(TOKEN));
        assert_eq!(code, 200, "{body}");
        let board: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            board["unasked"],
            serde_json::json!([]),
            "from {asked}: {board}"
        );
        assert_eq!(
            board["machines"][0]["members"],
            serde_json::json!(["a", "b"])
        );
    }
    // One secret in the store, made by whichever member came first.
    // (store_table made the server's first database, sb1.)
    let out = db.admin_in(
        Some("sb1"),
        "SELECT COUNT(*), MIN(LENGTH(secret)) FROM shardboot_member_secret",
    );
    let text = String::from_utf8_lossy(&out.stdout).replace(['|', '\t'], " ");
    assert_eq!(
        text.trim(),
        "1 64",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // b restarts with a secret file of its own: the file wins over the store's, so
    // the two no longer share a secret and each refuses the other's request, which
    // the asker names.
    drop(b);
    let b = member("b", ports, &store, &common::member_secret_line());
    let (code, _) = b.get(&format!("/v1/boot/{MAC}/two.ipxe"));
    assert!(code == 200 || code == 404, "{code}");
    for (m, other) in [(&a, "b"), (&b, "a")] {
        let v = timeline(m);
        assert_eq!(
            v["unasked"],
            serde_json::json!([{"member": other, "why": "refused"}]),
            "{v}"
        );
        let (from_a, from_b) = counts(&v);
        assert_eq!(if other == "b" { from_b } else { from_a }, 0, "{v}");
    }
    assert!(counts(&timeline(&b)).1 >= 1);
}

#[test]
fn two_members_of_one_mariadb_store_merge_without_a_secret_file() {
    two_members_merge_under_the_stores_secret(Kind::MariaDb);
}

#[test]
fn two_members_of_one_postgresql_store_merge_without_a_secret_file() {
    two_members_merge_under_the_stores_secret(Kind::Postgres);
}
