//! DHCPv6 against real clients: ISC `dhclient -6` across a veth pair between two
//! namespaces (obtain, renew, restart of the server, release), and a relay of the
//! test's own (Relay-forward from a remote link, firmware without option 61; boot URLs
//! naming the address the relay sent to; the machine's timeline; a Decline).

use crate::common;

use std::net::{Ipv6Addr, SocketAddrV6};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::clients::wait_event;
use common::lab6::{
    client_message, ia_address, in_range, lease6, relay_exchange, relayed, wait_log, SERVER6,
};
use common::relay6::{relay_forward, relay_reply};
use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, UnknownOption, IANA};
use dhcproto::{Encodable, Encoder};

#[test]
fn dhclient6_obtains_renews_keeps_its_lease_over_a_restart_and_releases() {
    require_root!();
    // T1 3 s, T2 5 s: the running client renews within the test.
    let (lab, dir, mut server) =
        common::lab6::start("lease_time = 60\nrenewal_time = 3\nrebinding_time = 5\n");
    let events = dir.path().join("events6");
    let hook = common::clients::dhclient_hook(dir.path(), "dhclient6-script", &events);
    let dhclient = |extra: &[&str]| {
        lab.client
            .command("dhclient")
            .args(["-6", "-sf"])
            .arg(&hook)
            .arg("-lf")
            .arg(dir.path().join("dhclient6.leases"))
            .arg("-pf")
            .arg(dir.path().join("dhclient6.pid"))
            .args(extra)
            .arg(&lab.client_if)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    assert!(
        dhclient(&["-1"]).success(),
        "dhclient -6 found no server:\n{}",
        server.log_text()
    );
    let bound = wait_event(&events, "BOUND6", 1);
    let ip = bound[1].clone();
    assert!(in_range(&ip), "address {ip} outside the range");
    assert_eq!(bound[3], "60", "valid lifetime");
    let lease = lease6(&server, &ip);
    assert_eq!(lease["state"], "bound");
    // The MAC comes from the client's EUI-64 link-local address (or its DUID-LLT).
    assert_eq!(lease["mac"], lab.client_mac());
    let first_expiry = lease["expires"].as_u64().unwrap();

    // The daemon (still running) renews at T1 and keeps its address.
    let renew = wait_event(&events, "RENEW6", 1);
    assert_eq!(renew[1], ip);
    let renewed = lease6(&server, &ip);
    assert!(
        renewed["expires"].as_u64().unwrap() > first_expiry,
        "{renewed}"
    );

    // A SIGKILLed server comes back with the lease: the next renewal is answered with
    // the same address, and the store still names the same client.
    server.restart();
    wait_log(&server, "DHCPv6 listening");
    let n = std::fs::read_to_string(&events)
        .unwrap()
        .matches("RENEW6")
        .count();
    let again = wait_event(&events, "RENEW6", n + 1);
    assert_eq!(again[1], ip, "renewed after the restart");
    assert_eq!(lease6(&server, &ip)["duid"], lease["duid"]);

    // Release: the daemon stops and gives the address back.
    assert!(dhclient(&["-r"]).success());
    wait_event(&events, "RELEASE6", 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while lease6(&server, &ip)["state"] != "released" {
        assert!(Instant::now() < deadline, "{}", lease6(&server, &ip));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Solicit as PXE firmware over IPv6 sends it without option 61 (OVMF; the case that
/// fails with dnsmasq): client id, IA_NA, elapsed time, vendor class only.
fn firmware_solicit(duid: &[u8]) -> Vec<u8> {
    let mut m = Message::new_with_id(MessageType::Solicit, [7, 7, 7]);
    let o = m.opts_mut();
    o.insert(DhcpOption::ClientId(duid.to_vec()));
    o.insert(DhcpOption::IANA(IANA {
        id: 1,
        t1: 0,
        t2: 0,
        opts: Default::default(),
    }));
    o.insert(DhcpOption::ElapsedTime(0));
    // Built by hand: dhcproto 0.15 writes option 16's length wrong.
    let class = b"PXEClient:Arch:00007:UNDI:003016";
    let data = [
        &343u32.to_be_bytes()[..],
        &(class.len() as u16).to_be_bytes(),
        class,
    ]
    .concat();
    o.insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::VendorClass,
        data,
    )));
    let mut out = Vec::new();
    m.encode(&mut Encoder::new(&mut out)).unwrap();
    out
}

#[test]
fn a_relayed_firmware_solicit_without_option_61_gets_an_address_of_its_link_and_a_tftp_url() {
    require_root!();
    let (lab, _dir, server) = common::lab6::start("");
    let link: Ipv6Addr = "fd00:2::1".parse().unwrap();
    let peer: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56];
    let forward = relay_forward(link, peer, b"rack7-port3", None, &firmware_solicit(&duid));
    let reply = relay_exchange(&lab, SERVER6.parse().unwrap(), forward)
        .unwrap_or_else(|| panic!("no Relay-reply:\n{}", server.log_text()));
    let reply = relay_reply(&reply);
    assert_eq!(reply.link, link, "link-address echoed");
    assert_eq!(reply.peer, peer, "peer-address echoed");
    assert!(
        reply.options.contains(&(18, b"rack7-port3".to_vec())),
        "Interface-Id echoed: {:?}",
        reply.options
    );
    let adv = reply.message;
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    let Some(DhcpOption::IANA(ia)) = adv.opts().get(OptionCode::IANA) else {
        panic!("{adv:?}")
    };
    let Some(DhcpOption::IAAddr(a)) = ia.opts.get(OptionCode::IAAddr) else {
        panic!("{ia:?}")
    };
    assert!(
        (u128::from("fd00:2::100".parse::<Ipv6Addr>().unwrap())
            ..=u128::from("fd00:2::1ff".parse::<Ipv6Addr>().unwrap()))
            .contains(&u128::from(a.addr)),
        "{} is not of the relay's link",
        a.addr
    );
    let url = match adv.opts().get(OptionCode::OptBootfileUrl) {
        Some(DhcpOption::Unknown(u)) => String::from_utf8(u.data().to_vec()).unwrap(),
        other => panic!("no boot file URL: {other:?}"),
    };
    assert!(url.starts_with("tftp://[fd00:1::1]/"), "{url}");
    assert!(
        url.ends_with(".efi"),
        "an EFI binary for architecture 7: {url}"
    );
    drop(server);
}

#[test]
fn malformed_dhcpv6_is_counted_and_dropped_and_the_server_keeps_answering() {
    require_root!();
    let (lab, _dir, server) = common::lab6::start("");
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x57];
    let good = relay_forward(
        "fd00:2::1".parse().unwrap(),
        "fe80::1".parse().unwrap(),
        b"x",
        None,
        &firmware_solicit(&duid),
    );
    let mut bad_length = firmware_solicit(&duid);
    bad_length[6] = 0xff; // the first option's length runs past the end
    let bad: Vec<Vec<u8>> = vec![
        vec![1, 2],       // truncated
        vec![2, 1, 2, 3], // an Advertise, from a "client"
        bad_length,
        vec![0u8; 5000], // oversized
        {
            // Relay-forward nested past the hop limit.
            let mut m = firmware_solicit(&duid);
            for _ in 0..40 {
                m = relay_forward(
                    "fd00:2::1".parse().unwrap(),
                    "fe80::1".parse().unwrap(),
                    b"x",
                    None,
                    &m,
                );
            }
            m
        },
    ];
    let answered = lab
        .client
        .run(move || {
            let s = common::bind_fixed_port("[fd00:1::2]:547");
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let to = SocketAddrV6::new(SERVER6.parse().unwrap(), 547, 0, 0);
            for b in &bad {
                s.send_to(b, to).unwrap();
            }
            s.send_to(&good, to).unwrap();
            let mut buf = [0u8; 4096];
            s.recv_from(&mut buf).is_ok()
        })
        .join()
        .unwrap();
    assert!(
        answered,
        "the good message after the bad ones is answered:\n{}",
        server.log_text()
    );
    let metrics = lab
        .server
        .command("curl")
        .args([
            "-s",
            "-m",
            "2",
            "--noproxy",
            "*",
            "http://192.0.2.1:8080/metrics",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&metrics.stdout).to_string();
    for reason in [
        "truncated",
        "not_client_message",
        "bad_option_length",
        "oversized",
        "bad_relay",
    ] {
        let line = format!("shardboot_dhcp6_dropped_total{{reason=\"{reason}\"}} 1");
        assert!(
            text.contains(&line),
            "{line} missing:\n{}",
            text.lines()
                .filter(|l| l.contains("dhcp6"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    drop(server);
}

/// RFC 8415 §18.3.8: a client that finds its address in use (duplicate address
/// detection) declines it; the server quarantines the address and gives the client
/// another. (Linux deletes an address that fails DAD under dhcpcd and dhclient, so
/// neither sends a Decline here; the messages come from the test.)
#[test]
fn a_declined_address_is_quarantined_and_the_client_gets_another() {
    require_root!();
    let (lab, _dir, server) = common::lab6::start("");
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0, 0, 0xd1];
    let adv = relayed(
        &lab,
        &client_message(MessageType::Solicit, &duid, None, None),
    );
    let first = ia_address(&adv).expect("an address advertised");
    let Some(DhcpOption::ServerId(sid)) = adv.opts().get(OptionCode::ServerId).cloned() else {
        panic!("{adv:?}")
    };
    let req = client_message(MessageType::Request, &duid, Some(&sid), Some(first));
    assert_eq!(ia_address(&relayed(&lab, &req)), Some(first));
    assert_eq!(lease6(&server, &first.to_string())["state"], "bound");

    let decline = client_message(MessageType::Decline, &duid, Some(&sid), Some(first));
    let answer = relayed(&lab, &decline);
    assert_eq!(answer.msg_type(), MessageType::Reply);
    let Some(DhcpOption::StatusCode(status)) = answer.opts().get(OptionCode::StatusCode) else {
        panic!("{answer:?}")
    };
    assert_eq!(status.status, dhcproto::v6::Status::Success);
    assert_eq!(lease6(&server, &first.to_string())["state"], "declined");

    // Soliciting again, it is given another address; the declined one stays nobody's.
    let again = relayed(
        &lab,
        &client_message(MessageType::Solicit, &duid, None, Some(first)),
    );
    let second = ia_address(&again).expect("another address");
    assert_ne!(second, first, "the declined address was given again");
    let other = [0, 3, 0, 1, 0x52, 0x54, 0, 0, 0, 0xd2];
    let theirs = relayed(
        &lab,
        &client_message(MessageType::Solicit, &other, None, Some(first)),
    );
    assert_ne!(ia_address(&theirs), Some(first), "nor to another client");
    drop(server);
}

fn boot_url(m: &Message) -> String {
    match m.opts().get(OptionCode::OptBootfileUrl) {
        Some(DhcpOption::Unknown(u)) => String::from_utf8(u.data().to_vec()).unwrap(),
        other => panic!("no boot file URL: {other:?}"),
    }
}

/// The server has an address on each of two routed networks; relays reach it on either.
/// The boot URL names the address each relay sent to (the datagram's destination,
/// IPV6_PKTINFO), which is the one that relay's clients can reach, not just the first
/// address of the interface. Each client's DHCPv6 exchange is in its timeline.
#[test]
fn a_relayed_client_is_told_to_boot_from_the_address_its_relay_reached() {
    require_root!();
    let lab = common::lab6::lab(&["fd00:1::2/64", "fd00:9::2/64"]);
    lab.server.ip(&[
        "-6",
        "addr",
        "add",
        "fd00:9::1/64",
        "dev",
        &lab.server_if,
        "nodad",
    ]);
    let (_dir, server) = common::lab6::serve(&lab, "", "");
    let link: Ipv6Addr = "fd00:2::1".parse().unwrap();
    for (n, to) in ["fd00:1::1", "fd00:9::1"].into_iter().enumerate() {
        let mac = [0x52, 0x54, 0, 0x12, 0x35, n as u8];
        let duid = [&[0, 3, 0, 1][..], &mac].concat();
        let peer = "fe80::1".parse().unwrap();
        let forward = relay_forward(link, peer, b"p", None, &firmware_solicit(&duid));
        let reply = relay_exchange(&lab, to.parse().unwrap(), forward)
            .unwrap_or_else(|| panic!("no Relay-reply from {to}:\n{}", server.log_text()));
        let url = boot_url(&relay_reply(&reply).message);
        assert!(
            url.starts_with(&format!("tftp://[{to}]/")),
            "to {to}: {url}"
        );

        // The machine's timeline (its MAC from the DUID-LL) has the Solicit, the
        // address advertised and the URL.
        let mac = shardboot::mac::MacAddr(mac);
        let out = lab
            .server
            .command("curl")
            .args(["-s", "-m", "2", "--noproxy", "*", "-H"])
            .arg(format!("Authorization: Bearer {}", common::lab6::TOKEN))
            .arg(format!("http://192.0.2.1:8080/v1/machines/{mac}/events"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));
        let e = &v["events"][0];
        assert_eq!(
            (&e["source"], &e["what"], &e["outcome"]),
            (&"dhcp6".into(), &"SOLICIT".into(), &"advertise".into()),
            "{v}"
        );
        assert!(e["ip"].as_str().unwrap().starts_with("fd00:2::"), "{v}");
        assert_eq!(
            e["detail"],
            format!("mac from duid; boot file {url}").as_str(),
            "{v}"
        );
    }
    drop(server);
}

/// `VAR=value` lines of an env-dump file as a map.
fn env_of(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn dhclient6_reads_option6_entries_of_the_subnet_and_the_host_and_only_what_it_asked_for() {
    require_root!();
    let lab = common::lab6::lab(&["fd00:1::2/64"]);
    // Subnet: SNTP, NTP, the refresh time and two options shardboot has no name for;
    // the host's entry replaces the subnet's DNS server (`dns`).
    let host = format!(
        "[[host]]\nmac = \"{}\"\noptions = [\"option6:dns-server,[fd00:1::53]\"]\n",
        lab.client_mac()
    );
    let (dir, server) = common::lab6::serve(
        &lab,
        concat!(
            "options = [\"option6:sntp-server,[fd00:1::6],[fd00:1::7]\", ",
            "\"option6:information-refresh-time,900\", \"option6:ntp-server,[fd00:1::5]\", ",
            "\"option6:200,01:02:03\", \"option6:201,04:05\"]\n"
        ),
        &host,
    );
    let conf = dir.path().join("dhclient6.conf");
    // Option 201 is known to the client but not requested: it must not come back.
    std::fs::write(
        &conf,
        concat!(
            "option dhcp6.sb-ntp code 56 = string;\n",
            "option dhcp6.sb-200 code 200 = string;\n",
            "option dhcp6.sb-201 code 201 = string;\n",
            "request dhcp6.name-servers, dhcp6.sntp-servers, dhcp6.info-refresh-time, ",
            "dhcp6.sb-ntp, dhcp6.sb-200;\n",
        ),
    )
    .unwrap();
    let events = dir.path().join("events6");
    let hook = common::clients::dhclient_hook(dir.path(), "env-dump", &events);
    let status = lab
        .client
        .command("dhclient")
        .args(["-6", "-1", "-cf"])
        .arg(&conf)
        .arg("-sf")
        .arg(&hook)
        .arg("-lf")
        .arg(dir.path().join("dhclient6.leases"))
        .arg("-pf")
        .arg(dir.path().join("dhclient6.pid"))
        .arg(&lab.client_if)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "dhclient -6:\n{}", server.log_text());
    let bound = dir.path().join("events6.BOUND6");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bound.exists() {
        assert!(
            Instant::now() < deadline,
            "no BOUND6:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let env = env_of(&bound);
    let get = |k: &str| env.get(k).cloned().unwrap_or_default();
    assert_eq!(get("new_dhcp6_name_servers"), "fd00:1::53", "{env:?}");
    assert_eq!(
        get("new_dhcp6_sntp_servers"),
        "fd00:1::6 fd00:1::7",
        "{env:?}"
    );
    assert_eq!(get("new_dhcp6_info_refresh_time"), "900", "{env:?}");
    // RFC 5908 §4: suboption 1, 16 octets, the address.
    assert_eq!(
        get("new_dhcp6_sb_ntp"),
        "0:1:0:10:fd:0:0:1:0:0:0:0:0:0:0:0:0:0:0:5",
        "{env:?}"
    );
    assert_eq!(get("new_dhcp6_sb_200"), "1:2:3", "{env:?}");
    assert!(
        !env.contains_key("new_dhcp6_sb_201"),
        "not requested: {env:?}"
    );
    let _ = lab
        .client
        .command("dhclient")
        .args(["-6", "-x", "-pf"])
        .arg(dir.path().join("dhclient6.pid"))
        .status();
}

/// A Solicit as the site's iPXE build sends it over DHCPv6: client id, IA_NA, Option
/// Request, elapsed time and the User Class option with its `user-class` setting as the
/// one item (iPXE's `dhcpv6_tx`); no vendor class and no option 61.
fn site_ipxe_solicit(duid: &[u8]) -> Vec<u8> {
    let mut m = Message::new_with_id(MessageType::Solicit, [7, 7, 8]);
    let o = m.opts_mut();
    o.insert(DhcpOption::ClientId(duid.to_vec()));
    o.insert(DhcpOption::IANA(IANA {
        id: 1,
        t1: 0,
        t2: 0,
        opts: Default::default(),
    }));
    o.insert(DhcpOption::ORO(dhcproto::v6::ORO {
        opts: vec![OptionCode::DomainNameServers, OptionCode::OptBootfileUrl],
    }));
    o.insert(DhcpOption::ElapsedTime(0));
    // RFC 8415 §21.15: each item is a two-octet length and the class.
    let class = b"shardboot-tls";
    let data = [&(class.len() as u16).to_be_bytes()[..], class].concat();
    o.insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::UserClass,
        data,
    )));
    let mut out = Vec::new();
    m.encode(&mut Encoder::new(&mut out)).unwrap();
    out
}

/// The site's TLS build asking over DHCPv6 (through a relay) is told the member's TLS
/// route without its scheme, as over DHCPv4; put `https://` in front, as the build's
/// embedded script does, and the member serves the first stage there, with a
/// certificate that names the address the relay reached.
#[test]
fn the_site_tls_build_is_sent_to_the_tls_route_over_dhcpv6() {
    require_root!();
    let lab = common::lab6::lab(&["fd00:1::2/64"]);
    let pki = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![SERVER6.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (pki.path().join("tls.crt"), pki.path().join("tls.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    // Lines after `[http]`'s own (common::lab6::serve): the TLS listener turns
    // `boot.ipxe_tls` on.
    let tls = format!(
        "tls_listen = \"[::]:8443\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert_file.display(),
        key_file.display()
    );
    let (_dir, server) = common::lab6::serve(&lab, "", &tls);
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0x12, 0x36, 0x01];
    let forward = relay_forward(
        "fd00:2::1".parse().unwrap(),
        "fe80::1".parse().unwrap(),
        b"p",
        None,
        &site_ipxe_solicit(&duid),
    );
    let reply = relay_exchange(&lab, SERVER6.parse().unwrap(), forward)
        .unwrap_or_else(|| panic!("no Relay-reply:\n{}", server.log_text()));
    let url = boot_url(&relay_reply(&reply).message);
    assert_eq!(url, format!("[{SERVER6}]:8443/boot.ipxe"));
    let out = lab
        .client
        .command("curl")
        .args(["-s", "-m", "5", "--noproxy", "*", "--cacert"])
        .arg(&cert_file)
        .arg(format!("https://{url}"))
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && body.starts_with("#!ipxe"),
        "https://{url}: {body}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    drop(server);
}
