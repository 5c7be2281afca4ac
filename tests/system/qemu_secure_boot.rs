//! UEFI Secure Boot on real firmware: OVMF with Secure Boot on and a key made in the
//! test as the only entry of `db` (`tests/common/secure_boot.rs`) PXE-boots through
//! `shardboot serve`. Three machines on one segment are each given their own copy of
//! Debian's `snponly.efi` over TFTP (a `[[host]]` `boot_file` each): signed with the
//! test key, it starts, and iPXE's own DHCP request reaches shardboot and the machine
//! boots to its per-node config; unsigned, or signed and then changed by one octet, the
//! firmware refuses it after the transfer and no iPXE ever asks.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::qemu::{self, curl, ConductorStub, Vm, BOOTED_LINE};
use common::secure_boot::{self as sb, SigningKey};
use common::Server;

const TOKEN: &str = "qemu-secure-boot-token-0123456789";
/// OVMF's Secure Boot build runs its variable driver in SMM, which TCG emulates
/// slowly: about 60 s from power-on to the end of the TFTP transfer on an idle machine.
const BOOT_LIMIT: Duration = Duration::from_secs(300);
/// How long a refused machine is watched after the refusal for any iPXE request. The
/// signed copy's iPXE sent its DHCP request within about 5 s of starting.
const QUIET: Duration = Duration::from_secs(30);
/// The first-stage URL shardboot gives an iPXE client, and only an iPXE client: a DHCP
/// answer that carries it is the answer to iPXE's own request (user class `iPXE`).
const IPXE_BOOT_FILE: &str = "boot file http://192.0.2.1:8080/boot.ipxe";

const SIGNED: (&str, &str) = ("52:54:00:5e:0b:01", "snponly-signed.efi");
const UNSIGNED: (&str, &str) = ("52:54:00:5e:0b:02", "snponly-unsigned.efi");
const TAMPERED: (&str, &str) = ("52:54:00:5e:0b:03", "snponly-tampered.efi");

/// What the firmware says on the serial console when it will not start a boot file
/// whose signature does not verify against `db`: `BdsDxe: failed to load Boot0002
/// "UEFI PXEv4 (MAC:…)" from …: Access Denied` (EFI_ACCESS_DENIED from LoadImage).
fn refused(console: &str, mac: &str) -> bool {
    let nic = format!("UEFI PXEv4 (MAC:{})", mac.replace(':', "").to_uppercase());
    console.lines().any(|l| {
        l.contains("failed to load Boot") && l.contains(&nic) && l.contains("Access Denied")
    })
}

