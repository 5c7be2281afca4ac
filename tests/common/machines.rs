//! Many machines on one segment ([`super::segment`]) as the members must see them under
//! churn: they arrive (DISCOVER, REQUEST, trying again as firmware does), rebind or
//! reboot on the address they hold, and release in turn. Everything they see goes into
//! a history the independent checker (`super::checker`) judges: no address ACKed to
//! two machines at once, no machine losing its address.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use dhcproto::v4::MessageType;

use super::checker::{self, History, Verdict};
use super::segment::{BroadcastClient, Seen};

/// A test MAC for machine number `n` (locally administered, never a real NIC's).
pub(crate) fn machine_mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x7e, b[0], b[1], b[2], b[3]]
}

/// The bound leases in `shardboot leases --json` output: address → MAC (as text).
pub(crate) fn bound_leases(stored: &serde_json::Value) -> HashMap<Ipv4Addr, String> {
    stored
        .as_array()
        .expect("a JSON array of leases")
        .iter()
        .filter(|l| l["state"] == "bound")
        .map(|l| {
            (
                l["ip"].as_str().unwrap().parse().unwrap(),
                l["mac"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Machines that lost their address, each with a description for the failure.
pub(crate) type Lost = Vec<([u8; 6], String)>;

/// How a machine that holds a lease asks for it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reconfirm {
    /// INIT-REBOOT (RFC 2131 §4.3.2): option 50, no server named, as a machine that
    /// reboots into PXE does.
    InitReboot,
    /// REBINDING (§4.4.5): ciaddr set, broadcast, as a machine whose granting server
    /// went silent past T2 does.
    Rebind,
}

/// The machines and what the segment has seen of them.
pub(crate) struct Machines {
    pub client: BroadcastClient,
    /// Address → the machine holding it now.
    holder: HashMap<Ipv4Addr, [u8; 6]>,
    /// Machines holding a lease, oldest first.
    pub live: VecDeque<([u8; 6], Ipv4Addr)>,
    next: u32,
    /// The `secs` a machine that heard no OFFER sends again with.
    takeover_secs: u16,
    pub acked: usize,
    pub unanswered: usize,
    /// Which member ACKed each machine first, and in which round (for failure messages).
    pub acked_by: HashMap<[u8; 6], (Ipv4Addr, usize)>,
    /// What the machines saw, for the independent checker (`checker`).
    pub history: History,
}

impl Machines {
    /// Machines numbered from `first` (see [`machine_mac`]).
    pub(crate) fn new(client: BroadcastClient, first: u32, takeover_secs: u16) -> Self {
        Self {
            client,
            holder: HashMap::new(),
            live: VecDeque::new(),
            next: first,
            takeover_secs,
            acked: 0,
            unanswered: 0,
            acked_by: HashMap::new(),
            history: History::default(),
        }
    }

    /// `n` new machines DISCOVER and REQUEST, trying again (with `secs` past the
    /// takeover threshold, as firmware that waited) when nobody answered.
    pub(crate) fn arrive(&mut self, n: u32, round: usize) {
        let mut pending: Vec<[u8; 6]> = (self.next..self.next + n).map(machine_mac).collect();
        self.next += n;
        for attempt in 0..4 {
            if pending.is_empty() {
                break;
            }
            let secs = if attempt == 0 { 0 } else { self.takeover_secs };
            let seen = self
                .client
                .discover(&pending, secs, Duration::from_millis(700));
            let requests: Vec<([u8; 6], Ipv4Addr, Ipv4Addr)> = pending
                .iter()
                .zip(&seen)
                .filter_map(|(m, s)| {
                    let o = s.iter().find(|x| x.kind == MessageType::Offer)?;
                    Some((*m, o.server, o.yiaddr))
                })
                .collect();
            let answers = self.client.request(&requests, Duration::from_millis(700));
            for ((m, _, _), s) in requests.iter().zip(answers) {
                for ack in s.iter().filter(|x| x.kind == MessageType::Ack) {
                    self.bound(*m, *ack, round);
                }
                if s.iter().any(|x| x.kind == MessageType::Ack) {
                    pending.retain(|p| p != m);
                }
            }
        }
        self.unanswered += pending.len();
    }

    fn bound(&mut self, m: [u8; 6], ack: Seen, round: usize) {
        self.history.ack(m, &ack);
        // A second holder is the checker's to judge (`Machines::check`); the
        // bookkeeping here only follows who asks for what next.
        if self.holder.insert(ack.yiaddr, m).is_none() {
            self.acked_by.insert(m, (ack.server, round));
            self.live.push_back((m, ack.yiaddr));
            self.acked += 1;
        }
    }

    /// The independent checker's verdict on everything seen so far; panics on an
    /// overlapping binding or a lost address.
    pub(crate) fn check(&self, when: &str) -> Verdict {
        let v = checker::check(&self.history.events);
        v.assert_clean(when);
        v
    }

    /// The oldest machines beyond `keep` release their leases.
    pub(crate) fn release_oldest(&mut self, keep: usize) {
        let n = self.live.len().saturating_sub(keep);
        let gone: Vec<([u8; 6], Ipv4Addr)> = self.live.drain(..n).collect();
        self.client.release(&gone);
        for (m, ip) in &gone {
            self.history.release(*m, *ip);
            self.holder.remove(ip);
        }
        // Every member takes the release before the address is handed out again.
        std::thread::sleep(Duration::from_millis(300));
    }

    /// Every machine holding a lease asks for it again (`how`): each must be ACKed on its
    /// own address, and none NAKed, whichever member answers. Returns how many were
    /// answered by each server address, and the losses (machine, description).
    pub(crate) fn reconfirm_all(
        &mut self,
        how: Reconfirm,
        when: &str,
    ) -> (HashMap<Ipv4Addr, usize>, Lost) {
        let live: Vec<_> = self.live.iter().copied().collect();
        let ask = |client: &mut BroadcastClient, which: &[([u8; 6], Ipv4Addr)], wait| match how {
            Reconfirm::InitReboot => client.init_reboot(which, Duration::from_millis(wait)),
            Reconfirm::Rebind => client.rebind(which, Duration::from_millis(wait)),
        };
        let mut answers = ask(&mut self.client, &live, 800);
        // UDP on a loaded machine: a machine that heard nothing sends again, as firmware
        // does, waiting longer each time.
        for wait in [1500, 3000] {
            let silent: Vec<usize> = (0..live.len()).filter(|&i| answers[i].is_empty()).collect();
            if silent.is_empty() {
                break;
            }
            let again: Vec<_> = silent.iter().map(|&i| live[i]).collect();
            for (i, s) in silent.into_iter().zip(ask(&mut self.client, &again, wait)) {
                answers[i] = s;
            }
        }
        let mut by = HashMap::new();
        let mut lost = Vec::new();
        for ((m, ip), s) in live.iter().zip(answers) {
            self.history.reconfirm(*m, *ip, &s);
            if s.is_empty()
                || !s
                    .iter()
                    .all(|x| x.kind == MessageType::Ack && x.yiaddr == *ip)
            {
                lost.push((*m, format!(
                    "{when}: {m:02x?} on {ip} (ACKed by, in round: {:?}) lost its address on {how:?}: {s:?}",
                    self.acked_by.get(m)
                )));
                continue;
            }
            *by.entry(s[0].server).or_insert(0) += 1;
        }
        (by, lost)
    }
}

impl Machines {
    /// The live machines `server` ACKed first.
    pub(crate) fn acked_first_by(&self, server: Ipv4Addr) -> Vec<([u8; 6], Ipv4Addr)> {
        self.live
            .iter()
            .filter(|(m, _)| self.acked_by.get(m).map(|(s, _)| *s) == Some(server))
            .copied()
            .collect()
    }

    /// `which` REBIND (RFC 2131 §4.4.5) every half second until each is ACKed on its
    /// own address or `limit` passes; returns how long the last one took, or those
    /// never answered. Silence is waited out (the granting member is gone and the
    /// others have not counted it dead yet); every answer goes to the checker.
    pub(crate) fn rebind_until_answered(
        &mut self,
        which: &[([u8; 6], Ipv4Addr)],
        limit: Duration,
    ) -> Result<Duration, Lost> {
        let start = std::time::Instant::now();
        let mut pending = which.to_vec();
        while !pending.is_empty() && start.elapsed() < limit {
            let answers = self.client.rebind(&pending, Duration::from_millis(500));
            let mut still = Vec::new();
            for ((m, ip), s) in pending.iter().zip(answers) {
                if !s.is_empty() {
                    self.history.reconfirm(*m, *ip, &s);
                }
                if !s
                    .iter()
                    .any(|x| x.kind == MessageType::Ack && x.yiaddr == *ip)
                {
                    still.push((*m, *ip));
                }
            }
            pending = still;
        }
        if pending.is_empty() {
            return Ok(start.elapsed());
        }
        Err(pending
            .into_iter()
            .map(|(m, ip)| {
                let why = format!("{m:02x?} on {ip} not ACKed on REBIND within {limit:?}");
                (m, why)
            })
            .collect())
    }
}

/// A small xorshift: the moments and victims of the member tests' faults are random,
/// but the same every run.
pub(crate) struct Rng(pub u64);

impl Rng {
    /// The next number below `below`.
    pub(crate) fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}
