//! dnsmasq's `dhcp-option` syntax, the form every option is configured in (TOML
//! `options` lists, ironic-image's `DHCP_OPTIONS`, Ironic's optsdir files):
//!
//! `[tag:<t>,][tag:!<t>,]…(option:<name>|option:<code>|<code>)[,<value>…]`
//!
//! No value means "send nothing for this option" (IrSO writes `tag:range_0,option:router`
//! to give a range no router).
//!
//! A DHCPv6 option is written `option6:<name>` or `option6:<code>` (dnsmasq's form),
//! addresses in brackets: `option6:ntp-server,[2001:db8::1]`.

use super::catalog::{self, Kind};
use super::catalog6;
use super::value::{self, ValueError};
use super::{OptionRule, OptionRule6, TagMatch};

/// One entry of either family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyRule {
    /// A DHCPv4 option.
    V4(OptionRule),
    /// A DHCPv6 option (`option6:`).
    V6(OptionRule6),
}

/// Longest tag name; Ironic's are node UUIDs (36).
const MAX_TAG: usize = 64;

/// Splits on commas outside double quotes (a quoted text may hold commas).
fn fields(entry: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, b) in entry.bytes().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(entry[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(entry[start..].trim());
    out
}

/// Whether `name` is a tag name: 1 to 64 letters, digits, `-`, `_`, `.`.
pub fn is_tag(name: &str) -> bool {
    (1..=MAX_TAG).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn tag(name: &str, negated: bool) -> Result<TagMatch, ValueError> {
    if !is_tag(name) {
        return Err(ValueError(format!(
            "{name:?} is not a tag name (1 to {MAX_TAG} letters, digits, '-', '_', '.')"
        )));
    }
    Ok(TagMatch {
        name: name.to_string(),
        negated,
    })
}

/// Parses one DHCPv4 entry; an `option6:` one is refused.
pub fn parse(entry: &str) -> Result<OptionRule, ValueError> {
    match parse_any(entry)? {
        AnyRule::V4(rule) => Ok(rule),
        AnyRule::V6(_) => Err(ValueError(format!(
            "{entry:?}: a DHCPv6 option (option6:) where only DHCPv4 options are served"
        ))),
    }
}

/// Parses one DHCPv6 entry; a DHCPv4 one is refused.
pub fn parse6(entry: &str) -> Result<OptionRule6, ValueError> {
    match parse_any(entry)? {
        AnyRule::V6(rule) => Ok(rule),
        AnyRule::V4(_) => Err(ValueError(format!(
            "{entry:?}: a DHCPv4 option where only DHCPv6 options (option6:) are served"
        ))),
    }
}

/// Parses one entry of either family.
pub fn parse_any(entry: &str) -> Result<AnyRule, ValueError> {
    let fields = fields(entry.trim());
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(f) = fields.get(i) {
        // `net:` is dnsmasq's older spelling of `tag:`.
        let Some(t) = f.strip_prefix("tag:").or_else(|| f.strip_prefix("net:")) else {
            break;
        };
        tags.push(match t.strip_prefix('!') {
            Some(t) => tag(t, true)?,
            None => tag(t, false)?,
        });
        i += 1;
    }
    let spec = fields.get(i).copied().unwrap_or_default();
    for (prefix, why) in [
        ("encap:", "encapsulated options are not supported"),
        ("vi-encap:", "vendor-identifying options are not supported"),
        ("vendor:", "vendor-class options are not supported"),
    ] {
        if spec.starts_with(prefix) {
            return Err(ValueError(format!("{spec:?}: {why}")));
        }
    }
    if let Some(name) = spec.strip_prefix("option6:") {
        return parse_v6(tags, spec, name, &fields[i + 1..]).map(AnyRule::V6);
    }
    let name = spec.strip_prefix("option:").unwrap_or(spec);
    let (code, kind) = match name.parse::<u8>() {
        Ok(code) => (code, catalog::kind_of(code)),
        Err(_) if spec.starts_with("option:") => {
            let (code, kind) = catalog::by_name(name).ok_or_else(|| {
                ValueError(format!(
                    "{spec:?}: no option is called {name:?} (give its number instead)"
                ))
            })?;
            (code, Some(kind))
        }
        Err(_) if spec.is_empty() => {
            return Err(ValueError(format!("{entry:?}: no option named")));
        }
        Err(_) => {
            return Err(ValueError(format!(
                "{spec:?} is neither tag:<name>, option:<name> nor an option number"
            )))
        }
    };
    if let Some(why) = catalog::reserved(code) {
        return Err(ValueError(format!("{spec:?}: option {code} {why}")));
    }
    let values = &fields[i + 1..];
    let value = match (values, kind) {
        ([], _) | ([""], _) => None,
        (v, Some(kind)) => Some(value::encode(kind, v)?),
        (v, None) => Some(value::encode_untyped(v)?),
    };
    if code == 255 && value.is_none() {
        return Err(ValueError(format!(
            "{spec:?}: needs the next-server address"
        )));
    }
    Ok(AnyRule::V4(OptionRule { tags, code, value }))
}

/// The `option6:<name|code>` part and its values.
fn parse_v6(
    tags: Vec<TagMatch>,
    spec: &str,
    name: &str,
    values: &[&str],
) -> Result<OptionRule6, ValueError> {
    let (code, kind) = match name.parse::<u16>() {
        Ok(code) => (code, catalog6::kind_of6(code)),
        Err(_) => {
            let (code, kind) = catalog6::by_name6(name).ok_or_else(|| {
                ValueError(format!(
                    "{spec:?}: no DHCPv6 option is called {name:?} (give its number instead)"
                ))
            })?;
            (code, Some(kind))
        }
    };
    if let Some(why) = catalog6::reserved6(code) {
        return Err(ValueError(format!("{spec:?}: option6 {code} {why}")));
    }
    let value = match (values, kind) {
        ([], _) | ([""], _) => None,
        (v, Some(kind)) => Some(value::encode(kind, v)?),
        (v, None) => Some(value::encode_untyped6(v)?),
    };
    // RFC 8415 §21.1: an option's length is 16 bits.
    if value
        .as_ref()
        .is_some_and(|v| v.len() > usize::from(u16::MAX))
    {
        return Err(ValueError(format!(
            "{spec:?}: a value of more than 65535 octets"
        )));
    }
    Ok(OptionRule6 { tags, code, value })
}

/// The kind `parse` uses for `code`, for callers that build a rule from typed config.
pub fn kind_of(code: u8) -> Option<Kind> {
    catalog::kind_of(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, negated: bool) -> TagMatch {
        TagMatch {
            name: name.into(),
            negated,
        }
    }

    #[test]
    fn entries_as_ironic_and_irso_write_them() {
        let table: &[(&str, u8, Option<&[u8]>)] = &[
            ("option:ntp-server,192.0.2.5", 42, Some(&[192, 0, 2, 5])),
            (
                "option:router,192.0.2.1,192.0.2.2",
                3,
                Some(&[192, 0, 2, 1, 192, 0, 2, 2]),
            ),
            // IrSO: a range without a router.
            ("tag:range_0,option:router", 3, None),
            ("42,192.0.2.5", 42, Some(&[192, 0, 2, 5])),
            ("option:42,192.0.2.5", 42, Some(&[192, 0, 2, 5])),
            ("option:mtu,9000", 26, Some(&[0x23, 0x28])),
            ("60,HTTPClient", 60, Some(b"HTTPClient")),
            ("option:domain-search,a.example,b.example", 119, None),
            // RFC 2132's one-octet flags, as dnsmasq and Kea configs write them.
            ("29,00", 29, Some(&[0])),
            ("30,01", 30, Some(&[1])),
            ("39,1", 39, Some(&[1])),
            ("option:mask-supplier,true", 30, Some(&[1])),
            ("option:tcp-keepalive-garbage,0", 39, Some(&[0])),
            // Octets written out, for any code.
            ("26,05:dc", 26, Some(&[5, 220])),
            ("option:router,c0:00:02:01", 3, Some(&[192, 0, 2, 1])),
            ("43,06:01:08:ff", 43, Some(&[6, 1, 8, 255])),
            ("200,00", 200, Some(&[0])),
            ("200,0e:10", 200, Some(&[14, 16])),
            ("25,68,1500", 25, Some(&[0, 68, 5, 220])),
        ];
        for (entry, code, value) in table {
            let r = parse(entry).unwrap_or_else(|e| panic!("{entry}: {e}"));
            assert_eq!(r.code, *code, "{entry}");
            if *code != 119 {
                assert_eq!(r.value.as_deref(), *value, "{entry}");
            }
        }
        // Ironic's optsdir file lines for a node.
        let uuid = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
        let r = parse(&format!("tag:{uuid},tag:!ipxe,67,snponly.efi")).unwrap();
        assert_eq!(r.tags, [t(uuid, false), t("ipxe", true)]);
        assert_eq!(
            (r.code, r.value.as_deref()),
            (67, Some(&b"snponly.efi"[..]))
        );
        let r = parse(&format!(
            "tag:{uuid},tag:ipxe,67,http://192.0.2.2:6180/boot.ipxe"
        ))
        .unwrap();
        assert_eq!(
            r.value.as_deref(),
            Some(&b"http://192.0.2.2:6180/boot.ipxe"[..])
        );
        let r = parse(&format!("tag:{uuid},150,192.0.2.2")).unwrap();
        assert_eq!(
            (r.code, r.value.as_deref()),
            (150, Some(&[192, 0, 2, 2][..]))
        );
        let r = parse(&format!("tag:{uuid},255,192.0.2.2")).unwrap();
        assert_eq!(
            (r.code, r.value.as_deref()),
            (255, Some(&[192, 0, 2, 2][..]))
        );
        // A quoted text keeps its commas.
        let r = parse("option:root-path,\"iscsi:192.0.2.9::::iqn.x,y\"").unwrap();
        assert_eq!(r.value.as_deref(), Some(&b"iscsi:192.0.2.9::::iqn.x,y"[..]));
    }

    #[test]
    fn every_parse_error_names_the_offending_text() {
        let table = [
            (
                "option:routr,192.0.2.1",
                "\"option:routr\": no option is called \"routr\"",
            ),
            (
                "router,192.0.2.1",
                "\"router\" is neither tag:<name>, option:<name> nor an option number",
            ),
            ("", "\"\": no option named"),
            ("tag:x", "\"tag:x\": no option named"),
            ("tag:a b,3,192.0.2.1", "\"a b\" is not a tag name"),
            ("tag:!,3", "\"\" is not a tag name"),
            (
                "option:router,192.0.2.256",
                "\"192.0.2.256\" is not an IPv4 address",
            ),
            ("option:mtu,big", "\"big\" is not a number from 0 to 65535"),
            (
                "53,1",
                "\"53\": option 53 is set by shardboot on every reply",
            ),
            (
                "option:51,3600",
                "\"option:51\": option 51 is set from the lease",
            ),
            ("82,01:02", "\"82\": option 82 is the relay agent's"),
            (
                "encap:175,176,1",
                "\"encap:175\": encapsulated options are not supported",
            ),
            (
                "option6:dns-server,[::1]",
                "\"option6:dns-server,[::1]\": a DHCPv6 option (option6:) where only DHCPv4",
            ),
            ("256,1", "\"256\" is neither"),
            ("29,2", "\"2\" is not a boolean"),
            ("42,c0:00:02", "\"c0:00:02\": 3 octets cannot be a value"),
            (
                "200,3600",
                "\"3600\": a number above 255 for an option shardboot has no type for",
            ),
            ("255", "\"255\": needs the next-server address"),
        ];
        for (entry, want) in table {
            let got = parse(entry).unwrap_err().0;
            assert!(got.starts_with(want), "{entry:?}: {got}");
        }
    }

    fn v6(entry: &str) -> (u16, Option<Vec<u8>>) {
        let r = parse6(entry).unwrap_or_else(|e| panic!("{entry:?}: {e}"));
        (r.code, r.value)
    }

    fn addr6(s: &str) -> Vec<u8> {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec()
    }

    #[test]
    fn option6_entries_by_name_number_and_raw_octets() {
        // RFC 3646 §3: the addresses, 16 octets each, in order.
        assert_eq!(
            v6("option6:dns-server,[2001:db8::1],[2001:db8::2]"),
            (
                23,
                Some([addr6("2001:db8::1"), addr6("2001:db8::2")].concat())
            )
        );
        assert_eq!(
            v6("option6:23,2001:db8::1"),
            (23, Some(addr6("2001:db8::1")))
        );
        // RFC 5908 §4: suboption 1 (address, 16), suboption 3 (a name in labels).
        let ntp = [
            &[0, 1, 0, 16][..],
            &addr6("2001:db8::5"),
            &[0, 3, 0, 9, 3, b'n', b't', b'p', 3, b'l', b'a', b'b', 0],
        ]
        .concat();
        assert_eq!(
            v6("option6:ntp-server,[2001:db8::5],ntp.lab"),
            (56, Some(ntp))
        );
        // A multicast server address is suboption 2.
        assert_eq!(
            v6("option6:ntp-server,[ff05::101]").1.unwrap()[..4],
            [0, 2, 0, 16]
        );
        assert_eq!(
            v6("option6:information-refresh-time,3600"),
            (32, Some(vec![0, 0, 0x0e, 0x10]))
        );
        assert_eq!(
            v6("option6:domain-search,lab.example"),
            (24, Some(b"\x03lab\x07example\x00".to_vec()))
        );
        // RFC 5970 §3.2: each parameter behind its 16-bit length.
        assert_eq!(
            v6("option6:bootfile-param,a,bc"),
            (60, Some(vec![0, 1, b'a', 0, 2, b'b', b'c']))
        );
        // Vendor options and any unnamed code: octets in hex; an untyped address list.
        assert_eq!(
            v6("option6:vendor-opts,00:00:01:57:00:01:00:01:ff"),
            (17, Some(vec![0, 0, 1, 0x57, 0, 1, 0, 1, 0xff]))
        );
        assert_eq!(v6("option6:200,01:02"), (200, Some(vec![1, 2])));
        assert_eq!(v6("option6:201,[fd00::9]"), (201, Some(addr6("fd00::9"))));
        assert_eq!(v6("option6:202,hello"), (202, Some(b"hello".to_vec())));
        // Raw octets for a typed code, when they fit its type.
        assert_eq!(
            v6("option6:32,00:00:0e:10"),
            (32, Some(vec![0, 0, 0x0e, 0x10]))
        );
        // Tags, and no value: send nothing for the code.
        let r = parse6("tag:ipxe,tag:!efi,option6:dns-server").unwrap();
        assert_eq!((r.code, r.value, r.tags.len()), (23, None, 2));
        assert!(r.tags[1].negated);
        // Either family from one list.
        assert!(matches!(
            parse_any("option6:sntp-server,[fd00::1]"),
            Ok(AnyRule::V6(_))
        ));
        assert!(matches!(
            parse_any("option:router,192.0.2.1"),
            Ok(AnyRule::V4(_))
        ));
    }

    #[test]
    fn bad_option6_entries_name_the_text_and_the_reason() {
        let table = [
            (
                "option6:dns-server,192.0.2.1",
                "\"192.0.2.1\" is not an IPv6 address",
            ),
            (
                "option6:no-such,1",
                "\"option6:no-such\": no DHCPv6 option is called",
            ),
            (
                "option6:2,00:01",
                "\"option6:2\": option6 2 is the server DUID",
            ),
            (
                "option6:3,1",
                "\"option6:3\": option6 3 is set from the binding",
            ),
            (
                "option6:13,1",
                "\"option6:13\": option6 13 is set by shardboot",
            ),
            (
                "option6:70000,1",
                "\"option6:70000\": no DHCPv6 option is called",
            ),
            (
                "option6:7,255",
                "\"option6:7\": option6 7 is set by shardboot",
            ),
            (
                "option6:sol-max-rt,-1",
                "\"-1\" is not a number from 0 to 4294967295",
            ),
            (
                "option6:ntp-server,bad_name!",
                "\"bad_name!\" is neither an IPv6 address",
            ),
            (
                "option6:300,192.0.2.1",
                "\"192.0.2.1\": an IPv4 address in a DHCPv6 option",
            ),
            ("option6:23,00:01", "\"00:01\": 2 octets cannot be a value"),
            (
                "option:router,192.0.2.1",
                "\"option:router,192.0.2.1\": a DHCPv4 option where",
            ),
        ];
        for (entry, want) in table {
            let got = parse6(entry).unwrap_err().0;
            assert!(got.starts_with(want), "{entry:?}: {got}");
        }
    }
}
