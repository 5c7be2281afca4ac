//! The socket side of conflict probes (`engine::probe` decides which address needs one):
//! an ICMP Echo Request per probe on one raw socket (RFC 2131 §2.2, §3.1 step 2; ICMP
//! reaches relayed subnets, where ARP would not), the DISCOVER kept until an Echo Reply
//! arrives or the timeout passes. Nothing here blocks the DHCP loop: replies and
//! timeouts are collected when the loop looks, and the kept DISCOVER is decided again.
//! Without CAP_NET_RAW, Linux's unprivileged ICMP datagram socket (`SOCK_DGRAM`,
//! `IPPROTO_ICMP`, allowed by `net.ipv4.ping_group_range`) does the same: the kernel
//! then chooses the identifier and hands over only the replies that carry it.
//!
//! The network may be hostile. A reply counts only when its identifier (random per
//! process), sequence number, payload and source address all match a probe in flight;
//! anything else is counted and ignored. A forged reply can only make this member skip
//! an address, which is the safe direction.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use crate::dhcp::engine::{ProbeResult, Responsibility};
use crate::dhcp::metrics::DhcpMetrics;
use crate::mac::MacAddr;

/// Echo Request and Reply (RFC 792).
const ECHO_REQUEST: u8 = 8;
const ECHO_REPLY: u8 = 0;
/// The payload every probe carries and its reply must echo.
const PAYLOAD: &[u8; 16] = b"shardboot probe\0";
/// Linux `ICMP_FILTER` (level `SOL_RAW`): a bitmask of the ICMP types *not* delivered.
const ICMP_FILTER: libc::c_int = 1;

/// Why probing is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Neither a raw ICMP socket (root or CAP_NET_RAW) nor an ICMP datagram socket (a
    /// group in `net.ipv4.ping_group_range`) could be opened.
    #[error("opening an ICMP socket for conflict probes (needs CAP_NET_RAW, or this group in net.ipv4.ping_group_range): {0}")]
    Socket(std::io::Error),
}

/// A DISCOVER waiting for the probe of the address chosen for its client, with what
/// deciding it again takes.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) msg: dhcproto::v4::Message,
    pub(super) data: Vec<u8>,
    pub(super) listener: usize,
    pub(super) from: SocketAddr,
    pub(super) mac: MacAddr,
    pub(super) responsibility: Responsibility,
    pub(super) known: bool,
}

/// A probe that ended, and the DISCOVER to decide again.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) ip: Ipv4Addr,
    pub(super) result: ProbeResult,
    pub(super) kept: Box<Kept>,
}

#[derive(Debug)]
struct InFlight {
    ip: Ipv4Addr,
    deadline: Instant,
    kept: Box<Kept>,
}

#[derive(Debug)]
enum State {
    /// Not opened yet: opened at the first probe (a member that never inherits an
    /// address never holds a raw socket, nor wakes for other hosts' ICMP).
    Closed,
    Open {
        fd: AsyncFd<Socket>,
        ident: u16,
        /// An ICMP datagram socket: replies come without the IPv4 header.
        dgram: bool,
    },
    /// Could not be opened; logged once, every later probe ends "clear" at once.
    Failed,
}

/// Probes in flight on one raw ICMP socket.
#[derive(Debug)]
pub(super) struct Prober {
    timeout: Duration,
    state: State,
    next_seq: u16,
    in_flight: HashMap<u16, InFlight>,
    buf: Vec<u8>,
}

