//! `check-config --explain`: the effective configuration, key by key, each with the layer
//! that gave it its value: the file, the built-in default, an ironic-image variable,
//! a `SHARDBOOT_*` variable or a flag, in the order the loader applies them.
//!
//! The layers are applied again here as [`super::Config::load`] applies them; the last
//! override whose key covers a value names its source. Keys that no layer sets are
//! listed too, found by asking the raw serde structs which fields they accept (the
//! "expected one of" of an unknown-key error), so the listing follows the structs
//! without a second list of keys to keep in step. Their value is the code's default
//! (`code_defaults.toml`, checked against the code by a test) where it is one fixed
//! value; otherwise they say that they are not set.
//!
//! Secrets never appear: keys that hold one are masked, and so is the password of any
//! URL.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::ironic_env::{self, HostFacts};
use super::{apply_override, ConfigError, RawConfig, DEFAULT_CONFIG_TOML};

/// Where the first layer of the configuration comes from.
#[derive(Debug, Clone, Copy)]
pub enum ExplainBase<'a> {
    /// A TOML file (`--config`).
    File(&'a Path),
    /// The built-in default (no `--config`).
    BuiltIn,
    /// ironic-image's dnsmasq variables (`--env ironic-image`).
    IronicImage {
        /// The process environment.
        vars: &'a BTreeMap<String, String>,
        /// What the host looks like.
        host: &'a HostFacts,
    },
}

/// Where one value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The config file.
    File(PathBuf),
    /// The built-in default config.
    BuiltIn,
    /// An ironic-image variable (`--env ironic-image`).
    IronicVar(&'static str),
    /// `--env ironic-image` itself: what ironic-image's dnsmasq.conf fixes.
    IronicImage,
    /// A `SHARDBOOT_*` variable.
    Env(String),
    /// A command-line flag (`--set`, `--state-dir`, `--json-logs`).
    Flag(String),
    /// No layer sets the key; its value is the code's fixed default.
    Default,
    /// No layer sets the key and it has no fixed default: off until set, or derived
    /// from other keys.
    Unset,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::BuiltIn => f.write_str("built-in default config"),
            Source::IronicVar(v) => write!(f, "ironic-image variable {v}"),
            Source::IronicImage => f.write_str("--env ironic-image (as ironic-image fixes it)"),
            Source::Env(v) => write!(f, "environment {v}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("not set: off, or derived from other keys"),
        }
    }
}

/// One override on top of the first layer, in the order it is applied.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Dotted key (`dhcp.port`, `subnet.0.lease_time`).
    pub key: String,
    /// The value as written.
    pub value: String,
    /// [`Source::Env`] or [`Source::Flag`].
    pub source: Source,
}

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// The key as issues name it: `subnet[0].lease_time`.
    pub key: String,
    /// Its value as TOML, secrets masked; `None` when no layer sets it.
    pub value: Option<String>,
    /// Where the value came from.
    pub source: Source,
}

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} = {v}  # {}", self.key, self.source),
            None => write!(f, "# {}: {}", self.key, self.source),
        }
    }
}

/// The `SHARDBOOT_*` variable that sets `key` ([`super::apply_env_overrides`] reversed).
pub fn env_var_name(key: &str) -> String {
    format!("SHARDBOOT_{}", key.to_ascii_uppercase().replace('.', "__"))
}

/// The fixed defaults of keys that have one (a test proves them the code's).
const CODE_DEFAULTS: &str = include_str!("code_defaults.toml");

/// What stands in for a secret.
const MASK: &str = "\"********\"";

/// A key that is not accepted anywhere, to learn which keys are.
const PROBE: &str = "zz_explain_probe";

/// Every key of the configuration `base` and `layers` give, with its source. The
/// configuration is assumed to have loaded (its errors are reported by the loader).
pub fn explain(base: ExplainBase<'_>, layers: &[Layer]) -> Result<Vec<Explained>, ConfigError> {
    let (mut table, base_source) = match base {
        ExplainBase::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            (
                parse(&text)?,
                BaseSource::Uniform(Source::File(path.to_path_buf())),
            )
        }
        ExplainBase::BuiltIn => (
            parse(DEFAULT_CONFIG_TOML)?,
            BaseSource::Uniform(Source::BuiltIn),
        ),
        ExplainBase::IronicImage { vars, host } => {
            let derived = ironic_env::derive(vars, host).map_err(ConfigError::Invalid)?;
            (derived.table.clone(), BaseSource::Ironic(derived))
        }
    };
    for layer in layers {
        apply_override(&mut table, &layer.key, &layer.value)?;
    }
    let mut out = Vec::new();
    let defaults = parse(CODE_DEFAULTS)?;
    let walk = Walk {
        full: &table,
        base: &base_source,
        layers,
        defaults: &defaults,
    };
    walk.node(&mut Vec::new(), Some(&table), &mut out);
    Ok(out)
}

