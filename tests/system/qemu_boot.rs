//! Real firmware end to end: QEMU machines (`qemu/vm.sh`) boot through `shardboot serve`
//! in a lab namespace (`qemu/lab.sh`) along each firmware path — SeaBIOS with the iPXE
//! option ROM, OVMF's UEFI PXE (TFTP snponly.efi, then iPXE) and OVMF's UEFI HTTP Boot
//! (snponly.efi over HTTP, then iPXE) — via `/boot.ipxe` and `/v1/boot/{mac}/boot.ipxe`
//! to the per-node config of the member's conductor, served here by a stand-in that
//! makes the machine print a line and power off. Software emulation (TCG); every wait is
//! bounded.
//! (These tests found that iPXE parses `52:` in a relative path as a URI scheme, and
//! that OVMF waits for PXE option 43 before it loads a boot file over TFTP.)

use crate::common;

use std::time::Duration;

use common::qemu::{self, curl, metric, ConductorStub, Firmware, Vm, BOOTED_LINE};
use common::{Netns, Server};

const TOKEN: &str = "qemu-test-token-0123456789";
const BOOT_LIMIT: Duration = Duration::from_secs(240);

/// A lab with one member (192.0.2.1 on m0) and one tap, shardboot serving it with the
/// conductor stand-in on 192.0.2.1:8088.
struct OneMember {
    ns: Netns,
    dir: tempfile::TempDir,
    server: Server,
    conductor: ConductorStub,
}

impl OneMember {
    fn start(mac: &str) -> Self {
        Self::start_with("inventory = \"{inventory}\"\n", mac, None)
    }

    /// A lab whose `[owner]` has `owner` (`{inventory}` becomes the inventory file, which
    /// gives `mac` to this member) and whose conductor holds configs for `paths` only
    /// (`None`: every path).
    fn start_with(owner: &str, mac: &str, paths: Option<&[String]>) -> Self {
        qemu::require_qemu();
        let ns = qemu::lab(1, &["192.0.2.1/24"]);
        let conductor =
            ConductorStub::start_knowing(Some(&ns), "192.0.2.1:8088".parse().unwrap(), paths);
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
        let inventory = dir.path().join("inventory.toml");
        std::fs::write(&inventory, format!("\"{mac}\" = \"a\"\n")).unwrap();
        let config = format!(
            r#"
[dhcp]
interfaces = ["m0"]
[tftp]
listen = "192.0.2.1:69"
[http]
listen = "192.0.2.1:8080"
insecure_operator_api = true
token_file = "{tokens}"
[ra]
enabled = true
[owner]
self = "a"
{owner}[[member]]
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
            owner = owner.replace("{inventory}", &inventory.display().to_string()),
        );
        let server = Server::start(&ns, dir.path(), &config);
        Self {
            ns,
            dir,
            server,
            conductor,
        }
    }

    fn vm(&self, firmware: Firmware, mac: &str) -> Vm {
        Vm::start(&self.ns, firmware, "tap0", mac, self.dir.path())
    }

    fn metrics(&self) -> String {
        curl(&self.ns, "http://192.0.2.1:8080/metrics", None)
    }

