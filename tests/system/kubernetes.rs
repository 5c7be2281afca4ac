//! The kustomize overlays in deploy/kubernetes/overlays: each renders (kustomize, or
//! `kubectl kustomize`, and the offline renderer `render.py` must agree), is valid
//! against the Kubernetes schema (offline, `kubernetes-validate`) and its Ironic against
//! IrSO's CRD, its alerts name metrics the server renders, and every shardboot
//! environment it embeds passes `check-config` with an operator token copied from a
//! Secret. Broken copies must fail, so the check is known to look.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `deploy/kubernetes/check.sh ARG…`, its venv inside this build's target directory.
fn check(args: &[PathBuf]) -> Output {
    check_with(args, &[])
}

/// [`check`] with more environment variables.
fn check_with(args: &[PathBuf], vars: &[(&str, &str)]) -> Output {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_shardboot"));
    let target = bin.parent().and_then(Path::parent).expect("target dir");
    Command::new(repo("deploy/kubernetes/check.sh"))
        .args(args)
        .env("SHARDBOOT", &bin)
        .env("CARGO_TARGET_DIR", target)
        .envs(vars.iter().copied())
        .output()
        .expect("run check.sh")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Everything check.sh printed for the rendered overlay `name`.
fn section(log: &str, name: &str) -> String {
    let prefix = format!("{name}.yaml: ");
    let parts: Vec<&str> = log
        .split("overlays/")
        .filter(|s| s.starts_with(&prefix))
        .collect();
    assert!(!parts.is_empty(), "{name} not checked:\n{log}");
    parts.concat()
}

const ALERTS: [&str; 7] = [
    "ShardbootSharedStoreDown",
    "ShardbootMemberDown",
    "ShardbootStoreFailing",
    "ShardbootPoolNearlyEmpty",
    "ShardbootMembersStale",
    "ShardbootMachinesUnanswered",
    "ShardbootIronicUnreachable",
];

#[test]
fn overlays_render_validate_and_embedded_environments_pass_check_config() {
    let out = check(&[]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for overlay in ["daemonset", "irso", "irso-ha"] {
        assert!(
            log.contains(&format!("overlays/{overlay}: rendered by ")),
            "{overlay} not rendered:\n{log}"
        );
        let section = section(&log, overlay);
        assert!(
            section.contains("operator token from Secret 'shardboot-operator-token', copied by ")
                && section.contains("to /run/shardboot/operator-token (uid 997, 0600, memory)"),
            "{overlay}: no operator token:\n{log}"
        );
        for alert in ALERTS {
            assert!(section.contains(alert), "{overlay}: no {alert}:\n{log}");
        }
        assert!(
            section.contains("Pod Security enforce privileged"),
            "{overlay}: no Pod Security label:\n{log}"
        );
        // Boot over TLS is one Secret away, where ironic-image reads it, and its
        // absence stops no pod.
        assert!(
            section.contains(
                "boot over TLS from optional Secrets: /certs/ipxe/tls.crt, \
                 /certs/ipxe/tls.key, /certs/ca/ironic/tls.crt"
            ),
            "{overlay}: no TLS mounts:\n{log}"
        );
    }
    assert!(
        log.contains("checked 3 embedded shardboot environments"),
        "{log}"
    );
    assert_eq!(log.matches("configuration OK").count(), 3, "{log}");
    assert!(
        log.contains("checked 2 custom resources against their CRD"),
        "{log}"
    );
    // The HA DaemonSet and the IrSO HA overlay get their Secret-backed files, and
    // their members a database of shardboot's own on Ironic's MariaDB server, with the
    // user and password of the Secret IrSO gives Ironic, mounted where IrSO mounts it.
    for overlay in ["daemonset", "irso-ha"] {
        let section = section(&log, overlay);
        for var in [
            "SHARDBOOT_OWNER__IRONIC__PASSWORD_FILE=/auth/ironic/password",
            "SHARDBOOT_OWNER__IRONIC__CA_FILE=/certs/ironic/ca.crt",
            "SHARDBOOT_STORE__CA_FILE=/certs/ca/mariadb/tls.crt",
            "SHARDBOOT_HTTP__TOKEN_FILE=/run/shardboot/operator-token",
        ] {
            assert!(
                section.contains(&format!("stood in for {var}")),
                "{overlay}: {var}:\n{log}"
            );
        }
        assert!(
            section.contains(
                "store: shared MySql database mysql://mariadb.baremetal-operator-system.svc/shardboot \
                 (credentials from /auth/mariadb, TLS verified with "
            ),
            "{overlay}: no shared store of its own:\n{log}"
        );
        assert!(
            section.contains("store credentials from a mounted Secret: /auth/mariadb"),
            "{overlay}:\n{log}"
        );
    }
    // A single instance keeps its leases on its node, and IrSO's spec.networking says
    // what network.env says.
    let irso = section(&log, "irso");
    assert!(
        irso.contains("store: embedded (sled) in state_dir"),
        "{log}"
    );
    assert!(
        irso.contains("spec.networking agrees with DHCP_RANGE 172.22.0.10-172.22.0.100"),
        "{log}"
    );
}

/// Where neither kustomize nor kubectl is installed, render.py alone renders the
/// overlays, and they pass the same checks.
#[test]
fn overlays_pass_with_the_offline_renderer_alone() {
    let out = check_with(&[], &[("SB_KUSTOMIZE", "none")]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for overlay in ["daemonset", "irso", "irso-ha"] {
        assert!(
            log.contains(&format!("overlays/{overlay}: rendered by render.py alone")),
            "{log}"
        );
    }
    assert!(
        log.contains("checked 3 embedded shardboot environments"),
        "{log}"
    );
}

/// A copy of deploy/kubernetes's base, overlays and CRDs to break.
fn tree() -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let dest = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &dest);
            } else {
                std::fs::copy(e.path(), dest).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for sub in ["base", "overlays", "crds"] {
        copy(
            &repo(&format!("deploy/kubernetes/{sub}")),
            &dir.path().join(sub),
        );
    }
    dir
}

/// Replaces `from` (which must be there) by `to` in the copy's `file`.
fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} changed: {from}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// check.sh on the copy's overlay `name` fails and says `why`.
fn refused(dir: &Path, name: &str, what: &str, why: &str) {
    let out = check(&[dir.join("overlays").join(name)]);
    let log = text(&out);
    assert!(!out.status.success(), "{what} accepted:\n{log}");
    assert!(log.contains(why), "{what}: not refused for {why:?}:\n{log}");
}

