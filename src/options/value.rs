//! Typed option values: from the text of a `dhcp-option` entry (its comma-separated
//! fields after the option) to the octets sent. Every error names the offending text.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::catalog::Kind;

/// Why a value cannot be used; the text says which field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

fn err<T>(msg: String) -> Result<T, ValueError> {
    Err(ValueError(msg))
}

fn ip(field: &str) -> Result<Ipv4Addr, ValueError> {
    field
        .parse()
        .or_else(|_| err(format!("{field:?} is not an IPv4 address")))
}

/// An IPv6 address, in dnsmasq's brackets or bare.
fn ip6(field: &str) -> Result<Ipv6Addr, ValueError> {
    let bare = field
        .strip_prefix('[')
        .and_then(|f| f.strip_suffix(']'))
        .unwrap_or(field);
    bare.parse()
        .or_else(|_| err(format!("{field:?} is not an IPv6 address")))
}

fn int<T: std::str::FromStr>(field: &str, what: &str) -> Result<T, ValueError> {
    field
        .parse()
        .or_else(|_| err(format!("{field:?} is not {what}")))
}

/// One field, without the quotes dnsmasq allows around text.
fn unquote(field: &str) -> &str {
    field
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .unwrap_or(field)
}

/// Octets written as hex pairs separated by `:` (dnsmasq's form), e.g. `01:0a:ff`.
pub fn hex(field: &str) -> Result<Vec<u8>, ValueError> {
    field
        .split(':')
        .map(|pair| match pair.len() {
            1 | 2 => u8::from_str_radix(pair, 16).ok(),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| ValueError(format!("{field:?} is not hex octets like 01:0a:ff")))
}

fn one<'a>(fields: &[&'a str], what: &str) -> Result<&'a str, ValueError> {
    match fields {
        [f] => Ok(f),
        _ => err(format!(
            "{:?}: takes one {what}, got {}",
            fields.join(","),
            fields.len()
        )),
    }
}

