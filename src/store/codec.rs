//! Binary encoding of a [`Lease`] record. The first byte is the format version so an
//! older layout is read alongside the current one.
//!
//! Both layouts: version, state, mac[6], starts u64 BE, expires u64 BE, arch u16 BE
//! (0xffff = none), then three fields: hostname, client id, machine id.
//! - v2 (written): each field is a presence byte (0 absent, 1 present) and, when
//!   present, a u32 BE length and the bytes. Nothing is cut: values concatenated from
//!   several options (RFC 3396) are longer than 255 octets, and whatever a client sent
//!   must read back exactly as it was written.
//! - v1 (read only): each field is a u8 length (0xff absent) and the bytes; v1 wrote at
//!   most 254 octets, cut without regard to UTF-8 boundaries.

use std::net::Ipv4Addr;

use super::{Lease, LeaseState};
use crate::mac::MacAddr;

/// The record format this build writes.
pub const LEASE_FORMAT_VERSION: u8 = 2;
/// The first format, still read.
const V1: u8 = 1;
const V1_ABSENT: u8 = 0xff;
const NO_ARCH: u16 = 0xffff;

/// A record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The record ends early.
    #[error("record truncated")]
    Truncated,
    /// Unknown version byte.
    #[error("unknown record version {0}")]
    Version(u8),
    /// Unknown state byte.
    #[error("unknown lease state {0}")]
    State(u8),
    /// Host name is not UTF-8.
    #[error("host name is not UTF-8")]
    Hostname,
    /// The key is not a 4-byte IPv4 address.
    #[error("key is not an IPv4 address")]
    Key,
    /// The key of a DHCPv6 lease record is not a 16-byte IPv6 address.
    #[error("key is not an IPv6 address")]
    Key6,
    /// A field's presence byte is neither 0 nor 1.
    #[error("field presence byte {0}")]
    Presence(u8),
    /// Bytes after the last field.
    #[error("{0} bytes after the record")]
    Trailing(usize),
}

/// A state's byte in a record (the v4 and v6 records share it).
pub(super) fn state_byte(s: LeaseState) -> u8 {
    match s {
        LeaseState::Offered => 0,
        LeaseState::Bound => 1,
        LeaseState::Released => 2,
        LeaseState::Declined => 3,
    }
}

/// The state a record's byte names.
pub(super) fn state_of(b: u8) -> Result<LeaseState, CodecError> {
    match b {
        0 => Ok(LeaseState::Offered),
        1 => Ok(LeaseState::Bound),
        2 => Ok(LeaseState::Released),
        3 => Ok(LeaseState::Declined),
        s => Err(CodecError::State(s)),
    }
}

/// A u32 BE length and the bytes.
pub(super) fn push_len_prefixed(out: &mut Vec<u8>, b: &[u8]) {
    // A field comes from one datagram, far below 4 GiB.
    let len = u32::try_from(b.len()).expect("a field from one datagram");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(b);
}

/// A presence byte (0 absent, 1 present) and, when present, the length-prefixed bytes.
pub(super) fn push_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        Some(b) => {
            out.push(1);
            push_len_prefixed(out, b);
        }
        None => out.push(0),
    }
}

/// Encodes `lease` (without its address, which is the key).
pub fn encode_lease(lease: &Lease) -> Vec<u8> {
    let fields = [
        lease.hostname.as_ref().map_or(0, String::len),
        lease.client_id.as_ref().map_or(0, Vec::len),
        lease.machine_id.as_ref().map_or(0, Vec::len),
    ];
    let mut out = Vec::with_capacity(26 + 15 + fields.iter().sum::<usize>());
    out.push(LEASE_FORMAT_VERSION);
    out.push(state_byte(lease.state));
    out.extend_from_slice(&lease.mac.0);
    out.extend_from_slice(&lease.starts.to_be_bytes());
    out.extend_from_slice(&lease.expires.to_be_bytes());
    out.extend_from_slice(&lease.arch.unwrap_or(NO_ARCH).to_be_bytes());
    push_field(&mut out, lease.hostname.as_deref().map(str::as_bytes));
    push_field(&mut out, lease.client_id.as_deref());
    push_field(&mut out, lease.machine_id.as_deref());
    out
}

