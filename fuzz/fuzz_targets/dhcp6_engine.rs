//! A DHCPv6 datagram through the whole pure path: check and decode (`dhcp6::wire`),
//! decide (`dhcp6::engine`, two links, rapid commit on one, a `[[host]] ip6`
//! reservation, `option6:` entries at every level and one link chosen by the relay's
//! Interface-Id), encode the reply. Nothing panics; every reply decodes again as the
//! message type it claims; every lease the engine would store round-trips through the
//! store's record format (what a packet puts on disk reads back exactly).
#![no_main]

use std::sync::OnceLock;

use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use libfuzzer_sys::fuzz_target;
use shardboot::dhcp::engine::Responsibility;
use shardboot::dhcp6::engine::{Arrival, Context6, Engine6};
use shardboot::mac::MacAddr;
use shardboot::store::{decode_lease6, encode_lease6, Lease6Effect};

const CONFIG: &str = r#"
state_dir = "/nonexistent"
[dhcp]
options = ["option6:ntp-server,[fd00:1::5],ntp.example", "option6:200,01:02"]
[[subnet6]]
network = "fd00:1::/64"
ranges = ["fd00:1::10 - fd00:1::40"]
exclude = ["fd00:1::20"]
dns = ["fd00:1::1"]
domain_search = ["prov.example"]
[[subnet6]]
network = "fd00:2::/64"
ranges = ["fd00:2::10 - fd00:2::12"]
rapid_commit = true
interface_id = "eth0"
options = ["tag:ipxe,option6:dns-server", "option6:sntp-server,[fd00:2::1]"]
[[host]]
mac = "52:54:00:00:00:02"
ip6 = "fd00:1::30"
hostname = "node-02"
tags = ["rack"]
options = ["tag:rack,option6:information-refresh-time,600"]
"#;

fn config() -> &'static shardboot::config::Config {
    static C: OnceLock<shardboot::config::Config> = OnceLock::new();
    C.get_or_init(|| shardboot::config::Config::from_toml_with_overrides(CONFIG, &[]).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(request) = shardboot::dhcp6::wire::decode(data) else {
        return;
    };
    let addresses = ["fd00:1::1".parse().unwrap()];
    let mut engine = Engine6::new(config(), vec![0, 4, 1, 2, 3, 4], Vec::new(), 1_000);
    for (responsibility, now) in [
        (Responsibility::Mine, 1_000),
        (Responsibility::NotMine, 1_001),
    ] {
        let ctx = Context6 {
            arrival: Arrival {
                interface: "prov0",
                addresses: &addresses,
                destination: "ff02::1:2".parse().unwrap(),
            },
            // Half the inputs come from the machine `[[host]]` reserves fd00:1::30 for.
            mac: Some(MacAddr([0x52, 0x54, 0, 0, 0, 1 + (data.len() % 2) as u8])),
            responsibility,
            policy: None,
            now,
        };
        let d = engine.handle_message(&request.message, &request.hops, &ctx);
        for e in &d.effects {
            if let Lease6Effect::Put(l) = e {
                let back = decode_lease6(&l.ip.octets(), &encode_lease6(l))
                    .expect("a stored lease reads back");
                assert_eq!(&back, l);
            }
        }
        if let Some(reply) = d.reply {
            let mut bytes = Vec::new();
            reply
                .encode(&mut Encoder::new(&mut bytes))
                .expect("a reply encodes");
            let back =
                dhcproto::v6::Message::decode(&mut Decoder::new(&bytes)).expect("a reply decodes");
            assert_eq!(back.msg_type(), reply.msg_type());
            assert_eq!(back.xid(), request.message.xid());
        }
    }
    engine.handle_tick(1_000_000);
});
