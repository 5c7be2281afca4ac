//! Golden tests on DISCOVERs captured from real clients (fixtures/packets/): each decodes,
//! survives decode → encode → decode unchanged, and gets the boot answer its firmware needs.
//! And on the DHCPv6 Solicits of real firmware (`*-solicit.bin`, captured by
//! `tests/system/qemu_boot6.rs`): decoded by `dhcp6::wire`, answered by `Engine6` with the
//! boot URL and address the firmware booted with, the reply encoded and decoded again.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable};
use shardboot::config::{Config, DEFAULT_CONFIG_TOML};
use shardboot::dhcp::wire::decode_request;
use shardboot::dhcp::{Engine, Interface, Outcome, PacketContext, Responsibility};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/fixtures/packets/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A captured packet, the boot file its OFFER must carry and the option 60 it must echo.
type Case = (&'static str, Option<&'static str>, Option<&'static [u8]>);

const CASES: [Case; 5] = [
    ("dhclient-discover.bin", None, None),
    ("udhcpc-discover.bin", None, None),
    ("perfdhcp-discover.bin", None, None),
    // SeaBIOS → iPXE option ROM: user class iPXE from the first DISCOVER.
    (
        "ipxe-bios-discover.bin",
        Some("http://192.0.2.1:8080/boot.ipxe"),
        None,
    ),
    // OVMF's own PXE (x86-64 UEFI, arch 7).
    (
        "ovmf-pxe-x64-discover.bin",
        Some("snponly.efi"),
        Some(b"PXEClient"),
    ),
];

#[test]
fn captured_packets_round_trip() {
    for (name, _, _) in CASES {
        let raw = fixture(name);
        let first = decode_request(&raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let encoded = first.to_vec().unwrap();
        let second = Message::decode(&mut Decoder::new(&encoded)).unwrap();
        assert_eq!(first, second, "{name}");
    }
}

#[test]
fn captured_clients_get_the_boot_answer_for_their_firmware() {
    // perfdhcp's packet is relayed (giaddr 198.18.0.2): give it a subnet too.
    let relayed =
        "[[subnet]]\nnetwork = \"198.18.0.0/16\"\nranges = [\"198.18.1.0 - 198.18.1.100\"]\n";
    let cfg =
        Config::from_toml_with_overrides(&format!("{DEFAULT_CONFIG_TOML}{relayed}"), &[]).unwrap();
    let mut engine = Engine::new(&cfg, Vec::new(), 1_000_000);
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(192, 0, 2, 1),
        boot_server: false,
    };
    let ctx = PacketContext {
        interface: &iface,
        responsibility: Responsibility::Mine,
        policy: None,
        known: false,
        dnsmasq: Default::default(),
        source: std::net::Ipv4Addr::UNSPECIFIED,
        now: 1_000_000,
    };
    for (name, file, vendor) in CASES {
        let msg = decode_request(&fixture(name)).unwrap();
        let d = engine.handle_message(&msg, &ctx);
        assert!(
            matches!(d.outcome, Outcome::Offer(_)),
            "{name}: {:?}",
            d.outcome
        );
        let offer = d.reply.unwrap().message;
        let got_file = offer.fname_str().map(|f| f.unwrap().to_string());
        assert_eq!(got_file.as_deref(), file, "{name}");
        let got_vendor = match offer.opts().get(OptionCode::ClassIdentifier) {
            Some(DhcpOption::ClassIdentifier(v)) => Some(v.as_slice()),
            _ => None,
        };
        assert_eq!(got_vendor, vendor, "{name}");
        if file.is_some() {
            assert_eq!(
                offer.siaddr(),
                Ipv4Addr::new(192, 0, 2, 1),
                "{name}: next-server"
            );
        }
    }
}

/// A captured DHCPv6 Solicit (`tests/system/qemu_boot6.rs`, `SB_CAPTURE_DIR`): the link-local
/// address it came from, the option 59 URL its Advertise must carry and the vendor
/// class it must echo.
struct Case6 {
    file: &'static str,
    source: &'static str,
    url: &'static str,
    vendor: Option<&'static [u8]>,
}

const CASES6: [Case6; 4] = [
    // SeaBIOS → iPXE option ROM: user class iPXE, arch 0 (option 61 and vendor class).
    Case6 {
        file: "ipxe-bios-solicit.bin",
        source: "fe80::5054:ff:fe5e:601",
        url: "http://[fd00:1::1]:8080/boot.ipxe",
        vendor: None,
    },
    // The snponly.efi OVMF loaded over PXEv6: iPXE again, arch 7.
    Case6 {
        file: "ipxe-efi-solicit.bin",
        source: "fe80::5054:ff:fe5e:602",
        url: "http://[fd00:1::1]:8080/boot.ipxe",
        vendor: None,
    },
    // OVMF's PXE over IPv6: a tftp URL, and no PXEClient echo (edk2 would take the
    // Advertise for a BINL offer and ask a boot server on port 4011 first).
    Case6 {
        file: "ovmf-pxe6-x64-solicit.bin",
        source: "fe80::5054:ff:fe5e:602",
        url: "tftp://[fd00:1::1]/snponly.efi",
        vendor: None,
    },
    // OVMF's UEFI HTTP Boot over IPv6: an http URL, HTTPClient echoed.
    Case6 {
        file: "ovmf-http6-x64-solicit.bin",
        source: "fe80::5054:ff:fe5e:603",
        url: "http://[fd00:1::1]:8080/ipxe/snponly.efi",
        vendor: Some(b"HTTPClient"),
    },
];

mod v6 {
    use std::net::Ipv6Addr;

    use dhcproto::v6::{DhcpOption, IAAddr, Message, MessageType, OptionCode, IANA};
    use dhcproto::{Decodable, Decoder, Encodable, Encoder};
    use shardboot::config::{Config, DEFAULT_CONFIG_TOML};
    use shardboot::dhcp::Responsibility;
    use shardboot::dhcp6::client_mac::{client_mac, Clues};
    use shardboot::dhcp6::engine::{Arrival, Context6, Engine6, Outcome6};
    use shardboot::dhcp6::wire;

    use super::{fixture, CASES6};

    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
    const FIRST: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x100);

    fn engine() -> Engine6 {
        let subnet6 = "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::100 - fd00:1::1ff\"]\nlease_time = 3600\n";
        let cfg = Config::from_toml_with_overrides(&format!("{DEFAULT_CONFIG_TOML}{subnet6}"), &[])
            .unwrap();
        Engine6::new(&cfg, vec![0, 4, 1, 2, 3, 4], Vec::new(), 1_000_000)
    }

    /// Encodes `reply` and decodes it again (as the client will).
    fn on_the_wire(reply: &Message) -> Message {
        let mut out = Vec::new();
        reply.encode(&mut Encoder::new(&mut out)).unwrap();
        let again = Message::decode(&mut Decoder::new(&out)).unwrap();
        assert_eq!(again.msg_type(), reply.msg_type());
        again
    }

    fn unknown(m: &Message, code: OptionCode) -> Option<Vec<u8>> {
        match m.opts().get(code) {
            Some(DhcpOption::Unknown(u)) => Some(u.data().to_vec()),
            _ => None,
        }
    }

    /// Option 16's single item (the engine writes it by hand: enterprise, length, data).
    fn vendor_item(m: &Message) -> Option<Vec<u8>> {
        match m.opts().get(OptionCode::VendorClass)? {
            DhcpOption::VendorClass(v) => v.data.first().cloned(),
            DhcpOption::Unknown(u) => Some(u.data().get(6..)?.to_vec()),
            _ => None,
        }
    }

    /// The addresses of the reply's IA_NA `iaid`.
    fn ia_addresses(m: &Message, iaid: u32) -> Vec<Ipv6Addr> {
        m.opts()
            .get_all(OptionCode::IANA)
            .unwrap_or(&[])
            .iter()
            .filter_map(|o| match o {
                DhcpOption::IANA(ia) if ia.id == iaid => Some(ia),
                _ => None,
            })
            .flat_map(|ia| ia.opts.get_all(OptionCode::IAAddr).unwrap_or(&[]).iter())
            .filter_map(|o| match o {
                DhcpOption::IAAddr(a) if a.valid_life > 0 => Some(a.addr),
                _ => None,
            })
            .collect()
    }

    fn iaid(m: &Message) -> u32 {
        match m.opts().get(OptionCode::IANA) {
            Some(DhcpOption::IANA(ia)) => ia.id,
            other => panic!("no IA_NA: {other:?}"),
        }
    }

    /// What the firmware sends after the Advertise: its Solicit's options, as a Request
    /// naming the server and the advertised address (RFC 8415 §18.2.2).
    fn request_for(solicit: &Message, advertise: &Message, addr: Ipv6Addr) -> Message {
        let mut r = solicit.clone();
        r.set_msg_type(MessageType::Request);
        let o = r.opts_mut();
        o.insert(advertise.opts().get(OptionCode::ServerId).unwrap().clone());
        o.remove(OptionCode::IANA);
        let mut ia_opts = dhcproto::v6::DhcpOptions::new();
        ia_opts.insert(DhcpOption::IAAddr(IAAddr {
            addr,
            preferred_life: 0,
            valid_life: 0,
            opts: Default::default(),
        }));
        o.insert(DhcpOption::IANA(IANA {
            id: iaid(solicit),
            t1: 0,
            t2: 0,
            opts: ia_opts,
        }));
        r
    }

    #[test]
    fn captured_firmware_solicits_get_their_boot_url_and_an_address() {
        let addrs = [SERVER, "fe80::1".parse().unwrap()];
        for case in CASES6 {
            let name = case.file;
            let raw = fixture(name);
            let request = wire::decode(&raw).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert!(request.hops.is_empty(), "{name}");
            let solicit = request.message;
            assert_eq!(solicit.msg_type(), MessageType::Solicit, "{name}");
            let duid = match solicit.opts().get(OptionCode::ClientId) {
                Some(DhcpOption::ClientId(id)) => id.clone(),
                _ => panic!("{name}: no client id"),
            };
            // The MAC, as the shell finds it: these DUIDs are DUID-UUIDs, so from the
            // EUI-64 link-local source.
            let source: Ipv6Addr = case.source.parse().unwrap();
            let mac = client_mac(&Clues {
                option_79: None,
                source: Some(source),
                duid: Some(&duid),
            })
            .map(|(m, _)| m);
            let ctx = Context6 {
                arrival: Arrival {
                    interface: "br0",
                    addresses: &addrs,
                    destination: Ipv6Addr::UNSPECIFIED,
                },
                mac,
                responsibility: Responsibility::Mine,
                policy: None,
                now: 1_000_000,
            };
            assert!(mac.is_some(), "{name}");
            let mut e = engine();
            let d = e.handle_message(&solicit, &[], &ctx);
            assert_eq!(d.outcome, Outcome6::Advertise(1), "{name}");
            assert!(d.effects.is_empty(), "{name}: an Advertise stores nothing");
            let adv = on_the_wire(&d.reply.unwrap());
            assert_eq!(adv.xid(), solicit.xid(), "{name}");
            let url = unknown(&adv, OptionCode::OptBootfileUrl).map(String::from_utf8);
            assert_eq!(url, Some(Ok(case.url.to_string())), "{name}");
            assert_eq!(
                vendor_item(&adv).as_deref(),
                case.vendor,
                "{name}: option 16"
            );
            assert_eq!(ia_addresses(&adv, iaid(&solicit)), [FIRST], "{name}");
            // The Request for it binds the same address with the same URL, durably.
            let req = request_for(&solicit, &adv, FIRST);
            let d = e.handle_message(&req, &[], &ctx);
            assert_eq!(d.outcome, Outcome6::Bound(1), "{name}");
            assert_eq!(d.effects.len(), 1, "{name}");
            let reply = on_the_wire(&d.reply.unwrap());
            assert_eq!(reply.msg_type(), MessageType::Reply, "{name}");
            assert_eq!(ia_addresses(&reply, iaid(&solicit)), [FIRST], "{name}");
            let url = unknown(&reply, OptionCode::OptBootfileUrl).map(String::from_utf8);
            assert_eq!(url, Some(Ok(case.url.to_string())), "{name}");
        }
    }
}
