//! Decision-table tests for the engine: each drives real dhcproto messages through
//! `handle_message` and checks the reply, its destination and the lease effects.

use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;

use dhcproto::v4::{Architecture, DhcpOption, Flags, Message, MessageType, OptionCode};

use super::reply::Destination;
use super::*;
use crate::config::{Config, DEFAULT_CONFIG_TOML};
use crate::mac::MacAddr;
use crate::owner::shares::Split;
use crate::store::{LeaseEffect, LeaseState};

#[path = "probe_tests.rs"]
mod probe_tests;

#[path = "conformance_tests.rs"]
mod conformance_tests;

#[path = "flood_tests.rs"]
mod flood_tests;

#[path = "inputs_tests.rs"]
mod inputs_tests;

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const T0: u64 = 1_000_000;

/// Several members need a shared lease store (`store.shared`); the engine never opens
/// it, so the URL names no server.
pub(super) const SHARED_STORE: &str = "[store]\nshared = \"postgres://db.test/shardboot\"\n";

fn config(extra: &str) -> Config {
    let text = format!(
        "{DEFAULT_CONFIG_TOML}\n{extra}\n{SHARED_STORE}[[subnet]]\nnetwork = \"198.51.100.0/24\"\nranges = [\"198.51.100.10 - 198.51.100.12\"]\n"
    );
    Config::from_toml_with_overrides(&text, &[]).unwrap()
}

fn iface() -> Interface {
    Interface {
        name: "br0".into(),
        addr: SERVER,
        boot_server: false,
    }
}

fn ctx(i: &Interface, now: u64) -> PacketContext<'_> {
    PacketContext {
        known: false,
        dnsmasq: Default::default(),
        interface: i,
        responsibility: Responsibility::Mine,
        policy: None,
        source: std::net::Ipv4Addr::UNSPECIFIED,
        now,
    }
}

/// `ctx` for a datagram whose IP source address is `source`.
fn ctx_from(i: &Interface, now: u64, source: Ipv4Addr) -> PacketContext<'_> {
    PacketContext {
        source,
        ..ctx(i, now)
    }
}

fn mac(n: u8) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0, 0, n])
}

fn msg(kind: MessageType, m: MacAddr) -> Message {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut msg = Message::new_with_id(0x1234, z, z, z, z, &m.0);
    msg.opts_mut().insert(DhcpOption::MessageType(kind));
    msg
}

fn with(mut m: Message, opt: DhcpOption) -> Message {
    m.opts_mut().insert(opt);
    m
}

/// `msg` as firmware sends it: vendor class (option 60) and architecture (option 93).
fn firmware(m: Message, class: &str, arch: u16) -> Message {
    with(
        with(m, DhcpOption::ClassIdentifier(class.as_bytes().to_vec())),
        DhcpOption::ClientSystemArchitecture(Architecture(arch)),
    )
}

fn request_selecting(m: MacAddr, ip: Ipv4Addr) -> Message {
    let r = with(
        msg(MessageType::Request, m),
        DhcpOption::ServerIdentifier(SERVER),
    );
    with(r, DhcpOption::RequestedIpAddress(ip))
}

fn offered(d: &Decision) -> Ipv4Addr {
    match d.outcome {
        Outcome::Offer(ip) => ip,
        o => panic!("expected offer, got {o:?}"),
    }
}

fn kind(d: &Decision) -> Option<MessageType> {
    d.reply.as_ref().and_then(|r| r.message.opts().msg_type())
}

/// DISCOVER → OFFER → REQUEST → ACK for one client; returns the bound address.
fn bind(e: &mut Engine, i: &Interface, m: MacAddr, now: u64) -> Ipv4Addr {
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, m), &ctx(i, now)));
    let d = e.handle_message(&request_selecting(m, ip), &ctx(i, now));
    assert_eq!(d.outcome, Outcome::Ack(ip));
    ip
}

#[test]
fn four_way_exchange_binds_and_persists_only_the_ack() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let d = e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0));
    let ip = offered(&d);
    assert!(d.effects.is_empty(), "offers are not persisted");
    assert_eq!(ip, Ipv4Addr::new(192, 0, 2, 100));
    let reply = &d.reply.as_ref().unwrap().message;
    assert_eq!(reply.yiaddr(), ip);
    assert_eq!(
        reply.opts().get(OptionCode::ServerIdentifier),
        Some(&DhcpOption::ServerIdentifier(SERVER))
    );
    assert_eq!(
        reply.opts().get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(3600))
    );
    assert_eq!(
        reply.opts().get(OptionCode::Renewal),
        Some(&DhcpOption::Renewal(1800))
    );
    assert_eq!(
        reply.opts().get(OptionCode::SubnetMask),
        Some(&DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)))
    );
    // No broadcast flag, no ciaddr: unicast to yiaddr at the client's MAC (RFC 2131 §4.1).
    assert_eq!(
        d.reply.as_ref().unwrap().destination,
        Destination::UnicastNew(ip, mac(1).0)
    );
    // With the broadcast flag: broadcast.
    let mut b = msg(MessageType::Discover, mac(1));
    b.set_flags(Flags::default().set_broadcast());
    assert_eq!(
        e.handle_message(&b, &ctx(&i, T0))
            .reply
            .unwrap()
            .destination,
        Destination::Broadcast
    );

    let d = e.handle_message(&request_selecting(mac(1), ip), &ctx(&i, T0 + 1));
    assert_eq!(kind(&d), Some(MessageType::Ack));
    let [LeaseEffect::Put(l)] = d.effects.as_slice() else {
        panic!("{:?}", d.effects)
    };
    assert_eq!(
        (l.ip, l.mac, l.state, l.expires),
        (ip, mac(1), LeaseState::Bound, T0 + 1 + 3600)
    );
}

#[test]
fn distinct_clients_get_distinct_addresses_and_a_client_keeps_its_own() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let a = bind(&mut e, &i, mac(1), T0);
    let b = bind(&mut e, &i, mac(2), T0);
    assert_ne!(a, b);
    // A rebooting client that DISCOVERs again is offered its current address.
    assert_eq!(
        offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0 + 5))),
        a
    );
}

#[test]
fn exhausted_pool_stays_silent_and_expiry_frees_addresses() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let relayed = |m: MacAddr| {
        let mut d = msg(MessageType::Discover, m);
        d.set_giaddr(Ipv4Addr::new(198, 51, 100, 1));
        d
    };
    for n in 1..=3 {
        let ip = offered(&e.handle_message(&relayed(mac(n)), &ctx(&i, T0)));
        assert!(ip >= Ipv4Addr::new(198, 51, 100, 10) && ip <= Ipv4Addr::new(198, 51, 100, 12));
    }
    let d = e.handle_message(&relayed(mac(4)), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::PoolExhausted));
    // Offers are held 60 s; after that the addresses come back.
    assert_eq!(e.handle_tick(T0 + 61), 3);
    offered(&e.handle_message(&relayed(mac(4)), &ctx(&i, T0 + 61)));
}

#[test]
fn relayed_requests_choose_the_subnet_by_giaddr_and_reply_to_the_relay() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let mut d = msg(MessageType::Discover, mac(1));
    d.set_giaddr(Ipv4Addr::new(198, 51, 100, 1));
    d.set_hops(1);
    let out = e.handle_message(&d, &ctx(&i, T0));
    let reply = out.reply.unwrap();
    assert_eq!(
        reply.destination,
        Destination::Relay(Ipv4Addr::new(198, 51, 100, 1))
    );
    assert_eq!(reply.message.giaddr(), Ipv4Addr::new(198, 51, 100, 1));
    assert_eq!(reply.message.yiaddr(), Ipv4Addr::new(198, 51, 100, 10));
    // Unknown relay network: silence.
    d.set_giaddr(Ipv4Addr::new(203, 0, 113, 1));
    assert_eq!(
        e.handle_message(&d, &ctx(&i, T0)).outcome,
        Outcome::Ignored(IgnoreReason::NoSubnet)
    );
}

#[test]
fn a_relay_agents_link_selection_picks_the_subnet_and_option_82_is_echoed() {
    use dhcproto::v4::relay::{RelayAgentInformation, RelayInfo};
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let mut info = RelayAgentInformation::default();
    info.insert(RelayInfo::AgentCircuitId(b"rack4-port7".to_vec()));
    info.insert(RelayInfo::LinkSelection(Ipv4Addr::new(198, 51, 100, 0)));
    // The relay sits on a network no subnet covers; link selection names the client's.
    let mut d = with(
        msg(MessageType::Discover, mac(1)),
        DhcpOption::RelayAgentInformation(info.clone()),
    );
    d.set_giaddr(Ipv4Addr::new(203, 0, 113, 1));
    let reply = e.handle_message(&d, &ctx(&i, T0)).reply.unwrap();
    assert_eq!(reply.message.yiaddr(), Ipv4Addr::new(198, 51, 100, 10));
    assert_eq!(
        reply.destination,
        Destination::Relay(Ipv4Addr::new(203, 0, 113, 1))
    );
    // RFC 3046 §2.2: the server echoes the relay agent information unchanged.
    assert_eq!(
        reply.message.opts().get(OptionCode::RelayAgentInformation),
        Some(&DhcpOption::RelayAgentInformation(info.clone()))
    );
    // The same option from a client that came through no relay is not trusted: it is
    // served from the receiving interface's subnet.
    let direct = with(
        msg(MessageType::Discover, mac(2)),
        DhcpOption::RelayAgentInformation(info),
    );
    let yiaddr = offered(&e.handle_message(&direct, &ctx(&i, T0)));
    assert!(Ipv4Net::from_str("192.0.2.0/24").unwrap().contains(&yiaddr));
}