fn parse(text: &str) -> Result<Table, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))
}

/// The source of a value no override touched.
enum BaseSource {
    Uniform(Source),
    Ironic(ironic_env::Derived),
}

/// One step of a key: a table key or an array index.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The key as issues write it: `subnet[0].lease_time`.
fn display(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The key as overrides write it: `subnet.0.lease_time`.
fn dotted(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => k.clone(),
            Seg::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

struct Walk<'a> {
    full: &'a Table,
    base: &'a BaseSource,
    layers: &'a [Layer],
    defaults: &'a Table,
}

impl Walk<'_> {
    /// Lists the keys of the table at `path` (`None`: no layer wrote it).
    fn node(&self, path: &mut Vec<Seg>, table: Option<&Table>, out: &mut Vec<Explained>) {
        let Some(fields) = self.fields_at(path) else {
            // A map of free keys (`tftp.aliases`), not a struct: its entries as they are.
            for (k, v) in table.into_iter().flatten() {
                path.push(Seg::Key(k.clone()));
                self.value(path, v, out);
                path.pop();
            }
            return;
        };
        for field in fields {
            path.push(Seg::Key(field.clone()));
            match table.and_then(|t| t.get(&field)) {
                Some(v) => self.value(path, v, out),
                None if self.fields_at(path).is_some() => self.node(path, None, out),
                None => out.push(match self.default_at(path) {
                    Some(v) => Explained {
                        key: display(path),
                        value: Some(masked(path, v)),
                        source: Source::Default,
                    },
                    None => Explained {
                        key: display(path),
                        value: None,
                        source: Source::Unset,
                    },
                }),
            }
            path.pop();
        }
    }

    fn value(&self, path: &mut Vec<Seg>, v: &Value, out: &mut Vec<Explained>) {
        match v {
            Value::Table(t) if !t.is_empty() => self.node(path, Some(t), out),
            Value::Array(items)
                if !items.is_empty() && items.iter().all(|i| matches!(i, Value::Table(_))) =>
            {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    self.node(path, item.as_table(), out);
                    path.pop();
                }
            }
            leaf => out.push(Explained {
                key: display(path),
                value: Some(masked(path, leaf)),
                source: self.source(path),
            }),
        }
    }

    /// The fixed default of the key at `path`; none for elements of table arrays.
    fn default_at(&self, path: &[Seg]) -> Option<&Value> {
        let (last, parents) = path.split_last()?;
        let mut table = self.defaults;
        for seg in parents {
            let Seg::Key(k) = seg else { return None };
            table = table.get(k)?.as_table()?;
        }
        let Seg::Key(k) = last else { return None };
        table.get(k)
    }

    /// The last override whose key covers `path`, else the first layer.
    fn source(&self, path: &[Seg]) -> Source {
        let key = dotted(path);
        let covers = |k: &str| key == k || key.starts_with(&format!("{k}."));
        if let Some(layer) = self.layers.iter().rev().find(|l| covers(&l.key)) {
            return layer.source.clone();
        }
        match self.base {
            BaseSource::Uniform(s) => s.clone(),
            BaseSource::Ironic(derived) => derived
                .var_for(&display(path))
                .map_or(Source::IronicImage, Source::IronicVar),
        }
    }

    /// The fields the raw struct at `path` accepts, in its order; `None` when `path`
    /// is not a struct (a value, an array, a map).
    fn fields_at(&self, path: &[Seg]) -> Option<Vec<String>> {
        let mut probe = self.full.clone();
        let mut key = dotted(path);
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(PROBE);
        apply_override(&mut probe, &key, "true").ok()?;
        let issues = super::structure::deserialize_all::<RawConfig>(probe).err()?;
        let mut at = path.to_vec();
        at.push(Seg::Key(PROBE.into()));
        let wanted = display(&at);
        let issue = issues.iter().find(|i| i.key == wanted)?;
        expected_fields(&issue.reason)
    }
}

