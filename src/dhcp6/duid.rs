//! This server's DUID (RFC 8415 §11): made once, kept in the store, the same after
//! every restart (§11: a server's DUID must not change, clients key their bindings on
//! it).

/// RFC 8415 §11.2: DUID-LLT type.
const DUID_LLT: u16 = 1;
/// RFC 6355: DUID-UUID type.
const DUID_UUID: u16 = 4;
/// Seconds from the Unix epoch to midnight UTC, 1 January 2000 (RFC 8415 §11.2).
const EPOCH_2000: u64 = 946_684_800;

/// A DUID-LLT (Ethernet, `now` in seconds since 2000 modulo 2^32) for an interface
/// with a MAC, else a DUID-UUID of `random` bytes.
pub fn make(mac: Option<[u8; 6]>, now: u64, random: [u8; 16]) -> Vec<u8> {
    match mac {
        Some(mac) => {
            let t = (now.saturating_sub(EPOCH_2000) & 0xffff_ffff) as u32;
            [
                &DUID_LLT.to_be_bytes()[..],
                &1u16.to_be_bytes(),
                &t.to_be_bytes(),
                &mac,
            ]
            .concat()
        }
        None => [&DUID_UUID.to_be_bytes()[..], &random].concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_with_a_mac_gets_a_duid_llt_else_a_uuid() {
        let llt = make(
            Some([0x52, 0x54, 0, 1, 2, 3]),
            EPOCH_2000 + 0x0102_0304,
            [9; 16],
        );
        assert_eq!(llt, [0, 1, 0, 1, 1, 2, 3, 4, 0x52, 0x54, 0, 1, 2, 3]);
        let uuid = make(None, 0, [9; 16]);
        assert_eq!(&uuid[..2], &[0, 4]);
        assert_eq!(&uuid[2..], &[9; 16]);
    }
}
