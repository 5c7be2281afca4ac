//! Real firmware over IPv6: QEMU machines (`qemu/vm.sh`) boot through `shardboot serve`
//! on a segment that `[[subnet6]]` serves — IPv6 only (no IPv4 address anywhere on the
//! segment), or dual-stack beside `[[subnet]]` — along each firmware path: SeaBIOS
//! with the iPXE option ROM (Debian's ipxe-qemu ROM speaks IPv6 and stateful DHCPv6),
//! OVMF's PXE over IPv6 (DHCPv6 without option 61, TFTP snponly.efi over IPv6, then
//! iPXE) and OVMF's UEFI HTTP Boot over IPv6 (`HTTPClient:Arch:00016`, snponly.efi
//! over HTTP). Each reaches the per-node config through `/boot.ipxe` and
//! `/v1/boot/{mac}/boot.ipxe` on `[::]:8080`, chained to the member's conductor (the
//! stand-in of `common::qemu`). TFTP and HTTP listen on `[::]` (dual-stack sockets).
//! Software emulation (TCG); every wait is bounded.
//!
//! `SB_CAPTURE_DIR=dir` keeps a pcap of each boot (how `fixtures/packets/*-solicit.bin`
//! were captured).
//!
//! (These tests found that OVMF's PXE over IPv6 takes an Advertise carrying the
//! `PXEClient` vendor class for a BINL offer and gives up without a port-4011 boot
//! server, and that IPv6 literals in member URLs were refused as unsafe in scripts.)

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::qemu::{self, curl, metric, Capture, ConductorStub, Firmware, Vm};
use common::{Netns, Server};

const TOKEN: &str = "qemu6-test-token-0123456789";
const BOOT_LIMIT: Duration = Duration::from_secs(240);
/// Where the operator API and metrics are read: the `[::]` listener also serves
/// loopback inside the lab namespace.
const API: &str = "http://127.0.0.1:8080";

/// The segment a lab serves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Segment {
    /// `[[subnet6]]` only; the member has no IPv4 address, DHCPv4 is off.
    Ipv6Only,
    /// `[[subnet]]` and `[[subnet6]]` on the same link, one member with both.
    DualStack,
}

/// A lab with one member (fd00:1::1, and 192.0.2.1 when dual-stack, on m0) and one
/// tap; shardboot serving it, the conductor stand-in on `[::]:8088`.
struct Lab6 {
    ns: Netns,
    dir: tempfile::TempDir,
    server: Server,
    conductor: ConductorStub,
    _capture: Capture,
}

