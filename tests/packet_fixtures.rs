//! Golden tests on DISCOVERs captured from real clients (fixtures/packets/): each decodes,
//! survives decode → encode → decode unchanged, and gets the boot answer its firmware needs.

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
