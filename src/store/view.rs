//! A lease as the operator API and `shardboot leases --json` show it.

use serde::Serialize;

use super::Lease;

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

/// RFC 4578 §2.3: type 0 then 16 octets. Firmware sends the UUID as an EFI GUID, the
/// first three fields little-endian (iPXE and EDK2 both do), so those are swapped back
/// to show the form dmidecode, the BMC and Ironic print. Anything else is plain hex.
fn uuid_text(id: &[u8]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
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
    use super::uuid_text;

    #[test]
    fn uuids_read_as_uuids_and_anything_else_as_hex() {
        let mut id = vec![0];
        id.extend(1..=16u8);
        assert_eq!(uuid_text(&id), "04030201-0605-0807-090a-0b0c0d0e0f10");
        assert_eq!(uuid_text(&[1, 2, 0xab]), "0102ab");
    }
}
