//! The lease record codec on arbitrary store contents: `decode_lease` never panics, and
//! whatever decodes re-encodes (in the current format) to a record that decodes to the
//! same lease. The first four bytes are the key, the rest the value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardboot::store::{decode_lease, encode_lease, LEASE_FORMAT_VERSION};

fuzz_target!(|data: &[u8]| {
    let (key, value) = data.split_at(data.len().min(4));
    let Ok(lease) = decode_lease(key, value) else {
        return;
    };
    let again = encode_lease(&lease);
    assert_eq!(again[0], LEASE_FORMAT_VERSION);
    assert_eq!(decode_lease(key, &again).as_ref(), Ok(&lease));
    // A record written in the current format is read back byte for byte.
    if value[0] == LEASE_FORMAT_VERSION {
        assert_eq!(again, value);
    }
});
