//! `owner.members_file`: the member list of `owner.members = "file"`, a TOML file of
//! `[[member]]` tables only, read at start and re-read while running. Each entry is
//! checked exactly as the config's own `[[member]]` entries are.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::issues::{ConfigIssue, Issues};
use super::member::{self, Member, RawMember};

/// Larger than this is no member list (and not read into memory).
const MAX_BYTES: u64 = 1 << 20;

/// The members file as written: nothing but `[[member]]` tables.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMembersFile {
    #[serde(default)]
    member: Vec<RawMember>,
}

/// Why a members file gives no member list. Every variant names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembersFileError {
    /// The file cannot be read (missing, unreadable, too large).
    #[error("members file {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Not TOML.
    #[error("members file {}: {}{reason}", path.display(), line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line the TOML error points at, when it points at one.
        line: Option<usize>,
        /// toml's message.
        reason: String,
    },
    /// TOML, but not a valid member list; every problem with its key (`member[1].name`).
    #[error("members file {}: {}", path.display(), issues.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The problems.
        issues: Vec<ConfigIssue>,
    },
}

/// Reads and validates the members file at `path`.
pub fn read_members_file(path: &Path) -> Result<Vec<Member>, MembersFileError> {
    let read = |reason: String| MembersFileError::Read {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read(e.to_string()))?;
    let mut text = String::new();
    use std::io::Read as _;
    file.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| read(e.to_string()))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(read(format!("larger than {MAX_BYTES} bytes")));
    }
    parse_members_file(path, &text)
}

/// Validates the text of a members file (`path` only names it in errors). An empty list
/// is refused: a file truncated while it is rewritten must not remove every member.
pub fn parse_members_file(path: &Path, text: &str) -> Result<Vec<Member>, MembersFileError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| MembersFileError::Syntax {
        path: path.to_path_buf(),
        line: e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1),
        reason: e.message().trim_end().replace('\n', "; "),
    })?;
    let invalid = |issues| MembersFileError::Invalid {
        path: path.to_path_buf(),
        issues,
    };
    let raw: RawMembersFile = super::structure::deserialize_all(table).map_err(invalid)?;
    let mut issues = Issues::default();
    if raw.member.is_empty() {
        issues.add("member", "the file lists no [[member]]");
    }
    let members = member::validate_all(raw.member, &mut issues);
    issues.finish().map_err(invalid)?;
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Member>, String> {
        parse_members_file(Path::new("/etc/shardboot/members.toml"), text)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn members_are_read_like_the_configs_own() {
        let members = parse(
            "[[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1:8080/\"\n\
             conductor = \"192.0.2.1\"\n[[member]]\nname = \"b\"\nhttp_url = \"http://192.0.2.2:8080\"\n",
        )
        .unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].http_url, "http://192.0.2.1:8080");
        assert_eq!(members[0].conductor.as_deref(), Some("192.0.2.1"));
        assert_eq!(members[1].name, "b");
    }

    #[test]
    fn a_bad_file_names_itself_and_the_key() {
        assert_eq!(
            parse("[[member]]\nname = \"a b\"\n").unwrap_err(),
            "members file /etc/shardboot/members.toml: member[0].name: must be 1-63 letters, \
             digits, '-', '_' or '.'; member[0].http_url: is required"
        );
        let dup = "[[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1\"\n";
        assert_eq!(
            parse(&format!("{dup}{dup}")).unwrap_err(),
            "members file /etc/shardboot/members.toml: member[1].name: duplicates another member named a"
        );
        let got = parse("[[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1\"\nport = 1\n")
            .unwrap_err();
        assert!(
            got.starts_with(
                "members file /etc/shardboot/members.toml: member[0].port: unknown field `port`"
            ),
            "{got}"
        );
        let got = parse("[owner]\nself = \"a\"\n").unwrap_err();
        assert!(got.contains(": owner: unknown field `owner`"), "{got}");
        assert_eq!(
            parse("# nothing yet\n").unwrap_err(),
            "members file /etc/shardboot/members.toml: member: the file lists no [[member]]"
        );
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let got = parse("[[member]]\nname = \"a\"\nhttp_url = http://x\n").unwrap_err();
        assert!(
            got.starts_with("members file /etc/shardboot/members.toml: line 3: "),
            "{got}"
        );
        assert!(!got.contains('\n'), "{got}");
    }

    #[test]
    fn a_missing_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("members.toml");
        let err = read_members_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("members file {}: ", path.display())),
            "{err}"
        );
        std::fs::write(
            &path,
            "[[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1\"\n",
        )
        .unwrap();
        assert_eq!(read_members_file(&path).unwrap()[0].name, "a");
    }
}
