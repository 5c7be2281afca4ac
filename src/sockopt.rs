//! Socket buffer sizing shared by the UDP listeners.

use std::os::fd::AsRawFd;

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
}
