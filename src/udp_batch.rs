//! Many datagrams, few trips through the kernel. The replies of a burst (the OFFERs of
//! one read burst, the ACKs of one flush) are queued here and sent together:
//! consecutive datagrams for one destination with one length go as one UDP GSO send
//! (`UDP_SEGMENT`, udp(7), Linux 4.18), which the kernel takes through its IP stack
//! once and cuts into datagrams at the device (or the NIC does); the others go one
//! `sendto` each. When a rack powers on, its relay is the destination of every reply,
//! and replies of one kind are one length: one traversal carries up to 64 of them.
//!
//! On the wire nothing changes: each datagram leaves as it would alone, in the order
//! queued. A device the kernel cannot segment for (no checksum offload: `EIO`) turns
//! GSO off for that outbox, and the group is sent again one datagram at a time.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::socket::{sendmsg, sendto, ControlMessage, MsgFlags, SockaddrStorage};

/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;
/// Most octets in one GSO send: an IPv4 datagram's 65,535 less its IP and UDP headers.
const MAX_GSO_BYTES: usize = 65_507;

/// What is told of each datagram sent or failed (a listener's counters).
pub trait Counted: Send + Sync {
    /// A datagram for `to` was handed to the kernel (`Ok`) or not.
    fn counted(&self, to: SocketAddr, result: Result<(), &io::Error>);
}

/// Datagrams queued for one socket, sent in order by [`Outbox::send`].
#[derive(Debug)]
pub struct Outbox {
    bytes: Vec<u8>,
    queued: Vec<(SocketAddr, Range<usize>)>,
    /// The first queued datagram not yet sent.
    next: usize,
    gso: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            queued: Vec::new(),
            next: 0,
            gso: true,
        }
    }
}

impl Outbox {
    /// Queues `datagram` for `to`.
    pub fn push(&mut self, to: SocketAddr, datagram: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(datagram);
        self.queued.push((to, start..self.bytes.len()));
    }

    /// Datagrams queued and not yet sent.
    pub fn len(&self) -> usize {
        self.queued.len() - self.next
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets what waits (a sender that does not wait for room drops it).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.queued.clear();
        self.next = 0;
    }

    /// The queued datagrams from `self.next` that can go as one send: same
    /// destination, same length, within the kernel's limits. Returns the end index.
    fn group_end(&self) -> usize {
        let (to, first) = &self.queued[self.next];
        let len = first.len();
        if !self.gso || len == 0 {
            return self.next + 1;
        }
        let most = MAX_SEGMENTS.min(MAX_GSO_BYTES / len).max(1);
        let mut end = self.next + 1;
        while end < self.queued.len()
            && end - self.next < most
            && self.queued[end].0 == *to
            && self.queued[end].1.len() == len
        {
            end += 1;
        }
        end
    }

    /// Sends what is queued, in order, telling `counted` of every datagram. Stops at a
    /// full send buffer with `WouldBlock`, keeping the rest queued (send again once the
    /// socket is writable, or [`Outbox::clear`]); any other failure is told for the
    /// datagrams it concerns, which are dropped, and the rest still go.
    pub fn send(&mut self, socket: &impl AsRawFd, counted: &dyn Counted) -> io::Result<()> {
        let fd = socket.as_raw_fd();
        while self.next < self.queued.len() {
            let end = self.group_end();
            let (to, ref first) = self.queued[self.next];
            let span = first.start..self.queued[end - 1].1.end;
            let addr = SockaddrStorage::from(to);
            let result = if end - self.next == 1 {
                sendto(fd, &self.bytes[span], &addr, MsgFlags::MSG_DONTWAIT)
            } else {
                let segment = first.len() as u16;
                let iov = [io::IoSlice::new(&self.bytes[span])];
                let cmsg = [ControlMessage::UdpGsoSegments(&segment)];
                sendmsg(fd, &iov, &cmsg, MsgFlags::MSG_DONTWAIT, Some(&addr))
            };
            match result {
                Ok(_) => {
                    for (to, _) in &self.queued[self.next..end] {
                        counted.counted(*to, Ok(()));
                    }
                }
                Err(Errno::EAGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
                // The device cannot take a GSO send: one datagram at a time from now.
                Err(Errno::EIO | Errno::EINVAL | Errno::EOPNOTSUPP) if end - self.next > 1 => {
                    self.gso = false;
                    continue;
                }
                Err(e) => {
                    let e = io::Error::from(e);
                    for (to, _) in &self.queued[self.next..end] {
                        counted.counted(*to, Err(&e));
                    }
                }
            }
            self.next = end;
        }
        self.clear();
        Ok(())
    }
}

impl Outbox {
    /// Drops what waits, telling `counted` that each of those datagrams failed.
    pub fn fail_rest(&mut self, e: &io::Error, counted: &dyn Counted) {
        for (to, _) in &self.queued[self.next..] {
            counted.counted(*to, Err(e));
        }
        self.clear();
    }

    /// Sends what is queued on a server loop's socket, waiting for room in its buffer
    /// as a single `send_to` would; a socket that cannot become writable fails the rest.
    pub async fn flush(&mut self, socket: &tokio::net::UdpSocket, counted: &dyn Counted) {
        while !self.is_empty() {
            match socket.try_io(tokio::io::Interest::WRITABLE, || self.send(socket, counted)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = socket.writable().await {
                        self.fail_rest(&e, counted);
                    }
                }
                _ => return,
            }
        }
    }
}

