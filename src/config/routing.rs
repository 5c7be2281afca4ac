//! `[http]`, `[owner]` and `[[member]]`: where the HTTP listener runs, which shardboot
//! members exist (one beside each Ironic conductor), and how a machine's owner is found.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::raw::{RawHttp, RawMember, RawOwner};
use crate::ipxe::{is_safe_url, is_script_safe};

/// `[http]` after validation.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Whether `serve` starts the HTTP listener.
    pub enabled: bool,
    /// Listening address.
    pub listen: SocketAddr,
    /// `chain --timeout` in rendered scripts, milliseconds.
    pub chain_timeout_ms: u32,
    /// How often a script retries its chain before giving up.
    pub chain_retries: u32,
    /// Bearer tokens of the operator API, one per line; `None`: the API is off.
    pub token_file: Option<PathBuf>,
    /// TLS: for the operator listener when there is one, else for the only listener.
    pub tls: Option<crate::http::tls::TlsFiles>,
    /// A separate listener for the operator API; the main one then serves boot routes.
    pub operator_listen: Option<SocketAddr>,
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
    pub ironic: Option<crate::owner::ironic::IronicSettings>,
}

type Add<'a> = &'a mut dyn FnMut(String, String);

pub(super) fn http(raw: RawHttp, add: Add<'_>) -> HttpSettings {
    let listen = raw.listen.as_deref().unwrap_or("0.0.0.0:8080");
    let listen = listen.parse().unwrap_or_else(|_| {
        add(
            "http.listen".into(),
            "must be an address:port such as 0.0.0.0:8080".into(),
        );
        SocketAddr::from(([0, 0, 0, 0], 8080))
    });
    let chain_timeout_ms = raw.chain_timeout_ms.unwrap_or(10_000);
    if !(100..=600_000).contains(&chain_timeout_ms) {
        add(
            "http.chain_timeout_ms".into(),
            "must be between 100 and 600000".into(),
        );
    }
    let chain_retries = raw.chain_retries.unwrap_or(5);
    if !(1..=1000).contains(&chain_retries) {
        add(
            "http.chain_retries".into(),
            "must be between 1 and 1000".into(),
        );
    }
    let token_file = raw.token_file.map(PathBuf::from);
    if let Some(f) = &token_file {
        if !f.is_file() {
            add(
                "http.token_file".into(),
                format!("{} is not a readable file", f.display()),
            );
        }
    }
    let mut file = |key: &str, v: Option<String>| {
        let p = v.map(PathBuf::from)?;
        if !p.is_file() {
            add(
                key.into(),
                format!("{} is not a readable file", p.display()),
            );
        }
        Some(p)
    };
    let cert = file("http.tls_cert", raw.tls_cert);
    let key = file("http.tls_key", raw.tls_key);
    let client_ca = file("http.client_ca", raw.client_ca);
    let tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(crate::http::tls::TlsFiles {
            cert,
            key,
            client_ca,
        }),
        (None, None) => {
            if client_ca.is_some() {
                add(
                    "http.client_ca".into(),
                    "needs http.tls_cert and http.tls_key".into(),
                );
            }
            None
        }
        (Some(_), None) => {
            add(
                "http.tls_key".into(),
                "is required with http.tls_cert".into(),
            );
            None
        }
        (None, Some(_)) => {
            add(
                "http.tls_cert".into(),
                "is required with http.tls_key".into(),
            );
            None
        }
    };
    let operator_listen = raw.operator_listen.as_deref().and_then(|v| {
        let parsed = v.parse::<SocketAddr>().ok();
        match parsed {
            None => add(
                "http.operator_listen".into(),
                "must be an address:port such as 127.0.0.1:8443".into(),
            ),
            Some(a) if a == listen => add(
                "http.operator_listen".into(),
                "must differ from http.listen".into(),
            ),
            Some(_) => {}
        }
        parsed
    });
    HttpSettings {
        enabled: raw.enabled.unwrap_or(true),
        listen,
        chain_timeout_ms,
        chain_retries,
        token_file,
        tls,
        operator_listen,
    }
}

