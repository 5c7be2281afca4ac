//! Overrides on top of the config file: `--set dhcp.port=6767` flags and
//! `SHARDBOOT_DHCP__PORT=6767` environment variables (double underscore between key
//! segments, since keys themselves contain single underscores). A numeric segment indexes
//! an array of tables: `subnet.0.lease_time`.

use toml::{Table, Value};

/// An override that cannot be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OverrideError {
    /// The key is empty or has an empty segment.
    #[error("override key {0:?} is malformed: use dotted keys such as dhcp.port")]
    BadKey(String),
    /// A segment walks into something that is not a table or array.
    #[error("override key {key}: {segment:?} does not name a table or array element")]
    NotContainer {
        /// The whole key.
        key: String,
        /// The segment that failed.
        segment: String,
    },
    /// A flag lacks its `=`.
    #[error("override {0:?} must look like key=value")]
    MissingEquals(String),
}

/// Parses a `key=value` flag.
pub fn parse_flag(flag: &str) -> Result<(String, String), OverrideError> {
    let (k, v) = flag
        .split_once('=')
        .ok_or_else(|| OverrideError::MissingEquals(flag.to_string()))?;
    Ok((k.trim().to_string(), v.to_string()))
}

/// Variables that are not config keys: the config file path and the log filter.
/// Variables the CLI reads itself: `SHARDBOOT_CONFIG`, `SHARDBOOT_LOG`, and the
/// `leases`/`hosts` client's `SHARDBOOT_SERVER` and `SHARDBOOT_TOKEN_FILE`.
const NOT_KEYS: [&str; 4] = ["CONFIG", "LOG", "SERVER", "TOKEN_FILE"];

/// Collects `SHARDBOOT_*` variables (except `NOT_KEYS`)
/// as dotted overrides, sorted so the result does not depend on environment order.
pub fn apply_env_overrides(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("SHARDBOOT_")?;
            if NOT_KEYS.contains(&rest) || rest.is_empty() {
                return None;
            }
            Some((rest.to_ascii_lowercase().replace("__", "."), v))
        })
        .collect();
    out.sort();
    out
}

/// Sets `key` (dotted) in `table` to `value`, parsed as a TOML value when it is one
/// (`true`, `6767`, `["eth0"]`) and as a plain string otherwise.
pub fn apply_override(table: &mut Table, key: &str, value: &str) -> Result<(), OverrideError> {
    let segments: Vec<&str> = key.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(OverrideError::BadKey(key.to_string()));
    }
    let parsed = parse_value(value);
    let (last, parents) = segments.split_last().expect("split on a non-empty key");
    let not_container = |segment: &str| OverrideError::NotContainer {
        key: key.to_string(),
        segment: segment.to_string(),
    };

    let mut root = Value::Table(std::mem::take(table));
    let result = set_path(&mut root, parents, last, parsed).map_err(|seg| not_container(&seg));
    if let Value::Table(t) = root {
        *table = t;
    }
    result
}

/// Walks `parents` from `root` (creating missing tables) and sets `last`; on failure
/// returns the segment that could not be walked.
fn set_path(root: &mut Value, parents: &[&str], last: &str, value: Value) -> Result<(), String> {
    let mut cursor = root;
    for seg in parents {
        cursor = step(cursor, seg).ok_or_else(|| (*seg).to_string())?;
    }
    match cursor {
        Value::Table(t) => {
            t.insert(last.to_string(), value);
            Ok(())
        }
        Value::Array(a) => {
            let slot = last
                .parse::<usize>()
                .ok()
                .and_then(|idx| a.get_mut(idx))
                .ok_or_else(|| last.to_string())?;
            *slot = value;
            Ok(())
        }
        _ => Err(last.to_string()),
    }
}

fn step<'a>(v: &'a mut Value, seg: &str) -> Option<&'a mut Value> {
    match v {
        Value::Table(t) => Some(
            t.entry(seg.to_string())
                .or_insert_with(|| Value::Table(Table::new())),
        ),
        Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

fn parse_value(value: &str) -> Value {
    let doc = format!("v = {value}");
    match toml::from_str::<Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| Value::String(value.to_string())),
        Err(_) => Value::String(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_become_dotted_keys() {
        let vars = vec![
            ("SHARDBOOT_DHCP__PORT".to_string(), "6767".to_string()),
            ("SHARDBOOT_CONFIG".to_string(), "/x".to_string()),
            ("SHARDBOOT_LOG".to_string(), "debug".to_string()),
            ("SHARDBOOT_SERVER".to_string(), "http://x".to_string()),
            ("SHARDBOOT_TOKEN_FILE".to_string(), "/t".to_string()),
            ("SHARDBOOT_STATE_DIR".to_string(), "/s".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ];
        assert_eq!(
            apply_env_overrides(vars.into_iter()),
            vec![
                ("dhcp.port".to_string(), "6767".to_string()),
                ("state_dir".to_string(), "/s".to_string())
            ]
        );
    }

    #[test]
    fn values_are_typed_when_they_parse() {
        let mut t: Table = toml::from_str("[dhcp]\nport = 67\n[[subnet]]\nnetwork='a'\n").unwrap();
        apply_override(&mut t, "dhcp.port", "6767").unwrap();
        apply_override(&mut t, "dhcp.interfaces", r#"["eth0", "eth1"]"#).unwrap();
        apply_override(&mut t, "subnet.0.network", "192.0.2.0/24").unwrap();
        apply_override(&mut t, "state_dir", "/var/lib/x").unwrap();
        assert_eq!(t["dhcp"]["port"].as_integer(), Some(6767));
        assert_eq!(t["dhcp"]["interfaces"].as_array().unwrap().len(), 2);
        assert_eq!(t["subnet"][0]["network"].as_str(), Some("192.0.2.0/24"));
        assert_eq!(t["state_dir"].as_str(), Some("/var/lib/x"));
    }

    #[test]
    fn bad_keys_are_errors() {
        let mut t: Table = toml::from_str("port = 1\n").unwrap();
        assert!(apply_override(&mut t, "a..b", "1").is_err());
        assert!(apply_override(&mut t, "port.x", "1").is_err());
        assert_eq!(
            t["port"].as_integer(),
            Some(1),
            "failed override keeps the table"
        );
    }
}
