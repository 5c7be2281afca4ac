//! The DHCPv6 server loop: receive on each served interface, check and decode
//! (`dhcp6::wire`), find the client's MAC and this member's responsibility, let the
//! engine decide, make its lease changes durable through the committer (the same group
//! commit as v4), then send the reply, wrapped back in the relay layers it came in.
//! One task owns the engine; decisions are made in arrival order.

mod control;
mod report;
pub mod socket;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use dhcproto::v6::{DhcpOption, Message, OptionCode};
use dhcproto::{Encodable, Encoder};
use tokio::net::UdpSocket;
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
use crate::udp_batch::Counted;
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
    socket: Arc<UdpSocket>,
    /// The same socket for the committer's thread, which sends replies once durable.
    sender: Arc<std::net::UdpSocket>,
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
    for i in interfaces {
        let std_socket = bind6(&i, config.dhcp6.port, config.dhcp.receive_buffer_kib)?;
        let io = |source| Server6Error::Io {
            interface: i.name.clone(),
            source,
        };
        let sender = Arc::new(std_socket.try_clone().map_err(io)?);
        let socket = Arc::new(UdpSocket::from_std(std_socket).map_err(io)?);
        info!(interface = %i.name, port = config.dhcp6.port, duid = %hex(&duid), "DHCPv6 listening");
        listeners.push(Listener {
            interface: i,
            socket,
            sender,
        });
    }
    let now = crate::clock::unix_now();
    let leases = std::mem::take(&mut parts.leases);
    let (mut engine, held) = Engine6::load(
        Engine6Settings::of(&config),
        duid,
        leases,
        &parts.set_aside,
        now,
    );
    for h in held {
        warn!(ip = %h.ip, until = h.until, "IPv6 address held back: its lease record was set aside");
    }
    let (withdraw_tx, mut withdrawals) = tokio::sync::mpsc::unbounded_channel::<Withdrawal>();
    let mut control = parts.control.take().map(|c| c.0);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Datagram>(4096);
    let mut readers = tokio::task::JoinSet::new();
    for (k, l) in listeners.iter().enumerate() {
        let (socket, tx, name) = (l.socket.clone(), tx.clone(), l.interface.name.clone());
        readers.spawn(async move {
            let mut buf = vec![0u8; wire::MAX_DATAGRAM + 1];
            let mut space = crate::sockopt::pktinfo_space();
            loop {
                let (n, from, arrived) =
                    crate::sockopt::recv_pktinfo(&socket, &mut buf, &mut space)
                        .await
                        .map_err(|source| Server6Error::Io {
                            interface: name.clone(),
                            source,
                        })?;
                let SocketAddr::V6(from) = from else { continue };
                let to = match arrived {
                    Some(crate::sockopt::Arrived::V6 { destination, .. }) => destination,
                    _ => Ipv6Addr::UNSPECIFIED,
                };
                if tx.send((k, buf[..n].to_vec(), from, to)).await.is_err() {
                    return Ok(());
                }
            }
        });
    }
    drop(tx);
    let mut roster = parts.roster.as_ref().map(|r| r.subscribe());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut kernel_drops = vec![0u32; listeners.len()];
    let metrics = parts.metrics.clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(done) = readers.join_next() => {
                if let Ok(Err(e)) = done { return Err(e) }
            }
            _ = tick.tick() => {
                // The kernel's own drops (a full receive buffer), each socket's count
                // since the last tick.
                for (seen, l) in kernel_drops.iter_mut().zip(&listeners) {
                    if let Some(now) = crate::sockopt::receive_drops(&*l.socket) {
                        metrics.dropped.add("receive_buffer_full", u64::from(now.wrapping_sub(*seen)));
                        *seen = now;
                    }
                }
                engine.handle_tick(crate::clock::unix_now());
                metrics.leases.set(engine.leases().count() as u64);
            }
            Some(()) = changed(&mut roster) => {
                if let Some(r) = &mut roster {
                    let list = r.borrow_and_update().list.clone();
                    engine.change_members(list);
                }
            }
            Some(cmd) = next_control(&mut control) => {
                control::apply(&mut engine, cmd, &parts.committer, crate::clock::unix_now());
            }
            Some((ours, holder)) = withdrawals.recv() => {
                withdraw(&mut engine, &ours, &holder, &parts.committer);
            }
            got = rx.recv() => {
                let Some((k, bytes, from, to)) = got else { break };
                let l = &listeners[k];
                handle(&mut engine, l, &bytes, (from, to), &parts, &withdraw_tx);
            }
        }
    }
    // Whatever was queued is durable and answered before the store closes.
    let _ = parts.committer.commit(Vec::new()).await;
    Ok(())
}

async fn next_control(
    control: &mut Option<tokio::sync::mpsc::Receiver<crate::dhcp6::control::Control6>>,
) -> Option<crate::dhcp6::control::Control6> {
    match control {
        Some(c) => c.recv().await,
        None => std::future::pending().await,
    }
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

/// A received datagram: the listener's index, the bytes, its source and destination.
type Datagram = (usize, Vec<u8>, SocketAddrV6, Ipv6Addr);

async fn changed(
    roster: &mut Option<tokio::sync::watch::Receiver<Arc<crate::owner::roster::RosterView>>>,
) -> Option<()> {
    match roster {
        Some(r) => r.changed().await.ok(),
        None => std::future::pending().await,
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
    l: &Listener,
    bytes: &[u8],
    (from, destination): (SocketAddrV6, Ipv6Addr),
    parts: &Parts6,
    withdraw: &tokio::sync::mpsc::UnboundedSender<Withdrawal>,
) {
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
    let Some((bytes, to)) = encode(&reply, &request.hops, from) else {
        warn!(kind = ?reply.msg_type(), "DHCPv6 reply could not be encoded");
        return;
    };
    let sender = l.sender.clone();
    let m = metrics.clone();
    if effects.is_empty() {
        count_send(sender.send_to(&bytes, to), to, &m);
        return;
    }
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

fn count_send(r: std::io::Result<usize>, to: SocketAddrV6, metrics: &Dhcp6Metrics) {
    metrics.counted(to.into(), r.as_ref().map(|_| ()));
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
fn encode(
    reply: &Message,
    hops: &[relay::RelayHop],
    from: SocketAddrV6,
) -> Option<(Vec<u8>, SocketAddrV6)> {
    let mut inner = Vec::with_capacity(512);
    reply.encode(&mut Encoder::new(&mut inner)).ok()?;
    if hops.is_empty() {
        return Some((
            inner,
            SocketAddrV6::new(*from.ip(), CLIENT_PORT, 0, from.scope_id()),
        ));
    }
    let mut out = Vec::with_capacity(inner.len() + 64 * hops.len());
    relay::wrap(hops, &inner, &mut out);
    Some((out, SocketAddrV6::new(*from.ip(), 547, 0, from.scope_id())))
}