#[test]
fn an_ack_carries_the_subnets_options_and_a_hosts_overrides() {
    let extra = r#"
[[host]]
mac = "52:54:00:00:00:02"
router = "192.0.2.254"
dns = ["192.0.2.53"]
lease_time = 600
"#;
    let text = format!(
        "{DEFAULT_CONFIG_TOML}\n{extra}\n[[subnet]]\nnetwork = \"198.51.100.0/24\"\nranges = [\"198.51.100.10 - 198.51.100.12\"]\n"
    );
    let set = |k: &str, v: &str| (k.to_string(), v.to_string());
    let cfg = Config::from_toml_with_overrides(
        &text,
        &[
            set("subnet.0.mtu", "1400"),
            set("subnet.0.ntp", r#"["192.0.2.123"]"#),
            set("subnet.0.renewal_time", "1000"),
            set("subnet.0.rebinding_time", "3000"),
        ],
    )
    .unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    let uuid = vec![
        0, 0x44, 0x45, 0x4c, 0x4c, 0x10, 0, 0x10, 0x4c, 0x80, 0x31, 0, 0, 0, 0, 0, 1,
    ];
    let pxe = |m: MacAddr, kind: MessageType| {
        firmware(
            with(
                msg(kind, m),
                DhcpOption::ClientMachineIdentifier(uuid.clone()),
            ),
            "PXEClient:Arch:00000:UNDI:002001",
            0,
        )
    };
    let ip = offered(&e.handle_message(&pxe(mac(1), MessageType::Discover), &ctx(&i, T0)));
    let req = with(
        with(
            pxe(mac(1), MessageType::Request),
            DhcpOption::ServerIdentifier(SERVER),
        ),
        DhcpOption::RequestedIpAddress(ip),
    );
    let d = e.handle_message(&req, &ctx(&i, T0));
    let opts = d.reply.as_ref().unwrap().message.opts().clone();
    let want = [
        DhcpOption::AddressLeaseTime(3600),
        DhcpOption::Renewal(1000),
        DhcpOption::Rebinding(3000),
        DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
        DhcpOption::Router(vec![SERVER]),
        DhcpOption::DomainNameServer(vec![SERVER]),
        DhcpOption::DomainName("shardboot.test".into()),
        DhcpOption::InterfaceMtu(1400),
        DhcpOption::NtpServers(vec![Ipv4Addr::new(192, 0, 2, 123)]),
        DhcpOption::ServerIdentifier(SERVER),
        DhcpOption::TFTPServerName(b"192.0.2.1".to_vec()),
        DhcpOption::BootfileName(b"undionly.kpxe".to_vec()),
    ];
    for o in want {
        assert_eq!(opts.get(OptionCode::from(&o)), Some(&o));
    }
    // Option 97 is kept with the lease (Ironic matches machines by it).
    let LeaseEffect::Put(l) = &d.effects[0] else {
        panic!()
    };
    assert_eq!(l.machine_id.as_deref(), Some(&uuid[..]));
    // A [[host]] entry's router, DNS and lease time replace the subnet's.
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0)));
    let d = e.handle_message(&request_selecting(mac(2), ip), &ctx(&i, T0));
    let opts = d.reply.unwrap().message.opts().clone();
    for o in [
        DhcpOption::AddressLeaseTime(600),
        DhcpOption::Router(vec![Ipv4Addr::new(192, 0, 2, 254)]),
        DhcpOption::DomainNameServer(vec![Ipv4Addr::new(192, 0, 2, 53)]),
    ] {
        assert_eq!(opts.get(OptionCode::from(&o)), Some(&o));
    }
}

#[test]
fn a_boot_url_too_long_for_the_file_field_goes_in_option_67_alone() {
    // 120 characters: valid for boot.http_url (at most 127), too long once the script
    // name is added.
    let base = format!(
        "http://{}.{}.example.org:8080",
        "a".repeat(60),
        "b".repeat(35)
    );
    assert_eq!(base.len(), 120);
    let cfg = Config::from_toml_with_overrides(
        DEFAULT_CONFIG_TOML,
        &[("boot.http_url".to_string(), base.clone())],
    )
    .unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    let ipxe = with(
        msg(MessageType::Discover, mac(1)),
        DhcpOption::UserClass(b"iPXE".to_vec()),
    );
    let r = e.handle_message(&ipxe, &ctx(&i, T0)).reply.unwrap().message;
    let url = format!("{base}/boot.ipxe");
    assert!(url.len() > 128);
    assert_eq!(
        r.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(url.into_bytes()))
    );
    assert_eq!(r.fname(), None);
    let mut buf = Vec::new();
    crate::dhcp::wire::encode_reply(&r, &mut buf).unwrap();
}

#[test]
fn request_for_another_server_drops_our_offer() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0)));
    let mut r = request_selecting(mac(1), ip);
    r.opts_mut()
        .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 2)));
    let d = e.handle_message(&r, &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::OtherServer));
    assert!(e.lease(ip).is_none(), "offer released");
    assert_eq!(e.pool_usage()[0].in_use, 0, "address back in the pool");
}

#[test]
fn init_reboot_renew_and_rebind() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = bind(&mut e, &i, mac(1), T0);
    // INIT-REBOOT with our address: ACK.
    let ir = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(ip),
    );
    assert_eq!(
        e.handle_message(&ir, &ctx(&i, T0 + 10)).outcome,
        Outcome::Ack(ip)
    );
    // INIT-REBOOT on the wrong network: NAK, broadcast.
    let wrong = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 9, 9)),
    );
    let d = e.handle_message(&wrong, &ctx(&i, T0 + 10));
    assert_eq!(kind(&d), Some(MessageType::Nak));
    assert_eq!(d.reply.unwrap().destination, Destination::Broadcast);
    // INIT-REBOOT for another free address of the range while this server holds the
    // client's lease elsewhere: the client's notion is wrong, NAK (RFC 2131 §4.3.2).
    let elsewhere = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(192, 0, 2, 150)),
    );
    assert_ne!(ip, Ipv4Addr::new(192, 0, 2, 150));
    assert_eq!(
        kind(&e.handle_message(&elsewhere, &ctx(&i, T0 + 10))),
        Some(MessageType::Nak)
    );
    // INIT-REBOOT for an address we have no record of: silent (RFC 2131 §4.3.2).
    let unknown = with(
        msg(MessageType::Request, mac(9)),
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(192, 0, 2, 150)),
    );
    assert_eq!(
        e.handle_message(&unknown, &ctx(&i, T0)).outcome,
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    // RENEWING: unicast to ciaddr, lease extended.
    let mut renew = msg(MessageType::Request, mac(1));
    renew.set_ciaddr(ip);
    let l = acked_to_ciaddr(&e.handle_message(&renew, &ctx(&i, T0 + 1800)), ip);
    assert_eq!((l.starts, l.expires), (T0, T0 + 1800 + 3600));
    // REBINDING (past T2, broadcast, no server identifier): the holder of the record
    // extends the lease and answers to ciaddr; a server without one stays silent.
    let mut rebind = msg(MessageType::Request, mac(1));
    rebind.set_ciaddr(ip);
    rebind.set_flags(Flags::default().set_broadcast());
    let l = acked_to_ciaddr(&e.handle_message(&rebind, &ctx(&i, T0 + 5000)), ip);
    assert_eq!(l.expires, T0 + 5000 + 3600);
    let mut stranger = Engine::new(&config(""), vec![], T0);
    assert_eq!(
        stranger
            .handle_message(&rebind, &ctx(&i, T0 + 5000))
            .outcome,
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    // Another client claiming that address: NAK.
    let mut thief = msg(MessageType::Request, mac(2));
    thief.set_ciaddr(ip);
    assert_eq!(
        kind(&e.handle_message(&thief, &ctx(&i, T0 + 1800))),
        Some(MessageType::Nak)
    );
}

/// The decision ACKed `ip` with the reply unicast to ciaddr; returns the lease written.
fn acked_to_ciaddr(d: &Decision, ip: Ipv4Addr) -> crate::store::Lease {
    assert_eq!(d.outcome, Outcome::Ack(ip));
    assert_eq!(
        d.reply.as_ref().unwrap().destination,
        Destination::Unicast(ip)
    );
    let LeaseEffect::Put(l) = &d.effects[0] else {
        panic!("expected a lease write, got {:?}", d.effects)
    };
    l.clone()
}

#[test]
fn never_nak_keeps_quiet() {
    let (i, mut e) = (
        iface(),
        Engine::new(&config("").tap_never_nak(), vec![], T0),
    );
    let wrong = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 9, 9)),
    );
    assert_eq!(
        e.handle_message(&wrong, &ctx(&i, T0)).outcome,
        Outcome::Ignored(IgnoreReason::NakSuppressed)
    );
}

