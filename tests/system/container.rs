//! The OCI image (`deploy/image.sh`) run the way IrSO runs its dnsmasq container: podman
//! on a test namespace's network, user 997:994, only NET_ADMIN, NET_RAW and
//! NET_BIND_SERVICE, a read-only root and the lease store on a volume. A real client
//! gets a lease and a boot file over TFTP, IrSO's exec probe passes, after
//! `podman kill` a new container on the same volume still has the lease, and a QEMU
//! machine (OVMF's UEFI PXE) boots through the container: iPXE from the image's
//! /tftpboot, then Ironic's boot.ipxe (a stand-in for Ironic's httpd).

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::qemu::{self, ConductorStub, Firmware, Vm, BOOTED_LINE};
use common::{Lab, Netns};

/// The tag this test builds (and removes again).
const IMAGE: &str = "localhost/shardboot:container-test";

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// podman with the settings these machines need (deploy/podman/containers.conf).
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .env("CONTAINERS_CONF", repo("deploy/podman/containers.conf"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman")
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes what the test made in podman's storage, also when it fails.
struct Cleanup {
    containers: Vec<String>,
    volume: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = podman(&["rm", "-f", c]);
        }
        let _ = podman(&["volume", "rm", "-f", &self.volume]);
        let _ = podman(&["rmi", "-f", IMAGE]);
    }
}

/// IrSO's dnsmasq container, as far as podman can say it, with `env` (NAME=value).
fn run_args(name: &str, netns: &str, volume: &str, env: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "-d",
        "--pull",
        "never",
        "--name",
        name,
        "--network",
        netns,
        "--user",
        "997:994",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "NET_ADMIN,NET_RAW,NET_BIND_SERVICE",
        "--read-only",
        "-v",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("{volume}:/var/lib/shardboot"));
    for e in env {
        args.push("-e".into());
        args.push(e.to_string());
    }
    args.push(IMAGE.into());
    args
}

/// The variables IrSO sets for a single range (spec.networking.dhcp with serveDNS).
const IRSO_ENV: [&str; 5] = [
    "PROVISIONING_IP=192.0.2.1",
    "DHCP_RANGE=192.0.2.100,192.0.2.150,255.255.255.0",
    "HTTP_PORT=6180",
    "LISTEN_ALL_INTERFACES=true",
    "DNS_IP=provisioning",
];