impl Lab6 {
    fn start(segment: Segment, mac: &str, capture: &str) -> Self {
        qemu::require_qemu();
        let addrs = match segment {
            Segment::Ipv6Only => "fd00:1::1/64",
            Segment::DualStack => "192.0.2.1/24,fd00:1::1/64",
        };
        let ns = qemu::lab(1, &[addrs]);
        let capture = Capture::start(&ns, capture);
        let conductor = ConductorStub::start(&ns, "[::]:8088".parse().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let inventory = dir.path().join("inventory.toml");
        std::fs::write(&inventory, format!("\"{mac}\" = \"a\"\n")).unwrap();
        let (dhcp, member, subnet4) = match segment {
            // Scripts chain the member's conductor by its IPv6 address.
            Segment::Ipv6Only => (
                "enabled = false",
                "http_url = \"http://[fd00:1::1]:8080\"\nconductor_url = \"http://[fd00:1::1]:8088\"",
                "",
            ),
            // Whichever family the machine boots by, the conductor is chained over
            // IPv4, which it also has.
            Segment::DualStack => (
                "interfaces = [\"m0\"]",
                "http_url = \"http://192.0.2.1:8080\"\nconductor_url = \"http://192.0.2.1:8088\"",
                "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.100 - 192.0.2.199\"]\nlease_time = 3600\n",
            ),
        };
        let config = format!(
            r#"
[dhcp]
{dhcp}
[dhcp6]
interfaces = ["m0"]
[tftp]
listen = "[::]:69"
[http]
listen = "[::]:8080"
insecure_operator_api = true
token_file = "{tokens}"
[ra]
enabled = true
[owner]
self = "a"
inventory = "{inventory}"
[[member]]
name = "a"
{member}
{subnet4}
[[subnet6]]
network = "fd00:1::/64"
ranges = ["fd00:1::100 - fd00:1::1ff"]
lease_time = 3600
"#,
            tokens = tokens.display(),
            inventory = inventory.display(),
        );
        let state = dir.path().join("state");
        let server = Server::start_ready(&ns, dir.path(), &config, &state, "DHCPv6 listening");
        if segment == Segment::DualStack {
            common::members::wait_until("DHCPv4 listening", Duration::from_secs(10), || {
                server.log_text().contains("DHCP listening")
            });
        }
        Self {
            ns,
            dir,
            server,
            conductor,
            _capture: capture,
        }
    }

    fn metrics(&self) -> String {
        curl(&self.ns, &format!("{API}/metrics"), None)
    }

    /// Boots `firmware` to the per-node config; returns the VM (for its console) and
    /// the seconds from VM start to the per-node config's load.
    fn boot(&mut self, firmware: Firmware, mac: &str) -> (Vm, f64) {
        let mut vm = Vm::start(&self.ns, firmware, "tap0", mac, self.dir.path());
        let want = qemu::per_node_path(mac);
        let server = &self.server;
        let metrics = || curl(&self.ns, &format!("{API}/metrics"), None);
        let secs = qemu::wait_booted(&mut self.conductor, &mut vm, &want, BOOT_LIMIT, || {
            let nonzero: Vec<String> = metrics()
                .lines()
                .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
                .map(str::to_string)
                .collect();
            format!("{}\nmetrics:\n{}", server.log_text(), nonzero.join("\n"))
        });
        eprintln!("{firmware:?}: VM start to per-node config in {secs:.1} s");
        (vm, secs)
    }

    /// The machine's bound DHCPv6 lease, as the operator API shows it.
    fn lease6(&self, mac: &str) -> serde_json::Value {
        let body = curl(&self.ns, &format!("{API}/v1/leases6"), Some(TOKEN));
        let all: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let list = all["leases"].as_array().or(all.as_array()).cloned();
        list.unwrap_or_default()
            .into_iter()
            .find(|l| l["mac"] == mac && l["state"] == "bound")
            .unwrap_or_else(|| panic!("no bound v6 lease for {mac}: {body}"))
    }

    /// The machine's DHCPv4 lease, if any (404 body otherwise).
    fn lease4(&self, mac: &str) -> serde_json::Value {
        let body = curl(&self.ns, &format!("{API}/v1/leases/{mac}"), Some(TOKEN));
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
    }

    /// The machine's timeline as `shardboot trace --once` prints it.
    fn trace(&self, mac: &str) -> String {
        let out = self
            .ns
            .command(common::shardboot_bin().to_str().unwrap())
            .args(["trace", "--once", "--server", API, "--token-file"])
            .arg(self.dir.path().join("tokens"))
            .arg(mac)
            .output()
            .unwrap();
        let trace = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{trace}");
        trace
    }

    /// Checks that the machine's timeline holds each of `steps` (`source what outcome
    /// …`, words separated by one space).
    fn check_timeline(&self, mac: &str, steps: &[&str]) {
        let trace = self.trace(mac);
        let lines: Vec<String> = trace
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        for step in steps {
            assert!(
                lines.iter().any(|l| l.contains(step)),
                "{step:?} missing from the trace:\n{trace}"
            );
        }
    }

    /// Log lines at WARN or ERROR, but the one the test's own choice causes (the
    /// operator API in clear on the boot listener, to read it from the namespace).
    fn problems(&self) -> Vec<String> {
        self.server
            .log_text()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| !l.contains("warning=http.insecure_operator_api"))
            .map(str::to_string)
            .collect()
    }
}