trait NeverNak {
    fn tap_never_nak(self) -> Self;
}
impl NeverNak for Config {
    fn tap_never_nak(mut self) -> Self {
        self.dhcp.never_nak = true;
        self
    }
}

#[test]
fn decline_quarantines_and_release_frees() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = bind(&mut e, &i, mac(1), T0);
    let dec = with(
        with(
            msg(MessageType::Decline, mac(1)),
            DhcpOption::RequestedIpAddress(ip),
        ),
        DhcpOption::ServerIdentifier(SERVER),
    );
    let d = e.handle_message(&dec, &ctx(&i, T0 + 1));
    assert_eq!((d.outcome, d.reply.is_none()), (Outcome::Decline(ip), true));
    // Neither the decliner nor anyone else gets the quarantined address.
    let again = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0 + 2)));
    assert_ne!(again, ip);
    let other = bind(&mut e, &i, mac(2), T0 + 2);
    assert_ne!(other, ip);
    // RELEASE frees the address but the client keeps its affinity.
    let mut rel = msg(MessageType::Release, mac(2));
    rel.set_ciaddr(other);
    let d = e.handle_message(&rel, &ctx_from(&i, T0 + 3, other));
    assert_eq!(d.outcome, Outcome::Release(other));
    let LeaseEffect::Put(l) = &d.effects[0] else {
        panic!()
    };
    assert_eq!(l.state, LeaseState::Released);
    assert_eq!(
        offered(&e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0 + 4))),
        other
    );
}

#[test]
fn a_quarantine_survives_a_restart_and_ends_after_decline_hold_secs() {
    // The relayed subnet has three addresses: quarantine shows as a smaller pool.
    let relayed = |kind: MessageType, m: MacAddr| {
        let mut d = msg(kind, m);
        d.set_giaddr(Ipv4Addr::new(198, 51, 100, 1));
        d
    };
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = offered(&e.handle_message(&relayed(MessageType::Discover, mac(1)), &ctx(&i, T0)));
    let dec = with(
        with(
            relayed(MessageType::Decline, mac(1)),
            DhcpOption::RequestedIpAddress(ip),
        ),
        DhcpOption::ServerIdentifier(SERVER),
    );
    let d = e.handle_message(&dec, &ctx(&i, T0));
    let LeaseEffect::Put(quarantine) = d.effects[0].clone() else {
        panic!("a DECLINE is persisted")
    };
    // Restarted on that record: the address stays out of use for 600 s.
    let mut e = Engine::new(&config(""), vec![quarantine], T0 + 10);
    let others: Vec<Ipv4Addr> = (2..=3)
        .map(|n| {
            offered(&e.handle_message(&relayed(MessageType::Discover, mac(n)), &ctx(&i, T0 + 10)))
        })
        .collect();
    assert!(!others.contains(&ip));
    assert_eq!(
        e.handle_message(&relayed(MessageType::Discover, mac(4)), &ctx(&i, T0 + 10))
            .outcome,
        Outcome::Ignored(IgnoreReason::PoolExhausted)
    );
    e.handle_tick(T0 + 601);
    assert_eq!(
        offered(&e.handle_message(&relayed(MessageType::Discover, mac(4)), &ctx(&i, T0 + 601))),
        ip
    );
}

#[test]
fn inform_gets_options_without_an_address() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let mut inf = msg(MessageType::Inform, mac(1));
    inf.set_ciaddr(Ipv4Addr::new(192, 0, 2, 50));
    let d = e.handle_message(&inf, &ctx(&i, T0));
    let r = d.reply.unwrap();
    assert_eq!(
        r.destination,
        Destination::Unicast(Ipv4Addr::new(192, 0, 2, 50))
    );
    assert_eq!(r.message.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert!(r.message.opts().get(OptionCode::AddressLeaseTime).is_none());
    assert!(r.message.opts().get(OptionCode::Router).is_some());
}

#[test]
fn inform_for_an_address_off_every_served_subnet_is_not_answered() {
    // A spoofed INFORM with another host's address as ciaddr would aim the answer at it.
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let mut inf = msg(MessageType::Inform, mac(1));
    inf.set_ciaddr(Ipv4Addr::new(203, 0, 113, 9));
    let d = e.handle_message(&inf, &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::NoSubnet));
    assert!(d.reply.is_none());
}

#[test]
fn reservations_known_only_and_deny() {
    let hosts = r#"
        [[host]]
        mac = "52:54:00:00:00:01"
        ip = "192.0.2.20"
        hostname = "node-1"
        [[host]]
        mac = "52:54:00:00:00:02"
        deny = true
    "#;
    let (i, mut e) = (iface(), Engine::new(&config(hosts), vec![], T0));
    let d = e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Offer(Ipv4Addr::new(192, 0, 2, 20)));
    let r = d.reply.unwrap().message;
    assert_eq!(
        r.opts().get(OptionCode::Hostname),
        Some(&DhcpOption::Hostname("node-1".into()))
    );
    assert_eq!(
        e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0))
            .outcome,
        Outcome::Ignored(IgnoreReason::Denied)
    );
    let mut cfg = config(hosts);
    cfg.dhcp.known_only = true;
    let mut e = Engine::new(&cfg, vec![], T0);
    assert_eq!(
        e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0))
            .outcome,
        Outcome::Ignored(IgnoreReason::UnknownClient)
    );
    // Run-time policies: the API's allow lifts a [[host]] deny; a hosts directory's
    // allow (Ironic's PXE filter) makes a MAC known but does not lift a deny.
    use crate::dhcp::host_policy::{HostPolicy, PolicySource};
    let with_policy = |e: &mut Engine, m: MacAddr, p: (HostPolicy, PolicySource)| {
        let c = PacketContext {
            policy: Some(p),
            ..ctx(&i, T0)
        };
        e.handle_message(&msg(MessageType::Discover, m), &c).outcome
    };
    let allow_dir = (HostPolicy::Allow, PolicySource::HostsDir);
    let allow_api = (HostPolicy::Allow, PolicySource::Api);
    assert_eq!(
        with_policy(&mut e, mac(2), allow_dir),
        Outcome::Ignored(IgnoreReason::Denied)
    );
    assert!(matches!(
        with_policy(&mut e, mac(2), allow_api),
        Outcome::Offer(_)
    ));
    assert!(matches!(
        with_policy(
            &mut e,
            mac(3),
            (HostPolicy::Allow, PolicySource::HostsDirUnknown)
        ),
        Outcome::Offer(_)
    ));
    // The reserved address is never handed to anyone else, however many ask (no
    // addresses kept for known machines, so unknown ones could take every one).
    let mut cfg = config(hosts);
    cfg.subnets
        .iter_mut()
        .for_each(|s| s.reserve_for_known = Some(0));
    let mut e = Engine::new(&cfg, vec![], T0);
    for n in 3..100 {
        let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0)));
        assert_ne!(ip, Ipv4Addr::new(192, 0, 2, 20));
    }
}

#[test]
fn pxe_and_ipxe_clients_get_boot_files() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let pxe = firmware(
        msg(MessageType::Discover, mac(1)),
        "PXEClient:Arch:00007:UNDI:003016",
        7,
    );
    let r = e.handle_message(&pxe, &ctx(&i, T0)).reply.unwrap().message;
    assert_eq!(r.fname_str(), Some(Ok("snponly.efi")));
    assert_eq!(r.siaddr(), SERVER);
    assert_eq!(
        r.opts().get(OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
    );
    // PXE_DISCOVERY_CONTROL = 8: boot the named file, no boot-server discovery (UEFI
    // firmware otherwise waits for a BINL answer on port 4011).
    assert_eq!(
        r.opts().get(OptionCode::VendorExtensions),
        Some(&DhcpOption::VendorExtensions(vec![6, 1, 8, 255]))
    );
    let ipxe = with(
        msg(MessageType::Discover, mac(1)),
        DhcpOption::UserClass(b"iPXE".to_vec()),
    );
    let r = e.handle_message(&ipxe, &ctx(&i, T0)).reply.unwrap().message;
    assert_eq!(r.fname_str(), Some(Ok("http://192.0.2.1:8080/boot.ipxe")));
    assert!(r.opts().get(OptionCode::VendorExtensions).is_none());
    // iPXE is told not to wait for ProxyDHCP offers (175.176 "no-pxedhcp" = 1); PXE
    // firmware, which knows nothing of iPXE's options, is not.
    let no_pxedhcp = |m: &dhcproto::v4::Message| match m.opts().get(OptionCode::Unknown(175)) {
        Some(DhcpOption::Unknown(u)) => u.data() == [176, 1, 1],
        _ => false,
    };
    assert!(no_pxedhcp(&r));
    let r = e.handle_message(&pxe, &ctx(&i, T0)).reply.unwrap().message;
    assert!(!no_pxedhcp(&r));
    // The broadcast flag is echoed.
    let mut b = msg(MessageType::Discover, mac(5));
    b.set_flags(Flags::default().set_broadcast());
    let r = e.handle_message(&b, &ctx(&i, T0)).reply.unwrap().message;
    assert!(r.flags().broadcast());
}

