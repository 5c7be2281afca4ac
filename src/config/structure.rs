//! Structural checks of a config table: unknown keys and values of the wrong type, every
//! one of them reported with its full key path (`subnet[1].ranges`), not only the first.
//!
//! serde stops at the first error, so the table is deserialized again after removing
//! each offending key; `serde_path_to_error` names the key serde was in when it failed.
//! What remains once every offending key is gone is returned too, so the semantic
//! checks can run over it and `check-config` lists both kinds of problem in one run.

use serde::de::DeserializeOwned;
use toml::{Table, Value};

use super::ConfigIssue;

/// More structural errors than this are not worth listing one by one.
const MAX_ISSUES: usize = 32;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Deserializes `table`, or lists every unknown key and wrongly typed value in it.
pub(super) fn deserialize_all<T: DeserializeOwned>(table: Table) -> Result<T, Vec<ConfigIssue>> {
    match deserialize_lenient(table) {
        (Some(v), issues) if issues.is_empty() => Ok(v),
        (_, issues) => Err(issues),
    }
}

/// Deserializes `table`, removing each unknown key and wrongly typed value it meets;
/// returns every such issue and, when the rest deserializes, the rest. `None` when an
/// error cannot be removed (a missing field, a whole table of the wrong type) or there
/// are too many to go on.
pub(super) fn deserialize_lenient<T: DeserializeOwned>(
    mut table: Table,
) -> (Option<T>, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    loop {
        let err = match serde_path_to_error::deserialize::<_, T>(Value::Table(table.clone())) {
            Ok(v) => return (Some(v), issues),
            Err(e) => e,
        };
        let path = steps(err.path());
        issues.push(issue(&path, with_suggestion(err.inner().message())));
        // Only a key's own value can be removed to look further; an error about a whole
        // table (a missing field) ends the search.
        let removable = matches!(path.last(), Some(Step::Key(_)));
        if !removable || issues.len() >= MAX_ISSUES || !remove(&mut table, &path) {
            return (None, issues);
        }
    }
}

/// serde_path_to_error's path as steps: map keys and sequence indices.
fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Map { key } | Segment::Enum { variant: key } => Some(Step::Key(key.clone())),
            Segment::Unknown => None,
        })
        .collect()
}

/// serde's unknown-field message, followed by the accepted key nearest to the unknown
/// one when it is near enough to be a typo: `portt` → `port`, `lease_tme` → `lease_time`.
fn with_suggestion(message: &str) -> String {
    let (Some(unknown), Some(fields)) = (
        message
            .strip_prefix("unknown field `")
            .and_then(|r| r.split_once('`'))
            .map(|(u, _)| u),
        super::explain::expected_fields(message),
    ) else {
        return message.to_string();
    };
    let nearest = fields
        .iter()
        .map(|f| (edit_distance(unknown, f), f))
        .min_by_key(|(d, _)| *d);
    match nearest {
        // A third of the key may be wrong, at least one edit: more suggests unrelated keys.
        Some((d, f)) if d <= (unknown.chars().count() / 3).max(1) => {
            format!("{message}; did you mean `{f}`?")
        }
        _ => message.to_string(),
    }
}

/// Levenshtein distance (insertions, deletions, substitutions), over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

fn issue(path: &[Step], reason: String) -> ConfigIssue {
    let mut key = String::new();
    for step in path {
        match step {
            Step::Key(k) if key.is_empty() => key.push_str(k),
            Step::Key(k) => {
                key.push('.');
                key.push_str(k);
            }
            Step::Index(i) => key.push_str(&format!("[{i}]")),
        }
    }
    if key.is_empty() {
        key.push_str("(file)");
    }
    ConfigIssue { key, reason }
}