impl Prober {
    /// Probes that wait `timeout` for an answer.
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            state: State::Closed,
            next_seq: 0,
            in_flight: HashMap::new(),
            buf: vec![0; 1500],
        }
    }

    /// Whether the socket could not be opened (the engine then stops asking).
    pub(super) fn unavailable(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    /// Sends an Echo Request to `ip` for `kept`'s client. When it cannot be sent the
    /// probe ends at once, clear: an address is never withheld for a probe that could
    /// not be made.
    pub(super) fn start(
        &mut self,
        ip: Ipv4Addr,
        kept: Box<Kept>,
        metrics: &DhcpMetrics,
    ) -> Result<(), Ended> {
        if matches!(self.state, State::Closed) {
            self.state = match open() {
                Ok(state) => state,
                Err(e) => {
                    warn!(error = %e, "conflict probes disabled: addresses are offered unprobed");
                    State::Failed
                }
            };
        }
        let State::Open { fd, ident, .. } = &self.state else {
            return Err(Ended::clear(ip, kept));
        };
        self.next_seq = self.next_seq.wrapping_add(1);
        let seq = self.next_seq;
        let packet = echo_request(*ident, seq);
        let to = SockAddr::from(SocketAddrV4::new(ip, 0));
        if let Err(e) = fd.get_ref().send_to(&packet, &to) {
            debug!(%ip, error = %e, "conflict probe not sent; offering without it");
            return Err(Ended::clear(ip, kept));
        }
        metrics.probes.inc();
        debug!(%ip, mac = %kept.mac, seq, "conflict probe sent");
        if let Some(old) = self.in_flight.insert(
            seq,
            InFlight {
                ip,
                deadline: Instant::now() + self.timeout,
                kept,
            },
        ) {
            // 65,536 probes within one timeout: the oldest ends unanswered.
            return Err(Ended::clear(old.ip, old.kept));
        }
        Ok(())
    }

    /// A retransmitted DISCOVER from a client whose probe is in flight: answered in
    /// place of the one kept (the newest xid is the one it waits for). `false`: no
    /// probe of that client is in flight.
    pub(super) fn keep_newest(&mut self, kept: Box<Kept>) -> bool {
        match self.in_flight.values_mut().find(|f| f.kept.mac == kept.mac) {
            Some(f) => {
                f.kept = kept;
                true
            }
            None => false,
        }
    }

    /// When the next probe times out.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.in_flight.values().map(|f| f.deadline).min()
    }

    /// Probes that ended by `now`: replies already received, then timeouts. Never waits.
    pub(super) fn poll(&mut self, now: Instant, metrics: &DhcpMetrics) -> Vec<Ended> {
        let mut ended = Vec::new();
        if self.in_flight.is_empty() {
            return ended;
        }
        if let State::Open { fd, ident, dgram } = &self.state {
            loop {
                match read_reply(fd.get_ref(), *dgram, &mut self.buf) {
                    Ok(parsed) => {
                        ended.extend(take_parsed(&mut self.in_flight, *ident, parsed, metrics));
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let late: Vec<u16> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in late {
            if let Some(f) = self.in_flight.remove(&seq) {
                ended.push(Ended::clear(f.ip, f.kept));
            }
        }
        ended
    }

    /// Waits until the socket has replies and takes them; never ends while no socket
    /// is open.
    pub(super) async fn replies(&mut self, metrics: &DhcpMetrics) -> Vec<Ended> {
        let Self {
            state,
            in_flight,
            buf,
            ..
        } = self;
        let State::Open { fd, ident, dgram } = state else {
            return std::future::pending().await;
        };
        let mut ended = Vec::new();
        let Ok(mut guard) = fd.readable().await else {
            return std::future::pending().await;
        };
        loop {
            match guard.try_io(|s| read_reply(s.get_ref(), *dgram, buf)) {
                Ok(Ok(parsed)) => ended.extend(take_parsed(in_flight, *ident, parsed, metrics)),
                Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
                // WouldBlock clears the readiness; any other error ends this round.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        ended
    }
}

impl Ended {
    fn clear(ip: Ipv4Addr, kept: Box<Kept>) -> Self {
        Self {
            ip,
            result: ProbeResult::Clear,
            kept,
        }
    }
}

fn open() -> Result<State, ProbeError> {
    let socket = match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)) {
        Ok(s) => s,
        // No CAP_NET_RAW (a container without it, a non-root user).
        Err(e) if e.kind() == ErrorKind::PermissionDenied => return open_dgram(),
        Err(e) => return Err(ProbeError::Socket(e)),
    };
    socket.set_nonblocking(true).map_err(ProbeError::Socket)?;
    // Only Echo Replies wake the loop; without the filter (not Linux?) every ICMP
    // packet is read and ignored.
    let filter: u32 = !(1u32 << ECHO_REPLY);
    // SAFETY: a valid socket, and a pointer to a u32 of the length given.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            libc::SOL_RAW,
            ICMP_FILTER,
            std::ptr::from_ref(&filter).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        debug!(error = %std::io::Error::last_os_error(), "ICMP_FILTER not set");
    }
    // SAFETY: the socket owns its descriptor, and nothing closes or replaces it while
    // the `AsyncFd` holds it.
    let fd = unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) }
        .map_err(|e| ProbeError::Socket(e.into()))?;
    let mut ident = [0u8; 2];
    // Unpredictable, so a host off the path cannot forge a matching reply; the clock
    // if the system's generator fails.
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut ident).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        ident = (t as u16).to_be_bytes();
    }
    Ok(State::Open {
        fd,
        ident: u16::from_be_bytes(ident),
        dgram: false,
    })
}

