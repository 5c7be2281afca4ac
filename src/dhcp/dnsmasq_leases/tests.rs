use super::*;

const NOW: u64 = 1_800_000_000;

fn config(extra: &str) -> Config {
    let text = format!(
        "{extra}\n[[subnet]]\nnetwork = \"172.22.0.0/24\"\nranges = [\"172.22.0.10 - 172.22.0.100\"]\nexclude = [\"172.22.0.50\"]\nlease_time = 3600\n"
    );
    Config::from_toml_with_overrides(&text, &[]).unwrap()
}

fn line_of(e: ImportError) -> (usize, LineError) {
    (e.line, e.reason)
}

#[test]
fn reads_dnsmasq_lines_and_skips_the_v6_section() {
    let text = "1800000900 52:54:00:aa:bb:01 172.22.0.12 node-1 01:52:54:00:aa:bb:01\n\
                \n\
                0 52:54:00:aa:bb:02 172.22.0.13 * *\n\
                duid 00:01:00:01:2c:5f:1b:7e:52:54:00:00:00:01\n\
                1800000900 1131 fd00:1:2::13 node-1 00:04:aa:bb\n\
                1800000900 1132 fd00:1:2::14 * 00:04:aa:bc\n";
    let p = parse(text).unwrap();
    assert_eq!(p.v6_skipped, 2);
    assert_eq!(
        p.leases,
        vec![
            DnsmasqLease {
                line: 1,
                expires: Some(1_800_000_900),
                mac: "52:54:00:aa:bb:01".parse().unwrap(),
                ip: "172.22.0.12".parse().unwrap(),
                hostname: Some("node-1".into()),
                client_id: Some(vec![1, 0x52, 0x54, 0, 0xaa, 0xbb, 1]),
            },
            DnsmasqLease {
                line: 3,
                expires: None,
                mac: "52:54:00:aa:bb:02".parse().unwrap(),
                ip: "172.22.0.13".parse().unwrap(),
                hostname: None,
                client_id: None,
            },
        ]
    );
}

#[test]
fn a_bad_line_names_its_number_and_reason() {
    let good = "1800000900 52:54:00:aa:bb:01 172.22.0.12 node-1 *\n";
    let cases: [(&str, LineError); 8] = [
        (
            "1800000900 52:54:00:aa:bb:02 172.22.0.13 *\n",
            LineError::Fields(4),
        ),
        (
            "soon 52:54:00:aa:bb:02 172.22.0.13 * *\n",
            LineError::Expiry,
        ),
        ("-1 52:54:00:aa:bb:02 172.22.0.13 * *\n", LineError::Expiry),
        (
            "1800000900 20:52:54:00:aa:bb:02 172.22.0.13 * *\n",
            LineError::Mac,
        ),
        (
            "1800000900 52:54:00:aa:bb:02 fd00::13 * *\n",
            LineError::Address,
        ),
        (
            "1800000900 52:54:00:aa:bb:02 172.22.0.13 * 1:2\n",
            LineError::ClientId,
        ),
        (
            "1800000900 52:54:00:aa:bb:02 172.22.0.13 n\u{7f}de *\n",
            LineError::Hostname,
        ),
        (
            "1800000900 52:54:00:aa:bb:02 172.22.0.12 * *\n",
            LineError::DuplicateAddress {
                ip: "172.22.0.12".parse().unwrap(),
                first: 1,
            },
        ),
    ];
    for (bad, want) in cases {
        let e = parse(&format!("{good}{bad}{good}")).unwrap_err();
        assert_eq!(line_of(e.clone()), (2, want), "{bad:?}");
        assert!(e.to_string().starts_with("line 2: "), "{e}");
    }
    // Non-ASCII in a name: a byte dnsmasq never writes there.
    let e = parse("1800000900 52:54:00:aa:bb:02 172.22.0.13 nöde *\n").unwrap_err();
    assert_eq!(line_of(e), (1, LineError::Hostname));
}

