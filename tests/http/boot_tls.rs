//! The boot routes on the TLS boot listener (`http.tls_listen`), driven by curl and a
//! real HTTPS conductor (Python's `http.server` wrapped in TLS) on loopback, with a site
//! CA made here: iPXE's first stage, per-node chains and `/ipxe/{file}` over HTTPS; a
//! client that trusts another CA gets no connection; the plain listener keeps only
//! health with `plain_boot = false`; and the HEAD before a chain goes over TLS trusting
//! `http.chain_ca`, so a conductor's 404 is a miss, where without the CA the check
//! cannot tell and the URL is chained unchecked.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::members::{free_port, wait_until};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// Writes `<name>.pem` and `<name>.key`: a server certificate for 127.0.0.1.
fn server_cert(dir: &Path, name: &str, ca: &Ca) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

/// A child process killed when the test ends, also on a panic.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const CONDUCTOR: &str = r#"
import functools, http.server, ssl, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
handler.func.log_message = lambda *a: None
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// A conductor serving `dir` over HTTPS with `<dir>/../conductor.pem`; its port.
fn conductor(pki: &Path, root: &Path) -> (Killed, u16) {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(CONDUCTOR)
        .arg(root)
        .arg(pki.join("conductor.pem"))
        .arg(pki.join("conductor.key"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the conductor's port");
    (Killed(child), port)
}

/// curl; (exit ok, HTTP status, body). `ca`: the CA to trust for https.
fn curl(url: &str, ca: Option<&Path>) -> (bool, u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "-m",
        "5",
        "--noproxy",
        "*",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        out.status.success(),
        code.trim().parse().unwrap_or(0),
        body.to_string(),
    )
}

struct Member {
    _child: Killed,
    plain: u16,
    tls: u16,
}

fn start(pki: &Path, root: &Path, conductor: u16, chain_ca: bool) -> Member {
    let (plain, tls) = (free_port(), free_port());
    let state = tempfile::tempdir_in(pki).unwrap().keep();
    let chain_ca = if chain_ca {
        format!("chain_ca = \"{}\"\n", pki.join("site-ca.pem").display())
    } else {
        String::new()
    };
    let config = format!(
        r#"
state_dir = "{state}"
[dhcp]
enabled = false
[tftp]
enabled = false
root = "{root}"
[http]
listen = "127.0.0.1:{plain}"
tls_listen = "127.0.0.1:{tls}"
plain_boot = false
tls_cert = "{pki}/member-a.pem"
tls_key = "{pki}/member-a.key"
{chain_ca}
[owner]
self = "a"

[[member]]
name = "a"
http_url = "https://127.0.0.1:{tls}"
conductor = "127.0.0.1"
conductor_url = "https://127.0.0.1:{conductor}"
"#,
        state = state.display(),
        root = root.display(),
        pki = pki.display(),
    );
    let path = pki.join(format!("shardboot-{tls}.toml"));
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ca = pki.join("site-ca.pem");
    wait_until("the TLS boot listener", Duration::from_secs(20), || {
        curl(&format!("https://127.0.0.1:{tls}/healthz"), Some(&ca)).1 == 200
    });
    Member {
        _child: Killed(child),
        plain,
        tls,
    }
}

const KNOWN: &str = "52-54-00-12-34-56";
const UNKNOWN: &str = "52-54-00-12-34-99";

#[test]
fn boot_routes_over_tls_trust_the_site_ca_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().to_path_buf();
    let site = ca("site CA");
    let other = ca("somebody else's CA");
    std::fs::write(pki.join("site-ca.pem"), site.pem()).unwrap();
    std::fs::write(pki.join("other-ca.pem"), other.pem()).unwrap();
    server_cert(&pki, "member-a", &site);
    server_cert(&pki, "conductor", &site);
    // The conductor holds one per-node config; the TFTP root one firmware file.
    let configs = pki.join("conductor");
    std::fs::create_dir_all(configs.join("pxelinux.cfg")).unwrap();
    std::fs::write(
        configs.join("pxelinux.cfg").join(KNOWN),
        "#!ipxe\necho deploy\n",
    )
    .unwrap();
    let root: PathBuf = pki.join("root");
    std::fs::create_dir(&root).unwrap();
    let firmware: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("undionly.kpxe"), &firmware).unwrap();
    let (_conductor, cport) = conductor(&pki, &configs);

    let m = start(&pki, &root, cport, true);
    let site_ca = pki.join("site-ca.pem");
    let tls = |path: &str| {
        curl(
            &format!("https://127.0.0.1:{}{path}", m.tls),
            Some(&site_ca),
        )
    };

    // The first stage over TLS; its paths are relative, so iPXE stays on https.
    let (ok, code, body) = tls("/boot.ipxe");
    assert!(ok && code == 200, "{code}");
    assert!(body.starts_with("#!ipxe"), "{body}");
    assert!(body.contains(" /v1/boot/"), "{body}");
    // A NIC with a per-node config: chained over https, as the conductor serves it.
    let (_, code, body) = tls(&format!("/v1/boot/{KNOWN}/boot.ipxe"));
    assert_eq!(code, 200, "{body}");
    let url = format!("https://127.0.0.1:{cport}/pxelinux.cfg/{KNOWN}");
    assert!(body.contains(&format!(" {url} ")), "{body}");
    assert_eq!(curl(&url, Some(&site_ca)).1, 200);
    // No per-node config: the HEAD over TLS (trusting chain_ca) saw the 404, a miss.
    assert_eq!(tls(&format!("/v1/boot/{UNKNOWN}/boot.ipxe")).1, 404);
    // The firmware route over TLS, byte for byte.
    let out = Command::new("curl")
        .args(["-s", "-m", "5", "--noproxy", "*", "--cacert"])
        .arg(&site_ca)
        .arg(format!("https://127.0.0.1:{}/ipxe/undionly.kpxe", m.tls))
        .output()
        .unwrap();
    assert!(out.stdout == firmware, "{} bytes", out.stdout.len());

    // A client that trusts another CA (an iPXE built for another site) gets nothing.
    let wrong = pki.join("other-ca.pem");
    let (ok, code, _) = curl(
        &format!("https://127.0.0.1:{}/boot.ipxe", m.tls),
        Some(&wrong),
    );
    assert_eq!((ok, code), (false, 0));
    // plain_boot = false: the plain listener keeps health, not the boot routes.
    let plain = |path: &str| curl(&format!("http://127.0.0.1:{}{path}", m.plain), None).1;
    assert_eq!(plain("/healthz"), 200);
    assert_eq!(plain("/boot.ipxe"), 404);
    assert_eq!(plain(&format!("/v1/boot/{KNOWN}/boot.ipxe")), 404);
    drop(m);

    // Without chain_ca the HEAD cannot verify the conductor: a NIC with no config is
    // chained unchecked (200), and iPXE finds out itself.
    let m = start(&pki, &root, cport, false);
    let (_, code, body) = curl(
        &format!("https://127.0.0.1:{}/v1/boot/{UNKNOWN}/boot.ipxe", m.tls),
        Some(&site_ca),
    );
    assert_eq!(code, 200, "{body}");
}

