//! Files that hold secrets (operator tokens, the member secret): a file anyone but its
//! owner can read is a secret those users hold, so its mode is checked and warned about.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Whether a file mode lets anyone but the owner read or write the file.
pub fn too_open(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// The warning for the secret file of config key `key` when its permissions are wider
/// than 0600 (`check-config` prints it, `serve` logs it). None when the file cannot be
/// read (its loader reports that) or is private. `holds` says what a reader gets.
pub fn mode_warning(key: &str, path: &Path, holds: &str) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    too_open(mode).then(|| {
        format!(
            "{key} {}: mode {mode:04o} is wider than 0600; other local users can read {holds}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_owner_only_modes_are_private() {
        for mode in [0o600, 0o400, 0o700, 0o4600] {
            assert!(!too_open(mode & 0o7777), "{mode:o}");
        }
        for mode in [0o644, 0o640, 0o604, 0o660, 0o666] {
            assert!(too_open(mode), "{mode:o}");
        }
    }

    #[test]
    fn a_world_readable_file_is_named_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = mode_warning("a.key", &f, "it").unwrap();
        assert!(w.starts_with("a.key ") && w.contains("0644"), "{w}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(mode_warning("a.key", &f, "it"), None);
        assert_eq!(mode_warning("a.key", &dir.path().join("none"), "it"), None);
    }
}
