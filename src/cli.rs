//! The subcommands other than `serve`. `check-config` and `owner` work from the config
//! (`owner` asks Ironic as a booting machine would); `leases` reads the store, or the
//! running server's operator API when the server holds the store (`leases6`: its `--v6`
//! table; `migrate`: `leases import` and `leases export`); `members`, `hosts` and
//! `trace` ask the running server (`Remote`). `generate` prints the shell completions
//! and the man page.

mod board;
mod explain;
pub mod generate;
mod leases6;
mod migrate;

pub use board::{board, BoardArgs};
pub use explain::print_explained;

pub use migrate::{export_dnsmasq, export_json, import_dnsmasq, import_json};

use std::io::Write;

use crate::config::Config;
use crate::owner::MemberList;
use crate::store::LeaseView;
use crate::tftp::check_boot_files;

/// An error and its causes on one line, each cause once: a message that already quotes
/// its cause (`"lease store in …: {source}"`) is not followed by that cause again.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Prints a summary of a valid configuration (errors are printed by the loader).
pub fn check_config(config: &Config) -> anyhow::Result<()> {
    // The member secret is read the way `serve` reads it, so a bad file fails here.
    if let Some(path) = &config.owner.member_secret_file {
        crate::owner::peer_auth::MemberSecret::load(path)?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "configuration OK")?;
    writeln!(out, "state_dir: {}", config.state_dir.display())?;
    match &config.store.shared {
        Some(s) => writeln!(
            out,
            "store: shared {:?} database {} (credentials {}, TLS {}); sled in state_dir is this member's cache",
            s.dialect,
            crate::shared::redacted(&s.url),
            s.credentials_dir
                .as_ref()
                .map_or("from the URL".into(), |d| format!("from {}", d.display())),
            s.ca_file
                .as_ref()
                .map_or("as the URL says".into(), |f| format!("verified with {}", f.display())),
        )?,
        None => writeln!(out, "store: embedded (sled) in state_dir")?,
    }
    if !config.dhcp.enabled && config.subnets6.is_empty() {
        writeln!(out, "dhcp: disabled (TFTP and HTTP only)")?;
    } else if !config.dhcp.enabled {
        writeln!(out, "dhcp: IPv4 disabled (DHCPv6 only)")?;
    }
    for (i, s) in config.subnets.iter().enumerate() {
        writeln!(
            out,
            "subnet[{i}] {}: {} dynamic addresses, lease {} s",
            s.network,
            s.range_size(),
            s.lease_time
        )?;
    }
    for (i, s) in config.subnets6.iter().enumerate() {
        let size: u64 = s
            .ranges
            .iter()
            .filter_map(|(a, b)| crate::config::range6_len(*a, *b))
            .map(u64::from)
            .sum();
        writeln!(
            out,
            "subnet6[{i}] {}: {size} dynamic addresses, lease {} s, rapid commit {}",
            s.network,
            s.lease_time,
            if s.rapid_commit { "on" } else { "off" }
        )?;
    }
    let host = crate::dhcp::shell::socket::host_addresses().unwrap_or_default();
    for i in config.subnets_out_of_reach(&host) {
        writeln!(
            out,
            "warning: subnet[{i}] {}: no interface of this host is on it and dhcp.relays is empty, so its relayed clients are dropped; name the relays in dhcp.relays",
            config.subnets[i].network
        )?;
    }
    let host6 = crate::dhcp6::shell::socket::host_addresses6().unwrap_or_default();
    for i in config.subnets6_out_of_reach(&host6) {
        writeln!(
            out,
            "warning: subnet6[{i}] {}: no interface of this host is on it and dhcp.relays names no IPv6 relay, so its relayed clients are dropped; name the relays in dhcp.relays",
            config.subnets6[i].network
        )?;
    }
    let members = MemberList::of(&config.members);
    let me = config.owner.self_name.as_deref();
    if let crate::config::MembersSource::File(f) = &config.owner.members {
        writeln!(
            out,
            "members: from file {}, read every {} ms: {}",
            f.path.display(),
            f.poll.as_millis(),
            members.names().join(", ")
        )?;
        if let Some(me) = me.filter(|me| members.index_of(me).is_none()) {
            writeln!(
                out,
                "warning: owner.self {me} is not in the members file: this member hands out no fresh address until it is"
            )?;
        }
    }
    if members.len() > 1 {
        // Every member's share of every range, so operators can check that the members'
        // lists agree (the same list gives the same shares everywhere).
        for (i, s) in config.subnets.iter().enumerate() {
            for (first, last) in &s.ranges {
                for name in members.names() {
                    let (n, runs) = members.share_runs(*first, *last, name);
                    let mark = if Some(name.as_str()) == me {
                        "  <- this member"
                    } else {
                        ""
                    };
                    let shown = runs.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
                    let more = if runs.len() > 4 { ", …" } else { "" };
                    writeln!(
                        out,
                        "subnet[{i}] share of {name}: {n} addresses in {} runs ({shown}{more}){mark}",
                        runs.len()
                    )?;
                }
            }
        }
    }
    writeln!(out, "hosts: {}", config.hosts.len())?;
    if config.tftp.enabled {
        writeln!(
            out,
            "tftp: {} serving {}",
            config.tftp.listen,
            config.tftp.settings.root.display()
        )?;
    }
    // Warnings, not errors: a missing boot file must not stop DHCP (the client gets a
    // TFTP error and the operator a log line), but the operator should hear about it.
    if config.tftp.enabled {
        for w in check_boot_files(&config.tftp.settings, &config.boot_file_names()) {
            writeln!(out, "warning: {w}")?;
        }
    }
    // Operator tokens that others can read, or that cross the network in clear by
    // explicit choice: allowed, but said out loud.
    for w in [
        crate::http::auth::token_file_warning(&config.http),
        crate::http::auth::insecure_api_warning(&config.http),
        config
            .owner
            .ironic
            .as_ref()
            .and_then(crate::config::IronicSettings::insecure_http_warning),
    ]
    .into_iter()
    .flatten()
    .chain(crate::owner::peer_auth::warnings(
        &config.owner,
        config.members.len(),
    )) {
        writeln!(out, "warning: {w}")?;
    }

    // Likewise a hosts directory Ironic has not created yet (serve waits for nobody:
    // it refuses to start unfiltered).
    if let Some(dir) = &config.dhcp.hostsdir {
        if !dir.is_dir() {
            writeln!(
                out,
                "warning: dhcp.hostsdir {}: not a directory (yet); serve refuses to start until it is",
                dir.display()
            )?;
        } else {
            writeln!(out, "dhcp.hostsdir: following {}", dir.display())?;
        }
    }
    Ok(())
}

