//! Structural checks of a config table: unknown keys and values of the wrong type, every
//! one of them reported with its dotted key, not only the first.
//!
//! serde stops at the first error, so the table is deserialized again after removing
//! each offending key. toml's error carries the byte span of the offending text; the
//! key is recovered from the table headers above that line of the (re-serialized) text.

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
pub(super) fn deserialize_all<T: DeserializeOwned>(
    mut table: Table,
) -> Result<T, Vec<ConfigIssue>> {
    let mut issues = Vec::new();
    loop {
        let text = match toml::to_string(&table) {
            Ok(t) => t,
            Err(e) => {
                issues.push(issue(&[], e.to_string()));
                return Err(issues);
            }
        };
        let err = match toml::from_str::<T>(&text) {
            Ok(v) if issues.is_empty() => return Ok(v),
            Ok(_) => return Err(issues),
            Err(e) => e,
        };
        let path = err
            .span()
            .and_then(|span| path_at(&text, span.start))
            .unwrap_or_default();
        issues.push(issue(&path, with_suggestion(err.message())));
        // Only a key's own line can be removed to look further; an error about a whole
        // table (a missing field) ends the search.
        let removable = matches!(path.last(), Some(Step::Key(_)));
        if !removable || issues.len() >= MAX_ISSUES || !remove(&mut table, &path) {
            return Err(issues);
        }
    }
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

/// The key path of the text at byte `offset` of `text`, as `toml::to_string` writes it:
/// `[a.b]` and `[[a]]` headers, then `key = value` lines.
fn path_at(text: &str, offset: usize) -> Option<Vec<Step>> {
    let mut header: Vec<Step> = Vec::new();
    let mut array_counts: std::collections::HashMap<String, usize> = Default::default();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.len();
        let trimmed = line.trim();
        let on_line = offset >= start && offset < end;
        if let Some(name) = trimmed
            .strip_prefix("[[")
            .and_then(|l| l.strip_suffix("]]"))
        {
            let n = array_counts.entry(name.to_string()).or_default();
            header = dotted(name);
            header.push(Step::Index(*n));
            *n += 1;
        } else if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            header = header_in_arrays(name, &array_counts);
        } else if on_line {
            let key = trimmed.split_once('=')?.0.trim().trim_matches('"');
            let mut path = header;
            path.push(Step::Key(key.to_string()));
            return Some(path);
        }
        if on_line {
            return Some(header);
        }
        start = end;
    }
    None
}

/// `a.b` as steps; a `[a.b]` header below `[[a]]` belongs to a's latest element.
fn header_in_arrays(name: &str, arrays: &std::collections::HashMap<String, usize>) -> Vec<Step> {
    let mut path = Vec::new();
    let mut prefix = String::new();
    for part in name.split('.') {
        let part = part.trim().trim_matches('"');
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(part);
        path.push(Step::Key(part.to_string()));
        if let Some(n) = arrays.get(&prefix) {
            path.push(Step::Index(n - 1));
        }
    }
    path
}

fn dotted(name: &str) -> Vec<Step> {
    name.split('.')
        .map(|p| Step::Key(p.trim().trim_matches('"').to_string()))
        .collect()
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
    fn nested_tables_under_array_elements_are_found() {
        let text = "[[member]]\nname = \"a\"\n[[member]]\nname = \"b\"\n";
        let path = path_at(text, text.rfind("name").unwrap()).unwrap();
        assert_eq!(
            path,
            vec![
                Step::Key("member".into()),
                Step::Index(1),
                Step::Key("name".into())
            ]
        );
        let arrays = [("owner".to_string(), 1usize)].into_iter().collect();
        assert_eq!(
            header_in_arrays("owner.ironic", &arrays),
            vec![
                Step::Key("owner".into()),
                Step::Index(0),
                Step::Key("ironic".into())
            ]
        );
    }
}
