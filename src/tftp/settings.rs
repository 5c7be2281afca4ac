//! TFTP configuration: the raw `[tftp]` TOML section and the validated settings.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::options::{BLKSIZE_RANGE, WINDOWSIZE_RANGE};
use super::path::{self, open_confined};

/// Validated TFTP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TftpSettings {
    /// Directory served read-only.
    pub root: PathBuf,
    /// Requested name → file name below the root (e.g. Metal3's `snponly-x86_64.efi` →
    /// `snponly.efi`). Keys and values are stored normalised (see [`path::confine`]).
    pub aliases: BTreeMap<String, String>,
    /// Directories a symlink in the root may point into (see the symlink rule in
    /// [`path`]).
    pub link_targets: Vec<PathBuf>,
    /// Concurrent transfers, all clients together.
    pub max_transfers: usize,
    /// Concurrent transfers per client IP address.
    pub max_per_client: usize,
    /// Largest file served, in octets.
    pub max_file_size: u64,
    /// Retransmissions without progress before a transfer is abandoned. The wait
    /// doubles after each one (RFC 1123 §4.2.3.2), capped at
    /// [`MAX_BACKOFF`](super::transfer::MAX_BACKOFF): the defaults give up after ~31 s.
    pub retries: u32,
    /// Retransmission timeout when the client does not negotiate one (RFC 2349).
    pub timeout: Duration,
    /// Largest blksize agreed (RFC 2348). 1468 fills a 1500-octet Ethernet frame.
    pub max_blksize: u16,
    /// Largest windowsize agreed (RFC 7440).
    pub max_windowsize: u16,
    /// Serve every transfer from the listening socket (port 69) instead of a fresh
    /// ephemeral port per transfer; for NAT and firewalls that only pass port 69.
    pub single_port: bool,
    /// Upper bound on cached file contents, in octets.
    pub cache_bytes: u64,
    /// Longest requested file name accepted, in octets.
    pub max_filename_len: usize,
}