#[test]
fn the_plan_skips_expired_leases_and_gives_infinite_ones_a_lease_time() {
    let text = "1800000900 52:54:00:aa:bb:01 172.22.0.12 node-1 *\n\
                1700000000 52:54:00:aa:bb:02 172.22.0.13 * *\n\
                0 52:54:00:aa:bb:03 172.22.0.14 * *\n";
    let plan = plan(&parse(text).unwrap(), &config(""), &[], NOW).unwrap();
    assert_eq!((plan.expired, plan.infinite, plan.kept), (1, 1, 0));
    let ends: Vec<(String, u64, LeaseState)> = plan
        .leases
        .iter()
        .map(|l| (l.ip.to_string(), l.expires, l.state))
        .collect();
    assert_eq!(
        ends,
        vec![
            ("172.22.0.12".into(), 1_800_000_900, LeaseState::Bound),
            ("172.22.0.14".into(), NOW + 3600, LeaseState::Bound),
        ]
    );
    assert!(plan.leases.iter().all(|l| l.starts == NOW));
}

#[test]
fn the_plan_refuses_addresses_this_server_would_not_serve() {
    let mac = "52:54:00:aa:bb:01";
    let other: MacAddr = "52:54:00:aa:bb:09".parse().unwrap();
    let hosts = "[[host]]\nmac = \"52:54:00:aa:bb:09\"\nip = \"172.22.0.20\"\n\
                 [[host]]\nmac = \"52:54:00:aa:bb:01\"\nip = \"172.22.0.200\"\n";
    let cfg = config(hosts);
    let case = |ip: &str| {
        let text =
            format!("1800000900 52:54:00:aa:bb:08 172.22.0.11 * *\n1800000900 {mac} {ip} * *\n");
        plan(&parse(&text).unwrap(), &cfg, &[], NOW).map(|p| p.leases.len())
    };
    let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    assert_eq!(
        case("10.0.0.1").map_err(line_of),
        Err((2, LineError::NoSubnet(ip("10.0.0.1"))))
    );
    assert_eq!(
        case("172.22.0.150").map_err(line_of),
        Err((2, LineError::OutsideRanges(ip("172.22.0.150"))))
    );
    assert_eq!(
        case("172.22.0.50").map_err(line_of),
        Err((2, LineError::Excluded(ip("172.22.0.50"))))
    );
    assert_eq!(
        case("172.22.0.20").map_err(line_of),
        Err((
            2,
            LineError::Reserved {
                ip: ip("172.22.0.20"),
                holder: other
            }
        ))
    );
    // Outside the ranges but reserved for this very MAC: served, so imported.
    assert_eq!(case("172.22.0.200"), Ok(2));
}

#[test]
fn the_plan_refuses_an_address_the_store_binds_to_another_client() {
    let stored = |mac: &str, expires: u64| Lease {
        ip: "172.22.0.12".parse().unwrap(),
        mac: mac.parse().unwrap(),
        state: LeaseState::Bound,
        starts: NOW - 10,
        expires,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    };
    let parsed = parse("1800000900 52:54:00:aa:bb:01 172.22.0.12 * *\n").unwrap();
    let cfg = config("");
    let e = plan(&parsed, &cfg, &[stored("52:54:00:aa:bb:07", NOW + 60)], NOW).unwrap_err();
    assert_eq!(e.line, 1);
    assert!(matches!(e.reason, LineError::Held { .. }), "{e}");
    // Expired in the store: free, imported.
    let p = plan(&parsed, &cfg, &[stored("52:54:00:aa:bb:07", NOW - 1)], NOW).unwrap();
    assert_eq!(p.leases.len(), 1);
    // The same client with a later end: kept as stored.
    let p = plan(
        &parsed,
        &cfg,
        &[stored("52:54:00:aa:bb:01", NOW + 999_999)],
        NOW,
    )
    .unwrap();
    assert_eq!((p.leases.len(), p.kept), (0, 1));
}

#[test]
fn what_the_lease_file_writer_renders_reads_back() {
    let leases = vec![Lease {
        ip: "172.22.0.12".parse().unwrap(),
        mac: "52:54:00:aa:bb:01".parse().unwrap(),
        state: LeaseState::Bound,
        starts: NOW,
        expires: NOW + 600,
        hostname: Some("node-1".into()),
        client_id: Some(vec![1, 0x52, 0x54, 0, 0xaa, 0xbb, 1]),
        machine_id: None,
        arch: None,
    }];
    let text = crate::dhcp::leasefile::render(&leases, NOW);
    let back = plan(&parse(&text).unwrap(), &config(""), &[], NOW).unwrap();
    assert_eq!(back.leases, leases);
}