/// Reads a record front to back; every read checks the length first.
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.0.len() < n {
            return Err(CodecError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub(super) fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub(super) fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A presence byte: 0 absent, 1 present.
    pub(super) fn present(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            p => Err(CodecError::Presence(p)),
        }
    }
    /// A u32 BE length and that many bytes.
    pub(super) fn len_prefixed(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.u32()?;
        self.take(len as usize)
    }
    /// Whatever is left: an error unless nothing is.
    pub(super) fn end(&self) -> Result<(), CodecError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(CodecError::Trailing(n)),
        }
    }
    fn field(&mut self, version: u8) -> Result<Option<Vec<u8>>, CodecError> {
        if version == V1 {
            return match self.u8()? {
                V1_ABSENT => Ok(None),
                n => Ok(Some(self.take(n as usize)?.to_vec())),
            };
        }
        Ok(if self.present()? {
            Some(self.len_prefixed()?.to_vec())
        } else {
            None
        })
    }
}

/// Decodes a record stored under `key` (the 4 address bytes).
pub fn decode_lease(key: &[u8], value: &[u8]) -> Result<Lease, CodecError> {
    let ip: [u8; 4] = key.try_into().map_err(|_| CodecError::Key)?;
    let mut r = Reader(value);
    let version = r.u8()?;
    if version != LEASE_FORMAT_VERSION && version != V1 {
        return Err(CodecError::Version(version));
    }
    let state = state_of(r.u8()?)?;
    let mac = MacAddr(r.take(6)?.try_into().expect("6 bytes"));
    let starts = r.u64()?;
    let expires = r.u64()?;
    let arch = r.u16()?;
    let hostname = match (r.field(version)?, version) {
        (None, _) => None,
        // v1 kept the client's text raw and could cut it inside a character: read it
        // into the kept form (`store::text`), which v2 writes.
        (Some(b), V1) => Some(super::text::shown(&String::from_utf8_lossy(&b))),
        (Some(b), _) => Some(String::from_utf8(b).map_err(|_| CodecError::Hostname)?),
    };
    let client_id = r.field(version)?;
    let machine_id = r.field(version)?;
    r.end()?;
    Ok(Lease {
        ip: Ipv4Addr::from(ip),
        mac,
        state,
        starts,
        expires,
        hostname,
        client_id,
        machine_id,
        arch: (arch != NO_ARCH).then_some(arch),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Lease {
        Lease {
            ip: Ipv4Addr::new(192, 0, 2, 10),
            mac: MacAddr([0x52, 0x54, 0, 1, 2, 3]),
            state: LeaseState::Bound,
            starts: 1_700_000_000,
            expires: 1_700_003_600,
            hostname: Some("node-1".into()),
            client_id: Some(vec![1, 0x52, 0x54, 0, 1, 2, 3]),
            machine_id: None,
            arch: Some(7),
        }
    }

    #[test]
    fn round_trips() {
        let l = sample();
        let bytes = encode_lease(&l);
        assert_eq!(bytes[0], LEASE_FORMAT_VERSION);
        assert_eq!(decode_lease(&l.ip.octets(), &bytes), Ok(l));
    }

    #[test]
    fn rejects_damage() {
        let l = sample();
        let bytes = encode_lease(&l);
        for cut in 0..bytes.len() {
            assert!(
                decode_lease(&l.ip.octets(), &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut v = bytes.clone();
        v[0] = 9;
        assert_eq!(
            decode_lease(&l.ip.octets(), &v),
            Err(CodecError::Version(9))
        );
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            decode_lease(&l.ip.octets(), &long),
            Err(CodecError::Trailing(1))
        );
        assert_eq!(decode_lease(&[1, 2, 3], &bytes), Err(CodecError::Key));
    }

    /// A v1 record as the first format wrote it, with a host name cut inside a
    /// two-byte character (the poisoned record of CVE-2019-6474's class).
    fn v1_record(hostname: &[u8]) -> Vec<u8> {
        let mut v = vec![V1, 1, 0x52, 0x54, 0, 1, 2, 3];
        v.extend_from_slice(&1_700_000_000u64.to_be_bytes());
        v.extend_from_slice(&1_700_003_600u64.to_be_bytes());
        v.extend_from_slice(&7u16.to_be_bytes());
        v.push(hostname.len() as u8);
        v.extend_from_slice(hostname);
        v.push(V1_ABSENT);
        v.push(V1_ABSENT);
        v
    }

    #[test]
    fn v1_records_read_with_their_host_name_in_the_kept_form() {
        let mut name = "a".repeat(253).into_bytes();
        name.push(0xc3); // the first byte of "é", the second one cut off
        let l = decode_lease(&[192, 0, 2, 10], &v1_record(&name)).unwrap();
        let h = l.hostname.unwrap();
        assert!(
            h.starts_with(&"a".repeat(253)) && crate::store::text::is_shown(&h),
            "{h}"
        );
        // Written again, it is a v2 record that reads back exactly.
        let again = encode_lease(&decode_lease(&[192, 0, 2, 10], &v1_record(b"node\\n")).unwrap());
        assert_eq!(again[0], LEASE_FORMAT_VERSION);
        assert_eq!(
            decode_lease(&[192, 0, 2, 10], &again)
                .unwrap()
                .hostname
                .as_deref(),
            Some("node\\x5cn")
        );
    }

    fn any_field() -> impl Strategy<Value = Option<Vec<u8>>> {
        // Every length a single option can carry (0-255), and the longer values RFC 3396
        // concatenation builds from several options of the same code.
        prop_oneof![
            Just(None),
            proptest::collection::vec(any::<u8>(), 0..=255).prop_map(Some),
            proptest::collection::vec(any::<u8>(), 256..=1500).prop_map(Some),
        ]
    }

    fn any_lease() -> impl Strategy<Value = Lease> {
        (
            any::<[u8; 4]>(),
            any::<[u8; 6]>(),
            0u8..4,
            any::<(u64, u64)>(),
            proptest::option::of(any::<String>()),
            any_field(),
            any_field(),
            proptest::option::of(0u16..0xffff),
        )
            .prop_map(
                |(ip, mac, state, (starts, expires), hostname, client_id, machine_id, arch)| {
                    Lease {
                        ip: Ipv4Addr::from(ip),
                        mac: MacAddr(mac),
                        state: [
                            LeaseState::Offered,
                            LeaseState::Bound,
                            LeaseState::Released,
                            LeaseState::Declined,
                        ][usize::from(state)],
                        starts,
                        expires,
                        hostname,
                        client_id,
                        machine_id,
                        arch,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever a client sent reads back exactly as it was written.
        #[test]
        fn every_record_round_trips(l in any_lease()) {
            let bytes = encode_lease(&l);
            prop_assert_eq!(decode_lease(&l.ip.octets(), &bytes), Ok(l));
        }

        /// Host names of every length 0-255 octets, of any characters, round-trip.
        #[test]
        fn host_names_of_every_length_round_trip(len in 0usize..=255, c in any::<char>()) {
            let mut name: String = std::iter::repeat_n(c, len).collect();
            while name.len() > 255 {
                name.pop();
            }
            let l = Lease { hostname: Some(name), ..sample() };
            prop_assert_eq!(decode_lease(&l.ip.octets(), &encode_lease(&l)), Ok(l));
        }

        /// Garbage never panics the decoder.
        #[test]
        fn damage_is_an_error_not_a_panic(v in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_lease(&[192, 0, 2, 1], &v);
        }
    }
}
