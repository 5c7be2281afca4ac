//! The messages of lease replication, pure: a batch of lease changes from one member
//! (`POST /v1/members/leases`), the answer with one verdict per change, and the
//! snapshot a starting member asks for. Leases travel in the store's own record format
//! (`store::encode_lease`), so what a peer stores is exactly what the granter stored.
//!
//! ```text
//! batch   = "SBR1" epoch-started:u64 epoch-nonce:u64 seq:u64 catch-up:u8 count:u32 change*
//! change  = 1 ip:4 len:u32 lease-record          ; put
//!         | 2 ip:4 mac:6                          ; remove, if held by mac
//! answer  = "SBA1" count:u32 verdict*
//! snapshot= "SBS1" count:u32 (ip:4 len:u32 lease-record)*
//! verdict = 0                                     ; accepted
//!         | 1 ip:4 len:u32 lease-record           ; refused: the lease that holds ip
//! ```
//! Integers are big-endian. Every length is checked against what is left.

use std::net::Ipv4Addr;

use crate::mac::MacAddr;
use crate::store::{decode_lease, encode_lease, CodecError, Lease, LeaseEffect, Verdict};

const BATCH_MAGIC: &[u8; 4] = b"SBR1";
const ANSWER_MAGIC: &[u8; 4] = b"SBA1";
const SNAPSHOT_MAGIC: &[u8; 4] = b"SBS1";
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
    pub changes: Vec<LeaseEffect>,
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
            LeaseEffect::Put(lease) => {
                out.push(1);
                put_lease(&mut out, lease);
            }
            LeaseEffect::Remove(ip, mac) => {
                out.push(2);
                out.extend_from_slice(&ip.octets());
                out.extend_from_slice(&mac.0);
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
            1 => LeaseEffect::Put(r.lease()?),
            2 => LeaseEffect::Remove(Ipv4Addr::from(r.array::<4>()?), MacAddr(r.array()?)),
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
            Verdict::Accepted => out.push(0),
            Verdict::Refused(holder) => {
                out.push(1);
                put_lease(&mut out, holder);
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
            k => return Err(WireError::Kind(k)),
        });
    }
    r.end()?;
    Ok(out)
}

/// Encodes every lease a member knows, for a member starting.
pub fn encode_snapshot(leases: &[Lease]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + leases.len() * 64);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&(leases.len().min(MAX_SNAPSHOT) as u32).to_be_bytes());
    for l in leases.iter().take(MAX_SNAPSHOT) {
        put_lease(&mut out, l);
    }
    out
}

/// Decodes a snapshot.
pub fn decode_snapshot(bytes: &[u8]) -> Result<Vec<Lease>, WireError> {
    let mut r = Reader(bytes);
    if r.take(4)? != SNAPSHOT_MAGIC {
        return Err(WireError::Magic);
    }
    let n = r.count_up_to(MAX_SNAPSHOT)?;
    // Each lease takes at least 30 octets: a count the body cannot hold is refused
    // before anything is allocated for it.
    if n > bytes.len() / 30 {
        return Err(WireError::Truncated);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.lease()?);
    }
    r.end()?;
    Ok(out)
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

    #[test]
    fn batches_and_answers_round_trip() {
        let batch = Batch {
            epoch: Epoch {
                started: 17,
                nonce: 0xdead_beef,
            },
            seq: 9,
            catch_up: true,
            changes: vec![
                LeaseEffect::Put(lease(1)),
                LeaseEffect::Remove(lease(2).ip, lease(2).mac),
            ],
        };
        assert_eq!(decode_batch(&encode_batch(&batch)), Ok(batch));
        let leases = vec![lease(4), lease(5)];
        assert_eq!(decode_snapshot(&encode_snapshot(&leases)), Ok(leases));
        let verdicts = vec![Verdict::Accepted, Verdict::Refused(lease(3))];
        assert_eq!(decode_answer(&encode_answer(&verdicts), 2), Ok(verdicts));
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let batch = Batch {
            epoch: Epoch {
                started: 1,
                nonce: 2,
            },
            seq: 3,
            catch_up: true,
            changes: vec![LeaseEffect::Put(lease(1)), LeaseEffect::Put(lease(2))],
        };
        let bytes = encode_batch(&batch);
        for n in 0..bytes.len() {
            assert!(decode_batch(&bytes[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_batch(&longer), Err(WireError::Trailing));
        let answer = encode_answer(&[Verdict::Accepted]);
        assert_eq!(
            decode_answer(&answer, 2),
            Err(WireError::Count { got: 1, want: 2 })
        );
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
    }

    #[test]
    fn the_fuzz_seeds_are_messages_that_decode() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/replication_wire");
        let read = |name: &str| std::fs::read(format!("{dir}/{name}")).unwrap();
        assert_eq!(decode_batch(&read("batch")[1..]).unwrap().changes.len(), 2);
        assert_eq!(decode_answer(&read("answer")[1..], 2).unwrap().len(), 2);
        assert_eq!(decode_snapshot(&read("snapshot")[1..]).unwrap().len(), 2);
    }
}
