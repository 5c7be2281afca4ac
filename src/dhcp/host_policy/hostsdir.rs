//! Ironic's dnsmasq PXE filter, read as written: a dnsmasq `dhcp-hostsdir` directory
//! with one file per MAC. Ironic (`ironic.pxe_filter.dnsmasq`, and ironic-inspector
//! before it) writes `<mac>,ignore` to deny a machine, rewrites the file to `<mac>` to
//! allow it again, and keeps a file `unknown_hosts_filter` holding `*:*:*:*:*:*,ignore`
//! or `*:*:*:*:*:*` for every MAC without a file of its own. dnsmasq only notices
//! files being written, never removed; here the directory is read whole, so removals
//! count too. Pure: file contents in, policy out.

use std::collections::HashMap;

use super::HostPolicy;
use crate::mac::MacAddr;

/// What a hosts directory says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostsDirPolicy {
    /// Per-MAC entries.
    pub macs: HashMap<MacAddr, HostPolicy>,
    /// The `*:*:*:*:*:*` entry: every MAC without its own.
    pub unknown: Option<HostPolicy>,
    /// The `set:<tag>` fields of each MAC's entry (Ironic's dnsmasq DHCP provider tags
    /// a node's NICs with the node's tag, which its options directory entries match).
    pub tags: HashMap<MacAddr, Vec<String>>,
}

impl HostsDirPolicy {
    /// The policy for `mac`, and whether it came from the wildcard entry.
    pub fn lookup(&self, mac: &MacAddr) -> Option<(HostPolicy, bool)> {
        match self.macs.get(mac) {
            Some(p) => Some((*p, false)),
            None => self.unknown.map(|p| (p, true)),
        }
    }
}

/// A line that is not a dhcp-host entry shardboot understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The first field is neither a MAC nor the all-wildcard MAC.
    #[error(
        "{0:?} is not a MAC address (dnsmasq dhcp-host by client id or name is not supported)"
    )]
    NotAMac(String),
}

/// One understood line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Host(MacAddr, HostPolicy, Vec<String>),
    AnyHost(HostPolicy),
}

/// The dnsmasq wildcard that matches every MAC.
const ANY_MAC: &str = "*:*:*:*:*:*";

/// Parses one dhcp-host line: `<mac>[,<field>...]`. The `ignore` field denies the host
/// (dnsmasq man page, `--dhcp-host`); any other fields (tags, addresses, names) leave
/// it allowed, and `set:<tag>` fields are kept. Blank lines and `#` comments are
/// skipped.
fn parse_line(line: &str) -> Result<Option<Entry>, LineError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut fields = line.split(',').map(str::trim);
    let first = fields.next().unwrap_or_default();
    let rest: Vec<&str> = fields.collect();
    let tags = rest
        .iter()
        .filter_map(|f| f.strip_prefix("set:"))
        .filter(|t| crate::options::dnsmasq::is_tag(t))
        .map(str::to_string)
        .collect();
    let policy = if rest.contains(&"ignore") {
        HostPolicy::Deny
    } else {
        HostPolicy::Allow
    };
    if first == ANY_MAC {
        return Ok(Some(Entry::AnyHost(policy)));
    }
    let mac: MacAddr = first
        .parse()
        .map_err(|_| LineError::NotAMac(first.escape_default().to_string()))?;
    Ok(Some(Entry::Host(mac, policy, tags)))
}

