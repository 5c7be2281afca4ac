//! Lease replication messages from a peer (`replication::wire`) on arbitrary bytes:
//! batches, answers and snapshots never panic, and whatever decodes encodes to a
//! message that decodes to the same thing. The first byte picks the message kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardboot::replication::wire::{
    decode_answer, decode_batch, decode_snapshot, encode_answer, encode_batch, encode_snapshot,
};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(batch) = decode_batch(bytes) {
                assert_eq!(decode_batch(&encode_batch(&batch)).as_ref(), Ok(&batch));
            }
        }
        1 => {
            // The verdict count the sender expects: the answer must say as many.
            let want = usize::from(kind / 3);
            if let Ok(verdicts) = decode_answer(bytes, want) {
                assert_eq!(verdicts.len(), want);
                assert_eq!(decode_answer(&encode_answer(&verdicts), want), Ok(verdicts));
            }
        }
        _ => {
            if let Ok(leases) = decode_snapshot(bytes) {
                assert_eq!(decode_snapshot(&encode_snapshot(&leases)), Ok(leases));
            }
        }
    }
});
