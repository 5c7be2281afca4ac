//! `shardboot serve` runs DHCP and TFTP side by side from one config: a PXE-style client
//! leases an address and then fetches its boot file over TFTP from the same process; a
//! second server on a port the first holds stops at start.

use crate::common;

use std::process::Command;

use common::{Lab, Server};

#[test]
fn one_process_serves_dhcp_and_the_boot_file_over_tftp() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &["192.0.2.50/24"]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tftproot");
    std::fs::create_dir(&root).unwrap();
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("undionly.kpxe"), &payload).unwrap();
    let extra = format!(
        "\n[tftp]\nlisten = \"192.0.2.1:69\"\nroot = \"{}\"\n",
        root.display()
    );
    let cfg = common::config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        "",
    ) + &extra;
    let server = Server::start(&lab.server, dir.path(), &cfg);
    assert!(
        server.log_text().contains("TFTP listening"),
        "{}",
        server.log_text()
    );
    // The first line names the version and where the config came from.
    let first = server
        .log_text()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.contains("shardboot starting")
            && first.contains(env!("CARGO_PKG_VERSION"))
            && first.contains(&format!(
                "file {}",
                dir.path().join("shardboot.toml").display()
            )),
        "{first}"
    );
    // SIGHUP (dnsmasq's reload signal) reads the unchanged file again and says so; the
    // server keeps serving (tests/dhcp/reload.rs changes the file).
    let pid = server.pid().unwrap().to_string();
    common::sh(&["kill", "-HUP", &pid]);
    common::members::wait_until("the reload line", std::time::Duration::from_secs(5), || {
        server
            .log_text()
            .contains("configuration reloaded: nothing changed")
    });

    let out = dir.path().join("fetched");
    let got = common::clients::tftp_get(&lab.client, "192.0.2.1", "undionly.kpxe", &out);
    assert!(got.status.success());
    assert_eq!(std::fs::read(&out).unwrap(), payload);

    // Each exchange is one line at info, as dnsmasq's log-dhcp gives (ironic-image's
    // operators read them with `kubectl logs`): the message, the MAC, the answer.
    let events = dir.path().join("udhcpc-events");
    assert!(common::clients::udhcpc_once(&lab.client, &lab.client_if, &events, &[]).success());
    let mac = lab.client_mac();
    common::members::wait_until(
        "the exchange lines",
        std::time::Duration::from_secs(5),
        || {
            let log = server.log_text();
            log.contains(&format!("DISCOVER {mac}: offer"))
                && log.contains(&format!("REQUEST {mac}: ack"))
        },
    );
    let log = server.log_text();
    let ack = log
        .lines()
        .find(|l| l.contains(&format!("REQUEST {mac}: ack")))
        .unwrap();
    assert!(
        ack.contains(" INFO ") && ack.contains("exchange") && ack.contains("ip=192.0.2."),
        "{ack}"
    );
    // Rust's Debug text (`Some(Discover)`) is no longer what a reader gets.
    assert!(!log.contains("Some(Discover)"), "{log}");
}

#[test]
fn check_config_warns_about_missing_boot_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!("[tftp]\nroot = \"{}\"\n", dir.path().display()),
    )
    .unwrap();
    let out = Command::new(common::shardboot_bin())
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a missing boot file is a warning, not an error"
    );
    assert!(
        stdout.contains("warning:") && stdout.contains("undionly.kpxe"),
        "{stdout}"
    );
}

/// The boot listener is a socket per core sharing the port (`SO_REUSEPORT`). A second
/// shardboot started by mistake on the same port must not join them and silently take
/// half the machines' connections: it stops at start, naming the listener.
#[test]
fn a_second_server_on_the_same_http_port_stops_at_start() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    // `bound`: under `timeout`, for the one expected to stop by itself.
    let serve = |name: &str, bound: bool| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "state_dir = \"{}\"\n[dhcp]\nenabled = false\n[tftp]\nenabled = false\n\
                 [http]\nlisten = \"127.0.0.1:{port}\"\n",
                dir.path().join(name).display()
            ),
        )
        .unwrap();
        let mut cmd = if bound {
            let mut c = Command::new("timeout");
            c.arg("20").arg(common::shardboot_bin());
            c
        } else {
            Command::new(common::shardboot_bin())
        };
        cmd.args(["serve", "--config"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            // The first one's log is not read: not a pipe that could fill.
            .stderr(if bound {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .spawn()
            .unwrap()
    };
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _first = Killed(serve("first", false));
    let url = format!("http://127.0.0.1:{port}/healthz");
    common::members::wait_until(
        "the first server",
        std::time::Duration::from_secs(10),
        || {
            Command::new("curl")
                .args(["-sf", "-o", "/dev/null", "--noproxy", "*", &url])
                .status()
                .is_ok_and(|s| s.success())
        },
    );
    let second = serve("second", true).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("HTTP listener on 127.0.0.1:{port}")) && stderr.contains("in use"),
        "{stderr}"
    );
    // The first still answers on every new connection.
    for _ in 0..20 {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "--noproxy", "*", &url])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}
