//! A closed-loop DHCPv4 load generator for benches: keeps `--window` four-way exchanges
//! (DISCOVER, OFFER, REQUEST, ACK) in flight as a relay agent would, so a server is
//! measured at saturation rather than at the rate a slower generator can offer.
//!
//! Packets are built and read by hand from a template (no allocation per packet), so the
//! generator costs far less CPU per exchange than the servers it measures; perfdhcp stops
//! near 10,000 exchanges/s on two cores. Clients are `--clients` MACs used in turn, as
//! perfdhcp's `-R` does; an exchange with no answer for `--timeout-ms` is counted lost
//! and its slot reused. Every ACK is checked: an address ACKed to two MACs is counted as
//! a duplicate.
//!
//! Run inside the client namespace (it binds `<relay>:67`):
//! `dhcp_load --relay 198.18.0.2 --server 198.18.0.1 --seconds 10`

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// This generator's address, sent as giaddr; replies come back to <relay>:67.
    #[arg(long)]
    relay: Ipv4Addr,
    /// The server, on port 67.
    #[arg(long)]
    server: Ipv4Addr,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Exchanges in flight at once.
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Distinct client MACs, used in turn.
    #[arg(long, default_value_t = 50_000)]
    clients: u32,
    /// An exchange without an answer for this long is lost.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
}

#[path = "common/closed_loop.rs"]
mod closed_loop;
#[path = "common/dhcp_wire.rs"]
mod dhcp_wire;

use closed_loop::Step;
use dhcp_wire::{ACK, DISCOVER, NAK, OFFER, REQUEST};

fn mac(client: u32) -> [u8; 6] {
    dhcp_wire::mac(0x5c, client)
}

/// A relayed BOOTREQUEST of `kind` for `client`, with option 50/54 for a REQUEST.
fn request(
    buf: &mut Vec<u8>,
    kind: u8,
    xid: u32,
    client: u32,
    relay: Ipv4Addr,
    ip: Ipv4Addr,
    server: Ipv4Addr,
) {
    dhcp_wire::build(
        buf,
        &dhcp_wire::Request {
            kind,
            xid,
            mac: mac(client),
            relay,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            selecting: (kind == REQUEST).then_some((ip, server)),
            extra: &[],
        },
    );
}

/// DHCPv4 for the closed loop: a relayed DISCOVER, then a REQUEST for the address
/// offered.
struct Dhcp4 {
    relay: Ipv4Addr,
    server: Ipv4Addr,
}

impl closed_loop::Protocol for Dhcp4 {
    type Address = Ipv4Addr;
    type Answer<'a> = dhcp_wire::Reply;
    const GENERATION_MASK: u16 = u16::MAX;

    fn first(&self, out: &mut Vec<u8>, xid: u32, client: u32) {
        let unspecified = Ipv4Addr::UNSPECIFIED;
        request(
            out,
            DISCOVER,
            xid,
            client,
            self.relay,
            unspecified,
            self.server,
        );
    }

    fn read(&self, reply: &[u8]) -> Option<(u32, dhcp_wire::Reply)> {
        dhcp_wire::parse(reply).map(|r| (r.xid, r))
    }

    fn step(
        &self,
        r: dhcp_wire::Reply,
        xid: u32,
        slot: &closed_loop::Slot,
        out: &mut Vec<u8>,
    ) -> Step<Ipv4Addr> {
        match (r.kind, slot.requesting) {
            (OFFER, false) => {
                let sid = r.server_id.unwrap_or(self.server);
                request(out, REQUEST, xid, slot.client, self.relay, r.yiaddr, sid);
                Step::Request
            }
            (ACK, true) => Step::Bound(r.yiaddr),
            (NAK, true) => Step::Refused,
            _ => Step::Malformed,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.window > 0 && a.window < 1 << 16,
        "--window must be 1..65535"
    );
    anyhow::ensure!(a.clients > 0, "--clients must be at least 1");
    let socket = UdpSocket::bind(SocketAddrV4::new(a.relay, 67))?;
    socket.set_nonblocking(true)?;
    // A window of replies can arrive at once; the default buffer would drop some.
    shardboot::sockopt::enlarge_recv_buffer(&socket, 8 << 20);
    let protocol = Dhcp4 {
        relay: a.relay,
        server: a.server,
    };
    let (counts, secs) = closed_loop::run(
        &protocol,
        &socket,
        SocketAddrV4::new(a.server, 67).into(),
        a.window,
        a.clients,
        Duration::from_millis(a.timeout_ms),
        a.seconds,
    )?;
    println!(
        "exchanges {} rate {:.0}/s lost {} naks {} duplicates {} malformed {} late {}",
        counts.exchanges,
        counts.exchanges as f64 / secs,
        counts.lost,
        counts.refused,
        counts.duplicates,
        counts.malformed,
        counts.late
    );
    Ok(())
}