/// Datagrams for several sockets (the ACKs of one flush, over every listener), each
/// socket's sent together by [`Replies::send`].
#[derive(Default)]
pub struct Replies {
    sockets: Vec<(Arc<std::net::UdpSocket>, Arc<dyn Counted>, Outbox)>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies")
            .field("sockets", &self.sockets.len())
            .finish()
    }
}

impl Replies {
    /// Queues `datagram` for `to` on `socket`; `counted` is told how it went.
    pub fn push(
        &mut self,
        socket: &Arc<std::net::UdpSocket>,
        counted: &Arc<dyn Counted>,
        to: SocketAddr,
        datagram: &[u8],
    ) {
        let at = match self
            .sockets
            .iter()
            .position(|(s, _, _)| Arc::ptr_eq(s, socket))
        {
            Some(at) => at,
            None => {
                self.sockets
                    .push((socket.clone(), counted.clone(), Outbox::default()));
                self.sockets.len() - 1
            }
        };
        self.sockets[at].2.push(to, datagram);
    }

    /// Sends everything queued without waiting for room: what a full send buffer
    /// refuses is dropped and counted as failed (its client asks again).
    pub fn send(&mut self) {
        for (socket, counted, outbox) in &mut self.sockets {
            if let Err(e) = outbox.send(&**socket, &**counted) {
                outbox.fail_rest(&e, &**counted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Tally(Mutex<(usize, usize)>);

    impl Counted for Tally {
        fn counted(&self, _: SocketAddr, result: Result<(), &io::Error>) {
            let mut t = self.0.lock().unwrap();
            match result {
                Ok(()) => t.0 += 1,
                Err(_) => t.1 += 1,
            }
        }
    }

    fn receiver() -> UdpSocket {
        let r = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        crate::sockopt::enlarge_recv_buffer(&r, 4 << 20);
        r.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        r
    }

    fn received(r: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut buf = [0u8; 2048];
        (0..n)
            .map(|_| {
                let (len, _) = r.recv_from(&mut buf).expect("a datagram");
                buf[..len].to_vec()
            })
            .collect()
    }

    #[test]
    fn every_datagram_arrives_whole_and_in_order_grouped_or_not() {
        let (a, b) = (receiver(), receiver());
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        sender.set_nonblocking(true).unwrap();
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut out = Outbox::default();
        // 150 equal datagrams to a (three GSO sends: 64, 64, 22), then mixed lengths
        // and destinations, then one alone.
        let datagram = |n: usize, len: usize| -> Vec<u8> {
            let mut d = vec![(n % 251) as u8; len];
            d[..2].copy_from_slice(&(n as u16).to_be_bytes());
            d
        };
        let mut sent_a = Vec::new();
        let mut sent_b = Vec::new();
        for n in 0..150 {
            sent_a.push(datagram(n, 300));
        }
        for n in 150..170 {
            sent_a.push(datagram(n, 300 + n % 3));
            sent_b.push(datagram(n, 548));
        }
        for d in &sent_a[..150] {
            out.push(to_a, d);
        }
        for (da, db) in sent_a[150..].iter().zip(&sent_b) {
            out.push(to_a, da);
            out.push(to_b, db);
        }
        assert_eq!(out.len(), 190);
        let tally = Tally::default();
        out.send(&sender, &tally).unwrap();
        assert!(out.is_empty());
        assert_eq!(*tally.0.lock().unwrap(), (190, 0));
        assert!(out.gso, "loopback takes GSO sends: the grouped path ran");
        assert_eq!(received(&a, sent_a.len()), sent_a);
        assert_eq!(received(&b, sent_b.len()), sent_b);
        // Nothing more than what was queued arrived.
        a.set_nonblocking(true).unwrap();
        assert!(a.recv_from(&mut [0u8; 16]).is_err());
    }

    #[test]
    fn a_refused_destination_is_counted_and_the_rest_still_go() {
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        sender.set_nonblocking(true).unwrap();
        let tally = Tally::default();
        // No SO_BROADCAST: the kernel refuses a broadcast (EACCES), for all the group.
        let mut out = Outbox::default();
        let bcast = SocketAddr::from((Ipv4Addr::BROADCAST, 9));
        for _ in 0..3 {
            out.push(bcast, &[1; 300]);
        }
        let r = receiver();
        out.push(r.local_addr().unwrap(), &[2; 300]);
        out.send(&sender, &tally).unwrap();
        assert_eq!(*tally.0.lock().unwrap(), (1, 3));
        assert_eq!(received(&r, 1), vec![vec![2; 300]]);

        // Replies never waits: whatever a small send buffer refuses is counted, not kept.
        let small = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
        small.set_nonblocking(true).unwrap();
        nix::sys::socket::setsockopt(&*small, nix::sys::socket::sockopt::SndBuf, &4096).unwrap();
        let tally = Arc::new(Tally::default());
        let counted: Arc<dyn Counted> = tally.clone();
        let mut replies = Replies::default();
        let sink = receiver();
        for _ in 0..2000 {
            replies.push(&small, &counted, sink.local_addr().unwrap(), &[3; 1400]);
        }
        replies.send();
        assert!(replies.sockets[0].2.is_empty());
        let (ok, failed) = *tally.0.lock().unwrap();
        assert_eq!(ok + failed, 2000, "every datagram told, sent or not");
    }
}
