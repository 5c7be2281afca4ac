//! A closed-loop DHCPv6 load generator for benches, the v6 twin of `dhcp_load`: keeps
//! `--window` four-way exchanges (Solicit, Advertise, Request, Reply) in flight as one
//! relay agent would, so a server is measured at saturation, by the same kind of
//! generator as v4, and the two families compare like with like.
//!
//! Every message goes out as a Relay-forward (RFC 8415 §9.1) from `<relay>:547` with
//! `<relay>` as link-address, and comes back as a Relay-reply; packets are built and read
//! by hand (no allocation per packet). Clients are `--clients` DUID-LLs used in turn; an
//! exchange with no answer for `--timeout-ms` is counted lost and its slot reused. Every
//! Reply is checked: an address given to two clients is counted as a duplicate.
//!
//! Run inside the client namespace (it binds `[<relay>]:547`):
//! `dhcp6_load --relay fd00:18::2 --server fd00:18::1 --seconds 10`

use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use clap::Parser;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

#[derive(Parser)]
struct Args {
    /// This generator's address, sent as link-address; replies come back to it on 547.
    #[arg(long)]
    relay: Ipv6Addr,
    /// The server, on port 547.
    #[arg(long)]
    server: Ipv6Addr,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Exchanges in flight at once (at most 65,535: the slot is the low 16 bits of the
    /// 24-bit transaction id).
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Distinct clients, used in turn.
    #[arg(long, default_value_t = 50_000)]
    clients: u32,
    /// An exchange without an answer for this long is lost.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
}

// RFC 8415 §7.3 message types and §21 option codes.
const SOLICIT: u8 = 1;
const ADVERTISE: u8 = 2;
const REQUEST: u8 = 3;
const REPLY: u8 = 7;
const RELAY_FORW: u8 = 12;
const RELAY_REPL: u8 = 13;
const OPT_CLIENTID: u16 = 1;
const OPT_SERVERID: u16 = 2;
const OPT_IA_NA: u16 = 3;
const OPT_IAADDR: u16 = 5;
const OPT_ELAPSED_TIME: u16 = 8;
const OPT_RELAY_MSG: u16 = 9;
const OPT_STATUS_CODE: u16 = 13;
const IAID: u32 = 1;

/// One exchange in flight, indexed by its slot (the low 16 bits of the transaction id).
#[derive(Clone, Copy)]
struct Slot {
    client: u32,
    sent: Instant,
    requesting: bool,
    /// Bumped per exchange, in the transaction id's high 8 bits, so a late reply to an
    /// earlier exchange in this slot is recognised.
    generation: u8,
}

#[derive(Default)]
struct Counts {
    exchanges: u64,
    lost: u64,
    refused: u64,
    malformed: u64,
    duplicates: u64,
    late: u64,
}

/// A client's MAC: locally administered, never a real NIC's.
fn mac(client: u32) -> [u8; 6] {
    let b = client.to_be_bytes();
    [0x02, 0x6c, b[0], b[1], b[2], b[3]]
}

fn put_opt(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    buf.extend_from_slice(&code.to_be_bytes());
    buf.extend_from_slice(&(value.len() as u16).to_be_bytes());
    buf.extend_from_slice(value);
}

/// What one exchange's message carries besides its type and id.
struct Offered<'a> {
    server_id: &'a [u8],
    address: Ipv6Addr,
}

/// A Relay-forward around a Solicit, or around a Request for `offered`, for `client`.
fn relayed(
    out: &mut Vec<u8>,
    kind: u8,
    xid: u32,
    client: u32,
    relay: Ipv6Addr,
    offered: Option<Offered<'_>>,
) {
    let m = mac(client);
    // The client's link-local address, as a relay names the peer (RFC 4291 EUI-64).
    let peer = Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        u16::from_be_bytes([m[0] ^ 0x02, m[1]]),
        u16::from_be_bytes([m[2], 0xff]),
        u16::from_be_bytes([0xfe, m[3]]),
        u16::from_be_bytes([m[4], m[5]]),
    );
    out.clear();
    out.extend_from_slice(&[RELAY_FORW, 0]);
    out.extend_from_slice(&relay.octets());
    out.extend_from_slice(&peer.octets());
    // The Relay Message option's header, its length filled in below.
    let header = out.len();
    out.extend_from_slice(&OPT_RELAY_MSG.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    let inner = out.len();
    out.push(kind);
    out.extend_from_slice(&xid.to_be_bytes()[1..]);
    // DUID-LL (RFC 8415 §11.4): type 3, hardware type 1 (Ethernet), the MAC.
    let duid = [0, 3, 0, 1, m[0], m[1], m[2], m[3], m[4], m[5]];
    put_opt(out, OPT_CLIENTID, &duid);
    put_opt(out, OPT_ELAPSED_TIME, &[0, 0]);
    let mut ia = [0u8; 12 + 4 + 24];
    ia[..4].copy_from_slice(&IAID.to_be_bytes());
    let ia_len = match &offered {
        None => 12,
        Some(o) => {
            put_opt(out, OPT_SERVERID, o.server_id);
            ia[12..14].copy_from_slice(&OPT_IAADDR.to_be_bytes());
            ia[14..16].copy_from_slice(&24u16.to_be_bytes());
            ia[16..32].copy_from_slice(&o.address.octets());
            ia.len()
        }
    };
    put_opt(out, OPT_IA_NA, &ia[..ia_len]);
    let len = (out.len() - inner) as u16;
    out[header + 2..header + 4].copy_from_slice(&len.to_be_bytes());
}