    /// The lease of `mac` as the operator API shows it.
    fn lease(&self, mac: &str) -> serde_json::Value {
        let body = curl(
            &self.ns,
            &format!("http://192.0.2.1:8080/v1/leases/{mac}"),
            Some(TOKEN),
        );
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    /// Waits for `vm` to ask the conductor for its per-node config and to print the
    /// line that config makes it print; returns the seconds from VM start.
    fn wait_booted(&mut self, vm: &mut Vm, mac: &str) -> f64 {
        let want = qemu::per_node_path(mac);
        let asked = self.conductor.wait_for(&want, vm, BOOT_LIMIT);
        let at = match asked {
            Ok(at) => at,
            Err(paths) => {
                let m = self.metrics();
                let nonzero: Vec<&str> = m
                    .lines()
                    .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
                    .collect();
                panic!(
                    "{mac}: no request for {want} (asked: {paths:?})\nmetrics:\n{}\nconsole:\n{}\nlog:\n{}",
                    nonzero.join("\n"),
                    vm.console_text(),
                    self.server.log_text()
                );
            }
        };
        assert!(
            vm.wait_console(BOOTED_LINE, Duration::from_secs(30)),
            "{mac}: the console never showed {BOOTED_LINE:?}:\n{}",
            vm.console_text()
        );
        (at - vm.started).as_secs_f64()
    }
}

/// Boots `firmware` to the per-node config; checks the lease; returns the lab for
/// path-specific checks.
fn boot(firmware: Firmware, mac: &str) -> OneMember {
    let mut lab = OneMember::start(mac);
    let mut vm = lab.vm(firmware, mac);
    let secs = lab.wait_booted(&mut vm, mac);
    eprintln!("{firmware:?}: VM start to per-node config in {secs:.1} s");
    let lease = lab.lease(mac);
    assert_eq!(lease["mac"], mac, "{lease}");
    assert_eq!(lease["state"], "bound", "{lease}");
    // The machine's SMBIOS UUID (qemu/vm.sh derives it from the MAC), from option 97.
    let uuid = format!("5b0e7a11-c0de-4b1d-8000-{}", mac.replace(':', ""));
    assert_eq!(lease["uuid"], uuid.as_str(), "{lease}");
    lab
}

#[test]
fn bios_ipxe_rom_boots_through_shardboot_to_the_per_node_config() {
    require_root!();
    let lab = boot(Firmware::BiosIpxe, "52:54:00:5e:00:01");
    // The ROM is iPXE already: no TFTP.
    let m = lab.metrics();
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_started_total "),
        0,
        "{m}"
    );
    // iPXE solicited IPv6 routers and was told there are none (instead of waiting).
    assert!(metric(&m, "shardboot_ra_answered_total ") >= 1, "{m}");
}

#[test]
fn uefi_pxe_loads_ipxe_over_tftp_and_boots_to_the_per_node_config() {
    require_root!();
    let mac = "52:54:00:5e:00:02";
    let lab = boot(Firmware::UefiPxe, mac);
    let m = lab.metrics();
    assert!(
        metric(&m, "shardboot_tftp_transfers_completed_total ") >= 1,
        "OVMF loaded nothing over TFTP:\n{m}"
    );
    // OVMF asks the file's size first and ends that request at the OACK: a size probe,
    // not a failed transfer an operator should chase.
    assert!(
        metric(&m, "shardboot_tftp_transfers_declined_total ") >= 1,
        "{m}"
    );
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_failed_total "),
        0,
        "{m}"
    );
    // The whole chain of the boot, in order, as `shardboot trace` shows it.
    let out = lab
        .ns
        .command(common::shardboot_bin().to_str().unwrap())
        .args([
            "trace",
            "--once",
            "--server",
            "http://192.0.2.1:8080",
            "--token-file",
        ])
        .arg(lab.dir.path().join("tokens"))
        .arg(mac)
        .output()
        .unwrap();
    let trace = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{trace}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chain = [
        "dhcp DISCOVER",
        "dhcp REQUEST",
        "tftp RRQ",
        "snponly.efi",
        "dhcp DISCOVER",
        "boot file http://192.0.2.1:8080/boot.ipxe",
        "dhcp REQUEST",
        "http GET /boot.ipxe",
        "http GET /v1/boot/{mac}/{name}",
        "200 (local)",
        "chain=http://192.0.2.1:8088/pxelinux.cfg/52-54-00-5e-00-02",
    ];
    let flat = trace.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut at = 0;
    for step in chain {
        match flat[at..].find(step) {
            Some(i) => at += i + step.len(),
            None => panic!("{step:?} missing or out of order in the trace:\n{trace}"),
        }
    }
    eprintln!("{trace}");
    // The same boot as exchange lines in the server's log (target `exchange`, at info:
    // what `kubectl logs` shows, as dnsmasq's log-dhcp does), one per step, in order.
    let log = lab.server.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" exchange") && l.contains(mac))
        .collect();
    let steps: [&[&str]; 6] = [
        &["DISCOVER", ": offer"],
        &["REQUEST", ": ack"],
        &["RRQ", ": complete", "snponly.efi"],
        &["REQUEST", ": ack"],
        &["GET /boot.ipxe", ": 200"],
        &[
            "GET /v1/boot/{mac}/{name}",
            ": 200",
            "chain=http://192.0.2.1:8088/pxelinux.cfg/52-54-00-5e-00-02",
        ],
    ];
    let mut next = 0;
    for step in steps {
        match lines[next..]
            .iter()
            .position(|l| step.iter().all(|w| l.contains(w)))
        {
            Some(i) => next += i + 1,
            None => panic!(
                "no exchange line with {step:?} after line {next} of:\n{}",
                lines.join("\n")
            ),
        }
    }
    assert!(
        !lines.iter().any(|l| l.contains("Some(")),
        "Debug text in an exchange line:\n{}",
        lines.join("\n")
    );
}

