//! The RFC 3074 load-balancing hash ("DHC Load Balancing Algorithm", §6): a Pearson
//! hash of the client's hardware address. Every member computes the same bucket for a MAC
//! without talking to the others, as Kea's HA load balancing and ISC dhcpd do. Here too
//! the rule that names the member responsible for a machine from it and the owner.

use crate::mac::MacAddr;

/// RFC 3074 §6: the mixing table, a permutation of 0..=255.
const MIX: [u8; 256] = [
    251, 175, 119, 215, 81, 14, 79, 191, 103, 49, 181, 143, 186, 157, 0, 232, 31, 32, 55, 60, 152,
    58, 17, 237, 174, 70, 160, 144, 220, 90, 57, 223, 59, 3, 18, 140, 111, 166, 203, 196, 134, 243,
    124, 95, 222, 179, 197, 65, 180, 48, 36, 15, 107, 46, 233, 130, 165, 30, 123, 161, 209, 23, 97,
    16, 40, 91, 219, 61, 100, 10, 210, 109, 250, 127, 22, 138, 29, 108, 244, 67, 207, 9, 178, 204,
    74, 98, 126, 249, 167, 116, 34, 77, 193, 200, 121, 5, 20, 113, 71, 35, 128, 13, 182, 94, 25,
    226, 227, 199, 75, 27, 41, 245, 230, 224, 43, 225, 177, 26, 155, 150, 212, 142, 218, 115, 241,
    73, 88, 105, 39, 114, 62, 255, 192, 201, 145, 214, 168, 158, 221, 148, 154, 122, 12, 84, 82,
    163, 44, 139, 228, 236, 205, 242, 217, 11, 187, 146, 159, 64, 86, 239, 195, 42, 106, 198, 118,
    112, 184, 172, 87, 2, 173, 117, 176, 229, 247, 253, 137, 185, 99, 164, 102, 147, 45, 66, 231,
    52, 141, 211, 194, 206, 246, 238, 56, 110, 78, 248, 63, 240, 189, 93, 92, 51, 53, 183, 19, 171,
    72, 50, 33, 104, 101, 69, 8, 252, 83, 120, 76, 135, 85, 54, 202, 125, 188, 213, 96, 235, 136,
    208, 162, 129, 190, 132, 156, 38, 47, 1, 7, 254, 24, 4, 216, 131, 89, 21, 28, 133, 37, 153,
    149, 80, 170, 68, 6, 169, 234, 151,
];

/// The RFC 3074 hash of `key`: start from the key length and fold the bytes in from the
/// last to the first through the mixing table.
pub fn rfc3074_hash(key: &[u8]) -> u8 {
    key.iter()
        .rev()
        .fold(key.len() as u8, |h, b| MIX[usize::from(h ^ b)])
}

/// The member responsible for `mac` among `live` members: bucket = hash mod count over
/// the members sorted by name, so the answer does not depend on the order they were
/// listed in. Keyed on chaddr, never option 61, which PXE ROMs and iPXE send differently.
pub fn responsible_member<'a>(mac: &MacAddr, live: &[&'a str]) -> Option<&'a str> {
    if live.is_empty() {
        return None;
    }
    let mut sorted = live.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let bucket = usize::from(rfc3074_hash(&mac.0)) % sorted.len();
    Some(sorted[bucket])
}

/// The member responsible for `mac` (docs/design.md, "DHCP decisions" 2): the
/// resolver's `owner` if it is alive, else the RFC 3074 bucket over `live` (sorted
/// names). DHCP asks it through `dhcp::responsibility`; the live set is `LiveSet`'s.
pub fn responsible<'a>(
    owner: Option<&'a str>,
    live: &'a [String],
    mac: &MacAddr,
) -> Option<&'a str> {
    match owner {
        Some(o) if live.iter().any(|l| l == o) => Some(o),
        _ => {
            let names: Vec<&str> = live.iter().map(String::as_str).collect();
            responsible_member(mac, &names)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // Reference values, computed per RFC 3074 §6.
        assert_eq!(rfc3074_hash(&[0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), 156);
        assert_eq!(rfc3074_hash(&[0xff; 6]), 79);
        assert_eq!(rfc3074_hash(&[0x00; 6]), 254);
    }

    #[test]
    fn table_is_a_permutation() {
        let mut seen = [false; 256];
        for v in MIX {
            assert!(!seen[usize::from(v)], "{v} twice");
            seen[usize::from(v)] = true;
        }
    }

    #[test]
    fn members_share_the_load_and_order_does_not_matter() {
        let members = ["conductor-c", "conductor-a", "conductor-b"];
        let reordered = ["conductor-b", "conductor-c", "conductor-a"];
        let mut counts = std::collections::HashMap::new();
        for n in 0..3000u32 {
            let b = n.to_be_bytes();
            let mac = MacAddr([0x52, 0x54, b[0], b[1], b[2], b[3]]);
            let a = responsible_member(&mac, &members).unwrap();
            assert_eq!(Some(a), responsible_member(&mac, &reordered));
            *counts.entry(a).or_insert(0) += 1;
        }
        for m in members {
            let c = counts[m];
            assert!((700..1300).contains(&c), "{m} got {c} of 3000");
        }
        assert_eq!(responsible_member(&MacAddr([0; 6]), &[]), None);
    }
}