/// The unprivileged ICMP datagram socket. Bound to port 0, the kernel picks the
/// identifier (the "port") and delivers only the Echo Replies carrying it; it sets the
/// identifier and checksum of what is sent.
fn open_dgram() -> Result<State, ProbeError> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4))
        .map_err(ProbeError::Socket)?;
    socket.set_nonblocking(true).map_err(ProbeError::Socket)?;
    socket
        .bind(&SockAddr::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
        .map_err(ProbeError::Socket)?;
    let ident = socket
        .local_addr()
        .map_err(ProbeError::Socket)?
        .as_socket_ipv4()
        .map_or(0, |a| a.port());
    // SAFETY: as in `open`.
    let fd = unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) }
        .map_err(|e| ProbeError::Socket(e.into()))?;
    // Once per process: the operator learns why no raw socket is held.
    tracing::info!(
        ident,
        "conflict probes on an unprivileged ICMP datagram socket (no CAP_NET_RAW)"
    );
    Ok(State::Open {
        fd,
        ident,
        dgram: true,
    })
}

/// Reads one datagram: `(source, identifier, sequence)` when it is an Echo Reply
/// carrying the probe's payload, `None` for anything else. A raw socket delivers the
/// IPv4 header with it; a datagram socket only the ICMP message, the source beside it.
fn read_reply(
    socket: &Socket,
    dgram: bool,
    buf: &mut [u8],
) -> std::io::Result<Option<(Ipv4Addr, u16, u16)>> {
    if !dgram {
        let mut s = socket;
        let n = s.read(buf)?;
        return Ok(parse_reply(&buf[..n]));
    }
    let (n, from) = nix::sys::socket::recvfrom::<nix::sys::socket::SockaddrIn>(
        std::os::fd::AsRawFd::as_raw_fd(socket),
        buf,
    )
    .map_err(std::io::Error::from)?;
    Ok(from.and_then(|a| {
        let (ident, seq) = parse_echo_reply(&buf[..n])?;
        Some((a.ip(), ident, seq))
    }))
}

