//! The messages of lease replication, pure: a batch of lease changes from one member
//! (`POST /v1/members/leases`), the answer with one verdict per change, and the
//! snapshot a starting member asks for. Leases travel in the store's own record format
//! (`store::encode_lease`), so what a peer stores is exactly what the granter stored.
//!
//! DHCPv6 leases travel beside the v4 ones in the same batches, in their own record
//! format (`store::encode_lease6`).
//!
//! ```text
//! batch   = "SBR1" epoch-started:u64 epoch-nonce:u64 seq:u64 catch-up:u8 count:u32 change*
//! change  = 1 ip:4 len:u32 lease-record           ; put
//!         | 2 ip:4 mac:6                           ; remove, if held by mac
//!         | 3 ip:16 len:u32 lease6-record          ; put a v6 lease
//!         | 4 ip:16 len:u32 duid                   ; remove a v6 lease, if held by duid
//! answer  = "SBA1" count:u32 verdict*
//! snapshot= "SBS2" count:u32 (ip:4 len:u32 lease-record)*
//!                  count:u32 (ip:16 len:u32 lease6-record)*
//! verdict = 0                                      ; accepted
//!         | 1 ip:4 len:u32 lease-record            ; refused: the lease that holds ip
//!         | 2 ip:16 len:u32 lease6-record          ; refused: the v6 lease that holds ip
//! ```
//! Integers are big-endian. Every length is checked against what is left. A member of
//! an earlier version (snapshot "SBS1", v4 only) refuses v6 changes as malformed: its
//! peers then count it behind until it is upgraded.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::mac::MacAddr;
use crate::store::{
    decode_lease, decode_lease6, encode_lease, encode_lease6, CodecError, Lease, Lease6,
    Lease6Effect, LeaseEffect, SharedChange, Verdict,
};

const BATCH_MAGIC: &[u8; 4] = b"SBR1";
const ANSWER_MAGIC: &[u8; 4] = b"SBA1";
const SNAPSHOT_MAGIC: &[u8; 4] = b"SBS2";
/// Most leases in one snapshot.
pub const MAX_SNAPSHOT: usize = 1 << 20;
/// Most changes in one batch (a snapshot is sent in batches of this size too).
pub const MAX_CHANGES: usize = 16_384;
/// Largest body read: the largest batch of the largest records, with room.
pub const MAX_BODY: usize = 8 << 20;

/// One run of a sending member: its start time and a random nonce. Sequence numbers
/// grow within a run, and a later run replaces an earlier one, so a recorded batch
/// cannot be replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch {
    /// Unix seconds when the sender started.
    pub started: u64,
    /// Random, to tell two runs started in one second apart.
    pub nonce: u64,
}

/// A batch of lease changes from one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The sender's run.
    pub epoch: Epoch,
    /// Grows with every batch the run sends.
    pub seq: u64,
    /// Changes the sender made earlier, sent to catch a peer up (a full resync, or
    /// what queued while the peer was behind): already answered, so a conflict is
    /// settled by which lease is newer rather than refused.
    pub catch_up: bool,
    /// The changes, in the order they were made.
    pub changes: Vec<SharedChange>,
}

/// Every live lease a member knows, for a member starting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The DHCPv4 leases.
    pub leases: Vec<Lease>,
    /// The DHCPv6 leases.
    pub leases6: Vec<Lease6>,
}

/// Why a message does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not a replication message of this version.
    #[error("not a shardboot replication message")]
    Magic,
    /// Ends early.
    #[error("message ends early")]
    Truncated,
    /// More changes than a batch may hold.
    #[error("more than {MAX_CHANGES} changes")]
    TooMany,
    /// A change kind this version does not know.
    #[error("unknown change kind {0}")]
    Kind(u8),
    /// A lease record that does not decode.
    #[error("lease record: {0}")]
    Lease(#[from] CodecError),
    /// Bytes after the last change.
    #[error("trailing bytes")]
    Trailing,
    /// An answer with a verdict count other than the batch's change count.
    #[error("answer has {got} verdicts for {want} changes")]
    Count {
        /// Verdicts in the answer.
        got: usize,
        /// Changes sent.
        want: usize,
    },
}