#[test]
fn uefi_http_boot_gets_a_url_and_httpclient_echoed() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let http = firmware(
        msg(MessageType::Discover, mac(1)),
        "HTTPClient:Arch:00016:UNDI:003001",
        16,
    );
    let r = e.handle_message(&http, &ctx(&i, T0)).reply.unwrap().message;
    // UEFI HTTP Boot needs option 60 "HTTPClient" back (UEFI specification, "HTTP Boot"),
    // and a URL.
    assert_eq!(
        r.opts().get(OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()))
    );
    assert_eq!(
        r.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(
            b"http://192.0.2.1:8080/ipxe/snponly.efi".to_vec()
        ))
    );
    // Not PXE: no option 43 discovery control.
    assert!(r.opts().get(OptionCode::VendorExtensions).is_none());
}

#[test]
fn not_responsible_stays_silent_except_for_its_own_clients() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = bind(&mut e, &i, mac(1), T0);
    let mut c = ctx(&i, T0 + 5);
    c.responsibility = Responsibility::NotMine;
    assert_eq!(
        e.handle_message(&msg(MessageType::Discover, mac(2)), &c)
            .outcome,
        Outcome::Ignored(IgnoreReason::NotResponsible)
    );
    let ir = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(ip),
    );
    assert_eq!(e.handle_message(&ir, &c).outcome, Outcome::Ack(ip));
}

#[test]
fn expired_bound_leases_go_to_new_clients_live_and_after_a_restart() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let relayed = |kind: MessageType, m: MacAddr| {
        let mut d = msg(kind, m);
        d.set_giaddr(Ipv4Addr::new(198, 51, 100, 1));
        d
    };
    let mut stored = Vec::new();
    for n in 1..=3 {
        let ip = offered(&e.handle_message(&relayed(MessageType::Discover, mac(n)), &ctx(&i, T0)));
        let req = with(
            with(
                relayed(MessageType::Request, mac(n)),
                DhcpOption::ServerIdentifier(SERVER),
            ),
            DhcpOption::RequestedIpAddress(ip),
        );
        let d = e.handle_message(&req, &ctx(&i, T0));
        let LeaseEffect::Put(l) = d.effects[0].clone() else {
            panic!()
        };
        stored.push(l);
    }
    let newcomer = relayed(MessageType::Discover, mac(4));
    assert_eq!(
        e.handle_message(&newcomer, &ctx(&i, T0 + 3599)).outcome,
        Outcome::Ignored(IgnoreReason::PoolExhausted)
    );
    // An hour on, the three leases have expired: the reclaim tick frees them.
    e.handle_tick(T0 + 3601);
    let ip = offered(&e.handle_message(&newcomer, &ctx(&i, T0 + 3601)));
    assert!(stored.iter().any(|l| l.ip == ip));
    // A server restarted on the same (expired) records hands them out too.
    let mut e2 = Engine::new(&config(""), stored.clone(), T0 + 3601);
    let ip = offered(&e2.handle_message(&newcomer, &ctx(&i, T0 + 3601)));
    assert!(stored.iter().any(|l| l.ip == ip));
}

#[test]
fn excluded_addresses_are_never_offered_and_boot_files_follow_the_config() {
    let cfg = Config::from_toml_with_overrides(
        DEFAULT_CONFIG_TOML,
        &[
            (
                "subnet.0.exclude".into(),
                r#"["192.0.2.100", "192.0.2.101"]"#.into(),
            ),
            ("boot.bios".into(), "site-bios.kpxe".into()),
            ("boot.uefi_x64".into(), "site-x64.efi".into()),
            ("boot.uefi_arm64".into(), "site-arm64.efi".into()),
        ],
    )
    .unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    for n in 1..=20 {
        let ip = bind(&mut e, &i, mac(n), T0);
        assert!(ip != Ipv4Addr::new(192, 0, 2, 100) && ip != Ipv4Addr::new(192, 0, 2, 101));
    }
    for (arch, file) in [
        (0, "site-bios.kpxe"),
        (7, "site-x64.efi"),
        (9, "site-x64.efi"),
        (11, "site-arm64.efi"),
    ] {
        let class = format!("PXEClient:Arch:{arch:05}");
        let pxe = firmware(msg(MessageType::Discover, mac(50)), &class, arch);
        let r = e.handle_message(&pxe, &ctx(&i, T0)).reply.unwrap().message;
        assert_eq!(r.fname_str(), Some(Ok(file)), "arch {arch}");
    }
}

#[test]
fn restart_from_stored_leases_keeps_bindings() {
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let mut stored = Vec::new();
    for n in 1..=20 {
        let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0)));
        let d = e.handle_message(&request_selecting(mac(n), ip), &ctx(&i, T0));
        let LeaseEffect::Put(l) = d.effects[0].clone() else {
            panic!()
        };
        stored.push(l);
    }
    let mut e2 = Engine::new(&config(""), stored.clone(), T0 + 10);
    for l in &stored {
        let ir = with(
            msg(MessageType::Request, l.mac),
            DhcpOption::RequestedIpAddress(l.ip),
        );
        assert_eq!(
            e2.handle_message(&ir, &ctx(&i, T0 + 10)).outcome,
            Outcome::Ack(l.ip)
        );
    }
    // New clients never get a stored address.
    for n in 100..160 {
        let ip =
            offered(&e2.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0 + 10)));
        assert!(stored.iter().all(|l| l.ip != ip), "{ip} reused");
    }
}

const THREE_MEMBERS: &str = r#"
[[member]]
name = "c"
http_url = "http://192.0.2.3:8080"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
[[member]]
name = "b"
http_url = "http://192.0.2.2:8080"
"#;

/// Member `me`'s share of the default range 192.0.2.100-199 among `names`, sorted.
fn share(names: &[&str], me: &str) -> Vec<Ipv4Addr> {
    let (first, last) = (Ipv4Addr::new(192, 0, 2, 100), Ipv4Addr::new(192, 0, 2, 199));
    let bits = crate::owner::MemberList::new(names.iter().copied()).share_of(
        Split::CURRENT,
        first,
        last,
        Some(me),
    );
    (0..100u32)
        .filter(|i| bits[(i / 64) as usize] & (1 << (i % 64)) != 0)
        .map(|i| Ipv4Addr::from(u32::from(first) + i))
        .collect()
}

const ABC: [&str; 3] = ["a", "b", "c"];

#[test]
fn three_members_never_hand_out_the_same_address() {
    let i = iface();
    let mut seen = std::collections::HashMap::new();
    for me in ["a", "b", "c"] {
        let cfg = config(&format!(
            "[owner]\ninsecure_members = true\nself = \"{me}\"\n{THREE_MEMBERS}"
        ));
        let mut e = Engine::new(&cfg, Vec::new(), T0);
        // The default range is 192.0.2.100 - .199, shared in blocks.
        let mine = share(&ABC, me);
        let mut n = 0usize;
        loop {
            let m = MacAddr([0x52, 0x54, 1, 0, me.as_bytes()[0], n as u8]);
            let d = e.handle_message(&msg(MessageType::Discover, m), &ctx(&i, T0));
            let Outcome::Offer(ip) = d.outcome else { break };
            bind(&mut e, &i, m, T0);
            assert!(mine.contains(&ip), "{ip} outside {me}'s share");
            if let Some(other) = seen.insert(ip, me) {
                panic!("{ip} handed out by {other} and {me}");
            }
            n += 1;
        }
        assert_eq!(n, mine.len(), "member {me}");
        // No member gets much more than a third (the load bound: 5/4 of an even share).
        assert!((20..=42).contains(&n), "member {me}: {n}");
    }
    assert_eq!(seen.len(), 100);
}

#[test]
fn a_requested_address_in_another_members_slice_is_not_given() {
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{THREE_MEMBERS}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    let in_b = share(&ABC, "b")[5];
    // DISCOVER asking for b's address: offered one of a's own instead.
    let d = e.handle_message(
        &with(
            msg(MessageType::Discover, mac(1)),
            DhcpOption::RequestedIpAddress(in_b),
        ),
        &ctx(&i, T0),
    );
    let ip = offered(&d);
    assert!(share(&ABC, "a").contains(&ip), "{ip}");
    // A REQUEST naming this server but b's address gets a NAK, not an ACK.
    let d = e.handle_message(&request_selecting(mac(2), in_b), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Nak);
    // A lease this member already holds outside its slice (from before a membership
    // change) is still served.
    let stored = crate::store::Lease {
        ip: in_b,
        mac: mac(3),
        state: LeaseState::Bound,
        starts: T0 - 10,
        expires: T0 + 1000,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    };
    let mut e = Engine::new(&cfg, vec![stored], T0);
    let d = e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0));
    assert_eq!(offered(&d), in_b);
}

