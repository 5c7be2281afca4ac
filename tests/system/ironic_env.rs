//! `shardboot serve --env ironic-image`: the binary configured only by the variables IrSO
//! sets on ironic-image's dnsmasq container, in network namespaces, with real clients
//! (busybox udhcpc, tftp-hpa) and IrSO's own exec probe; and by the database variables
//! IrSO sets on Ironic's container, against a real MariaDB server the test starts.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::db::{DbServer, Kind, PASSWORD, USER};
use common::{Lab, Netns, Server};

/// The fields of the first `bound` event the udhcpc script recorded.
fn bound(events: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(events).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with("bound ")) {
            return line.split(' ').map(str::to_string).collect();
        }
        assert!(Instant::now() < deadline, "no bound event:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One-shot udhcpc on `iface` in `ns` (with `extra` flags): a lease or a failed test.
fn obtain(ns: &Netns, iface: &str, events: &Path, server: &Server, extra: &[&str]) -> Vec<String> {
    let status = common::clients::udhcpc_once(ns, iface, events, extra);
    assert!(
        status.success(),
        "udhcpc on {iface} got no lease:\n{}",
        server.log_text()
    );
    bound(events)
}

/// ironic-image's firmware directory: the two files its dnsmasq hands out, under its names.
fn firmware(dir: &Path) -> std::path::PathBuf {
    let fw = dir.join("firmware");
    std::fs::create_dir_all(&fw).unwrap();
    std::fs::write(fw.join("undionly.kpxe"), b"bios ipxe stand-in\n").unwrap();
    std::fs::write(fw.join("snponly-x86_64.efi"), vec![0x5au8; 70_000]).unwrap();
    fw
}

/// IrSO's liveness and readiness probe of its dnsmasq container, run where the server is.
fn irso_probe(ns: &Netns) -> bool {
    ns.command("sh")
        .args(["-c", "ss -lun | grep :67 && ss -lun | grep :69"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[test]
fn irso_single_range_environment_serves_dhcp_tftp_and_the_probe() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path());
    let fw_s = fw.display().to_string();
    // As IrSO writes it for spec.networking {ipAddress, dhcp {networkCIDR, rangeBegin,
    // rangeEnd, gatewayAddress, serveDNS}}.
    let mut server = Server::start_ironic_env(
        &lab.server,
        dir.path(),
        &[
            ("IRONIC_LISTEN_PORT", "6385"),
            ("IRONIC_ACCESS_PORT", "6385"),
            ("HTTP_PORT", "6180"),
            ("LISTEN_ALL_INTERFACES", "true"),
            ("PROVISIONING_IP", "192.0.2.1"),
            ("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0"),
            ("DNS_IP", "provisioning"),
            ("GATEWAY_IP", "192.0.2.254"),
            ("IPXE_CUSTOM_FIRMWARE_DIR", &fw_s),
        ],
        "DHCP listening",
    );
    assert!(
        irso_probe(&lab.server),
        "IrSO's probe fails:\n{}",
        server.log_text()
    );

    // A UEFI x64 PXE ROM: vendor class and option 93 (arch 7).
    let uefi = ["-V", "PXEClient:Arch:00007:UNDI:003016", "-x", "0x5d:0007"];
    let events = dir.path().join("events");
    let ev = obtain(&lab.client, &lab.client_if, &events, &server, &uefi);
    // bound <ip> <mask> <boot_file> <serverid> <router> <dns>
    let ip: std::net::Ipv4Addr = ev[1].parse().unwrap();
    assert!(
        (u32::from(ip) >= u32::from(std::net::Ipv4Addr::new(192, 0, 2, 100)))
            && (u32::from(ip) <= u32::from(std::net::Ipv4Addr::new(192, 0, 2, 150))),
        "{ev:?}"
    );
    assert_eq!(ev[2], "255.255.255.0");
    assert_eq!(
        ev[3], "snponly-x86_64.efi",
        "SNP_BASENAME's x86_64 file for arch 7"
    );
    assert_eq!(ev[4], "192.0.2.1");
    assert_eq!(ev[5], "192.0.2.254", "GATEWAY_IP is the router");
    assert_eq!(ev[6], "192.0.2.1", "DNS_IP=provisioning is this host");

    // The UEFI file, by ironic-image's name, from the firmware directory over TFTP.
    let dest = dir.path().join("got.efi");
    let out = common::clients::tftp_get(&lab.client, "192.0.2.1", "snponly-x86_64.efi", &dest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&dest).unwrap() == std::fs::read(fw.join("snponly-x86_64.efi")).unwrap(),
        "TFTP served other bytes"
    );

    // The lease is in the store the same environment names.
    server.stop();
    let leases = server.leases_json();
    assert!(
        leases.as_array().unwrap().iter().any(|l| l["ip"] == ev[1]),
        "{leases}"
    );
}

#[test]
fn tagged_ranges_keep_the_main_router_off_the_extra_range() {
    require_root!();
    // Two provisioning networks on one host (IrSO's extraRanges), each on its own veth;
    // IRONIC_IP alone, so DHCP serves every interface with an address in a range.
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let second = Netns::new("sbc");
    let (s2, c2) = (common::unique("vs"), common::unique("vc"));
    common::sh(&[
        "ip", "link", "add", &s2, "type", "veth", "peer", "name", &c2,
    ]);
    common::sh(&["ip", "link", "set", &s2, "netns", &lab.server.name]);
    common::sh(&["ip", "link", "set", &c2, "netns", &second.name]);
    lab.server.ip(&["addr", "add", "198.18.1.1/24", "dev", &s2]);
    lab.server.ip(&["link", "set", &s2, "up"]);
    second.ip(&["link", "set", &c2, "up"]);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path()).display().to_string();
    let server = Server::start_ironic_env(
        &lab.server,
        dir.path(),
        &[
            ("IRONIC_IP", "192.0.2.1"),
            (
                "DHCP_RANGE",
                "192.0.2.100,192.0.2.150,255.255.255.0;set:range_1,198.18.1.100,198.18.1.150,255.255.255.0",
            ),
            ("GATEWAY_IP", "192.0.2.254"),
            ("DHCP_OPTIONS", "tag:range_1,option:router"),
            ("IPXE_CUSTOM_FIRMWARE_DIR", &fw),
        ],
        "DHCP listening",
    );
    let main = obtain(
        &lab.client,
        &lab.client_if,
        &dir.path().join("ev1"),
        &server,
        &[],
    );
    let extra = obtain(&second, &c2, &dir.path().join("ev2"), &server, &[]);
    assert!(main[1].starts_with("192.0.2.1"), "{main:?}");
    assert_eq!(main[5], "192.0.2.254");
    assert!(extra[1].starts_with("198.18.1.1"), "{extra:?}");
    assert_eq!(
        extra[4], "198.18.1.1",
        "answered from the extra network's address"
    );
    assert_eq!(
        extra[5], "-",
        "the valueless tagged router suppresses GATEWAY_IP"
    );
}

