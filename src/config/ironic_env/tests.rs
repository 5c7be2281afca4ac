//! Environments shaped like the ones IrSO writes for its dnsmasq container
//! (`buildCommonEnvVars` + `newDnsmasqContainer`), through the whole validation.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::HostFacts;
use crate::config::{Config, ConfigError, ConfigIssue};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    // What IrSO always sets on the dnsmasq container, before the DHCP variables.
    let mut vars: BTreeMap<String, String> = [
        ("IRONIC_LISTEN_PORT", "6385"),
        ("IRONIC_ACCESS_PORT", "6385"),
        ("HTTP_PORT", "6180"),
        ("LISTEN_ALL_INTERFACES", "true"),
        ("PROVISIONING_IP", "192.0.2.2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in pairs {
        vars.insert(k.to_string(), v.to_string());
    }
    vars
}

fn host() -> HostFacts {
    HostFacts {
        addresses: vec![
            ("lo".into(), "127.0.0.1/8".parse().unwrap()),
            ("eth0".into(), "198.51.100.7/24".parse().unwrap()),
            ("prov0".into(), "192.0.2.2/24".parse().unwrap()),
        ],
        macs: vec![
            ("eth0".into(), "52:54:00:00:00:e0".parse().unwrap()),
            ("prov0".into(), "52:54:00:00:00:b0".parse().unwrap()),
        ],
        custom_firmware_readable: false,
        database_ca_readable: false,
        ipxe_cert_readable: false,
        ironic_ca_readable: false,
    }
}

fn load(vars: &BTreeMap<String, String>) -> Result<Config, Vec<ConfigIssue>> {
    match Config::from_ironic_env(vars, &host(), &[]) {
        Ok(c) => Ok(c),
        Err(ConfigError::Invalid(issues)) => Err(issues),
        Err(other) => panic!("unexpected error {other}"),
    }
}

