//! The peek against the full path: a peek is given only for what `decode_request`
//! accepts, with the values dhcproto decodes, and a silence decided from it is the one
//! `handle_message` decides, with the same state left behind.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
use proptest::prelude::*;

use super::*;
use crate::config::{Config, DEFAULT_CONFIG_TOML};
use crate::dhcp::engine::{
    Engine, IgnoreReason, Interface, Outcome, PacketContext, Responsibility,
};
use crate::dhcp::host_policy::{HostPolicy, PolicySource};
use crate::dhcp::wire::decode_request;

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const OTHER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const T0: u64 = 1_000_000;

/// A BOOTREQUEST header for `mac` and the magic cookie, then `opts` as given.
fn packet(mac: [u8; 6], secs: u16, giaddr: [u8; 4], opts: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN];
    b[..3].copy_from_slice(&[1, 1, 6]);
    b[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    b[8..10].copy_from_slice(&secs.to_be_bytes());
    b[24..28].copy_from_slice(&giaddr);
    b[28..34].copy_from_slice(&mac);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(opts);
    b
}

const MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];

#[test]
fn a_pxe_discover_and_a_selecting_request_are_peeked() {
    // What a PXE ROM sends: type, max size, PRL, machine id, architecture, NIC, class.
    let mut opts = vec![53, 1, 1, 57, 2, 5, 192, 55, 4, 1, 3, 66, 67, 97, 3, 0, 1, 2];
    opts.extend_from_slice(&[93, 2, 0, 7, 94, 3, 1, 3, 0, 60, 3, b'P', b'X', b'E', 255]);
    let p = peek(&packet(MAC, 4, [10, 0, 0, 1], &opts)).unwrap();
    assert_eq!(p.kind, PeekKind::Discover);
    assert_eq!(
        (p.mac, p.secs, p.giaddr, p.xid),
        (MacAddr(MAC), 4, Ipv4Addr::new(10, 0, 0, 1), 0x1234_5678)
    );
    let opts = [
        53, 1, 3, 50, 4, 192, 0, 2, 9, 54, 4, 192, 0, 2, 2, 12, 2, b'n', b'1', 255,
    ];
    assert_eq!(
        peek(&packet(MAC, 0, [0; 4], &opts)).unwrap().kind,
        PeekKind::Selecting { server_id: OTHER }
    );
}

#[test]
fn what_only_a_full_decode_can_judge_is_not_peeked() {
    for opts in [
        // INIT-REBOOT (no server id), RELEASE, INFORM: the lease table decides.
        &[53, 1, 3, 50, 4, 192, 0, 2, 9, 255][..],
        &[53, 1, 7, 255][..],
        &[53, 1, 8, 255][..],
        // No type, an unknown one, two.
        &[255][..],
        &[53, 1, 42, 255][..],
        &[53, 1, 1, 53, 1, 1, 255][..],
        // Any repeated option (RFC 3396 or not).
        &[53, 1, 1, 12, 1, b'a', 12, 1, b'b', 255][..],
        // A value dhcproto refuses, so it would lose the options after it.
        &[53, 1, 1, 12, 1, 0xff, 255][..],
        &[53, 1, 1, 1, 3, 255, 255, 0, 255][..],
        &[53, 1, 3, 54, 3, 192, 0, 2, 255][..],
        // Code 37 decodes as option 23: the two would collide.
        &[53, 1, 1, 37, 1, 64, 255][..],
        // A length past the end; a lone code.
        &[53, 1, 1, 12, 9, b'a'][..],
        &[53, 1, 1, 12][..],
        // Sub-options of 82 that do not tile.
        &[53, 1, 1, 82, 4, 1, 200, b'a', b'b', 255][..],
    ] {
        assert_eq!(peek(&packet(MAC, 0, [0; 4], opts)), None, "{opts:?}");
    }
    let good = packet(MAC, 0, [0; 4], &[53, 1, 1, 255]);
    assert!(peek(&good).is_some());
    for (at, byte) in [(0, 2), (1, 6), (2, 16), (237, 0)] {
        let mut bad = good.clone();
        bad[at] = byte;
        assert_eq!(peek(&bad), None, "byte {at}");
    }
    assert_eq!(peek(&good[..239]), None);
    let mut long = good.clone();
    long.resize(MAX_REQUEST_LEN + 1, 0);
    assert_eq!(peek(&long), None);
}

// --- Generated packets ---------------------------------------------------------------

/// Codes the peek treats specially or that dhcproto reads strictly, and any code.
fn code() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(vec![
            1u8, 3, 12, 15, 23, 37, 43, 50, 51, 53, 54, 55, 57, 60, 61, 77, 80, 81, 82, 93,
            94, 97, 118, 152, 175,
        ]),
        1 => any::<u8>(),
    ]
}

