//! One L2 provisioning segment: a bridge in a `servers` namespace, one veth per
//! shardboot member (all members in that namespace, each bound to its own interface),
//! and a `clients` namespace on the same bridge where a broadcast DHCP client simulates
//! many machines. Everything is removed on drop.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable};

use super::{sh, unique, Netns};

/// The bridge, the members' interfaces and the client side.
pub(crate) struct Segment {
    pub servers: Netns,
    pub clients: Netns,
    /// Member interface names, in the order given to `new`.
    pub member_ifs: Vec<String>,
    pub client_if: String,
    /// The bridge in `servers`.
    pub bridge: String,
}

impl Segment {
    /// `addrs`: each member's address (CIDR) on its own interface.
    pub(crate) fn new(addrs: &[&str]) -> Self {
        roomy_neighbour_table();
        let servers = Netns::new("sbm");
        let clients = Netns::new("sbk");
        let bridge = unique("br");
        servers.ip(&["link", "add", &bridge, "type", "bridge"]);
        servers.ip(&["link", "set", &bridge, "up"]);
        let mut member_ifs = Vec::new();
        for a in addrs {
            let (m, p) = (unique("m"), unique("p"));
            sh(&["ip", "link", "add", &m, "type", "veth", "peer", "name", &p]);
            sh(&["ip", "link", "set", &m, "netns", &servers.name]);
            sh(&["ip", "link", "set", &p, "netns", &servers.name]);
            servers.ip(&["link", "set", &p, "master", &bridge]);
            servers.ip(&["addr", "add", a, "dev", &m]);
            servers.ip(&["link", "set", &p, "up"]);
            servers.ip(&["link", "set", &m, "up"]);
            member_ifs.push(m);
        }
        let (c, p) = (unique("c"), unique("p"));
        sh(&["ip", "link", "add", &c, "type", "veth", "peer", "name", &p]);
        sh(&["ip", "link", "set", &c, "netns", &clients.name]);
        sh(&["ip", "link", "set", &p, "netns", &servers.name]);
        servers.ip(&["link", "set", &p, "master", &bridge]);
        servers.ip(&["link", "set", &p, "up"]);
        clients.ip(&["link", "set", &c, "up"]);
        Self {
            servers,
            clients,
            member_ifs,
            client_if: c,
            bridge,
        }
    }

