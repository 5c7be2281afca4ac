//! One datagram to one decision: the engine's gate (relay trust, a store that
//! writes), the raw-packet peek, decode, the engine's decision, the reply's encoding
//! and destination.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio::net::UdpSocket;
use tracing::{debug, warn};

use super::outputs::{Action, Pending};
use super::report::{silent_report, timeline_report};
use super::{arp, probe};
use crate::dhcp::engine::reply::Destination;
use crate::dhcp::engine::{
    DnsmasqDirs, Engine, Inputs, Interface, Outcome, PacketContext, Refused, Reply, Responsibility,
};
use crate::dhcp::host_policy::HostPolicies;
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::peek::{self, Peek, PeekKind};
use crate::dhcp::responsibility::Responder;
use crate::dhcp::wire::{self};
use crate::mac::MacAddr;
use crate::store::{Change, StoreStatus};

pub(super) struct LoopState<'a> {
    pub(super) store: &'a StoreStatus,
    pub(super) interfaces: &'a [Interface],
    pub(super) metrics: &'a DhcpMetrics,
    pub(super) responder: Option<&'a Responder>,
    pub(super) owners: Option<&'a crate::owner::Resolver>,
    pub(super) policies: &'a HostPolicies,
    pub(super) timeline: &'a crate::timeline::Timeline,
    pub(super) port: u16,
    /// Encoded reply of the last `Action::Send`.
    pub(super) out: Vec<u8>,
}