/// The field names of serde's unknown-field message: "unknown field `x`, expected one
/// of `a`, `b`" (or "expected `a`", or "there are no fields").
pub(super) fn expected_fields(reason: &str) -> Option<Vec<String>> {
    let rest = reason.strip_prefix("unknown field `")?;
    let (_, rest) = rest.split_once('`')?;
    if rest.contains("there are no fields") {
        return Some(Vec::new());
    }
    let list = rest.split_once("expected")?.1;
    Some(
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// `v` as TOML, with a secret replaced: the value of a key that holds one outright, the
/// password of a URL anywhere.
fn masked(path: &[Seg], v: &Value) -> String {
    let name = path.iter().rev().find_map(|s| match s {
        Seg::Key(k) => Some(k.as_str()),
        Seg::Index(_) => None,
    });
    let secret = name.is_some_and(|n| {
        !n.ends_with("_file")
            && !n.ends_with("_dir")
            && ["password", "secret", "token"]
                .iter()
                .any(|w| n.contains(w))
    });
    if secret {
        return MASK.into();
    }
    match v {
        Value::String(s) => Value::String(url_password_masked(s)).to_string(),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| match i {
                    Value::String(s) => Value::String(url_password_masked(s)),
                    other => other.clone(),
                })
                .collect(),
        )
        .to_string(),
        other => other.to_string(),
    }
}

/// `scheme://user:password@host…` with the password masked; other text unchanged.
fn url_password_masked(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    // The authority ends at the first '/', '?' or '#'; its userinfo at the last '@'.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return s.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:********@{host}{tail}"),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(all: &'a [Explained], key: &str) -> &'a Explained {
        all.iter()
            .find(|e| e.key == key)
            .unwrap_or_else(|| panic!("no {key} in {all:#?}"))
    }

    fn file(text: &str) -> (tempfile::NamedTempFile, PathBuf) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        let p = f.path().to_path_buf();
        (f, p)
    }

    const FILE: &str = r#"
