//! Which UDP socket errors concern one peer or one moment rather than the socket, shared
//! by the DHCP and TFTP listeners so both ride out the same conditions.

use std::io::{self, ErrorKind};

/// True for an error on a UDP listening socket that leaves the socket usable: the
/// listener logs or counts it and keeps serving (docs/style.md §5: only an unrecoverable socket
/// error ends a listener). Why each is transient:
///
/// - `ECONNREFUSED`, `EHOSTUNREACH`, `ENETUNREACH`: on Linux an ICMP error for an earlier
///   send (port or host unreachable: that client went away) is queued on the socket and
///   returned by the next call, whatever peer that call is about (udp(7)).
/// - `EINTR`: a signal interrupted the call; retrying is the answer.
/// - `ENOBUFS`, `ENOMEM`: a full device queue or a momentary memory shortage loses this
///   datagram like the network would; the peer retransmits.
/// - `EMSGSIZE`: one datagram too large for the route; the next one may fit.
/// - `EAGAIN`/`EWOULDBLOCK`: nothing to read or no room to write right now. A loop that
///   drains a non-blocking socket treats WouldBlock as "no more data" and must match it
///   before calling this; tokio's own readiness loop retries it.
///
/// An error built from a kind rather than an errno (no `raw_os_error`) is transient for
/// the kinds of the same conditions std names: ConnectionRefused, Interrupted, WouldBlock.
pub fn is_transient(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => matches!(
            code,
            libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EINTR
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EAGAIN
                | libc::EMSGSIZE
        ),
        None => matches!(
            e.kind(),
            ErrorKind::ConnectionRefused | ErrorKind::Interrupted | ErrorKind::WouldBlock
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_and_momentary_errors_are_transient() {
        for code in [
            libc::ECONNREFUSED,
            libc::EHOSTUNREACH,
            libc::ENETUNREACH,
            libc::EINTR,
            libc::ENOBUFS,
            libc::ENOMEM,
            libc::EAGAIN,
            libc::EWOULDBLOCK,
            libc::EMSGSIZE,
        ] {
            assert!(is_transient(&io::Error::from_raw_os_error(code)), "{code}");
        }
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::Interrupted,
            ErrorKind::WouldBlock,
        ] {
            assert!(is_transient(&io::Error::from(kind)), "{kind:?}");
        }
    }

    #[test]
    fn socket_errors_are_fatal() {
        for code in [libc::EBADF, libc::ENOTSOCK, libc::EINVAL, libc::EFAULT] {
            assert!(!is_transient(&io::Error::from_raw_os_error(code)), "{code}");
        }
        assert!(!is_transient(&io::Error::other("boom")));
        assert!(!is_transient(&io::Error::from(ErrorKind::NotConnected)));
    }

    #[test]
    fn an_icmp_unreachable_surfaces_as_transient_on_the_next_receive() {
        // Linux: a send to a closed loopback port queues ECONNREFUSED on the socket.
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = closed.local_addr().unwrap();
        drop(closed);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect(to).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        s.send(b"x").unwrap();
        let e = s.recv(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        assert!(is_transient(&e));
    }
}