#[test]
fn a_broken_overlay_is_refused() {
    // Not the schema: a misspelt field.
    let t = tree();
    let ds = "overlays/daemonset/daemonset.yaml";
    edit(t.path(), ds, "hostNetwork:", "hostNetwrk:");
    refused(t.path(), "daemonset", "misspelt field", "hostNetwrk");

    // Valid YAML, but an option name that does not exist, in the base every overlay
    // shares.
    let t = tree();
    edit(
        t.path(),
        "base/network.env",
        "DNS_IP=provisioning\n",
        "DNS_IP=provisioning\nDHCP_OPTIONS=option:tftp-servr,172.22.0.2\n",
    );
    refused(
        t.path(),
        "daemonset",
        "unservable DHCP_OPTIONS",
        "DHCP_OPTIONS: entry \"option:tftp-servr,172.22.0.2\": \"option:tftp-servr\": no option is called",
    );

    // Members without Ironic's database settings: the shared store is missing.
    let t = tree();
    let use_db = "            - name: IRONIC_USE_MARIADB\n              value: \"true\"\n";
    let host = "            - name: MARIADB_HOST\n              value: mariadb.baremetal-operator-system.svc\n";
    let store_ca = "            - name: SHARDBOOT_STORE__CA_FILE\n              value: /certs/ca/mariadb/tls.crt\n";
    for part in [use_db, host, store_ca] {
        edit(t.path(), ds, part, "");
    }
    refused(
        t.path(),
        "daemonset",
        "members without a shared store",
        "store.shared: is required with two or more [[member]]s",
    );

    // The database Secret not mounted where the store reads it.
    let t = tree();
    edit(
        t.path(),
        ds,
        "            - name: ironic-db\n              mountPath: /auth/mariadb\n              readOnly: true\n",
        "",
    );
    refused(
        t.path(),
        "daemonset",
        "unmounted database Secret",
        "store credentials: /auth/mariadb/username is not in any volume the container mounts",
    );

    // A Secret-backed file the container does not mount.
    let t = tree();
    edit(
        t.path(),
        ds,
        "            - name: ironic-ca\n              mountPath: /certs/ironic\n              readOnly: true\n",
        "",
    );
    refused(
        t.path(),
        "daemonset",
        "unmounted CA file",
        "SHARDBOOT_OWNER__IRONIC__CA_FILE: /certs/ironic/ca.crt is not in any volume the container mounts",
    );

    // The iPXE certificate's Secret required: a site without TLS could not start.
    let t = tree();
    edit(
        t.path(),
        "overlays/irso-ha/ironic.yaml",
        "secretName: shardboot-ipxe-tls\n          optional: true\n",
        "secretName: shardboot-ipxe-tls\n",
    );
    refused(
        t.path(),
        "irso-ha",
        "a required TLS Secret",
        "boot over TLS: /certs/ipxe/tls.crt: Secret 'shardboot-ipxe-tls' is not optional",
    );

    // Ironic's CA not mounted where ironic-image keeps it.
    let t = tree();
    edit(
        t.path(),
        ds,
        "            - name: ironic-ca-chain\n              mountPath: /certs/ca/ironic\n              readOnly: true\n",
        "",
    );
    refused(
        t.path(),
        "daemonset",
        "no CA for the chain checks",
        "boot over TLS: /certs/ca/ironic/tls.crt is not in any volume the container mounts",
    );

    // No operator token: the API would refuse everything, as the issue found.
    let t = tree();
    edit(
        t.path(),
        "base/network.env",
        "SHARDBOOT_HTTP__TOKEN_FILE=/run/shardboot/operator-token\n",
        "",
    );
    refused(t.path(), "irso", "no operator token", "no operator token");

    // The token read straight from a Secret volume: root's file, not the server's.
    let t = tree();
    edit(
        t.path(),
        "base/network.env",
        "SHARDBOOT_HTTP__TOKEN_FILE=/run/shardboot/operator-token",
        "SHARDBOOT_HTTP__TOKEN_FILE=/auth/ironic/password",
    );
    refused(
        t.path(),
        "irso-ha",
        "token from a Secret volume",
        "operator token /auth/ironic/password is a Secret's file, owned by root",
    );

    // The token's Secret readable by every user of the pod.
    let t = tree();
    edit(
        t.path(),
        "overlays/irso/ironic.yaml",
        "secretName: shardboot-operator-token\n          defaultMode: 0440",
        "secretName: shardboot-operator-token\n          defaultMode: 0444",
    );
    refused(
        t.path(),
        "irso",
        "world-readable token Secret",
        "is readable by every user of the pod",
    );

    // A field IrSO's Ironic does not have.
    let t = tree();
    edit(
        t.path(),
        "overlays/irso-ha/ironic.yaml",
        "highAvailability: true",
        "highAvailabilty: true",
    );
    refused(
        t.path(),
        "irso-ha",
        "unknown Ironic field",
        "'highAvailabilty' was unexpected",
    );

    // The range stated twice again: a replacement dropped leaves the Ironic's own.
    let t = tree();
    let k = "overlays/irso/kustomization.yaml";
    let text = std::fs::read_to_string(t.path().join(k)).unwrap();
    let end = text
        .find("          - spec.networking.dhcp.rangeEnd\n")
        .unwrap()
        + "          - spec.networking.dhcp.rangeEnd\n".len();
    let start = text[..end].rfind("  - source:").unwrap();
    std::fs::write(
        t.path().join(k),
        format!("{}{}", &text[..start], &text[end..]),
    )
    .unwrap();
    refused(
        t.path(),
        "irso",
        "a range that drifted",
        "spec.networking.dhcp.rangeEnd is 'set-by-kustomize' but DHCP_RANGE gives '172.22.0.100'",
    );

    // A namespace whose Pod Security level would refuse the pods.
    let t = tree();
    edit(
        t.path(),
        "overlays/daemonset/namespace.yaml",
        "pod-security.kubernetes.io/enforce: privileged",
        "pod-security.kubernetes.io/enforce: baseline",
    );
    refused(
        t.path(),
        "daemonset",
        "a baseline namespace",
        "namespace shardboot: pod-security.kubernetes.io/enforce is 'baseline'",
    );

    // An alert on a metric the server does not render.
    let t = tree();
    edit(
        t.path(),
        "base/prometheusrule.yaml",
        "expr: shardboot_members_stale == 1",
        "expr: shardboot_members_stalled == 1",
    );
    refused(
        t.path(),
        "daemonset",
        "an alert on no metric",
        "ShardbootMembersStale: no metric shardboot_members_stalled in the source",
    );
}