/// The issues, each as `KEY: reason`.
fn problems(vars: &BTreeMap<String, String>) -> Vec<String> {
    load(vars)
        .expect_err("expected the environment to be refused")
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn ip6(s: &str) -> std::net::Ipv6Addr {
    s.parse().unwrap()
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// What a client given `addr` in `cfg`'s subnet `i` gets for option `code`: the winning
/// option entry's octets, `None` when it sends nothing, else what the subnet keys say.
fn sent(cfg: &Config, i: usize, addr: &str, code: u8) -> Option<Vec<u8>> {
    use crate::options::{select, Levels};
    let s = &cfg.subnets[i];
    let tags: Vec<&str> = s.range_tag(ip(addr)).into_iter().collect();
    let levels = Levels {
        server: &cfg.dhcp.options,
        subnet: &s.options,
        ..Levels::default()
    };
    match select(levels, &tags).into_iter().find(|r| r.code == code) {
        Some(rule) => rule.value.clone(),
        None => match code {
            3 => s.router.map(|r| r.octets().to_vec()),
            6 => (!s.dns.is_empty()).then(|| s.dns.iter().flat_map(|a| a.octets()).collect()),
            _ => None,
        },
    }
}

#[test]
fn single_range_as_irso_writes_it() {
    let cfg = load(&env(&[
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
        ("DNS_IP", "provisioning"),
    ]))
    .unwrap();
    assert!(cfg.dhcp.enabled);
    // The interface that holds PROVISIONING_IP, as ironic-image finds it.
    assert_eq!(cfg.dhcp.interfaces, ["prov0"]);
    assert_eq!(cfg.subnets.len(), 1);
    let s = &cfg.subnets[0];
    assert_eq!(s.network.to_string(), "192.0.2.0/24");
    assert_eq!(s.ranges, [(ip("192.0.2.10"), ip("192.0.2.100"))]);
    assert_eq!(
        s.router, None,
        "no GATEWAY_IP: no router, like dhcp-option=3"
    );
    assert_eq!(s.dns, [ip("192.0.2.2")], "DNS_IP=provisioning is this host");
    assert_eq!(s.lease_time, 3600, "dnsmasq's default lease time");
    assert_eq!(cfg.boot.tftp_server, Some(ip("192.0.2.2")));
    assert_eq!(cfg.boot.http_url.as_deref(), Some("http://192.0.2.2:6180"));
    assert_eq!(cfg.boot.ipxe_script, "boot.ipxe");
    assert_eq!(cfg.boot.bios, "undionly.kpxe");
    assert_eq!(cfg.boot.uefi_x64, "snponly-x86_64.efi");
    assert_eq!(cfg.boot.uefi_arm64, "snponly-arm64.efi");
    assert!(cfg.tftp.enabled);
    assert_eq!(
        cfg.tftp.settings.root.to_str(),
        Some(super::BUILTIN_FIRMWARE_DIR)
    );
    assert!(
        cfg.tftp.settings.aliases.is_empty(),
        "files carry ironic-image's names"
    );
    assert!(!cfg.dhcp.known_only);
    assert!(!cfg.ra.enabled);
}

#[test]
fn several_tagged_ranges_with_per_range_routers() {
    // IrSO: the main range untagged, extra ranges set:range_N, a router per extra
    // range or a valueless option:router that keeps GATEWAY_IP away from it.
    let cfg = load(&env(&[
        (
            "DHCP_RANGE",
            "192.0.2.10,192.0.2.100,255.255.255.0;\
             set:range_1,198.18.1.10,198.18.1.200,255.255.255.0;\
             set:range_2,198.18.2.10,198.18.2.200,255.255.255.0",
        ),
        ("GATEWAY_IP", "192.0.2.1"),
        ("DNS_IP", "192.0.2.53"),
        (
            "DHCP_OPTIONS",
            "tag:range_1,option:router,198.18.1.1;tag:range_2,option:router",
        ),
    ]))
    .unwrap();
    let nets: Vec<String> = cfg.subnets.iter().map(|s| s.network.to_string()).collect();
    assert_eq!(nets, ["192.0.2.0/24", "198.18.1.0/24", "198.18.2.0/24"]);
    // The router each range's clients get.
    assert_eq!(sent(&cfg, 0, "192.0.2.10", 3), Some(vec![192, 0, 2, 1]));
    assert_eq!(sent(&cfg, 1, "198.18.1.10", 3), Some(vec![198, 18, 1, 1]));
    assert_eq!(sent(&cfg, 2, "198.18.2.10", 3), None);
    assert_eq!(cfg.subnets[1].range_tag(ip("198.18.1.10")), Some("range_1"));
    // DNS_IP is untagged: every range gets it.
    assert!(cfg.subnets.iter().all(|s| s.dns == [ip("192.0.2.53")]));
}

#[test]
fn tagged_ranges_sharing_a_network_and_options_of_any_kind() {
    // Two tagged ranges of one network, each with its own router; Ironic-style boot
    // options negated on the iPXE tag; a classless route.
    let cfg = load(&env(&[
        (
            "DHCP_RANGE",
            "set:range_0,192.0.2.10,192.0.2.50,255.255.255.0;\
             set:range_1,192.0.2.60,192.0.2.100,255.255.255.0",
        ),
        (
            "DHCP_OPTIONS",
            "tag:range_0,option:router,192.0.2.1;tag:range_1,option:router,192.0.2.254;\
             tag:!ipxe,67,undionly.kpxe;option:tftp-server,192.0.2.2;\
             option:classless-static-route,10.0.0.0/8,192.0.2.1",
        ),
    ]))
    .unwrap();
    assert_eq!(cfg.subnets.len(), 1);
    assert_eq!(sent(&cfg, 0, "192.0.2.20", 3), Some(vec![192, 0, 2, 1]));
    assert_eq!(sent(&cfg, 0, "192.0.2.70", 3), Some(vec![192, 0, 2, 254]));
    assert_eq!(sent(&cfg, 0, "192.0.2.20", 66), Some(b"192.0.2.2".to_vec()));
    assert_eq!(
        sent(&cfg, 0, "192.0.2.20", 121),
        Some(vec![8, 10, 192, 0, 2, 1])
    );
    assert_eq!(
        sent(&cfg, 0, "192.0.2.20", 67),
        Some(b"undionly.kpxe".to_vec())
    );
}

#[test]
fn empty_range_is_tftp_and_http_only() {
    let cfg = load(&env(&[("DHCP_RANGE", "")])).unwrap();
    assert!(!cfg.dhcp.enabled, "no DHCP_RANGE: no DHCP");
    assert!(cfg.subnets.is_empty());
    assert!(cfg.tftp.enabled);
    assert_eq!(cfg.boot.http_url.as_deref(), Some("http://192.0.2.2:6180"));
    // Nothing to serve, but a bad value is still named.
    let p = problems(&env(&[("DHCP_RANGE", ""), ("GATEWAY_IP", "gw")]));
    assert!(p[0].starts_with("GATEWAY_IP: \"gw\" is not"), "{p:?}");
}

#[test]
fn a_range_without_netmask_takes_the_interface_network() {
    let cfg = load(&env(&[("DHCP_RANGE", "192.0.2.10,192.0.2.100,30m")])).unwrap();
    assert_eq!(cfg.subnets[0].network.to_string(), "192.0.2.0/24");
    assert_eq!(cfg.subnets[0].lease_time, 1800);
    let p = problems(&env(&[("DHCP_RANGE", "203.0.113.10,203.0.113.20")]));
    assert!(
        p[0].starts_with("DHCP_RANGE: entry \"203.0.113.10,203.0.113.20\""),
        "{p:?}"
    );
    assert!(p[0].contains("netmask"), "{p:?}");
}

#[test]
fn hosts_ignore_and_options() {
    let cfg = load(&env(&[
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
        (
            "DHCP_HOSTS",
            "52:54:00:aa:bb:01,192.0.2.50,node-1;52:54:00:aa:bb:02,ignore",
        ),
        ("DHCP_IGNORE", "tag:!known"),
        (
            "DHCP_OPTIONS",
            "option:mtu,9000;42,0.0.0.0;option:domain-name,prov.example.org",
        ),
    ]))
    .unwrap();
    assert!(cfg.dhcp.known_only);
    assert_eq!(cfg.hosts.len(), 2);
    assert_eq!(cfg.hosts[0].ip, Some(ip("192.0.2.50")));
    assert_eq!(cfg.hosts[0].hostname.as_deref(), Some("node-1"));
    assert!(cfg.hosts[1].deny);
    assert_eq!(sent(&cfg, 0, "192.0.2.10", 26), Some(vec![0x23, 0x28]));
    assert_eq!(
        sent(&cfg, 0, "192.0.2.10", 42),
        Some(vec![192, 0, 2, 2]),
        "0.0.0.0 is this host, as in dnsmasq"
    );
    assert_eq!(
        sent(&cfg, 0, "192.0.2.10", 15),
        Some(b"prov.example.org".to_vec())
    );
}

#[test]
fn option6_entries_of_dhcp_options_go_to_the_ipv6_ranges() {
    let cfg = load(&env(&[
        (
            "DHCP_RANGE",
            "192.0.2.10,192.0.2.100,255.255.255.0;fd00:1::10,fd00:1::ff,64;set:range_6,fd00:1::100,fd00:1::1ff,64",
        ),
        (
            "DHCP_OPTIONS",
            "option:mtu,9000;option6:ntp-server,[fd00:1::5];tag:!ipxe,option6:sntp-server,[fd00:1::6]",
        ),
    ]))
    .unwrap();
    // dnsmasq's `set:` on an IPv6 range: the range's tag.
    let s6 = &cfg.subnets6[0];
    assert_eq!(s6.range_tag(ip6("fd00:1::180")), Some("range_6"));
    assert_eq!(s6.range_tag(ip6("fd00:1::80")), None);
    assert_eq!(
        cfg.subnets[0].options.len(),
        1,
        "the v4 entry stays in [[subnet]]"
    );
    let v6: Vec<_> = cfg.subnets6[0]
        .options
        .iter()
        .map(|o| (o.code, o.tags.len()))
        .collect();
    assert_eq!(v6, [(56, 0), (31, 1)]);
    // Without an IPv6 range there is nothing to send them to: said, not dropped.
    let p = problems(&env(&[
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
        ("DHCP_OPTIONS", "option6:ntp-server,[fd00:1::5]"),
    ]));
    assert!(p[0].contains("no DHCP_RANGE entry is IPv6"), "{p:?}");
}

#[test]
fn every_refusal_names_its_variable() {
    let base = [("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0")];
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("DHCP_OPTIONS", "option:routr,192.0.2.2")], "DHCP_OPTIONS: entry \"option:routr,192.0.2.2\": \"option:routr\": no option is called"),
        (&[("DHCP_OPTIONS", "option6:dns-server,192.0.2.1")], "DHCP_OPTIONS: entry \"option6:dns-server,192.0.2.1\": \"192.0.2.1\" is not an IPv6 address"),
        (&[("DHCP_OPTIONS", "encap:175,176,1")], "DHCP_OPTIONS: entry \"encap:175,176,1\": \"encap:175\": encapsulated options are not supported"),
        (&[("DHCP_OPTIONS", "option:mtu,big")], "DHCP_OPTIONS: entry \"option:mtu,big\": \"big\" is not a number"),
        (&[("DHCP_OPTIONS", "tag:range_9,option:router,192.0.2.1")], "DHCP_OPTIONS: entry \"tag:range_9,option:router,192.0.2.1\": no DHCP_RANGE or DHCP_HOSTS entry sets tag \"range_9\""),
        (&[("DHCP_IGNORE", "tag:!ironic")], "DHCP_IGNORE: "),
        (&[("DHCP_HOSTS", "52:54:00:aa:bb:01,198.51.100.9")], "DHCP_HOSTS: entry \"52:54:00:aa:bb:01,198.51.100.9\": is not inside any configured subnet (as host[0].ip)"),
        (&[("DHCP_HOSTS", "52:54:00:aa:bb:01,node_1")], "DHCP_HOSTS: entry \"52:54:00:aa:bb:01,node_1\": must be a DNS label"),
        (&[("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0;192.0.2.50,192.0.2.60,255.255.255.0")], "DHCP_RANGE: entry \"192.0.2.50,192.0.2.60,255.255.255.0\": overlaps an earlier range (as subnet[0].ranges[1])"),
        (&[("DHCP_RANGE", "fd00::10,fd00::100,ra-only")], "DHCP_RANGE: entry \"fd00::10,fd00::100,ra-only\": \"ra-only\": only stateful DHCPv6 ranges are served"),
        (&[("GATEWAY_IP", "192.0.2.300")], "GATEWAY_IP: \"192.0.2.300\" is not an IPv4 address"),
        (&[("DNS_IP", "fd00::53")], "DNS_IP: "),
        (&[("HTTP_PORT", "http")], "HTTP_PORT: "),
        (&[("IRONIC_HTTP_URL", "ftp://192.0.2.2")], "IRONIC_HTTP_URL: must start with http:// or https:// (as boot.http_url)"),
        (&[("SNP_BASENAME", "snp only")], "SNP_BASENAME: "),
        (&[("LISTEN_ALL_INTERFACES", "yes")], "LISTEN_ALL_INTERFACES: "),
        (&[("DNSMASQ_EXCEPT_INTERFACE", "lo,prov0")], "DNSMASQ_EXCEPT_INTERFACE: prov0 is the interface"),
    ];
    for (extra, want) in cases {
        let mut vars = env(&base);
        for (k, v) in *extra {
            vars.insert(k.to_string(), v.to_string());
        }
        let p = problems(&vars);
        assert!(
            p.iter().any(|l| l.starts_with(want)),
            "{extra:?}: want {want:?} in {p:?}"
        );
    }
    // Nothing tells where this host is.
    let mut vars = env(&base);
    vars.remove("PROVISIONING_IP");
    assert!(problems(&vars)[0].starts_with("PROVISIONING_IP: one of IRONIC_IP"));
}

