//! Real firmware end to end: a QEMU machine (SeaBIOS, then the iPXE option ROM of its
//! virtio NIC, from Debian's ipxe-qemu) boots through `shardboot serve` in a network
//! namespace: DHCP (iPXE user class) → `/boot.ipxe` → `/v1/boot/{mac}/boot.ipxe` →
//! the per-node config of the member's conductor, served here by the test. The lease
//! is then visible in the operator API. Software emulation (TCG); bounded in time.
//! (This test found that iPXE parses `52:` in a relative path as a URI scheme: the
//! first stage now uses `${netX/mac:hexhyp}`.)

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{unique, Netns, Server};

const TOKEN: &str = "qemu-test-token-0123456789";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Firmware {
    /// SeaBIOS, then the iPXE option ROM of the NIC (user class iPXE from the start).
    BiosIpxeRom,
    /// OVMF's own PXE (empty romfile): TFTP snponly.efi, then iPXE.
    UefiPxe,
}

#[test]
fn bios_ipxe_rom_boots_through_shardboot_to_the_per_node_config() {
    require_root!();
    boot_through_shardboot(Firmware::BiosIpxeRom, "52:54:00:5e:00:01");
}

#[test]
fn uefi_pxe_loads_ipxe_over_tftp_and_boots_to_the_per_node_config() {
    require_root!();
    let metrics = boot_through_shardboot(Firmware::UefiPxe, "52:54:00:5e:00:02");
    // OVMF fetched snponly.efi from shardboot's TFTP before iPXE took over.
    let completed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shardboot_tftp_transfers_completed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(completed >= 1, "no TFTP transfer completed:\n{metrics}");
}

/// Boots a VM with `firmware` and NIC `mac` through shardboot to the per-node config;
/// returns shardboot's metrics afterwards.
fn boot_through_shardboot(firmware: Firmware, mac: &'static str) -> String {
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("qemu-system-x86_64 missing: tests/install-deps.sh installs it");
    }
    // One namespace: a bridge with the server address, and a tap for the VM.
    let ns = Netns::new("sbq");
    let (br, tap) = (unique("br"), unique("tap"));
    ns.ip(&["link", "add", &br, "type", "bridge"]);
    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", &br]);
    ns.ip(&["link", "set", &br, "up"]);
    ns.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"]);
    ns.ip(&["link", "set", &tap, "master", &br]);
    ns.ip(&["link", "set", &tap, "up"]);

    // The conductor's per-node config server: records the paths asked for and answers
    // with a script that says so and powers the VM off.
    let (paths_tx, paths_rx) = mpsc::channel::<String>();
    let listener = ns
        .run(|| TcpListener::bind("192.0.2.1:8088").unwrap())
        .join()
        .unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(50) {
            let Ok(mut conn) = conn else { continue };
            let mut line = String::new();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // Drain the headers.
            let mut h = String::new();
            while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let body = "#!ipxe\necho booted via shardboot\npoweroff\n";
            let _ = write!(
                conn,
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = paths_tx.send(path);
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let inventory = dir.path().join("inventory.toml");
    std::fs::write(&inventory, format!("\"{mac}\" = \"a\"\n")).unwrap();
    let config = format!(
        r#"
[dhcp]
interfaces = ["{br}"]
[tftp]
listen = "192.0.2.1:69"
[http]
listen = "192.0.2.1:8080"
token_file = "{tokens}"
[owner]
self = "a"
inventory = "{inventory}"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
conductor_url = "http://192.0.2.1:8088"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.100 - 192.0.2.199"]
lease_time = 3600
router = "192.0.2.1"
"#,
        tokens = tokens.display(),
        inventory = inventory.display(),
    );
    let _server = Server::start(&ns, dir.path(), &config);

    let console = dir.path().join("console.log");
    let mut qemu = ns.command("qemu-system-x86_64");
    qemu.args([
        "-accel", "tcg", "-m", "256", "-boot", "n", "-display", "none",
    ])
    .args(["-no-reboot", "-monitor", "none"])
    .arg("-serial")
    .arg(format!("file:{}", console.display()))
    .args([
        "-netdev",
        &format!("tap,id=n0,ifname={tap},script=no,downscript=no"),
    ]);
    match firmware {
        Firmware::BiosIpxeRom => {
            // sgabios copies the screen to the serial console.
            qemu.args(["-device", "sga", "-device"])
                .arg(format!("virtio-net-pci,netdev=n0,mac={mac}"));
        }
        Firmware::UefiPxe => {
            let vars = dir.path().join("OVMF_VARS.fd");
            std::fs::copy("/usr/share/OVMF/OVMF_VARS_4M.fd", &vars).unwrap();
            qemu.args(["-machine", "q35", "-drive"])
                .arg("if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd")
                .arg("-drive")
                .arg(format!("if=pflash,format=raw,file={}", vars.display()))
                // An empty romfile: OVMF's own PXE, not iPXE's option ROM.
                .arg("-device")
                .arg(format!("virtio-net-pci,netdev=n0,mac={mac},romfile="));
        }
    }
    let started = Instant::now();
    let mut vm = qemu
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let want = format!("/pxelinux.cfg/{}", mac.replace(':', "-"));
    let deadline = started + Duration::from_secs(180);
    let mut asked = Vec::new();
    let reached = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match paths_rx.recv_timeout(left.min(Duration::from_secs(5))) {
            Ok(p) if p == want => break true,
            Ok(p) => asked.push(p),
            Err(_) if Instant::now() >= deadline => break false,
            Err(_) => {
                if let Ok(Some(status)) = vm.try_wait() {
                    panic!("the VM stopped early ({status}) having asked for {asked:?}");
                }
            }
        }
    };
    let boot_secs = started.elapsed().as_secs_f64();
    if !reached {
        let m = ns
            .command("curl")
            .args(["-s", "http://192.0.2.1:8080/metrics"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&m.stdout);
        // What the server saw, and what the firmware printed (sgabios copies the screen
        // to the serial console).
        for l in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
        {
            eprintln!("metric: {l}");
        }
        eprintln!(
            "console:\n{}",
            std::fs::read_to_string(&console).unwrap_or_default()
        );
    }
    let _ = vm.kill();
    let _ = vm.wait();
    assert!(
        reached,
        "no request for {want} within 180 s (asked: {asked:?})\n{}",
        _server.log_text()
    );
    eprintln!("{firmware:?}: VM start to per-node config in {boot_secs:.1} s");

    // The lease, as the operator API shows it.
    let out = ns
        .command("curl")
        .args(["-s", "-m", "5", "--noproxy", "*", "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .arg(format!("http://192.0.2.1:8080/v1/leases/{mac}"))
        .output()
        .unwrap();
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lease["mac"], mac, "{lease}");
    assert_eq!(lease["state"], "bound");
    let m = ns
        .command("curl")
        .args([
            "-s",
            "-m",
            "5",
            "--noproxy",
            "*",
            "http://192.0.2.1:8080/metrics",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&m.stdout).to_string()
}