/// Prints every stored lease (with `v6`, every DHCPv6 lease), as a table or as JSON.
pub fn print_leases(
    config: &Config,
    json: bool,
    v6: bool,
    mac: Option<&str>,
    remote: Remote,
) -> anyhow::Result<()> {
    let mac: Option<crate::mac::MacAddr> = mac.map(str::parse).transpose()?;
    if v6 {
        return leases6::print(config, json, mac, &remote);
    }
    // The store is locked while the server runs: then ask the server.
    let local = remote.local_store(&config.state_dir);
    let rows: Vec<serde_json::Value> = match local {
        Some(store) => {
            let mut leases = store.load()?.leases;
            leases.sort_by_key(|l| l.ip);
            leases
                .iter()
                .filter(|l| mac.is_none_or(|m| l.mac == m))
                .map(|l| serde_json::to_value(LeaseView::from(l)))
                .collect::<Result<_, _>>()?
        }
        None => remote.all_leases(mac)?,
    };
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<15}  {:<17}  {:<8}  {:<20}  HOSTNAME",
        "IP", "MAC", "STATE", "EXPIRES (UTC)"
    )?;
    for l in &rows {
        // The host name comes from the client: printed escaped.
        writeln!(
            out,
            "{:<15}  {:<17}  {:<8}  {:<20}  {}",
            field(l, "ip"),
            field(l, "mac"),
            field(l, "state"),
            expiry(&l["expires"]),
            field(l, "hostname"),
        )?;
    }
    Ok(())
}