#[test]
fn uefi_http_boot_loads_ipxe_over_http_and_boots_to_the_per_node_config() {
    require_root!();
    let lab = boot(Firmware::UefiHttp, "52:54:00:5e:00:03");
    let m = lab.metrics();
    assert!(
        metric(
            &m,
            "shardboot_http_requests_total{route=\"/ipxe/{*file}\",status=\"200\"} "
        ) >= 1,
        "OVMF loaded nothing over HTTP:\n{m}"
    );
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_started_total "),
        0,
        "{m}"
    );
}

/// shardboot is killed (SIGKILL) and started again on the same store just after the
/// firmware has loaded iPXE over TFTP; iPXE's own DHCP and script requests then reach
/// the new process, which gives the machine the address it had, and the boot completes.
#[test]
fn the_machine_completes_its_boot_across_a_restart_of_shardboot() {
    require_root!();
    let mac = "52:54:00:5e:00:04";
    let mut lab = OneMember::start(mac);
    let mut vm = lab.vm(Firmware::UefiPxe, mac);
    common::members::wait_until("OVMF loaded iPXE over TFTP", BOOT_LIMIT, || {
        assert!(!vm.stopped(), "the VM stopped:\n{}", vm.console_text());
        metric(&lab.metrics(), "shardboot_tftp_transfers_completed_total ") >= 1
    });
    let before = lab.lease(mac);
    assert_eq!(before["state"], "bound", "{before}");
    lab.server.restart();
    let secs = lab.wait_booted(&mut vm, mac);
    eprintln!("restart mid-boot: VM start to per-node config in {secs:.1} s");
    let after = lab.lease(mac);
    assert_eq!(after["ip"], before["ip"], "{before} then {after}");
    // The script and iPXE's DHCP were answered by the new process.
    let m = lab.metrics();
    assert!(
        metric(
            &m,
            "shardboot_http_requests_total{route=\"/v1/boot/{mac}/{name}\",status=\"200\"} "
        ) >= 1,
        "{m}"
    );
}

/// A three-NIC machine nobody knows, booting from its third NIC (SeaBIOS, iPXE ROM):
/// the hash gives each NIC to the only member, whose conductor has no config for any of
/// them (404). The first stage asks for every NIC in turn, moving on at once on each
/// miss, and only after the loop chains the inspection script, exactly once.
#[test]
fn an_unknown_three_nic_machine_is_inspected_once_after_every_nic_missed() {
    require_root!();
    let nics = [
        "52:54:00:5e:03:01",
        "52:54:00:5e:03:02",
        "52:54:00:5e:03:03",
    ];
    let boot_nic = nics[2];
    let owner = "resolvers = [\"hash\"]\nfallback = \"http://192.0.2.1:8088/inspector.ipxe\"\n";
    let mut lab = OneMember::start_with(owner, boot_nic, Some(&["/inspector.ipxe".to_string()]));
    let mut vm = Vm::with_nics_before(
        &lab.ns,
        Firmware::BiosIpxe,
        "tap0",
        boot_nic,
        &nics[..2],
        lab.dir.path(),
    );
    let server = &lab.server;
    let secs = qemu::wait_booted(
        &mut lab.conductor,
        &mut vm,
        "/inspector.ipxe",
        BOOT_LIMIT,
        || server.log_text(),
    );
    eprintln!("three NICs, none known: VM start to the inspection script in {secs:.1} s");
    let console = vm.console_text();
    // Every NIC was asked for, in order, before the fallback.
    let mut at = 0;
    for (n, mac) in nics.iter().enumerate() {
        let line = format!("asking for net{n} {mac}");
        let found = console[at..]
            .find(&line)
            .unwrap_or_else(|| panic!("no {line:?} after offset {at}:\n{console}"));
        at += found + line.len();
    }
    assert!(console[at..].contains("/inspector.ipxe"), "{console}");
    // Each miss was the conductor's 404, checked by shardboot, and none was retried.
    let checked = lab.conductor.checked();
    for mac in nics {
        assert!(
            checked.contains(&qemu::per_node_path(mac)),
            "{mac} not checked: {checked:?}"
        );
    }
    assert!(!console.contains("asking again"), "{console}");
    // The machine loaded the inspection script once, and nothing else.
    assert_eq!(lab.conductor.paths(), ["/inspector.ipxe"]);
    let m = lab.metrics();
    assert_eq!(
        metric(&m, "shardboot_http_boot_requests_total{outcome=\"miss\"} "),
        3,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "shardboot_http_boot_requests_total{outcome=\"fallback\"} "
        ),
        1,
        "{m}"
    );
}

