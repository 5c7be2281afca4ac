//! Socket options shared by the UDP listeners: buffer sizing, the kernel's drop count,
//! and each datagram's destination (IP_PKTINFO, Linux ip(7); IPV6_PKTINFO, RFC 3542 §6,
//! ipv6(7)) for sockets bound to the unspecified address.

use std::io::{self, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::SockaddrStorage;
use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Asks for a receive buffer of `bytes`. A boot storm (a rack powering on) sends
/// thousands of datagrams within milliseconds, more than a default buffer holds. With
/// CAP_NET_ADMIN, SO_RCVBUFFORCE ignores `net.core.rmem_max`; without it, SO_RCVBUF is
/// capped there. Best effort: a smaller buffer only means more kernel drops, which the
/// clients' retransmissions cover.
pub fn enlarge_recv_buffer(socket: &impl AsRawFd, bytes: usize) {
    enlarge(socket, bytes, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
}

/// Asks for a send buffer of `bytes`, the same way: the DHCP committer sends a whole
/// group commit's ACKs at once and never waits for room (a full buffer drops, and the
/// client retransmits its REQUEST).
pub fn enlarge_send_buffer(socket: &impl AsRawFd, bytes: usize) {
    enlarge(socket, bytes, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
}

fn enlarge(socket: &impl AsRawFd, bytes: usize, forced: libc::c_int, capped: libc::c_int) {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |opt| {
        // SAFETY: a valid fd and a pointer to a c_int of the stated length.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(forced) != 0 {
        set(capped);
    }
}

/// How many datagrams the kernel has dropped on `socket` because its receive buffer was
/// full (`SK_MEMINFO_DROPS` of `SO_MEMINFO`, Linux ≥ 4.6); `None` where the kernel does
/// not say. The count only grows, for the socket's lifetime.
pub fn receive_drops(socket: &impl AsRawFd) -> Option<u32> {
    /// `SK_MEMINFO_VARS` and `SK_MEMINFO_DROPS` from <linux/sock_diag.h>.
    const VARS: usize = 9;
    const DROPS: usize = 8;
    let mut info = [0u32; VARS];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: a valid fd, and a buffer of `len` bytes the kernel fills at most.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize > DROPS * 4).then_some(info[DROPS])
}

/// Where a datagram arrived, as IP_PKTINFO / IPV6_PKTINFO report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrived {
    /// On an IPv4 socket.
    V4 {
        /// The datagram's destination (`ipi_addr`): a broadcast, or one of ours.
        destination: Ipv4Addr,
        /// The local address the kernel would answer from (`ipi_spec_dst`; 0 where
        /// Linux leaves it so, as on loopback).
        local: Ipv4Addr,
    },
    /// On an IPv6 socket (an IPv4 datagram on a dual-stack one: its v4-mapped
    /// destination).
    V6 {
        /// The datagram's destination (`ipi6_addr`): a multicast group, or one of ours.
        destination: Ipv6Addr,
        /// The interface it came in on.
        interface: u32,
    },
}

/// Asks the kernel to report each datagram's destination on `socket` (IP_PKTINFO for
/// IPv4, IPV6_RECVPKTINFO for IPv6, which on a dual-stack socket covers both).
pub fn enable_pktinfo(socket: &impl AsFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true)?;
    } else {
        setsockopt(socket, sockopt::Ipv4PacketInfo, &true)?;
    }
    Ok(())
}

/// Room for one packet-info control message, for [`recv_pktinfo`]; allocated once per
/// receiving loop, not per datagram.
pub fn pktinfo_space() -> Vec<u8> {
    nix::cmsg_space!(libc::in6_pktinfo)
}

/// Like `recv_from`, plus where the datagram arrived (`None` when [`enable_pktinfo`]
/// was not asked for). `space` is from [`pktinfo_space`].
pub async fn recv_pktinfo(
    socket: &UdpSocket,
    buf: &mut [u8],
    space: &mut Vec<u8>,
) -> io::Result<(usize, SocketAddr, Option<Arrived>)> {
    socket
        .async_io(Interest::READABLE, || recvmsg_pktinfo(socket, buf, space))
        .await
}