impl Default for TftpSettings {
    fn default() -> Self {
        // Metal3's ironic-image names its iPXE binaries per architecture; Debian's
        // `ipxe` package ships them without the suffix.
        let aliases = [
            ("snponly-x86_64.efi", "snponly.efi"),
            ("ipxe-x86_64.efi", "ipxe.efi"),
            ("undionly-x86_64.kpxe", "undionly.kpxe"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        TftpSettings {
            root: PathBuf::from("/usr/lib/ipxe"),
            aliases,
            link_targets: vec![PathBuf::from("/boot")],
            max_transfers: 512,
            max_per_client: 8,
            max_file_size: 64 << 20,
            retries: 5,
            timeout: Duration::from_secs(1),
            max_blksize: 1468,
            max_windowsize: 64,
            single_port: false,
            cache_bytes: 128 << 20,
            max_filename_len: 255,
        }
    }
}

/// The `[tftp]` section as written in the TOML file; every key is optional and
/// defaults to [`TftpSettings::default`].
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawTftp {
    /// Whether `shardboot serve` starts the TFTP listener (read by `config`, default true).
    pub enabled: Option<bool>,
    /// Listening address (read by `config`, default `0.0.0.0:69`).
    pub listen: Option<String>,
    /// See [`TftpSettings::root`].
    pub root: Option<PathBuf>,
    /// Replaces the default alias map when present.
    pub aliases: Option<BTreeMap<String, String>>,
    /// See [`TftpSettings::link_targets`].
    pub link_targets: Option<Vec<PathBuf>>,
    /// See [`TftpSettings::max_transfers`].
    pub max_transfers: Option<usize>,
    /// See [`TftpSettings::max_per_client`].
    pub max_per_client: Option<usize>,
    /// See [`TftpSettings::max_file_size`].
    pub max_file_size: Option<u64>,
    /// See [`TftpSettings::retries`].
    pub retries: Option<u32>,
    /// [`TftpSettings::timeout`] in milliseconds.
    pub timeout_ms: Option<u64>,
    /// See [`TftpSettings::max_blksize`].
    pub max_blksize: Option<u64>,
    /// See [`TftpSettings::max_windowsize`].
    pub max_windowsize: Option<u64>,
    /// See [`TftpSettings::single_port`].
    pub single_port: Option<bool>,
    /// See [`TftpSettings::cache_bytes`].
    pub cache_bytes: Option<u64>,
    /// See [`TftpSettings::max_filename_len`].
    pub max_filename_len: Option<usize>,
}

/// A setting that failed validation; displays as `tftp.<key>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tftp.{key}: {reason}")]
pub struct SettingsError {
    /// Key below `[tftp]`, e.g. `max_blksize` or `aliases."a.efi"`.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

fn err(key: impl Into<String>, reason: impl Into<String>) -> SettingsError {
    SettingsError {
        key: key.into(),
        reason: reason.into(),
    }
}

fn ranged<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    value: Option<T>,
    default: T,
    lo: T,
    hi: T,
) -> Result<T, SettingsError> {
    let v = value.unwrap_or(default);
    if v < lo || v > hi {
        return Err(err(key, format!("must be between {lo} and {hi}")));
    }
    Ok(v)
}

impl TryFrom<RawTftp> for TftpSettings {
    type Error = SettingsError;

    fn try_from(raw: RawTftp) -> Result<Self, SettingsError> {
        let d = TftpSettings::default();
        let root = raw.root.unwrap_or(d.root);
        if !root.is_absolute() {
            return Err(err("root", "must be an absolute path"));
        }
        let link_targets = raw.link_targets.unwrap_or(d.link_targets);
        if let Some(p) = link_targets.iter().find(|p| !p.is_absolute()) {
            return Err(err(
                "link_targets",
                format!("{} is not an absolute path", p.display()),
            ));
        }
        let max_filename_len = ranged(
            "max_filename_len",
            raw.max_filename_len,
            d.max_filename_len,
            1,
            4096,
        )?;
        let mut aliases = BTreeMap::new();
        let root_str = root.to_string_lossy().into_owned();
        for (from, to) in raw.aliases.unwrap_or(d.aliases) {
            let key = format!("aliases.{from:?}");
            let from_n = path::confine(from.as_bytes(), "", max_filename_len)
                .map_err(|e| err(&key, format!("invalid name: {e}")))?;
            let to_n = path::confine(to.as_bytes(), &root_str, max_filename_len)
                .map_err(|e| err(&key, format!("invalid target: {e}")))?;
            aliases.insert(from_n, to_n);
        }
        let max_blksize = ranged(
            "max_blksize",
            raw.max_blksize,
            u64::from(d.max_blksize),
            *BLKSIZE_RANGE.start(),
            *BLKSIZE_RANGE.end(),
        )? as u16;
        let max_windowsize = ranged(
            "max_windowsize",
            raw.max_windowsize,
            u64::from(d.max_windowsize),
            *WINDOWSIZE_RANGE.start(),
            *WINDOWSIZE_RANGE.end(),
        )? as u16;
        let max_transfers = ranged(
            "max_transfers",
            raw.max_transfers,
            d.max_transfers,
            1,
            100_000,
        )?;
        let max_per_client = ranged(
            "max_per_client",
            raw.max_per_client,
            d.max_per_client,
            1,
            max_transfers,
        )?;
        let max_file_size = ranged(
            "max_file_size",
            raw.max_file_size,
            d.max_file_size,
            1,
            4 << 30,
        )?;
        let retries = ranged("retries", raw.retries, d.retries, 1, 100)?;
        let timeout_ms = ranged(
            "timeout_ms",
            raw.timeout_ms,
            d.timeout.as_millis() as u64,
            10,
            255_000,
        )?;
        let cache_bytes = raw.cache_bytes.unwrap_or(d.cache_bytes);
        Ok(TftpSettings {
            root,
            aliases,
            link_targets,
            max_transfers,
            max_per_client,
            max_file_size,
            retries,
            timeout: Duration::from_millis(timeout_ms),
            max_blksize,
            max_windowsize,
            single_port: raw.single_port.unwrap_or(d.single_port),
            cache_bytes,
            max_filename_len,
        })
    }
}

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
        let rel = match path::confine(name.as_bytes(), &root_str, settings.max_filename_len) {
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

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        tftp: RawTftp,
    }

    fn parse(toml_text: &str) -> Result<TftpSettings, String> {
        let f: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        TftpSettings::try_from(f.tftp).map_err(|e| e.to_string())
    }

    #[test]
    fn empty_section_is_default() {
        assert_eq!(parse("[tftp]\n").unwrap(), TftpSettings::default());
    }

    #[test]
    fn reports_key_and_reason() {
        let cases = [
            (
                "[tftp]\nmax_blksize = 70000",
                "tftp.max_blksize: must be between 8 and 65464",
            ),
            (
                "[tftp]\nmax_windowsize = 0",
                "tftp.max_windowsize: must be between 1 and 65535",
            ),
            (
                "[tftp]\nroot = \"rel\"",
                "tftp.root: must be an absolute path",
            ),
            (
                "[tftp]\nmax_transfers = 4\nmax_per_client = 5",
                "tftp.max_per_client: must be between 1 and 4",
            ),
            (
                "[tftp.aliases]\n\"a.efi\" = \"../etc/passwd\"",
                "tftp.aliases.\"a.efi\": invalid target: parent directory component",
            ),
            (
                "[tftp]\nretries = 0",
                "tftp.retries: must be between 1 and 100",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn unknown_key_is_rejected() {
        let e = parse("[tftp]\nblksize = 1").unwrap_err();
        assert!(e.contains("unknown field `blksize`"), "{e}");
    }

    #[test]
    fn aliases_are_normalised() {
        let s =
            parse("[tftp]\nroot = \"/r\"\n[tftp.aliases]\n\"/a.efi\" = \"/r/b/c.efi\"").unwrap();
        assert_eq!(s.aliases.get("a.efi").map(String::as_str), Some("b/c.efi"));
    }

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