#[test]
fn an_unreadable_custom_dir_falls_back_to_the_image_firmware() {
    let vars = env(&[("IPXE_CUSTOM_FIRMWARE_DIR", "/srv/ipxe")]);
    let readable = HostFacts {
        custom_firmware_readable: true,
        ..host()
    };
    let cfg = Config::from_ironic_env(&vars, &readable, &[]).unwrap();
    assert_eq!(cfg.tftp.settings.root.to_str(), Some("/srv/ipxe"));
    let cfg = load(&vars).unwrap();
    assert_eq!(
        cfg.tftp.settings.root.to_str(),
        Some(super::BUILTIN_FIRMWARE_DIR)
    );
}

#[test]
fn ironic_ip_and_bound_listeners_and_overrides() {
    let vars = env(&[
        ("IRONIC_IP", "192.0.2.9"),
        ("PROVISIONING_INTERFACE", "prov0"),
        ("LISTEN_ALL_INTERFACES", "False"),
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
    ]);
    let overrides = [("dhcp.port".to_string(), "6767".to_string())];
    let cfg = Config::from_ironic_env(&vars, &host(), &overrides).unwrap();
    assert_eq!(cfg.dhcp.interfaces, ["prov0"]);
    assert_eq!(cfg.boot.tftp_server, Some(ip("192.0.2.9")));
    assert_eq!(cfg.http.listen.to_string(), "192.0.2.9:8080");
    assert_eq!(
        cfg.dhcp.port, 6767,
        "SHARDBOOT_* and --set still apply on top"
    );
}

