//! Whether the boot files DHCP hands out can be served: a `check-config` report that
//! looks at the file system, so it lives here and not in `config`.

use super::path::{confine, open_confined};
use crate::config::TftpSettings;

/// Warnings for boot file names (as DHCP would hand them out) that this server could
/// not serve right now: missing, refused by confinement, or too large. For
/// `check-config`; a missing file is never fatal at run time.
pub fn check_boot_files(settings: &TftpSettings, names: &[&str]) -> Vec<String> {
    let mut warnings = Vec::new();
    if !settings.root.is_dir() {
        warnings.push(format!(
            "tftp.root: {} is not a directory",
            settings.root.display()
        ));
    }
    let root_str = settings.root.to_string_lossy();
    for name in names {
        let rel = match confine(name.as_bytes(), &root_str, settings.max_filename_len) {
            Ok(r) => r,
            Err(e) => {
                warnings.push(format!("tftp boot file {name:?}: refused ({e})"));
                continue;
            }
        };
        let target = settings.aliases.get(&rel).cloned().unwrap_or(rel);
        match open_confined(&settings.root, &target, &settings.link_targets) {
            Ok(o) if o.meta.len() > settings.max_file_size => warnings.push(format!(
                "tftp boot file {name:?}: {} octets exceeds tftp.max_file_size",
                o.meta.len()
            )),
            Ok(_) => {}
            Err(e) => warnings.push(format!(
                "tftp boot file {name:?} ({}): {e}",
                settings.root.join(&target).display()
            )),
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_boot_files_warns_for_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("snponly.efi"), b"x").unwrap();
        let s = TftpSettings {
            root: dir.path().to_owned(),
            ..TftpSettings::default()
        };
        let w = check_boot_files(
            &s,
            &["snponly.efi", "snponly-x86_64.efi", "undionly.kpxe", "../x"],
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("undionly.kpxe") && w[0].contains("file not found"));
        assert!(w[1].contains("refused"));
    }
}