/// A lease's field for the table. Host names arrive in the kept form (`store::text`);
/// anything else is put in it.
fn field(v: &serde_json::Value, k: &str) -> String {
    match &v[k] {
        serde_json::Value::String(s) if crate::store::text::is_shown(s) => s.clone(),
        serde_json::Value::String(s) => crate::store::text::shown(s),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A lease's expiry (Unix seconds in the JSON) as an RFC 3339 UTC time.
fn expiry(v: &serde_json::Value) -> String {
    match v.as_u64() {
        Some(secs) => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
        )
        .to_string(),
        None => v.to_string(),
    }
}

/// Prints a machine's timeline from the running server, then (unless `once`) polls for
/// new events every second and prints them as they come.
pub fn trace(remote: &Remote, mac: &str, once: bool) -> anyhow::Result<()> {
    let mac: crate::mac::MacAddr = mac.parse()?;
    // The first answer is every member's (merged); following asks this member only,
    // for events after its own newest.
    let mut after: Option<u64> = None;
    loop {
        let path = match after {
            None => format!("/v1/machines/{mac}/events"),
            Some(n) => format!("/v1/machines/{mac}/events?after={n}"),
        };
        let v = remote.call(reqwest::Method::GET, &path, None)?;
        let mut out = std::io::stdout().lock();
        for u in v["unasked"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "# member {} not asked: {}",
                u["member"].as_str().unwrap_or("?").escape_default(),
                u["why"].as_str().unwrap_or("?").escape_default()
            )?;
        }
        let me = v["member"].as_str();
        let mut newest = after.unwrap_or(0);
        for e in v["events"].as_array().into_iter().flatten() {
            writeln!(out, "{}", event_line(e))?;
            if e["member"].as_str() == me {
                newest = newest.max(e["seq"].as_u64().unwrap_or(0));
            }
        }
        after = Some(newest);
        out.flush()?;
        if once {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// One timeline event as a line: time, source, what was asked, what it got and why,
/// the address, the detail.
pub fn event_line(e: &serde_json::Value) -> String {
    let at = e["at_ms"].as_u64().unwrap_or(0);
    let when = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(at),
    );
    let mut line = format!("{when} ");
    if let Some(member) = e["member"].as_str() {
        line.push_str(&format!("[{}] ", member.escape_default()));
    }
    line.push_str(&format!(
        "{:<4} {:<26} {}",
        e["source"].as_str().unwrap_or("?"),
        e["what"].as_str().unwrap_or("?"),
        e["outcome"].as_str().unwrap_or("?")
    ));
    if let Some(why) = e["why"].as_str() {
        line.push_str(&format!(" ({why})"));
    }
    if let Some(ip) = e["ip"].as_str() {
        line.push_str(&format!(" {ip}"));
    }
    if let Some(d) = e["detail"].as_str() {
        line.push_str(&format!(" {}", d.escape_default()));
    }
    line
}

/// Prints the running server's `/v1/members` as a table (or its JSON).
pub fn print_members(remote: &Remote, json: bool) -> anyhow::Result<()> {
    let v = remote.call(reqwest::Method::GET, "/v1/members", None)?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    out.write_all(members_table(&v).as_bytes())?;
    Ok(())
}

/// `/v1/members` as text: a header line, then one line per member and range share.
/// Every value is printed escaped: conductor names come from Ironic.
pub fn members_table(v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.escape_default().to_string(),
        serde_json::Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let stale = match &v["stale_since"] {
        serde_json::Value::Null => String::new(),
        since => format!(
            "  STALE since {} ({})",
            expiry(since),
            text(&v["last_error"])
        ),
    };
    let shared = match &v["shared_store"]["up"] {
        serde_json::Value::Bool(true) => "  shared store: up",
        serde_json::Value::Bool(false) => "  shared store: DOWN (no fresh address)",
        _ => "",
    };
    let _ = writeln!(
        out,
        "source: {}  generation: {}  split: {}  fingerprint: {}{stale}{shared}",
        text(&v["source"]),
        text(&v["generation"]),
        text(&v["split"]),
        text(&v["fingerprint"]),
    );
    let _ = writeln!(
        out,
        "{:<24}  {:<5}  {:<5}  {:<14}  {:<24}  {:<30}  SHARE",
        "MEMBER", "SELF", "ALIVE", "HEARTBEAT", "CONDUCTOR", "HTTP URL"
    );
    let heartbeats = v["shared_store"]["heartbeats"].as_array();
    for m in v["members"].as_array().into_iter().flatten() {
        let shares: Vec<String> = m["shares"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                format!(
                    "{}: {} addresses in {} runs",
                    text(&s["range"]),
                    text(&s["addresses"]),
                    s["runs"].as_array().map_or(0, Vec::len)
                )
            })
            .collect();
        // How long ago the shared store last heard from that member.
        let heartbeat = heartbeats
            .into_iter()
            .flatten()
            .find(|h| h["name"] == m["name"])
            .and_then(|h| h["heartbeat_age_ms"].as_i64())
            .map_or("-".to_string(), |ms| {
                format!("{:.1} s ago", ms as f64 / 1000.0)
            });
        let _ = writeln!(
            out,
            "{:<24}  {:<5}  {:<5}  {:<14}  {:<24}  {:<30}  {}",
            text(&m["name"]),
            if m["self"] == true { "yes" } else { "" },
            if m["alive"] == true { "yes" } else { "no" },
            heartbeat,
            text(&m["conductor"]),
            text(&m["http_url"]),
            shares.join("; "),
        );
    }
    for c in v["skipped_conductors"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "left out: {}", text(c));
    }
    out
}