/// The `what outcome detail` of each of `mac`'s events, as the operator API gives them.
fn events(ns: &common::Netns, mac: &str) -> Vec<String> {
    let body = curl(
        ns,
        &format!("http://192.0.2.1:8080/v1/machines/{mac}/events"),
        Some(TOKEN),
    );
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["source"].as_str().unwrap_or(""),
                e["what"].as_str().unwrap_or(""),
                e["outcome"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The three boot files in `root`: Debian's `snponly.efi` signed with `key`, as it is,
/// and signed with one octet of its code changed afterwards.
fn boot_files(key: &SigningKey, root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    let stock = Path::new("/usr/lib/ipxe/snponly.efi");
    let signed = root.join(SIGNED.1);
    key.sign(stock, &signed);
    std::fs::copy(stock, root.join(UNSIGNED.1)).unwrap();
    let mut bytes = std::fs::read(&signed).unwrap();
    // The middle of the image is code, inside what the Authenticode hash covers (only
    // the checksum, the certificate table entry and the signature itself are not).
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(root.join(TAMPERED.1), &bytes).unwrap();
    assert!(key.verifies(&signed), "sbverify rejects the signed copy");
    assert!(!key.verifies(&root.join(UNSIGNED.1)));
    assert!(
        !key.verifies(&root.join(TAMPERED.1)),
        "the flipped octet is outside the signed hash"
    );
}

/// Debian's snakeoil store has its certificate in PK, KEK and db (README.Debian of
/// `ovmf` says so; this reads it); the store the VMs boot has the test key in db
/// instead, and PK, KEK and dbx as Debian left them.
#[test]
fn the_test_store_trusts_the_test_key_alone_in_db() {
    let snakeoil_cert = sb::cert_der(Path::new(sb::SNAKEOIL_CERT));
    let debian = std::fs::read(sb::SNAKEOIL_VARS).expect("package ovmf");
    let vars = sb::variables(&debian);
    for (name, vendor) in [
        ("PK", sb::GLOBAL_VARIABLE),
        ("KEK", sb::GLOBAL_VARIABLE),
        ("db", sb::IMAGE_SECURITY_DATABASE),
    ] {
        let v = sb::variable(&vars, name, &vendor);
        assert!(
            sb::contains(&debian[v.data.clone()], &snakeoil_cert),
            "{name} of {} lacks the snakeoil certificate",
            sb::SNAKEOIL_VARS
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::new(dir.path());
    let out = dir.path().join("vars.fd");
    key.enrolled_store(&out);
    let ours = std::fs::read(&out).unwrap();
    assert_eq!(ours.len(), debian.len());
    let vars = sb::variables(&ours);
    let db = &ours[sb::variable(&vars, "db", &sb::IMAGE_SECURITY_DATABASE)
        .data
        .clone()];
    assert!(sb::contains(db, &sb::cert_der(&key.cert)));
    assert!(!sb::contains(db, &snakeoil_cert));
    // One db, and the rest as it was.
    assert_eq!(vars.iter().filter(|v| v.name == "db").count(), 1);
    for name in ["PK", "KEK", "dbx", "SecureBootEnable"] {
        let a = sb::variables(&debian);
        let x = a.iter().find(|v| v.name == name).unwrap();
        let y = vars.iter().find(|v| v.name == name).unwrap();
        assert_eq!(debian[x.data.clone()], ours[y.data.clone()], "{name}");
    }
}

#[test]
fn secure_boot_starts_the_signed_ipxe_and_refuses_unsigned_and_tampered_copies() {
    require_root!();
    qemu::require_qemu();
    let ns = qemu::lab(3, &["192.0.2.1/24"]);
    let mut conductor = ConductorStub::start(&ns, "192.0.2.1:8088".parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::new(dir.path());
    let vars = dir.path().join("db-test-key.vars.fd");
    key.enrolled_store(&vars);
    let root = dir.path().join("tftp");
    boot_files(&key, &root);
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let hosts: String = [SIGNED, UNSIGNED, TAMPERED]
        .iter()
        .map(|(mac, file)| format!("[[host]]\nmac = \"{mac}\"\nboot_file = \"{file}\"\n"))
        .collect();
    let config = format!(
        r#"
[dhcp]
interfaces = ["m0"]
[tftp]
listen = "192.0.2.1:69"
root = "{root}"
[http]
listen = "192.0.2.1:8080"
insecure_operator_api = true
token_file = "{tokens}"
[owner]
self = "a"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
conductor_url = "http://192.0.2.1:8088"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.100 - 192.0.2.199"]
lease_time = 3600
router = "192.0.2.1"
{hosts}"#,
        root = root.display(),
        tokens = tokens.display(),
    );
    let server = Server::start(&ns, dir.path(), &config);
    // One set-up, three machines at once: the two refusals cost no extra minute.
    let mut signed = Vm::secure_boot(&ns, "tap0", SIGNED.0, &vars, dir.path());
    let mut unsigned = Vm::secure_boot(&ns, "tap1", UNSIGNED.0, &vars, dir.path());
    let mut tampered = Vm::secure_boot(&ns, "tap2", TAMPERED.0, &vars, dir.path());

    // The refused: the file arrived whole, the firmware said no.
    let mut refused_at = Vec::new();
    for (vm, (mac, file)) in [(&mut unsigned, UNSIGNED), (&mut tampered, TAMPERED)] {
        let deadline = Instant::now() + BOOT_LIMIT;
        while !refused(&vm.console_text(), mac) {
            assert!(
                Instant::now() < deadline && !vm.stopped(),
                "{file}: no refusal on the console:\n{}\nevents: {:#?}\nlog:\n{}",
                vm.console_text(),
                events(&ns, mac),
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!(
            "{file}: refused {:.1} s after power-on",
            vm.started.elapsed().as_secs_f64()
        );
        refused_at.push(Instant::now());
        let ev = events(&ns, mac);
        assert!(
            ev.iter()
                .any(|e| e.starts_with("tftp RRQ complete") && e.contains(file)),
            "{file} was not transferred whole: {ev:#?}"
        );
        assert!(
            !vm.console_text().contains("iPXE initialising devices"),
            "{file}: iPXE started:\n{}",
            vm.console_text()
        );
    }

    // The signed copy: iPXE runs, asks shardboot over DHCP as iPXE, and boots on.
    let secs = qemu::wait_booted(
        &mut conductor,
        &mut signed,
        &qemu::per_node_path(SIGNED.0),
        BOOT_LIMIT,
        || server.log_text(),
    );
    eprintln!("{}: VM start to per-node config in {secs:.1} s", SIGNED.1);
    let ev = events(&ns, SIGNED.0);
    let flat = ev.join("\n");
    let transfer = ev
        .iter()
        .position(|e| e.starts_with("tftp RRQ complete") && e.contains(SIGNED.1))
        .unwrap_or_else(|| panic!("no transfer of {}: {flat}", SIGNED.1));
    assert!(
        ev[transfer..]
            .iter()
            .any(|e| e.starts_with("dhcp ") && e.contains(IPXE_BOOT_FILE)),
        "no DHCP answer to iPXE after the transfer:\n{flat}"
    );
    assert!(
        signed
            .console_text()
            .contains(&format!("{BOOTED_LINE} {}", qemu::per_node_path(SIGNED.0))),
        "{}",
        signed.console_text()
    );

    // Nothing of the refused copies ever ran: no iPXE request within QUIET of the
    // refusal (and of all the signed machine's boot).
    for ((mac, file), at) in [UNSIGNED, TAMPERED].into_iter().zip(refused_at) {
        let left = QUIET.saturating_sub(at.elapsed());
        std::thread::sleep(left);
        let ev = events(&ns, mac);
        assert!(
            !ev.iter()
                .any(|e| e.contains(IPXE_BOOT_FILE) || e.starts_with("http ")),
            "{file}: an iPXE request arrived after the refusal: {ev:#?}"
        );
    }
    assert_eq!(
        conductor.paths(),
        [qemu::per_node_path(SIGNED.0)],
        "only the signed machine loaded a per-node config"
    );
}
