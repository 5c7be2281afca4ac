//! A rack powering on, for benches: `--machines` machines start at once (or over
//! `--spread-ms`), through one relay agent, and the generator reports how long until the
//! last one is bound, and how many packets it had to send again.
//!
//! The mix is what a provisioning network sees when a rack comes up:
//! - PXE machines (BIOS and UEFI in turn): the firmware's four-way exchange (options
//!   60, 93, 94, 97, RFC 4578), then iPXE's own (user class `iPXE`, option 77, RFC 3004)
//!   once the firmware has chained it: two leases' worth of work per machine;
//! - renewing machines (`--renewing` percent): machines already running, bound before
//!   the storm, that send their REQUEST with `ciaddr` (RFC 2131 §4.3.2) into it.
//!
//! Retransmission is RFC 2131 §4.1's: 4 s before the first, doubling up to 64 s, each
//! randomised by ±1 s (a fixed seed: the same schedule every run), with the same xid. A
//! server that keeps up needs none. Every ACK is checked: an address ACKed to two
//! machines is counted as a duplicate. Bounded by `--limit-secs`.
//!
//! Run inside the client namespace (it binds `<relay>:67`):
//! `boot_storm --relay 198.18.0.2 --server 198.18.0.1 --machines 5000`

#[path = "common/dhcp_wire.rs"]
mod dhcp_wire;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use clap::Parser;
use dhcp_wire::{ACK, DISCOVER, NAK, OFFER, REQUEST};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

#[derive(Parser)]
struct Args {
    /// This generator's address, sent as giaddr; replies come back to <relay>:67.
    #[arg(long)]
    relay: Ipv4Addr,
    /// The server, on port 67.
    #[arg(long)]
    server: Ipv4Addr,
    /// Machines in the storm.
    #[arg(long, default_value_t = 5000)]
    machines: u32,
    /// Percent of them already running, renewing into the storm.
    #[arg(long, default_value_t = 20)]
    renewing: u32,
    /// Spread the power-on over this long (0: all at once).
    #[arg(long, default_value_t = 0)]
    spread_ms: u64,
    /// RFC 2131 §4.1's first retransmission delay (randomised by ±1 s).
    #[arg(long, default_value_t = 4000)]
    first_retry_ms: u64,
    /// Give up after this long.
    #[arg(long, default_value_t = 60)]
    limit_secs: u64,
}

/// Where a machine is in its boot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// Not powered on yet.
    Off,
    /// The firmware's (or a renewing machine's) exchange: DISCOVER sent, or REQUEST.
    Firmware {
        requesting: bool,
    },
    /// iPXE's exchange.
    Ipxe {
        requesting: bool,
    },
    Bound,
}

#[derive(Clone, Copy)]
struct Machine {
    stage: Stage,
    /// The last packet sent, to send again on a retransmission.
    kind: u8,
    offered: Option<(Ipv4Addr, Ipv4Addr)>,
    /// A renewing machine's address.
    holds: Option<Ipv4Addr>,
    sent: Instant,
    tries: u32,
    bound_after: Option<Duration>,
}

#[derive(Default)]
struct Counts {
    sent: u64,
    retransmissions: u64,
    naks: u64,
    duplicates: u64,
    unexpected: u64,
}

fn mac(n: u32) -> [u8; 6] {
    dhcp_wire::mac(0x5b, n)
}

/// One xid per machine and exchange (§4.1: a retransmission keeps it): the machine's
/// number and a bit for iPXE's exchange.
fn xid(n: u32, ipxe: bool) -> u32 {
    (n << 1) | u32::from(ipxe)
}

/// A small xorshift, for the ±1 s randomisation.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The options of machine `n` at this stage: a PXE ROM's (BIOS or UEFI in turn), or
/// iPXE's on top of them.
fn options(n: u32, stage: Stage, renewing: bool, out: &mut Vec<u8>) {
    out.clear();
    if renewing {
        return;
    }
    let uefi = n % 2 == 1;
    let class: &[u8] = if uefi {
        b"PXEClient:Arch:00007:UNDI:003016"
    } else {
        b"PXEClient:Arch:00000:UNDI:002001"
    };
    out.extend_from_slice(&[60, class.len() as u8]);
    out.extend_from_slice(class);
    out.extend_from_slice(&[93, 2, 0, if uefi { 7 } else { 0 }]);
    out.extend_from_slice(&[94, 3, 1, 3, 16]);
    out.extend_from_slice(&[97, 17, 0]);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&[0x5b; 12]);
    out.extend_from_slice(&[55, 6, 1, 3, 6, 43, 60, 67]);
    if matches!(stage, Stage::Ipxe { .. }) {
        out.extend_from_slice(&[77, 4]);
        out.extend_from_slice(b"iPXE");
    }
}

struct Storm {
    socket: UdpSocket,
    server: SocketAddrV4,
    relay: Ipv4Addr,
    out: Vec<u8>,
    extra: Vec<u8>,
    counts: Counts,
}

