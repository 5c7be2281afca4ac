//! `[owner]`: how the member that owns a machine is found (resolvers, in order), and
//! what a machine gets that no resolver knows or that another member owns.

use std::path::PathBuf;

use serde::Deserialize;

use super::ironic::{self, IronicSettings, RawIronic};
use super::issues::Issues;
use super::member::Member;
use crate::ipxe::is_safe_url;

/// `[owner]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(super) struct RawOwner {
    #[serde(rename = "self")]
    self_name: Option<String>,
    resolvers: Option<Vec<String>>,
    inventory: Option<String>,
    fallback: Option<String>,
    chain_to: Option<String>,
    ironic: Option<RawIronic>,
    member_secret_file: Option<String>,
    insecure_members: Option<bool>,
    members: Option<String>,
    conductor_group: Option<String>,
    member_http_url: Option<String>,
    member_conductor_url: Option<String>,
    members_refresh_secs: Option<u64>,
    replication_timeout_ms: Option<u64>,
    members_file: Option<String>,
    members_poll_ms: Option<u64>,
}

/// Where owner lookups go, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverKind {
    /// The Ironic API (`[owner.ironic]`).
    Ironic,
    /// The inventory file.
    Inventory,
    /// The RFC 3074 bucket over the members.
    Hash,
}

/// What an unknown machine gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// `exit`: the firmware tries its next boot device.
    Exit,
    /// Boot the first local disk.
    Sanboot,
    /// HTTP 404.
    NotFound,
    /// Chain this URL (e.g. Metal3's inspector.ipxe).
    Chain(String),
}

/// Where a machine owned by another member is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainTo {
    /// The owning member's `/v1/boot/{mac}/boot.ipxe`.
    Member,
    /// The owning conductor's per-node config directly.
    Conductor,
}

/// Where the member list comes from (`owner.members`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembersSource {
    /// The `[[member]]` list (`"static"`, the default).
    Static,
    /// Ironic's live conductors (`"ironic"`).
    Ironic(IronicMembers),
    /// The `[[member]]` tables of a file, re-read while running (`"file"`).
    File(FileMembers),
}

impl MembersSource {
    /// The name `/v1/members` and `check-config` show: `static`, `ironic` or `file`.
    pub fn name(&self) -> &'static str {
        match self {
            MembersSource::Static => "static",
            MembersSource::Ironic(_) => "ironic",
            MembersSource::File(_) => "file",
        }
    }

    /// Whether the list can change while running (so shares, probes and the DHCP
    /// responsibility must follow it, whatever its length at start).
    pub fn follows(&self) -> bool {
        !matches!(self, MembersSource::Static)
    }

    /// Whether the instance is one of several members: a static list of two or more,
    /// or a list that can grow while running.
    pub fn several(&self, static_members: usize) -> bool {
        self.follows() || static_members > 1
    }
}

/// Members from a file (`owner.members_file`), polled every `poll`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMembers {
    /// The file: `[[member]]` tables only, checked like the config's own.
    pub path: PathBuf,
    /// How often it is read again.
    pub poll: std::time::Duration,
}

/// Members from Ironic's `/v1/conductors`: one member beside each alive conductor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IronicMembers {
    /// This member's conductor, as Ironic names it (`owner.self`).
    pub self_conductor: String,
    /// Only conductors of this group (`owner.conductor_group`; one provisioning network
    /// per group).
    pub conductor_group: Option<String>,
    /// Each member's HTTP URL: `{host}` becomes the conductor's host (its name without
    /// the JSON-RPC port; IPv6 in brackets).
    pub http_url: String,
    /// Where each conductor serves `pxelinux.cfg/<mac-hyphen>`, by the same template.
    pub conductor_url: Option<String>,
    /// How often the conductor list is read.
    pub refresh: std::time::Duration,
}

