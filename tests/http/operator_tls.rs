//! The HTTP listener over TLS with client certificates, driven by curl on loopback: boot
//! routes and health need no certificate; the operator API accepts a client certificate
//! from the configured CA in place of a token; a certificate from another CA or an
//! expired one fails the handshake; a bad certificate file stops start-up with its key.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::members::{free_port, wait_until};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
    }

    /// Writes `<name>.pem` and `<name>.key` signed by `ca`.
    fn leaf(
        &self,
        name: &str,
        ca: &CertifiedIssuer<'static, KeyPair>,
        sans: &[&str],
        purpose: ExtendedKeyUsagePurpose,
        expired: bool,
    ) {
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![purpose];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = p.signed_by(&key, ca).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

const TOKEN: &str = "tls-test-token-0123456789";

fn config(pki: &Pki, port: u16, cert: &Path) -> String {
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
tls_cert = "{cert}"
tls_key = "{key}"
client_ca = "{ca}"
"#,
        state = pki.path("state").display(),
        tokens = pki.path("tokens").display(),
        cert = cert.display(),
        key = pki.path("server.key").display(),
        ca = pki.path("clients-ca.pem").display(),
    )
}

/// curl over TLS; (exit ok, HTTP status).
fn curl(pki: &Pki, port: u16, path: &str, extra: &[String]) -> (bool, u16) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "5",
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--cacert")
        .arg(pki.path("server-ca.pem"))
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (out.status.success(), code)
}

fn cert_args(pki: &Pki, name: &str) -> Vec<String> {
    vec![
        "--cert".into(),
        pki.path(&format!("{name}.pem")).display().to_string(),
        "--key".into(),
        pki.path(&format!("{name}.key")).display().to_string(),
    ]
}

#[test]
fn operator_api_over_tls_with_client_certificates() {
    let pki = Pki {
        dir: tempfile::tempdir().unwrap(),
    };
    let server_ca = Pki::ca("server CA");
    let clients_ca = Pki::ca("operators CA");
    let other_ca = Pki::ca("somebody else's CA");
    std::fs::write(pki.path("server-ca.pem"), server_ca.pem()).unwrap();
    std::fs::write(pki.path("clients-ca.pem"), clients_ca.pem()).unwrap();
    std::fs::write(pki.path("tokens"), format!("{TOKEN}\n")).unwrap();
    pki.leaf(
        "server",
        &server_ca,
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
        false,
    );
    pki.leaf(
        "operator",
        &clients_ca,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    );
    pki.leaf(
        "stranger",
        &other_ca,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    );
    pki.leaf(
        "retired",
        &clients_ca,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        true,
    );

    let port = free_port();
    let cfg = pki.path("shardboot.toml");
    std::fs::write(&cfg, config(&pki, port, &pki.path("server.pem"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("HTTPS up", Duration::from_secs(20), || {
        curl(&pki, port, "/healthz", &[]).1 == 200
    });

    // Public routes: no certificate, no token (an unknown MAC is a miss, not a 401).
    assert_eq!(curl(&pki, port, "/boot.ipxe", &[]).1, 200);
    assert_eq!(
        curl(&pki, port, "/v1/boot/52:54:00:12:34:56/boot.ipxe", &[]).1,
        404
    );
    // Operator API: nothing → 401; a token → 200; the operators' certificate → 200.
    assert_eq!(curl(&pki, port, "/v1/stats", &[]).1, 401);
    let bearer = vec!["-H".to_string(), format!("Authorization: Bearer {TOKEN}")];
    assert_eq!(curl(&pki, port, "/v1/stats", &bearer).1, 200);
    assert_eq!(
        curl(&pki, port, "/v1/stats", &cert_args(&pki, "operator")).1,
        200
    );
    // Another CA's certificate, or an expired one: no connection at all.
    assert_eq!(
        curl(&pki, port, "/v1/stats", &cert_args(&pki, "stranger")),
        (false, 0)
    );
    assert_eq!(
        curl(&pki, port, "/v1/stats", &cert_args(&pki, "retired")),
        (false, 0)
    );
    assert_eq!(
        curl(&pki, port, "/healthz", &cert_args(&pki, "stranger")),
        (false, 0)
    );
    // Plain HTTP on the TLS port gets nothing useful.
    let plain = Command::new("curl")
        .args(["-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}/v1/stats"))
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&plain.stdout).trim(), "200");
    let _ = child.kill();
    let _ = child.wait();

    // A separate operator listener: TLS and the API there, plain-HTTP boot routes on the
    // main listener, and neither serves the other's routes.
    let (boot_port, op_port) = (free_port(), free_port());
    let split = config(&pki, boot_port, &pki.path("server.pem")).replace(
        "[http]\n",
        &format!("[http]\noperator_listen = \"127.0.0.1:{op_port}\"\n"),
    );
    std::fs::write(&cfg, split).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let plain = |port: u16, path: &str| {
        let out = Command::new("curl")
            .args([
                "-s",
                "-m",
                "5",
                "--noproxy",
                "*",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u16>()
            .unwrap_or(0)
    };
    wait_until("operator listener up", Duration::from_secs(20), || {
        curl(&pki, op_port, "/healthz", &[]).1 == 200
    });
    assert_eq!(plain(boot_port, "/boot.ipxe"), 200);
    assert_eq!(plain(boot_port, "/v1/stats"), 404);
    // `http.metrics` defaults to "operator" with a separate operator listener: pool
    // fill and member names are not on the boot port.
    assert_eq!(plain(boot_port, "/metrics"), 404);
    assert_eq!(plain(boot_port, "/healthz"), 200);
    assert_eq!(curl(&pki, op_port, "/metrics", &[]).1, 200);
    assert_eq!(
        curl(&pki, op_port, "/v1/stats", &cert_args(&pki, "operator")).1,
        200
    );
    assert_eq!(curl(&pki, op_port, "/v1/stats", &[]).1, 401);
    assert_eq!(curl(&pki, op_port, "/boot.ipxe", &[]).1, 404);
    let _ = child.kill();
    let _ = child.wait();

    // A certificate file without a certificate: start-up fails naming the key.
    std::fs::write(pki.path("garbage.pem"), "not a certificate\n").unwrap();
    std::fs::write(&cfg, config(&pki, free_port(), &pki.path("garbage.pem"))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http.tls_cert"), "{err}");
}