impl LoopState<'_> {
    /// Decodes and decides one datagram. A request whose raw bytes already show that
    /// this member stays silent (another member's machine, another server's offer) is
    /// decided from its [`peek`] and never decoded, counted as the full path counts it.
    pub(super) fn handle(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        now: u64,
    ) -> Action {
        if let Some(p) = peek::peek(data) {
            return self.handle_peeked(engine, listener, socket, data, from, now, &p);
        }
        let msg = match wire::decode_request(data) {
            Ok(m) => m,
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(%from, len = data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        let mac = MacAddr::from_chaddr(msg.chaddr());
        use dhcproto::v4::MessageType as T;
        let discover = msg.opts().msg_type() == Some(T::Discover);
        if !self.admit(engine, msg.giaddr(), discover, listener, from) {
            return Action::Nothing;
        }
        // One span per packet (docs/style.md §8). At debug level: a span per datagram at the
        // default level would cost more than a tenth of the whole decision.
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = msg.xid(),
            mac = mac.map(tracing::field::display),
        );
        let _entered = span.enter();
        self.metrics.requests.inc(match msg.opts().msg_type() {
            Some(T::Discover) => "discover",
            Some(T::Request) => "request",
            Some(T::Decline) => "decline",
            Some(T::Release) => "release",
            Some(T::Inform) => "inform",
            _ => "other",
        });
        let responsibility = self
            .responder
            .map_or(Responsibility::Mine, |r| r.decide(&msg));
        let policy = mac.and_then(|m| self.policies.lookup(&m));
        let known = match (self.owners, mac) {
            (Some(o), Some(m)) if discover => o.knows(&m),
            _ => false,
        };
        let (tags, node_options) = match mac {
            Some(m) => self.policies.dnsmasq_for(&m),
            None => Default::default(),
        };
        let ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy,
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs {
                tags: &tags,
                options: &node_options,
            },
        };
        self.decide(engine, listener, socket, data, from, &msg, &ctx)
    }

    /// [`Self::handle`] for a request [`peek`] could read: the same checks and counters
    /// in the same order, and the full decode only when the answer may not be silence.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_peeked(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        now: u64,
        p: &Peek,
    ) -> Action {
        let discover = p.kind == PeekKind::Discover;
        if !self.admit(engine, p.giaddr, discover, listener, from) {
            return Action::Nothing;
        }
        self.metrics
            .requests
            .inc(if discover { "discover" } else { "request" });
        let responsibility = self
            .responder
            .map_or(Responsibility::Mine, |r| r.decide_for(&p.mac, p.secs));
        let policy = self.policies.lookup(&p.mac);
        let known = match self.owners {
            Some(o) if discover => o.knows(&p.mac),
            _ => false,
        };
        // The dnsmasq directories shape replies only: a silence never reads them.
        let mut ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy,
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs::default(),
        };
        if let Some(reason) = engine.handle_peeked(p, &ctx) {
            // Told to the timeline as `timeline_report` tells a silence.
            let what = if discover { "DISCOVER" } else { "REQUEST" };
            self.timeline.record(p.mac, silent_report(what, reason));
            self.metrics.outcome(&Outcome::Ignored(reason));
            debug!(iface = %ctx.interface.name, xid = p.xid, mac = %p.mac, reason = reason.as_str(), "decided from the raw packet");
            return Action::Nothing;
        }
        let msg = match wire::decode_request(data) {
            Ok(m) => m,
            // `peek` gives a peek only for what decodes; counted as a drop all the same.
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(%from, len = data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = p.xid,
            mac = %p.mac,
        );
        let _entered = span.enter();
        let (tags, node_options) = self.policies.dnsmasq_for(&p.mac);
        ctx.dnsmasq = DnsmasqDirs {
            tags: &tags,
            options: &node_options,
        };
        self.decide(engine, listener, socket, data, from, &msg, &ctx)
    }

    /// Whether a request goes on to be decided, as the engine's gate says
    /// (`dhcp::engine::gate`: a relayed request only from a trusted relay, a DISCOVER
    /// only while the store takes writes). A refusal is counted here.
    pub(super) fn admit(
        &self,
        engine: &Engine,
        giaddr: Ipv4Addr,
        discover: bool,
        listener: usize,
        from: SocketAddr,
    ) -> bool {
        // Relay agents send from the server port (RFC 2131 §4.1); a relayed request
        // from any other source is nobody's relay.
        let sender = match from {
            SocketAddr::V4(src) if src.port() == self.port => Some(*src.ip()),
            _ => None,
        };
        let inputs = Inputs {
            path: engine.relay_path(giaddr, sender, &self.interfaces[listener].name),
            store_writable: self.store.offers_fresh(),
        };
        match engine.admit(inputs, discover) {
            Ok(()) => true,
            Err(Refused::UntrustedRelay) => {
                self.metrics.untrusted_relay.inc();
                debug!(%from, "relayed packet from an untrusted source dropped");
                false
            }
            Err(Refused::StoreUnwritable) => {
                self.metrics.store_failing.inc();
                debug!("DISCOVER unanswered: the lease store fails writes or the shared store is unreachable");
                false
            }
        }
    }

    /// Runs the engine on a decoded request and turns its decision into an action.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decide(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        msg: &dhcproto::v4::Message,
        ctx: &PacketContext<'_>,
    ) -> Action {
        let decision = engine.handle_message(msg, ctx);
        let mac = MacAddr::from_chaddr(msg.chaddr());
        if let Some(mac) = mac {
            self.timeline.record(mac, timeline_report(msg, &decision));
        }
        self.metrics.outcome(&decision.outcome);
        let keep = |mac| {
            Box::new(probe::Kept {
                msg: msg.clone(),
                data: data.to_vec(),
                listener,
                from,
                mac,
                responsibility: ctx.responsibility,
                known: ctx.known,
            })
        };
        match (decision.outcome, mac) {
            (Outcome::Probe(ip), Some(mac)) => return Action::Probe(keep(mac), ip),
            (Outcome::Ignored(crate::dhcp::engine::IgnoreReason::Probing), Some(mac)) => {
                return Action::KeepNewest(keep(mac))
            }
            _ => {}
        }
        let to = decision.reply.and_then(|mut r| {
            echo_relay_information(data, &mut r);
            self.encode(r, listener, socket, from)
        });
        if decision.effects.is_empty() {
            return to.map_or(Action::Nothing, |to| Action::Send(listener, to));
        }
        Action::Commit(Pending {
            changes: decision.effects.into_iter().map(Change::Lease).collect(),
            listener,
            reply: to.map(|to| (self.out.clone(), to)),
        })
    }

    /// Decides a kept DISCOVER again once its probe ended, as it was first decided
    /// (responsibility and whether the owner knows the machine, from then; the
    /// operator's policy and the dnsmasq directories, from now).
    pub(super) fn redecide(
        &mut self,
        engine: &mut Engine,
        sockets: &[UdpSocket],
        kept: probe::Kept,
        now: u64,
    ) -> Action {
        let probe::Kept {
            msg,
            data,
            listener,
            from,
            mac,
            responsibility,
            known,
        } = kept;
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = msg.xid(),
            %mac,
        );
        let _entered = span.enter();
        let (tags, node_options) = self.policies.dnsmasq_for(&mac);
        let ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy: self.policies.lookup(&mac),
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs {
                tags: &tags,
                options: &node_options,
            },
        };
        self.decide(
            engine,
            listener,
            &sockets[listener],
            &data,
            from,
            &msg,
            &ctx,
        )
    }

    /// Encodes `reply` into `self.out`; returns where it goes.
    pub(super) fn encode(
        &mut self,
        reply: Reply,
        listener: usize,
        socket: &UdpSocket,
        from: SocketAddr,
    ) -> Option<SocketAddr> {
        match reply.encode(&mut self.out) {
            Err(e) => {
                warn!(error = %e, "could not encode reply");
                return None;
            }
            Ok(laid) if laid.dropped > 0 => {
                debug!(
                    dropped = laid.dropped,
                    "options left out: the client takes no more"
                );
            }
            Ok(_) => {}
        }
        let client_port = self.port.wrapping_add(1);
        let to = match reply.destination {
            Destination::Relay(ip) => SocketAddrV4::new(ip, self.port),
            Destination::Unicast(ip) => SocketAddrV4::new(ip, client_port),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port),
            Destination::Sender => return Some(from),
            Destination::UnicastNew(ip, mac) => {
                match arp::add_entry(socket, &self.interfaces[listener].name, ip, mac) {
                    Ok(()) => SocketAddrV4::new(ip, client_port),
                    Err(e) => {
                        // RFC 2131 §4.1: without an ARP entry, broadcast instead.
                        debug!(error = %e, "cannot add ARP entry; broadcasting");
                        SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port)
                    }
                }
            }
        };
        Some(SocketAddr::V4(to))
    }
}

/// The IPv4 source of a datagram (a v4-mapped one from a dual-stack socket), or
/// 0.0.0.0 when it has none.
fn source_v4(from: SocketAddr) -> Ipv4Addr {
    match from {
        SocketAddr::V4(a) => *a.ip(),
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

/// RFC 3046 §2.2: the relay agent information goes back exactly as the relay sent it.
/// The engine echoes the decoded option; this puts the request's own bytes (all its
/// option 82 instances, concatenated per RFC 3396) in its place, so sub-options are
/// neither reordered nor re-encoded.
fn echo_relay_information(request: &[u8], reply: &mut Reply) {
    use dhcproto::v4::{DhcpOption, OptionCode, UnknownOption};
    let code = OptionCode::RelayAgentInformation;
    if reply.message.opts().get(code).is_none() {
        return;
    }
    if let Some(raw) = wire::raw_option(request, u8::from(code)) {
        reply
            .message
            .opts_mut()
            .insert(DhcpOption::Unknown(UnknownOption::new(code, raw)));
    }
}
