//! dnsmasq's `dhcp-option` syntax, the form every option is configured in (TOML
//! `options` lists, ironic-image's `DHCP_OPTIONS`, Ironic's optsdir files):
//!
//! `[tag:<t>,][tag:!<t>,]…(option:<name>|option:<code>|<code>)[,<value>…]`
//!
//! No value means "send nothing for this option" (IrSO writes `tag:range_0,option:router`
//! to give a range no router).

use super::catalog::{self, Kind};
use super::value::{self, ValueError};
use super::{OptionRule, TagMatch};

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

/// Parses one entry.
pub fn parse(entry: &str) -> Result<OptionRule, ValueError> {
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
        ("option6:", "DHCPv6 options are not served yet"),
    ] {
        if spec.starts_with(prefix) {
            return Err(ValueError(format!("{spec:?}: {why}")));
        }
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
    Ok(OptionRule { tags, code, value })
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
                "\"option6:dns-server\": DHCPv6 options are not served yet",
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
}