#[test]
fn provisioning_macs_alone_find_the_interface_as_irso_sets_them() {
    // IrSO's `macAddresses`: no address variable, only PROVISIONING_MACS; the second
    // MAC is this host's.
    let without_ip = |pairs: &[(&str, &str)]| {
        let mut vars = env(pairs);
        vars.remove("PROVISIONING_IP");
        vars
    };
    let vars = without_ip(&[
        ("PROVISIONING_MACS", "52:54:00:99:99:99,52:54:00:00:00:b0"),
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
    ]);
    let cfg = load(&vars).unwrap();
    assert_eq!(cfg.dhcp.interfaces, ["prov0"]);
    assert_eq!(cfg.boot.tftp_server, Some(ip("192.0.2.2")));
    // PROVISIONING_INTERFACE wins over them; none of them here, or a bad one: said.
    let both = without_ip(&[
        ("PROVISIONING_INTERFACE", "eth0"),
        ("PROVISIONING_MACS", "52:54:00:00:00:b0"),
    ]);
    assert_eq!(load(&both).unwrap().dhcp.interfaces, ["eth0"]);
    let p = problems(&without_ip(&[("PROVISIONING_MACS", "52:54:00:99:99:99")]));
    assert!(
        p[0].starts_with("PROVISIONING_MACS: no interface of this host"),
        "{p:?}"
    );
    let p = problems(&without_ip(&[("PROVISIONING_MACS", "not-a-mac")]));
    assert!(
        p[0].starts_with("PROVISIONING_MACS: \"not-a-mac\" is not a MAC"),
        "{p:?}"
    );
}

