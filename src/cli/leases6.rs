//! `shardboot leases --v6`: the DHCPv6 lease table, from the store or through the
//! running server's `/v1/leases6`, as a table or as JSON.

use std::io::Write;

use super::{expiry, field, Remote};
use crate::config::Config;
use crate::mac::MacAddr;
use crate::store::Lease6View;

/// Prints every stored DHCPv6 lease (optionally those whose client's MAC is `mac`).
pub(super) fn print(
    config: &Config,
    json: bool,
    mac: Option<MacAddr>,
    remote: &Remote,
) -> anyhow::Result<()> {
    // The store is locked while the server runs: then ask the server.
    let local = remote.local_store(&config.state_dir);
    let rows: Vec<serde_json::Value> = match local {
        Some(store) => store
            .load()?
            .leases6
            .iter()
            .filter(|l| mac.is_none_or(|m| l.mac == Some(m)))
            .map(|l| serde_json::to_value(Lease6View::from(l)))
            .collect::<Result<_, _>>()?,
        None => {
            let mac = mac.map(|m| m.to_string());
            remote
                .all_pages("/v1/leases6?limit=1000")?
                .into_iter()
                .filter(|l| mac.as_deref().is_none_or(|m| l["mac"] == m))
                .collect()
        }
    };
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    out.write_all(table(&rows).as_bytes())?;
    Ok(())
}

/// The rows as text: a header line, then one line per lease. Host names come from the
/// client: printed in the kept form, never raw.
fn table(rows: &[serde_json::Value]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<39}  {:<10}  {:<17}  {:<8}  {:<20}  {:<28}  HOSTNAME",
        "IP", "IAID", "MAC", "STATE", "EXPIRES (UTC)", "DUID"
    );
    for l in rows {
        let _ = writeln!(
            out,
            "{:<39}  {:<10}  {:<17}  {:<8}  {:<20}  {:<28}  {}",
            field(l, "ip"),
            field(l, "iaid"),
            field(l, "mac"),
            field(l, "state"),
            expiry(&l["expires"]),
            field(l, "duid"),
            field(l, "hostname"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn the_v6_table_shows_each_lease_on_one_line_and_escapes_what_clients_sent() {
        let rows = vec![
            serde_json::json!({
                "ip": "2001:db8::10", "duid": "000300015254000001aa", "iaid": 1,
                "mac": "52:54:00:00:01:aa", "state": "bound", "starts": 1, "preferred": 2,
                "expires": 1_700_000_000u64, "hostname": "node\u{1b}[2J", "arch": 7
            }),
            serde_json::json!({
                "ip": "2001:db8::11", "duid": "00020000", "iaid": 4_294_967_295u32,
                "mac": null, "state": "declined", "starts": 1, "preferred": 2,
                "expires": 1_700_000_000u64, "hostname": null, "arch": null
            }),
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(
            lines[0].starts_with("IP ") && lines[0].ends_with("HOSTNAME"),
            "{t}"
        );
        assert!(lines[1].starts_with("2001:db8::10 "), "{t}");
        assert!(lines[1].contains("2023-11-14T22:13:20Z"), "{t}");
        assert!(lines[1].ends_with("node\\x1b[2J"), "{t}");
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(
            lines[2].contains("4294967295") && lines[2].contains("declined"),
            "{t}"
        );
    }
}
