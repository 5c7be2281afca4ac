//! A dnsmasq-format lease file (`dhcp.leasefile`), for readers written for dnsmasq:
//! Ironic's `dnsmasq` DHCP provider learns a node's addresses from it (it splits each
//! line on whitespace and takes field 2 as the MAC, field 3 as the address).
//!
//! Each line is `<expiry> <mac> <ip> <hostname> <client-id>` as dnsmasq writes them, `*`
//! for an unknown name or id. The file is derived from the store, never read back: it
//! is replaced whole (temporary file, fsync, rename) whenever its content changes, so a
//! reader never sees half of it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::{Lease, LeaseQuery, LeaseState, Store};

/// How often the store is read for changes.
pub const POLL: Duration = Duration::from_secs(1);
/// Leases read per store query.
const PAGE: usize = 4096;

/// The file's text for `leases` at `now` (Unix seconds): bound, unexpired leases in
/// address order.
pub fn render(leases: &[Lease], now: u64) -> String {
    let mut out = String::new();
    let mut live: Vec<&Lease> = leases
        .iter()
        .filter(|l| l.state == LeaseState::Bound && l.expires > now)
        .collect();
    live.sort_by_key(|l| l.ip);
    for l in live {
        // The name comes from the client: one whitespace would shift every later
        // field for a reader that splits on it, so only a clean DNS label is written.
        let name = l
            .hostname
            .as_deref()
            .filter(|h| {
                !h.is_empty()
                    && h.len() <= 63
                    && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
            .unwrap_or("*");
        let id = match &l.client_id {
            Some(id) if !id.is_empty() => id
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
            _ => "*".into(),
        };
        let _ = writeln!(out, "{} {} {} {name} {id}", l.expires, l.mac, l.ip);
    }
    out
}

/// Replaces `path` with `text` atomically and durably.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{}.tmp", name.unwrap_or_default()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

fn all_leases(store: &dyn Store) -> Result<Vec<Lease>, crate::store::StoreError> {
    let mut out = Vec::new();
    let mut query = LeaseQuery {
        state: Some(LeaseState::Bound),
        ..LeaseQuery::default()
    };
    loop {
        let page = store.leases(&query, PAGE)?;
        let full = page.len() == PAGE;
        query.after = page.last().map(|l| l.ip);
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// Keeps `path` equal to the store's bound leases until `shutdown`. Failures are logged
/// once per kind of failure and retried at the next poll; they never stop DHCP.
pub async fn follow(path: PathBuf, store: Arc<dyn Store>, shutdown: CancellationToken) {
    let mut written: Option<String> = None;
    let mut last_error: Option<String> = None;
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let store2 = store.clone();
        let path2 = path.clone();
        let before = written.clone();
        let result = tokio::task::spawn_blocking(move || {
            let text = render(&all_leases(&*store2).map_err(|e| e.to_string())?, now);
            if before.as_deref() != Some(text.as_str()) {
                replace(&path2, &text).map_err(|e| e.to_string())?;
            }
            Ok::<String, String>(text)
        })
        .await;
        match result {
            Ok(Ok(text)) => {
                written = Some(text);
                last_error = None;
            }
            Ok(Err(e)) => {
                if last_error.as_deref() != Some(e.as_str()) {
                    warn!(path = %path.display(), error = %e, "lease file not written");
                }
                last_error = Some(e);
            }
            Err(e) => warn!(error = %e, "lease file task failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ip: &str, mac: &str, state: LeaseState, expires: u64, name: Option<&str>) -> Lease {
        Lease {
            ip: ip.parse().unwrap(),
            mac: mac.parse().unwrap(),
            state,
            starts: 1,
            expires,
            hostname: name.map(str::to_string),
            client_id: None,
            machine_id: None,
            arch: None,
        }
    }

    #[test]
    fn bound_unexpired_leases_in_dnsmasq_lines() {
        let mut with_id = lease(
            "192.0.2.11",
            "52:54:00:00:00:02",
            LeaseState::Bound,
            900,
            None,
        );
        with_id.client_id = Some(vec![1, 0x52, 0x54]);
        let leases = [
            lease(
                "192.0.2.12",
                "52:54:00:00:00:03",
                LeaseState::Bound,
                900,
                Some("bad name"),
            ),
            with_id,
            lease(
                "192.0.2.10",
                "52:54:00:00:00:01",
                LeaseState::Bound,
                900,
                Some("node-1"),
            ),
            lease(
                "192.0.2.13",
                "52:54:00:00:00:04",
                LeaseState::Bound,
                100,
                None,
            ),
            lease(
                "192.0.2.14",
                "52:54:00:00:00:05",
                LeaseState::Released,
                900,
                None,
            ),
        ];
        assert_eq!(
            render(&leases, 500),
            "900 52:54:00:00:00:01 192.0.2.10 node-1 *\n\
             900 52:54:00:00:00:02 192.0.2.11 * 01:52:54\n\
             900 52:54:00:00:00:03 192.0.2.12 * *\n"
        );
    }

    #[test]
    fn replacing_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dnsmasq.leases");
        replace(&path, "one\n").unwrap();
        replace(&path, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
