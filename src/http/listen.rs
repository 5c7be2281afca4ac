//! Binding one HTTP listener as several sockets, one per serving thread, joined with
//! `SO_REUSEPORT`: the kernel then spreads new connections over the sockets, and each
//! thread accepts and serves its own (see `serve::serve_per_core`).

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// The listen backlog of each socket (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 1024;

/// How many threads serve a listener of the boot routes: one per CPU this process may
/// run on (`available_parallelism` reads the affinity mask and the cgroup's CPU quota),
/// at most `MAX_WORKERS`: boot scripts are small, and more threads than that only cost
/// memory on a large conductor host.
pub fn workers_for_boot() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS)
}

/// The most threads a listener gets by default.
pub const MAX_WORKERS: usize = 8;

/// Binds `addr` as `count` non-blocking listening sockets sharing the port.
///
/// `SO_REUSEPORT` would also let a second process of the same user bind the same port
/// and silently take half the connections (two shardboots started on one host by
/// mistake). So the port is first bound alone, without it: an address in use fails
/// here as it would with a single socket. That socket then joins the group (port 0
/// becomes the port it was given), and the rest bind to the same address.
pub fn bind_sockets(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    let probe = socket(addr, false)?;
    probe.bind(&addr.into())?;
    let addr = probe.local_addr()?.as_socket().unwrap_or(addr);
    if count <= 1 {
        probe.listen(BACKLOG)?;
        return Ok(vec![probe.into()]);
    }
    // A bound socket cannot join a reuseport group afterwards: free the port and bind
    // the group at once (the window in between is a few system calls).
    drop(probe);
    (0..count)
        .map(|_| {
            let s = socket(addr, true)?;
            s.bind(&addr.into())?;
            s.listen(BACKLOG)?;
            Ok(s.into())
        })
        .collect()
}

fn socket(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's TcpListener::bind: a restarted server rebinds over TIME_WAIT sockets.
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_share_one_port_and_port_zero_becomes_one_port() {
        let sockets = bind_sockets("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let ports: Vec<u16> = sockets
            .iter()
            .map(|s| s.local_addr().unwrap().port())
            .collect();
        assert_ne!(ports[0], 0);
        assert!(ports.iter().all(|p| *p == ports[0]), "{ports:?}");
    }

    #[test]
    fn a_port_another_socket_holds_is_refused_even_with_reuse_port_on_both() {
        let first = bind_sockets("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = first[0].local_addr().unwrap();
        let err = bind_sockets(addr, 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let err = bind_sockets(addr, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn every_socket_accepts_connections() {
        use std::io::{Read, Write};
        let sockets = bind_sockets("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = sockets[0].local_addr().unwrap();
        // Connections spread by a hash of the client's port: enough of them reach both.
        let clients: Vec<std::net::TcpStream> = (0..64)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut accepted = [0usize; 2];
        for (i, s) in sockets.iter().enumerate() {
            while let Ok((mut c, _)) = s.accept() {
                c.set_nonblocking(false).unwrap();
                c.write_all(b"x").unwrap();
                accepted[i] += 1;
            }
        }
        assert_eq!(accepted.iter().sum::<usize>(), 64, "{accepted:?}");
        assert!(accepted.iter().all(|n| *n > 0), "{accepted:?}");
        for mut c in clients {
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
        }
    }
}
