//! The TFTP root as every route into it sees it: TFTP itself and the HTTP file route
//! (`/ipxe/{file}`, UEFI HTTP Boot of iPXE). Both serve the same iPXE binaries, so they
//! share one [`FileCache`] and each binary is read and held once.

use std::sync::Arc;

use super::cache::FileCache;
use super::path::{self, Opened, Refusal};
use crate::config::TftpSettings;

/// Settings (root, aliases, symlink rule, limits) and the one file cache of the root.
#[derive(Debug)]
pub struct FileRoot {
    /// Root, aliases, symlink rule, limits.
    pub settings: Arc<TftpSettings>,
    /// Cache of file contents, shared by every route into the root.
    pub cache: FileCache,
    /// The root as text, which [`path::confine`] strips from absolute names.
    root_prefix: String,
}

impl FileRoot {
    /// A file root with an empty cache sized by the settings.
    pub fn new(settings: impl Into<Arc<TftpSettings>>) -> Arc<Self> {
        let settings = settings.into();
        Arc::new(Self {
            cache: FileCache::new(settings.cache_bytes),
            root_prefix: settings.root.to_string_lossy().into_owned(),
            settings,
        })
    }

    /// Confines a requested name (request data), applies the aliases and opens the file
    /// below the root. Returns the resolved name, safe to log, and the opened file.
    /// Blocking (file system).
    pub fn open(&self, requested: &[u8]) -> Result<(String, Opened), Refusal> {
        let st = &self.settings;
        let rel = path::confine(requested, &self.root_prefix, st.max_filename_len)?;
        let target = st.aliases.get(&rel).cloned().unwrap_or(rel);
        let opened = path::open_confined(&st.root, &target, &st.link_targets)?;
        Ok((target, opened))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tftp::cache::Source;

    #[test]
    fn absolute_and_aliased_names_resolve_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("snponly.efi"), b"snp").unwrap();
        let mut settings = TftpSettings {
            root: dir.path().to_owned(),
            ..Default::default()
        };
        settings
            .aliases
            .insert("boot.efi".into(), "snponly.efi".into());
        let root = FileRoot::new(settings);
        let absolute = format!("{}/snponly.efi", dir.path().display());
        for name in [absolute.as_str(), "/snponly.efi", "boot.efi"] {
            let (target, opened) = root.open(name.as_bytes()).unwrap();
            assert_eq!(target, "snponly.efi", "{name}");
            assert_eq!(opened.meta.len(), 3);
        }
        assert_eq!(
            root.open(b"../etc/passwd").unwrap_err(),
            Refusal::Name(crate::confine::BadName::DotDot)
        );
    }

    #[test]
    fn every_open_shares_one_cache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ipxe.efi"), [7u8; 100]).unwrap();
        let root = FileRoot::new(TftpSettings {
            root: dir.path().to_owned(),
            ..Default::default()
        });
        let load = || {
            root.cache
                .load(root.open(b"ipxe.efi").unwrap().1)
                .unwrap()
                .1
        };
        assert_eq!(load(), Source::Miss);
        assert_eq!(load(), Source::Hit);
        assert_eq!(root.cache.bytes(), 100);
    }
}
