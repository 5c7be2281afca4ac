//! Binary encoding of a [`Lease6`] record, keyed by the 16 address octets. The first
//! byte is the format version, so a later layout can be read beside this one.
//!
//! Format 1: version, state, IAID u32 BE, starts u64 BE, preferred u64 BE, expires u64
//! BE, then
//! - the MAC: a presence byte (0 absent, 1 present) and, when present, its 6 octets;
//! - the architecture: a presence byte and, when present, the u16 BE (every value a
//!   packet can carry, 0xffff included, so no sentinel);
//! - the DUID: a u32 BE length and the octets (always there, any length a datagram
//!   holds; RFC 8415 §11.1 caps a DUID at 130 octets, but what a client sent is kept
//!   whole, whatever it says);
//! - the host name: a presence byte and, when present, a u32 BE length and its UTF-8.
//!
//! Nothing is cut: whatever a client sent reads back exactly as it was written. Errors
//! are the v4 codec's [`CodecError`], one type for every lease record that does not read.

use std::net::Ipv6Addr;

use super::codec::{push_field, push_len_prefixed, state_byte, state_of, Reader};
use super::{CodecError, Lease6};
use crate::mac::MacAddr;

/// The v6 record format this build writes (and the only one it reads).
pub const LEASE6_FORMAT_VERSION: u8 = 1;

/// Encodes `lease` (without its address, which is the key).
pub fn encode_lease6(lease: &Lease6) -> Vec<u8> {
    let variable = lease.duid.len() + lease.hostname.as_ref().map_or(0, String::len);
    let mut out = Vec::with_capacity(1 + 1 + 4 + 24 + 7 + 3 + 4 + 5 + variable);
    out.push(LEASE6_FORMAT_VERSION);
    out.push(state_byte(lease.state));
    out.extend_from_slice(&lease.iaid.to_be_bytes());
    for t in [lease.starts, lease.preferred, lease.expires] {
        out.extend_from_slice(&t.to_be_bytes());
    }
    match lease.mac {
        Some(mac) => {
            out.push(1);
            out.extend_from_slice(&mac.0);
        }
        None => out.push(0),
    }
    match lease.arch {
        Some(arch) => {
            out.push(1);
            out.extend_from_slice(&arch.to_be_bytes());
        }
        None => out.push(0),
    }
    push_len_prefixed(&mut out, &lease.duid);
    push_field(&mut out, lease.hostname.as_deref().map(str::as_bytes));
    out
}