#[test]
fn empty_range_serves_tftp_and_answers_no_dhcp() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &["192.0.2.20/24"]);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path());
    let fw_s = fw.display().to_string();
    let server = Server::start_ironic_env(
        &lab.server,
        dir.path(),
        &[
            ("PROVISIONING_IP", "192.0.2.1"),
            ("DHCP_RANGE", ""),
            ("IPXE_CUSTOM_FIRMWARE_DIR", &fw_s),
        ],
        "TFTP listening",
    );
    let dest = dir.path().join("got.kpxe");
    let out = common::clients::tftp_get(&lab.client, "192.0.2.1", "undionly.kpxe", &dest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&dest).unwrap(), b"bios ipxe stand-in\n");
    // Nothing on port 67: a client gets no lease.
    let status =
        common::clients::udhcpc_once(&lab.client, &lab.client_if, &dir.path().join("events"), &[]);
    assert!(!status.success(), "a lease without DHCP_RANGE");
    assert!(!server.log_text().contains("DHCP listening"));
}

#[test]
fn check_config_says_an_empty_range_turns_dhcp_off() {
    let out = Command::new(common::shardboot_bin())
        .args(["check-config", "--env", "ironic-image"])
        .env_clear()
        .env("PROVISIONING_IP", "192.0.2.1")
        .env("DHCP_RANGE", "")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("dhcp: disabled (TFTP and HTTP only)"),
        "{text}"
    );
}

