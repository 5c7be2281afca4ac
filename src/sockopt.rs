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
}