/// One option instance: a code, and a value that is often of the length it wants.
fn option() -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..6),
        prop::collection::vec(any::<u8>(), 0..40),
        "[a-z0-9.-]{0,12}".prop_map(String::into_bytes),
        // Sub-options: circuit id, link selection.
        Just(vec![1, 2, b'e', b'0', 5, 4, 192, 0, 2, 0]),
    ];
    (code(), value).prop_map(|(code, value)| {
        let value = match code {
            53 => vec![*value.first().unwrap_or(&1) % 9],
            _ => value,
        };
        let mut o = vec![code, value.len() as u8];
        o.extend(value);
        o
    })
}

/// A request: usually well-formed around a message type, with damage now and then.
fn raw_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![1u8, 3, 3, 7, 8]),
        prop::option::of(prop::sample::select(vec![SERVER, OTHER])),
        prop::collection::vec(option(), 0..6),
        (any::<[u8; 6]>(), any::<u16>(), any::<bool>()),
        (any::<bool>(), any::<u8>(), any::<(u16, u8)>()),
    )
        .prop_map(
            |(kind, sid, extra, (mac, secs, relayed), (end, pad, damage))| {
                let mut opts = vec![53, 1, kind];
                if let Some(s) = sid {
                    opts.extend_from_slice(&[54, 4]);
                    opts.extend_from_slice(&s.octets());
                }
                for (i, o) in extra.into_iter().enumerate() {
                    if usize::from(pad) % 5 == i {
                        opts.push(0);
                    }
                    opts.extend(o);
                }
                if end {
                    opts.push(255);
                }
                let giaddr = if relayed { [10, 0, 0, 1] } else { [0; 4] };
                let mut b = packet(mac, secs, giaddr, &opts);
                // Now and then one byte anywhere, or a cut.
                match damage.1 % 8 {
                    0 => {
                        let at = usize::from(damage.0) % b.len();
                        b[at] = damage.1;
                    }
                    1 => b.truncate(usize::from(damage.0) % (b.len() + 1)),
                    _ => {}
                }
                b
            },
        )
}

/// What a peek claims, checked against the decoded message.
fn agrees_with_decode(b: &[u8]) -> Result<(), TestCaseError> {
    let Some(p) = peek(b) else { return Ok(()) };
    let m = decode_request(b);
    prop_assert!(m.is_ok(), "peeked but refused: {m:?}");
    let m = m.unwrap();
    prop_assert_eq!(MacAddr::from_chaddr(m.chaddr()), Some(p.mac));
    prop_assert_eq!((m.secs(), m.giaddr(), m.xid()), (p.secs, p.giaddr, p.xid));
    let sid = match m.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
        _ => None,
    };
    match p.kind {
        PeekKind::Discover => prop_assert_eq!(m.opts().msg_type(), Some(MessageType::Discover)),
        PeekKind::Selecting { server_id } => {
            prop_assert_eq!(m.opts().msg_type(), Some(MessageType::Request));
            prop_assert_eq!(sid, Some(server_id));
        }
    }
    Ok(())
}

fn config(extra: &str) -> Config {
    let text = format!(
        "{DEFAULT_CONFIG_TOML}\n{extra}\n[[subnet]]\nnetwork = \"198.51.100.0/24\"\nranges = [\"198.51.100.10 - 198.51.100.12\"]\n"
    );
    Config::from_toml_with_overrides(&text, &[]).unwrap()
}

/// Two engines with the same past: offers and a lease for the first few MACs.
fn engines(known_only: bool, proxy: bool) -> (Engine, Engine) {
    let hosts = "[[host]]\nmac = \"52:54:00:00:00:02\"\ndeny = true\n\
                 [[host]]\nmac = \"52:54:00:00:00:03\"\nip = \"192.0.2.30\"\n";
    let mut cfg = config(hosts);
    cfg.dhcp.known_only = known_only;
    cfg.dhcp.proxy = proxy;
    let i = Interface {
        name: "br0".into(),
        addr: SERVER,
        boot_server: false,
    };
    let make = || {
        let mut e = Engine::new(&cfg, vec![], T0);
        for n in 1..=4u8 {
            let mac = [0x52, 0x54, 0, 0, 0, n];
            let discover = decode_request(&packet(mac, 0, [0; 4], &[53, 1, 1, 255])).unwrap();
            let mut c = context(&i, Responsibility::Mine, None);
            c.known = true;
            e.handle_message(&discover, &c);
        }
        e
    };
    (make(), make())
}

fn context(
    i: &Interface,
    responsibility: Responsibility,
    policy: Option<(HostPolicy, PolicySource)>,
) -> PacketContext<'_> {
    PacketContext {
        interface: i,
        responsibility,
        policy,
        known: false,
        source: std::net::Ipv4Addr::UNSPECIFIED,
        now: T0 + 1,
        dnsmasq: Default::default(),
    }
}

fn leases(e: &Engine) -> Vec<String> {
    let mut v: Vec<String> = e.leases().map(|l| format!("{l:?}")).collect();
    v.sort();
    v
}

