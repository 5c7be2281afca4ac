//! The closed loop of the DHCP load generators (`dhcp_load`, `dhcp6_load`): `window`
//! four-way exchanges in flight over one non-blocking relay socket, a new one as soon as
//! a slot frees, so a server is measured at saturation. An exchange unanswered for
//! `timeout` is counted lost and its slot reused. The slot is the transaction id's low
//! 16 bits and a per-exchange generation the bits above, so a late reply to an earlier
//! exchange in the slot is told apart. Every address bound is checked: one bound to two
//! clients is counted as a duplicate.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// One exchange in flight.
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) client: u32,
    sent: Instant,
    /// The second message (REQUEST) went out.
    pub(crate) requesting: bool,
    generation: u16,
}

/// What a reply does to its exchange.
pub(crate) enum Step<A> {
    /// The second message is in `out`: send it and wait for its answer.
    Request,
    /// The exchange ended with the address bound to the client.
    Bound(A),
    /// The server refused (a NAK, no address to give).
    Refused,
    /// Not a reply the exchange expects.
    Malformed,
}

/// One protocol's messages, built and read by hand.
pub(crate) trait Protocol {
    /// What a client is given.
    type Address: Eq + Hash;
    /// A reply, read.
    type Answer<'a>;
    /// The generation bits the transaction id has room for above the slot.
    const GENERATION_MASK: u16;
    /// Writes the first message (DISCOVER, Solicit) of exchange `xid` for `client`.
    fn first(&self, out: &mut Vec<u8>, xid: u32, client: u32);
    /// Reads `reply`: its transaction id and what it says; `None` when it cannot be read.
    fn read<'a>(&self, reply: &'a [u8]) -> Option<(u32, Self::Answer<'a>)>;
    /// What `answer` does to the exchange `xid` in `slot`, writing the second message
    /// into `out` when the exchange goes on.
    fn step(
        &self,
        answer: Self::Answer<'_>,
        xid: u32,
        slot: &Slot,
        out: &mut Vec<u8>,
    ) -> Step<Self::Address>;
}

/// What one run counted.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) exchanges: u64,
    pub(crate) lost: u64,
    pub(crate) refused: u64,
    pub(crate) malformed: u64,
    pub(crate) duplicates: u64,
    pub(crate) late: u64,
}

/// Runs the loop for `seconds` against `server`, with `clients` clients used in turn;
/// returns the counts and the seconds it ran.
pub(crate) fn run<P: Protocol>(
    protocol: &P,
    socket: &UdpSocket,
    server: SocketAddr,
    window: usize,
    clients: u32,
    timeout: Duration,
    seconds: u64,
) -> std::io::Result<(Counts, f64)> {
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut slots: Vec<Option<Slot>> = vec![None; window];
    let mut free: Vec<usize> = (0..window).rev().collect();
    let mut next_client = 0u32;
    let mut generation = 0u16;
    let mut holder: HashMap<P::Address, u32> = HashMap::new();
    let mut counts = Counts::default();
    let mut out = Vec::with_capacity(300);
    let mut buf = vec![0u8; 1500];
    let xid_of = |slot: usize, generation: u16| (u32::from(generation) << 16) | slot as u32;

    while Instant::now() < end {
        // Fill the window with new exchanges.
        while let Some(slot) = free.pop() {
            generation = generation.wrapping_add(1) & P::GENERATION_MASK;
            let client = next_client % clients;
            next_client = next_client.wrapping_add(1);
            slots[slot] = Some(Slot {
                client,
                sent: Instant::now(),
                requesting: false,
                generation,
            });
            protocol.first(&mut out, xid_of(slot, generation), client);
            match socket.send_to(&out, server) {
                Ok(_) => {}
                // A full send buffer: try again on the next pass.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    slots[slot] = None;
                    free.push(slot);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        // Read what has arrived; wait briefly when nothing has.
        let mut got = false;
        loop {
            let n = match socket.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            got = true;
            let Some((xid, answer)) = protocol.read(&buf[..n]) else {
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
            match protocol.step(answer, xid, &s, &mut out) {
                Step::Request => {
                    let _ = socket.send_to(&out, server);
                    slots[idx] = Some(Slot {
                        requesting: true,
                        sent: Instant::now(),
                        ..s
                    });
                }
                Step::Bound(address) => {
                    if let Some(prev) = holder.insert(address, s.client) {
                        if prev != s.client {
                            counts.duplicates += 1;
                        }
                    }
                    counts.exchanges += 1;
                    slots[idx] = None;
                    free.push(idx);
                }
                Step::Refused => {
                    counts.refused += 1;
                    slots[idx] = None;
                    free.push(idx);
                }
                Step::Malformed => counts.malformed += 1,
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
    Ok((counts, start.elapsed().as_secs_f64()))
}