/// `[owner]` after validation.
#[derive(Debug, Clone)]
pub struct OwnerSettings {
    /// This member's name; `None` when no members are configured.
    pub self_name: Option<String>,
    /// Resolvers, tried in order.
    pub resolvers: Vec<ResolverKind>,
    /// Inventory file: `"<mac>" = "<member or conductor>"` lines in TOML.
    pub inventory: Option<PathBuf>,
    /// For machines no resolver knows.
    pub fallback: Fallback,
    /// For machines owned elsewhere.
    pub chain_to: ChainTo,
    /// The Ironic API resolver's settings.
    pub ironic: Option<IronicSettings>,
    /// The secret members prove their health answers with (`owner::peer_auth`).
    pub member_secret_file: Option<PathBuf>,
    /// Several members without a secret, by explicit choice: peers' claims are taken
    /// unauthenticated (`check-config` and `serve` warn).
    pub insecure_members: bool,
    /// Where the member list comes from.
    pub members: MembersSource,
}

/// Validates a URL template of `owner.members = "ironic"`: it must name `{host}`, and
/// the URL it gives for any host must be one iPXE scripts can carry.
fn url_template(key: &str, value: Option<String>, issues: &mut Issues) -> Option<String> {
    let v = value?.trim_end_matches('/').to_string();
    let sample = v.replace("{host}", "192.0.2.1");
    if !v.contains("{host}") {
        issues.add(key, "must contain {host} (the conductor's host)");
    } else if !is_safe_url(&sample) {
        issues.add(
            key,
            "must be an http(s) URL template such as \"http://{host}:8080\"",
        );
    }
    Some(v)
}