/// An ICMP Echo Request (RFC 792) with `ident`, `seq` and [`PAYLOAD`].
fn echo_request(ident: u16, seq: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + PAYLOAD.len());
    p.extend_from_slice(&[ECHO_REQUEST, 0, 0, 0]);
    p.extend_from_slice(&ident.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(PAYLOAD);
    let sum = checksum(&p);
    p[2..4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// The Internet checksum (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Echo Reply read from the raw socket (IPv4 header included): its source,
/// identifier and sequence number, or `None` for anything else.
fn parse_reply(datagram: &[u8]) -> Option<(Ipv4Addr, u16, u16)> {
    let ihl = usize::from(*datagram.first()? & 0x0f) * 4;
    if datagram[0] >> 4 != 4 || ihl < 20 || datagram.get(9) != Some(&1) {
        return None;
    }
    let src = Ipv4Addr::new(*datagram.get(12)?, datagram[13], datagram[14], datagram[15]);
    let (ident, seq) = parse_echo_reply(datagram.get(ihl..)?)?;
    Some((src, ident, seq))
}

/// An ICMP Echo Reply carrying [`PAYLOAD`]: its identifier and sequence number.
fn parse_echo_reply(icmp: &[u8]) -> Option<(u16, u16)> {
    if icmp.len() < 8 || icmp[0] != ECHO_REPLY || icmp[1] != 0 || checksum(icmp) != 0 {
        return None;
    }
    if icmp.get(8..8 + PAYLOAD.len()) != Some(&PAYLOAD[..]) {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

/// The probe a raw socket's `datagram` answers ([`take_parsed`]).
#[cfg(test)]
fn take_reply(
    in_flight: &mut HashMap<u16, InFlight>,
    ident: u16,
    datagram: &[u8],
    metrics: &DhcpMetrics,
) -> Option<Ended> {
    take_parsed(in_flight, ident, parse_reply(datagram), metrics)
}

/// The probe an Echo Reply (`read_reply`'s) answers, if it matches one in flight: the
/// identifier, sequence number and the probed address as its source. Other Echo
/// Replies are counted.
fn take_parsed(
    in_flight: &mut HashMap<u16, InFlight>,
    ident: u16,
    parsed: Option<(Ipv4Addr, u16, u16)>,
    metrics: &DhcpMetrics,
) -> Option<Ended> {
    let matched = parsed
        .filter(|(src, id, seq)| *id == ident && in_flight.get(seq).is_some_and(|f| f.ip == *src));
    let Some((_, _, seq)) = matched else {
        // Any Echo Reply on the host reaches a raw socket (another process's ping too).
        metrics.probe_unmatched.inc();
        return None;
    };
    let f = in_flight.remove(&seq)?;
    Some(Ended {
        ip: f.ip,
        result: ProbeResult::Answered,
        kept: f.kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply a host sends to `request`: type 0, from `src`, in an IPv4 header.
    fn reply_to(request: &[u8], src: Ipv4Addr) -> Vec<u8> {
        let mut icmp = request.to_vec();
        icmp[0] = ECHO_REPLY;
        icmp[2..4].copy_from_slice(&[0, 0]);
        let sum = checksum(&icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        ip.extend_from_slice(&src.octets());
        ip.extend_from_slice(&[192, 0, 2, 1]);
        ip.extend_from_slice(&icmp);
        ip
    }

    #[test]
    fn an_echo_request_carries_a_valid_checksum_and_its_reply_parses() {
        let req = echo_request(0xbeef, 7);
        assert_eq!(req[0], ECHO_REQUEST);
        assert_eq!(checksum(&req), 0, "checksum over the whole message is zero");
        let src = Ipv4Addr::new(198, 18, 1, 5);
        assert_eq!(parse_reply(&reply_to(&req, src)), Some((src, 0xbeef, 7)));
    }

    #[test]
    fn only_a_reply_matching_identifier_sequence_and_source_ends_a_probe() {
        let metrics = DhcpMetrics::default();
        let ip = Ipv4Addr::new(198, 18, 1, 5);
        let kept = || {
            let z = Ipv4Addr::UNSPECIFIED;
            Box::new(Kept {
                msg: dhcproto::v4::Message::new(z, z, z, z, &[2, 0, 0, 0, 0, 1]),
                data: Vec::new(),
                listener: 0,
                from: SocketAddr::from((z, 68)),
                mac: MacAddr([2, 0, 0, 0, 0, 1]),
                responsibility: Responsibility::Mine,
                known: false,
            })
        };
        let mut in_flight = HashMap::new();
        in_flight.insert(
            7,
            InFlight {
                ip,
                deadline: Instant::now(),
                kept: kept(),
            },
        );
        let forged = [
            reply_to(&echo_request(0xbeee, 7), ip), // identifier
            reply_to(&echo_request(0xbeef, 8), ip), // sequence
            reply_to(&echo_request(0xbeef, 7), Ipv4Addr::new(198, 18, 1, 6)), // source
            {
                let mut bad = reply_to(&echo_request(0xbeef, 7), ip);
                let last = bad.len() - 1;
                bad[last] ^= 1; // payload and checksum
                bad
            },
            vec![0x45, 0, 0],
        ];
        for d in &forged {
            assert!(take_reply(&mut in_flight, 0xbeef, d, &metrics).is_none());
        }
        assert_eq!(metrics.probe_unmatched.get(), forged.len() as u64);
        assert_eq!(in_flight.len(), 1, "a forged reply ends no probe");
        let real = reply_to(&echo_request(0xbeef, 7), ip);
        let ended = take_reply(&mut in_flight, 0xbeef, &real, &metrics).unwrap();
        assert_eq!((ended.ip, ended.result), (ip, ProbeResult::Answered));
        assert!(in_flight.is_empty());
        // The same reply again (a duplicate) matches nothing.
        assert!(take_reply(&mut in_flight, 0xbeef, &real, &metrics).is_none());
    }
}
