//! `shardboot leases import --dnsmasq FILE` and `shardboot leases export --dnsmasq`: a
//! switch from dnsmasq keeps every binding, and a switch back takes them along
//! (docs/dnsmasq-migration.md). The file's lines are checked by
//! `dhcp::dnsmasq_leases`; this side reads the file and the store and writes.
//! `--json`: the whole store as one document (`store::dump`), for a backup and a move
//! across versions.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};

use super::Remote;
use crate::clock::unix_now;
use crate::config::Config;
use crate::dhcp::dnsmasq_leases;
use crate::store::{dump, Change, Lease, LeaseEffect, LeaseState, StoreError};

/// A lease file larger than this is not one (a /16 of dnsmasq lines is about 5 MB).
const MAX_FILE: u64 = 64 << 20;

/// Opens the store, saying plainly why not when a server holds it (`why`: what the
/// command does offline).
fn open_offline(
    config: &Config,
    why: &str,
) -> anyhow::Result<std::sync::Arc<dyn crate::store::Store>> {
    match crate::store::open(&config.state_dir) {
        Ok(s) => Ok(s),
        Err(StoreError::InUse(path)) => bail!(
            "the lease store {} is locked by a running `shardboot serve`: stop it first \
             ({why})",
            path.display()
        ),
        Err(e) => Err(e).context("opening the lease store"),
    }
}

/// With a shared store, what an import wrote reaches the database at the next start:
/// the member writes the live bindings the database has no row for
/// (`shared::SharedStore::seed`), and one the database holds for another client wins.
fn note_shared(config: &Config, out: &mut impl Write) -> std::io::Result<()> {
    if config.store.shared.is_some() {
        writeln!(
            out,
            "  store.shared is set: the database takes these bindings when this member next \
             starts (one it holds for another client wins)"
        )?;
    }
    Ok(())
}

/// The text of `file`, refusing one larger than any lease file or document.
fn read_limited(file: &Path) -> anyhow::Result<String> {
    let len = std::fs::metadata(file)
        .with_context(|| format!("{}", file.display()))?
        .len();
    if len > MAX_FILE {
        bail!("{}: {len} bytes is too large to import", file.display());
    }
    std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))
}

/// Imports `file` (dnsmasq's lease file) into the store: every line is checked first,
/// and one bad line imports nothing. Prints what was imported and skipped.
pub fn import_dnsmasq(config: &Config, file: &Path) -> anyhow::Result<()> {
    let text = read_limited(file)?;
    let parsed = dnsmasq_leases::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing imported", file.display()))?;
    let store = open_offline(
        config,
        "an import writes the store offline, and nothing was imported",
    )?;
    let now = unix_now();
    let stored = store.load().context("reading the lease store")?.leases;
    let plan = dnsmasq_leases::plan(&parsed, config, &stored, now)
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing imported", file.display()))?;
    let changes: Vec<Change> = plan
        .leases
        .iter()
        .cloned()
        .map(|l| Change::Lease(LeaseEffect::Put(l)))
        .collect();
    // One commit: all of them durable, or none.
    if !changes.is_empty() {
        store.commit(&changes).context("writing the lease store")?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "imported {} leases from {} into {}",
        plan.leases.len(),
        file.display(),
        crate::store::path_in(&config.state_dir).display()
    )?;
    for (n, what) in [
        (plan.expired, "expired: skipped"),
        (
            plan.kept,
            "already in the store with a later end: kept as stored",
        ),
        (
            plan.infinite,
            "infinite (expiry 0): given one lease time from now",
        ),
        (
            plan.v6_skipped,
            "DHCPv6 lines: skipped (v6 clients ask again, RFC 8415 §18.2.3)",
        ),
    ] {
        if n > 0 {
            writeln!(out, "  {n} {what}")?;
        }
    }
    note_shared(config, &mut out)?;
    Ok(())
}