#[test]
fn init_reboot_into_another_members_slice_is_never_naked_by_a_stale_record() {
    // Member a still has a live binding of the client at one of its own addresses (from
    // before a takeover); the client INIT-REBOOTs the address b gave it since. Only b
    // can judge that binding: a stays silent rather than contradict b's ACK.
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{THREE_MEMBERS}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    let mine = bind(&mut e, &i, mac(1), T0);
    let in_b = share(&ABC, "b")[5];
    let ir = |ip| {
        with(
            msg(MessageType::Request, mac(1)),
            DhcpOption::RequestedIpAddress(ip),
        )
    };
    assert_eq!(
        e.handle_message(&ir(in_b), &ctx(&i, T0 + 10)).outcome,
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    // Another address of a's own slice: a alone could have bound it, so a's record
    // says the client is wrong.
    let other_mine = *share(&ABC, "a").iter().rfind(|ip| **ip != mine).unwrap();
    assert_eq!(
        kind(&e.handle_message(&ir(other_mine), &ctx(&i, T0 + 10))),
        Some(MessageType::Nak)
    );
}

#[test]
fn a_rebind_onto_another_members_address_is_not_naked_by_an_expired_copy() {
    // Member a's copy of the client's binding, at an address of b's share, ran out: b
    // (or the shared store's newer record) renewed it since. The client's Rebind is
    // broadcast to every member; a stays silent rather than NAK a binding it cannot
    // judge, and the client keeps its address from b's ACK.
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{THREE_MEMBERS}"
    ));
    let in_b = share(&ABC, "b")[5];
    let mut e = Engine::new(&cfg, vec![stale_copy(in_b)], T0);
    let mut rebind = msg(MessageType::Request, mac(1));
    rebind.set_ciaddr(in_b);
    assert_eq!(
        e.handle_message(&rebind, &ctx(&i, T0)).outcome,
        Outcome::Ignored(IgnoreReason::NotResponsible)
    );
    // Alone, the member's whole range is its own: the same expired binding is renewed.
    let alone = config("");
    let mut e = Engine::new(&alone, vec![stale_copy(in_b)], T0);
    assert_eq!(
        e.handle_message(&rebind, &ctx(&i, T0)).outcome,
        Outcome::Ack(in_b)
    );
}

#[test]
fn a_rebind_onto_an_address_this_member_offered_to_another_client_is_not_naked() {
    // Member a offered an address of its share to mac(2) while b bound the same address
    // to mac(1) through the shared store (a's copy had not heard of it yet: seen in
    // tests/members/ironic.rs as a NAK among three ACKs). mac(1)'s Rebind reaches every
    // member; a stays silent, and the client keeps its address from the others' ACKs.
    let i = iface();
    let rebind_onto_an_offer = |cfg: &Config| {
        let mut e = Engine::new(cfg, vec![], T0);
        let d = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0));
        let Outcome::Offer(offered) = d.outcome else {
            panic!("{:?}", d.outcome)
        };
        let mut rebind = msg(MessageType::Request, mac(1));
        rebind.set_ciaddr(offered);
        e.handle_message(&rebind, &ctx(&i, T0 + 1)).outcome
    };
    let members = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{THREE_MEMBERS}"
    ));
    assert_eq!(
        rebind_onto_an_offer(&members),
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    // Alone, the server's own offer is the only truth there is: the client is told its
    // notion is wrong.
    assert_eq!(rebind_onto_an_offer(&config("")), Outcome::Nak);
}

/// A binding of `mac(1)` on `ip` that expired 400 s before `T0`.
fn stale_copy(ip: std::net::Ipv4Addr) -> crate::store::Lease {
    crate::store::Lease {
        ip,
        mac: mac(1),
        state: LeaseState::Bound,
        starts: T0 - 4000,
        expires: T0 - 400,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    }
}

fn lease_time_of(d: &Decision) -> Option<u32> {
    d.reply.as_ref().and_then(
        |r| match r.message.opts().get(OptionCode::AddressLeaseTime) {
            Some(DhcpOption::AddressLeaseTime(t)) => Some(*t),
            _ => None,
        },
    )
}

#[test]
fn after_a_membership_change_fresh_addresses_come_from_old_and_new_share_only() {
    let i = iface();
    let until = T0 + 100;
    let fresh = |e: &mut Engine| {
        let mut got = Vec::new();
        for n in 0..60u8 {
            let d = e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0));
            let Outcome::Offer(ip) = d.outcome else { break };
            bind(e, &i, mac(n), T0);
            got.push(ip);
        }
        got.sort();
        got
    };
    // a, b, c -> a, b (c leaves): b's new share holds its old one and c's former
    // blocks. Until the transition ends b hands out only what was already its own,
    // because c's clients may still hold addresses in those blocks.
    let two = THREE_MEMBERS.replace(
        "[[member]]\nname = \"c\"\nhttp_url = \"http://192.0.2.3:8080\"\n",
        "",
    );
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{two}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.begin_transition(
        &["a".into(), "b".into(), "c".into()],
        Split::CURRENT,
        "b",
        until,
    );
    let (old, new) = (share(&ABC, "b"), share(&["a", "b"], "b"));
    assert!(old.iter().all(|ip| new.contains(ip)) && old.len() < new.len());
    assert_eq!(fresh(&mut e), old);
    // The transition ends with the longest lease: the whole new share again.
    e.handle_tick(until);
    assert_eq!(e.transition_until(), None);
    let d = e.handle_message(&msg(MessageType::Discover, mac(200)), &ctx(&i, until));
    let ip = offered(&d);
    assert!(new.contains(&ip) && !old.contains(&ip), "{ip}");
    // a, b -> a, b, c (c joins): with rendezvous blocks b only gives blocks up, so
    // everything it may hand out during the transition is in its old share too.
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    let previous = vec!["a".to_string(), "b".to_string()];
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.begin_transition(&previous, Split::CURRENT, "b", until);
    let (old, new) = (share(&["a", "b"], "b"), share(&ABC, "b"));
    let both: Vec<Ipv4Addr> = new.iter().filter(|ip| old.contains(ip)).copied().collect();
    assert_eq!(fresh(&mut e), both);
    // c, new and with no old slice, hands out nothing fresh during the transition.
    let cfg_c = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"c\"\n{THREE_MEMBERS}"
    ));
    let mut c = Engine::new(&cfg_c, Vec::new(), T0);
    c.begin_transition(&previous, Split::CURRENT, "c", until);
    let d = c.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0));
    assert!(d.reply.is_none());
}

#[test]
fn a_lease_outside_the_new_slice_is_renewed_but_never_extended() {
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    // b handed out `ip` under the old list a, b; it is outside b's new share.
    let new = share(&ABC, "b");
    let ip = *share(&["a", "b"], "b")
        .iter()
        .find(|ip| !new.contains(ip))
        .unwrap();
    let held = crate::store::Lease {
        ip,
        mac: mac(7),
        state: LeaseState::Bound,
        starts: T0 - 3000,
        expires: T0 + 600,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    };
    let mut e = Engine::new(&cfg, vec![held], T0);
    let reboot = with(
        msg(MessageType::Request, mac(7)),
        DhcpOption::RequestedIpAddress(ip),
    );
    let d = e.handle_message(&reboot, &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ack(ip));
    assert_eq!(lease_time_of(&d), Some(600));
    match &d.effects[..] {
        [LeaseEffect::Put(l)] => assert_eq!(l.expires, T0 + 600),
        e => panic!("{e:?}"),
    }
    // Once it has expired, the client gets an address from the new slice instead.
    let later = T0 + 601;
    e.handle_tick(later);
    let d = e.handle_message(&reboot, &ctx(&i, later));
    assert_ne!(d.outcome, Outcome::Ack(ip));
    let d = e.handle_message(&msg(MessageType::Discover, mac(7)), &ctx(&i, later));
    let fresh = offered(&d);
    assert!(new.contains(&fresh), "{fresh}");
}

