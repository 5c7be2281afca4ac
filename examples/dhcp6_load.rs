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

use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::time::Duration;

use clap::Parser;

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

#[path = "common/closed_loop.rs"]
mod closed_loop;

use closed_loop::Step;

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

/// DHCPv6 for the closed loop: a relayed Solicit, then a Request for the address
/// advertised, from the server that advertised it.
struct Dhcp6 {
    relay: Ipv6Addr,
}

impl closed_loop::Protocol for Dhcp6 {
    type Address = Ipv6Addr;
    type Answer<'a> = Answer<'a>;
    // The transaction id has 24 bits: the slot's 16 and 8 of generation.
    const GENERATION_MASK: u16 = 0xff;

    fn first(&self, out: &mut Vec<u8>, xid: u32, client: u32) {
        relayed(out, SOLICIT, xid, client, self.relay, None);
    }

    fn read<'a>(&self, reply: &'a [u8]) -> Option<(u32, Answer<'a>)> {
        parse(reply).map(|a| (a.xid, a))
    }

    fn step(
        &self,
        answer: Answer<'_>,
        xid: u32,
        slot: &closed_loop::Slot,
        out: &mut Vec<u8>,
    ) -> Step<Ipv6Addr> {
        match (
            answer.kind,
            slot.requesting,
            answer.address,
            answer.server_id,
        ) {
            (ADVERTISE, false, Some(address), Some(server_id)) => {
                let offered = Offered { server_id, address };
                relayed(out, REQUEST, xid, slot.client, self.relay, Some(offered));
                Step::Request
            }
            (REPLY, true, Some(address), _) => Step::Bound(address),
            // An Advertise or Reply without an address: NoAddrsAvail or a refusal.
            (ADVERTISE | REPLY, _, None, _) => Step::Refused,
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
    let socket = UdpSocket::bind(SocketAddrV6::new(a.relay, 547, 0, 0))?;
    socket.set_nonblocking(true)?;
    // A window of replies can arrive at once; the default buffer would drop some.
    shardboot::sockopt::enlarge_recv_buffer(&socket, 8 << 20);
    let (counts, secs) = closed_loop::run(
        &Dhcp6 { relay: a.relay },
        &socket,
        SocketAddrV6::new(a.server, 547, 0, 0).into(),
        a.window,
        a.clients,
        Duration::from_millis(a.timeout_ms),
        a.seconds,
    )?;
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