#[test]
fn ipv6_ranges_become_subnet6_and_an_ipv6_ironic_ip_the_boot_url() {
    // Dual-stack: both families served on the provisioning interface.
    let cfg = load(&env(&[(
        "DHCP_RANGE",
        "192.0.2.10,192.0.2.100,255.255.255.0;fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8,64,2h",
    )]))
    .unwrap();
    assert!(cfg.dhcp.enabled);
    assert_eq!(cfg.subnets6.len(), 1);
    let s = &cfg.subnets6[0];
    assert_eq!(s.network.to_string(), "fd2e:6f44:5dd8:c956::/64");
    assert_eq!(
        s.ranges,
        [(
            "fd2e:6f44:5dd8:c956::14".parse().unwrap(),
            "fd2e:6f44:5dd8:c956::c8".parse().unwrap()
        )]
    );
    assert_eq!(s.lease_time, 7200);
    assert_eq!(cfg.dhcp6.interfaces, ["prov0"]);
    assert!(cfg.ra.enabled, "firmware is told to ask DHCPv6");

    // A host entry with a bracketed IPv6 address reserves it for DHCPv6.
    let cfg = load(&env(&[
        (
            "DHCP_RANGE",
            "192.0.2.10,192.0.2.100,255.255.255.0;fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8,64",
        ),
        (
            "DHCP_HOSTS",
            "52:54:00:aa:bb:01,192.0.2.50,[fd2e:6f44:5dd8:c956::50],node-1",
        ),
    ]))
    .unwrap();
    assert_eq!(cfg.hosts[0].ip, Some(ip("192.0.2.50")));
    assert_eq!(
        cfg.hosts[0].ip6,
        Some("fd2e:6f44:5dd8:c956::50".parse().unwrap())
    );
    let refused = problems(&env(&[
        (
            "DHCP_RANGE",
            "fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8,64",
        ),
        ("DHCP_HOSTS", "52:54:00:aa:bb:01,[fd00:99::50]"),
    ]));
    assert!(
        refused
            .iter()
            .any(|l| l.starts_with("DHCP_HOSTS: ") && l.contains("subnet6")),
        "{refused:?}"
    );

    // IPv6 only: no v4 DHCP, and iPXE chains Ironic's script at the v6 address.
    let cfg = load(&env(&[
        ("PROVISIONING_IP", "fd2e:6f44:5dd8:c956::2/64"),
        ("PROVISIONING_INTERFACE", "prov0"),
        (
            "DHCP_RANGE",
            "fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8",
        ),
    ]))
    .unwrap();
    assert!(!cfg.dhcp.enabled);
    assert_eq!(cfg.subnets6.len(), 1);
    assert_eq!(
        cfg.boot.http_url.as_deref(),
        Some("http://[fd2e:6f44:5dd8:c956::2]:6180")
    );
    assert_eq!(cfg.boot.tftp_server, None);
}

