//! Offline subcommands: `check-config` and `leases`.

use std::io::Write;

use crate::app;
use crate::config::Config;
use crate::lease::{LeaseStore, LeaseView};

/// Prints a summary of a valid configuration (errors are printed by the loader).
pub fn check_config(config: &Config) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "configuration OK")?;
    writeln!(out, "state_dir: {}", config.state_dir.display())?;
    for (i, s) in config.subnets.iter().enumerate() {
        writeln!(
            out,
            "subnet[{i}] {}: {} dynamic addresses, lease {} s",
            s.network,
            s.range_size(),
            s.lease_time
        )?;
    }
    let (me, count) = config.partition();
    if count > 1 {
        // Every member's slice of every range, so operators can check that the members'
        // lists agree (the same list gives the same slices everywhere).
        let mut names: Vec<&str> = config.members.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        for (i, s) in config.subnets.iter().enumerate() {
            for (first, last) in &s.ranges {
                for (k, name) in names.iter().enumerate() {
                    let pool = crate::dhcp::pool::Pool::partitioned(*first, *last, k, count);
                    let slice = pool
                        .slice_bounds()
                        .map_or("(empty)".to_string(), |(a, b)| format!("{a} - {b}"));
                    let mark = if k == me { "  <- this member" } else { "" };
                    writeln!(out, "subnet[{i}] slice of {name}: {slice}{mark}")?;
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
    for w in config.boot_file_warnings() {
        writeln!(out, "warning: {w}")?;
    }
    Ok(())
}

/// Prints every stored lease, as a table or as JSON.
pub fn print_leases(config: &Config, json: bool) -> anyhow::Result<()> {
    let store = app::open_store(&config.state_dir)?;
    let mut leases = store.load()?;
    leases.sort_by_key(|l| l.ip);
    let mut out = std::io::stdout().lock();
    if json {
        let views: Vec<LeaseView<'_>> = leases.iter().map(LeaseView::from).collect();
        serde_json::to_writer_pretty(&mut out, &views)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<15}  {:<17}  {:<8}  {:>10}  HOSTNAME",
        "IP", "MAC", "STATE", "EXPIRES"
    )?;
    for l in &leases {
        // The host name comes from the client: print it escaped.
        let host = l
            .hostname
            .as_deref()
            .map(|h| h.escape_default().to_string())
            .unwrap_or_default();
        writeln!(
            out,
            "{:<15}  {:<17}  {:<8}  {:>10}  {host}",
            l.ip.to_string(),
            l.mac.to_string(),
            l.state.as_str(),
            l.expires
        )?;
    }
    Ok(())
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
    let ctx = crate::http::boot::BootContext::new(&config.http, &resolver, &res);
    let mut out = std::io::stdout().lock();
    writeln!(out, "mac:    {mac}")?;
    writeln!(out, "owner:  {}", res.member.as_deref().unwrap_or("(none)"))?;
    writeln!(out, "source: {}", res.source)?;
    match crate::http::boot::answer(&mac, &res, &ctx)? {
        crate::http::boot::BootAnswer::Script { kind, body } => {
            writeln!(out, "answer: {kind}\n\n{body}")?;
        }
        crate::http::boot::BootAnswer::NotFound => writeln!(out, "answer: 404")?,
    }
    Ok(())
}
