//! DHCP decode → engine → encode on arbitrary datagrams: `decode_request` must refuse
//! or accept without panicking, the engine must decide on anything it accepts, and
//! every reply must encode and decode again. A fresh engine per input keeps a crash
//! reproducible from its one input file.
#![no_main]

use std::net::Ipv4Addr;

use dhcproto::{Decodable, Decoder};
use libfuzzer_sys::fuzz_target;
use shardboot::config::{Config, DEFAULT_CONFIG_TOML};
use shardboot::dhcp::wire::decode_request;
use shardboot::dhcp::{Engine, Interface, PacketContext, Responsibility};

const NOW: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = decode_request(data) else {
        return;
    };
    let cfg = Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[]).expect("default config");
    let mut engine = Engine::new(&cfg, Vec::new(), NOW);
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(192, 0, 2, 1),
        boot_server: false,
    };
    // The xid picks the responsibility so both paths are reached from the same corpus.
    let responsibility = if msg.xid() & 1 == 0 {
        Responsibility::Mine
    } else {
        Responsibility::NotMine
    };
    let mut out = Vec::new();
    // Twice (a retransmission, with the first decision's state in place), then again
    // after everything it could have left behind has expired.
    for now in [NOW, NOW + 1, NOW + 100_000] {
        engine.handle_tick(now);
        let ctx = PacketContext {
            known: false,
            dnsmasq: Default::default(),
            interface: &iface,
            responsibility,
            policy: None,
            // As a client or relay would send it, so the RELEASE path is reached too.
            source: if msg.giaddr().is_unspecified() {
                msg.ciaddr()
            } else {
                msg.giaddr()
            },
            now,
        };
        let decision = engine.handle_message(&msg, &ctx);
        if let Some(reply) = decision.reply {
            reply.encode(&mut out).expect("a reply encodes");
            dhcproto::v4::Message::decode(&mut Decoder::new(&out)).expect("a reply decodes");
        }
    }
});
