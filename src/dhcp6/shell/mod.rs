//! The DHCPv6 server loop: receive on each served interface, check and decode
//! (`dhcp6::wire`), find the client's MAC and this member's responsibility, let the
//! engine decide, make its lease changes durable through the committer (the same group
//! commit as v4), then send the reply, wrapped back in the relay layers it came in.
//! One thread owns the engine (`run_loop`); decisions are made in arrival order.

mod control;
mod report;
mod run_loop;
pub mod socket;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::Arc;

use dhcproto::v6::{DhcpOption, Message, OptionCode};
use dhcproto::{Encodable, Encoder};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::client_mac::{client_mac, Clues};
use super::engine::{Arrival, Context6, Decision6, Engine6, Engine6Settings};
use super::metrics::Dhcp6Metrics;
use super::relay;
use super::wire;
use crate::config::Config;
use crate::dhcp::engine::{Inputs, Refused, Responsibility};
use crate::dhcp::responsibility::Responder;
pub use crate::dhcp6::control::{Control6Receiver, Dhcp6Handle};
use crate::mac::MacAddr;
use crate::store::{Change, Committer, Lease6, StoreError};
use socket::{
    bind6, host_addresses6, interface_mac, resolve_interfaces6, Interface6, Socket6Error,
};

/// RFC 8415 §7.2: clients listen on 546.
const CLIENT_PORT: u16 = 546;

/// Errors that stop the DHCPv6 server.
#[derive(Debug, thiserror::Error)]
pub enum Server6Error {
    /// Interfaces or sockets.
    #[error(transparent)]
    Socket(#[from] Socket6Error),
    /// The server DUID could not be made durable.
    #[error("dhcp6: storing the server DUID: {0}")]
    Duid(String),
    /// The other members' leases could not be made durable here.
    #[error("dhcp6: storing the other members' leases: {0}")]
    PeerLeases(String),
    /// The engine's thread could not be started, or panicked.
    #[error("dhcp6: the engine thread: {0}")]
    Thread(std::io::Error),
    /// A socket failed while serving.
    #[error("dhcp6 socket on {interface}: {source}")]
    Io {
        /// Interface name.
        interface: String,
        /// OS error.
        source: std::io::Error,
    },
}

/// What the DHCPv6 server needs from the rest of shardboot.
#[derive(Debug)]
pub struct Parts6 {
    /// The v6 leases and the DUID read from the store at start.
    pub leases: Vec<Lease6>,
    /// The server DUID, if one was stored.
    pub duid: Option<Vec<u8>>,
    /// Addresses whose records did not decode: held back for a longest lease, since
    /// who holds them cannot be read.
    pub set_aside: Vec<Ipv6Addr>,
    /// The store's committer (shared with v4).
    pub committer: Committer,
    /// Whether the store takes writes (the local one, and the shared one if any).
    pub store: Arc<crate::store::StoreMetrics>,
    /// This member's responsibility for a MAC (`None`: a single instance).
    pub responder: Option<Responder>,
    /// Roster changes (members from Ironic or a file), to reshare the ranges.
    pub roster: Option<Arc<crate::owner::roster::Roster>>,
    /// Run-time allow/deny and the followed hosts directory (shared with v4).
    pub policies: Arc<crate::dhcp::host_policy::HostPolicies>,
    /// Counters.
    pub metrics: Arc<Dhcp6Metrics>,
    /// Bindings the shared lease store decided (other members' writes).
    pub control: Option<Control6Receiver>,
    /// Every machine's timeline, told of each decision for a client with a MAC.
    pub timeline: Arc<crate::timeline::Timeline>,
}

/// A lease the shared store refused (ours, the holder's), to withdraw in the server
/// loop.
type Withdrawal = (Box<Lease6>, Box<Lease6>);

struct Listener {
    interface: Interface6,
    /// The listener's socket for the committer's thread, which sends replies once
    /// durable (the engine loop reads and sends on its own handle of it).
    sender: Arc<std::net::UdpSocket>,
}

/// What one datagram's handling works with besides the engine.
struct Turn<'a> {
    listener: &'a Listener,
    parts: &'a Parts6,
    withdraw: &'a tokio::sync::mpsc::UnboundedSender<Withdrawal>,
    /// Replies that need nothing stored, sent once the socket's burst is handled.
    outbox: &'a mut crate::udp_batch::Outbox,
    encoded: &'a mut Encoded,
}

/// Buffers the replies are encoded into, kept from one datagram to the next.
#[derive(Default)]
struct Encoded {
    message: Vec<u8>,
    relayed: Vec<u8>,
}