/// The address of the bound v6 lease, checked to lie in the served range.
fn in_range6(lease: &serde_json::Value) -> std::net::Ipv6Addr {
    let ip: std::net::Ipv6Addr = lease["ip"].as_str().unwrap().parse().unwrap();
    let (first, last): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
        "fd00:1::100".parse().unwrap(),
        "fd00:1::1ff".parse().unwrap(),
    );
    assert!((first..=last).contains(&ip), "{lease}");
    ip
}

/// Checks an IPv6-only boot: a v6 lease, no DHCPv4 at all, the script and the per-node
/// route answered over IPv6.
fn check_ipv6_only(lab: &Lab6, mac: &str) -> String {
    let lease = lab.lease6(mac);
    in_range6(&lease);
    let m = lab.metrics();
    assert!(
        metric(&m, "shardboot_dhcp6_outcomes_total{outcome=\"bound\"} ") >= 1,
        "{m}"
    );
    assert_eq!(metric(&m, "shardboot_dhcp_received_total "), 0, "{m}");
    assert!(
        metric(
            &m,
            "shardboot_http_requests_total{route=\"/v1/boot/{mac}/{name}\",status=\"200\"} "
        ) >= 1,
        "{m}"
    );
    assert!(lab.problems().is_empty(), "{:?}", lab.problems());
    m
}

#[test]
fn bios_ipxe_rom_boots_over_ipv6_only_to_the_per_node_config() {
    require_root!();
    let mac = "52:54:00:5e:06:01";
    let mut lab = Lab6::start(Segment::Ipv6Only, mac, "ipxe-bios-v6");
    let (vm, _) = lab.boot(Firmware::BiosIpxe, mac);
    let m = check_ipv6_only(&lab, mac);
    // The ROM is iPXE: no TFTP; it found DHCPv6 through the managed advertisement.
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_started_total "),
        0,
        "{m}"
    );
    assert!(metric(&m, "shardboot_ra_answered_total ") >= 1, "{m}");
    // The first stage came from the bracketed URL of option 59, and the per-NIC route
    // and the chain to the conductor stayed on IPv6.
    let console = vm.console_text();
    for step in [
        "Filename: http://[fd00:1::1]:8080/boot.ipxe",
        "/v1/boot/52-54-00-5e-06-01/boot.ipxe... ok",
        "http://[fd00:1::1]:8088/pxelinux.cfg/52-54-00-5e-06-01... ok",
    ] {
        assert!(console.contains(step), "{step:?} missing:\n{console}");
    }
}

#[test]
fn uefi_pxe_over_ipv6_loads_ipxe_over_tftp_and_boots_to_the_per_node_config() {
    require_root!();
    let mac = "52:54:00:5e:06:02";
    let mut lab = Lab6::start(Segment::Ipv6Only, mac, "ovmf-pxe6");
    let (vm, _) = lab.boot(Firmware::UefiPxe6, mac);
    let m = check_ipv6_only(&lab, mac);
    assert!(
        metric(&m, "shardboot_tftp_transfers_completed_total ") >= 1,
        "OVMF loaded nothing over TFTP:\n{m}"
    );
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_failed_total "),
        0,
        "{m}"
    );
    let console = vm.console_text();
    assert!(console.contains("NBP filename is snponly.efi"), "{console}");
    // PXEv6, then iPXE's own DHCPv6: two bound leases' worth of exchanges.
    assert!(
        metric(&m, "shardboot_dhcp6_outcomes_total{outcome=\"bound\"} ") >= 2,
        "{m}"
    );
    // An IPv6-only boot in the machine's timeline: its DHCPv6 exchanges (the MAC from
    // OVMF's EUI-64 link-local source: its DUID is a DUID-UUID), then the TFTP
    // download and the HTTP requests from the address DHCPv6 gave it.
    lab.check_timeline(
        mac,
        &[
            "dhcp6 SOLICIT advertise fd00:1::",
            "dhcp6 REQUEST reply fd00:1::",
            "tftp RRQ complete fd00:1::",
            "http GET /boot.ipxe",
            "http GET /v1/boot/{mac}/{name}",
        ],
    );
}