/// Builds the policy from every file's name and contents, in any order. Lines that
/// cannot be understood are returned as `(file, line number, error)` and skipped; a
/// later line for the same MAC wins within a file, and files are applied in name order
/// so the result does not depend on directory order.
pub fn build<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> (HostsDirPolicy, Vec<(String, usize, LineError)>) {
    let mut files: Vec<(&str, &str)> = files.into_iter().collect();
    files.sort_unstable_by_key(|(name, _)| *name);
    let mut policy = HostsDirPolicy::default();
    let mut problems = Vec::new();
    for (name, content) in files {
        for (n, line) in content.lines().enumerate() {
            match parse_line(line) {
                Ok(Some(Entry::Host(mac, p, tags))) => {
                    policy.macs.insert(mac, p);
                    if tags.is_empty() || p == HostPolicy::Deny {
                        policy.tags.remove(&mac);
                    } else {
                        policy.tags.insert(mac, tags);
                    }
                }
                Ok(Some(Entry::AnyHost(p))) => policy.unknown = Some(p),
                Ok(None) => {}
                Err(e) => problems.push((name.escape_default().to_string(), n + 1, e)),
            }
        }
    }
    (policy, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(s: &str) -> MacAddr {
        s.parse().unwrap()
    }

    #[test]
    fn keeps_the_tags_ironics_dhcp_provider_sets() {
        let tag = "4c0ffee0-aaaa-4bbb-8ccc-123456789abc";
        let (p, problems) = build([
            (
                "ironic-52:54:00:00:00:01.conf",
                format!("52:54:00:00:00:01,set:{tag},set:ironic\n").as_str(),
            ),
            (
                "ironic-52:54:00:00:00:02.conf",
                "52:54:00:00:00:02,ignore\n",
            ),
            ("x", "52:54:00:00:00:03,set:bad tag,set:ok\n"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.tags[&mac("52:54:00:00:00:01")], [tag, "ironic"]);
        assert!(!p.tags.contains_key(&mac("52:54:00:00:00:02")));
        // A tag that is not a tag name is left out, not taken as something else.
        assert_eq!(p.tags[&mac("52:54:00:00:00:03")], ["ok"]);
        assert_eq!(
            p.lookup(&mac("52:54:00:00:00:01")),
            Some((HostPolicy::Allow, false))
        );
    }

    #[test]
    fn reads_what_ironics_pxe_filter_writes() {
        let (p, problems) = build([
            ("52:54:00:00:00:01", "52:54:00:00:00:01,ignore\n"),
            ("52:54:00:00:00:02", "52:54:00:00:00:02\n"),
            ("unknown_hosts_filter", "*:*:*:*:*:*,ignore\n"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            p.lookup(&mac("52:54:00:00:00:01")),
            Some((HostPolicy::Deny, false))
        );
        assert_eq!(
            p.lookup(&mac("52:54:00:00:00:02")),
            Some((HostPolicy::Allow, false))
        );
        assert_eq!(
            p.lookup(&mac("52:54:00:00:00:03")),
            Some((HostPolicy::Deny, true))
        );
        let (open, _) = build([("unknown_hosts_filter", "*:*:*:*:*:*\n")]);
        assert_eq!(
            open.lookup(&mac("52:54:00:00:00:03")),
            Some((HostPolicy::Allow, true))
        );
        assert_eq!(build([]).0.lookup(&mac("52:54:00:00:00:03")), None);
    }

    #[test]
    fn other_dhcp_host_fields_allow_and_ignore_anywhere_denies() {
        let (p, problems) = build([(
            "hosts",
            "# operator notes\n\n52:54:00:00:00:01,set:ironic,192.0.2.50\n\
             52-54-00-00-00-02, set:x , ignore\n",
        )]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.macs[&mac("52:54:00:00:00:01")], HostPolicy::Allow);
        assert_eq!(p.macs[&mac("52:54:00:00:00:02")], HostPolicy::Deny);
    }

    #[test]
    fn lines_it_cannot_read_are_reported_and_skipped() {
        let (p, problems) = build([(
            "odd\u{7}",
            "id:01:02:03,ignore\n52:54:00:*:*:*,ignore\n52:54:00:00:00:09\n",
        )]);
        assert_eq!(p.macs.len(), 1);
        assert_eq!(problems.len(), 2);
        assert_eq!(
            problems[0].0, "odd\\u{7}",
            "file names are escaped for logs"
        );
        assert_eq!(problems[1].1, 2);
    }

    #[test]
    fn files_apply_in_name_order() {
        let a = ("a", "52:54:00:00:00:01\n");
        let b = ("b", "52:54:00:00:00:01,ignore\n");
        assert_eq!(build([a, b]).0, build([b, a]).0);
        assert_eq!(
            build([b, a]).0.macs[&mac("52:54:00:00:00:01")],
            HostPolicy::Deny
        );
    }
}