fn put_lease(out: &mut Vec<u8>, lease: &Lease) {
    let record = encode_lease(lease);
    out.extend_from_slice(&lease.ip.octets());
    // A record holds three fields of one datagram each: far below 4 GiB.
    out.extend_from_slice(&(record.len() as u32).to_be_bytes());
    out.extend_from_slice(&record);
}

fn put_lease6(out: &mut Vec<u8>, lease: &Lease6) {
    let record = encode_lease6(lease);
    out.extend_from_slice(&lease.ip.octets());
    // A DUID and a host name of one datagram each: far below 4 GiB.
    out.extend_from_slice(&(record.len() as u32).to_be_bytes());
    out.extend_from_slice(&record);
}

/// Encodes `batch`.
pub fn encode_batch(batch: &Batch) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + batch.changes.len() * 64);
    out.extend_from_slice(BATCH_MAGIC);
    out.extend_from_slice(&batch.epoch.started.to_be_bytes());
    out.extend_from_slice(&batch.epoch.nonce.to_be_bytes());
    out.extend_from_slice(&batch.seq.to_be_bytes());
    out.push(u8::from(batch.catch_up));
    out.extend_from_slice(&(batch.changes.len() as u32).to_be_bytes());
    for c in &batch.changes {
        match c {
            SharedChange::V4(LeaseEffect::Put(lease)) => {
                out.push(1);
                put_lease(&mut out, lease);
            }
            SharedChange::V4(LeaseEffect::Remove(ip, mac)) => {
                out.push(2);
                out.extend_from_slice(&ip.octets());
                out.extend_from_slice(&mac.0);
            }
            SharedChange::V6(Lease6Effect::Put(lease)) => {
                out.push(3);
                put_lease6(&mut out, lease);
            }
            SharedChange::V6(Lease6Effect::Remove(ip, duid)) => {
                out.push(4);
                out.extend_from_slice(&ip.octets());
                out.extend_from_slice(&(duid.len() as u32).to_be_bytes());
                out.extend_from_slice(duid);
            }
        }
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn count(&mut self) -> Result<usize, WireError> {
        self.count_up_to(MAX_CHANGES)
    }
    fn count_up_to(&mut self, cap: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > cap {
            return Err(WireError::TooMany);
        }
        Ok(n)
    }
    fn lease(&mut self) -> Result<Lease, WireError> {
        let ip: [u8; 4] = self.array()?;
        let len = self.u32()? as usize;
        Ok(decode_lease(&ip, self.take(len)?)?)
    }
    fn lease6(&mut self) -> Result<Lease6, WireError> {
        let ip: [u8; 16] = self.array()?;
        let len = self.u32()? as usize;
        Ok(decode_lease6(&ip, self.take(len)?)?)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, WireError> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing)
        }
    }
}

/// Decodes a batch.
pub fn decode_batch(bytes: &[u8]) -> Result<Batch, WireError> {
    let mut r = Reader(bytes);
    if r.take(4)? != BATCH_MAGIC {
        return Err(WireError::Magic);
    }
    let epoch = Epoch {
        started: r.u64()?,
        nonce: r.u64()?,
    };
    let seq = r.u64()?;
    let catch_up = match r.u8()? {
        0 => false,
        1 => true,
        k => return Err(WireError::Kind(k)),
    };
    let n = r.count()?;
    let mut changes = Vec::with_capacity(n);
    for _ in 0..n {
        changes.push(match r.u8()? {
            1 => SharedChange::V4(LeaseEffect::Put(r.lease()?)),
            2 => SharedChange::V4(LeaseEffect::Remove(
                Ipv4Addr::from(r.array::<4>()?),
                MacAddr(r.array()?),
            )),
            3 => SharedChange::V6(Lease6Effect::Put(r.lease6()?)),
            4 => SharedChange::V6(Lease6Effect::Remove(
                Ipv6Addr::from(r.array::<16>()?),
                r.bytes()?,
            )),
            k => return Err(WireError::Kind(k)),
        });
    }
    r.end()?;
    Ok(Batch {
        epoch,
        seq,
        catch_up,
        changes,
    })
}

