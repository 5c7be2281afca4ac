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
    // The HA DaemonSet and the IrSO HA override get their Secret-backed files, and
    // their members a database of shardboot's own on Ironic's MariaDB server, with the
    // user and password of the Secret IrSO gives Ironic, mounted where IrSO mounts it.
    for file in ["daemonset.yaml", "irso-ha-override.yaml"] {
        let section = section(&log, file);
        for var in [
            "SHARDBOOT_OWNER__IRONIC__PASSWORD_FILE=/auth/ironic/password",
            "SHARDBOOT_OWNER__IRONIC__CA_FILE=/certs/ironic/ca.crt",
            "SHARDBOOT_STORE__CA_FILE=/certs/ca/mariadb/tls.crt",
        ] {
            assert!(
                section.contains(&format!("stood in for {var}")),
                "{file}: {var}:\n{log}"
            );
        }
        assert!(
            section.contains(
                "store: shared MySql database mysql://mariadb.baremetal-operator-system.svc/shardboot \
                 (credentials from /auth/mariadb, TLS verified with "
            ),
            "{file}: no shared store of its own:\n{log}"
        );
        assert!(
            section.contains("store credentials from a mounted Secret: /auth/mariadb"),
            "{file}:\n{log}"
        );
    }
    // A single instance keeps its leases on its node.
    assert!(
        section(&log, "irso-override.yaml").contains("store: embedded (sled) in state_dir"),
        "{log}"
    );
}

/// What check.sh printed for `file`.
fn section<'a>(log: &'a str, file: &str) -> &'a str {
    log.split("deploy/kubernetes/")
        .find(|s| s.starts_with(&format!("{file}: ")))
        .unwrap_or_else(|| panic!("{file} not checked:\n{log}"))
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

    // The ConfigMap as shipped from here on.
    std::fs::write(&cm, &configmap).unwrap();

    // Members without Ironic's database settings: the shared store is missing.
    let use_db = "            - name: IRONIC_USE_MARIADB\n              value: \"true\"\n";
    let host = "            - name: MARIADB_HOST\n              value: mariadb.baremetal-operator-system.svc\n";
    let store_ca = "            - name: SHARDBOOT_STORE__CA_FILE\n              value: /certs/ca/mariadb/tls.crt\n";
    for part in [use_db, host, store_ca] {
        assert!(daemonset.contains(part), "daemonset.yaml changed: {part}");
    }
    std::fs::write(
        &ds,
        daemonset
            .replace(use_db, "")
            .replace(host, "")
            .replace(store_ca, ""),
    )
    .unwrap();
    let out = check(&[cm.clone(), ds.clone()]);
    assert!(
        !out.status.success(),
        "members without a shared store accepted"
    );
    assert!(
        text(&out).contains("store.shared: is required with two or more [[member]]s"),
        "{}",
        text(&out)
    );

    // The database Secret not mounted where the store reads it.
    let db_mount = "            - name: ironic-db\n              mountPath: /auth/mariadb\n              readOnly: true\n";
    assert!(daemonset.contains(db_mount), "daemonset.yaml changed");
    std::fs::write(&ds, daemonset.replace(db_mount, "")).unwrap();
    let out = check(&[cm.clone(), ds.clone()]);
    assert!(!out.status.success(), "unmounted database Secret accepted");
    assert!(
        text(&out).contains(
            "store credentials: /auth/mariadb/username is not in any volume the container mounts"
        ),
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
