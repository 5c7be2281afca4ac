//! A lease as the operator API and `shardboot leases --json` show it (v4 and v6).

use serde::Serialize;

use super::{Lease, Lease6};

/// One lease in JSON.
#[derive(Debug, Serialize)]
pub struct LeaseView<'a> {
    /// The address.
    pub ip: String,
    /// The client's MAC.
    pub mac: String,
    /// `offered`, `bound`, `released` or `declined`.
    pub state: &'a str,
    /// Unix seconds.
    pub starts: u64,
    /// Unix seconds.
    pub expires: u64,
    /// Option 12, if the client sent one.
    pub hostname: Option<&'a str>,
    /// Option 93, if the client sent one.
    pub arch: Option<u16>,
    /// Option 97, the machine's SMBIOS UUID as dmidecode and the BMC show it, if sent.
    pub uuid: Option<String>,
}

impl<'a> From<&'a Lease> for LeaseView<'a> {
    fn from(l: &'a Lease) -> Self {
        Self {
            ip: l.ip.to_string(),
            mac: l.mac.to_string(),
            state: l.state.as_str(),
            starts: l.starts,
            expires: l.expires,
            hostname: l.hostname.as_deref(),
            arch: l.arch,
            uuid: l.machine_id.as_deref().map(uuid_text),
        }
    }
}

/// One DHCPv6 lease in JSON.
#[derive(Debug, Serialize)]
pub struct Lease6View<'a> {
    /// The address.
    pub ip: String,
    /// The client's DUID, lower-case hex without separators.
    pub duid: String,
    /// The IA_NA's identifier.
    pub iaid: u32,
    /// The client's MAC, when one was found.
    pub mac: Option<String>,
    /// `bound`, `released` or `declined`.
    pub state: &'a str,
    /// Unix seconds.
    pub starts: u64,
    /// Unix seconds: the preferred lifetime's end.
    pub preferred: u64,
    /// Unix seconds: the valid lifetime's end.
    pub expires: u64,
    /// The client's host name in the kept form (`store::text`), as v4 names are shown.
    pub hostname: Option<String>,
    /// The client's architecture, if found.
    pub arch: Option<u16>,
}

impl<'a> From<&'a Lease6> for Lease6View<'a> {
    fn from(l: &'a Lease6) -> Self {
        Self {
            ip: l.ip.to_string(),
            duid: hex(&l.duid),
            iaid: l.iaid,
            mac: l.mac.map(|m| m.to_string()),
            state: l.state.as_str(),
            starts: l.starts,
            preferred: l.preferred,
            expires: l.expires,
            // The record keeps the client's text as it sent it (the DHCPv6 engine joins
            // the FQDN's labels); shown in the kept form, so a client's control
            // characters never reach a terminal and a backslash reads as itself.
            hostname: l.hostname.as_deref().map(super::text::shown),
            arch: l.arch,
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// RFC 4578 §2.3: type 0 then 16 octets. Firmware sends the UUID as an EFI GUID, the
/// first three fields little-endian (iPXE and EDK2 both do), so those are swapped back
/// to show the form dmidecode, the BMC and Ironic print. Anything else is plain hex.
fn uuid_text(id: &[u8]) -> String {
    let rev = |b: &[u8]| {
        b.iter()
            .rev()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    match id {
        [0, u @ ..] if u.len() == 16 => format!(
            "{}-{}-{}-{}-{}",
            rev(&u[..4]),
            rev(&u[4..6]),
            rev(&u[6..8]),
            hex(&u[8..10]),
            hex(&u[10..])
        ),
        _ => hex(id),
    }
}

#[cfg(test)]
mod tests {
    use super::{uuid_text, Lease6View};
    use crate::store::{Lease6, LeaseState};

    #[test]
    fn a_v6_lease_shows_its_duid_in_hex_and_its_host_name_in_the_kept_form() {
        let l = Lease6 {
            ip: "2001:db8::7".parse().unwrap(),
            duid: vec![0, 3, 0, 1, 0x52, 0x54, 0, 0, 0, 0xab],
            iaid: 9,
            mac: None,
            state: LeaseState::Bound,
            starts: 1,
            preferred: 2,
            expires: 3,
            hostname: Some("n\\ode\u{1b}é".into()),
            arch: Some(0xffff),
        };
        let v = serde_json::to_value(Lease6View::from(&l)).unwrap();
        assert_eq!(v["duid"], "000300015254000000ab");
        assert_eq!(v["mac"], serde_json::Value::Null);
        assert_eq!(v["hostname"], "n\\x5code\\x1b\\xc3\\xa9");
        assert_eq!(v["arch"], 0xffff);
        // Text that looks like the kept form is still the client's text.
        let looks_kept = Lease6 {
            hostname: Some("node\\x41".into()),
            ..l
        };
        assert_eq!(
            serde_json::to_value(Lease6View::from(&looks_kept)).unwrap()["hostname"],
            "node\\x5cx41"
        );
    }

    #[test]
    fn uuids_read_as_uuids_and_anything_else_as_hex() {
        let mut id = vec![0];
        id.extend(1..=16u8);
        assert_eq!(uuid_text(&id), "04030201-0605-0807-090a-0b0c0d0e0f10");
        assert_eq!(uuid_text(&[1, 2, 0xab]), "0102ab");
    }
}