/// Encodes the answer to a batch.
pub fn encode_answer(verdicts: &[Verdict]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + verdicts.len());
    out.extend_from_slice(ANSWER_MAGIC);
    out.extend_from_slice(&(verdicts.len() as u32).to_be_bytes());
    for v in verdicts {
        match v {
            // `Unavailable` comes only from the shared store's hook, never from a
            // member's engine answering a batch.
            Verdict::Accepted | Verdict::Unavailable(_) => out.push(0),
            Verdict::Refused(holder) => {
                out.push(1);
                put_lease(&mut out, holder);
            }
            Verdict::Refused6(holder) => {
                out.push(2);
                put_lease6(&mut out, holder);
            }
        }
    }
    out
}

/// Decodes the answer to a batch of `want` changes.
pub fn decode_answer(bytes: &[u8], want: usize) -> Result<Vec<Verdict>, WireError> {
    let mut r = Reader(bytes);
    if r.take(4)? != ANSWER_MAGIC {
        return Err(WireError::Magic);
    }
    let got = r.count()?;
    if got != want {
        return Err(WireError::Count { got, want });
    }
    let mut out = Vec::with_capacity(got);
    for _ in 0..got {
        out.push(match r.u8()? {
            0 => Verdict::Accepted,
            1 => Verdict::Refused(r.lease()?),
            2 => Verdict::Refused6(r.lease6()?),
            k => return Err(WireError::Kind(k)),
        });
    }
    r.end()?;
    Ok(out)
}

/// Encodes every lease a member knows, for a member starting (at most
/// [`MAX_SNAPSHOT`] of each family).
pub fn encode_snapshot(snapshot: &Snapshot) -> Vec<u8> {
    let (v4, v6) = (&snapshot.leases, &snapshot.leases6);
    let mut out = Vec::with_capacity(12 + v4.len() * 64 + v6.len() * 96);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&(v4.len().min(MAX_SNAPSHOT) as u32).to_be_bytes());
    for l in v4.iter().take(MAX_SNAPSHOT) {
        put_lease(&mut out, l);
    }
    out.extend_from_slice(&(v6.len().min(MAX_SNAPSHOT) as u32).to_be_bytes());
    for l in v6.iter().take(MAX_SNAPSHOT) {
        put_lease6(&mut out, l);
    }
    out
}