/// ProxyDHCP: dnsmasq hands out the addresses (it knows nothing of booting), and
/// shardboot in `dhcp.proxy` mode answers the firmware with boot information only, on
/// port 67 and the PXE boot-server port 4011. The machine boots to its per-node config
/// with an address from dnsmasq.
fn boot_through_a_proxy(firmware: Firmware, mac: &str) {
    qemu::require_qemu();
    // m0: shardboot 192.0.2.1; m1: the address server, 192.0.2.2.
    let ns = qemu::lab(1, &["192.0.2.1/24", "192.0.2.2/24"]);
    let mut conductor = ConductorStub::start(&ns, "192.0.2.1:8088".parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let leases = dir.path().join("dnsmasq.leases");
    let mut dnsmasq = ns
        .command("dnsmasq")
        .args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port=0",
            "--interface=m1",
        ])
        .args([
            "--bind-interfaces",
            "--dhcp-range=192.0.2.100,192.0.2.150,1h",
            "--no-ping",
        ])
        .arg(format!("--dhcp-leasefile={}", leases.display()))
        .args(["--pid-file=", "--log-facility=-", "--log-dhcp"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("dnsmasq.log")).unwrap())
        .spawn()
        .expect("dnsmasq (dnsmasq-base)");
    let inventory = dir.path().join("inventory.toml");
    std::fs::write(&inventory, format!("\"{mac}\" = \"a\"\n")).unwrap();
    let config = format!(
        r#"
[dhcp]
interfaces = ["m0"]
proxy = true
[tftp]
listen = "192.0.2.1:69"
[http]
listen = "192.0.2.1:8080"
[ra]
enabled = true
[owner]
self = "a"
inventory = "{}"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
conductor_url = "http://192.0.2.1:8088"
"#,
        inventory.display()
    );
    let server = Server::start(&ns, dir.path(), &config);
    let mut vm = Vm::start(&ns, firmware, "tap0", mac, dir.path());
    let want = qemu::per_node_path(mac);
    let dnsmasq_log = dir.path().join("dnsmasq.log");
    let secs = qemu::wait_booted(&mut conductor, &mut vm, &want, BOOT_LIMIT, || {
        let dnsmasq = std::fs::read_to_string(&dnsmasq_log).unwrap_or_default();
        format!("{}\ndnsmasq:\n{dnsmasq}", server.log_text())
    });
    let _ = dnsmasq.kill();
    let _ = dnsmasq.wait();
    eprintln!("{firmware:?} through ProxyDHCP: VM start to per-node config in {secs:.1} s");
    // The address came from dnsmasq; shardboot leased nothing and answered as a proxy.
    let leased = std::fs::read_to_string(&leases).unwrap_or_default();
    assert!(
        leased.contains(mac),
        "dnsmasq leased nothing to {mac}: {leased:?}"
    );
    let m = curl(&ns, "http://192.0.2.1:8080/metrics", None);
    assert!(
        metric(
            &m,
            "shardboot_dhcp_decisions_total{outcome=\"proxy_offer\"} "
        ) >= 1,
        "{m}"
    );
    assert_eq!(
        metric(&m, "shardboot_dhcp_decisions_total{outcome=\"ack\"} "),
        0,
        "{m}"
    );
    eprintln!(
        "{firmware:?}: {} proxy offers, {} boot-server (4011) acks",
        metric(
            &m,
            "shardboot_dhcp_decisions_total{outcome=\"proxy_offer\"} "
        ),
        metric(&m, "shardboot_dhcp_decisions_total{outcome=\"proxy_ack\"} ")
    );
    assert_eq!(
        metric(&m, "shardboot_dhcp_decisions_total{outcome=\"offer\"} "),
        0,
        "{m}"
    );
}

#[test]
fn bios_ipxe_boots_through_proxydhcp_beside_another_address_server() {
    require_root!();
    boot_through_a_proxy(Firmware::BiosIpxe, "52:54:00:5e:04:01");
}

#[test]
fn uefi_pxe_boots_through_proxydhcp_beside_another_address_server() {
    require_root!();
    boot_through_a_proxy(Firmware::UefiPxe, "52:54:00:5e:04:02");
}
