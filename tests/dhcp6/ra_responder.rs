//! The IPv6 "no router here" responder against real router discovery: ndisc6's
//! `rdisc6` solicits from another interface on the same bridge and prints every
//! advertisement it gets; radvd plays a real IPv6 router. All inside one lab namespace
//! (`qemu/lab.sh`: bridge br0, interfaces m0 (shardboot), m1 (radvd), m2 (rdisc6)).

use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::members::wait_until;
use common::qemu::{self, curl, metric};
use common::{Netns, Server};

fn lab() -> Netns {
    let ns = qemu::lab(0, &["192.0.2.1/24", "192.0.2.2/24", "192.0.2.3/24"]);
    // Only rdisc6 solicits: the kernel's own solicitations from m2 would be answered
    // too, and rdisc6 would print those answers as well.
    for i in ["m0", "m1", "m2"] {
        ns.command("sysctl")
            .args(["-qw", &format!("net.ipv6.conf.{i}.router_solicitations=0")])
            .status()
            .unwrap();
    }
    // Link-local addresses are usable once duplicate address detection is over.
    wait_until(
        "link-local addresses past DAD",
        Duration::from_secs(10),
        || {
            let out = ns.command("ip").args(["-6", "addr"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            text.contains("fe80") && !text.contains("tentative")
        },
    );
    ns
}

fn start(ns: &Netns, dir: &std::path::Path, ra: &str) -> Server {
    let config = format!(
        r#"
[dhcp]
interfaces = ["m0"]
[tftp]
enabled = false
[http]
listen = "192.0.2.1:8080"
{ra}
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.100 - 192.0.2.199"]
"#
    );
    Server::start(ns, dir, &config)
}

/// One advertisement as rdisc6 prints it.
#[derive(Debug)]
struct Heard {
    router_lifetime: u64,
    prefixes: Vec<String>,
    managed: bool,
    from: String,
}

/// Solicits from m2 and collects every advertisement within 1.5 s.
fn solicit(ns: &Netns) -> Vec<Heard> {
    let out = ns
        .command("rdisc6")
        .args(["-m", "-n", "-w", "1500", "-r", "1", "m2"])
        .output()
        .expect("rdisc6 (tests/install-deps.sh installs ndisc6)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut heard = Vec::new();
    let mut current = Heard {
        router_lifetime: u64::MAX,
        prefixes: Vec::new(),
        managed: false,
        from: String::new(),
    };
    for line in text.lines() {
        let value = line.split_once(':').map(|(_, v)| v.trim()).unwrap_or("");
        let key = line.trim_start();
        if key.starts_with("Router lifetime") {
            current.router_lifetime = value.split_whitespace().next().unwrap().parse().unwrap();
        } else if key.starts_with("Stateful address conf.") {
            current.managed = value == "Yes";
        } else if key.starts_with("Prefix") {
            current.prefixes.push(value.to_string());
        } else if let Some(from) = key.strip_prefix("from ") {
            current.from = from.trim().to_string();
            heard.push(std::mem::replace(
                &mut current,
                Heard {
                    router_lifetime: u64::MAX,
                    prefixes: Vec::new(),
                    managed: false,
                    from: String::new(),
                },
            ));
        }
    }
    heard
}

fn link_local(ns: &Netns, interface: &str) -> String {
    let out = ns
        .command("ip")
        .args([
            "-6", "-o", "addr", "show", "dev", interface, "scope", "link",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let addr = text
        .split_whitespace()
        .nth(3)
        .expect("a link-local address");
    addr.split('/').next().unwrap().to_string()
}

/// A new responder listens before it answers (a router would reveal itself first).
fn past_learning() {
    std::thread::sleep(
        Duration::from_secs(shardboot::ra::responder::LEARNING_SECS) + Duration::from_millis(500),
    );
}

fn metrics(ns: &Netns) -> String {
    curl(ns, "http://192.0.2.1:8080/metrics", None)
}

#[test]
fn a_host_that_solicits_hears_no_router_here_from_shardboot() {
    require_root!();
    let ns = lab();
    let dir = tempfile::tempdir().unwrap();
    let _server = start(&ns, dir.path(), "[ra]\nenabled = true");
    past_learning();
    let heard = solicit(&ns);
    // One answer to rdisc6 (and possibly one to a kernel solicitation sent before the
    // sysctl above took effect): every one from shardboot, and saying "no router".
    assert!(!heard.is_empty() && heard.len() <= 2, "{heard:?}");
    let shardboot = link_local(&ns, "m0");
    for ra in &heard {
        assert_eq!(ra.router_lifetime, 0, "not a default router: {ra:?}");
        assert!(
            ra.prefixes.is_empty() && !ra.managed,
            "configures nothing: {ra:?}"
        );
        assert_eq!(ra.from, shardboot, "{ra:?}");
    }
    let m = metrics(&ns);
    assert!(metric(&m, "shardboot_ra_answered_total ") >= 1, "{m}");
}

/// On a `[[subnet6]]` link (no `[ra]` section: on by default there), the answer says
/// "ask DHCPv6" (M) with the prefix on-link and still no default router, as
/// ironic-image's dnsmasq does with `enable-ra`.
#[test]
fn a_host_on_a_subnet6_link_is_told_to_ask_dhcpv6() {
    require_root!();
    let ns = lab();
    ns.command("ip")
        .args(["addr", "add", "fd00:1::1/64", "dev", "m0", "nodad"])
        .status()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _server = start(
        &ns,
        dir.path(),
        "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::100 - fd00:1::1ff\"]\ninterface = \"m0\"\n",
    );
    past_learning();
    let heard = solicit(&ns);
    assert!(!heard.is_empty() && heard.len() <= 2, "{heard:?}");
    for ra in &heard {
        assert_eq!(ra.router_lifetime, 0, "not a default router: {ra:?}");
        assert!(ra.managed, "addresses from DHCPv6: {ra:?}");
        assert_eq!(ra.prefixes.len(), 1, "{ra:?}");
        assert!(ra.prefixes[0].starts_with("fd00:1::/64"), "{ra:?}");
        assert_eq!(ra.from, link_local(&ns, "m0"), "{ra:?}");
    }
}

#[test]
fn a_config_file_without_ra_leaves_router_discovery_alone() {
    require_root!();
    let ns = lab();
    let dir = tempfile::tempdir().unwrap();
    let _server = start(&ns, dir.path(), "");
    let heard = solicit(&ns);
    assert!(heard.is_empty(), "{heard:?}");
    assert!(!metrics(&ns).contains("shardboot_ra_"));
}

/// A real IPv6 router (radvd) on the segment: shardboot stands down and the host hears
/// only the router.
#[test]
fn shardboot_stays_silent_while_a_real_router_advertises() {
    require_root!();
    let ns = lab();
    let dir = tempfile::tempdir().unwrap();
    let _server = start(&ns, dir.path(), "[ra]\nenabled = true");
    // radvd refuses to run on a host that does not forward.
    ns.command("sysctl")
        .args(["-qw", "net.ipv6.conf.all.forwarding=1"])
        .status()
        .unwrap();
    let conf = dir.path().join("radvd.conf");
    std::fs::write(
        &conf,
        "interface m1 { AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10; \
         prefix 2001:db8:1::/64 {}; };\n",
    )
    .unwrap();
    let radvd: Child = ns
        .command("radvd")
        .args(["-n", "-m", "stderr", "-C"])
        .arg(&conf)
        .arg("-p")
        .arg(dir.path().join("radvd.pid"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("radvd (tests/install-deps.sh installs it)");
    let _radvd = KillOnDrop(radvd);
    wait_until(
        "shardboot heard radvd's first advertisement",
        Duration::from_secs(15),
        || metric(&metrics(&ns), "shardboot_ra_routers_seen_total ") >= 1,
    );
    let heard = solicit(&ns);
    let router = link_local(&ns, "m1");
    assert!(!heard.is_empty(), "the router answers");
    for ra in &heard {
        assert_eq!(ra.from, router, "only the router answers: {heard:?}");
        assert_eq!(ra.prefixes, ["2001:db8:1::/64"], "{heard:?}");
    }
    let m = metrics(&ns);
    assert!(metric(&m, "shardboot_ra_standing_down_total ") >= 1, "{m}");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The responder only saves boot time: an interface with IPv6 switched off does not
/// keep shardboot from serving DHCP there.
#[test]
fn an_interface_with_ipv6_disabled_still_serves_dhcp() {
    require_root!();
    let ns = lab();
    ns.command("sysctl")
        .args(["-qw", "net.ipv6.conf.m0.disable_ipv6=1"])
        .status()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Server::start returns once DHCP listens, and fails if shardboot exits.
    let _server = start(&ns, dir.path(), "[ra]\nenabled = true");
    assert!(solicit(&ns).is_empty());
    let m = metrics(&ns);
    assert_eq!(metric(&m, "shardboot_ra_answered_total "), 0, "{m}");
}
