//! `[[member]]`: the shardboot instances, one beside each Ironic conductor.

use serde::Deserialize;

use super::issues::Issues;
use crate::ipxe::{is_safe_url, is_script_safe};

/// One `[[member]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMember {
    name: Option<String>,
    http_url: Option<String>,
    conductor: Option<String>,
    conductor_url: Option<String>,
}

/// A shardboot instance beside one Ironic conductor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Unique name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Base URL of this member's HTTP listener.
    pub http_url: String,
    /// The conductor's host name as Ironic reports it in `node.conductor`.
    pub conductor: Option<String>,
    /// Base URL where that conductor serves `pxelinux.cfg/<mac-hyphen>`.
    pub conductor_url: Option<String>,
}

/// The member name of the member beside conductor `conductor` (as Ironic reports it:
/// `host`, `host:port`, `[v6]`, `[v6]:port`) when members come from Ironic: the
/// brackets dropped and `:` written `_`, which host names never contain, so distinct
/// conductors get distinct names. Names past 63 characters keep 46 and add a hash of
/// the whole. `None` for a conductor name no member name can come from.
pub fn member_name_for_conductor(conductor: &str) -> Option<String> {
    if conductor.is_empty()
        || conductor.len() > 255
        || !conductor
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
    {
        return None;
    }
    let name: String = conductor
        .chars()
        .filter(|c| !matches!(c, '[' | ']'))
        .map(|c| if c == ':' { '_' } else { c })
        .collect();
    if name.len() <= 63 {
        return Some(name);
    }
    let h = conductor.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Some(format!("{}-{h:016x}", &name[..46]))
}

/// A URL rendered into iPXE scripts, so it must be safe there.
fn url(key: String, value: Option<String>, issues: &mut Issues) -> Option<String> {
    let v = value?.trim_end_matches('/').to_string();
    if !is_safe_url(&v) {
        issues.add(
            key,
            "must be an http(s) URL of letters, digits and -._~:/?=%@+,[] only",
        );
    }
    Some(v)
}

/// Whether `name` can name a member: 1-63 characters that are safe in iPXE scripts and
/// need no escaping in URLs.
pub(super) fn is_member_name(name: &str) -> bool {
    is_script_safe(name)
        && name.len() <= 63
        && !name.contains(['/', ':', '?', '%', '@', '+', ',', '=', '[', ']'])
}

/// Validates every `[[member]]`. Names end up in iPXE scripts and URLs, hence the
/// narrow character set.
pub(super) fn validate_all(raw: Vec<RawMember>, issues: &mut Issues) -> Vec<Member> {
    let mut out: Vec<Member> = Vec::new();
    for (i, m) in raw.into_iter().enumerate() {
        let k = |f: &str| format!("member[{i}].{f}");
        let name = m.name.unwrap_or_default();
        if !is_member_name(&name) {
            issues.add(k("name"), "must be 1-63 letters, digits, '-', '_' or '.'");
        }
        if out.iter().any(|o| o.name == name) {
            issues.add(k("name"), format!("duplicates another member named {name}"));
        }
        let http_url = url(k("http_url"), m.http_url, issues);
        if http_url.is_none() {
            issues.add(k("http_url"), "is required");
        }
        if let Some(c) = &m.conductor {
            if !is_script_safe(c) {
                issues.add(k("conductor"), "must be a host name as Ironic reports it");
            }
        }
        out.push(Member {
            name,
            http_url: http_url.unwrap_or_default(),
            conductor: m.conductor,
            conductor_url: url(k("conductor_url"), m.conductor_url, issues),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conductor_names_become_member_names() {
        for (conductor, name) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.2:8090", "127.0.0.2_8090"),
            ("[fd00::2]", "fd00__2"),
            ("[fd00::2]:8090", "fd00__2_8090"),
            ("conductor-1.example.org", "conductor-1.example.org"),
        ] {
            assert_eq!(member_name_for_conductor(conductor).as_deref(), Some(name));
        }
        let long = format!("{}.example.org", "a".repeat(70));
        let name = member_name_for_conductor(&long).unwrap();
        assert_eq!(name.len(), 63);
        assert_ne!(Some(name), member_name_for_conductor(&format!("{long}x")));
        for bad in ["", "a b", "a/b", "a;reboot", "\u{e9}"] {
            assert_eq!(member_name_for_conductor(bad), None, "{bad:?}");
        }
    }
}
