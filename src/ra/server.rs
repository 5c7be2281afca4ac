//! The socket side of the responder: one raw ICMPv6 socket per served interface, bound
//! to it, in the all-routers group, receiving only router discovery messages with
//! their hop limit. Decisions are [`Responder`]'s; this file only moves bytes.

use std::io;
use std::mem;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::responder::{Responder, Verdict};
use super::wire::{self, WireError, ROUTER_ADVERTISEMENT, ROUTER_SOLICITATION};
use crate::metrics::Counter;

/// The all-routers link-local multicast group, where solicitations go (RFC 4291 §2.7.1).
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// `ICMP6_FILTER` (RFC 3542 §3.2) at level IPPROTO_ICMPV6: not exported by libc.
const ICMP6_FILTER: libc::c_int = 1;

/// Errors setting up a responder socket.
#[derive(Debug, thiserror::Error)]
pub enum RaError {
    /// Opening or configuring the raw socket failed (needs CAP_NET_RAW).
    #[error("ra: cannot listen for router solicitations on {interface}: {source}")]
    Socket {
        /// Interface name.
        interface: String,
        /// OS error.
        source: io::Error,
    },
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct RaMetrics {
    /// Router Solicitations received (valid).
    pub solicitations: Counter,
    /// "No router here" advertisements sent.
    pub answered: Counter,
    /// Solicitations left to a real router.
    pub standing_down: Counter,
    /// Advertisements from a real router seen.
    pub routers_seen: Counter,
    /// Messages discarded as malformed or invalid (RFC 4861 §6.1).
    pub invalid: Counter,
}

impl RaMetrics {
    /// Appends the Prometheus text format.
    pub fn render_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, c) in [
            (
                "shardboot_ra_solicitations_total",
                "IPv6 Router Solicitations received",
                &self.solicitations,
            ),
            (
                "shardboot_ra_answered_total",
                "no-router Router Advertisements sent",
                &self.answered,
            ),
            (
                "shardboot_ra_standing_down_total",
                "solicitations left to a real IPv6 router",
                &self.standing_down,
            ),
            (
                "shardboot_ra_routers_seen_total",
                "advertisements from real IPv6 routers",
                &self.routers_seen,
            ),
            (
                "shardboot_ra_invalid_total",
                "router discovery messages discarded as malformed or invalid",
                &self.invalid,
            ),
        ] {
            crate::metrics::header(out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", c.get());
        }
    }
}

/// One interface's socket.
#[derive(Debug)]
pub struct RaListener {
    interface: String,
    /// What it answers with: "no router here", or the managed advertisement.
    advertisement: Vec<u8>,
    index: u32,
    socket: AsyncFd<Socket>,
}

/// Opens the responder socket on `interface`, answering with `advertisement`
/// (`wire::no_router_advertisement` or `wire::managed_advertisement`).
pub fn bind(interface: &str, advertisement: Vec<u8>) -> Result<RaListener, RaError> {
    let err = |source| RaError::Socket {
        interface: interface.to_string(),
        source,
    };
    let index = nix::net::if_::if_nametoindex(interface).map_err(|e| err(e.into()))?;
    let socket = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6)).map_err(err)?;
    socket
        .bind_device(Some(interface.as_bytes()))
        .map_err(err)?;
    // RFC 4861 §6.1.2: advertisements are sent with hop limit 255.
    socket.set_unicast_hops_v6(255).map_err(err)?;
    socket.set_multicast_hops_v6(255).map_err(err)?;
    socket.join_multicast_v6(&ALL_ROUTERS, index).map_err(err)?;
    // Its own solicitations are for routers, not for itself.
    socket.set_multicast_loop_v6(false).map_err(err)?;
    set_int_option(&socket, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1).map_err(err)?;
    pass_only_router_discovery(&socket).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    // SAFETY: the socket2 Socket owns its fd until it is dropped with the AsyncFd.
    let socket = unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) }
        .map_err(|e| err(e.into()))?;
    Ok(RaListener {
        advertisement,
        interface: interface.to_string(),
        index,
        socket,
    })
}