/// Validates `[owner]` against the already validated `members` (`self` must name one).
/// `shared_store`: members then judge each other by heartbeat rows in the database, and
/// no member secret is needed (nothing is believed from a member's HTTP answer).
pub(super) fn validate(
    raw: RawOwner,
    members: &[Member],
    shared_store: bool,
    issues: &mut Issues,
) -> OwnerSettings {
    let (from_ironic, from_file) = match raw.members.as_deref() {
        None | Some("static") => (false, false),
        Some("ironic") => (true, false),
        Some("file") => (false, true),
        Some(_) => {
            issues.add(
                "owner.members",
                "must be \"static\", \"ironic\" or \"file\"",
            );
            (false, false)
        }
    };
    let mut self_name = raw.self_name.clone();
    if !from_file {
        for (key, set) in [
            ("members_file", raw.members_file.is_some()),
            ("members_poll_ms", raw.members_poll_ms.is_some()),
        ] {
            if set {
                issues.add(
                    format!("owner.{key}"),
                    "is used only with owner.members = \"file\"",
                );
            }
        }
    }
    let source = if from_ironic {
        ironic_members(&raw, members, &mut self_name, issues)
    } else if from_file {
        file_members(&raw, members, issues)
    } else {
        for key in [
            "conductor_group",
            "member_http_url",
            "member_conductor_url",
            "members_refresh_secs",
        ] {
            let set = match key {
                "conductor_group" => raw.conductor_group.is_some(),
                "member_http_url" => raw.member_http_url.is_some(),
                "member_conductor_url" => raw.member_conductor_url.is_some(),
                _ => raw.members_refresh_secs.is_some(),
            };
            if set {
                issues.add(
                    format!("owner.{key}"),
                    "is used only with owner.members = \"ironic\"",
                );
            }
        }
        if let Some(s) = &raw.self_name {
            if !members.iter().any(|m| &m.name == s) {
                issues.add("owner.self", format!("no [[member]] is named {s}"));
            }
        } else if !members.is_empty() {
            issues.add("owner.self", "is required when [[member]]s are listed");
        }
        MembersSource::Static
    };
    // Without an explicit list: Ironic, then the inventory, whichever are configured;
    // the hash ring only when neither is (a machine Ironic does not know gets the
    // fallback, not a member chosen at random whose conductor has no config for it).
    let mut default_resolvers = Vec::new();
    if raw.ironic.is_some() {
        default_resolvers.push("ironic".to_string());
    }
    if raw.inventory.is_some() {
        default_resolvers.push("inventory".to_string());
    }
    if default_resolvers.is_empty() {
        default_resolvers.push("hash".to_string());
    }
    let mut resolvers = Vec::new();
    for (i, r) in raw
        .resolvers
        .unwrap_or(default_resolvers)
        .iter()
        .enumerate()
    {
        let key = format!("owner.resolvers[{i}]");
        match r.as_str() {
            "inventory" if raw.inventory.is_none() => {
                issues.add(key, "inventory needs owner.inventory")
            }
            "inventory" => resolvers.push(ResolverKind::Inventory),
            "ironic" if raw.ironic.is_none() => {
                issues.add(key, "ironic needs an [owner.ironic] section")
            }
            "ironic" => resolvers.push(ResolverKind::Ironic),
            "hash" => resolvers.push(ResolverKind::Hash),
            _ => issues.add(key, "must be \"ironic\", \"inventory\" or \"hash\""),
        }
    }
    let fallback = match raw.fallback.as_deref().unwrap_or("exit") {
        "exit" => Fallback::Exit,
        "sanboot" => Fallback::Sanboot,
        "404" => Fallback::NotFound,
        u if is_safe_url(u) => Fallback::Chain(u.to_string()),
        _ => {
            issues.add(
                "owner.fallback",
                "must be exit, sanboot, 404 or a safe http(s) URL",
            );
            Fallback::Exit
        }
    };
    let chain_to = match raw.chain_to.as_deref().unwrap_or("member") {
        "member" => ChainTo::Member,
        "conductor" => ChainTo::Conductor,
        _ => {
            issues.add("owner.chain_to", "must be \"member\" or \"conductor\"");
            ChainTo::Member
        }
    };
    let insecure_members = raw.insecure_members.unwrap_or(false);
    if (members.len() > 1 || from_ironic || from_file)
        && raw.member_secret_file.is_none()
        && !insecure_members
        && !shared_store
    {
        issues.add(
            "owner.member_secret_file",
            "is required with two or more [[member]]s or owner.members = \"ironic\" or \"file\": \
             members authenticate each other's health answers with it (or set \
             owner.insecure_members = true to trust any answer from a member's address)",
        );
    }
    if raw.replication_timeout_ms.is_some() {
        issues.add(
            "owner.replication_timeout_ms",
            "was removed with lease replication between members: members agree through \
             the shared lease store (store.shared) now; delete this key",
        );
    }
    OwnerSettings {
        member_secret_file: raw.member_secret_file.map(PathBuf::from),
        insecure_members,
        ironic: raw.ironic.map(|r| ironic::validate(r, issues)),
        self_name,
        members: source,
        resolvers,
        inventory: raw.inventory.map(PathBuf::from),
        fallback,
        chain_to,
    }
}

/// `owner.members = "file"`: the file and this member's name, no `[[member]]` and no
/// key of the Ironic source. `owner.self` need not be in the file: a member the file
/// does not list hands out no fresh address and is responsible for nothing, as with
/// Ironic.
fn file_members(raw: &RawOwner, members: &[Member], issues: &mut Issues) -> MembersSource {
    if !members.is_empty() {
        issues.add(
            "owner.members",
            "\"file\" takes the members from owner.members_file; remove the [[member]] entries",
        );
    }
    for (key, set) in [
        ("conductor_group", raw.conductor_group.is_some()),
        ("member_http_url", raw.member_http_url.is_some()),
        ("member_conductor_url", raw.member_conductor_url.is_some()),
        ("members_refresh_secs", raw.members_refresh_secs.is_some()),
    ] {
        if set {
            issues.add(
                format!("owner.{key}"),
                "is used only with owner.members = \"ironic\"",
            );
        }
    }
    match raw.self_name.as_deref() {
        None => issues.add(
            "owner.self",
            "is required with owner.members = \"file\": this member's name in the file",
        ),
        Some(s) if !super::member::is_member_name(s) => issues.add(
            "owner.self",
            "must be a member name (1-63 letters, digits, '-', '_' or '.')",
        ),
        Some(_) => {}
    }
    let path = match raw.members_file.as_deref() {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            issues.add(
                "owner.members_file",
                "is required with owner.members = \"file\" (a file of [[member]] tables)",
            );
            PathBuf::new()
        }
    };
    let poll = issues.in_range(
        "owner.members_poll_ms",
        raw.members_poll_ms.unwrap_or(1000),
        100,
        600_000,
    );
    MembersSource::File(FileMembers {
        path,
        poll: std::time::Duration::from_millis(poll),
    })
}

