//! Ironic's dnsmasq DHCP provider, read as dnsmasq would: a `dhcp-optsdir` directory
//! with one file per node (`ironic-<node>.conf`) of `dhcp-option` lines, each tagged
//! with the node's tag (`tag:<tag>,tag:!ipxe,67,snponly.efi`, `tag:<tag>,66,<ip>`, …).
//! The hosts directory tags the node's NICs with it (`<mac>,set:<tag>,set:ironic`), so
//! an entry holds only for that node's machines. Pure: file contents in, option entries
//! out (`crate::options`).

use crate::options::{dnsmasq, value::ValueError, OptionRule};

/// Every file's entries, files in name order (the result does not depend on directory
/// order), lines in file order. Lines that do not parse are returned as `(file, line
/// number, error)` and skipped; blank lines and `#` comments are skipped.
pub fn build<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> (Vec<OptionRule>, Vec<(String, usize, ValueError)>) {
    let mut files: Vec<(&str, &str)> = files.into_iter().collect();
    files.sort_unstable_by_key(|(name, _)| *name);
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    for (name, content) in files {
        for (n, line) in content.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match dnsmasq::parse(line) {
                Ok(rule) => rules.push(rule),
                Err(e) => problems.push((name.escape_default().to_string(), n + 1, e)),
            }
        }
    }
    (rules, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_ironics_dnsmasq_provider_writes() {
        let tag = "7e3b9a44-2b5c-4d1e-9c1a-0d8e1f2a3b4c";
        let file = format!(
            "tag:{tag},tag:!ipxe,67,snponly.efi\ntag:{tag},tag:ipxe,67,http://192.0.2.1:6180/boot.ipxe\n\
             tag:{tag},66,192.0.2.1\ntag:{tag},150,192.0.2.1\ntag:{tag},255,192.0.2.1\n"
        );
        let (rules, problems) = build([
            ("ironic-node-1.conf", file.as_str()),
            ("notes", "# none\n\n"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        let codes: Vec<u8> = rules.iter().map(|r| r.code).collect();
        assert_eq!(codes, [67, 67, 66, 150, 255]);
        assert!(rules.iter().all(|r| r.tags[0].name == tag));
        let (rules, problems) = build([("b", "3,192.0.2.1\n"), ("a", "option:routr,x\n")]);
        assert_eq!(rules.len(), 1);
        assert_eq!((problems[0].0.as_str(), problems[0].1), ("a", 1));
    }
}
