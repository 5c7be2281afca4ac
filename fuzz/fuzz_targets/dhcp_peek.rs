//! The raw-packet pre-filter against the full path on arbitrary datagrams: a peek is
//! given only for what `decode_request` accepts, with the fields it decodes, and a
//! silence `Engine::handle_peeked` decides from it is the one `handle_message` decides
//! on the decoded request, leaving the same leases behind.
#![no_main]

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use libfuzzer_sys::fuzz_target;
use shardboot::config::{Config, DEFAULT_CONFIG_TOML};
use shardboot::dhcp::peek::{peek, PeekKind};
use shardboot::dhcp::wire::decode_request;
use shardboot::dhcp::{Engine, Interface, Outcome, PacketContext, Responsibility};
use shardboot::mac::MacAddr;

const NOW: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let Some(p) = peek(data) else {
        return;
    };
    let msg = decode_request(data).expect("a peeked datagram decodes");
    assert_eq!(MacAddr::from_chaddr(msg.chaddr()), Some(p.mac));
    assert_eq!(
        (msg.secs(), msg.giaddr(), msg.xid()),
        (p.secs, p.giaddr, p.xid)
    );
    let sid = match msg.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
        _ => None,
    };
    match p.kind {
        PeekKind::Discover => assert_eq!(msg.opts().msg_type(), Some(MessageType::Discover)),
        PeekKind::Selecting { server_id } => {
            assert_eq!(msg.opts().msg_type(), Some(MessageType::Request));
            assert_eq!(sid, Some(server_id));
        }
    }
    let cfg = Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[]).expect("default config");
    let iface = Interface {
        name: "br0".into(),
        addr: Ipv4Addr::new(192, 0, 2, 1),
        boot_server: false,
    };
    // The xid picks the responsibility; both engines first offered the client an address.
    let responsibility = if p.xid & 1 == 0 {
        Responsibility::Mine
    } else {
        Responsibility::NotMine
    };
    let ctx = |responsibility| PacketContext {
        known: false,
        interface: &iface,
        responsibility,
        policy: None,
        now: NOW,
        dnsmasq: Default::default(),
        source: if msg.giaddr().is_unspecified() {
            msg.ciaddr()
        } else {
            msg.giaddr()
        },
    };
    let z = Ipv4Addr::UNSPECIFIED;
    let mut offer = Message::new_with_id(1, z, z, z, z, &p.mac.0);
    offer
        .opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Discover));
    let mut engines = [(); 2].map(|_| {
        let mut e = Engine::new(&cfg, Vec::new(), NOW);
        e.handle_message(&offer, &ctx(Responsibility::Mine));
        e
    });
    let leases = |e: &Engine| format!("{:?}", e.leases().collect::<Vec<_>>());
    let before = leases(&engines[0]);
    let [fast, full] = &mut engines;
    match fast.handle_peeked(&p, &ctx(responsibility)) {
        Some(reason) => {
            let d = full.handle_message(&msg, &ctx(responsibility));
            assert_eq!(d.outcome, Outcome::Ignored(reason));
            assert!(d.reply.is_none() && d.effects.is_empty());
            assert_eq!(leases(fast), leases(full));
        }
        None => assert_eq!(leases(fast), before),
    }
});
