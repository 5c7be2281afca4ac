//! ironic-image's iPXE-over-TLS variables (`scripts/tls-common.sh`, `runhttpd`): a
//! certificate at [`IPXE_CERT_FILE`] (or `IPXE_TLS_SETUP=true`) turns TLS on; the TLS
//! boot routes listen on `IPXE_TLS_PORT` (8084) with that certificate and key; the
//! firmware comes from `IPXE_CUSTOM_FIRMWARE_DIR`, with no fallback to the image's own
//! (which trusts no site CA). Unlike ironic-image, no chain host is built into that
//! firmware: each member tells its machines its own address over DHCP (docs/tls-boot.md).

use std::collections::BTreeMap;

use toml::{Table, Value};

use super::{custom_firmware_dir, get, HostFacts};
use crate::config::issues::Issues;

/// The iPXE listener's certificate, as ironic-image mounts it.
pub const IPXE_CERT_FILE: &str = "/certs/ipxe/tls.crt";
/// Its key.
pub const IPXE_KEY_FILE: &str = "/certs/ipxe/tls.key";
/// Ironic's CA (`IRONIC_CACERT_FILE`'s default): the chain checks of conductors'
/// HTTPS per-node configs and other members' TLS boot routes trust it.
pub const IRONIC_CA_FILE: &str = "/certs/ca/ironic/tls.crt";
/// `IPXE_TLS_PORT`'s default.
const TLS_PORT_DEFAULT: u16 = 8084;

/// Whether TLS is on: ironic-image decides by the certificate file, which a Secret
/// mount puts there; `IPXE_TLS_SETUP=true` without it is a mistake to report.
fn enabled(vars: &BTreeMap<String, String>, host: &HostFacts, issues: &mut Issues) -> bool {
    let var = get(vars, "IPXE_TLS_SETUP").map(str::to_ascii_lowercase);
    match var.as_deref() {
        None | Some("true") | Some("false") => {}
        Some(other) => issues.add(
            "IPXE_TLS_SETUP",
            format!("{other:?}: must be true or false"),
        ),
    }
    if var.as_deref() == Some("true") && !host.ipxe_cert_readable {
        issues.add(
            "IPXE_TLS_SETUP",
            format!("true, but {IPXE_CERT_FILE} is not readable (mount the iPXE certificate)"),
        );
    }
    host.ipxe_cert_readable
}

