//! Real clients (tftp-hpa, atftp, curl) download every file byte-identical over
//! loopback, in both socket modes.

use crate::common::tftp_lab;

use tftp_lab::*;

fn all_clients_all_files(single_port: bool) {
    let missing: Vec<&str> = ["tftp", "atftp", "curl"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    assert!(
        missing.is_empty(),
        "missing clients {missing:?}: apt-get install tftp-hpa atftp curl"
    );
    let root = Root::new();
    let out = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        shardboot::config::TftpSettings {
            single_port,
            ..settings(root.path())
        },
        "127.0.0.1:0".parse().unwrap(),
    );
    let mut failures = Vec::new();
    for tool in ALL_TOOLS {
        for (name, data) in &root.files {
            // curl 7.88 fails every zero-length TFTP download ("getpeername() failed
            // with errno 107"), against tftpd-hpa too: a client bug, not ours.
            if matches!(tool, Tool::Curl | Tool::CurlBlksize) && data.is_empty() {
                continue;
            }
            let dest = scratch(out.path(), &format!("{tool:?}-{name}"));
            let (ok, log) = download(tool, None, server.addr, name, &dest);
            let got = std::fs::read(&dest).unwrap_or_default();
            if !ok || got != *data {
                failures.push(format!(
                    "{tool:?} {name}: exit ok={ok}, {} of {} octets: {log}",
                    got.len(),
                    data.len()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let m = &server.metrics;
    let n = (ALL_TOOLS.len() * root.files.len()) as u64 - 2;
    use std::sync::atomic::Ordering::Relaxed;
    wait_for("all transfers accounted", || {
        m.transfers_completed.load(Relaxed) == n
    });
    assert_eq!(m.transfers_failed.load(Relaxed), 0);
    server.stop().expect("clean shutdown");
}

#[test]
fn real_clients_download_byte_identical_over_loopback() {
    all_clients_all_files(false);
}

#[test]
fn real_clients_download_byte_identical_in_single_port_mode() {
    all_clients_all_files(true);
}

#[test]
fn leading_slash_and_metal3_alias_map_into_root() {
    let root = Root::new();
    let out = tempfile::tempdir().unwrap();
    let server = TestServer::start(settings(root.path()), "127.0.0.1:0".parse().unwrap());
    let snp = std::fs::read(root.path().join("snponly.efi")).unwrap();
    for name in ["/snponly.efi", "snponly-x86_64.efi", "/snponly-x86_64.efi"] {
        let dest = scratch(out.path(), &name.replace('/', "_"));
        let (ok, log) = download(Tool::AtftpBlksize, None, server.addr, name, &dest);
        assert!(ok, "{name}: {log}");
        assert_eq!(std::fs::read(&dest).unwrap(), snp, "{name}");
    }
}

#[test]
fn netascii_round_trips_through_tftp_hpa() {
    let root = Root::new();
    let short = b"#!ipxe\nchain http://192.0.2.1/boot.ipxe\r\nexit\n".to_vec();
    // On the wire LF becomes CR LF and a bare CR becomes CR NUL (RFC 1350, RFC 764):
    // here the first pair straddles blocks 1 and 2 (octets 511 and 512), the second
    // blocks 2 and 3 (octets 1023 and 1024).
    let mut long = vec![b'a'; 511];
    long.push(b'\n');
    long.extend(vec![b'b'; 510]);
    long.push(b'\r');
    long.extend(vec![b'c'; 600]);
    long.push(b'\n');
    let out = tempfile::tempdir().unwrap();
    let server = TestServer::start(settings(root.path()), "127.0.0.1:0".parse().unwrap());
    let host = server.addr.ip().to_string();
    let port = server.addr.port().to_string();
    for (name, text) in [("boot.txt", short), ("long.txt", long)] {
        std::fs::write(root.path().join(name), &text).unwrap();
        let dest = scratch(out.path(), name);
        let (ok, log) = run_cmd(
            None,
            &[
                "tftp",
                "-m",
                "netascii",
                &host,
                &port,
                "-c",
                "get",
                name,
                dest.to_str().unwrap(),
            ],
        );
        assert!(ok, "{name}: {log}");
        assert!(std::fs::read(&dest).unwrap() == text, "{name} differs");
    }
}

#[test]
fn changed_file_is_served_fresh() {
    let root = Root::new();
    let out = tempfile::tempdir().unwrap();
    let server = TestServer::start(settings(root.path()), "127.0.0.1:0".parse().unwrap());
    let p = root.path().join("one.bin");
    for (i, content) in [
        b"first".to_vec(),
        random_bytes(5000, 99),
        b"third!".to_vec(),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(&p, content).unwrap();
        let dest = scratch(out.path(), &format!("v{i}"));
        let (ok, log) = download(Tool::Curl, None, server.addr, "one.bin", &dest);
        assert!(ok, "{log}");
        assert_eq!(&std::fs::read(&dest).unwrap(), content, "version {i}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn default_settings_serve_debians_ipxe_package() {
    // Debian ships /usr/lib/ipxe/ipxe.efi as a symlink to /boot/ipxe.efi; the default
    // link_targets (/boot) allow exactly that kind of link.
    let pkg = std::path::Path::new("/usr/lib/ipxe");
    if !pkg.join("ipxe.efi").exists() {
        skip_or_fail(
            "ipxe",
            "Debian's ipxe package is not installed (tests/install-deps.sh installs it)",
        );
        return;
    }
    let server = TestServer::start(
        shardboot::config::TftpSettings::default(),
        "127.0.0.1:0".parse().unwrap(),
    );
    let out = tempfile::tempdir().unwrap();
    for (name, real) in [
        ("ipxe.efi", "ipxe.efi"),
        ("snponly-x86_64.efi", "snponly.efi"),
        ("/undionly.kpxe", "undionly.kpxe"),
    ] {
        let dest = scratch(out.path(), real);
        let (ok, log) = download(Tool::AtftpBlksize, None, server.addr, name, &dest);
        assert!(ok, "{name}: {log}");
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            std::fs::read(pkg.join(real)).unwrap()
        );
    }
    let warnings = shardboot::tftp::check_boot_files(
        &shardboot::config::TftpSettings::default(),
        &[
            "ipxe.efi",
            "snponly-x86_64.efi",
            "undionly.kpxe",
            "ipxe-arm64.efi",
        ],
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("ipxe-arm64.efi"));
}