#[test]
fn run_time_reservations_are_checked_and_undone() {
    use super::reserve::{Reservation, ReserveError};
    let i = iface();
    let mut e = Engine::new(&config(""), Vec::new(), T0);
    let held = bind(&mut e, &i, mac(1), T0);
    let r = |m: MacAddr, ip: Ipv4Addr| Reservation {
        mac: m,
        ip,
        hostname: None,
    };
    // Another client's live lease cannot be reserved away from it.
    assert!(matches!(
        e.reserve(&r(mac(2), held), T0),
        Err(ReserveError::Leased { .. })
    ));
    let fixed = Ipv4Addr::new(192, 0, 2, 180);
    e.reserve(&r(mac(2), fixed), T0).unwrap();
    assert_eq!(
        e.reserve(&r(mac(3), fixed), T0),
        Err(ReserveError::Reserved {
            ip: fixed,
            mac: mac(2)
        })
    );
    assert_eq!(
        e.reserve(&r(mac(3), Ipv4Addr::new(10, 0, 0, 1)), T0),
        Err(ReserveError::NoSubnet(Ipv4Addr::new(10, 0, 0, 1)))
    );
    // The reserved MAC gets it; nobody else is offered it.
    let d = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0));
    assert_eq!(offered(&d), fixed);
    // Removed: the address is back in the pool.
    e.unreserve(&mac(2)).unwrap();
    assert_eq!(e.unreserve(&mac(2)), Err(ReserveError::NotFound(mac(2))));
    assert!(e.reservations().is_empty());
}

#[test]
fn a_reload_keeps_leases_and_run_time_reservations_and_serves_the_new_range() {
    use super::reserve::Reservation;
    let i = iface();
    let mut e = Engine::new(&config(""), Vec::new(), T0);
    let held = bind(&mut e, &i, mac(1), T0);
    let fixed = Ipv4Addr::new(192, 0, 2, 180);
    let r = Reservation {
        mac: mac(2),
        ip: fixed,
        hostname: None,
    };
    e.reserve(&r, T0).unwrap();
    // The range moves: the bound lease stays bound, the run-time reservation stays,
    // and a new client is offered from the new range only.
    let mut moved = config("");
    moved.subnets[0].ranges = vec![(Ipv4Addr::new(192, 0, 2, 200), Ipv4Addr::new(192, 0, 2, 201))];
    e.reconfigure(EngineSettings::of(&moved), T0 + 1);
    let kept = e.lease(held).expect("the bound lease is kept");
    assert_eq!((kept.mac, kept.state), (mac(1), LeaseState::Bound));
    assert_eq!(e.reservations(), std::slice::from_ref(&r));
    let d = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0 + 1));
    assert_eq!(offered(&d), fixed, "the reservation still holds");
    let a = bind(&mut e, &i, mac(3), T0 + 1);
    let b = bind(&mut e, &i, mac(4), T0 + 1);
    let mut got = [a, b];
    got.sort();
    assert_eq!(
        got,
        [Ipv4Addr::new(192, 0, 2, 200), Ipv4Addr::new(192, 0, 2, 201)]
    );
    // The new range is full: nothing from the old one is handed out again.
    let d = e.handle_message(&msg(MessageType::Discover, mac(5)), &ctx(&i, T0 + 1));
    assert_eq!(kind(&d), None, "{d:?}");
    // A file that gives the reserved address to another MAC wins over the run-time
    // reservation (once the offer made to the first MAC has lapsed).
    let later = T0 + 600;
    let mut taken = moved.clone();
    let mut host = crate::config::Host::bare(mac(6));
    host.ip = Some(fixed);
    taken.hosts.push(host);
    e.reconfigure(EngineSettings::of(&taken), later);
    assert!(e.reservations().is_empty());
    let d = e.handle_message(&msg(MessageType::Discover, mac(6)), &ctx(&i, later));
    assert_eq!(offered(&d), fixed);
}

/// The default config with one subnet (192.0.2.100-.199) and `edit` applied to it.
fn limited(edit: impl FnOnce(&mut Config)) -> Engine {
    let mut cfg = Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[]).unwrap();
    edit(&mut cfg);
    Engine::new(&cfg, vec![], T0)
}

fn known_host(m: MacAddr) -> crate::config::Host {
    crate::config::Host::bare(m)
}

#[test]
fn a_selecting_request_without_an_offer_is_refused() {
    // RFC 2131 §4.3.2: SELECTING answers an OFFER; a REQUEST naming this server for an
    // address it never offered the client would otherwise bind it for a full lease.
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let d = e.handle_message(
        &request_selecting(mac(1), Ipv4Addr::new(192, 0, 2, 150)),
        &ctx(&i, T0),
    );
    assert_eq!(d.outcome, Outcome::Nak);
    assert!(d.effects.is_empty());
    // After a DISCOVER the same REQUEST binds.
    bind(&mut e, &i, mac(1), T0);
}

#[test]
fn outstanding_offers_are_capped_for_unknown_machines_only() {
    let i = iface();
    let mut e = limited(|c| {
        c.dhcp.max_offers = 2;
        c.hosts.push(known_host(mac(9)));
    });
    for n in 1..=2 {
        offered(&e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0)));
    }
    let d = e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::Limited));
    // A known machine (a [[host]] entry, or one the owner resolver knows) is not held back.
    offered(&e.handle_message(&msg(MessageType::Discover, mac(9)), &ctx(&i, T0)));
    let c = PacketContext {
        known: true,
        ..ctx(&i, T0)
    };
    offered(&e.handle_message(&msg(MessageType::Discover, mac(4)), &c));
    // Offers that expire free the cap.
    e.handle_tick(T0 + 61);
    offered(&e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0 + 61)));
}

#[test]
fn the_reserve_for_known_machines_is_kept_from_unknown_ones() {
    let i = iface();
    let mut e = limited(|c| {
        c.subnets[0].reserve_for_known = Some(10);
        c.hosts.push(known_host(mac(200)));
    });
    let mut unknown = 0;
    for n in 0..100u8 {
        match e
            .handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0))
            .outcome
        {
            Outcome::Offer(_) => {
                bind(&mut e, &i, mac(n), T0);
                unknown += 1;
            }
            Outcome::Ignored(IgnoreReason::Limited) => break,
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(
        unknown, 90,
        "unknown machines stop where the reserve begins"
    );
    bind(&mut e, &i, mac(200), T0);
    // A machine with a lease keeps it.
    bind(&mut e, &i, mac(1), T0);
}

#[test]
fn unknown_discovers_are_rate_limited_per_second_and_source() {
    let i = iface();
    let mut e = limited(|c| {
        c.dhcp.unknown_discovers_per_sec = 2;
        c.hosts.push(known_host(mac(9)));
    });
    let outcome = |e: &mut Engine, n: u8, now: u64| {
        e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, now))
            .outcome
    };
    assert!(matches!(outcome(&mut e, 1, T0), Outcome::Offer(_)));
    assert!(matches!(outcome(&mut e, 2, T0), Outcome::Offer(_)));
    assert_eq!(
        outcome(&mut e, 3, T0),
        Outcome::Ignored(IgnoreReason::Limited)
    );
    assert!(matches!(outcome(&mut e, 9, T0), Outcome::Offer(_)), "known");
    assert!(
        matches!(outcome(&mut e, 3, T0 + 1), Outcome::Offer(_)),
        "next second"
    );
}

#[test]
fn declines_are_capped_per_mac() {
    let i = iface();
    let mut e = limited(|c| c.dhcp.declines_per_mac = 1);
    let decline = |e: &mut Engine, ip: Ipv4Addr| {
        let d = with(
            msg(MessageType::Decline, mac(1)),
            DhcpOption::RequestedIpAddress(ip),
        );
        e.handle_message(&d, &ctx(&i, T0)).outcome
    };
    let first = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0)));
    assert_eq!(decline(&mut e, first), Outcome::Decline(first));
    let second = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0)));
    assert_ne!(first, second);
    assert_eq!(
        decline(&mut e, second),
        Outcome::Ignored(IgnoreReason::Limited),
        "a second quarantine from one MAC within the hold"
    );
}

#[test]
fn subnet_selection_is_believed_only_from_a_relay() {
    // RFC 3011 option 118 chooses the subnet; from a client on the link it would let the
    // client take another network's addresses.
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let other = Ipv4Addr::new(198, 51, 100, 1);
    let direct = with(
        msg(MessageType::Discover, mac(1)),
        DhcpOption::SubnetSelection(other),
    );
    let ip = offered(&e.handle_message(&direct, &ctx(&i, T0)));
    assert!(!Ipv4Net::new(other, 24).unwrap().contains(&ip), "{ip}");
    let mut relayed = with(
        msg(MessageType::Discover, mac(2)),
        DhcpOption::SubnetSelection(other),
    );
    relayed.set_giaddr(Ipv4Addr::new(192, 0, 2, 254));
    let ip = offered(&e.handle_message(&relayed, &ctx(&i, T0)));
    assert!(Ipv4Net::new(other, 24).unwrap().contains(&ip), "{ip}");
}

