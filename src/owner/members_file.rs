//! Members from a file (`owner.members = "file"`): `owner.members_file` is read again
//! every `owner.members_poll_ms`, and each list that differs from the one in force is
//! put in force, for operators without Ironic (config management, tests) to add, remove
//! and replace members without a restart. The file's authority is the operator's: as
//! with Ironic, no member votes. A file that cannot be read or does not validate keeps
//! the last good list in force and marks it stale.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::health::LiveSet;
use super::roster::Roster;
use crate::config::{read_members_file, FileMembers, Member, MembersFileError};

/// What one read of the file means for the roster (pure: the caller applies it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRead {
    /// Same outcome as the last read: nothing to do.
    Unchanged,
    /// A good read; `Some` list when it differs from the one in force.
    Good(Option<Vec<Member>>),
    /// A new error (a different one from the last read's): record and log it.
    Failed(String),
}

/// Tracks the last outcome so that an error is recorded and logged once per distinct
/// error, and a good read only once per change of the file.
#[derive(Debug, Default)]
pub struct FileWatch {
    last: Option<Result<Vec<Member>, String>>,
}

impl FileWatch {
    /// Weighs `read` (the file's members, or why not) against the last read and the
    /// list in force (`current`, sorted by name).
    pub fn handle_read(
        &mut self,
        read: Result<Vec<Member>, MembersFileError>,
        current: &[Member],
    ) -> FileRead {
        let read = read
            .map(|mut m| {
                m.sort_by(|a, b| a.name.cmp(&b.name));
                m
            })
            .map_err(|e| e.to_string());
        if self.last.as_ref() == Some(&read) {
            return FileRead::Unchanged;
        }
        self.last = Some(read.clone());
        match read {
            Ok(members) if members == current => FileRead::Good(None),
            Ok(members) => FileRead::Good(Some(members)),
            Err(e) => FileRead::Failed(e),
        }
    }
}

/// Reads `settings.path` now and every `settings.poll` until `shutdown`, putting each
/// changed list in force (the health probes, the hash bucket and DHCP follow the
/// roster). `me` is this member's name, for the warning when the file leaves it out.
pub async fn follow_file(
    roster: Arc<Roster>,
    live: Arc<LiveSet>,
    settings: FileMembers,
    me: Option<String>,
    shutdown: CancellationToken,
) {
    use crate::clock::unix_now;
    let mut watch = FileWatch::default();
    let mut failing = roster.status_now().stale_since.is_some();
    loop {
        let path = settings.path.clone();
        // A small file, but the read may block on a slow or network file system.
        let read = tokio::task::spawn_blocking(move || read_members_file(&path))
            .await
            .unwrap_or_else(|e| {
                Err(MembersFileError::Read {
                    path: settings.path.clone(),
                    reason: e.to_string(),
                })
            });
        match watch.handle_read(read, &roster.current().members) {
            FileRead::Unchanged => {}
            FileRead::Failed(error) => {
                warn!(file = %settings.path.display(), %error, "members file not read; the last member list stays in force");
                roster.read_failed(unix_now(), error);
                failing = true;
            }
            FileRead::Good(changed) => {
                if failing {
                    info!(file = %settings.path.display(), "members file read again");
                    failing = false;
                }
                roster.read_ok(unix_now(), Vec::new());
                if let Some(view) = changed.and_then(|m| roster.replace(m)) {
                    let names = view.list.names();
                    // New members count as alive until their probes say otherwise.
                    live.sync(names);
                    warn_if_left_out(&settings.path, me.as_deref(), names);
                    info!(members = ?names, generation = view.generation, "member list from the members file");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(settings.poll) => {}
        }
    }
}

/// Warns when the list leaves this member out: it then hands out no fresh address and
/// is responsible for no machine until the file lists it.
pub fn warn_if_left_out(path: &Path, me: Option<&str>, names: &[String]) {
    if let Some(me) = me.filter(|me| !names.iter().any(|n| n == me)) {
        warn!(member = %me, file = %path.display(), "the members file does not list this member: it hands out no fresh address until it does");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn member(name: &str) -> Member {
        Member {
            name: name.into(),
            http_url: format!("http://192.0.2.1/{name}"),
            conductor: None,
            conductor_url: None,
        }
    }

    fn bad(reason: &str) -> Result<Vec<Member>, MembersFileError> {
        Err(MembersFileError::Read {
            path: PathBuf::from("/m.toml"),
            reason: reason.into(),
        })
    }

    #[test]
    fn changes_are_put_in_force_and_each_error_is_reported_once() {
        let mut w = FileWatch::default();
        let ab = vec![member("a"), member("b")];
        // The list read at start, in another order: good, nothing to replace.
        let ba = vec![member("b"), member("a")];
        assert_eq!(w.handle_read(Ok(ba), &ab), FileRead::Good(None));
        assert_eq!(w.handle_read(Ok(ab.clone()), &ab), FileRead::Unchanged);
        let abc = vec![member("a"), member("b"), member("c")];
        assert_eq!(
            w.handle_read(Ok(abc.clone()), &ab),
            FileRead::Good(Some(abc.clone()))
        );
        let e = "members file /m.toml: No such file or directory (os error 2)";
        assert_eq!(
            w.handle_read(bad("No such file or directory (os error 2)"), &abc),
            FileRead::Failed(e.into())
        );
        assert_eq!(
            w.handle_read(bad("No such file or directory (os error 2)"), &abc),
            FileRead::Unchanged
        );
        assert!(matches!(
            w.handle_read(bad("Permission denied"), &abc),
            FileRead::Failed(_)
        ));
        // Fixed with the list in force: good again (the roster stops being stale).
        assert_eq!(w.handle_read(Ok(abc.clone()), &abc), FileRead::Good(None));
    }
}