#[test]
fn check_config_names_the_variable_it_cannot_honour() {
    // No namespace needed: check-config reads the environment and exits.
    let out = Command::new(common::shardboot_bin())
        .args(["check-config", "--env", "ironic-image"])
        .env_clear()
        .env("PROVISIONING_IP", "192.0.2.1")
        .env("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0")
        .env(
            "DHCP_OPTIONS",
            "tag:range_1,option:router;option:tftp-servr,192.0.2.1",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DHCP_OPTIONS: entry \"option:tftp-servr,192.0.2.1\": \"option:tftp-servr\": no option is called"),
        "{err}"
    );
    assert!(
        err.contains("DHCP_OPTIONS: entry \"tag:range_1,option:router\": no DHCP_RANGE or DHCP_HOSTS entry sets tag \"range_1\""),
        "{err}"
    );
}

/// Ironic's database on a MariaDB server, as IrSO's tests make it (a user with all
/// privileges on it), and the `shardboot` database the operator adds for the same user.
/// Returns Ironic's database name.
fn ironic_and_shardboot_databases(db: &mut DbServer) -> String {
    let (ironic_url, _) = db.database();
    let ironic = ironic_url.rsplit('/').next().unwrap().to_string();
    for sql in [
        "CREATE DATABASE shardboot".to_string(),
        format!("GRANT ALL PRIVILEGES ON shardboot.* TO '{USER}'@'%'"),
    ] {
        let out = db.admin(&sql);
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ironic
}

/// One column of `sql`'s rows in database `name`.
fn query(db: &DbServer, name: &str, sql: &str) -> Vec<String> {
    let out = db.admin_in(Some(name), sql);
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn ironic_database_settings_keep_leases_in_a_database_of_shardboots_own() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    // Ironic's MariaDB server, on loopback of the server's namespace.
    let mut db = DbServer::start(Kind::MariaDb, Some(&lab.server));
    let ironic = ironic_and_shardboot_databases(&mut db);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path()).display().to_string();
    let host = format!("127.0.0.1:{}", db.port);
    // The Secret's files: /auth/mariadb in a pod, a directory of the test's here.
    let credentials = db.credentials_dir().display().to_string();
    let mut server = Server::start_ironic_env(
        &lab.server,
        dir.path(),
        &[
            ("PROVISIONING_IP", "192.0.2.1"),
            ("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0"),
            ("IPXE_CUSTOM_FIRMWARE_DIR", &fw),
            // As IrSO sets them on Ironic's container from spec.database.
            ("IRONIC_USE_MARIADB", "true"),
            ("MARIADB_HOST", &host),
            ("MARIADB_DATABASE", &ironic),
            ("SHARDBOOT_STORE__CREDENTIALS_DIR", &credentials),
        ],
        "DHCP listening",
    );
    let ev = obtain(
        &lab.client,
        &lab.client_if,
        &dir.path().join("events"),
        &server,
        &[],
    );
    let ip: std::net::Ipv4Addr = ev[1].parse().unwrap();

    // The binding is in shardboot's database, committed before the ACK.
    let addrs = query(&db, "shardboot", "SELECT addr FROM shardboot_lease4");
    assert!(
        addrs.contains(&u32::from(ip).to_string()),
        "{ip} not in the shardboot database: {addrs:?}\n{}",
        server.log_text()
    );
    // Ironic's database is left as it was: no table of shardboot's in it.
    let tables = query(
        &db,
        &ironic,
        &format!("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{ironic}'"),
    );
    assert_eq!(tables, ["0"], "tables in Ironic's database");
    server.stop();
    assert!(
        !server.log_text().contains(PASSWORD),
        "the password was logged:\n{}",
        server.log_text()
    );
}