/// Decodes a snapshot.
pub fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, WireError> {
    let mut r = Reader(bytes);
    if r.take(4)? != SNAPSHOT_MAGIC {
        return Err(WireError::Magic);
    }
    // Each lease takes at least 30 octets (v4) or 40 (v6): a count the body cannot
    // hold is refused before anything is allocated for it.
    let n = r.count_up_to(MAX_SNAPSHOT)?;
    if n > bytes.len() / 30 {
        return Err(WireError::Truncated);
    }
    let mut leases = Vec::with_capacity(n);
    for _ in 0..n {
        leases.push(r.lease()?);
    }
    let n = r.count_up_to(MAX_SNAPSHOT)?;
    if n > bytes.len() / 40 {
        return Err(WireError::Truncated);
    }
    let mut leases6 = Vec::with_capacity(n);
    for _ in 0..n {
        leases6.push(r.lease6()?);
    }
    r.end()?;
    Ok(Snapshot { leases, leases6 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LeaseState;

    fn lease(n: u8) -> Lease {
        Lease {
            ip: Ipv4Addr::new(10, 0, 0, n),
            mac: MacAddr([2, 0, 0, 0, 0, n]),
            state: LeaseState::Bound,
            starts: 1_000,
            expires: 4_600,
            hostname: Some(format!("node-{n}")),
            client_id: Some(vec![1, 2, n]),
            machine_id: None,
            arch: Some(7),
        }
    }

    fn lease6(n: u8) -> Lease6 {
        Lease6 {
            ip: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)),
            duid: vec![0, 3, 0, 1, 2, 0, 0, 0, 0, n],
            iaid: u32::from(n),
            mac: Some(MacAddr([2, 0, 0, 0, 0, n])),
            state: LeaseState::Bound,
            starts: 1_000,
            preferred: 2_800,
            expires: 4_600,
            hostname: Some(format!("node-{n}")),
            arch: Some(16),
        }
    }

    fn mixed_batch() -> Batch {
        Batch {
            epoch: Epoch {
                started: 17,
                nonce: 0xdead_beef,
            },
            seq: 9,
            catch_up: true,
            changes: vec![
                SharedChange::V4(LeaseEffect::Put(lease(1))),
                SharedChange::V6(Lease6Effect::Put(lease6(1))),
                SharedChange::V4(LeaseEffect::Remove(lease(2).ip, lease(2).mac)),
                SharedChange::V6(Lease6Effect::Remove(lease6(2).ip, lease6(2).duid)),
            ],
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            leases: vec![lease(4), lease(5)],
            leases6: vec![lease6(4), lease6(5)],
        }
    }

    fn verdicts() -> Vec<Verdict> {
        vec![
            Verdict::Accepted,
            Verdict::Refused(lease(3)),
            Verdict::Refused6(lease6(3)),
        ]
    }

    #[test]
    fn batches_answers_and_snapshots_of_both_families_round_trip() {
        let batch = mixed_batch();
        assert_eq!(decode_batch(&encode_batch(&batch)), Ok(batch));
        assert_eq!(
            decode_snapshot(&encode_snapshot(&snapshot())),
            Ok(snapshot())
        );
        let empty = Snapshot::default();
        assert_eq!(decode_snapshot(&encode_snapshot(&empty)), Ok(empty));
        assert_eq!(
            decode_answer(&encode_answer(&verdicts()), 3),
            Ok(verdicts())
        );
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = encode_batch(&mixed_batch());
        for n in 0..bytes.len() {
            assert!(decode_batch(&bytes[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_batch(&longer), Err(WireError::Trailing));
        let snap = encode_snapshot(&snapshot());
        for n in 0..snap.len() {
            assert!(
                decode_snapshot(&snap[..n]).is_err(),
                "snapshot truncated at {n}"
            );
        }
        let answer = encode_answer(&[Verdict::Accepted]);
        assert_eq!(
            decode_answer(&answer, 2),
            Err(WireError::Count { got: 1, want: 2 })
        );
    }

    #[test]
    fn a_snapshot_of_an_earlier_version_is_refused_by_name() {
        let mut old = encode_snapshot(&snapshot());
        old[..4].copy_from_slice(b"SBS1");
        assert_eq!(decode_snapshot(&old), Err(WireError::Magic));
    }

    #[test]
    fn a_count_beyond_the_cap_is_refused_before_anything_is_allocated() {
        let mut bytes = encode_batch(&Batch {
            epoch: Epoch {
                started: 1,
                nonce: 2,
            },
            seq: 3,
            catch_up: true,
            changes: Vec::new(),
        });
        let at = bytes.len() - 4;
        bytes[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decode_batch(&bytes), Err(WireError::TooMany));
        // A v6 section whose count the body cannot hold.
        let mut snap = encode_snapshot(&Snapshot::default());
        let at = snap.len() - 4;
        snap[at..].copy_from_slice(&1_000u32.to_be_bytes());
        assert_eq!(decode_snapshot(&snap), Err(WireError::Truncated));
    }

    /// The fuzz target's seeds (first octet: the message kind) are these messages;
    /// `SB_WRITE_SEEDS=1 cargo test --lib the_fuzz_seeds` writes them again after a
    /// format change.
    #[test]
    fn the_fuzz_seeds_are_the_messages_of_both_families() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/replication_wire");
        let seeds = [
            ("batch", 0u8, encode_batch(&mixed_batch())),
            ("answer", 1 + 3 * 3, encode_answer(&verdicts())),
            ("snapshot", 2, encode_snapshot(&snapshot())),
        ];
        for (name, kind, body) in seeds {
            let path = format!("{dir}/{name}");
            let want = [vec![kind], body].concat();
            if std::env::var_os("SB_WRITE_SEEDS").is_some() {
                std::fs::write(&path, &want).unwrap();
            }
            assert_eq!(std::fs::read(&path).unwrap(), want, "{path}");
        }
    }
}