impl Storm {
    /// Sends machine `n`'s current packet (`m.kind` at `m.stage`).
    fn send(&mut self, n: u32, m: &Machine) -> std::io::Result<()> {
        let ipxe = matches!(m.stage, Stage::Ipxe { .. });
        options(n, m.stage, m.holds.is_some(), &mut self.extra);
        let renewing = m.holds.filter(|_| !ipxe);
        dhcp_wire::build(
            &mut self.out,
            &dhcp_wire::Request {
                kind: m.kind,
                xid: xid(n, ipxe),
                mac: mac(n),
                relay: self.relay,
                ciaddr: renewing.unwrap_or(Ipv4Addr::UNSPECIFIED),
                selecting: m.offered,
                extra: &self.extra,
            },
        );
        self.counts.sent += 1;
        loop {
            match self.socket.send_to(&self.out, self.server) {
                Ok(_) => return Ok(()),
                // A full send buffer: wait for room, as a NIC queue would.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut fds, PollTimeout::from(10u8));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The p-th percentile of sorted `v`, in seconds.
fn percentile(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i].as_secs_f64()
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.machines > 0 && a.machines < 1 << 30,
        "--machines must be 1..2^30"
    );
    anyhow::ensure!(a.renewing <= 100, "--renewing is a percentage");
    let socket = UdpSocket::bind(SocketAddrV4::new(a.relay, 67))?;
    socket.set_nonblocking(true)?;
    // The whole storm's replies can arrive at once.
    shardboot::sockopt::enlarge_recv_buffer(&socket, 64 << 20);
    shardboot::sockopt::enlarge_send_buffer(&socket, 16 << 20);
    let mut storm = Storm {
        socket,
        server: SocketAddrV4::new(a.server, 67),
        relay: a.relay,
        out: Vec::with_capacity(400),
        extra: Vec::with_capacity(100),
        counts: Counts::default(),
    };
    let now = Instant::now();
    let mut machines = vec![
        Machine {
            stage: Stage::Off,
            kind: DISCOVER,
            offered: None,
            holds: None,
            sent: now,
            tries: 0,
            bound_after: None,
        };
        a.machines as usize
    ];
    let renewing = (u64::from(a.machines) * u64::from(a.renewing) / 100) as u32;
    let mut rng = Rng(0x5b00_7a11_0c0f_fee1);
    let mut holder: HashMap<Ipv4Addr, u32> = HashMap::new();
    let mut buf = vec![0u8; 1500];

    // Before the storm (not timed): the renewing machines get their leases, one window
    // of 256 exchanges at a time.
    bind_renewers(
        &mut storm,
        &mut machines[..renewing as usize],
        &mut holder,
        &mut buf,
    )?;
    storm.counts = Counts::default();

    let start = Instant::now();
    let limit = start + Duration::from_secs(a.limit_secs);
    let spread = Duration::from_millis(a.spread_ms);
    let mut powered = 0u32;
    let mut bound = 0u32;
    let first_retry = a.first_retry_ms as i64;
    let delay = |tries: u32, rng: &mut Rng| -> Duration {
        // §4.1: 4 s, 8 s, … up to 64 s, each ±1 s.
        let base = (first_retry << (tries - 1).min(4)).min(64_000);
        Duration::from_millis((base - 1000 + rng.below(2001) as i64).max(100) as u64)
    };
    let mut next_due: Vec<Instant> = vec![limit; a.machines as usize];

    while bound < a.machines && Instant::now() < limit {
        // Power on the machines whose moment has come.
        let elapsed = start.elapsed();
        let due = if spread.is_zero() {
            a.machines
        } else {
            ((elapsed.as_secs_f64() / spread.as_secs_f64()).min(1.0) * f64::from(a.machines)) as u32
        };
        while powered < due {
            let n = powered;
            let m = &mut machines[n as usize];
            m.stage = Stage::Firmware { requesting: false };
            m.kind = if m.holds.is_some() { REQUEST } else { DISCOVER };
            m.sent = Instant::now();
            m.tries = 1;
            let copy = *m;
            storm.send(n, &copy)?;
            next_due[n as usize] = copy.sent + delay(1, &mut rng);
            powered += 1;
        }
        // Read what has arrived.
        let mut got = false;
        loop {
            let len = match storm.socket.recv_from(&mut buf) {
                Ok((len, _)) => len,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            };
            got = true;
            let Some(r) = dhcp_wire::parse(&buf[..len]) else {
                storm.counts.unexpected += 1;
                continue;
            };
            let n = r.xid >> 1;
            let ipxe = r.xid & 1 == 1;
            let Some(m) = machines.get_mut(n as usize) else {
                storm.counts.unexpected += 1;
                continue;
            };
            let next = match (m.stage, ipxe, r.kind) {
                (Stage::Firmware { requesting: false }, false, OFFER)
                | (Stage::Ipxe { requesting: false }, true, OFFER) => {
                    let sid = r.server_id.unwrap_or(*storm.server.ip());
                    m.offered = Some((r.yiaddr, sid));
                    m.kind = REQUEST;
                    m.stage = if ipxe {
                        Stage::Ipxe { requesting: true }
                    } else {
                        Stage::Firmware { requesting: true }
                    };
                    true
                }
                (Stage::Firmware { .. }, false, ACK)
                | (Stage::Ipxe { requesting: true }, true, ACK) => {
                    if let Some(prev) = holder.insert(r.yiaddr, n) {
                        if prev != n {
                            storm.counts.duplicates += 1;
                        }
                    }
                    if ipxe || m.holds.is_some() {
                        m.stage = Stage::Bound;
                        m.bound_after = Some(start.elapsed());
                        next_due[n as usize] = limit;
                        bound += 1;
                        false
                    } else {
                        // The firmware chains iPXE, which asks again on its own xid.
                        m.stage = Stage::Ipxe { requesting: false };
                        m.kind = DISCOVER;
                        m.offered = None;
                        true
                    }
                }
                (_, _, NAK) => {
                    storm.counts.naks += 1;
                    // §4.4.1 / §3.2: back to INIT, a fresh DISCOVER.
                    m.kind = DISCOVER;
                    m.offered = None;
                    m.holds = None;
                    if !ipxe {
                        m.stage = Stage::Firmware { requesting: false };
                    } else {
                        m.stage = Stage::Ipxe { requesting: false };
                    }
                    true
                }
                // A second OFFER or ACK for a step already taken (a retransmission's).
                _ => false,
            };
            if next {
                m.sent = Instant::now();
                m.tries = 1;
                let copy = *m;
                storm.send(n, &copy)?;
                next_due[n as usize] = copy.sent + delay(1, &mut rng);
            }
        }
        // Send again what went unanswered for its back-off.
        let now = Instant::now();
        for n in 0..powered {
            if next_due[n as usize] <= now {
                let m = &mut machines[n as usize];
                m.tries += 1;
                let copy = *m;
                storm.send(n, &copy)?;
                storm.counts.retransmissions += 1;
                next_due[n as usize] = now + delay(copy.tries, &mut rng);
            }
        }
        if !got {
            let mut fds = [PollFd::new(storm.socket.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(1u8));
        }
    }
    let mut times: Vec<Duration> = machines.iter().filter_map(|m| m.bound_after).collect();
    times.sort();
    let c = &storm.counts;
    println!(
        "machines {} renewing {} bound {} last {:.3}s p50 {:.3}s p99 {:.3}s sent {} \
         retransmissions {} naks {} duplicates {} unexpected {}",
        a.machines,
        renewing,
        bound,
        times.last().map_or(f64::NAN, |t| t.as_secs_f64()),
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        c.sent,
        c.retransmissions,
        c.naks,
        c.duplicates,
        c.unexpected
    );
    Ok(())
}

/// Binds each of `machines` (the renewing ones) with a plain four-way exchange, 256 in
/// flight at a time, sending again what is unanswered after a second (and starting over
/// on a NAK), and records its address.
fn bind_renewers(
    storm: &mut Storm,
    machines: &mut [Machine],
    holder: &mut HashMap<Ipv4Addr, u32>,
    buf: &mut [u8],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let discover = |m: &Machine| Machine {
        stage: Stage::Firmware { requesting: false },
        kind: DISCOVER,
        offered: None,
        holds: None,
        sent: Instant::now(),
        ..*m
    };
    for chunk_start in (0..machines.len()).step_by(256) {
        let chunk = chunk_start..(chunk_start + 256).min(machines.len());
        for n in chunk.clone() {
            machines[n] = discover(&machines[n]);
            let copy = machines[n];
            storm.send(n as u32, &copy)?;
        }
        while chunk.clone().any(|n| machines[n].holds.is_none()) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the server did not bind the renewing machines within 60 s"
            );
            let now = Instant::now();
            for n in chunk.clone() {
                let m = machines[n];
                if m.holds.is_none() && now.duration_since(m.sent) > Duration::from_secs(1) {
                    machines[n].sent = now;
                    storm.send(n as u32, &m)?;
                }
            }
            let len = match storm.socket.recv_from(buf) {
                Ok((len, _)) => len,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut fds = [PollFd::new(storm.socket.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(10u8));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some(r) = dhcp_wire::parse(&buf[..len]) else {
                continue;
            };
            let n = (r.xid >> 1) as usize;
            if !chunk.contains(&n) || machines[n].holds.is_some() {
                continue;
            }
            let m = &mut machines[n];
            match (m.kind, r.kind) {
                (DISCOVER, OFFER) => {
                    m.kind = REQUEST;
                    m.offered = Some((r.yiaddr, r.server_id.unwrap_or(*storm.server.ip())));
                    m.sent = Instant::now();
                    let copy = *m;
                    storm.send(n as u32, &copy)?;
                }
                (REQUEST, ACK) => {
                    m.holds = Some(r.yiaddr);
                    holder.insert(r.yiaddr, n as u32);
                }
                (REQUEST, NAK) => {
                    *m = discover(m);
                    let copy = *m;
                    storm.send(n as u32, &copy)?;
                }
                _ => {}
            }
        }
    }
    // Into the storm each sends a RENEWING REQUEST: no option 50/54, ciaddr set.
    for m in machines.iter_mut() {
        *m = Machine {
            stage: Stage::Off,
            kind: REQUEST,
            offered: None,
            ..*m
        };
    }
    Ok(())
}
