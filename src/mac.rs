//! Ethernet MAC addresses: parsing from the forms operators and firmware use, and the
//! canonical forms shardboot prints.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

/// Why a string is not a MAC address. The rejected input is never echoed, so the
/// message is safe to put in a log line or an HTTP body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MacParseError {
    /// Not 12 hex digits in one of the accepted layouts.
    #[error("expected 6 hex octets as aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff or aabbccddeeff")]
    BadFormat,
}

impl MacAddr {
    /// Builds a MAC from a DHCP `chaddr` field; `None` unless it holds at least 6 bytes.
    pub fn from_chaddr(chaddr: &[u8]) -> Option<Self> {
        let bytes: [u8; 6] = chaddr.get(..6)?.try_into().ok()?;
        Some(Self(bytes))
    }

    /// The octets joined by `-`, as Ironic names per-node configs (`pxelinux.cfg/aa-bb-…`).
    pub fn hyphenated(&self) -> String {
        self.join(b'-').as_str().to_string()
    }

    /// Appends [`Self::hyphenated`] to `out` (the boot route builds URLs with it).
    pub fn push_hyphenated(&self, out: &mut String) {
        out.push_str(self.join(b'-').as_str());
    }

    /// The octets joined by `:`, on the stack (the boot route writes one into every
    /// chain script).
    pub fn colon_text(&self) -> Joined {
        self.join(b':')
    }

    /// The six octets as lowercase hex pairs joined by `sep`, on the stack: a MAC is
    /// written for every log line, timeline event and boot URL.
    fn join(&self, sep: u8) -> Joined {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [sep; 17];
        for (i, b) in self.0.iter().enumerate() {
            out[i * 3] = HEX[usize::from(b >> 4)];
            out[i * 3 + 1] = HEX[usize::from(b & 0xf)];
        }
        Joined(out)
    }
}

/// A MAC written out (`aa:bb:…` or `aa-bb-…`).
#[derive(Debug, Clone, Copy)]
pub struct Joined([u8; 17]);

impl Joined {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and the ASCII separator were written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.join(b':').as_str())
    }
}

impl FromStr for MacAddr {
    type Err = MacParseError;

    /// Accepts `aa:bb:cc:dd:ee:ff`, `aa-bb-cc-dd-ee-ff`, `aabb.ccdd.eeff` and `aabbccddeeff`,
    /// in either case. Separators must be consistent and sit on octet boundaries.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits: String = match s.len() {
            12 => s.to_string(),
            17 => {
                let sep = s.as_bytes()[2];
                if sep != b':' && sep != b'-' {
                    return Err(MacParseError::BadFormat);
                }
                let mut out = String::with_capacity(12);
                for (i, c) in s.bytes().enumerate() {
                    if i % 3 == 2 {
                        if c != sep {
                            return Err(MacParseError::BadFormat);
                        }
                    } else {
                        out.push(c as char);
                    }
                }
                out
            }
            14 => {
                // Cisco style aabb.ccdd.eeff
                let b = s.as_bytes();
                if b[4] != b'.' || b[9] != b'.' {
                    return Err(MacParseError::BadFormat);
                }
                s.split('.').collect()
            }
            _ => return Err(MacParseError::BadFormat),
        };
        if digits.len() != 12 || !digits.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(MacParseError::BadFormat);
        }
        let mut out = [0u8; 6];
        for (i, octet) in out.iter_mut().enumerate() {
            *octet = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16)
                .map_err(|_| MacParseError::BadFormat)?;
        }
        Ok(Self(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The MAC in a link-local (fe80::/64) address whose interface identifier is a modified
/// EUI-64; `None` for any other address.
pub fn from_link_local(ip: Ipv6Addr) -> Option<MacAddr> {
    let o = ip.octets();
    // fe80::/10, with the rest of the first 64 bits zero (RFC 4291 §2.5.6).
    if o[0] != 0xfe || o[1] & 0xc0 != 0x80 || o[1] & 0x3f != 0 || o[2..8] != [0; 6] {
        return None;
    }
    let id = &o[8..];
    if id[3] != 0xff || id[4] != 0xfe {
        return None;
    }
    Some(MacAddr([id[0] ^ 0x02, id[1], id[2], id[5], id[6], id[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_common_forms_and_normalises() {
        let want = MacAddr([0x52, 0x54, 0x00, 0xab, 0xcd, 0xef]);
        for s in [
            "52:54:00:ab:cd:ef",
            "52-54-00-AB-CD-EF",
            "525400abcdef",
            "5254.00ab.cdef",
        ] {
            assert_eq!(s.parse::<MacAddr>(), Ok(want), "{s}");
        }
        assert_eq!(want.to_string(), "52:54:00:ab:cd:ef");
        assert_eq!(want.hyphenated(), "52-54-00-ab-cd-ef");
    }

    #[test]
    fn every_octet_value_is_written_as_two_lowercase_digits_and_read_back() {
        for b in 0..=255u8 {
            let mac = MacAddr([b, 0, 0x0f, 0xf0, b, 0xff]);
            let text = mac.to_string();
            assert_eq!(text, format!("{b:02x}:00:0f:f0:{b:02x}:ff"));
            assert_eq!(text.parse::<MacAddr>(), Ok(mac));
            assert_eq!(mac.hyphenated(), text.replace(':', "-"));
        }
    }

    #[test]
    fn rejects_everything_else() {
        for s in [
            "",
            "52:54:00:ab:cd",
            "52:54:00:ab:cd:eg",
            "52:54-00:ab:cd:ef",
            "5:254:00:ab:cd:ef",
            "52:54:00:ab:cd:ef:00",
            "../../etc/passwd",
            "52:54:00:ab:cd:e\n",
            "+2:54:00:ab:cd:ef",
            "525400abcde\0",
        ] {
            assert!(s.parse::<MacAddr>().is_err(), "{s:?} accepted");
        }
    }

    #[test]
    fn chaddr_needs_six_bytes() {
        assert_eq!(MacAddr::from_chaddr(&[1, 2, 3]), None);
        assert_eq!(
            MacAddr::from_chaddr(&[1, 2, 3, 4, 5, 6, 0, 0]),
            Some(MacAddr([1, 2, 3, 4, 5, 6]))
        );
    }
}