#[test]
fn a_live_member_change_narrows_at_once_and_stacks_with_a_running_transition() {
    use crate::owner::MemberList;
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    let span = crate::owner::membership::transition_span(&cfg);
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    assert_eq!(e.change_members(MemberList::new(ABC), T0), None);
    // c leaves while everyone runs: b's share grows at once, but until one longest
    // lease has passed b hands out only what was already its own under a, b, c.
    let record = e.change_members(MemberList::new(["a", "b"]), T0).unwrap();
    assert_eq!(record.names, ["a", "b"]);
    assert_eq!(
        record.previous.as_deref(),
        Some(&["a".to_string(), "b".into(), "c".into()][..])
    );
    assert_eq!(e.transition_until(), Some(T0 + span));
    // d joins 10 s later: the new share is narrowed by the earlier list still running
    // (a join adds no transition of its own: b's new share lies inside its share
    // under a, b, which narrowing by it would not change).
    let record = e
        .change_members(MemberList::new(["a", "b", "d"]), T0 + 10)
        .unwrap();
    // The running transition goes into the record, so a restart keeps it.
    assert_eq!(record.earlier.len(), 1);
    assert_eq!(record.earlier[0].names, ["a", "b", "c"]);
    assert_eq!(record.earlier[0].until, T0 + span);
    assert_eq!(e.transition_until(), Some(T0 + span));
    let allowed: Vec<Ipv4Addr> = share(&["a", "b", "d"], "b")
        .into_iter()
        .filter(|ip| share(&ABC, "b").contains(ip) && share(&["a", "b"], "b").contains(ip))
        .collect();
    let mut got = Vec::new();
    for n in 0..100u8 {
        let d = e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, T0 + 20));
        let Outcome::Offer(ip) = d.outcome else { break };
        bind(&mut e, &i, mac(n), T0 + 20);
        got.push(ip);
    }
    got.sort();
    assert_eq!(got, allowed);
    // The transition ends: the whole new share.
    e.handle_tick(T0 + span);
    assert_eq!(e.transition_until(), None);
    let d = e.handle_message(
        &msg(MessageType::Discover, mac(250)),
        &ctx(&i, T0 + 10 + span),
    );
    assert!(share(&["a", "b", "d"], "b").contains(&offered(&d)));
}

#[test]
fn a_member_back_after_a_short_absence_serves_its_share_at_once_but_not_after_a_long_one() {
    use crate::owner::MemberList;
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    let span = crate::owner::membership::transition_span(&cfg);
    let fresh = |e: &mut Engine, at: u64, from: u8| {
        let mut got = Vec::new();
        for n in from..from + 60 {
            let d = e.handle_message(&msg(MessageType::Discover, mac(n)), &ctx(&i, at));
            let Outcome::Offer(ip) = d.outcome else { break };
            bind(e, &i, mac(n), at);
            got.push(ip);
        }
        got.sort();
        got
    };
    let (abc, ac) = (MemberList::new(ABC), MemberList::new(["a", "c"]));
    // b's conductor is gone for 30 s: b hands out nothing meanwhile; back, all of its
    // share at once, since a and c stayed within their shares under a, b, c throughout.
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.change_members(ac.clone(), T0).unwrap();
    assert!(fresh(&mut e, T0 + 1, 0).is_empty());
    e.change_members(abc.clone(), T0 + 30).unwrap();
    assert_eq!(fresh(&mut e, T0 + 31, 100), share(&ABC, "b"));
    // Gone for longer than a transition: a and c were free to use b's blocks by then,
    // so b, back, hands out nothing fresh until its own transitions end.
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.change_members(ac, T0).unwrap();
    e.handle_tick(T0 + span + 1);
    e.change_members(abc, T0 + span + 1).unwrap();
    assert!(fresh(&mut e, T0 + span + 2, 0).is_empty());
    e.handle_tick(T0 + 2 * span + 1);
    assert_eq!(fresh(&mut e, T0 + 2 * span + 2, 100), share(&ABC, "b"));
}

const OPTIONS_CONFIG: &str = r#"
[dhcp]
options = ["option:ntp-server,192.0.2.5", "tag:efi-x64,option:mtu,9000"]
[[subnet]]
network = "192.0.2.0/24"
router = "192.0.2.1"
ranges = [
  { range = "192.0.2.10 - 192.0.2.10", tag = "range_0" },
  { range = "192.0.2.20 - 192.0.2.29", tag = "range_1" },
]
# Every address to the unknown clients below (a [[host]] would keep a quarter).
reserve_for_known = 0
options = [
  "tag:range_0,option:router",
  "option:classless-static-route,10.0.0.0/8,192.0.2.1",
  "tag:ipxe,67,http://192.0.2.1:8080/custom.ipxe",
]
[[host]]
mac = "52:54:00:00:00:63"
tags = ["node-63"]
options = ["tag:node-63,option:hostname,node63", "255,192.0.2.9"]
"#;

/// Binds `req`'s client and returns the ACK.
fn ack_for(e: &mut Engine, i: &Interface, discover: Message, now: u64) -> Reply {
    let ip = offered(&e.handle_message(&discover, &ctx(i, now)));
    let mut req = discover;
    req.opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Request));
    req.opts_mut().insert(DhcpOption::ServerIdentifier(SERVER));
    req.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
    e.handle_message(&req, &ctx(i, now)).reply.unwrap()
}

fn raw(r: &Reply, code: u8) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    r.encode(&mut buf).unwrap();
    crate::dhcp::wire::raw_option(&buf, code)
}

#[test]
fn options_by_server_subnet_range_host_and_client_class() {
    let cfg = Config::from_toml_with_overrides(OPTIONS_CONFIG, &[]).unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    // Eleven clients take all eleven addresses: one is in range_0.
    let acks: Vec<Reply> = (1..=11)
        .map(|n| ack_for(&mut e, &i, msg(MessageType::Discover, mac(n)), T0))
        .collect();
    let (in_0, in_1): (Vec<&Reply>, Vec<&Reply>) = acks
        .iter()
        .partition(|r| r.message.yiaddr() == Ipv4Addr::new(192, 0, 2, 10));
    assert_eq!(in_0.len(), 1);
    // range_0 sends no router; range_1 the subnet's.
    assert_eq!(raw(in_0[0], 3), None);
    assert_eq!(raw(in_1[0], 3), Some(vec![192, 0, 2, 1]));
    for r in &acks {
        // Server level, and a typed RFC 3442 route at subnet level.
        assert_eq!(raw(r, 42), Some(vec![192, 0, 2, 5]));
        assert_eq!(raw(r, 121), Some(vec![8, 10, 192, 0, 2, 1]));
        // Not UEFI x64: no MTU.
        assert_eq!(raw(r, 26), None);
    }
    // Fresh engine for the class- and host-tagged clients.
    let mut e = Engine::new(&cfg, vec![], T0);
    let efi = ack_for(
        &mut e,
        &i,
        firmware(
            msg(MessageType::Discover, mac(40)),
            "PXEClient:Arch:00007:UNDI:003016",
            7,
        ),
        T0,
    );
    assert_eq!(raw(&efi, 26), Some(vec![0x23, 0x28]));
    assert_eq!(raw(&efi, 67), Some(b"snponly.efi".to_vec()));
    let ipxe = with(
        msg(MessageType::Discover, mac(41)),
        DhcpOption::UserClass(b"iPXE".to_vec()),
    );
    let ipxe = ack_for(&mut e, &i, ipxe, T0);
    let url = b"http://192.0.2.1:8080/custom.ipxe".to_vec();
    assert_eq!(raw(&ipxe, 67), Some(url.clone()));
    assert_eq!(ipxe.message.fname(), Some(&url[..]));
    let host = ack_for(&mut e, &i, msg(MessageType::Discover, mac(0x63)), T0);
    assert_eq!(raw(&host, 12), Some(b"node63".to_vec()));
    assert_eq!(host.message.siaddr(), Ipv4Addr::new(192, 0, 2, 9));
}

#[test]
fn requested_options_are_encoded_first() {
    let cfg = Config::from_toml_with_overrides(OPTIONS_CONFIG, &[]).unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    let prl = [121u8, 42, 3];
    let d = with(
        msg(MessageType::Discover, mac(50)),
        DhcpOption::ParameterRequestList(prl.iter().map(|&c| OptionCode::from(c)).collect()),
    );
    let r = ack_for(&mut e, &i, d, T0);
    let mut buf = Vec::new();
    r.encode(&mut buf).unwrap();
    let mut codes = Vec::new();
    let mut at = 240;
    while buf[at] != 255 {
        codes.push(buf[at]);
        at += 2 + usize::from(buf[at + 1]);
    }
    let first: Vec<u8> = codes
        .iter()
        .copied()
        .filter(|c| ![53, 54].contains(c))
        .take(3)
        .collect();
    assert_eq!(&codes[..2], [53, 54]);
    // The reply's router depends on the range; skip it if this client has none.
    let want: Vec<u8> = prl.iter().copied().filter(|c| codes.contains(c)).collect();
    assert_eq!(&first[..want.len()], &want[..], "{codes:?}");
}