/// Sets a MAC's run-time policy on the running server.
pub fn set_host(remote: &Remote, policy: &str, mac: &str) -> anyhow::Result<()> {
    let mac: crate::mac::MacAddr = mac.parse()?;
    let body = serde_json::json!({ "policy": policy });
    let answer = remote.call(
        reqwest::Method::PUT,
        &format!("/v1/hosts/{mac}"),
        Some(body),
    )?;
    println!("{mac}: {}", answer["policy"].as_str().unwrap_or("?"));
    Ok(())
}

/// The operator API of a running server, as the CLI reaches it.
#[derive(Debug)]
pub struct Remote {
    base: String,
    token_file: Option<std::path::PathBuf>,
    /// `--server` was given: never read the store directly.
    forced: bool,
}

impl Remote {
    /// The store in `state_dir`, read directly: unless `--server` was given, or the
    /// running server holds it (its lock is taken), when the API must be asked.
    pub(crate) fn local_store(
        &self,
        state_dir: &std::path::Path,
    ) -> Option<std::sync::Arc<dyn crate::store::Store>> {
        if self.forced {
            None
        } else {
            crate::store::open(state_dir).ok()
        }
    }

    /// `--server`/`--token-file`, defaulting to this config's listener and token file.
    pub fn new(
        config: &Config,
        server: Option<String>,
        token_file: Option<std::path::PathBuf>,
    ) -> Self {
        let forced = server.is_some();
        let base = server.unwrap_or_else(|| {
            let mut listen = config.http.operator_listen.unwrap_or(config.http.listen);
            if listen.ip().is_unspecified() {
                listen.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let scheme = if config.http.tls.is_some() {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{listen}")
        });
        Self {
            base: base.trim_end_matches('/').to_string(),
            token_file: token_file.or_else(|| config.http.token_file.clone()),
            forced,
        }
    }

    fn token(&self) -> anyhow::Result<String> {
        let path = self
            .token_file
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no token: give --token-file or set http.token_file"))?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("token file {}: {e}", path.display()))?;
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("token file {} holds no token", path.display()))
    }

    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let token = self.token()?;
        let url = format!("{}{path}", self.base);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                let client = reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(10))
                    .no_proxy()
                    .build()?;
                let mut req = client.request(method, &url).bearer_auth(token);
                if let Some(b) = body {
                    req = req.json(&b);
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
                let status = resp.status();
                let value: serde_json::Value = resp.json().await.unwrap_or_default();
                if !status.is_success() {
                    anyhow::bail!(
                        "{url}: HTTP {status}: {}",
                        value["error"].as_str().unwrap_or("no detail")
                    );
                }
                Ok(value)
            })
    }

    /// Every lease page by page (optionally one MAC's).
    fn all_leases(
        &self,
        mac: Option<crate::mac::MacAddr>,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut first = String::from("/v1/leases?limit=1000");
        if let Some(m) = mac {
            first.push_str(&format!("&mac={m}"));
        }
        self.all_pages(&first)
    }

    /// Every item of a paged lease route (`/v1/leases`, `/v1/leases6`), from `first`
    /// (the route and its query) on, following `next_cursor`.
    fn all_pages(&self, first: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = first.to_string();
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = self.call(reqwest::Method::GET, &path, None)?;
            if let Some(items) = page["leases"].as_array() {
                out.extend(items.iter().cloned());
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return Ok(out),
            }
        }
    }
}