/// The DaemonSet's member settings (deploy/kubernetes/overlays/daemonset/daemonset.yaml), as overrides.
fn member_overrides() -> Vec<(String, String)> {
    [
        ("owner.members", "ironic"),
        ("owner.self", "192.0.2.2:6189"),
        ("owner.member_http_url", "http://{host}:9690"),
        ("owner.member_secret_file", "/run/shardboot/member-secret"),
        ("owner.ironic.url", "https://ironic.example.svc"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// IrSO's database variables on Ironic's container (`databaseClientEnvVars`), beside a
/// range.
fn with_database(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut vars = env(&[
        ("DHCP_RANGE", "192.0.2.10,192.0.2.100,255.255.255.0"),
        ("IRONIC_USE_MARIADB", "true"),
        ("MARIADB_HOST", "mariadb.example.svc"),
        ("MARIADB_DATABASE", "ironic"),
    ]);
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    vars
}

#[test]
fn ironic_database_settings_give_members_a_database_of_their_own() {
    use crate::config::Dialect;
    let cfg = Config::from_ironic_env(&with_database(&[]), &host(), &member_overrides()).unwrap();
    let s = cfg.store.shared.expect("a shared store");
    assert_eq!(s.dialect, Dialect::MySql);
    assert_eq!(s.url, "mysql://mariadb.example.svc/shardboot");
    assert_eq!(
        s.credentials_dir.as_deref(),
        Some(std::path::Path::new("/auth/mariadb")),
        "the Secret where IrSO mounts it for Ironic"
    );
    assert_eq!(
        s.ca_file, None,
        "no CA mounted: as ironic-image, no TLS asked"
    );

    // The CA IrSO mounts from tlsCertificateName turns verified TLS on.
    let with_ca = HostFacts {
        database_ca_readable: true,
        ..host()
    };
    let cfg = Config::from_ironic_env(&with_database(&[]), &with_ca, &member_overrides()).unwrap();
    assert_eq!(
        cfg.store.shared.unwrap().ca_file.as_deref(),
        Some(std::path::Path::new("/certs/ca/mariadb/tls.crt"))
    );

    // A name of the operator's choosing; a port and a bare IPv6 address as written.
    for (host_var, name, url) in [
        (
            "db.example:3307",
            "boot_leases",
            "mysql://db.example:3307/boot_leases",
        ),
        ("fd00::5", "shardboot", "mysql://[fd00::5]/shardboot"),
        (
            "[fd00::5]:3307",
            "shardboot",
            "mysql://[fd00::5]:3307/shardboot",
        ),
    ] {
        let vars = with_database(&[("MARIADB_HOST", host_var), ("SHARDBOOT_DATABASE", name)]);
        let cfg = Config::from_ironic_env(&vars, &host(), &member_overrides()).unwrap();
        assert_eq!(cfg.store.shared.unwrap().url, url);
    }

    // ironic-image's default host when only IRONIC_USE_MARIADB is given.
    let mut vars = with_database(&[]);
    vars.remove("MARIADB_HOST");
    let cfg = load(&vars).unwrap();
    assert_eq!(cfg.store.shared.unwrap().url, "mysql://127.0.0.1/shardboot");

    // SHARDBOOT_STORE__* still apply on top (a Secret mounted elsewhere).
    let mut overrides = member_overrides();
    overrides.push(("store.credentials_dir".into(), "/etc/db".into()));
    let cfg = Config::from_ironic_env(&with_database(&[]), &host(), &overrides).unwrap();
    assert_eq!(
        cfg.store.shared.unwrap().credentials_dir.as_deref(),
        Some(std::path::Path::new("/etc/db"))
    );
}

#[test]
fn members_without_ironic_database_settings_are_refused() {
    let mut vars = with_database(&[]);
    for v in ["IRONIC_USE_MARIADB", "MARIADB_HOST", "MARIADB_DATABASE"] {
        vars.remove(v);
    }
    let Err(ConfigError::Invalid(issues)) =
        Config::from_ironic_env(&vars, &host(), &member_overrides())
    else {
        panic!("members without a shared store accepted");
    };
    assert!(
        issues
            .iter()
            .any(|i| i.key == "store.shared" && i.reason.contains("is required")),
        "{issues:?}"
    );
    // A single instance needs none.
    assert!(load(&vars).unwrap().store.shared.is_none());
}

#[test]
fn database_settings_shardboot_cannot_honour_are_named() {
    let refused = |extra: &[(&str, &str)]| problems(&with_database(extra));
    let secret = "hunter2-not-for-logs";
    let p = refused(&[("MARIADB_PASSWORD", secret), ("MARIADB_USER", "ironic")]);
    assert!(
        p.iter()
            .any(|l| l.starts_with("MARIADB_PASSWORD: ") && l.contains("/auth/mariadb")),
        "{p:?}"
    );
    assert!(p.iter().any(|l| l.starts_with("MARIADB_USER: ")), "{p:?}");
    assert!(
        !p.iter().any(|l| l.contains(secret)),
        "password shown: {p:?}"
    );

    // Ironic's own database, by shardboot's variable or by Ironic's taking the default.
    let p = refused(&[("SHARDBOOT_DATABASE", "Ironic")]);
    assert!(
        p.iter()
            .any(|l| l.starts_with("SHARDBOOT_DATABASE: ") && l.contains("Ironic's database")),
        "{p:?}"
    );
    let p = refused(&[("MARIADB_DATABASE", "shardboot")]);
    assert!(
        p.iter().any(|l| l.starts_with("MARIADB_DATABASE: ")),
        "{p:?}"
    );
    let p = refused(&[("SHARDBOOT_DATABASE", "shard-boot;drop")]);
    assert!(
        p.iter().any(|l| l.starts_with("SHARDBOOT_DATABASE: ")),
        "{p:?}"
    );
    // Credentials or a path smuggled into the host would change what the URL says.
    let p = refused(&[("MARIADB_HOST", "root:pw@db.example")]);
    assert!(p.iter().any(|l| l.starts_with("MARIADB_HOST: ")), "{p:?}");
    assert!(
        !p.iter().any(|l| l.contains("root:pw")),
        "value shown: {p:?}"
    );
    let p = refused(&[("IRONIC_USE_MARIADB", "yes")]);
    assert!(
        p.iter().any(|l| l.starts_with("IRONIC_USE_MARIADB: ")),
        "{p:?}"
    );

    // Database settings without IRONIC_USE_MARIADB would silently leave members
    // without their store.
    let mut vars = with_database(&[("SHARDBOOT_DATABASE", "leases")]);
    vars.insert("IRONIC_USE_MARIADB".into(), "false".into());
    let p = problems(&vars);
    for var in ["MARIADB_HOST", "SHARDBOOT_DATABASE"] {
        assert!(
            p.iter().any(
                |l| l.starts_with(&format!("{var}: ")) && l.contains("IRONIC_USE_MARIADB=true")
            ),
            "{var}: {p:?}"
        );
    }
}

#[test]
fn serve_waits_for_provisioning_ip_but_not_for_an_ironic_ip() {
    use std::time::Duration;
    let awaited = super::awaited_address;
    assert_eq!(
        awaited(&env(&[("PROVISIONING_IP", "172.22.0.3/24")])),
        Some(("172.22.0.3".parse().unwrap(), Duration::from_secs(60)))
    );
    assert_eq!(
        awaited(&env(&[
            ("PROVISIONING_IP", "fd2e:6f44:5dd8:c956::3"),
            ("IRONIC_IP_WAIT_TIMEOUT", "5")
        ])),
        Some((
            "fd2e:6f44:5dd8:c956::3".parse().unwrap(),
            Duration::from_secs(5)
        ))
    );
    // IRONIC_IP names the address outright; no PROVISIONING_IP, nothing to wait for.
    assert_eq!(
        awaited(&env(&[
            ("PROVISIONING_IP", "172.22.0.3"),
            ("IRONIC_IP", "172.22.0.3")
        ])),
        None
    );
    let only_interface: BTreeMap<String, String> =
        [("PROVISIONING_INTERFACE".to_string(), "eth1".to_string())].into();
    assert_eq!(awaited(&only_interface), None);
}