/// Removes the value at `path`; false when there is none.
fn remove(table: &mut Table, path: &[Step]) -> bool {
    let Some((Step::Key(last), parents)) = path.split_last() else {
        return false;
    };
    let mut here = table;
    let mut steps = parents.iter().peekable();
    while let Some(step) = steps.next() {
        let Step::Key(k) = step else {
            return false;
        };
        let next = match (here.get_mut(k), steps.peek()) {
            (Some(Value::Array(items)), Some(Step::Index(i))) => {
                steps.next();
                items.get_mut(*i)
            }
            (v, _) => v,
        };
        here = match next {
            Some(Value::Table(t)) => t,
            _ => return false,
        };
    }
    here.remove(last).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn issues(text: &str) -> Vec<String> {
        let table: Table = toml::from_str(text).unwrap();
        deserialize_all::<RawConfig>(table)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_unknown_key_and_wrong_type_is_named() {
        let got = issues(
            r#"
[dhcp]
bogus = 1
port = "sixty-seven"
[tftp]
blocksize = 8
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.10 - 192.0.2.20"]
[[subnet]]
network = "198.51.100.0/24"
lease_tme = 60
"#,
        );
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            got[0].starts_with("dhcp.bogus: unknown field `bogus`"),
            "{got:?}"
        );
        assert!(got[1].starts_with("dhcp.port: invalid type"), "{got:?}");
        assert!(
            got[2].starts_with("subnet[1].lease_tme: unknown field"),
            "{got:?}"
        );
        assert!(
            got[3].starts_with("tftp.blocksize: unknown field"),
            "{got:?}"
        );
    }

    #[test]
    fn a_near_miss_gets_a_suggestion_and_a_stranger_none() {
        let got = issues(
            "[dhcp]\nportt = 67\nxyz = 1\n[tftp]\nrot = \"/x\"\n[[subnet]]\nnetwork = \"192.0.2.0/24\"\nlease_tme = 5\n",
        );
        let of = |key: &str| got.iter().find(|g| g.starts_with(key)).unwrap().clone();
        assert!(
            of("dhcp.portt").ends_with("; did you mean `port`?"),
            "{got:?}"
        );
        assert!(
            of("tftp.rot").ends_with("; did you mean `root`?"),
            "{got:?}"
        );
        assert!(
            of("subnet[0].lease_tme").ends_with("; did you mean `lease_time`?"),
            "{got:?}"
        );
        assert!(!of("dhcp.xyz").contains("did you mean"), "{got:?}");
        assert_eq!(edit_distance("lease_tme", "lease_time"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_valid_table_deserializes() {
        let table: Table = toml::from_str(crate::config::DEFAULT_CONFIG_TOML).unwrap();
        assert!(deserialize_all::<RawConfig>(table).is_ok());
    }

    #[test]
    fn a_wrong_type_deep_in_an_array_is_named_by_its_whole_path() {
        let got = issues(
            "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.10 - 192.0.2.20\"]\n\
             [[subnet]]\nnetwork = \"198.51.100.0/24\"\nlease_time = \"long\"\n\
             [owner.ironic]\nurl = 5\n",
        );
        assert!(
            got.iter()
                .any(|g| g.starts_with("subnet[1].lease_time: invalid type")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|g| g.starts_with("owner.ironic.url: invalid type")),
            "{got:?}"
        );
    }

    #[test]
    fn what_is_left_after_the_bad_keys_is_returned() {
        let table: Table =
            toml::from_str("[dhcp]\nportt = 67\nmax_offers = \"many\"\nport = 6767\n").unwrap();
        let (raw, issues) = deserialize_lenient::<RawConfig>(table);
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert!(raw.is_some(), "the rest deserializes");
        // An array element is no key to remove (the next would take its index):
        // nothing is returned.
        let table: Table = toml::from_str("[[subnet]]\nranges = [7]\n").unwrap();
        let (raw, issues) = deserialize_lenient::<RawConfig>(table);
        assert!(raw.is_none(), "{issues:?}");
        assert!(
            issues[0].key.starts_with("subnet[0].ranges[0]"),
            "{issues:?}"
        );
    }
}