/// Prints the owner resolution and boot script for one MAC.
pub fn print_owner(config: &Config, mac: &str) -> anyhow::Result<()> {
    let mac: crate::mac::MacAddr = mac.parse()?;
    let resolver = crate::owner::Resolver::new(config)?;
    // One lookup (Ironic, when configured), as a booting machine would trigger it.
    let res = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(resolver.resolve(&mac));
    use crate::http::boot::{self, BootAnswer, BootContext};
    let view = resolver.roster().current();
    let ctx = BootContext::new(&config.http, &resolver, &view, &res, false);
    let mut out = std::io::stdout().lock();
    writeln!(out, "mac:    {mac}")?;
    writeln!(out, "owner:  {}", res.member.as_deref().unwrap_or("(none)"))?;
    writeln!(out, "source: {}", res.source)?;
    let answer = match boot::route(&mac, boot::FIRST_STAGE_NAME, &res, &ctx) {
        None => BootAnswer::NotFound { kind: "not_found" },
        Some(chain) => {
            // Not checked: a boot request asks the URL first and answers 404 if the
            // conductor does; this only shows where the request would go.
            writeln!(
                out,
                "chains: {} (a boot request checks it first)",
                chain.url
            )?;
            let again = format!("/v1/boot/{}/{}", mac.hyphenated(), boot::FIRST_STAGE_NAME);
            let check = boot::Check::Unchecked;
            boot::answer_chain(&chain, check, 1, &again, &mac.to_string(), &config.http)?
        }
    };
    match answer {
        BootAnswer::Script { kind, body } => writeln!(out, "answer: {kind}\n\n{body}")?,
        BootAnswer::NotFound { kind } => writeln!(out, "answer: 404 ({kind})")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{members_table, one_line};

    #[test]
    fn the_members_table_shows_each_member_and_a_stale_list() {
        let v = serde_json::json!({
            "source": "ironic", "generation": 3, "split": "blocks-v1", "fingerprint": "00ff",
            "stale_since": 1_700_000_000u64, "last_error": "connection refused",
            "skipped_conductors": ["bad\u{1b}name: not a host name"],
            "members": [
                {"name": "10.0.0.1", "self": true, "alive": true, "conductor": "10.0.0.1",
                 "http_url": "http://10.0.0.1:8080",
                 "shares": [{"range": "10.0.1.0 - 10.0.1.255", "addresses": 128, "runs": ["a", "b"]}]},
                {"name": "10.0.0.2_8090", "self": false, "alive": false, "conductor": "10.0.0.2:8090",
                 "http_url": "http://10.0.0.2:8080", "shares": []}
            ],
            "shared_store": {"up": false, "heartbeats": [
                {"name": "10.0.0.2_8090", "heartbeat_age_ms": 12_500, "up_ms": 60_000, "version": "0.1.0"}
            ]}
        });
        let t = members_table(&v);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("source: ironic  generation: 3"), "{t}");
        assert!(
            lines[0].contains("STALE since 2023-11-14T22:13:20Z (connection refused)"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("10.0.0.1 ") && lines[2].contains("yes    yes"),
            "{t}"
        );
        assert!(
            lines[2].ends_with("10.0.1.0 - 10.0.1.255: 128 addresses in 2 runs"),
            "{t}"
        );
        assert!(
            lines[3].contains("10.0.0.2:8090") && lines[3].contains(" no "),
            "{t}"
        );
        assert!(
            lines[0].ends_with("shared store: DOWN (no fresh address)"),
            "{t}"
        );
        assert!(
            lines[2].contains(" - ") && lines[3].contains("12.5 s ago"),
            "{t}"
        );
        // Text from Ironic is escaped, never raw control characters.
        assert_eq!(lines[4], "left out: bad\\u{1b}name: not a host name");
    }

    #[test]
    fn an_error_line_names_each_cause_once() {
        // The shape that printed a bad record's cause three times: each layer quotes
        // its source in its own message and also returns it as `source()`.
        #[derive(Debug, thiserror::Error)]
        #[error("record truncated")]
        struct Codec;
        #[derive(Debug, thiserror::Error)]
        #[error("lease record for key [1] is unreadable: {source}")]
        struct Corrupt {
            source: Codec,
        }
        #[derive(Debug, thiserror::Error)]
        #[error("lease store in /x: {source}")]
        struct Store {
            source: Corrupt,
        }
        let e = anyhow::Error::new(Store {
            source: Corrupt { source: Codec },
        });
        assert_eq!(
            one_line(&e),
            "lease store in /x: lease record for key [1] is unreadable: record truncated"
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk gone")).context("opening");
        assert_eq!(one_line(&plain), "opening: disk gone");
    }
}
