//! Keeps [`HostPolicies`] in step with `dhcp.hostsdir` and `dhcp.optsdir`. A directory
//! is polled (every
//! `dhcp.hostsdir_poll_ms`) rather than watched with inotify: a poll also sees files
//! removed, truncated or replaced by rename, and Ironic's PXE filter only rewrites it
//! once per sync period anyway. Only files whose length or modification time changed
//! are read again; the policy is rebuilt whole whenever anything changed.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{hostsdir, optsdir};
use super::{HostPolicies, HostPolicy};

/// Which dnsmasq directory is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// `dhcp-hostsdir`: allow, deny and `set:` tags per MAC.
    Hosts,
    /// `dhcp-optsdir`: `dhcp-option` lines (Ironic's per-node boot options).
    Options,
}

impl Watched {
    fn what(self) -> &'static str {
        match self {
            Watched::Hosts => "hosts directory",
            Watched::Options => "options directory",
        }
    }
}

/// Files larger than this are not hosts files (Ironic's are one line); skipped.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// What was read of one file, and the stamp that tells whether to read it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    len: u64,
    modified: Option<SystemTime>,
    content: String,
}

/// What was read of the whole directory.
pub type Files = HashMap<String, Read>;

/// Reads and applies the directory once, before DHCP answers anything: until then
/// the filter would let every machine through. A directory that cannot be read is an
/// error (the caller refuses to start).
pub fn first_scan(dir: &Path, kind: Watched, policies: &HostPolicies) -> io::Result<Files> {
    let (files, skipped) = rescan(dir, HashMap::new())?;
    for s in skipped {
        warn!(dir = %dir.display(), "{s}");
    }
    apply(kind, &files, policies);
    Ok(files)
}

/// Reads `dir` once into `policies` (an error stops start-up: an unfiltered first poll
/// would let every machine through) and returns the watcher that follows it from then
/// on, polling every `poll` until `stop`.
pub fn follow(
    dir: PathBuf,
    kind: Watched,
    poll: Duration,
    policies: Arc<HostPolicies>,
    stop: CancellationToken,
) -> io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let files = first_scan(&dir, kind, &policies)?;
    Ok(run(dir, kind, poll, policies, files, stop))
}

/// Polls `dir` until `stop`, applying every change to `policies`; `files` is what
/// [`first_scan`] read.
pub async fn run(
    dir: PathBuf,
    kind: Watched,
    poll: Duration,
    policies: Arc<HostPolicies>,
    mut files: Files,
    stop: CancellationToken,
) {
    info!(dir = %dir.display(), "following the dnsmasq {}", kind.what());
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(poll) => {}
        }
        let (d, previous) = (dir.clone(), files.clone());
        match tokio::task::spawn_blocking(move || rescan(&d, previous)).await {
            Ok(Ok((now, skipped))) => {
                last_error = None;
                if now != files {
                    for s in skipped {
                        warn!(dir = %dir.display(), "{s}");
                    }
                    apply(kind, &now, &policies);
                    files = now;
                }
            }
            Ok(Err(e)) => {
                // Said once per distinct failure, not once per poll. What was read
                // before stays in force: a directory briefly missing (being replaced)
                // must not let every machine through or shut every one out.
                let text = e.to_string();
                if last_error.as_ref() != Some(&text) {
                    warn!(dir = %dir.display(), error = %text, "cannot read the {}; keeping what was read before", kind.what());
                    last_error = Some(text);
                }
            }
            Err(e) => warn!(error = %e, "{} scan failed", kind.what()),
        }
    }
}

fn apply(kind: Watched, files: &HashMap<String, Read>, policies: &HostPolicies) {
    let contents = files
        .iter()
        .map(|(name, r)| (name.as_str(), r.content.as_str()));
    if kind == Watched::Options {
        let (rules, problems) = optsdir::build(contents);
        for (file, line, error) in problems {
            warn!(file, line, %error, "options directory: line skipped");
        }
        info!(entries = rules.len(), "options directory applied");
        policies.set_node_options(rules);
        return;
    }
    let (policy, problems) = hostsdir::build(contents);
    for (file, line, error) in problems {
        warn!(file, line, %error, "hosts directory: line skipped");
    }
    let denied = policy
        .macs
        .values()
        .filter(|p| **p == HostPolicy::Deny)
        .count();
    info!(
        allowed = policy.macs.len() - denied,
        denied,
        unknown = ?policy.unknown,
        "hosts directory applied"
    );
    policies.set_hostsdir(policy);
}

/// Lists `dir` and reads the files that are new or changed since `previous`; returns
/// the new state and a note for every file skipped. Like dnsmasq, dot files and
/// editor backups (`~`) are not hosts files. A file that exists but cannot be read
/// keeps what was read of it before (an unreadable deny must not turn into an allow).
fn rescan(dir: &Path, mut previous: Files) -> io::Result<(Files, Vec<String>)> {
    let mut now = HashMap::new();
    let mut skipped = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with('~') {
            continue;
        }
        let mut unreadable = |name: String, e: io::Error, previous: &mut Files, now: &mut Files| {
            skipped.push(format!(
                "{}: cannot read ({e}); keeping what was read before",
                name.escape_default()
            ));
            if let Some(r) = previous.remove(&name) {
                now.insert(name, r);
            }
        };
        // Follows symlinks, as dnsmasq does.
        let meta = match std::fs::metadata(entry.path()) {
            Ok(m) => m,
            // Removed since the listing: the file is gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                unreadable(name, e, &mut previous, &mut now);
                continue;
            }
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE_BYTES {
            skipped.push(format!(
                "{}: {} bytes is too large for a hosts file; skipped",
                name.escape_default(),
                meta.len()
            ));
            continue;
        }
        let modified = meta.modified().ok();
        let read = match previous.remove(&name) {
            Some(r) if r.len == meta.len() && r.modified == modified => r,
            _ => match std::fs::read(entry.path()) {
                Ok(bytes) => Read {
                    len: meta.len(),
                    modified,
                    content: String::from_utf8_lossy(&bytes).into_owned(),
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    unreadable(name, e, &mut previous, &mut now);
                    continue;
                }
            },
        };
        now.insert(name, read);
    }
    Ok((now, skipped))
}