/// [`recv_pktinfo`] without waiting: `WouldBlock` when nothing is queued, so a server
/// loop can drain a socket in bursts and wait only once it is empty.
pub fn try_recv_pktinfo(
    socket: &UdpSocket,
    buf: &mut [u8],
    space: &mut Vec<u8>,
) -> io::Result<(usize, SocketAddr, Option<Arrived>)> {
    socket.try_io(Interest::READABLE, || recvmsg_pktinfo(socket, buf, space))
}

fn recvmsg_pktinfo(
    socket: &UdpSocket,
    buf: &mut [u8],
    space: &mut Vec<u8>,
) -> io::Result<(usize, SocketAddr, Option<Arrived>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg =
        recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(space), MsgFlags::empty())?;
    let arrived = msg.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::Ipv4PacketInfo(info) => Some(Arrived::V4 {
            destination: Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr)),
            local: Ipv4Addr::from(u32::from_be(info.ipi_spec_dst.s_addr)),
        }),
        ControlMessageOwned::Ipv6PacketInfo(info) => Some(Arrived::V6 {
            destination: Ipv6Addr::from(info.ipi6_addr.s6_addr),
            interface: info.ipi6_ifindex,
        }),
        _ => None,
    });
    // Linux always reports a UDP source; if not, the datagram cannot be answered and is
    // dropped like any other stray (EHOSTUNREACH is transient).
    let peer = msg
        .address
        .as_ref()
        .and_then(socket_addr)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EHOSTUNREACH))?;
    Ok((msg.bytes, peer, arrived))
}

fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn buffer_grows_at_least_to_the_default() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = socket2::SockRef::from(&s).recv_buffer_size().unwrap();
        super::enlarge_recv_buffer(&s, 4 << 20);
        let after = socket2::SockRef::from(&s).recv_buffer_size().unwrap();
        assert!(after >= before, "{before} -> {after}");
        let before = socket2::SockRef::from(&s).send_buffer_size().unwrap();
        super::enlarge_send_buffer(&s, 4 << 20);
        let after = socket2::SockRef::from(&s).send_buffer_size().unwrap();
        assert!(after >= before, "{before} -> {after}");
    }

    #[test]
    fn drops_on_a_full_receive_buffer_are_counted() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // The smallest buffer the kernel allows: a few datagrams fill it.
        socket2::SockRef::from(&rx).set_recv_buffer_size(1).unwrap();
        assert_eq!(super::receive_drops(&rx), Some(0));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            tx.send_to(&[0u8; 1000], rx.local_addr().unwrap()).unwrap();
        }
        let dropped = super::receive_drops(&rx).unwrap();
        assert!(dropped > 0 && dropped < 200, "{dropped}");
    }

    #[tokio::test]
    async fn each_datagram_says_where_it_was_sent() {
        use super::{enable_pktinfo, pktinfo_space, recv_pktinfo, Arrived};
        use std::net::{Ipv4Addr, Ipv6Addr};
        let rx = tokio::net::UdpSocket::bind("[::]:0").await.unwrap();
        enable_pktinfo(&rx, true).unwrap();
        let port = rx.local_addr().unwrap().port();
        let (mut buf, mut space) = ([0u8; 16], pktinfo_space());
        // An IPv4 datagram on the dual-stack socket: its v4-mapped destination.
        for (from, to) in [
            ("[::1]:0", Ipv6Addr::LOCALHOST),
            ("127.0.0.1:0", Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        ] {
            let tx = std::net::UdpSocket::bind(from).unwrap();
            let dest = std::net::SocketAddr::new(to.to_canonical(), port);
            tx.send_to(b"hello", dest).unwrap();
            let (n, peer, arrived) = recv_pktinfo(&rx, &mut buf, &mut space).await.unwrap();
            assert_eq!(&buf[..n], b"hello");
            assert_eq!(peer.port(), tx.local_addr().unwrap().port());
            assert!(
                matches!(arrived, Some(Arrived::V6 { destination, .. }) if destination == to),
                "{to}: {arrived:?}"
            );
        }
    }
}