/// Writes the bound, unexpired leases in dnsmasq's format to `output` (atomically) or
/// to stdout: from the store, or through the running server's operator API while it
/// holds the store. Through the API the client identifiers are not available (`*`).
pub fn export_dnsmasq(
    config: &Config,
    output: Option<&Path>,
    remote: &Remote,
) -> anyhow::Result<()> {
    let local = remote.local_store(&config.state_dir);
    let leases: Vec<Lease> = match local {
        Some(store) => store.load()?.leases,
        None => remote
            .all_leases(None)?
            .iter()
            .filter_map(from_view)
            .collect(),
    };
    let text = crate::dhcp::leasefile::render(&leases, unix_now());
    match output {
        Some(path) => crate::dhcp::leasefile::replace(path, &text)
            .with_context(|| format!("writing {}", path.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}

/// Writes the whole store as one JSON document (`store::dump`) to `output`
/// (atomically) or to stdout. Offline: the running server holds the store.
pub fn export_json(config: &Config, output: Option<&Path>) -> anyhow::Result<()> {
    let store = open_offline(config, "an export --json reads the store offline")?;
    let snap = store.load().context("reading the lease store")?;
    if !snap.set_aside.is_empty() || !snap.set_aside6.is_empty() {
        eprintln!(
            "shardboot: {} unreadable lease records are not in the export",
            snap.set_aside.len() + snap.set_aside6.len()
        );
    }
    let mut text = serde_json::to_string_pretty(&dump::Dump::of(&snap, unix_now()))?;
    text.push('\n');
    match output {
        Some(path) => crate::dhcp::leasefile::replace(path, &text)
            .with_context(|| format!("writing {}", path.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}

/// Restores a document of [`export_json`] into an empty store: every record is checked
/// first and all are written in one commit, or none.
pub fn import_json(config: &Config, file: &Path) -> anyhow::Result<()> {
    let text = read_limited(file)?;
    let snap = dump::Dump::parse(&text)
        .and_then(|d| d.to_snapshot())
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing imported", file.display()))?;
    let store = open_offline(
        config,
        "an import writes the store offline, and nothing was imported",
    )?;
    let now_held = store.load().context("reading the lease store")?;
    if !now_held.leases.is_empty()
        || !now_held.leases6.is_empty()
        || !now_held.reservations.is_empty()
        || !now_held.host_policies.is_empty()
    {
        // A restore that merged would have to decide between two bindings of one
        // address; into an empty store there is nothing to decide.
        bail!(
            "{} already holds records: an import --json restores into an empty store \
             (move the state_dir aside first); nothing imported",
            crate::store::path_in(&config.state_dir).display()
        );
    }
    let mut changes: Vec<Change> = Vec::new();
    changes.extend(
        snap.leases
            .iter()
            .cloned()
            .map(|l| Change::Lease(LeaseEffect::Put(l))),
    );
    changes.extend(
        snap.leases6
            .iter()
            .cloned()
            .map(|l| Change::Lease6(crate::store::Lease6Effect::Put(l))),
    );
    changes.extend(
        snap.reservations
            .iter()
            .map(|r| Change::Reservation(r.mac, Some(r.clone()))),
    );
    changes.extend(
        snap.host_policies
            .iter()
            .map(|(m, p)| Change::HostPolicy(*m, Some(*p))),
    );
    changes.extend(snap.membership.clone().map(Change::Membership));
    changes.extend(snap.server_duid.clone().map(Change::ServerDuid));
    if !changes.is_empty() {
        store.commit(&changes).context("writing the lease store")?;
    }
    println!(
        "restored {} leases, {} DHCPv6 leases, {} reservations and {} host policies from {}",
        snap.leases.len(),
        snap.leases6.len(),
        snap.reservations.len(),
        snap.host_policies.len(),
        file.display()
    );
    note_shared(config, &mut std::io::stdout().lock())?;
    Ok(())
}

/// A lease of the operator API's JSON (`store::LeaseView`), back as a lease; host names
/// come in the kept form (`store::text`) and go back to what the client sent.
fn from_view(v: &serde_json::Value) -> Option<Lease> {
    let state = match v["state"].as_str()? {
        "bound" => LeaseState::Bound,
        _ => return None,
    };
    Some(Lease {
        ip: v["ip"].as_str()?.parse().ok()?,
        mac: v["mac"].as_str()?.parse().ok()?,
        state,
        starts: v["starts"].as_u64()?,
        expires: v["expires"].as_u64()?,
        hostname: v["hostname"]
            .as_str()
            .and_then(crate::store::text::original)
            .and_then(|b| String::from_utf8(b).ok()),
        client_id: None,
        machine_id: None,
        arch: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_of_the_api_comes_back_with_its_host_name() {
        let v = serde_json::json!({
            "ip": "172.22.0.12", "mac": "52:54:00:aa:bb:01", "state": "bound",
            "starts": 10, "expires": 20, "hostname": "node\\x2d1", "arch": null, "uuid": null
        });
        let l = from_view(&v).unwrap();
        assert_eq!(l.hostname.as_deref(), Some("node-1"));
        assert_eq!((l.starts, l.expires), (10, 20));
        let declined = serde_json::json!({
            "ip": "172.22.0.13", "mac": "52:54:00:aa:bb:02", "state": "declined",
            "starts": 10, "expires": 20
        });
        assert!(from_view(&declined).is_none());
    }
}
