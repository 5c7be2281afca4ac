//! The option engine through real clients (busybox udhcpc, ISC dhclient): options set at
//! server, subnet, tagged-range and host level, and for a built-in client class, read
//! back from the environment each client hands its script.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

use common::clients::script;
use common::{Lab, Server};

/// The server's config: one subnet, one tagged range, one known host (the client's MAC).
fn config(interface: &str, client_mac: &str) -> String {
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
options = ["option:ntp-server,192.0.2.5", "option:domain-search,lab.example"]

[[subnet]]
network = "192.0.2.0/24"
ranges = [{{ range = "192.0.2.100 - 192.0.2.199", tag = "lab" }}]
lease_time = 3600
router = "192.0.2.1"
dns = ["192.0.2.1"]
options = [
  "tag:lab,option:dns-server,192.0.2.53",
  "option:mtu,1400",
  "tag:pxe,option:root-path,/pxe-root",
  "tag:!known,option:router",
]

[[host]]
mac = "{client_mac}"
tags = ["rack7"]
options = ["tag:rack7,option:hostname,rack7-node", "tag:known,option:log-server,192.0.2.7"]
"#
    )
}

/// The environment the client's script got for `event`.
fn env_of(events: &Path, event: &str) -> HashMap<String, String> {
    let file = format!("{}.{event}", events.display());
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn udhcpc(lab: &Lab, events: &Path, extra: &[&str]) {
    let status = lab
        .client
        .command("udhcpc")
        .args(extra)
        .args(["-q", "-n", "-f", "-t", "5", "-T", "1", "-A", "1", "-s"])
        .arg(script("env-dump"))
        .args(["-i", &lab.client_if])
        .env("SB_EVENTS", events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "udhcpc {extra:?} failed");
}

#[test]
fn options_from_every_level_reach_udhcpc() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let mac = lab.client_mac();
    let server = Server::start(&lab.server, dir.path(), &config(&lab.server_if, &mac));
    let events = dir.path().join("known");
    udhcpc(&lab, &events, &[]);
    let env = env_of(&events, "bound");
    let want = [
        ("ntpsrv", "192.0.2.5"),    // [dhcp] options
        ("search", "lab.example"),  // [dhcp] options, RFC 3397 names
        ("dns", "192.0.2.53"),      // the range's tag beats the subnet's dns key
        ("mtu", "1400"),            // [[subnet]] options
        ("router", "192.0.2.1"),    // known: the tag:!known entry does not hold
        ("hostname", "rack7-node"), // the host's own tag
        ("opt7", "c0000207"),       // the built-in `known` tag (udhcpc names option 7 so)
    ];
    for (k, v) in want {
        assert_eq!(
            env.get(k).map(|s| s.trim()),
            Some(v),
            "{k}: {env:?}\n{}",
            server.log_text()
        );
    }
    assert!(!env.contains_key("rootpath"), "not a PXE client: {env:?}");

    // Another MAC, unknown to the server, saying it is PXE firmware.
    lab.client.ip(&[
        "link",
        "set",
        &lab.client_if,
        "address",
        "52:54:00:0f:00:01",
    ]);
    let events = dir.path().join("pxe");
    udhcpc(&lab, &events, &["-V", "PXEClient:Arch:00000:UNDI:002001"]);
    let env = env_of(&events, "bound");
    assert_eq!(
        env.get("rootpath").map(String::as_str),
        Some("/pxe-root"),
        "{env:?}"
    );
    // Not known: no router (the valueless entry), no host options.
    for k in ["router", "hostname", "opt7"] {
        assert!(
            !env.contains_key(k),
            "{k} sent to an unknown client: {env:?}"
        );
    }
    assert_eq!(env.get("ntpsrv").map(String::as_str), Some("192.0.2.5"));
}

#[test]
fn options_reach_dhclient_through_its_request_list() {
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let mac = lab.client_mac();
    let server = Server::start(&lab.server, dir.path(), &config(&lab.server_if, &mac));
    let events = dir.path().join("dhclient");
    let wrapper = common::clients::dhclient_hook(dir.path(), "env-dump", &events);
    let conf = dir.path().join("dhclient.conf");
    std::fs::write(
        &conf,
        "request subnet-mask, routers, domain-name-servers, ntp-servers, domain-search, interface-mtu, host-name, log-servers;\n",
    )
    .unwrap();
    let status = lab
        .client
        .command("dhclient")
        .args(["-4", "-1", "-sf"])
        .arg(&wrapper)
        .arg("-cf")
        .arg(&conf)
        .arg("-lf")
        .arg(dir.path().join("dhclient.leases"))
        .arg("-pf")
        .arg(dir.path().join("dhclient.pid"))
        .arg(&lab.client_if)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "dhclient failed: {}", server.log_text());
    let env = env_of(&events, "BOUND");
    for (k, v) in [
        ("new_ntp_servers", "192.0.2.5"),
        ("new_domain_search", "lab.example."),
        ("new_domain_name_servers", "192.0.2.53"),
        ("new_interface_mtu", "1400"),
        ("new_host_name", "rack7-node"),
        ("new_log_servers", "192.0.2.7"),
        ("new_routers", "192.0.2.1"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}: {env:?}");
    }
    let _ = lab
        .client
        .command("dhclient")
        .args(["-4", "-x", "-pf"])
        .arg(dir.path().join("dhclient.pid"))
        .status();
}