/// RFC 1035 §3.1 labels of `name`, ending with the root label.
fn labels(name: &str, out: &mut Vec<u8>) -> Result<(), ValueError> {
    let name = name.trim_end_matches('.');
    if name.is_empty() || name.len() > 253 {
        return err(format!("{name:?} is not a DNS name"));
    }
    for label in name.split('.') {
        let ok = (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return err(format!("{name:?} is not a DNS name (label {label:?})"));
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    Ok(())
}

/// RFC 3442 §2: each route is the prefix length, the prefix's significant octets, then
/// the router.
fn routes(fields: &[&str]) -> Result<Vec<u8>, ValueError> {
    if fields.is_empty() || !fields.len().is_multiple_of(2) {
        return err(format!(
            "{:?}: classless routes are <network>/<length>,<router> pairs",
            fields.join(",")
        ));
    }
    let mut out = Vec::new();
    for pair in fields.chunks(2) {
        let net: ipnet::Ipv4Net = pair[0]
            .parse()
            .or_else(|_| err(format!("{:?} is not a network like 10.0.0.0/8", pair[0])))?;
        if net.trunc() != net {
            return err(format!("{:?} has host bits set", pair[0]));
        }
        let len = net.prefix_len();
        out.push(len);
        out.extend_from_slice(&net.network().octets()[..usize::from(len.div_ceil(8))]);
        out.extend_from_slice(&ip(pair[1])?.octets());
    }
    Ok(out)
}

/// Whether `len` octets written out raw can be an option of `kind`: the fixed sizes
/// of RFC 2132's types, a whole number of items for the lists.
fn raw_fits(kind: Kind, len: usize) -> bool {
    match kind {
        Kind::U8 | Kind::Bool => len == 1,
        Kind::U16 => len == 2,
        Kind::Ip | Kind::U32 | Kind::I32 => len == 4,
        Kind::IpList => len >= 4 && len.is_multiple_of(4),
        Kind::IpPairs => len >= 8 && len.is_multiple_of(8),
        Kind::U16List => len >= 2 && len.is_multiple_of(2),
        Kind::Ip6 => len == 16,
        Kind::Ip6List => len >= 16 && len.is_multiple_of(16),
        Kind::Text
        | Kind::Hex
        | Kind::Domains
        | Kind::Routes
        | Kind::NtpServers
        | Kind::Params16 => len >= 1,
    }
}

/// Octets written out for any option (`05:dc`), as dnsmasq and Kea take them: one
/// field of hex pairs with a colon (no address, number, name or route holds one), as
/// many as the option's type allows. Text stays text, colons and all (dnsmasq reads a
/// text option's value as text).
fn raw(kind: Kind, fields: &[&str]) -> Option<Result<Vec<u8>, ValueError>> {
    let [f] = fields else { return None };
    // An IPv6 address has colons too: for the kinds that take one, it is an address
    // wherever it reads as one (eight hex pairs read as an address are octets elsewhere).
    let takes_ip6 = matches!(kind, Kind::Ip6 | Kind::Ip6List | Kind::NtpServers);
    if kind == Kind::Text || !f.contains(':') || (takes_ip6 && ip6(f).is_ok()) {
        return None;
    }
    Some(hex(f).and_then(|v| {
        if raw_fits(kind, v.len()) {
            Ok(v)
        } else {
            err(format!(
                "{f:?}: {} octets cannot be a value of this option ({kind:?})",
                v.len()
            ))
        }
    }))
}

/// The octets of `fields` as an option of `kind`, or the octets written out.
pub fn encode(kind: Kind, fields: &[&str]) -> Result<Vec<u8>, ValueError> {
    if let Some(octets) = raw(kind, fields) {
        return octets;
    }
    let ips = |fields: &[&str]| -> Result<Vec<u8>, ValueError> {
        let mut out = Vec::with_capacity(fields.len() * 4);
        for f in fields {
            out.extend_from_slice(&ip(f)?.octets());
        }
        Ok(out)
    };
    Ok(match kind {
        Kind::Ip => ip(one(fields, "address")?)?.octets().to_vec(),
        Kind::IpList => ips(fields)?,
        Kind::IpPairs => {
            if !fields.len().is_multiple_of(2) {
                return err(format!(
                    "{:?}: takes pairs of addresses (destination, router)",
                    fields.join(",")
                ));
            }
            ips(fields)?
        }
        Kind::Text => {
            // A comma inside text is text (dnsmasq joins the fields back).
            let text = fields.join(",");
            let text = unquote(&text);
            if text.is_empty()
                || text
                    .bytes()
                    .any(|b| b == 0 || !(b == b' ' || b.is_ascii_graphic()))
            {
                return err(format!("{text:?} is not printable text"));
            }
            text.as_bytes().to_vec()
        }
        Kind::U8 => vec![int::<u8>(one(fields, "number")?, "a number from 0 to 255")?],
        Kind::U16 => int::<u16>(one(fields, "number")?, "a number from 0 to 65535")?
            .to_be_bytes()
            .to_vec(),
        Kind::U32 => int::<u32>(one(fields, "number")?, "a number from 0 to 4294967295")?
            .to_be_bytes()
            .to_vec(),
        Kind::I32 => int::<i32>(one(fields, "number")?, "a signed 32-bit number")?
            .to_be_bytes()
            .to_vec(),
        Kind::U16List => {
            let mut out = Vec::with_capacity(fields.len() * 2);
            for f in fields {
                out.extend_from_slice(&int::<u16>(f, "a number from 0 to 65535")?.to_be_bytes());
            }
            out
        }
        Kind::Bool => {
            let f = one(fields, "boolean")?;
            // dnsmasq writes a flag as its number, `00` and `01` included.
            match (f.to_ascii_lowercase().as_str(), f.parse::<u8>()) {
                ("true" | "yes" | "on", _) | (_, Ok(1)) => vec![1],
                ("false" | "no" | "off", _) | (_, Ok(0)) => vec![0],
                _ => return err(format!("{f:?} is not a boolean (0, 1, true, false)")),
            }
        }
        Kind::Hex => hex(one(fields, "hex value")?)?,
        Kind::Domains => {
            let mut out = Vec::new();
            for f in fields {
                labels(f, &mut out)?;
            }
            out
        }
        Kind::Routes => routes(fields)?,
        Kind::Ip6 => ip6(one(fields, "address")?)?.octets().to_vec(),
        Kind::Ip6List => {
            let mut out = Vec::with_capacity(fields.len() * 16);
            for f in fields {
                out.extend_from_slice(&ip6(f)?.octets());
            }
            out
        }
        Kind::NtpServers => ntp_servers(fields)?,
        Kind::Params16 => {
            let mut out = Vec::new();
            for f in fields {
                let text = encode(Kind::Text, &[f])?;
                let len = u16::try_from(text.len())
                    .or_else(|_| err(format!("{f:?}: a parameter is at most 65535 octets")))?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&text);
            }
            out
        }
    })
}

/// RFC 5908 §4: one suboption per server, a unicast address as suboption 1, a
/// multicast one as 2, a name as 3 (RFC 1035 §3.1 labels, uncompressed).
fn ntp_servers(fields: &[&str]) -> Result<Vec<u8>, ValueError> {
    const SERVER_ADDR: u16 = 1;
    const MULTICAST_ADDR: u16 = 2;
    const SERVER_FQDN: u16 = 3;
    let mut out = Vec::new();
    for f in fields {
        let (sub, data) = match ip6(f) {
            Ok(a) if a.is_multicast() => (MULTICAST_ADDR, a.octets().to_vec()),
            Ok(a) => (SERVER_ADDR, a.octets().to_vec()),
            Err(_) => {
                let mut name = Vec::new();
                labels(f, &mut name)
                    .or_else(|_| err(format!("{f:?} is neither an IPv6 address nor a DNS name")))?;
                (SERVER_FQDN, name)
            }
        };
        out.extend_from_slice(&sub.to_be_bytes());
        // A name is at most 255 octets, an address 16: the length fits.
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    if out.is_empty() {
        return err("ntp-server takes at least one address or name".into());
    }
    Ok(out)
}

/// A DHCPv6 option shardboot has no type for: IPv6 addresses if every field is one,
/// else as [`encode_untyped`] without its IPv4 reading.
pub fn encode_untyped6(fields: &[&str]) -> Result<Vec<u8>, ValueError> {
    if fields.iter().all(|f| ip6(f).is_ok()) {
        return encode(Kind::Ip6List, fields);
    }
    if fields.iter().any(|f| f.parse::<Ipv4Addr>().is_ok()) {
        return err(format!(
            "{:?}: an IPv4 address in a DHCPv6 option; write its octets in hex if it is meant",
            fields.join(",")
        ));
    }
    encode_untyped(fields)
}

/// An option shardboot has no type for: addresses if every field is one, hex if the
/// one field is hex octets with colons, one octet if it is a number up to 255 (dnsmasq
/// takes a number for an option it has no size for as one octet), else text. A larger
/// number is refused: its width would be a guess.
pub fn encode_untyped(fields: &[&str]) -> Result<Vec<u8>, ValueError> {
    if fields.iter().all(|f| f.parse::<Ipv4Addr>().is_ok()) {
        return encode(Kind::IpList, fields);
    }
    if let [f] = fields {
        if f.contains(':') {
            if let Ok(v) = hex(f) {
                return Ok(v);
            }
        }
        if let Ok(n) = f.parse::<u8>() {
            return Ok(vec![n]);
        }
        if f.parse::<i64>().is_ok() {
            return err(format!(
                "{f:?}: a number above 255 for an option shardboot has no type for; write its octets in hex (e.g. 00:00:0e:10)"
            ));
        }
    }
    encode(Kind::Text, fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_encodes_as_its_rfc_says() {
        let table: &[(Kind, &[&str], &[u8])] = &[
            (Kind::Ip, &["192.0.2.1"], &[192, 0, 2, 1]),
            (
                Kind::IpList,
                &["192.0.2.1", "10.0.0.1"],
                &[192, 0, 2, 1, 10, 0, 0, 1],
            ),
            (
                Kind::IpPairs,
                &["10.0.0.0", "192.0.2.1"],
                &[10, 0, 0, 0, 192, 0, 2, 1],
            ),
            (Kind::Text, &["\"a b\""], b"a b"),
            (Kind::Text, &["a", "b"], b"a,b"),
            (Kind::U8, &["64"], &[64]),
            (Kind::U16, &["1500"], &[5, 220]),
            (Kind::U32, &["3600"], &[0, 0, 14, 16]),
            (Kind::I32, &["-3600"], &[255, 255, 241, 240]),
            (Kind::Bool, &["true"], &[1]),
            (Kind::Bool, &["0"], &[0]),
            // dnsmasq's `29,00`: a flag as a number.
            (Kind::Bool, &["00"], &[0]),
            (Kind::Bool, &["01"], &[1]),
            (
                Kind::U16List,
                &["68", "296", "1500"],
                &[0, 68, 1, 40, 5, 220],
            ),
            (Kind::Hex, &["01:0a:ff"], &[1, 10, 255]),
            (
                Kind::Domains,
                &["example.com", "b.c."],
                &[
                    7, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 3, b'c', b'o', b'm', 0, 1, b'b',
                    1, b'c', 0,
                ],
            ),
            // RFC 3442 §2's own examples: 10.0.0.0/8 is 8.10, 0.0.0.0/0 is 0, /25 is 5 octets.
            (
                Kind::Routes,
                &[
                    "10.0.0.0/8",
                    "192.0.2.1",
                    "0.0.0.0/0",
                    "192.0.2.254",
                    "10.17.0.128/25",
                    "192.0.2.2",
                ],
                &[
                    8, 10, 192, 0, 2, 1, 0, 192, 0, 2, 254, 25, 10, 17, 0, 128, 192, 0, 2, 2,
                ],
            ),
        ];
        for (kind, fields, want) in table {
            assert_eq!(
                encode(*kind, fields).as_deref(),
                Ok(*want),
                "{kind:?} {fields:?}"
            );
        }
    }

    #[test]
    fn every_parse_error_names_the_offending_text() {
        let table: &[(Kind, &[&str], &str)] = &[
            (
                Kind::Ip,
                &["192.0.2.300"],
                "\"192.0.2.300\" is not an IPv4 address",
            ),
            (
                Kind::Ip,
                &["192.0.2.1", "192.0.2.2"],
                "\"192.0.2.1,192.0.2.2\": takes one address, got 2",
            ),
            (
                Kind::IpList,
                &["192.0.2.1", "gw"],
                "\"gw\" is not an IPv4 address",
            ),
            (Kind::IpPairs, &["10.0.0.0"], "\"10.0.0.0\": takes pairs"),
            (Kind::Text, &["a\tb"], "\"a\\tb\" is not printable text"),
            (Kind::Text, &[""], "\"\" is not printable text"),
            (Kind::U8, &["256"], "\"256\" is not a number from 0 to 255"),
            (Kind::U16, &["-1"], "\"-1\" is not a number from 0 to 65535"),
            (
                Kind::U32,
                &["1h"],
                "\"1h\" is not a number from 0 to 4294967295",
            ),
            (Kind::I32, &["x"], "\"x\" is not a signed 32-bit number"),
            (Kind::Bool, &["maybe"], "\"maybe\" is not a boolean"),
            (Kind::Bool, &["2"], "\"2\" is not a boolean"),
            (
                Kind::U16List,
                &["1500", "x"],
                "\"x\" is not a number from 0 to 65535",
            ),
            (
                Kind::IpList,
                &["c0:00:02"],
                "\"c0:00:02\": 3 octets cannot be a value of this option (IpList)",
            ),
            (
                Kind::Bool,
                &["00:01"],
                "\"00:01\": 2 octets cannot be a value of this option (Bool)",
            ),
            (Kind::U16, &["05:dz"], "\"05:dz\" is not hex octets"),
            (Kind::Hex, &["01:0g"], "\"01:0g\" is not hex octets"),
            (Kind::Hex, &["012"], "\"012\" is not hex octets"),
            (
                Kind::Domains,
                &["a..b"],
                "\"a..b\" is not a DNS name (label \"\")",
            ),
            (
                Kind::Domains,
                &["a_b.c"],
                "\"a_b.c\" is not a DNS name (label \"a_b\")",
            ),
            (
                Kind::Routes,
                &["10.0.0.0/8"],
                "\"10.0.0.0/8\": classless routes are",
            ),
            (
                Kind::Routes,
                &["10.0.0.1/8", "192.0.2.1"],
                "\"10.0.0.1/8\" has host bits set",
            ),
            (
                Kind::Routes,
                &["10.0.0.0/33", "192.0.2.1"],
                "\"10.0.0.0/33\" is not a network",
            ),
            (
                Kind::Routes,
                &["10.0.0.0/8", "gw"],
                "\"gw\" is not an IPv4 address",
            ),
        ];
        for (kind, fields, want) in table {
            let got = encode(*kind, fields).unwrap_err().0;
            assert!(got.starts_with(want), "{kind:?} {fields:?}: {got}");
        }
    }

    #[test]
    fn octets_written_out_are_taken_for_any_type_but_text() {
        let table: &[(Kind, &str, &[u8])] = &[
            (Kind::Ip, "c0:00:02:01", &[192, 0, 2, 1]),
            (
                Kind::IpList,
                "c0:00:02:01:0a:00:00:01",
                &[192, 0, 2, 1, 10, 0, 0, 1],
            ),
            (Kind::U8, "40", &[40]),
            (Kind::U8, "00:40", &[]),
            (Kind::Bool, "01:", &[]),
            (Kind::Bool, "1:", &[]),
            (Kind::U16, "05:dc", &[5, 220]),
            (Kind::U32, "00:00:0e:10", &[0, 0, 14, 16]),
            (Kind::Domains, "01:61:00", &[1, b'a', 0]),
            (Kind::Hex, "01:0a:ff", &[1, 10, 255]),
        ];
        for (kind, field, want) in table {
            let got = encode(*kind, &[field]);
            if want.is_empty() {
                assert!(got.is_err(), "{kind:?} {field}: {got:?}");
            } else {
                assert_eq!(got.as_deref(), Ok(*want), "{kind:?} {field}");
            }
        }
        // A text with colons is text, as dnsmasq reads it.
        assert_eq!(encode(Kind::Text, &["ab:cd"]).unwrap(), b"ab:cd");
    }

    #[test]
    fn untyped_values_are_guessed_like_dnsmasq_but_never_a_wide_number() {
        assert_eq!(
            encode_untyped(&["192.0.2.1", "192.0.2.2"]).unwrap().len(),
            8
        );
        assert_eq!(encode_untyped(&["01:02"]).unwrap(), [1, 2]);
        assert_eq!(encode_untyped(&["HTTPClient"]).unwrap(), b"HTTPClient");
        // dnsmasq's `<code>,00`: a number up to 255 is one octet.
        assert_eq!(encode_untyped(&["00"]).unwrap(), [0]);
        assert_eq!(encode_untyped(&["255"]).unwrap(), [255]);
        let e = encode_untyped(&["3600"]).unwrap_err().0;
        assert!(e.starts_with("\"3600\": a number above 255"), "{e}");
    }
}