state_dir = "/srv/leases"
[dhcp]
port = 6767
[owner]
resolvers = ["ironic"]
[owner.ironic]
url = "http://ironic:6385"
username = "admin"
password = "hunter2"
[store]
shared = "mysql://shardboot:s3cret@db.example:3306/shardboot"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.10 - 192.0.2.20"]
"#;

    #[test]
    fn each_key_names_the_file_the_variable_the_flag_or_the_default() {
        let (_f, path) = file(FILE);
        let layers = [
            Layer {
                key: "dhcp.port".into(),
                value: "6868".into(),
                source: Source::Env(env_var_name("dhcp.port")),
            },
            Layer {
                key: "subnet.0.lease_time".into(),
                value: "600".into(),
                source: Source::Flag("--set".into()),
            },
        ];
        let all = explain(ExplainBase::File(&path), &layers).unwrap();
        let state = find(&all, "state_dir");
        assert_eq!(state.value.as_deref(), Some("\"/srv/leases\""));
        assert_eq!(state.source, Source::File(path.clone()));
        let port = find(&all, "dhcp.port");
        assert_eq!(port.value.as_deref(), Some("6868"));
        assert_eq!(port.source, Source::Env("SHARDBOOT_DHCP__PORT".into()));
        let lease = find(&all, "subnet[0].lease_time");
        assert_eq!(lease.source, Source::Flag("--set".into()));
        assert_eq!(
            find(&all, "subnet[0].network").source,
            Source::File(path.clone())
        );
        // Keys the file leaves out, also of sections it never opens: their fixed
        // default, or none.
        let root = find(&all, "tftp.root");
        assert_eq!(root.value.as_deref(), Some("\"/usr/lib/ipxe\""));
        assert_eq!(root.source, Source::Default);
        for key in ["dhcp.server_id", "boot.http_url", "ra.enabled"] {
            let e = find(&all, key);
            assert_eq!(
                (e.value.as_ref(), &e.source),
                (None, &Source::Unset),
                "{key}"
            );
        }
        assert_eq!(
            find(&all, "dhcp.port").to_string(),
            "dhcp.port = 6868  # environment SHARDBOOT_DHCP__PORT"
        );
        assert_eq!(
            find(&all, "tftp.root").to_string(),
            "tftp.root = \"/usr/lib/ipxe\"  # default"
        );
        assert_eq!(
            find(&all, "dhcp.server_id").to_string(),
            "# dhcp.server_id: not set: off, or derived from other keys"
        );
    }

    #[test]
    fn secrets_are_masked() {
        let (_f, path) = file(FILE);
        let all = explain(ExplainBase::File(&path), &[]).unwrap();
        let text: String = all.iter().map(|e| format!("{e}\n")).collect();
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "{text}"
        );
        assert_eq!(
            find(&all, "owner.ironic.password").value.as_deref(),
            Some(MASK)
        );
        assert_eq!(
            find(&all, "store.shared").value.as_deref(),
            Some("\"mysql://shardboot:********@db.example:3306/shardboot\"")
        );
        assert_eq!(
            find(&all, "owner.ironic.username").value.as_deref(),
            Some("\"admin\"")
        );
        assert_eq!(
            url_password_masked("postgres://u@h/db"),
            "postgres://u@h/db",
            "no password, nothing masked"
        );
        assert_eq!(
            url_password_masked("http://a:b@h/p@q"),
            "http://a:********@h/p@q"
        );
    }

    #[test]
    fn the_built_in_default_is_its_own_source() {
        let all = explain(ExplainBase::BuiltIn, &[]).unwrap();
        assert_eq!(find(&all, "dhcp.port").source, Source::BuiltIn);
        assert_eq!(find(&all, "subnet[0].router").source, Source::BuiltIn);
        assert_eq!(find(&all, "dhcp.proxy").source, Source::Default);
        assert_eq!(find(&all, "dhcp.proxy").value.as_deref(), Some("false"));
    }

    #[test]
    fn ironic_image_values_name_their_variable() {
        let vars: BTreeMap<String, String> = [
            ("PROVISIONING_IP", "192.0.2.1"),
            ("DHCP_RANGE", "192.0.2.100,192.0.2.150,255.255.255.0"),
            ("HTTP_PORT", "6180"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let host = HostFacts::default();
        let layers = [Layer {
            key: "dhcp.port".into(),
            value: "6767".into(),
            source: Source::Flag("--set".into()),
        }];
        let all = explain(
            ExplainBase::IronicImage {
                vars: &vars,
                host: &host,
            },
            &layers,
        )
        .unwrap();
        assert_eq!(
            find(&all, "subnet[0].network").source,
            Source::IronicVar("DHCP_RANGE")
        );
        assert_eq!(
            find(&all, "boot.http_url").source,
            Source::IronicVar("HTTP_PORT")
        );
        assert_eq!(find(&all, "boot.bios").source, Source::IronicImage);
        assert_eq!(
            find(&all, "boot.tftp_server").source,
            Source::IronicVar("PROVISIONING_IP")
        );
        assert_eq!(find(&all, "dhcp.port").source, Source::Flag("--set".into()));
    }

    /// A configuration with every fixed default written out is the configuration
    /// without them: the defaults `--explain` shows are the code's.
    #[test]
    fn code_defaults_are_the_codes() {
        let minimal =
            "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.10 - 192.0.2.20\"]\n";
        let mut full = parse(CODE_DEFAULTS).unwrap();
        for (k, v) in parse(minimal).unwrap() {
            full.insert(k, v);
        }
        let full = toml::to_string(&full).unwrap();
        let config = |text: &str| {
            let c = super::super::Config::from_toml_with_overrides(text, &[])
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            format!("{c:#?}")
        };
        assert_eq!(
            config(minimal),
            config(minimal),
            "Debug output is deterministic"
        );
        let (without, with) = (config(minimal), config(&full));
        let diff: Vec<_> = without
            .lines()
            .zip(with.lines())
            .filter(|(a, b)| a != b)
            .take(10)
            .collect();
        assert!(
            diff.is_empty() && without.lines().count() == with.lines().count(),
            "code_defaults.toml differs from the code: {diff:#?}"
        );
    }

    #[test]
    fn serde_field_lists_are_read() {
        assert_eq!(
            expected_fields("unknown field `x`, expected one of `a`, `b_c`"),
            Some(vec!["a".to_string(), "b_c".to_string()])
        );
        assert_eq!(
            expected_fields("unknown field `x`, expected `a`"),
            Some(vec!["a".to_string()])
        );
        assert_eq!(
            expected_fields("unknown field `x`, there are no fields"),
            Some(vec![])
        );
        assert_eq!(expected_fields("invalid type: string"), None);
    }
}
