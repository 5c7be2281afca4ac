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
        log.contains("checked 3 embedded shardboot environments"),
        "{log}"
    );
    assert_eq!(log.matches("configuration OK").count(), 3, "{log}");
    // The HA DaemonSet and the IrSO HA override get their Secret-backed files.
    for file in ["daemonset.yaml", "irso-ha-override.yaml"] {
        let section = log
            .split("deploy/kubernetes/")
            .find(|s| s.starts_with(&format!("{file}: ")))
            .unwrap_or_else(|| panic!("{file} not checked:\n{log}"));
        for var in [
            "SHARDBOOT_OWNER__MEMBER_SECRET_FILE=/run/shardboot/member-secret",
            "SHARDBOOT_OWNER__IRONIC__PASSWORD_FILE=/auth/ironic/password",
            "SHARDBOOT_OWNER__IRONIC__CA_FILE=/certs/ironic/ca.crt",
        ] {
            assert!(
                section.contains(&format!("stood in for {var}")),
                "{file}: {var}:\n{log}"
            );
        }
    }
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

    // Valid YAML, but an option name that does not exist.
    let cm = dir.path().join("configmap.yaml");
    let ds = dir.path().join("daemonset.yaml");
    std::fs::write(
        &cm,
        configmap.replace(
            "tag:range_1,option:router,172.23.4.1",
            "tag:range_1,option:router,172.23.4.1;option:tftp-servr,172.22.0.2",
        ),
    )
    .unwrap();
    std::fs::write(&ds, &daemonset).unwrap();
    let out = check(&[cm.clone(), ds.clone()]);
    assert!(!out.status.success(), "unservable DHCP_OPTIONS accepted");
    assert!(
        text(&out).contains(
            "DHCP_OPTIONS: entry \"option:tftp-servr,172.22.0.2\": \"option:tftp-servr\": no option is called"
        ),
        "{}",
        text(&out)
    );

    // Members from Ironic without the member secret.
    let secret_env = "            - name: SHARDBOOT_OWNER__MEMBER_SECRET_FILE\n              value: /run/shardboot/member-secret\n";
    assert!(daemonset.contains(secret_env), "daemonset.yaml changed");
    std::fs::write(&cm, &configmap).unwrap();
    std::fs::write(&ds, daemonset.replace(secret_env, "")).unwrap();
    let out = check(&[cm.clone(), ds.clone()]);
    assert!(!out.status.success(), "members without a secret accepted");
    assert!(
        text(&out).contains("owner.member_secret_file: is required"),
        "{}",
        text(&out)
    );

    // A Secret-backed file the container does not mount.
    let ca_mount = "            - name: ironic-ca\n              mountPath: /certs/ironic\n              readOnly: true\n";
    assert!(daemonset.contains(ca_mount), "daemonset.yaml changed");
    std::fs::write(&ds, daemonset.replace(ca_mount, "")).unwrap();
    let out = check(&[cm, ds]);
    assert!(!out.status.success(), "unmounted CA file accepted");
    assert!(
        text(&out).contains(
            "SHARDBOOT_OWNER__IRONIC__CA_FILE: /certs/ironic/ca.crt is not in any volume the container mounts"
        ),
        "{}",
        text(&out)
    );
}
