//! `check-config --explain` through the binary: the layers as the command line and the
//! environment give them, each value's source, secrets masked; and plain `check-config` on
//! a file with problems of both kinds: every one listed in one run, each by its key.

use std::process::Command;

const FILE: &str = r#"
state_dir = "/tmp/shardboot-explain"
[dhcp]
port = 6767
[owner]
resolvers = ["ironic", "hash"]
[owner.ironic]
url = "http://127.0.0.1:6385"
username = "admin"
password = "hunter2-not-shown"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.10 - 192.0.2.20"]
"#;

#[test]
fn explain_names_file_variable_flag_and_default_and_masks_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(&path, FILE).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&path)
        .args([
            "--set",
            "subnet.0.lease_time=600",
            "check-config",
            "--explain",
        ])
        .env("SHARDBOOT_DHCP__PORT", "6868")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = format!("# file {}", path.display());
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} = ")) || l.starts_with(&format!("# {key}: ")))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
    };
    assert_eq!(
        line("state_dir"),
        format!("state_dir = \"/tmp/shardboot-explain\"  {file}")
    );
    assert_eq!(
        line("dhcp.port"),
        "dhcp.port = 6868  # environment SHARDBOOT_DHCP__PORT"
    );
    assert_eq!(
        line("subnet[0].lease_time"),
        "subnet[0].lease_time = 600  # flag --set"
    );
    assert_eq!(
        line("http.listen"),
        "http.listen = \"0.0.0.0:8080\"  # default"
    );
    assert_eq!(
        line("dhcp.server_id"),
        "# dhcp.server_id: not set: off, or derived from other keys"
    );
    assert_eq!(
        line("owner.ironic.password"),
        format!("owner.ironic.password = \"********\"  {file}")
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn explain_of_the_built_in_default_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .args(["check-config", "--explain"])
        .env_remove("SHARDBOOT_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "subnet[0].network = \"192.0.2.0/24\"  # built-in default config"),
        "{text}"
    );
}

#[test]
fn check_config_lists_structural_and_semantic_problems_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
log_level = "info,shardboot=loudest"
[dhcp]
portt = 67
server_id = "300.1.1.1"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.10 - 192.0.2.20"]
[[subnet]]
network = "198.51.100.0/24"
ranges = ["198.51.100.50 - 198.51.100.40"]
lease_time = "an hour"
"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&path)
        .arg("check-config")
        .env_remove("SHARDBOOT_DATABASE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    // Under the first line, "shardboot: invalid configuration:", one problem a line.
    let listed: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(": ").map(|(k, _)| k))
        .collect();
    assert_eq!(
        listed,
        [
            "dhcp.portt",
            "subnet[1].lease_time",
            "log_level",
            "dhcp.server_id",
            "subnet[1].ranges[0]",
        ],
        "{text}"
    );
    assert!(text.contains("did you mean `port`?"), "{text}");
    assert!(
        text.contains("subnet[1].lease_time: invalid type: string \"an hour\""),
        "{text}"
    );
}
