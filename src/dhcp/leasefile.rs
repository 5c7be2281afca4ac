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
pub(crate) fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let (tmp, mut f) = create_temp(dir, &name.unwrap_or_default())?;
    let written = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)?.sync_all()
}

/// Creates a new temporary file beside the lease file, under a name nobody can guess
/// and never through a symlink: the directory may be shared with Ironic's containers
/// (dnsmasq's), and a predictable name followed as a symlink would let anyone who can
/// write there have this root process overwrite any file.
fn create_temp(dir: &Path, name: &str) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..8 {
        let mut nonce = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| std::io::Error::other("no random numbers for a temporary name"))?;
        let suffix: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = dir.join(format!(".{name}.{suffix}.tmp"));
        match open_new(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary name free")))
}

/// Opens `path` as a new file: O_EXCL (an existing file or symlink there is an error,
/// never opened) and O_NOFOLLOW.
fn open_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
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
        let now = crate::clock::unix_now();
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

    #[test]
    fn a_symlink_planted_for_the_temporary_file_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.path().join("dnsmasq.leases");
        // The name the temporary file used to have, and any name it may get: a
        // symlink there is refused, not opened.
        let planted = dir.path().join(".dnsmasq.leases.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        replace(&path, "one\n").unwrap();
        let err = open_new(&planted).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
        // Two temporary names are never the same.
        let (a, _) = create_temp(dir.path(), "x").unwrap();
        let (b, _) = create_temp(dir.path(), "x").unwrap();
        assert_ne!(a, b);
    }
}
