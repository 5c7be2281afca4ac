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

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use clap::Parser;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

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

#[path = "common/dhcp_wire.rs"]
mod dhcp_wire;

use dhcp_wire::{ACK, DISCOVER, NAK, OFFER, REQUEST};

/// One exchange in flight, indexed by its slot (the low bits of the xid).
#[derive(Clone, Copy)]
struct Slot {
    client: u32,
    sent: Instant,
    requesting: bool,
    /// Bumped per exchange, in the xid's high bits, so a late reply to an earlier
    /// exchange in this slot is recognised.
    generation: u16,
}

#[derive(Default)]
struct Counts {
    exchanges: u64,
    lost: u64,
    naks: u64,
    malformed: u64,
    duplicates: u64,
    late: u64,
}

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
    let server = SocketAddrV4::new(a.server, 67);
    let timeout = Duration::from_millis(a.timeout_ms);
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);

    let mut slots: Vec<Option<Slot>> = vec![None; a.window];
    let mut free: Vec<usize> = (0..a.window).rev().collect();
    let mut next_client = 0u32;
    let mut generation = 0u16;
    let mut holder: HashMap<Ipv4Addr, u32> = HashMap::new();
    let mut counts = Counts::default();
    let mut out = Vec::with_capacity(300);
    let mut buf = vec![0u8; 1500];
    let xid_of = |slot: usize, generation: u16| (u32::from(generation) << 16) | slot as u32;

    while Instant::now() < end {
        // Fill the window with new exchanges.
        while let Some(slot) = free.pop() {
            generation = generation.wrapping_add(1);
            let client = next_client % a.clients;
            next_client = next_client.wrapping_add(1);
            slots[slot] = Some(Slot {
                client,
                sent: Instant::now(),
                requesting: false,
                generation,
            });
            let xid = xid_of(slot, generation);
            request(
                &mut out,
                DISCOVER,
                xid,
                client,
                a.relay,
                Ipv4Addr::UNSPECIFIED,
                a.server,
            );
            match socket.send_to(&out, server) {
                Ok(_) => {}
                // A full send buffer: try again on the next pass.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    slots[slot] = None;
                    free.push(slot);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Read what has arrived; wait briefly when nothing has.
        let mut got = false;
        loop {
            let n = match socket.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            };
            got = true;
            let Some(dhcp_wire::Reply {
                xid,
                kind,
                yiaddr,
                server_id,
            }) = dhcp_wire::parse(&buf[..n])
            else {
                counts.malformed += 1;
                continue;
            };
            let idx = (xid & 0xffff) as usize;
            let Some(Some(s)) = slots.get(idx).copied() else {
                counts.late += 1;
                continue;
            };
            if s.generation != (xid >> 16) as u16 {
                counts.late += 1;
                continue;
            }
            match (kind, s.requesting) {
                (OFFER, false) => {
                    let sid = server_id.unwrap_or(a.server);
                    request(&mut out, REQUEST, xid, s.client, a.relay, yiaddr, sid);
                    let _ = socket.send_to(&out, server);
                    slots[idx] = Some(Slot {
                        requesting: true,
                        sent: Instant::now(),
                        ..s
                    });
                }
                (ACK, true) => {
                    if let Some(prev) = holder.insert(yiaddr, s.client) {
                        if prev != s.client {
                            counts.duplicates += 1;
                        }
                    }
                    counts.exchanges += 1;
                    slots[idx] = None;
                    free.push(idx);
                }
                (NAK, true) => {
                    counts.naks += 1;
                    slots[idx] = None;
                    free.push(idx);
                }
                _ => counts.malformed += 1,
            }
        }
        // Give up on exchanges that went unanswered.
        let now = Instant::now();
        for (idx, slot) in slots.iter_mut().enumerate() {
            if slot.is_some_and(|s| now.duration_since(s.sent) > timeout) {
                *slot = None;
                free.push(idx);
                counts.lost += 1;
            }
        }
        if !got && free.is_empty() {
            let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(1u8));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "exchanges {} rate {:.0}/s lost {} naks {} duplicates {} malformed {} late {}",
        counts.exchanges,
        counts.exchanges as f64 / secs,
        counts.lost,
        counts.naks,
        counts.duplicates,
        counts.malformed,
        counts.late
    );
    Ok(())
}