/// A machine whose firmware does not trust the member's certificate fails in the
/// handshake, before any request: the timeline still shows it, as the last event of the
/// machine that holds the address (here a lease on 127.0.0.1).
#[test]
fn a_failed_handshake_is_the_last_event_of_the_machine_at_that_address() {
    use shardboot::timeline::{Report, Source};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path();
    let (site, other) = (ca("site CA"), ca("somebody else's CA"));
    std::fs::write(pki.join("other-ca.pem"), other.pem()).unwrap();
    std::fs::write(pki.join("site-ca.pem"), site.pem()).unwrap();
    server_cert(pki, "member-a", &site);
    let config = shardboot::config::Config::from_toml_with_overrides(
        &format!("state_dir = \"{}\"\n[dhcp]\nenabled = false", pki.display()),
        &[],
    )
    .unwrap();
    let handles = shardboot::handles::Handles::default();
    let mac: shardboot::mac::MacAddr = "52:54:00:12:34:56".parse().unwrap();
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    handles.timeline.record(
        mac,
        Report {
            source: Source::Dhcp,
            what: "REQUEST",
            outcome: "ack",
            why: None,
            ip: Some(ip),
            detail: None,
        },
    );
    let store = shardboot::store::open(&pki.join("state")).unwrap();
    let committer = shardboot::store::Committer::start(store.clone(), Default::default()).unwrap();
    let state = Arc::new(shardboot::http::HttpState::new(
        Arc::new(config.clone()),
        store,
        committer,
        Arc::new(shardboot::dhcp::host_policy::HostPolicies::in_memory()),
        None,
        shardboot::tftp::FileRoot::new(config.tftp.settings.clone()),
        Arc::new(shardboot::owner::Resolver::new(&config).unwrap()),
        handles.clone(),
    ));
    let acceptor = shardboot::http::tls::acceptor(&shardboot::config::TlsFiles {
        cert: pki.join("member-a.pem"),
        key: pki.join("member-a.key"),
        client_ca: None,
    })
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = stop.clone();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            shardboot::http::run_with(
                listener,
                state,
                shardboot::http::Serves::Boot,
                Some(acceptor),
                s,
            )
            .await
            .unwrap();
        });
    });
    let port = rx.recv().unwrap();
    let url = format!("https://127.0.0.1:{port}/boot.ipxe");

    // The right CA: a request, and no handshake failure.
    assert_eq!(curl(&url, Some(&pki.join("site-ca.pem"))).1, 200);
    let failed = |h: &shardboot::handles::Handles| {
        h.timeline
            .events(&mac, 0)
            .into_iter()
            .filter(|e| e.what == "TLS handshake")
            .count()
    };
    assert_eq!(failed(&handles), 0);
    // Another CA: no connection, and the timeline says why.
    assert_eq!(curl(&url, Some(&pki.join("other-ca.pem"))).1, 0);
    wait_until("the handshake failure", Duration::from_secs(5), || {
        failed(&handles) == 1
    });
    let last = handles.timeline.events(&mac, 0).pop().unwrap();
    assert_eq!(
        (last.what, last.outcome, last.ip),
        ("TLS handshake", "failed", Some(ip))
    );
    let why = last.detail.as_deref().unwrap_or("");
    assert!(why.to_ascii_lowercase().contains("alert"), "{why}");
    stop.cancel();
    server.join().unwrap();
}