#[test]
fn check_config_shows_the_database_of_its_own_and_never_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("mariadb");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("username"), "ironic\n").unwrap();
    std::fs::write(credentials.join("password"), PASSWORD).unwrap();
    let run = |extra: &[(&str, &str)]| {
        Command::new(common::shardboot_bin())
            .args(["check-config", "--env", "ironic-image"])
            .env_clear()
            .env("PROVISIONING_IP", "192.0.2.1")
            .env("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0")
            .env("IRONIC_USE_MARIADB", "true")
            .env("MARIADB_HOST", "mariadb.example.svc")
            .env("MARIADB_DATABASE", "ironic")
            .env("SHARDBOOT_STORE__CREDENTIALS_DIR", &credentials)
            .envs(extra.iter().copied())
            .output()
            .unwrap()
    };
    let out = run(&[("SHARDBOOT_DATABASE", "boot_leases")]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "store: shared MySql database mysql://mariadb.example.svc/boot_leases (credentials from {}",
            credentials.display()
        )),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");

    // A password in the environment is refused, and not repeated.
    let out = run(&[("MARIADB_PASSWORD", PASSWORD)]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("MARIADB_PASSWORD: "), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");

    // Without --env ironic-image the variable means nothing: refused, not ignored.
    let out = Command::new(common::shardboot_bin())
        .arg("check-config")
        .env_clear()
        .env("SHARDBOOT_DATABASE", "boot_leases")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("SHARDBOOT_DATABASE: is read only with --env ironic-image"),
        "{text}"
    );
}

/// ironic-image's variables for one range on 192.0.2.0/24, the server at `ip`.
fn single_range(ip: &str, fw: &str) -> Vec<(String, String)> {
    [
        ("IRONIC_LISTEN_PORT", "6385"),
        ("IRONIC_ACCESS_PORT", "6385"),
        ("HTTP_PORT", "6180"),
        ("LISTEN_ALL_INTERFACES", "true"),
        ("PROVISIONING_IP", ip),
        ("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0"),
        ("IPXE_CUSTOM_FIRMWARE_DIR", fw),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[test]
fn serve_waits_for_provisioning_ip_to_be_configured_as_ironic_image_does() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path()).display().to_string();
    // The address arrives two seconds after the server starts (a keepalived VIP).
    let vip = {
        let (ns, iface) = (lab.server.name.clone(), lab.server_if.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            common::sh(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                "192.0.2.5/24",
                "dev",
                &iface,
            ]);
        })
    };
    let vars = single_range("192.0.2.5", &fw);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_ironic_env(&lab.server, dir.path(), &vars, "DHCP listening");
    vip.join().unwrap();
    let log = server.log_text();
    assert!(
        log.contains("waiting for PROVISIONING_IP 192.0.2.5 to be configured on an interface"),
        "{log}"
    );
    assert!(
        irso_probe(&lab.server),
        "IrSO's probe fails once it serves:\n{log}"
    );
    let events = dir.path().join("events");
    let ev = obtain(&lab.client, &lab.client_if, &events, &server, &[]);
    assert!(
        ev[1].starts_with("192.0.2.1"),
        "a lease from the range: {ev:?}"
    );
}

#[test]
fn serve_gives_up_on_a_provisioning_ip_that_never_comes_and_names_it() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let fw = firmware(dir.path()).display().to_string();
    let started = Instant::now();
    let out = lab
        .server
        .command(common::shardboot_bin().to_str().unwrap())
        .args(["serve", "--env", "ironic-image", "--state-dir"])
        .arg(dir.path().join("state"))
        .envs(single_range("192.0.2.5", &fw))
        .env("IRONIC_IP_WAIT_TIMEOUT", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("PROVISIONING_IP") && stderr.contains("192.0.2.5 is on no interface"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the wait is bounded"
    );
    assert!(!irso_probe(&lab.server), "nothing listened meanwhile");
}