/// Adds the TLS keys to `http` and `boot` when TLS is on; `listen_ip` is the plain
/// listener's host part (`0.0.0.0`, `[::]` or `IRONIC_IP`).
pub(super) fn tls(
    vars: &BTreeMap<String, String>,
    host: &HostFacts,
    listen_ip: &str,
    http: &mut Table,
    boot: &mut Table,
    issues: &mut Issues,
    origin: &mut impl FnMut(String, &'static str, Option<String>),
) {
    if !enabled(vars, host, issues) {
        return;
    }
    let port = match get(vars, "IPXE_TLS_PORT").map(str::parse::<u16>) {
        None => TLS_PORT_DEFAULT,
        Some(Ok(p)) if p > 0 => p,
        Some(_) => {
            issues.add("IPXE_TLS_PORT", "must be a port number (1 to 65535)");
            return;
        }
    };
    for (key, file) in [("tls_cert", IPXE_CERT_FILE), ("tls_key", IPXE_KEY_FILE)] {
        http.insert(key.into(), Value::String(file.into()));
        origin(format!("http.{key}"), "IPXE_TLS_SETUP", None);
    }
    http.insert(
        "tls_listen".into(),
        Value::String(format!("{listen_ip}:{port}")),
    );
    origin("http.tls_listen".into(), "IPXE_TLS_PORT", None);
    if host.ironic_ca_readable {
        http.insert("chain_ca".into(), Value::String(IRONIC_CA_FILE.into()));
        origin("http.chain_ca".into(), "IRONIC_CACERT_FILE", None);
    }
    boot.insert("ipxe_tls".into(), Value::Boolean(true));
    origin("boot.ipxe_tls".into(), "IPXE_TLS_SETUP", None);
    // runhttpd: "No fallback to /tftpboot here". A NIC's iPXE sent the stock build
    // would be sent it again by that build, forever.
    if !host.custom_firmware_readable {
        issues.add(
            "IPXE_CUSTOM_FIRMWARE_DIR",
            format!(
                "{} is not readable: with TLS on, iPXE must be the site's build with its CA \
                 (deploy/ipxe/build.sh), never the image's own",
                custom_firmware_dir(vars).display()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::{Config, ConfigError, ConfigIssue};

    fn vars(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        [
            ("PROVISIONING_INTERFACE", "prov0"),
            ("DHCP_RANGE", "192.0.2.10,192.0.2.100"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn host(cert: bool, firmware: bool) -> HostFacts {
        HostFacts {
            addresses: vec![("prov0".into(), "192.0.2.2/24".parse().unwrap())],
            macs: vec![],
            custom_firmware_readable: firmware,
            database_ca_readable: false,
            ipxe_cert_readable: cert,
            ironic_ca_readable: false,
        }
    }

    /// The files ironic-image mounts, as `--set` overrides to temporary files.
    fn files(dir: &std::path::Path) -> Vec<(String, String)> {
        ["tls_cert", "tls_key"]
            .iter()
            .map(|k| {
                let p = dir.join(k);
                std::fs::write(&p, "pem").unwrap();
                (format!("http.{k}"), p.display().to_string())
            })
            .collect()
    }

    fn load(
        v: &BTreeMap<String, String>,
        h: &HostFacts,
        o: &[(String, String)],
    ) -> Result<Config, Vec<ConfigIssue>> {
        match Config::from_ironic_env(v, h, o) {
            Ok(c) => Ok(c),
            Err(ConfigError::Invalid(i)) => Err(i),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_mounted_ipxe_certificate_turns_on_the_tls_boot_listener() {
        let dir = tempfile::tempdir().unwrap();
        let c = load(&vars(&[]), &host(true, true), &files(dir.path())).unwrap();
        assert_eq!(c.http.tls_listen, Some("0.0.0.0:8084".parse().unwrap()));
        assert!(c.boot.ipxe_tls);
        assert_eq!(c.boot.https_port, 8084);
        assert!(
            c.http.plain_boot,
            "the plain listener stays, as ironic-image's httpd"
        );
        let c = load(
            &vars(&[("IPXE_TLS_PORT", "9443"), ("IPXE_TLS_SETUP", "true")]),
            &host(true, true),
            &files(dir.path()),
        )
        .unwrap();
        assert_eq!(c.http.tls_listen, Some("0.0.0.0:9443".parse().unwrap()));
        assert_eq!(c.boot.https_port, 9443);
        // On IRONIC_IP only, like the plain listener.
        let c = load(
            &vars(&[
                ("IRONIC_IP", "192.0.2.2"),
                ("LISTEN_ALL_INTERFACES", "false"),
            ]),
            &host(true, true),
            &files(dir.path()),
        )
        .unwrap();
        assert_eq!(c.http.tls_listen, Some("192.0.2.2:8084".parse().unwrap()));
        // No certificate: plain, as before.
        let c = load(&vars(&[]), &host(false, false), &[]).unwrap();
        assert_eq!((c.http.tls_listen, c.boot.ipxe_tls), (None, false));
    }

    #[test]
    fn tls_without_its_certificate_or_the_site_firmware_is_refused_by_variable() {
        let issues = load(
            &vars(&[("IPXE_TLS_SETUP", "true")]),
            &host(false, true),
            &[],
        )
        .unwrap_err();
        assert!(
            issues.iter().any(|i| i.key == "IPXE_TLS_SETUP"
                && i.reason.contains("/certs/ipxe/tls.crt is not readable")),
            "{issues:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let issues = load(&vars(&[]), &host(true, false), &files(dir.path())).unwrap_err();
        assert!(
            issues.iter().any(|i| i.key == "IPXE_CUSTOM_FIRMWARE_DIR"
                && i.reason
                    .contains("/shared/custom_ipxe_firmware is not readable")),
            "{issues:?}"
        );
        let issues = load(
            &vars(&[("IPXE_TLS_PORT", "0")]),
            &host(true, true),
            &files(dir.path()),
        )
        .unwrap_err();
        assert!(
            issues.iter().any(|i| i.key == "IPXE_TLS_PORT"),
            "{issues:?}"
        );
        // The files as ironic-image names them, missing here: reported under the
        // variable that turned TLS on.
        let issues = load(&vars(&[]), &host(true, true), &[]).unwrap_err();
        assert!(
            issues.iter().any(|i| i.key == "IPXE_TLS_SETUP"
                && i.reason
                    .contains("/certs/ipxe/tls.key is not a readable file")),
            "{issues:?}"
        );
    }
}