/// `owner.members = "ironic"`: the keys it needs and the ones it rules out. Sets
/// `self_name` to the member name of this member's conductor.
fn ironic_members(
    raw: &RawOwner,
    members: &[Member],
    self_name: &mut Option<String>,
    issues: &mut Issues,
) -> MembersSource {
    if raw.ironic.is_none() {
        issues.add(
            "owner.members",
            "\"ironic\" needs an [owner.ironic] section",
        );
    }
    if !members.is_empty() {
        issues.add(
            "owner.members",
            "\"ironic\" takes the members from Ironic's conductors; remove the [[member]] entries",
        );
    }
    let self_conductor = raw.self_name.clone().unwrap_or_default();
    match super::member::member_name_for_conductor(&self_conductor) {
        Some(name) => *self_name = Some(name),
        None if raw.self_name.is_none() => issues.add(
            "owner.self",
            "is required with owner.members = \"ironic\": this member's conductor as Ironic names it (e.g. 172.22.0.2 or 172.22.0.2:8090)",
        ),
        None => issues.add("owner.self", "must be a conductor name as Ironic reports it (host, host:port, [v6]:port)"),
    }
    let http_url = url_template("owner.member_http_url", raw.member_http_url.clone(), issues);
    if http_url.is_none() {
        issues.add(
            "owner.member_http_url",
            "is required with owner.members = \"ironic\" (e.g. \"http://{host}:8080\")",
        );
    }
    let conductor_url = url_template(
        "owner.member_conductor_url",
        raw.member_conductor_url.clone(),
        issues,
    );
    if let Some(g) = &raw.conductor_group {
        if g.len() > 255
            || !g
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            issues.add(
                "owner.conductor_group",
                "must be a conductor group name (letters, digits, '-', '_', '.')",
            );
        }
    }
    let refresh = issues.in_range(
        "owner.members_refresh_secs",
        raw.members_refresh_secs.unwrap_or(10),
        1,
        3600,
    );
    MembersSource::Ironic(IronicMembers {
        self_conductor,
        conductor_group: raw.conductor_group.clone().filter(|g| !g.is_empty()),
        http_url: http_url.unwrap_or_default(),
        conductor_url,
        refresh: std::time::Duration::from_secs(refresh),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, MembersSource};

    fn issues(text: &str) -> Vec<String> {
        match Config::from_toml_with_overrides(text, &[]) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid(v)) => v.iter().map(|i| i.to_string()).collect(),
            Err(e) => panic!("{e}"),
        }
    }

    const IRONIC: &str = "[owner.ironic]\nurl = \"http://127.0.0.1:6385\"\n";

    #[test]
    fn members_from_ironic_need_their_keys_and_find_themselves_by_conductor() {
        let ok = format!(
            "[store]\nshared = \"mysql://db.test/shardboot\"\n\
             [owner]\nmembers = \"ironic\"\nself = \"172.22.0.3:8090\"\ninsecure_members = true\n\
             member_http_url = \"http://{{host}}:8080\"\nconductor_group = \"rack1\"\n{IRONIC}"
        );
        let c = Config::from_toml_with_overrides(&ok, &[]).unwrap();
        assert_eq!(c.owner.self_name.as_deref(), Some("172.22.0.3_8090"));
        let MembersSource::Ironic(m) = &c.owner.members else {
            panic!("static")
        };
        assert_eq!(m.self_conductor, "172.22.0.3:8090");
        assert_eq!(m.conductor_group.as_deref(), Some("rack1"));
        assert_eq!(m.refresh.as_secs(), 10);
        // Each missing or wrong piece is named.
        let got = issues(
            "[owner]\nmembers = \"ironic\"\nmember_http_url = \"http://example.org\"\n\
             [[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1:8080\"\n",
        );
        for want in [
            "owner.members: \"ironic\" needs an [owner.ironic] section",
            "owner.members: \"ironic\" takes the members from Ironic's conductors; remove the [[member]] entries",
            "owner.self: is required with owner.members = \"ironic\"",
            "owner.member_http_url: must contain {host}",
            "owner.member_secret_file: is required",
        ] {
            assert!(got.iter().any(|g| g.starts_with(want)), "{want} not in {got:?}");
        }
        // Keys of the Ironic source are refused with the static one.
        let got = issues("[owner]\nmember_http_url = \"http://{host}:8080\"\n");
        assert_eq!(
            got,
            ["owner.member_http_url: is used only with owner.members = \"ironic\""]
        );
        assert_eq!(
            issues("[owner]\nmembers = \"consul\"\n"),
            ["owner.members: must be \"static\", \"ironic\" or \"file\""]
        );
    }

    #[test]
    fn members_from_a_file_need_the_file_and_rule_out_the_list_and_ironic_keys() {
        let ok = "[store]\nshared = \"mysql://db.test/shardboot\"\n\
                  [owner]\nmembers = \"file\"\nself = \"a\"\ninsecure_members = true\n\
                  members_file = \"/etc/shardboot/members.toml\"\n";
        let c = Config::from_toml_with_overrides(ok, &[]).unwrap();
        let MembersSource::File(f) = &c.owner.members else {
            panic!("not file")
        };
        assert_eq!(f.path.to_str(), Some("/etc/shardboot/members.toml"));
        assert_eq!(f.poll.as_millis(), 1000);
        assert_eq!(c.owner.self_name.as_deref(), Some("a"));
        assert!(c.owner.members.follows());
        assert_eq!(c.owner.members.name(), "file");
        let got = issues(
            "[owner]\nmembers = \"file\"\nmember_http_url = \"http://{host}:8080\"\n\
             members_poll_ms = 5\n\
             [[member]]\nname = \"a\"\nhttp_url = \"http://192.0.2.1:8080\"\n",
        );
        for want in [
            "owner.members: \"file\" takes the members from owner.members_file; remove the [[member]] entries",
            "owner.member_http_url: is used only with owner.members = \"ironic\"",
            "owner.self: is required with owner.members = \"file\"",
            "owner.members_file: is required with owner.members = \"file\"",
            "owner.members_poll_ms: must be between 100 and 600000",
            "owner.member_secret_file: is required",
        ] {
            assert!(got.iter().any(|g| g.starts_with(want)), "{want} not in {got:?}");
        }
        // The file source's keys are refused with the others.
        assert_eq!(
            issues("[owner]\nmembers_poll_ms = 500\nmembers_file = \"/x\"\n"),
            [
                "owner.members_file: is used only with owner.members = \"file\"",
                "owner.members_poll_ms: is used only with owner.members = \"file\"",
            ]
        );
        assert_eq!(
            issues(&format!("{ok}self = \"a b\"\n").replace("self = \"a\"\n", "")),
            ["owner.self: must be a member name (1-63 letters, digits, '-', '_' or '.')"]
        );
    }
}