#[test]
fn a_bad_option_names_its_key_and_the_offending_text() {
    for (entry, key, text) in [
        (
            "option:routr,192.0.2.1",
            "subnet[0].options[0]",
            "\"option:routr\"",
        ),
        (
            "option:router,192.0.2.300",
            "subnet[0].options[0]",
            "\"192.0.2.300\"",
        ),
        ("tag:!,3", "subnet[0].options[0]", "is not a tag name"),
    ] {
        let text_cfg = format!(
            "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.10 - 192.0.2.20\"]\noptions = [{entry:?}]\n"
        );
        let err = Config::from_toml_with_overrides(&text_cfg, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains(key) && err.contains(text), "{entry}: {err}");
    }
    let err = Config::from_toml_with_overrides(
        "[dhcp]\noptions = [\"53,1\"]\n[[host]]\nmac = \"52:54:00:00:00:01\"\ntags = [\"a b\"]\n",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("dhcp.options[0]") && err.contains("option 53"),
        "{err}"
    );
    assert!(
        err.contains("host[0].tags[0]") && err.contains("\"a b\""),
        "{err}"
    );
}

// Bindings the shared lease store decided (`decided.rs`).

fn decided_lease(ip: Ipv4Addr, m: MacAddr, now: u64) -> crate::store::Lease {
    crate::store::Lease {
        ip,
        mac: m,
        state: LeaseState::Bound,
        starts: now,
        expires: now + 3600,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    }
}

#[test]
fn a_binding_the_database_decided_is_never_offered_to_another_client_and_its_client_keeps_it() {
    let i = iface();
    let mut e = Engine::new(&config(""), vec![], T0);
    let ip = Ipv4Addr::new(198, 51, 100, 10);
    let put = LeaseEffect::Put(decided_lease(ip, mac(1), T0));
    assert_eq!(e.apply_decided_change(&put, T0), Some(put.clone()));
    // The same row read again changes nothing on disk.
    assert_eq!(e.apply_decided_change(&put, T0), None);
    let other = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0 + 1));
    assert_ne!(offered(&other), ip);
    // The other member's client rebinds here (ciaddr, no server id): ACKed on its
    // address.
    let mut rebind = msg(MessageType::Request, mac(1));
    rebind.set_ciaddr(ip);
    let d = e.handle_message(&rebind, &ctx(&i, T0 + 2));
    assert_eq!(d.outcome, Outcome::Ack(ip));
    // Another member is responsible for the client: this member answers its rebind all
    // the same (the responsible one may be dead).
    let ip2 = Ipv4Addr::new(198, 51, 100, 12);
    e.apply_decided_change(&LeaseEffect::Put(decided_lease(ip2, mac(3), T0)), T0);
    let mut rebind = msg(MessageType::Request, mac(3));
    rebind.set_ciaddr(ip2);
    let not_mine = PacketContext {
        responsibility: Responsibility::NotMine,
        ..ctx(&i, T0 + 2)
    };
    assert_eq!(
        e.handle_message(&rebind, &not_mine).outcome,
        Outcome::Ack(ip2)
    );
    // A removal of another client's record is not this record's: kept.
    let wrong = LeaseEffect::Remove(ip2, mac(9));
    assert_eq!(e.apply_decided_change(&wrong, T0 + 3), None);
    assert!(e.lease(ip2).is_some());
    let right = LeaseEffect::Remove(ip2, mac(3));
    assert_eq!(e.apply_decided_change(&right, T0 + 3), Some(right));
    assert!(e.lease(ip2).is_none());
}

#[test]
fn the_databases_binding_takes_an_offered_address_and_the_offered_client_is_naked() {
    let i = iface();
    let mut e = Engine::new(&config(""), vec![], T0);
    // An offer is no promise: the binding another member wrote takes the address.
    let offer = offered(&e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0)));
    let theirs = LeaseEffect::Put(decided_lease(offer, mac(4), T0));
    assert_eq!(e.apply_decided_change(&theirs, T0), Some(theirs.clone()));
    let d = e.handle_message(&request_selecting(mac(3), offer), &ctx(&i, T0 + 1));
    assert_eq!(d.outcome, Outcome::Nak);
    // The database's word replaces even this member's own binding (read after a
    // refusal, or a row another member wrote while this one was cut off).
    let bound = bind(&mut e, &i, mac(1), T0);
    let later = LeaseEffect::Put(decided_lease(bound, mac(2), T0 + 5));
    assert!(e.apply_decided_change(&later, T0 + 6).is_some());
    assert_eq!(e.lease(bound).unwrap().mac, mac(2));
}

#[test]
fn a_refused_lease_is_withdrawn_and_its_address_not_chosen_while_the_holder_holds_it() {
    let i = iface();
    let mut e = Engine::new(&config(""), vec![], T0);
    let ip = bind(&mut e, &i, mac(1), T0);
    let ours = e.lease(ip).unwrap().clone();
    let holder = decided_lease(ip, mac(2), T0);
    assert_eq!(
        e.withdraw(&ours, &holder, T0 + 1),
        Some(LeaseEffect::Remove(ip, mac(1)))
    );
    assert_eq!(e.lease(ip).unwrap().mac, mac(2));
    let again = e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0 + 1));
    assert_ne!(offered(&again), ip);
    // A withdrawal for a record that has changed since (renewed, replaced) does nothing.
    assert_eq!(e.withdraw(&ours, &holder, T0 + 2), None);
}

#[test]
fn with_the_shared_store_up_a_lease_outside_the_share_is_extended_and_a_member_change_needs_no_transition(
) {
    use crate::owner::MemberList;
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.adopt_members(MemberList::new(ABC));
    let outside = share(&ABC, "a")[0];
    e.apply_decided_change(&LeaseEffect::Put(decided_lease(outside, mac(1), T0)), T0);
    let mut rebind = msg(MessageType::Request, mac(1));
    rebind.set_ciaddr(outside);
    let lease_of = |d: &Decision| match &d.effects[..] {
        [LeaseEffect::Put(l)] => l.expires,
        e => panic!("expected one lease, got {e:?}"),
    };
    // The shared store down: renewed only to its current end (degraded mode).
    e.set_shared_store_up(false);
    let d = e.handle_message(&rebind, &ctx(&i, T0 + 100));
    assert_eq!(lease_of(&d), T0 + 3600);
    // Up: the database decides the extension, so it is extended.
    e.set_shared_store_up(true);
    let d = e.handle_message(&rebind, &ctx(&i, T0 + 200));
    assert!(lease_of(&d) > T0 + 3600);
    // And a list change takes effect at once, with no narrowing transition.
    e.change_members(MemberList::new(["a", "b"]), T0 + 300)
        .unwrap();
    assert_eq!(e.transition_until(), None);
    // A join needs none either (b's share only shrinks); a leave while the store is
    // down does.
    e.set_shared_store_up(false);
    e.change_members(MemberList::new(ABC), T0 + 400).unwrap();
    assert_eq!(e.transition_until(), None);
    e.change_members(MemberList::new(["b", "c"]), T0 + 500)
        .unwrap();
    assert!(e.transition_until().is_some());
}

#[test]
fn with_a_shared_store_a_renewal_runs_only_to_what_the_database_holds_while_it_is_down() {
    use crate::owner::MemberList;
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"b\"\n{THREE_MEMBERS}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.adopt_members(MemberList::new(ABC));
    e.set_shared_store_up(true);
    // Another member's binding, as the database decided it (read by following).
    let theirs = share(&ABC, "a")[0];
    let decided = decided_lease(theirs, mac(1), T0);
    assert_eq!(
        e.apply_decided_change(&LeaseEffect::Put(decided.clone()), T0),
        Some(LeaseEffect::Put(decided.clone()))
    );
    // The same row again changes nothing; a shorter end for the same client is taken
    // (the database's word), an offer of this engine's own is replaced.
    assert_eq!(
        e.apply_decided_change(&LeaseEffect::Put(decided.clone()), T0),
        None
    );
    let shorter = Lease {
        expires: decided.expires - 600,
        ..decided.clone()
    };
    assert!(e
        .apply_decided_change(&LeaseEffect::Put(shorter.clone()), T0)
        .is_some());
    let mut rebind = msg(MessageType::Request, mac(1));
    rebind.set_ciaddr(theirs);
    let end_of = |d: &Decision| match &d.effects[..] {
        [LeaseEffect::Put(l)] => l.expires,
        e => panic!("expected one lease, got {e:?}"),
    };
    // Reachable: any member extends the client's binding (the database refuses what
    // is not the client's).
    let d = e.handle_message(&rebind, &ctx(&i, T0 + 100));
    let extended = end_of(&d);
    assert!(extended > shorter.expires, "{extended}");
    // Down: only to the binding's current end; and a lease the database holds for
    // less is cut back to it first.
    e.set_shared_store_up(false);
    let ours = Lease {
        expires: extended,
        ..shorter.clone()
    };
    e.cap_to_binding(&ours, shorter.expires);
    let d = e.handle_message(&rebind, &ctx(&i, T0 + 200));
    assert_eq!(end_of(&d), shorter.expires);
    // A removal the database decided frees the address.
    assert!(e
        .apply_decided_change(&LeaseEffect::Remove(theirs, mac(1)), T0 + 300)
        .is_some());
    assert!(e.leases().all(|l| l.ip != theirs));
}
