//! The inventory file: a TOML table of MAC → member name or conductor host name, for
//! sites that know their machines' owners without asking Ironic. Reloaded when its
//! modification time or size changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::mac::MacAddr;

/// An inventory file that cannot be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// I/O error.
    #[error("inventory {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a TOML table of strings keyed by MAC.
    #[error("inventory {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Parses an inventory document: `"52:54:00:12:34:56" = "conductor-a"` per line.
pub fn parse(text: &str) -> Result<HashMap<MacAddr, String>, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out = HashMap::with_capacity(table.len());
    for (k, v) in table {
        let mac: MacAddr = k.parse().map_err(|e| format!("key {k:?}: {e}"))?;
        let owner = v
            .as_str()
            .ok_or_else(|| format!("value for {mac} must be a string"))?;
        out.insert(mac, owner.to_string());
    }
    Ok(out)
}

struct Loaded {
    stamp: Option<(SystemTime, u64)>,
    entries: HashMap<MacAddr, String>,
}

/// The inventory, reloaded on change. A file that fails to reload keeps the last good
/// contents (and the error is returned to be logged).
pub struct Inventory {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Inventory {
    /// An inventory read from `path` on first use.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded {
                stamp: None,
                entries: HashMap::new(),
            }),
        }
    }

    /// The owner recorded for `mac`, reloading the file first if it changed.
    pub fn lookup(&self, mac: &MacAddr) -> (Option<String>, Option<InventoryError>) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let err = self.refresh(&mut loaded).err();
        (loaded.entries.get(mac).cloned(), err)
    }

    fn refresh(&self, loaded: &mut Loaded) -> Result<(), InventoryError> {
        let read_err = |source| InventoryError::Read {
            path: self.path.clone(),
            source,
        };
        let meta = std::fs::metadata(&self.path).map_err(read_err)?;
        let stamp = Some((meta.modified().map_err(read_err)?, meta.len()));
        if stamp == loaded.stamp {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path).map_err(read_err)?;
        loaded.entries = parse(&text).map_err(|reason| InventoryError::Parse {
            path: self.path.clone(),
            reason,
        })?;
        loaded.stamp = stamp;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_mac_form_and_refuses_junk() {
        let m = parse("\"52-54-00-12-34-56\" = \"a\"\n\"525400123457\" = \"127.0.0.2:8090\"\n")
            .unwrap();
        assert_eq!(m[&"52:54:00:12:34:56".parse().unwrap()], "a");
        assert_eq!(m[&"52:54:00:12:34:57".parse().unwrap()], "127.0.0.2:8090");
        assert!(parse("\"nope\" = \"a\"").is_err());
        assert!(parse("\"52:54:00:12:34:56\" = 3").is_err());
    }

    #[test]
    fn reloads_when_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inv.toml");
        std::fs::write(&path, "\"52:54:00:00:00:01\" = \"a\"\n").unwrap();
        let inv = Inventory::new(&path);
        let mac: MacAddr = "52:54:00:00:00:01".parse().unwrap();
        assert_eq!(inv.lookup(&mac).0.as_deref(), Some("a"));
        std::fs::write(&path, "\"52:54:00:00:00:01\" = \"bb\"\n").unwrap();
        assert_eq!(inv.lookup(&mac).0.as_deref(), Some("bb"));
        std::fs::write(&path, "garbage [").unwrap();
        let (kept, err) = inv.lookup(&mac);
        assert_eq!(kept.as_deref(), Some("bb"), "last good contents kept");
        assert!(err.is_some());
    }
}
