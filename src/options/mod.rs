//! The DHCP option engine: options configured per server (`[dhcp] options`), subnet
//! (`[[subnet]] options`, with tags a range sets) and host (`[[host]] options`, with the
//! host's own tags), each written in dnsmasq's `dhcp-option` syntax (`dnsmasq.rs`) with
//! typed values (`value.rs`, `catalog.rs`), and the built-in client classes as tags.
//! Pure: a request's tags in, the winning option per code out; `dhcp::option_fit` then orders a
//! reply's options and keeps it within the client's size.
//!
//! Which entry wins for a code: among the entries whose tags all hold, the one of the
//! most specific level (host over the options directory over subnet over server), then the one naming the most
//! tags (dnsmasq's rule: a tagged option beats an untagged one), then the last written.
//! The winner either replaces what shardboot would send for that code (the subnet's
//! `router`, `dns`, … keys and the boot options included) or, with no value, removes it.

pub mod catalog;
pub mod catalog6;
pub mod dnsmasq;
pub mod value;

use crate::client_class::{ClientClass, Firmware};

/// One tag condition of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagMatch {
    /// The tag.
    pub name: String,
    /// `tag:!name`: holds when the tag is not set.
    pub negated: bool,
}

/// One configured option: a DHCPv4 one (`C` = `u8`), or with `C` = `u16` a DHCPv6 one
/// (`option6:`, [`OptionRule6`]). Both families share the syntax, the tags and the
/// precedence ([`select`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionRule<C = u8> {
    /// Every condition must hold.
    pub tags: Vec<TagMatch>,
    /// The option code (v4 255: dnsmasq's pseudo-option for the next-server address).
    pub code: C,
    /// Its octets; `None`: send nothing for this code.
    pub value: Option<Vec<u8>>,
}

/// A configured DHCPv6 option (`option6:` entries, RFC 8415 §21 codes).
pub type OptionRule6 = OptionRule<u16>;

impl<C> OptionRule<C> {
    fn holds(&self, tags: &[&str]) -> bool {
        self.tags
            .iter()
            .all(|t| tags.contains(&t.name.as_str()) != t.negated)
    }
}

/// Parses a list of entries; errors carry the entry's index.
pub fn parse_all(entries: &[String]) -> Result<Vec<OptionRule>, (usize, value::ValueError)> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| dnsmasq::parse(e).map_err(|err| (i, err)))
        .collect()
}

/// Tags shardboot sets itself: the client classes ([`class_tags`]) and `known`.
pub const BUILTIN_TAGS: &[&str] = &[
    "ipxe",
    "pxe",
    "httpclient",
    "bios",
    "efi",
    "efi-ia32",
    "efi-x64",
    "efi-arm64",
    "efi-http-x64",
    "efi-http-arm64",
    "known",
];

/// The tags the built-in client classes set: `ipxe`, `pxe`, `httpclient`, and by
/// client architecture (RFC 4578 §2.1, IANA "Processor Architecture Types") `bios`,
/// `efi` with `efi-ia32`, `efi-x64`, `efi-arm64`, `efi-http-x64`, `efi-http-arm64`.
pub fn class_tags(class: &ClientClass, out: &mut Vec<&str>) {
    if class.ipxe {
        out.push("ipxe");
    }
    match class.firmware {
        Firmware::Pxe => out.push("pxe"),
        Firmware::Http => out.push("httpclient"),
        Firmware::None => {}
    }
    let arch = match class.arch {
        Some(0) => Some("bios"),
        Some(6) => Some("efi-ia32"),
        Some(7 | 9) => Some("efi-x64"),
        Some(11) => Some("efi-arm64"),
        Some(16) => Some("efi-http-x64"),
        Some(19) => Some("efi-http-arm64"),
        _ => None,
    };
    if let Some(a) = arch {
        if a != "bios" {
            out.push("efi");
        }
        out.push(a);
    }
}

/// The levels options are configured at, least specific first.
#[derive(Debug, Clone, Copy)]
pub struct Levels<'a, C = u8> {
    /// `[dhcp] options`.
    pub server: &'a [OptionRule<C>],
    /// `[[subnet]] options` (`[[subnet6]] options` for DHCPv6).
    pub subnet: &'a [OptionRule<C>],
    /// The followed options directory (`dhcp.optsdir`: Ironic's per-node options).
    pub node: &'a [OptionRule<C>],
    /// `[[host]] options`.
    pub host: &'a [OptionRule<C>],
}