/// Serves DHCPv6 until `shutdown`.
pub async fn run(
    config: Arc<Config>,
    mut parts: Parts6,
    shutdown: CancellationToken,
) -> Result<(), Server6Error> {
    let host = host_addresses6()?;
    let interfaces = resolve_interfaces6(&config, &host)?;
    for i in config.subnets6_out_of_reach(&host) {
        warn!(subnet6 = %config.subnets6[i].network, "no interface of this host is on this subnet6 and dhcp.relays names no IPv6 relay: its relayed clients are dropped; name the relays in dhcp.relays");
    }
    let duid = match (config.dhcp6.server_duid.clone(), parts.duid.take()) {
        // The operator's choice wins over the stored DUID (RFC 8415 §11: it should not
        // change; when it does, clients reach this server again by Rebind, §18.2.5).
        (Some(chosen), stored) => {
            if let Some(old) = stored.filter(|s| *s != chosen) {
                info!(old = %hex(&old), new = %hex(&chosen), "dhcp6.server_duid replaces the DUID kept in the store");
            }
            chosen
        }
        (None, Some(d)) => d,
        (None, None) => {
            let mut random = [0u8; 16];
            let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random);
            let mac = interfaces.iter().find_map(|i| interface_mac(&i.name));
            let d = super::duid::make(mac, crate::clock::unix_now(), random);
            parts
                .committer
                .commit(vec![Change::ServerDuid(d.clone())])
                .await
                .map_err(|e| Server6Error::Duid(e.to_string()))?;
            d
        }
    };
    let mut listeners = Vec::new();
    let mut sockets = Vec::new();
    for i in interfaces {
        let std_socket = bind6(&i, config.dhcp6.port, config.dhcp.receive_buffer_kib)?;
        let sender = Arc::new(std_socket.try_clone().map_err(|source| Server6Error::Io {
            interface: i.name.clone(),
            source,
        })?);
        info!(interface = %i.name, port = config.dhcp6.port, duid = %hex(&duid), "DHCPv6 listening");
        listeners.push(Listener {
            interface: i,
            sender,
        });
        sockets.push(std_socket);
    }
    let now = crate::clock::unix_now();
    let leases = std::mem::take(&mut parts.leases);
    let (engine, held) = Engine6::load(
        Engine6Settings::of(&config),
        duid,
        leases,
        &parts.set_aside,
        now,
    );
    for h in held {
        warn!(ip = %h.ip, until = h.until, "IPv6 address held back: its lease record was set aside");
    }
    let l = run_loop::Loop {
        listeners,
        sockets,
        parts,
    };
    crate::engine_thread::run_on_own_thread("dhcp6-engine", move || {
        run_loop::engine_loop(engine, l, shutdown)
    })
    .await
    .map_err(Server6Error::Thread)?
}

