//! DHCPv6 against dhcpcd 9 (`dhcpcd -6`, Debian's dhcpcd-base) across a veth pair
//! between two namespaces: the address comes from the range after shardboot's managed
//! Router Advertisement, renews, shows in the operator API with the client's MAC, and
//! `dhcpcd -k` gives it back; `-x` (exit) sends no Release unless the config says
//! `release`. A `[[host]] ip6` reservation gets the client exactly its address.
//!
//! dhcpcd runs with its own config file and the test's hook script (none of the hooks
//! it ships: they would write resolv.conf and the host name), on the test's veth only,
//! in a mount namespace of its own where /run and /var/lib/dhcpcd are the test's
//! directories: its DUID, lease and control socket never touch the host's.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::clients::{dhclient_hook, wait_event};
use common::lab6::{api_lease6, in_range, serve};
use common::Lab;

/// One dhcpcd on the lab's client interface.
struct Dhcpcd {
    child: Child,
    conf: PathBuf,
    iface: String,
    log: PathBuf,
}

impl Dhcpcd {
    /// Starts dhcpcd in the foreground on `lab`'s client interface with `conf` as its
    /// whole config; state in `dir`/dhcpcd-db (kept across starts), events in `events`.
    fn start(lab: &Lab, dir: &Path, conf: &str, events: &Path) -> Self {
        let db = dir.join("dhcpcd-db");
        std::fs::create_dir_all(&db).unwrap();
        let conf_path = dir.join("dhcpcd.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let hook = dhclient_hook(dir, "dhcpcd-hook", events);
        let log = dir.join("dhcpcd.log");
        // A tmpfs over /run (its pid file and sockets) and the test's directory over
        // /var/lib/dhcpcd, seen only by this mount namespace.
        let setup = format!(
            "mount -t tmpfs tmpfs /run && mkdir /run/dhcpcd && mount --bind '{}' /var/lib/dhcpcd && exec dhcpcd -f '{}' --ipv6only --nobackground --debug --script '{}' '{}'",
            db.display(),
            conf_path.display(),
            hook.display(),
            lab.client_if
        );
        let child = lab
            .client
            .command("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &setup])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start dhcpcd");
        Self {
            child,
            conf: conf_path,
            iface: lab.client_if.clone(),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `dhcpcd <flag>` against the running one (its control socket is in its own
    /// mount namespace, hence nsenter) and waits for the daemon to exit.
    fn control_and_wait_exit(&mut self, flag: &str) {
        let pid = self.child.id().to_string();
        let status = Command::new("nsenter")
            .args(["-t", &pid, "--mount", "--net", "dhcpcd", "-f"])
            .arg(&self.conf)
            .args(["--ipv6only", flag, &self.iface])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "dhcpcd {flag}:\n{}", self.log_text());
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "dhcpcd still runs after {flag}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dhcpcd {
    fn drop(&mut self) {
        // Its helper processes go with the namespace (`Netns` kills every process in it).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// dhcpcd's config: IPv6 only, no IPv4 link-local, no DUID from the host's UUID.
fn dhcpcd_conf(extra: &str) -> String {
    format!("ipv6only\nnoipv4ll\nduid ll\n{extra}\n")
}

/// Waits until the API's lease on `ip` is in `state`; returns it.
fn wait_lease_state(lab: &Lab, ip: &str, state: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lease = api_lease6(lab, ip);
        if let Some(l) = lease.as_ref().filter(|l| l["state"] == state) {
            return l.clone();
        }
        assert!(Instant::now() < deadline, "lease of {ip}: {lease:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `ip` is configured on the client interface.
fn on_interface(lab: &Lab, ip: &str) -> bool {
    let out = lab
        .client
        .command("ip")
        .args(["-6", "addr", "show", "dev", &lab.client_if])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains(&format!("{ip}/"))
}

#[test]
fn dhcpcd6_obtains_an_address_of_the_range_renews_and_releases_it_with_k() {
    require_root!();
    let lab = common::lab6::lab(&[]);
    // The range's first address is reserved for another machine: held back.
    let (dir, server) = serve(
        &lab,
        "lease_time = 60\nrenewal_time = 3\nrebinding_time = 5\n",
        "[[host]]\nmac = \"52:54:00:99:99:99\"\nip6 = \"fd00:1::100\"\n",
    );
    let events = dir.path().join("events6");
    // No ia_na: dhcpcd asks DHCPv6 for an address because the RA says M.
    let mut dhcpcd = Dhcpcd::start(&lab, dir.path(), &dhcpcd_conf(""), &events);
    let bound = wait_event(&events, "BOUND6", 1);
    let ip = bound[1].clone();
    assert!(
        in_range(&ip) && ip != "fd00:1::100",
        "address {ip}:\n{}\n{}",
        dhcpcd.log_text(),
        server.log_text()
    );
    assert_eq!(bound[2], "60", "valid lifetime");
    assert!(on_interface(&lab, &ip), "dhcpcd configured {ip}");
    let lease = wait_lease_state(&lab, &ip, "bound");
    assert_eq!(lease["mac"], lab.client_mac(), "{lease}");
    let first_expiry = lease["expires"].as_u64().unwrap();

    // At T1 it renews, and keeps its address.
    let renew = wait_event(&events, "RENEW6", 1);
    assert_eq!(renew[1], ip);
    let renewed = wait_lease_state(&lab, &ip, "bound");
    assert!(
        renewed["expires"].as_u64().unwrap() > first_expiry,
        "{renewed}"
    );

    // -k: dhcpcd sends a Release, drops the address and, with no interface left, exits.
    dhcpcd.control_and_wait_exit("--release");
    wait_lease_state(&lab, &ip, "released");
    assert!(!on_interface(&lab, &ip));
    drop(server);
}

#[test]
fn dhcpcd6_exit_keeps_the_lease_bound_unless_its_config_says_release() {
    require_root!();
    let lab = common::lab6::lab(&[]);
    let (dir, server) = serve(&lab, "", "");
    let events = dir.path().join("events6");
    let mut dhcpcd = Dhcpcd::start(&lab, dir.path(), &dhcpcd_conf("ia_na 1"), &events);
    let ip = wait_event(&events, "BOUND6", 1)[1].clone();
    wait_lease_state(&lab, &ip, "bound");
    // -x stops it without a Release: the binding outlives the client.
    dhcpcd.control_and_wait_exit("--exit");
    assert_eq!(
        api_lease6(&lab, &ip).unwrap()["state"],
        "bound",
        "{}",
        dhcpcd.log_text()
    );
    drop(dhcpcd);

    // Started again on the same DUID, from its lease file, it keeps the same address
    // (REBOOT6: the server confirms it); with `release` in its config, exiting gives it
    // back.
    let mut dhcpcd = Dhcpcd::start(&lab, dir.path(), &dhcpcd_conf("ia_na 1\nrelease"), &events);
    let again = wait_event(&events, "REBOOT6", 1);
    assert_eq!(again[1], ip, "{}", dhcpcd.log_text());
    dhcpcd.control_and_wait_exit("--exit");
    wait_lease_state(&lab, &ip, "released");
    drop(server);
}

#[test]
fn a_reserved_machine_gets_exactly_its_ip6_and_host_name_from_dhcpcd() {
    require_root!();
    let lab = common::lab6::lab(&[]);
    // Outside the range; the host name goes back in option 39 (dhcpcd sends its own
    // with `fqdn`).
    let host = format!(
        "[[host]]\nmac = \"{}\"\nip6 = \"fd00:1::42\"\nhostname = \"node-42\"\n",
        lab.client_mac()
    );
    let (dir, server) = serve(&lab, "", &host);
    let events = dir.path().join("events6");
    let mut dhcpcd = Dhcpcd::start(
        &lab,
        dir.path(),
        &dhcpcd_conf("ia_na 1\nhostname pc\nfqdn none"),
        &events,
    );
    let bound = wait_event(&events, "BOUND6", 1);
    assert_eq!(
        bound[1],
        "fd00:1::42",
        "{}\n{}",
        dhcpcd.log_text(),
        server.log_text()
    );
    assert_eq!(
        bound.get(3).map(String::as_str),
        Some("node-42"),
        "{bound:?}"
    );
    assert!(on_interface(&lab, "fd00:1::42"));
    let lease = wait_lease_state(&lab, "fd00:1::42", "bound");
    assert_eq!(lease["mac"], lab.client_mac());
    assert_eq!(lease["hostname"], "node-42");
    dhcpcd.control_and_wait_exit("--release");
    wait_lease_state(&lab, "fd00:1::42", "released");
    drop(server);
}

#[test]
fn dhcpcd6_reads_option6_entries_it_asked_for_and_no_other() {
    require_root!();
    let lab = common::lab6::lab(&[]);
    let (dir, server) = serve(
        &lab,
        concat!(
            "options = [\"option6:sntp-server,[fd00:1::6]\", \"option6:ntp-server,[fd00:1::5],ntp.lab.example\", ",
            "\"option6:domain-search,lab.example\", \"option6:information-refresh-time,900\"]\n"
        ),
        "",
    );
    let events = dir.path().join("events6");
    // dhcpcd asks (Option Request option) for what its `option` lines name, and reads
    // option 56's suboptions by its own definitions (RFC 5908).
    let mut dhcpcd = Dhcpcd::start(
        &lab,
        dir.path(),
        &dhcpcd_conf("ia_na 1\noption dhcp6_name_servers\noption dhcp6_sntp_servers\noption dhcp6_ntp_server\noption dhcp6_domain_search"),
        &events,
    );
    wait_event(&events, "BOUND6", 1);
    let env: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(dir.path().join("events6.BOUND6"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let get = |k: &str| env.get(k).cloned().unwrap_or_default();
    let log = || format!("{env:?}\n{}\n{}", dhcpcd.log_text(), server.log_text());
    assert_eq!(get("new_dhcp6_name_servers"), "fd00:1::1", "{}", log());
    assert_eq!(get("new_dhcp6_sntp_servers"), "fd00:1::6", "{}", log());
    assert_eq!(get("new_dhcp6_ntp_server_addr"), "fd00:1::5", "{}", log());
    assert_eq!(
        get("new_dhcp6_ntp_server_fqdn"),
        "ntp.lab.example",
        "{}",
        log()
    );
    assert_eq!(get("new_dhcp6_domain_search"), "lab.example", "{}", log());
    // Not asked for: not sent (RFC 8415 §18.3).
    assert!(
        !env.contains_key("new_dhcp6_info_refresh_time"),
        "{}",
        log()
    );
    dhcpcd.control_and_wait_exit("--release");
}