/// A peekable request from one of a few MACs, some with offers, one denied, one
/// reserved, for this server or another.
fn member_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        1..=6u8,
        any::<bool>(),
        prop::sample::select(vec![SERVER, OTHER]),
        any::<u16>(),
        prop::collection::vec(option(), 0..3),
    )
        .prop_map(|(n, discover, sid, secs, extra)| {
            let mut opts = if discover {
                vec![53, 1, 1]
            } else {
                let mut o = vec![53, 1, 3, 54, 4];
                o.extend_from_slice(&sid.octets());
                o.extend_from_slice(&[50, 4, 198, 51, 100, 10]);
                o
            };
            extra.into_iter().for_each(|o| opts.extend(o));
            opts.push(255);
            packet([0x52, 0x54, 0, 0, 0, n], secs, [0; 4], &opts)
        })
}

fn policy() -> impl Strategy<Value = Option<(HostPolicy, PolicySource)>> {
    prop::option::of((
        prop::sample::select(vec![HostPolicy::Allow, HostPolicy::Deny]),
        prop::sample::select(vec![
            PolicySource::Api,
            PolicySource::HostsDir,
            PolicySource::HostsDirUnknown,
        ]),
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn a_peek_is_given_only_for_what_decodes_and_says_what_it_decodes_to(b in raw_packet()) {
        agrees_with_decode(&b)?;
    }

    #[test]
    fn arbitrary_bytes_peek_like_they_decode(b in prop::collection::vec(any::<u8>(), 0..400)) {
        agrees_with_decode(&b)?;
        let mut p = packet(MAC, 0, [0; 4], &[]);
        p.extend_from_slice(&b);
        agrees_with_decode(&p)?;
    }

    /// The property the pre-filter stands on: a silence decided from the peek is the
    /// full path's, for the same reason and with the same state left behind; and when
    /// the peek cannot decide, it changed nothing.
    #[test]
    fn a_silence_from_the_peek_is_the_full_paths(
        b in member_packet(),
        not_mine in any::<bool>(),
        policy in policy(),
        known_only in any::<bool>(),
        proxy in any::<bool>(),
    ) {
        let Some(p) = peek(&b) else { return Ok(()) };
        let msg = decode_request(&b).unwrap();
        let i = Interface { name: "br0".into(), addr: SERVER, boot_server: false };
        let r = if not_mine { Responsibility::NotMine } else { Responsibility::Mine };
        let c = context(&i, r, policy);
        let (mut fast, mut full) = engines(known_only, proxy);
        let before = leases(&fast);
        let peeked = fast.handle_peeked(&p, &c);
        match peeked {
            Some(reason) => {
                let d = full.handle_message(&msg, &c);
                prop_assert_eq!(d.outcome, Outcome::Ignored(reason));
                prop_assert!(d.reply.is_none() && d.effects.is_empty());
                prop_assert_eq!(leases(&fast), leases(&full));
            }
            None => prop_assert_eq!(leases(&fast), before),
        }
    }
}

#[test]
fn another_servers_request_releases_our_offer_like_the_full_path() {
    let (mut fast, mut full) = engines(false, false);
    let i = Interface {
        name: "br0".into(),
        addr: SERVER,
        boot_server: false,
    };
    let c = context(&i, Responsibility::NotMine, None);
    let mut opts = vec![53, 1, 3, 54, 4];
    opts.extend_from_slice(&OTHER.octets());
    opts.push(255);
    let b = packet(MAC, 0, [0; 4], &opts);
    let before = leases(&fast);
    assert_eq!(
        fast.handle_peeked(&peek(&b).unwrap(), &c),
        Some(IgnoreReason::OtherServer)
    );
    full.handle_message(&decode_request(&b).unwrap(), &c);
    assert_ne!(leases(&fast), before, "the offer to {MAC:?} is released");
    assert_eq!(leases(&fast), leases(&full));
}

#[test]
fn a_proxy_dhcp_decides_on_the_whole_message() {
    // ProxyDHCP answers PXE firmware whoever is responsible: no silence from the peek.
    let (mut fast, _) = engines(false, true);
    let i = Interface {
        name: "br0".into(),
        addr: SERVER,
        boot_server: false,
    };
    let c = context(&i, Responsibility::NotMine, None);
    let pxe = [
        53, 1, 1, 60, 9, b'P', b'X', b'E', b'C', b'l', b'i', b'e', b'n', b't', 255,
    ];
    let p = peek(&packet(MAC, 0, [0; 4], &pxe)).unwrap();
    assert_eq!(fast.handle_peeked(&p, &c), None);
}

#[test]
fn captured_client_discovers_are_peeked() {
    // fixtures/packets: what real clients sent. Those the peek cannot vouch for are
    // decoded in full, as before; these must not be among them.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/packets");
    for name in [
        "dhclient-discover.bin",
        "ipxe-bios-discover.bin",
        "ovmf-pxe-x64-discover.bin",
        "perfdhcp-discover.bin",
        "udhcpc-discover.bin",
    ] {
        let b = std::fs::read(dir.join(name)).unwrap();
        let p = peek(&b);
        assert_eq!(p.map(|p| p.kind), Some(PeekKind::Discover), "{name}");
        assert!(decode_request(&b).is_ok(), "{name}");
    }
}