/// Withdraws a lease the shared store refused (never acknowledged: its reply was
/// withheld).
fn withdraw(engine: &mut Engine6, ours: &Lease6, holder: &Lease6, committer: &Committer) {
    warn!(ip = %ours.ip, mac = ?ours.mac, holder = ?holder.mac,
        "the shared lease store holds the IPv6 address for another client: lease withdrawn, not acknowledged");
    if let Some(effect) = engine.withdraw(ours, holder, crate::clock::unix_now()) {
        // Stored here only: the database holds the other client's row.
        let _ = committer.submit(vec![Change::Replica6(effect)], |_| {});
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A stand-in MAC for a client that shows none (a DUID-UUID from a privacy address),
/// so the hash bucket still names one member for it: FNV-1a of the DUID, marked
/// locally administered.
fn duid_bucket(duid: &[u8]) -> MacAddr {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in duid {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    MacAddr([(b[0] | 0x02) & 0xfe, b[1], b[2], b[3], b[4], b[5]])
}

fn handle(
    engine: &mut Engine6,
    turn: Turn<'_>,
    bytes: &[u8],
    (from, destination): (SocketAddrV6, Ipv6Addr),
) {
    let Turn {
        listener: l,
        parts,
        withdraw,
        outbox,
        encoded,
    } = turn;
    let metrics = &parts.metrics;
    let (responder, committer) = (parts.responder.as_ref(), &parts.committer);
    metrics.received.inc();
    let request = match wire::decode(bytes) {
        Ok(r) => r,
        Err(why) => {
            metrics.dropped.inc(why.as_str());
            debug!(from = %from.ip(), reason = why.as_str(), "DHCPv6 datagram dropped");
            return;
        }
    };
    let msg = &request.message;
    let inputs = Inputs {
        path: engine.relay_path(&request.hops, *from.ip(), &l.interface.name),
        store_writable: parts.store.status.offers_fresh(),
    };
    match engine.admit(inputs, msg.msg_type()) {
        Ok(()) => {}
        // RFC 8415 §22: a Relay-forward's link-address and Interface-Id choose the
        // client's subnet; from a sender no `dhcp.relays` entry names, they are not
        // believed, and the client inside gets no answer.
        Err(Refused::UntrustedRelay) => {
            metrics.dropped.inc("untrusted_relay");
            debug!(from = %from.ip(), "DHCPv6 relayed message from an untrusted source dropped");
            return;
        }
        Err(Refused::StoreUnwritable) => {
            // No Advertise that could never be answered with a Reply, as v4 makes no
            // OFFER (`dhcp::engine::gate`).
            metrics.dropped.inc("store_unavailable");
            debug!(from = %from.ip(), "Solicit unanswered: the lease store fails writes or the shared store is unreachable");
            return;
        }
    }
    let duid = match msg.opts().get(OptionCode::ClientId) {
        Some(DhcpOption::ClientId(id)) => Some(id.as_slice()),
        _ => None,
    };
    let innermost = request.hops.last();
    let clues = Clues {
        option_79: innermost.and_then(|h| h.client_link_layer.as_deref()),
        source: request.hops.is_empty().then_some(*from.ip()),
        duid,
    };
    let found = client_mac(&clues);
    let mac = found.map(|(m, _)| m);
    let responsibility = match responder {
        None => Responsibility::Mine,
        Some(r) => {
            let who = mac
                .or_else(|| duid.map(duid_bucket))
                .unwrap_or(MacAddr([0; 6]));
            // RFC 8415 §21.9: hundredths of a second; 0xffff is "longer than that".
            let secs = match msg.opts().get(OptionCode::ElapsedTime) {
                Some(DhcpOption::ElapsedTime(t)) => (t / 100).min(u16::MAX / 100),
                _ => 0,
            };
            r.decide_for(&who, secs)
        }
    };
    let ctx = Context6 {
        arrival: Arrival {
            interface: &l.interface.name,
            addresses: &l.interface.addresses,
            destination,
        },
        mac,
        responsibility,
        policy: mac.and_then(|m| parts.policies.lookup(&m)),
        now: crate::clock::unix_now(),
    };
    // Degraded mode follows the shared store (never down without one).
    engine.set_shared_store_up(!parts.store.status.shared_is_down());
    let decision = engine.handle_message(msg, &request.hops, &ctx);
    metrics.outcome(&decision.outcome);
    if let Some((mac, via)) = found {
        parts
            .timeline
            .record(mac, report::report(msg, &decision, via));
    }
    let Decision6 { reply, effects, .. } = decision;
    let Some(reply) = reply else { return };
    let Some((bytes, to)) = encode(&reply, &request.hops, from, encoded) else {
        warn!(kind = ?reply.msg_type(), "DHCPv6 reply could not be encoded");
        return;
    };
    if effects.is_empty() {
        outbox.push(to.into(), bytes);
        return;
    }
    let bytes = bytes.to_vec();
    let sender = l.sender.clone();
    let m = metrics.clone();
    let changes = effects.into_iter().map(Change::Lease6).collect();
    let withdraw = withdraw.clone();
    // Sent by the committer with the flush's other replies (udp_batch).
    let reply = crate::store::Reply {
        socket: sender,
        counted: m.clone(),
        to: to.into(),
        bytes,
    };
    let queued = committer.submit_with_reply(changes, Some(reply), move |r| match r {
        Ok(()) => {}
        // Durable here, but the shared store holds the address for another client: no
        // reply, and the lease is withdrawn; the client sends again and gets another
        // address.
        Err(StoreError::HeldByAnother6 { ours, holder }) => {
            m.dropped.inc("store_refused");
            let _ = withdraw.send((ours.clone(), holder.clone()));
        }
        // Not durable: no reply; the client sends again.
        Err(e) => {
            m.dropped.inc("store_failed");
            warn!(error = %e, "DHCPv6 lease not durable; reply withheld");
        }
    });
    if queued.is_err() {
        metrics.dropped.inc("queue_full");
    }
}

impl crate::udp_batch::Counted for Dhcp6Metrics {
    fn counted(&self, _: SocketAddr, result: Result<(), &std::io::Error>) {
        match result {
            Ok(()) => self.sent.inc(),
            Err(_) => self.send_errors.inc(),
        }
    }
}

/// The datagram to send and where: to a client on the link, its address on port 546;
/// through relays, a Relay-reply to the relay that sent the Relay-forward, on port 547
/// (RFC 8415 §19.3).
fn encode<'a>(
    reply: &Message,
    hops: &[relay::RelayHop],
    from: SocketAddrV6,
    into: &'a mut Encoded,
) -> Option<(&'a [u8], SocketAddrV6)> {
    into.message.clear();
    reply.encode(&mut Encoder::new(&mut into.message)).ok()?;
    if hops.is_empty() {
        let to = SocketAddrV6::new(*from.ip(), CLIENT_PORT, 0, from.scope_id());
        return Some((&into.message, to));
    }
    into.relayed.clear();
    relay::wrap(hops, &into.message, &mut into.relayed);
    Some((
        &into.relayed,
        SocketAddrV6::new(*from.ip(), 547, 0, from.scope_id()),
    ))
}