fn url(key: String, value: Option<String>, add: Add<'_>) -> Option<String> {
    let v = value?.trim_end_matches('/').to_string();
    if !is_safe_url(&v) {
        add(
            key,
            "must be an http(s) URL of letters, digits and -._~:/?=%@+, only".into(),
        );
    }
    Some(v)
}

pub(super) fn members(raw: Vec<RawMember>, add: Add<'_>) -> Vec<Member> {
    let mut out: Vec<Member> = Vec::new();
    for (i, m) in raw.into_iter().enumerate() {
        let k = |f: &str| format!("member[{i}].{f}");
        let name = m.name.unwrap_or_default();
        if !is_script_safe(&name)
            || name.len() > 63
            || name.contains(['/', ':', '?', '%', '@', '+', ',', '='])
        {
            add(
                k("name"),
                "must be 1-63 letters, digits, '-', '_' or '.'".into(),
            );
        }
        if out.iter().any(|o| o.name == name) {
            add(k("name"), format!("duplicates another member named {name}"));
        }
        let http_url = url(k("http_url"), m.http_url, add);
        if http_url.is_none() {
            add(k("http_url"), "is required".into());
        }
        if let Some(c) = &m.conductor {
            if !is_script_safe(c) {
                add(
                    k("conductor"),
                    "must be a host name as Ironic reports it".into(),
                );
            }
        }
        out.push(Member {
            name,
            http_url: http_url.unwrap_or_default(),
            conductor: m.conductor,
            conductor_url: url(k("conductor_url"), m.conductor_url, add),
        });
    }
    out
}

pub(super) fn owner(raw: RawOwner, members: &[Member], add: Add<'_>) -> OwnerSettings {
    if let Some(s) = &raw.self_name {
        if !members.iter().any(|m| &m.name == s) {
            add("owner.self".into(), format!("no [[member]] is named {s}"));
        }
    } else if !members.is_empty() {
        add(
            "owner.self".into(),
            "is required when [[member]]s are listed".into(),
        );
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
        match r.as_str() {
            "inventory" if raw.inventory.is_none() => add(
                format!("owner.resolvers[{i}]"),
                "inventory needs owner.inventory".into(),
            ),
            "inventory" => resolvers.push(ResolverKind::Inventory),
            "ironic" if raw.ironic.is_none() => add(
                format!("owner.resolvers[{i}]"),
                "ironic needs an [owner.ironic] section".into(),
            ),
            "ironic" => resolvers.push(ResolverKind::Ironic),
            "hash" => resolvers.push(ResolverKind::Hash),
            _ => add(
                format!("owner.resolvers[{i}]"),
                "must be \"ironic\", \"inventory\" or \"hash\"".into(),
            ),
        }
    }
    let fallback = match raw.fallback.as_deref().unwrap_or("exit") {
        "exit" => Fallback::Exit,
        "sanboot" => Fallback::Sanboot,
        "404" => Fallback::NotFound,
        u if is_safe_url(u) => Fallback::Chain(u.to_string()),
        _ => {
            add(
                "owner.fallback".into(),
                "must be exit, sanboot, 404 or a safe http(s) URL".into(),
            );
            Fallback::Exit
        }
    };
    let chain_to = match raw.chain_to.as_deref().unwrap_or("member") {
        "member" => ChainTo::Member,
        "conductor" => ChainTo::Conductor,
        _ => {
            add(
                "owner.chain_to".into(),
                "must be \"member\" or \"conductor\"".into(),
            );
            ChainTo::Member
        }
    };
    let ironic = raw.ironic.map(|r| super::sources::ironic(r, add));
    OwnerSettings {
        ironic,
        self_name: raw.self_name,
        resolvers,
        inventory: raw.inventory.map(PathBuf::from),
        fallback,
        chain_to,
    }
}
