//! The manifests in deploy/kubernetes: valid against the Kubernetes schema (offline,
//! `kubernetes-validate`), and every shardboot environment they embed passes
//! `check-config`. Broken copies must fail, so the check is known to look.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `deploy/kubernetes/check.sh FILE…`, its venv inside this build's target directory.
fn check(files: &[PathBuf]) -> Output {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_shardboot"));
    let target = bin.parent().and_then(Path::parent).expect("target dir");
    Command::new(repo("deploy/kubernetes/check.sh"))
        .args(files)
        .env("SHARDBOOT", &bin)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("run check.sh")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn manifests_validate_and_embedded_environments_pass_check_config() {
    let out = check(&[]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("checked 2 embedded shardboot environments"),
        "{log}"
    );
    assert_eq!(log.matches("configuration OK").count(), 2, "{log}");
}

#[test]
fn a_broken_manifest_or_environment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let daemonset = std::fs::read_to_string(repo("deploy/kubernetes/daemonset.yaml")).unwrap();
    let configmap = std::fs::read_to_string(repo("deploy/kubernetes/configmap.yaml")).unwrap();

    // Not the schema: a misspelt field.
    let bad = dir.path().join("bad-schema.yaml");
    std::fs::write(&bad, daemonset.replace("hostNetwork:", "hostNetwrk:")).unwrap();
    let out = check(&[bad]);
    assert!(!out.status.success(), "misspelt field accepted");
    assert!(text(&out).contains("hostNetwrk"), "{}", text(&out));

    // Valid YAML, but an option shardboot cannot serve yet.
    let cm = dir.path().join("configmap.yaml");
    let ds = dir.path().join("daemonset.yaml");
    std::fs::write(
        &cm,
        configmap.replace(
            "tag:range_1,option:router,172.23.4.1",
            "tag:range_1,option:router,172.23.4.1;option:tftp-server,172.22.0.2",
        ),
    )
    .unwrap();
    std::fs::write(&ds, &daemonset).unwrap();
    let out = check(&[cm, ds]);
    assert!(!out.status.success(), "unservable DHCP_OPTIONS accepted");
    assert!(
        text(&out).contains("DHCP_OPTIONS: entry \"option:tftp-server,172.22.0.2\""),
        "{}",
        text(&out)
    );
}
