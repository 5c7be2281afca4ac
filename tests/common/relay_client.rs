//! A DHCP load client for tests that acts as a relay agent (giaddr = its own address), so
//! that replies come back by unicast to one socket and many clients can be simulated at
//! once. Speaks real DHCP through dhcproto.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable};

/// What the server answered one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// DHCPACK for this address.
    Ack(Ipv4Addr),
    /// DHCPNAK.
    Nak,
    /// Nothing before the timeout.
    Silence,
}

/// A relay-agent socket at `relay:67` talking to `server:67`.
pub(crate) struct RelayClient {
    socket: UdpSocket,
    relay: Ipv4Addr,
    server: SocketAddrV4,
    next_xid: u32,
}

/// A simulated client MAC from a number.
pub(crate) fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x5b, b[0], b[1], b[2], b[3]]
}

impl RelayClient {
    /// Binds `relay:67` (call from inside the client namespace).
    pub(crate) fn new(relay: Ipv4Addr, server: Ipv4Addr) -> Self {
        let socket = super::bind_fixed_port(SocketAddrV4::new(relay, 67));
        // Room for a burst's replies (the default buffer holds about 150).
        shardboot::sockopt::enlarge_recv_buffer(&socket, 8 << 20);
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        Self {
            socket,
            relay,
            server: SocketAddrV4::new(server, 67),
            next_xid: 1,
        }
    }

    fn message(&mut self, kind: MessageType, mac: &[u8; 6]) -> Message {
        let z = Ipv4Addr::UNSPECIFIED;
        self.next_xid = self.next_xid.wrapping_add(1);
        let mut m = Message::new_with_id(self.next_xid, z, z, z, self.relay, mac);
        m.set_hops(1);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        m
    }

    /// Sends raw bytes to the server.
    pub(crate) fn send_raw(&self, bytes: &[u8]) {
        self.socket.send_to(bytes, self.server).unwrap();
    }

    /// The next datagram from the server, raw, within `wait`.
    pub(crate) fn recv_raw(&self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 1500];
        while Instant::now() < deadline {
            if let Ok((n, _)) = self.socket.recv_from(&mut buf) {
                return Some(buf[..n].to_vec());
            }
        }
        None
    }

    /// A relayed DISCOVER for `mac` with `extra` raw option bytes before the End option.
    pub(crate) fn discover_raw(&mut self, mac: &[u8; 6], extra: &[u8]) -> Vec<u8> {
        let mut bytes = self.message(MessageType::Discover, mac).to_vec().unwrap();
        let end = bytes.iter().rposition(|b| *b == 255).unwrap();
        bytes.splice(end..end, extra.iter().copied());
        bytes
    }

    fn send(&self, m: &Message) {
        self.send_raw(&m.to_vec().unwrap());
    }

    /// Collects replies for the given xids until all arrived or `wait` passed.
    fn collect(&self, mut pending: HashMap<u32, usize>, wait: Duration) -> HashMap<usize, Message> {
        let mut got = HashMap::new();
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 1500];
        while !pending.is_empty() && Instant::now() < deadline {
            let Ok((n, _)) = self.socket.recv_from(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::decode(&mut Decoder::new(&buf[..n])) else {
                continue;
            };
            if let Some(i) = pending.remove(&m.xid()) {
                got.insert(i, m);
            }
        }
        got
    }

    /// Full DISCOVER/OFFER/REQUEST/ACK for each MAC, pipelined; returns each client's answer.
    pub(crate) fn obtain(&mut self, macs: &[[u8; 6]], wait: Duration) -> Vec<Answer> {
        let replies = self.obtain_replies(macs, wait);
        replies.iter().map(|m| answer(m.as_ref())).collect()
    }

    /// Like [`RelayClient::obtain`], with each client's final reply whole (its options).
    pub(crate) fn obtain_replies(
        &mut self,
        macs: &[[u8; 6]],
        wait: Duration,
    ) -> Vec<Option<Message>> {
        let mut pending = HashMap::new();
        for (i, mac) in macs.iter().enumerate() {
            let d = self.message(MessageType::Discover, mac);
            pending.insert(d.xid(), i);
            self.send(&d);
        }
        let offers = self.collect(pending, wait);
        let mut pending = HashMap::new();
        for (i, offer) in &offers {
            let Some(DhcpOption::ServerIdentifier(sid)) =
                offer.opts().get(OptionCode::ServerIdentifier).cloned()
            else {
                continue;
            };
            let mut r = self.message(MessageType::Request, &macs[*i]);
            r.opts_mut().insert(DhcpOption::ServerIdentifier(sid));
            r.opts_mut()
                .insert(DhcpOption::RequestedIpAddress(offer.yiaddr()));
            pending.insert(r.xid(), *i);
            self.send(&r);
        }
        let mut acks = self.collect(pending, wait);
        (0..macs.len()).map(|i| acks.remove(&i)).collect()
    }

    /// A SELECTING REQUEST naming `server` for `ip`, as if answering an OFFER that was
    /// never made; sent without waiting for an answer.
    pub(crate) fn request_unoffered(&mut self, mac: &[u8; 6], server: Ipv4Addr, ip: Ipv4Addr) {
        let mut r = self.message(MessageType::Request, mac);
        r.opts_mut().insert(DhcpOption::ServerIdentifier(server));
        r.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        self.send(&r);
    }

    /// A RELEASE of `ip` for `mac`, relayed (giaddr = this relay), naming `server`;
    /// nothing comes back.
    pub(crate) fn release(&mut self, mac: &[u8; 6], server: Ipv4Addr, ip: Ipv4Addr) {
        let mut r = self.message(MessageType::Release, mac);
        r.set_ciaddr(ip);
        r.opts_mut().insert(DhcpOption::ServerIdentifier(server));
        self.send(&r);
    }

    /// INIT-REBOOT REQUEST (RFC 2131 §4.3.2: no server id, no ciaddr, option 50) per pair.
    pub(crate) fn init_reboot(
        &mut self,
        clients: &[([u8; 6], Ipv4Addr)],
        wait: Duration,
    ) -> Vec<Answer> {
        let mut pending = HashMap::new();
        for (i, (mac, ip)) in clients.iter().enumerate() {
            let mut r = self.message(MessageType::Request, mac);
            r.opts_mut().insert(DhcpOption::RequestedIpAddress(*ip));
            pending.insert(r.xid(), i);
            self.send(&r);
        }
        let replies = self.collect(pending, wait);
        (0..clients.len())
            .map(|i| answer(replies.get(&i)))
            .collect()
    }
}

fn answer(m: Option<&Message>) -> Answer {
    match m.and_then(|m| m.opts().msg_type().map(|t| (t, m.yiaddr()))) {
        Some((MessageType::Ack, ip)) => Answer::Ack(ip),
        Some((MessageType::Nak, _)) => Answer::Nak,
        _ => Answer::Silence,
    }
}
