//! The local address each request was sent to (IP_PKTINFO, Linux ip(7); IPV6_PKTINFO,
//! RFC 3542 §6, ipv6(7)).
//!
//! A listener bound to 0.0.0.0 or [::] would otherwise answer from whatever address the
//! kernel picks for the route back, which on a host with several addresses (a
//! keepalived VIP as next-server, a secondary address) is not the one the client asked.
//! RFC 1350 §4 makes the pair of addresses and ports the transfer's identity, and PXE
//! ROMs drop DATA from any other address, so transfers answer from the address the RRQ
//! came to. A dual-stack [::] socket reports an IPv4 request's address as a v4-mapped
//! IPv6 one, and Linux sends from it when told so (`ip_cmsg_send` takes IPV6_PKTINFO
//! for a mapped destination).

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrIn, SockaddrIn6, SockaddrLike};
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::sockopt::Arrived;

/// Asks the kernel to report each datagram's local address, for a socket bound to the
/// unspecified address of its family (on any other the answer is already fixed).
/// Returns whether the addresses will be reported.
pub(super) fn enable(socket: &UdpSocket) -> bool {
    match socket.local_addr() {
        Ok(SocketAddr::V4(a)) if a.ip().is_unspecified() => {
            crate::sockopt::enable_pktinfo(&socket.as_fd(), false).is_ok()
        }
        Ok(SocketAddr::V6(a)) if a.ip().is_unspecified() => {
            crate::sockopt::enable_pktinfo(&socket.as_fd(), true).is_ok()
        }
        _ => false,
    }
}

/// Like `recv_from`, plus the local address the datagram was sent to when `enabled`.
pub(super) async fn recv(
    socket: &UdpSocket,
    buf: &mut [u8],
    enabled: bool,
) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
    if !enabled {
        let (n, peer) = socket.recv_from(buf).await?;
        return Ok((n, peer, None));
    }
    let mut space = crate::sockopt::pktinfo_space();
    let (n, peer, arrived) = crate::sockopt::recv_pktinfo(socket, buf, &mut space).await?;
    let local = arrived.and_then(|a| match a {
        Arrived::V4 { destination, local } => reply_source(local, destination).map(IpAddr::V4),
        Arrived::V6 { destination, .. } => reply_source6(destination),
    });
    Ok((n, peer, local))
}

/// The address to answer from for an IPv6 socket: the request's destination, unless
/// it cannot be a source (multicast, unspecified, a mapped IPv4 broadcast) or is
/// link-local (a transfer socket bound to it would need the interface as its scope;
/// the kernel picks that interface's link-local address for a link-local peer anyway).
fn reply_source6(to: Ipv6Addr) -> Option<IpAddr> {
    if let Some(v4) = to.to_ipv4_mapped() {
        let usable = !v4.is_unspecified() && !v4.is_broadcast() && !v4.is_multicast();
        return usable.then_some(IpAddr::V6(to));
    }
    let usable = !to.is_unspecified() && !to.is_multicast() && !to.is_unicast_link_local();
    usable.then_some(IpAddr::V6(to))
}

/// The address to answer from: the kernel's local address for the request
/// (`ipi_spec_dst`: the destination of a unicast, the interface's address for a
/// broadcast), else, where Linux leaves that 0 (seen on loopback), the destination.
fn reply_source(spec: Ipv4Addr, to: Ipv4Addr) -> Option<Ipv4Addr> {
    [spec, to]
        .into_iter()
        .find(|a| !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast())
}

/// Like `send_to`, from `from` when given (the kernel chooses otherwise).
pub(super) async fn send(
    socket: &UdpSocket,
    buf: &[u8],
    to: SocketAddr,
    from: Option<IpAddr>,
) -> io::Result<usize> {
    match (from, to) {
        (Some(IpAddr::V4(from)), SocketAddr::V4(to)) => {
            let info = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from(from).to_be(),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            let cmsg = [ControlMessage::Ipv4PacketInfo(&info)];
            send_with(socket, buf, &cmsg, &SockaddrIn::from(to)).await
        }
        (Some(IpAddr::V6(from)), SocketAddr::V6(to)) => {
            let info = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: from.octets(),
                },
                ipi6_ifindex: 0,
            };
            let cmsg = [ControlMessage::Ipv6PacketInfo(&info)];
            send_with(socket, buf, &cmsg, &SockaddrIn6::from(to)).await
        }
        _ => socket.send_to(buf, to).await,
    }
}

async fn send_with(
    socket: &UdpSocket,
    buf: &[u8],
    cmsg: &[ControlMessage<'_>],
    dest: &impl SockaddrLike,
) -> io::Result<usize> {
    socket
        .async_io(Interest::WRITABLE, || {
            let iov = [IoSlice::new(buf)];
            Ok(sendmsg(
                socket.as_raw_fd(),
                &iov,
                cmsg,
                MsgFlags::empty(),
                Some(dest),
            )?)
        })
        .await
}

/// The address a transfer socket binds: the one the request came to, else the
/// listener's own.
pub(super) fn transfer_ip(listener: SocketAddr, request_to: Option<IpAddr>) -> IpAddr {
    request_to.unwrap_or(listener.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_request_is_answered_from_its_destination_when_that_can_be_a_source() {
        let source = |a: &str| reply_source6(a.parse().unwrap());
        assert_eq!(source("fd00:1::1"), Some("fd00:1::1".parse().unwrap()));
        // An IPv4 request on a dual-stack socket: its mapped destination.
        assert_eq!(
            source("::ffff:192.0.2.1"),
            Some("::ffff:192.0.2.1".parse().unwrap())
        );
        for not in [
            "::",
            "ff02::1:2",
            "fe80::1",
            "::ffff:255.255.255.255",
            "::ffff:0.0.0.0",
            "::ffff:224.0.0.1",
        ] {
            assert_eq!(source(not), None, "{not}");
        }
    }
}