/// Decodes a record stored under `key` (the 16 address octets).
pub fn decode_lease6(key: &[u8], value: &[u8]) -> Result<Lease6, CodecError> {
    let ip: [u8; 16] = key.try_into().map_err(|_| CodecError::Key6)?;
    let mut r = Reader(value);
    let version = r.u8()?;
    if version != LEASE6_FORMAT_VERSION {
        return Err(CodecError::Version(version));
    }
    let state = state_of(r.u8()?)?;
    let iaid = r.u32()?;
    let starts = r.u64()?;
    let preferred = r.u64()?;
    let expires = r.u64()?;
    let mac = if r.present()? {
        Some(MacAddr(r.take(6)?.try_into().expect("6 bytes")))
    } else {
        None
    };
    let arch = if r.present()? { Some(r.u16()?) } else { None };
    let duid = r.len_prefixed()?.to_vec();
    let hostname = if r.present()? {
        let raw = r.len_prefixed()?.to_vec();
        Some(String::from_utf8(raw).map_err(|_| CodecError::Hostname)?)
    } else {
        None
    };
    r.end()?;
    Ok(Lease6 {
        ip: Ipv6Addr::from(ip),
        duid,
        iaid,
        mac,
        state,
        starts,
        preferred,
        expires,
        hostname,
        arch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LeaseState;
    use proptest::prelude::*;

    fn sample() -> Lease6 {
        Lease6 {
            ip: "2001:db8::10".parse().unwrap(),
            // DUID-LLT (RFC 8415 §11.2): type 1, hardware type 1, time, MAC.
            duid: vec![0, 1, 0, 1, 0x2a, 0x2b, 0x2c, 0x2d, 0x52, 0x54, 0, 1, 2, 3],
            iaid: 0x0102_0304,
            mac: Some(MacAddr([0x52, 0x54, 0, 1, 2, 3])),
            state: LeaseState::Bound,
            starts: 1_700_000_000,
            preferred: 1_700_001_800,
            expires: 1_700_003_600,
            hostname: Some("node-1.prov.example.org".into()),
            arch: Some(7),
        }
    }

    #[test]
    fn round_trips() {
        let l = sample();
        let bytes = encode_lease6(&l);
        assert_eq!(bytes[0], LEASE6_FORMAT_VERSION);
        assert_eq!(decode_lease6(&l.ip.octets(), &bytes), Ok(l.clone()));
        let bare = Lease6 {
            mac: None,
            hostname: None,
            arch: None,
            duid: Vec::new(),
            ..l
        };
        assert_eq!(
            decode_lease6(&bare.ip.octets(), &encode_lease6(&bare)),
            Ok(bare)
        );
    }

    #[test]
    fn rejects_damage() {
        let l = sample();
        let key = l.ip.octets();
        let bytes = encode_lease6(&l);
        for cut in 0..bytes.len() {
            assert!(decode_lease6(&key, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode_lease6(&key, &[]), Err(CodecError::Truncated));
        let mut v = bytes.clone();
        v[0] = 9;
        assert_eq!(decode_lease6(&key, &v), Err(CodecError::Version(9)));
        let mut s = bytes.clone();
        s[1] = 7;
        assert_eq!(decode_lease6(&key, &s), Err(CodecError::State(7)));
        // The MAC's presence byte follows the fixed part (2 + 4 + 24 octets).
        let mut p = bytes.clone();
        p[30] = 2;
        assert_eq!(decode_lease6(&key, &p), Err(CodecError::Presence(2)));
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(decode_lease6(&key, &long), Err(CodecError::Trailing(1)));
        // A DUID length far past the record's end is an error, not an allocation.
        let mut huge = bytes[..40].to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decode_lease6(&key, &huge), Err(CodecError::Truncated));
        // A host name that is not UTF-8.
        let mut bad = encode_lease6(&Lease6 {
            hostname: Some("ab".into()),
            ..sample()
        });
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert_eq!(decode_lease6(&key, &bad), Err(CodecError::Hostname));
        assert_eq!(
            decode_lease6(&[192, 0, 2, 1], &bytes),
            Err(CodecError::Key6)
        );
        assert_eq!(decode_lease6(&[0; 17], &bytes), Err(CodecError::Key6));
        // A v4 record under a v6 key is refused by its version byte.
        let v4 = crate::store::encode_lease(&crate::store::battery::lease(1, 1));
        assert_eq!(
            decode_lease6(&key, &v4),
            Err(CodecError::Version(crate::store::LEASE_FORMAT_VERSION))
        );
    }

    /// DUIDs of every length a DHCPv6 datagram can hold (RFC 8415's 130-octet cap is
    /// the client's to keep, not the store's), the short lengths most often.
    fn any_duid() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => proptest::collection::vec(any::<u8>(), 0..=130),
            1 => proptest::collection::vec(any::<u8>(), 131..=65_535),
        ]
    }

    fn any_hostname() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            any::<String>().prop_map(Some),
            // Longer than any single option, of any characters.
            (any::<char>(), 256usize..=4096)
                .prop_map(|(c, n)| Some(std::iter::repeat_n(c, n).collect())),
        ]
    }

    fn any_lease6() -> impl Strategy<Value = Lease6> {
        (
            any::<[u8; 16]>(),
            any_duid(),
            any::<u32>(),
            proptest::option::of(any::<[u8; 6]>()),
            0u8..4,
            any::<(u64, u64, u64)>(),
            any_hostname(),
            proptest::option::of(any::<u16>()),
        )
            .prop_map(
                |(ip, duid, iaid, mac, state, (starts, preferred, expires), hostname, arch)| {
                    Lease6 {
                        ip: Ipv6Addr::from(ip),
                        duid,
                        iaid,
                        mac: mac.map(MacAddr),
                        state: state_of(state).expect("0-3"),
                        starts,
                        preferred,
                        expires,
                        hostname,
                        arch,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Whatever a client sent reads back exactly as it was written.
        #[test]
        fn every_record_round_trips(l in any_lease6()) {
            let bytes = encode_lease6(&l);
            prop_assert_eq!(decode_lease6(&l.ip.octets(), &bytes), Ok(l));
        }

        /// A record cut anywhere is refused.
        #[test]
        fn every_cut_record_is_refused(l in any_lease6(), at in any::<prop::sample::Index>()) {
            let bytes = encode_lease6(&l);
            let cut = at.index(bytes.len());
            prop_assert!(decode_lease6(&l.ip.octets(), &bytes[..cut]).is_err());
        }

        /// Garbage never panics the decoder.
        #[test]
        fn damage_is_an_error_not_a_panic(
            key in proptest::collection::vec(any::<u8>(), 0..20),
            v in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let _ = decode_lease6(&key, &v);
        }
    }
}
