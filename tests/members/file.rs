//! Members from a file (`owner.members = "file"`): two `shardboot serve` processes on
//! loopback (HTTP only) follow one members file while they run. A member added to the
//! file shows in `/v1/members` within a poll and is probed (it runs nowhere, so it
//! turns dead); a file that no longer parses keeps the list in force, marked stale with
//! the error, logged once; fixed, the list is fresh again.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::members::{free_port, wait_until, Member};

const TOKEN: &str = "members-file-test-token";

/// Writes `text` to `path` as config management should: whole, by rename.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The `[[member]]` tables of the members named, each on its port.
fn members_toml(members: &[(&str, u16)]) -> String {
    members
        .iter()
        .map(|(name, port)| {
            format!("[[member]]\nname = \"{name}\"\nhttp_url = \"http://127.0.0.1:{port}\"\n")
        })
        .collect()
}

fn start(name: &str, port: u16, members_file: &Path, tokens: &Path) -> Member {
    Member::serve(port, |dir| {
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
[owner]
members = "file"
members_file = "{file}"
members_poll_ms = 200
self = "{name}"
{secret}"#,
            state = dir.join("state").display(),
            tokens = tokens.display(),
            file = members_file.display(),
            secret = common::member_secret_line(),
        )
    })
}

fn members_view(m: &Member) -> serde_json::Value {
    let (status, body) = m.get_as("/v1/members", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn names(view: &serde_json::Value) -> Vec<String> {
    view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn members_follow_the_file_and_a_bad_file_keeps_the_last_list() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let file = dir.path().join("members.toml");
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    write_atomically(&file, &members_toml(&[("a", pa), ("b", pb)]));
    let a = start("a", pa, &file, &tokens);
    let b = start("b", pb, &file, &tokens);

    // At start: the file's two members, fresh.
    let view = members_view(&a);
    assert_eq!(view["source"], "file", "{view}");
    assert_eq!(names(&view), ["a", "b"]);
    assert_eq!(view["self"], "a");
    assert!(view["stale_since"].is_null(), "{view}");

    // c added: both members follow within a few polls, and probe it (it is dead).
    write_atomically(&file, &members_toml(&[("a", pa), ("b", pb), ("c", pc)]));
    for m in [&a, &b] {
        wait_until("three members", Duration::from_secs(5), || {
            names(&members_view(m)) == ["a", "b", "c"]
        });
    }
    wait_until("c probed dead, b alive", Duration::from_secs(10), || {
        let view = members_view(&a);
        let alive = |i: usize| view["members"][i]["alive"].as_bool();
        alive(1) == Some(true) && alive(2) == Some(false)
    });
    assert!(members_view(&a)["generation"].as_u64().unwrap() >= 1);

    // Garbage: the three stay, stale, with the error naming the file and the line.
    std::fs::write(&file, "[[member]]\nname = \"a\"\nhttp_url = http://nope\n").unwrap();
    wait_until("the list is stale", Duration::from_secs(5), || {
        !members_view(&a)["stale_since"].is_null()
    });
    let view = members_view(&a);
    assert_eq!(names(&view), ["a", "b", "c"]);
    let error = view["last_error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("members file {}: line 3: ", file.display())),
        "{error}"
    );
    // Several polls later, the error was logged once.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        a.log().matches("members file not read").count(),
        1,
        "{}",
        a.log()
    );

    // Fixed (back to two members): fresh again, the list the file gives.
    write_atomically(&file, &members_toml(&[("a", pa), ("b", pb)]));
    wait_until("fresh, two members", Duration::from_secs(5), || {
        let view = members_view(&a);
        view["stale_since"].is_null() && names(&view) == ["a", "b"]
    });
    assert!(members_view(&a)["last_error"].is_null());
}

/// A members file that cannot be read at start is an operator mistake: `serve` and
/// `check-config` refuse, naming the key, the file and the reason; a readable one is
/// shown by `check-config`.
#[test]
fn an_unreadable_members_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members.toml");
    let config = dir.path().join("shardboot.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[dhcp]\nenabled = false\n[tftp]\nenabled = false\n\
             [http]\nlisten = \"127.0.0.1:{}\"\n[owner]\nmembers = \"file\"\n\
             members_file = \"{}\"\nself = \"a\"\n{}",
            dir.path().join("state").display(),
            free_port(),
            file.display(),
            common::member_secret_line(),
        ),
    )
    .unwrap();
    let run = |cmd: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shardboot"))
            .arg("--config")
            .arg(&config)
            .arg(cmd)
            .output()
            .unwrap()
    };
    for cmd in ["check-config", "serve"] {
        let out = run(cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains(&format!(
                "owner.members_file: members file {}: ",
                file.display()
            )),
            "{cmd}: {err}"
        );
    }
    std::fs::write(&file, members_toml(&[("a", 8080), ("b", 8081)])).unwrap();
    let out = run("check-config");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "members: from file {}, read every 1000 ms: a, b",
            file.display()
        )),
        "{text}"
    );
}