/// The options of a message body: (code, value) in order, stopping at a malformed one.
fn options(mut body: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if body.len() < 4 {
            return None;
        }
        let code = u16::from_be_bytes([body[0], body[1]]);
        let len = usize::from(u16::from_be_bytes([body[2], body[3]]));
        let value = body.get(4..4 + len)?;
        body = &body[4 + len..];
        Some((code, value))
    })
}

/// What the generator reads of a Relay-reply: the inner message's type, transaction id,
/// server DUID and the first address of its IA_NA (None when the IA carries a status,
/// as NoAddrsAvail).
struct Answer<'a> {
    kind: u8,
    xid: u32,
    server_id: Option<&'a [u8]>,
    address: Option<Ipv6Addr>,
}

fn parse(datagram: &[u8]) -> Option<Answer<'_>> {
    if datagram.len() < 34 || datagram[0] != RELAY_REPL {
        return None;
    }
    let (_, msg) = options(&datagram[34..]).find(|(c, _)| *c == OPT_RELAY_MSG)?;
    if msg.len() < 4 {
        return None;
    }
    let xid = u32::from_be_bytes([0, msg[1], msg[2], msg[3]]);
    let mut answer = Answer {
        kind: msg[0],
        xid,
        server_id: None,
        address: None,
    };
    for (code, value) in options(&msg[4..]) {
        match code {
            OPT_SERVERID => answer.server_id = Some(value),
            OPT_IA_NA if value.len() >= 12 => {
                for (c, v) in options(&value[12..]) {
                    if c == OPT_IAADDR && v.len() >= 16 && answer.address.is_none() {
                        let octets: [u8; 16] = v[..16].try_into().ok()?;
                        answer.address = Some(Ipv6Addr::from(octets));
                    }
                    if c == OPT_STATUS_CODE && v.len() >= 2 && v[..2] != [0, 0] {
                        answer.address = None;
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Some(answer)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.window > 0 && a.window < 1 << 16,
        "--window must be 1..65535"
    );
    anyhow::ensure!(a.clients > 0, "--clients must be at least 1");
    let socket = UdpSocket::bind(SocketAddrV6::new(a.relay, 547, 0, 0))?;
    socket.set_nonblocking(true)?;
    // A window of replies can arrive at once; the default buffer would drop some.
    shardboot::sockopt::enlarge_recv_buffer(&socket, 8 << 20);
    let server = SocketAddrV6::new(a.server, 547, 0, 0);
    let timeout = Duration::from_millis(a.timeout_ms);
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);

    let mut slots: Vec<Option<Slot>> = vec![None; a.window];
    let mut free: Vec<usize> = (0..a.window).rev().collect();
    let mut next_client = 0u32;
    let mut generation = 0u8;
    let mut holder: HashMap<Ipv6Addr, u32> = HashMap::new();
    let mut counts = Counts::default();
    let mut out = Vec::with_capacity(300);
    let mut buf = vec![0u8; 1500];
    let mut server_id = [0u8; 130];
    let xid_of = |slot: usize, generation: u8| (u32::from(generation) << 16) | slot as u32;

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
            relayed(
                &mut out,
                SOLICIT,
                xid_of(slot, generation),
                client,
                a.relay,
                None,
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
            let Some(answer) = parse(&buf[..n]) else {
                counts.malformed += 1;
                continue;
            };
            let idx = (answer.xid & 0xffff) as usize;
            let Some(Some(s)) = slots.get(idx).copied() else {
                counts.late += 1;
                continue;
            };
            if s.generation != (answer.xid >> 16) as u8 {
                counts.late += 1;
                continue;
            }
            match (answer.kind, s.requesting, answer.address, answer.server_id) {
                (ADVERTISE, false, Some(address), Some(sid)) if sid.len() <= server_id.len() => {
                    server_id[..sid.len()].copy_from_slice(sid);
                    let sid_len = sid.len();
                    relayed(
                        &mut out,
                        REQUEST,
                        answer.xid,
                        s.client,
                        a.relay,
                        Some(Offered {
                            server_id: &server_id[..sid_len],
                            address,
                        }),
                    );
                    let _ = socket.send_to(&out, server);
                    slots[idx] = Some(Slot {
                        requesting: true,
                        sent: Instant::now(),
                        ..s
                    });
                }
                (REPLY, true, Some(address), _) => {
                    if let Some(prev) = holder.insert(address, s.client) {
                        if prev != s.client {
                            counts.duplicates += 1;
                        }
                    }
                    counts.exchanges += 1;
                    slots[idx] = None;
                    free.push(idx);
                }
                // An Advertise or Reply without an address: NoAddrsAvail or a refusal.
                (ADVERTISE | REPLY, _, None, _) => {
                    counts.refused += 1;
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
        "exchanges {} rate {:.0}/s lost {} refused {} duplicates {} malformed {} late {}",
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
