//! Binary encoding of a [`Lease`] record. The first byte is the format version so a
//! future layout can be read alongside this one.
//!
//! Layout v1: version, state, mac[6], starts u64 BE, expires u64 BE, arch u16 BE
//! (0xffff = none), then three length-prefixed (u8) fields: hostname, client id,
//! machine id, where length 0xff means "absent".

use std::net::Ipv4Addr;

use super::{Lease, LeaseState};
use crate::mac::MacAddr;

/// The record format this build writes.
pub const LEASE_FORMAT_VERSION: u8 = 1;
const ABSENT: u8 = 0xff;
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
}

fn state_byte(s: LeaseState) -> u8 {
    match s {
        LeaseState::Offered => 0,
        LeaseState::Bound => 1,
        LeaseState::Released => 2,
        LeaseState::Declined => 3,
    }
}

fn push_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        // Fields come from DHCP options, which are at most 255 bytes; 254 keeps 0xff free.
        Some(b) => {
            let b = &b[..b.len().min(254)];
            out.push(b.len() as u8);
            out.extend_from_slice(b);
        }
        None => out.push(ABSENT),
    }
}

/// Encodes `lease` (without its address, which is the key).
pub fn encode_lease(lease: &Lease) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
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

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.0.len() < n {
            return Err(CodecError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn field(&mut self) -> Result<Option<Vec<u8>>, CodecError> {
        match self.u8()? {
            ABSENT => Ok(None),
            n => Ok(Some(self.take(n as usize)?.to_vec())),
        }
    }
}

/// Decodes a record stored under `key` (the 4 address bytes).
pub fn decode_lease(key: &[u8], value: &[u8]) -> Result<Lease, CodecError> {
    let ip: [u8; 4] = key.try_into().map_err(|_| CodecError::Key)?;
    let mut r = Reader(value);
    let version = r.u8()?;
    if version != LEASE_FORMAT_VERSION {
        return Err(CodecError::Version(version));
    }
    let state = match r.u8()? {
        0 => LeaseState::Offered,
        1 => LeaseState::Bound,
        2 => LeaseState::Released,
        3 => LeaseState::Declined,
        s => return Err(CodecError::State(s)),
    };
    let mac = MacAddr(r.take(6)?.try_into().expect("6 bytes"));
    let starts = r.u64()?;
    let expires = r.u64()?;
    let arch = u16::from_be_bytes(r.take(2)?.try_into().expect("2 bytes"));
    let hostname = r
        .field()?
        .map(|b| String::from_utf8(b).map_err(|_| CodecError::Hostname))
        .transpose()?;
    Ok(Lease {
        ip: Ipv4Addr::from(ip),
        mac,
        state,
        starts,
        expires,
        hostname,
        client_id: r.field()?,
        machine_id: r.field()?,
        arch: (arch != NO_ARCH).then_some(arch),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(decode_lease(&[1, 2, 3], &bytes), Err(CodecError::Key));
    }
}
