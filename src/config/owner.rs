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
}

/// Validates `[owner]` against the already validated `members` (`self` must name one).
pub(super) fn validate(raw: RawOwner, members: &[Member], issues: &mut Issues) -> OwnerSettings {
    if let Some(s) = &raw.self_name {
        if !members.iter().any(|m| &m.name == s) {
            issues.add("owner.self", format!("no [[member]] is named {s}"));
        }
    } else if !members.is_empty() {
        issues.add("owner.self", "is required when [[member]]s are listed");
    }
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
    if members.len() > 1 && raw.member_secret_file.is_none() && !insecure_members {
        issues.add(
            "owner.member_secret_file",
            "is required with two or more [[member]]s: members authenticate each other's \
             health answers with it (or set owner.insecure_members = true to trust any \
             answer from a member's address)",
        );
    }
    OwnerSettings {
        member_secret_file: raw.member_secret_file.map(PathBuf::from),
        insecure_members,
        ironic: raw.ironic.map(|r| ironic::validate(r, issues)),
        self_name: raw.self_name,
        resolvers,
        inventory: raw.inventory.map(PathBuf::from),
        fallback,
        chain_to,
    }
}