/// Starts a container and waits until its DHCP socket is bound.
fn start(name: &str, netns: &str, volume: &str, env: &[&str]) {
    let args = run_args(name, netns, volume, env);
    podman_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = podman(&["logs", name]);
        let text = String::from_utf8_lossy(&logs.stderr).into_owned()
            + &String::from_utf8_lossy(&logs.stdout);
        if text.contains("DHCP listening") {
            return;
        }
        assert!(Instant::now() < deadline, "{name} did not start:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One-shot udhcpc as a UEFI x64 PXE ROM; the fields of its `bound` event.
fn obtain(ns: &Netns, iface: &str, events: &Path) -> Vec<String> {
    let _ = std::fs::remove_file(events);
    let status = common::clients::udhcpc_once(
        ns,
        iface,
        events,
        &["-V", "PXEClient:Arch:00007:UNDI:003016", "-x", "0x5d:0007"],
    );
    assert!(status.success(), "udhcpc got no lease from the container");
    let text = std::fs::read_to_string(events).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("bound "))
        .unwrap_or_else(|| panic!("no bound event:\n{text}"));
    line.split(' ').map(str::to_string).collect()
}

/// `shardboot leases --json` in a one-shot container on `volume` (no server holds it).
fn stored_leases(volume: &str) -> serde_json::Value {
    let mount = format!("{volume}:/var/lib/shardboot");
    let out = podman_ok(&[
        "run",
        "--rm",
        "--pull",
        "never",
        "--network",
        "none",
        "--user",
        "997:994",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "NET_ADMIN,NET_RAW,NET_BIND_SERVICE",
        "--read-only",
        "-v",
        &mount,
        IMAGE,
        "leases",
        "--json",
    ]);
    serde_json::from_str(&out).unwrap()
}

#[test]
fn image_runs_as_irsos_dnsmasq_container_keeps_leases_across_kill_and_pxe_boots_a_machine() {
    require_root!();
    if Command::new("podman").arg("--version").output().is_err() {
        common::skip_or_fail(
            "podman",
            "podman is not installed (tests/install-deps.sh installs it)",
        );
        return;
    }
    // Built once, from the binary under test (stripped by the script).
    let build = Command::new(repo("deploy/image.sh"))
        .env("BIN", env!("CARGO_BIN_EXE_shardboot"))
        .env("TAG", IMAGE)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "deploy/image.sh failed:\n{}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let netns = format!("ns:/run/netns/{}", lab.server.name);
    let first = common::unique("sbct");
    let second = common::unique("sbct");
    let third = common::unique("sbct");
    let volume = common::unique("sbcv");
    let _cleanup = Cleanup {
        containers: vec![first.clone(), second.clone(), third.clone()],
        volume: volume.clone(),
    };
    podman_ok(&["volume", "create", &volume]);
    start(&first, &netns, &volume, &IRSO_ENV);

    // IrSO's liveness and readiness probe, unchanged.
    podman_ok(&[
        "exec",
        &first,
        "sh",
        "-c",
        "ss -lun | grep :67 && ss -lun | grep :69",
    ]);

    let dir = tempfile::tempdir().unwrap();
    let ev = obtain(&lab.client, &lab.client_if, &dir.path().join("events"));
    assert!(ev[1].starts_with("192.0.2.1"), "{ev:?}");
    assert_eq!(ev[3], "snponly-x86_64.efi");
    assert_eq!(ev[4], "192.0.2.1");
    assert_eq!(ev[6], "192.0.2.1", "DNS_IP=provisioning");
    // The boot file it was told, from the image's /tftpboot (Debian's snponly.efi).
    let dest = dir.path().join("snponly.efi");
    let out = common::clients::tftp_get(&lab.client, "192.0.2.1", "snponly-x86_64.efi", &dest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served = std::fs::read(&dest).unwrap();
    let in_image = podman(&["exec", &first, "cat", "/tftpboot/snponly-x86_64.efi"]).stdout;
    assert!(
        served.len() > 100_000 && served == in_image,
        "TFTP served other bytes"
    );

    // SIGKILL: no clean shutdown. The lease is on the volume.
    podman_ok(&["kill", &first]);
    let leases = stored_leases(&volume);

    assert!(
        leases.as_array().unwrap().iter().any(|l| l["ip"] == ev[1]),
        "lease {} missing after kill: {leases}",
        ev[1]
    );

    // A new container on the same volume gives the same machine the same address.
    start(&second, &netns, &volume, &IRSO_ENV);
    let again = obtain(&lab.client, &lab.client_if, &dir.path().join("events2"));
    assert_eq!(again[1], ev[1], "the same address after the restart");
    podman_ok(&["kill", &second]);

    // Real firmware through the container: OVMF PXE → TFTP snponly-x86_64.efi (Debian's
    // iPXE in the image) → iPXE → DHCP → IRONIC_HTTP_URL/boot.ipxe, answered here by a
    // stand-in for Ironic's httpd that makes the machine print a line and power off.
    qemu::require_qemu();
    let qlab = qemu::lab(1, &["192.0.2.1/24"]);
    let mut httpd = ConductorStub::start(&qlab, "192.0.2.1:6180".parse().unwrap());
    let qnetns = format!("ns:/run/netns/{}", qlab.name);
    start(&third, &qnetns, &volume, &IRSO_ENV);
    let mac = "52:54:00:5e:0c:01";
    let mut vm = Vm::start(&qlab, Firmware::UefiPxe, "tap0", mac, dir.path());
    let logs = || String::from_utf8_lossy(&podman(&["logs", &third]).stderr).into_owned();
    if let Err(paths) = httpd.wait_for("/boot.ipxe", &mut vm, Duration::from_secs(240)) {
        panic!(
            "no request for /boot.ipxe (asked: {paths:?})\nconsole:\n{}\ncontainer log:\n{}",
            vm.console_text(),
            logs()
        );
    }
    assert!(
        vm.wait_console(BOOTED_LINE, Duration::from_secs(30)),
        "the console never showed {BOOTED_LINE:?}:\n{}",
        vm.console_text()
    );
    podman_ok(&["kill", &third]);
    let leases = stored_leases(&volume);
    assert!(
        leases
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["mac"] == mac && l["state"] == "bound"),
        "no bound lease for the machine: {leases}"
    );
}