    /// One more host on the segment, in a namespace of its own, with `addr` (CIDR) on
    /// its interface: it answers ARP and ICMP echo like any machine there.
    pub(crate) fn host(&self, addr: &str) -> Netns {
        let ns = Netns::new("sbh");
        let (h, p) = (unique("h"), unique("p"));
        sh(&["ip", "link", "add", &h, "type", "veth", "peer", "name", &p]);
        sh(&["ip", "link", "set", &h, "netns", &ns.name]);
        sh(&["ip", "link", "set", &p, "netns", &self.servers.name]);
        self.servers
            .ip(&["link", "set", &p, "master", &self.bridge]);
        self.servers.ip(&["link", "set", &p, "up"]);
        ns.ip(&["addr", "add", addr, "dev", &h]);
        ns.ip(&["link", "set", &h, "up"]);
        // Answering from the first packet on: the link's carrier (the kernel applies
        // it up to a second later) and the bridge port forwarding (state 3).
        let read = |ns: &Netns, path: String| {
            ns.command("cat")
                .arg(path)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while read(&ns, format!("/sys/class/net/{h}/operstate")) != "up"
            || read(&self.servers, format!("/sys/class/net/{p}/brport/state")) != "3"
        {
            assert!(
                Instant::now() < deadline,
                "host {addr}: its link never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ns
    }
}

/// Room in the kernel's ARP table for every simulated machine: a reply unicast to a
/// `ciaddr` needs a neighbour entry per member interface and machine, and every member
/// holding a lease answers a rebind. The table is one for all namespaces, and beyond
/// `gc_thresh3` (1,024 by default) the kernel drops such replies ("neighbor table
/// overflow"). Only ever raised, never lowered: the same setting a server answering
/// thousands of machines needs.
fn roomy_neighbour_table() {
    for (key, want) in [("gc_thresh2", 8192u32), ("gc_thresh3", 16384)] {
        let path = format!("/proc/sys/net/ipv4/neigh/default/{key}");
        let now: u32 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if now < want {
            let _ = std::fs::write(&path, want.to_string());
        }
    }
}

impl Segment {
    /// A broadcast DHCP client on the clients' side of the segment.
    pub(crate) fn client(&self) -> BroadcastClient {
        let client_if = self.client_if.clone();
        self.clients
            .run(move || BroadcastClient::new(&client_if))
            .join()
            .unwrap()
    }

    /// Makes the clients' side take unicast to any address of `cidr` (a `local` route:
    /// the kernel there answers ARP for them and delivers to the broadcast client's
    /// socket), so replies a server unicasts to `ciaddr` (RFC 2131 §4.1: RENEWING and
    /// REBINDING clients) reach the simulated machines. Those addresses would also answer
    /// a member's conflict probe (an ICMP echo) for an address nobody holds, so the
    /// clients' side answers no echo at all, as a machine still in its firmware does not.
    pub(crate) fn clients_take_unicast_to(&self, cidr: &str) {
        sh(&[
            "ip",
            "netns",
            "exec",
            &self.clients.name,
            "sysctl",
            "-qw",
            "net.ipv4.icmp_echo_ignore_all=1",
        ]);
        self.clients.ip(&[
            "route",
            "add",
            "local",
            cidr,
            "dev",
            &self.client_if,
            "table",
            "local",
        ]);
    }

    /// The value of the sample `sample` (a metric name, with its labels if it has
    /// any) in the `/metrics` of the member at `host`:8080; `None` when it does not
    /// answer or has no such sample.
    pub(crate) fn metric(&self, host: impl std::fmt::Display, sample: &str) -> Option<u64> {
        self.metrics(host).lines().find_map(|l| {
            l.strip_prefix(sample)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// The `/metrics` text of the member whose HTTP listener is `host`:8080, read with
    /// curl inside the servers' namespace ("" when it does not answer).
    pub(crate) fn metrics(&self, host: impl std::fmt::Display) -> String {
        self.servers
            .command("curl")
            .args(["-s", "-m", "2", "--noproxy", "*"])
            .arg(format!("http://{host}:8080/metrics"))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

/// One reply seen by the broadcast client. Equal when the same server answered the
/// same address the same way: what the tests compare (`lease_secs` is for the
/// nemesis' checker, which reads each ACK's interval).
#[derive(Debug, Clone, Copy, Eq)]
pub(crate) struct Seen {
    pub kind: MessageType,
    pub server: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    /// The lease time (option 51), when the reply carried one.
    pub lease_secs: Option<u32>,
}

impl PartialEq for Seen {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, self.server, self.yiaddr) == (other.kind, other.server, other.yiaddr)
    }
}

/// The lease time a reply carries (option 51).
fn lease_secs_of(m: &Message) -> Option<u32> {
    match m.opts().get(OptionCode::AddressLeaseTime) {
        Some(DhcpOption::AddressLeaseTime(t)) => Some(*t),
        _ => None,
    }
}

/// Many simulated machines broadcasting from one socket on port 68 (like a PXE ROM
/// with the broadcast flag set, so every reply is broadcast back).
pub(crate) struct BroadcastClient {
    socket: UdpSocket,
    next_xid: u32,
    /// Option 12 sent in every message, when set.
    pub hostname: Option<String>,
}

impl BroadcastClient {
    /// Binds 0.0.0.0:68 on `interface` (call from inside the clients namespace).
    pub(crate) fn new(interface: &str) -> Self {
        let s = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        s.set_reuse_address(true).unwrap();
        s.set_broadcast(true).unwrap();
        // Sends a RELEASE from the address it releases (`send_from`).
        s.set_ip_transparent(true).unwrap();
        s.bind_device(Some(interface.as_bytes())).unwrap();
        s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68).into())
            .unwrap();
        // Room for every reply of a burst: with replicated leases each member holding a
        // lease answers its INIT-REBOOT, so a burst of them brings several replies each.
        shardboot::sockopt::enlarge_recv_buffer(&s, 8 << 20);
        let socket: UdpSocket = s.into();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        Self {
            socket,
            next_xid: 0x5000,
            hostname: None,
        }
    }

    fn message(&mut self, kind: MessageType, mac: &[u8; 6], secs: u16) -> Message {
        let z = Ipv4Addr::UNSPECIFIED;
        self.next_xid = self.next_xid.wrapping_add(1);
        let mut m = Message::new_with_id(self.next_xid, z, z, z, z, mac);
        m.set_flags(Flags::default().set_broadcast());
        m.set_secs(secs);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        if let Some(h) = &self.hostname {
            m.opts_mut().insert(DhcpOption::Hostname(h.clone()));
        }
        m
    }

    fn send(&self, m: &Message) {
        self.socket
            .send_to(
                &m.to_vec().unwrap(),
                SocketAddrV4::new(Ipv4Addr::BROADCAST, 67),
            )
            .unwrap();
    }

    /// Broadcasts `m` from `source`, an address this side need not have (the socket is
    /// transparent), as the machine holding that address would send it.
    fn send_from(&self, source: Ipv4Addr, m: &Message) {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrIn};
        use std::os::fd::AsRawFd;
        let info = libc::in_pktinfo {
            ipi_ifindex: 0,
            ipi_spec_dst: libc::in_addr {
                s_addr: u32::from(source).to_be(),
            },
            ipi_addr: libc::in_addr { s_addr: 0 },
        };
        let bytes = m.to_vec().unwrap();
        let to = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::BROADCAST, 67));
        sendmsg(
            self.socket.as_raw_fd(),
            &[std::io::IoSlice::new(&bytes)],
            &[ControlMessage::Ipv4PacketInfo(&info)],
            MsgFlags::empty(),
            Some(&to),
        )
        .unwrap();
    }

    /// Every reply per xid until `wait` has passed (not stopping at the first: the
    /// test must see a second member answering too).
    fn collect(&self, xids: &HashMap<u32, usize>, wait: Duration) -> HashMap<usize, Vec<Seen>> {
        let mut got: HashMap<usize, Vec<Seen>> = HashMap::new();
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 1500];
        while Instant::now() < deadline {
            let Ok(n) = self.socket.recv(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::decode(&mut Decoder::new(&buf[..n])) else {
                continue;
            };
            let Some(i) = xids.get(&m.xid()) else {
                continue;
            };
            let server = match m.opts().get(OptionCode::ServerIdentifier) {
                Some(DhcpOption::ServerIdentifier(s)) => *s,
                _ => Ipv4Addr::UNSPECIFIED,
            };
            if let Some(kind) = m.opts().msg_type() {
                got.entry(*i).or_default().push(Seen {
                    kind,
                    server,
                    yiaddr: m.yiaddr(),
                    lease_secs: lease_secs_of(&m),
                });
            }
        }
        got
    }

    /// Sends `msgs` paced in bursts of 50; every reply per message, in order.
    fn exchange(&mut self, msgs: &[Message], wait: Duration) -> Vec<Vec<Seen>> {
        let mut xids = HashMap::new();
        for (i, m) in msgs.iter().enumerate() {
            xids.insert(m.xid(), i);
            self.send(m);
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let mut got = self.collect(&xids, wait);
        (0..msgs.len())
            .map(|i| got.remove(&i).unwrap_or_default())
            .collect()
    }

    /// A DISCOVER per MAC (with `secs`), paced in bursts; every OFFER per MAC.
    pub(crate) fn discover(
        &mut self,
        macs: &[[u8; 6]],
        secs: u16,
        wait: Duration,
    ) -> Vec<Vec<Seen>> {
        let msgs: Vec<Message> = macs
            .iter()
            .map(|mac| self.message(MessageType::Discover, mac, secs))
            .collect();
        self.exchange(&msgs, wait)
    }

    /// One DISCOVER; the first OFFER and when it arrived, or `None` after `wait`.
    pub(crate) fn first_offer(
        &mut self,
        mac: &[u8; 6],
        secs: u16,
        wait: Duration,
    ) -> Option<(Seen, Instant)> {
        let d = self.message(MessageType::Discover, mac, secs);
        self.send(&d);
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 1500];
        while Instant::now() < deadline {
            let Ok(n) = self.socket.recv(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::decode(&mut Decoder::new(&buf[..n])) else {
                continue;
            };
            if m.xid() != d.xid() || m.opts().msg_type() != Some(MessageType::Offer) {
                continue;
            }
            let server = match m.opts().get(OptionCode::ServerIdentifier) {
                Some(DhcpOption::ServerIdentifier(s)) => *s,
                _ => Ipv4Addr::UNSPECIFIED,
            };
            let seen = Seen {
                kind: MessageType::Offer,
                server,
                yiaddr: m.yiaddr(),
                lease_secs: lease_secs_of(&m),
            };
            return Some((seen, Instant::now()));
        }
        None
    }

    /// A SELECTING REQUEST per (MAC, server, address); every reply per MAC.
    pub(crate) fn request(
        &mut self,
        offers: &[([u8; 6], Ipv4Addr, Ipv4Addr)],
        wait: Duration,
    ) -> Vec<Vec<Seen>> {
        let msgs: Vec<Message> = offers
            .iter()
            .map(|(mac, server, ip)| {
                let mut r = self.message(MessageType::Request, mac, 0);
                r.opts_mut().insert(DhcpOption::ServerIdentifier(*server));
                r.opts_mut().insert(DhcpOption::RequestedIpAddress(*ip));
                r
            })
            .collect();
        self.exchange(&msgs, wait)
    }

    /// REBINDING (ciaddr, no server-id) per (MAC, address), broadcast as RFC 2131
    /// §4.4.5 says once T2 has passed; every reply per MAC.
    pub(crate) fn rebind(
        &mut self,
        clients: &[([u8; 6], Ipv4Addr)],
        wait: Duration,
    ) -> Vec<Vec<Seen>> {
        let msgs: Vec<Message> = clients
            .iter()
            .map(|(mac, ip)| {
                let mut r = self.message(MessageType::Request, mac, 0);
                r.set_ciaddr(*ip);
                r
            })
            .collect();
        self.exchange(&msgs, wait)
    }

    /// A RELEASE per (MAC, address), each from the address it releases: a server
    /// believes a RELEASE on the link only from ciaddr (RFC 2131 §4.4.6). Broadcast, so
    /// every member holding the record frees it (RFC 2131 unicasts it to the server,
    /// which this client has no route to).
    pub(crate) fn release(&mut self, clients: &[([u8; 6], Ipv4Addr)]) {
        for (i, (mac, ip)) in clients.iter().enumerate() {
            let mut r = self.message(MessageType::Release, mac, 0);
            r.set_ciaddr(*ip);
            self.send_from(*ip, &r);
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// INIT-REBOOT (no server-id, option 50) per (MAC, address); every reply per MAC.
    pub(crate) fn init_reboot(
        &mut self,
        clients: &[([u8; 6], Ipv4Addr)],
        wait: Duration,
    ) -> Vec<Vec<Seen>> {
        let msgs: Vec<Message> = clients
            .iter()
            .map(|(mac, ip)| {
                let mut r = self.message(MessageType::Request, mac, 0);
                r.opts_mut().insert(DhcpOption::RequestedIpAddress(*ip));
                r
            })
            .collect();
        self.exchange(&msgs, wait)
    }
}
