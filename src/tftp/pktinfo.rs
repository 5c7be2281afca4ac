//! The local address each request was sent to (IP_PKTINFO, Linux ip(7)).
//!
//! A listener bound to 0.0.0.0 would otherwise answer from whatever address the kernel
//! picks for the route back, which on a host with several addresses (a keepalived VIP as
//! next-server, a secondary address) is not the one the client asked. RFC 1350 §4 makes
//! the pair of addresses and ports the transfer's identity, and PXE ROMs drop DATA from
//! any other address, so transfers answer from the address the RRQ came to.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
    SockaddrIn,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Asks the kernel to report each datagram's local address, for an IPv4 socket bound to
/// the unspecified address (on any other the answer is already fixed). Returns whether
/// the addresses will be reported.
pub(super) fn enable(socket: &UdpSocket) -> bool {
    let wildcard = matches!(socket.local_addr(), Ok(SocketAddr::V4(a)) if a.ip().is_unspecified());
    wildcard && setsockopt(&socket.as_fd(), sockopt::Ipv4PacketInfo, &true).is_ok()
}

/// Like `recv_from`, plus the local address the datagram was sent to when `enabled`.
pub(super) async fn recv(
    socket: &UdpSocket,
    buf: &mut [u8],
    enabled: bool,
) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    if !enabled {
        let (n, peer) = socket.recv_from(buf).await?;
        return Ok((n, peer, None));
    }
    socket
        .async_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(buf)];
            let mut space = nix::cmsg_space!(libc::in_pktinfo);
            let msg = recvmsg::<SockaddrIn>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::empty(),
            )?;
            let local = msg.cmsgs()?.find_map(|c| match c {
                ControlMessageOwned::Ipv4PacketInfo(info) => reply_source(&info),
                _ => None,
            });
            // Linux always reports a UDP source; if not, the datagram cannot be
            // answered and is dropped like any other stray (EHOSTUNREACH is transient).
            let peer = msg
                .address
                .map(|a| SocketAddr::V4(SocketAddrV4::from(a)))
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EHOSTUNREACH))?;
            Ok((msg.bytes, peer, local))
        })
        .await
}

/// The address to answer from: the kernel's local address for the request
/// (`ipi_spec_dst`: the destination of a unicast, the interface's address for a
/// broadcast), else, where Linux leaves that 0 (seen on loopback), the destination.
fn reply_source(info: &libc::in_pktinfo) -> Option<Ipv4Addr> {
    let to = Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
    let spec = Ipv4Addr::from(u32::from_be(info.ipi_spec_dst.s_addr));
    [spec, to]
        .into_iter()
        .find(|a| !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast())
}

/// Like `send_to`, from `from` when given (the kernel chooses otherwise).
pub(super) async fn send(
    socket: &UdpSocket,
    buf: &[u8],
    to: SocketAddr,
    from: Option<Ipv4Addr>,
) -> io::Result<usize> {
    let (Some(from), SocketAddr::V4(to)) = (from, to) else {
        return socket.send_to(buf, to).await;
    };
    let info = libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr {
            s_addr: u32::from(from).to_be(),
        },
        ipi_addr: libc::in_addr { s_addr: 0 },
    };
    let dest = SockaddrIn::from(to);
    socket
        .async_io(Interest::WRITABLE, || {
            let iov = [IoSlice::new(buf)];
            let cmsg = [ControlMessage::Ipv4PacketInfo(&info)];
            Ok(sendmsg(
                socket.as_raw_fd(),
                &iov,
                &cmsg,
                MsgFlags::empty(),
                Some(&dest),
            )?)
        })
        .await
}

/// The address a transfer socket binds: the one the request came to, else the
/// listener's own.
pub(super) fn transfer_ip(listener: SocketAddr, request_to: Option<Ipv4Addr>) -> IpAddr {
    request_to.map_or(listener.ip(), IpAddr::V4)
}