impl<C> Default for Levels<'_, C> {
    fn default() -> Self {
        Self {
            server: &[],
            subnet: &[],
            node: &[],
            host: &[],
        }
    }
}

/// The winning entry per code for a client with `tags`, in code order.
pub fn select<'a, C: Copy + Ord>(levels: Levels<'a, C>, tags: &[&str]) -> Vec<&'a OptionRule<C>> {
    // (level, tag count, position) ranks the candidates of one code.
    type Rank = (u8, usize, usize);
    let mut best: Vec<(Rank, &'a OptionRule<C>)> = Vec::new();
    let all = [levels.server, levels.subnet, levels.node, levels.host];
    for (level, rules) in all.iter().enumerate() {
        for (pos, rule) in rules.iter().enumerate() {
            if !rule.holds(tags) {
                continue;
            }
            let rank = (level as u8, rule.tags.len(), pos);
            match best.iter_mut().find(|(_, r)| r.code == rule.code) {
                Some(slot) if slot.0 <= rank => *slot = (rank, rule),
                Some(_) => {}
                None => best.push((rank, rule)),
            }
        }
    }
    best.sort_by_key(|(_, r)| r.code);
    best.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[&str]) -> Vec<OptionRule> {
        entries.iter().map(|e| dnsmasq::parse(e).unwrap()).collect()
    }

    fn chosen(levels: Levels<'_>, tags: &[&str]) -> Vec<(u8, Option<Vec<u8>>)> {
        select(levels, tags)
            .into_iter()
            .map(|r| (r.code, r.value.clone()))
            .collect()
    }

    #[test]
    fn the_most_specific_entry_wins() {
        let server = rules(&["option:ntp-server,192.0.2.1", "option:mtu,1500"]);
        let subnet = rules(&[
            "option:ntp-server,192.0.2.2",
            "tag:range_1,option:router",
            "option:router,192.0.2.254",
            "tag:ipxe,option:mtu,9000",
            "tag:!ipxe,option:mtu,1400",
        ]);
        let host = rules(&["option:ntp-server,192.0.2.3"]);
        let levels = Levels {
            server: &server,
            subnet: &subnet,
            ..Levels::default()
        };
        // Subnet over server; an untagged router for clients outside range_1.
        assert_eq!(
            chosen(levels, &[]),
            [
                (3, Some(vec![192, 0, 2, 254])),
                (26, Some(vec![0x05, 0x78])),
                (42, Some(vec![192, 0, 2, 2]))
            ]
        );
        // In range_1 the tagged, valueless entry wins: no router. iPXE gets 9000.
        assert_eq!(
            chosen(levels, &["range_1", "ipxe"]),
            [
                (3, None),
                (26, Some(vec![0x23, 0x28])),
                (42, Some(vec![192, 0, 2, 2]))
            ]
        );
        // A host entry beats both.
        let levels = Levels {
            host: &host,
            ..levels
        };
        assert_eq!(chosen(levels, &[])[2], (42, Some(vec![192, 0, 2, 3])));
        // Of two equally specific entries, the later one.
        let later = rules(&["option:mtu,1000", "option:mtu,1100"]);
        let levels = Levels {
            server: &later,
            ..Levels::default()
        };
        assert_eq!(chosen(levels, &[]), [(26, Some(vec![0x04, 0x4c]))]);
    }

    #[test]
    fn client_classes_become_tags() {
        let class = |firmware, ipxe, arch| {
            let mut out = Vec::new();
            class_tags(
                &ClientClass {
                    firmware,
                    ipxe,
                    ipxe_tls: false,
                    arch,
                },
                &mut out,
            );
            out
        };
        assert_eq!(class(Firmware::Pxe, false, Some(0)), ["pxe", "bios"]);
        assert_eq!(
            class(Firmware::Pxe, false, Some(7)),
            ["pxe", "efi", "efi-x64"]
        );
        assert_eq!(
            class(Firmware::Pxe, false, Some(9)),
            ["pxe", "efi", "efi-x64"]
        );
        assert_eq!(
            class(Firmware::Pxe, true, Some(11)),
            ["ipxe", "pxe", "efi", "efi-arm64"]
        );
        assert_eq!(
            class(Firmware::Http, false, Some(16)),
            ["httpclient", "efi", "efi-http-x64"]
        );
        assert_eq!(class(Firmware::None, false, None), Vec::<&str>::new());
    }
}