/// Serves every listener until `stop` is cancelled. Each interface (segment) has its
/// own responder: a router on one segment says nothing about another.
/// Binds a listener on each of `interfaces` (the segments DHCP serves, and only those)
/// and returns the responder, answering once polled. The responder only saves boot
/// time: an interface where the socket cannot be opened is logged and skipped.
pub fn start(
    interfaces: &[(String, Vec<u8>)],
    stand_down_secs: u64,
    metrics: Arc<RaMetrics>,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let listeners: Vec<_> = interfaces
        .iter()
        .filter_map(|(name, advertisement)| {
            bind(name, advertisement.clone())
                .inspect_err(
                    |e| warn!(error = %e, "ra.enabled: not answering router solicitations there"),
                )
                .ok()
        })
        .collect();
    run(listeners, stand_down_secs, metrics, stop)
}

/// Answers router solicitations on `listeners` until `stop`.
pub async fn run(
    listeners: Vec<RaListener>,
    stand_down_secs: u64,
    metrics: Arc<RaMetrics>,
    stop: CancellationToken,
) {
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    for listener in listeners {
        info!(interface = %listener.interface, "answering IPv6 router solicitations");
        let (metrics, stop) = (metrics.clone(), stop.clone());
        let responder = Responder::new(stand_down_secs, 0);
        tasks.spawn(serve(listener, responder, started, metrics, stop));
    }
    while tasks.join_next().await.is_some() {}
}

/// RFC 4861 §6.2.6: a solicited advertisement waits a random 0 to MAX_RA_DELAY_TIME.
const MAX_RA_DELAY: Duration = Duration::from_millis(500);
/// Answers waiting out their delay, at most (an RS flood must not grow memory).
const MAX_PENDING: usize = 256;
/// The responder's own solicitations while it learns (the first may leave before the
/// interface's link-local address has passed duplicate address detection).
const PROBES: u32 = 3;

/// A random delay in [0, MAX_RA_DELAY): std's per-instance random hash keys are enough
/// to spread answers, which is all the delay is for.
fn random_delay() -> Duration {
    use std::hash::BuildHasher;
    let r = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    Duration::from_millis(r % MAX_RA_DELAY.as_millis() as u64)
}

async fn serve(
    listener: RaListener,
    mut responder: Responder,
    started: Instant,
    metrics: Arc<RaMetrics>,
    stop: CancellationToken,
) {
    let mut buf = [0u8; 1500];
    let now = || started.elapsed().as_secs();
    let mut pending: Vec<(Instant, SocketAddrV6)> = Vec::new();
    let (mut probes_left, mut next_probe) = (PROBES, Instant::now());
    loop {
        let next_answer = pending.iter().map(|(due, _)| *due).min();
        let received = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next_probe.into()), if probes_left > 0 => {
                probes_left -= 1;
                next_probe = Instant::now() + Duration::from_secs(1);
                let all_routers = SocketAddrV6::new(ALL_ROUTERS, 0, 0, listener.index);
                if let Err(e) = listener.socket.get_ref().send_to(&wire::router_solicitation(), &all_routers.into()) {
                    debug!(interface = %listener.interface, error = %e, "ra: own solicitation not sent");
                }
                continue;
            }
            _ = tokio::time::sleep_until(next_answer.unwrap_or_else(Instant::now).into()), if next_answer.is_some() => {
                let at = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(d, _)| *d <= at);
                pending = later;
                for (_, to) in due {
                    // A router may have spoken while this answer waited.
                    if responder.answering(now()) {
                        send_answer(&listener, to, &metrics);
                    } else {
                        metrics.standing_down.inc();
                    }
                }
                continue;
            }
            r = listener.socket.readable() => match r {
                Ok(mut guard) => match guard.try_io(|s| recv_with_hop_limit(s.as_raw_fd(), &mut buf)) {
                    Ok(r) => r,
                    Err(_would_block) => continue,
                },
                Err(e) => {
                    warn!(interface = %listener.interface, error = %e, "ra socket failed");
                    return;
                }
            },
        };
        let (len, source, hop_limit) = match received {
            Ok(r) => r,
            Err(e) => {
                // A persistent error (interface gone) must not become a busy loop.
                warn!(interface = %listener.interface, error = %e, "ra receive failed");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        let message = match wire::parse(&buf[..len]) {
            Ok(m) => m,
            // Without the kernel filter every ICMPv6 type arrives; not ours to count.
            Err(WireError::OtherType(_)) => continue,
            Err(e) => {
                metrics.invalid.inc();
                debug!(interface = %listener.interface, %source, error = %e, "ra: dropped");
                continue;
            }
        };
        if matches!(message, wire::NdMessage::Solicitation { .. }) {
            metrics.solicitations.inc();
        }
        match responder.decide(&message, source, hop_limit, now()) {
            Verdict::Answer if pending.len() < MAX_PENDING => {
                let to = SocketAddrV6::new(source, 0, 0, listener.index);
                pending.push((Instant::now() + random_delay(), to));
            }
            Verdict::Answer => metrics.standing_down.inc(),
            Verdict::StandingDown => metrics.standing_down.inc(),
            Verdict::RouterSeen => {
                metrics.routers_seen.inc();
                debug!(interface = %listener.interface, %source, "ra: an IPv6 router is on this segment; standing down");
            }
            Verdict::Ignore => {}
            Verdict::Invalid(why) => {
                metrics.invalid.inc();
                debug!(interface = %listener.interface, %source, why, "ra: discarded");
            }
        }
    }
}