#[test]
fn uefi_http_boot_over_ipv6_loads_ipxe_over_http_and_boots_to_the_per_node_config() {
    require_root!();
    let mac = "52:54:00:5e:06:03";
    let mut lab = Lab6::start(Segment::Ipv6Only, mac, "ovmf-http6");
    let (vm, _) = lab.boot(Firmware::UefiHttp6, mac);
    let m = check_ipv6_only(&lab, mac);
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
    let console = vm.console_text();
    assert!(
        console.contains("URI: http://[fd00:1::1]:8080/ipxe/snponly.efi"),
        "{console}"
    );
    lab.check_timeline(
        mac,
        &[
            "dhcp6 SOLICIT",
            "dhcp6 REQUEST",
            "http GET /ipxe/{*file}",
            "http GET /v1/boot/{mac}/{name}",
        ],
    );
}

/// Which family the machine's iPXE loaded the first stage by (from its console).
fn first_stage_family(console: &str) -> &'static str {
    if console.contains("http://[fd00:1::1]:8080/boot.ipxe... ok") {
        "IPv6"
    } else if console.contains("http://192.0.2.1:8080/boot.ipxe... ok") {
        "IPv4"
    } else {
        panic!("no first stage loaded:\n{console}")
    }
}

/// Dual-stack: both families served on the segment, the machine boots by either, with
/// no warning or error logged; DHCPv4 and DHCPv6 each bound it.
fn boot_dual_stack(firmware: Firmware, mac: &str, capture: &str) {
    let mut lab = Lab6::start(Segment::DualStack, mac, capture);
    let (vm, _) = lab.boot(firmware, mac);
    let family = first_stage_family(&vm.console_text());
    eprintln!("{firmware:?} on a dual-stack segment: first stage over {family}");
    let lease4 = lab.lease4(mac);
    assert_eq!(lease4["state"], "bound", "{lease4}");
    let m = lab.metrics();
    // iPXE configures both families whichever it boots by.
    in_range6(&lab.lease6(mac));
    assert!(
        metric(&m, "shardboot_dhcp6_outcomes_total{outcome=\"bound\"} ") >= 1,
        "{m}"
    );
    assert!(
        metric(&m, "shardboot_dhcp_decisions_total{outcome=\"ack\"} ") >= 1,
        "{m}"
    );
    assert_eq!(
        metric(&m, "shardboot_tftp_transfers_failed_total "),
        0,
        "{m}"
    );
    assert!(lab.problems().is_empty(), "{:?}", lab.problems());
    // The [::] listeners know an IPv4 client by its IPv4 address, so its TFTP and
    // first-stage requests join its DHCPv4 timeline.
    let trace = lab.trace(mac);
    let mut want = vec!["dhcp DISCOVER", "http GET /v1/boot/{mac}/{name}"];
    if firmware == Firmware::UefiPxe {
        want.push("tftp RRQ");
    }
    if family == "IPv4" {
        want.push("http GET /boot.ipxe");
    }
    for step in want {
        assert!(
            trace.contains(step),
            "{step:?} missing from the trace:\n{trace}"
        );
    }
}

#[test]
fn bios_ipxe_boots_on_a_dual_stack_segment() {
    require_root!();
    boot_dual_stack(Firmware::BiosIpxe, "52:54:00:5e:06:04", "ipxe-bios-dual");
}

#[test]
fn uefi_pxe_boots_on_a_dual_stack_segment() {
    require_root!();
    boot_dual_stack(Firmware::UefiPxe, "52:54:00:5e:06:05", "ovmf-pxe-dual");
}