fn send_answer(listener: &RaListener, to: SocketAddrV6, metrics: &RaMetrics) {
    match listener
        .socket
        .get_ref()
        .send_to(&listener.advertisement, &to.into())
    {
        Ok(_) => {
            metrics.answered.inc();
            debug!(interface = %listener.interface, source = %to.ip(), "ra: told a host there is no router");
        }
        // The interface's own link-local address is still in duplicate address
        // detection (interfaces solicit as they come up).
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
            debug!(interface = %listener.interface, source = %to.ip(), "ra: no usable link-local address yet")
        }
        Err(e) => {
            warn!(interface = %listener.interface, source = %to.ip(), error = %e, "ra: send failed")
        }
    }
}

fn set_int_option(
    socket: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a valid fd and a pointer to a c_int of the stated length.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// RFC 3542 §3.2: block every ICMPv6 type but Router Solicitation and Advertisement, so
/// echo and neighbor traffic never wakes the loop. (A set bit blocks the type.)
fn pass_only_router_discovery(socket: &Socket) -> io::Result<()> {
    let mut filter = [u32::MAX; 8];
    for kind in [ROUTER_SOLICITATION, ROUTER_ADVERTISEMENT] {
        filter[usize::from(kind >> 5)] &= !(1u32 << (kind & 31));
    }
    // SAFETY: a valid fd and a pointer to the 32-byte filter of the stated length.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_ICMPV6,
            ICMP6_FILTER,
            filter.as_ptr().cast(),
            mem::size_of_val(&filter) as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `recvmsg` returning the length, the source address and the hop limit the packet
/// arrived with (IPV6_HOPLIMIT ancillary data, RFC 3542 §6.3). A truncated datagram
/// is reported as length 0, which never parses.
fn recv_with_hop_limit(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Ipv6Addr, Option<u8>)> {
    // SAFETY: all-zero is a valid sockaddr_in6 and msghdr.
    let mut from: libc::sockaddr_in6 = unsafe { mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = std::ptr::addr_of_mut!(from).cast();
    msg.msg_namelen = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control) as _;
    // SAFETY: msg points at live buffers of the lengths it states.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut hop_limit = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within
    // msg_controllen; the hop limit is a c_int (RFC 3542 §6.3), possibly unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_HOPLIMIT {
                let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                hop_limit = u8::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let len = if msg.msg_flags & libc::MSG_TRUNC != 0 {
        0
    } else {
        n as usize
    };
    Ok((len, Ipv6Addr::from(from.sin6_addr.s6_addr), hop_limit))
}
