//! `[tftp]`: where the TFTP listener runs, what it serves and its limits.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::issues::{ConfigIssue, Issues};
use crate::confine::confine;

/// RFC 2348 §2: valid blksize values.
pub const BLKSIZE_RANGE: std::ops::RangeInclusive<u64> = 8..=65464;
/// RFC 7440 §3: valid windowsize values.
pub const WINDOWSIZE_RANGE: std::ops::RangeInclusive<u64> = 1..=65535;

/// The `[tftp]` section as written in the TOML file; every key is optional and
/// defaults to [`TftpSettings::default`].
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawTftp {
    /// Whether `shardboot serve` starts the TFTP listener (default true).
    pub enabled: Option<bool>,
    /// Listening address (default `0.0.0.0:69`).
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
    /// [`TftpSettings::max_timeout`] in seconds.
    pub max_timeout_secs: Option<u64>,
    /// [`TftpSettings::transfer_deadline`] in seconds.
    pub transfer_deadline_secs: Option<u64>,
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

/// `[tftp]` after validation: where the listener runs and what it serves.
#[derive(Debug, Clone)]
pub struct TftpListener {
    /// Whether `serve` starts it.
    pub enabled: bool,
    /// Listening address.
    pub listen: SocketAddr,
    /// Root, aliases, limits.
    pub settings: TftpSettings,
}

/// Validated TFTP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TftpSettings {
    /// Directory served read-only.
    pub root: PathBuf,
    /// Requested name → file name below the root (e.g. Metal3's `snponly-x86_64.efi` →
    /// `snponly.efi`). Keys and values are stored normalised (see
    /// [`confine`](crate::confine::confine)).
    pub aliases: BTreeMap<String, String>,
    /// Directories a symlink in the root may point into (see the symlink rule of
    /// `tftp::path`).
    pub link_targets: Vec<PathBuf>,
    /// Concurrent transfers, all clients together.
    pub max_transfers: usize,
    /// Concurrent transfers per client IP address.
    pub max_per_client: usize,
    /// Largest file served, in octets.
    pub max_file_size: u64,
    /// Retransmissions without progress before a transfer is abandoned. The wait
    /// doubles after each one (RFC 1123 §4.2.3.2), capped at the transfer's
    /// `MAX_BACKOFF`: the defaults give up after ~31 s.
    pub retries: u32,
    /// Retransmission timeout when the client does not negotiate one (RFC 2349).
    pub timeout: Duration,
    /// Largest `timeout` option a client may negotiate (RFC 2349 allows 1-255 s); a
    /// larger one is ignored, as RFC 2347 §4 allows, so the OACK never names a value we
    /// do not use. Keeps a silent client from holding a slot for minutes.
    pub max_timeout: Duration,
    /// Longest one transfer may take, progressing or not; then it ends with an ERROR
    /// packet. The default leaves a 1 MB iPXE binary in lockstep (512-octet blocks) an
    /// RTT of ~50 ms.
    pub transfer_deadline: Duration,
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
            max_timeout: Duration::from_secs(5),
            transfer_deadline: Duration::from_secs(120),
            max_blksize: 1468,
            max_windowsize: 64,
            single_port: false,
            cache_bytes: 128 << 20,
            max_filename_len: 255,
        }
    }
}

/// Validates `[tftp]`: the listener keys here, the rest through [`TftpSettings`]'s
/// `TryFrom` (its default stands in when that fails, so the other sections are still
/// checked).
pub(super) fn validate(mut raw: RawTftp, issues: &mut Issues) -> TftpListener {
    let enabled = raw.enabled.take().unwrap_or(true);
    let listen = match raw.listen.take().as_deref().unwrap_or("0.0.0.0:69").parse() {
        Ok(a) => a,
        Err(_) => {
            issues.add("tftp.listen", "must be an address:port such as 0.0.0.0:69");
            SocketAddr::from(([0, 0, 0, 0], 69))
        }
    };
    let settings = TftpSettings::try_from(raw).unwrap_or_else(|issue| {
        issues.push(issue);
        TftpSettings::default()
    });
    TftpListener {
        enabled,
        listen,
        settings,
    }
}

impl TryFrom<RawTftp> for TftpSettings {
    /// The first invalid key (`tftp.<key>: <reason>`). Later keys are checked against
    /// earlier ones (`max_per_client` against `max_transfers`), so only the first
    /// problem is reported: a second could merely echo it.
    type Error = ConfigIssue;

    fn try_from(raw: RawTftp) -> Result<Self, ConfigIssue> {
        let mut issues = Issues::default();
        let settings = settings(raw, &mut issues);
        // `finish` fails only with at least one issue; the first is kept.
        issues
            .finish()
            .map(|()| settings)
            .map_err(|mut all| all.swap_remove(0))
    }
}

fn settings(raw: RawTftp, issues: &mut Issues) -> TftpSettings {
    let d = TftpSettings::default();
    let root = raw.root.unwrap_or(d.root);
    if !root.is_absolute() {
        issues.add("tftp.root", "must be an absolute path");
    }
    let link_targets = raw.link_targets.unwrap_or(d.link_targets);
    if let Some(p) = link_targets.iter().find(|p| !p.is_absolute()) {
        issues.add(
            "tftp.link_targets",
            format!("{} is not an absolute path", p.display()),
        );
    }
    let max_filename_len = issues.in_range(
        "tftp.max_filename_len",
        raw.max_filename_len.unwrap_or(d.max_filename_len),
        1,
        4096,
    );
    let mut aliases = BTreeMap::new();
    let root_str = root.to_string_lossy().into_owned();
    for (from, to) in raw.aliases.unwrap_or(d.aliases) {
        // Normalised with the rule requests get, so a request matches its alias
        // however the firmware spells the name.
        let key = format!("tftp.aliases.{from:?}");
        match (
            confine(from.as_bytes(), "", max_filename_len),
            confine(to.as_bytes(), &root_str, max_filename_len),
        ) {
            (Ok(from_n), Ok(to_n)) => {
                aliases.insert(from_n, to_n);
            }
            (Err(e), _) => issues.add(key, format!("invalid name: {e}")),
            (_, Err(e)) => issues.add(key, format!("invalid target: {e}")),
        }
    }
    let max_blksize = issues.in_range(
        "tftp.max_blksize",
        raw.max_blksize.unwrap_or(u64::from(d.max_blksize)),
        *BLKSIZE_RANGE.start(),
        *BLKSIZE_RANGE.end(),
    ) as u16;
    let max_windowsize = issues.in_range(
        "tftp.max_windowsize",
        raw.max_windowsize.unwrap_or(u64::from(d.max_windowsize)),
        *WINDOWSIZE_RANGE.start(),
        *WINDOWSIZE_RANGE.end(),
    ) as u16;
    let max_transfers = issues.in_range(
        "tftp.max_transfers",
        raw.max_transfers.unwrap_or(d.max_transfers),
        1,
        100_000,
    );
    let max_per_client = issues.in_range(
        "tftp.max_per_client",
        raw.max_per_client.unwrap_or(d.max_per_client),
        1,
        max_transfers,
    );
    let max_file_size = issues.in_range(
        "tftp.max_file_size",
        raw.max_file_size.unwrap_or(d.max_file_size),
        1,
        4 << 30,
    );
    let retries = issues.in_range("tftp.retries", raw.retries.unwrap_or(d.retries), 1, 100);
    let timeout_ms = issues.in_range(
        "tftp.timeout_ms",
        raw.timeout_ms.unwrap_or(d.timeout.as_millis() as u64),
        10,
        255_000,
    );
    let max_timeout_secs = issues.in_range(
        "tftp.max_timeout_secs",
        raw.max_timeout_secs.unwrap_or(d.max_timeout.as_secs()),
        1,
        255,
    );
    let transfer_deadline_secs = issues.in_range(
        "tftp.transfer_deadline_secs",
        raw.transfer_deadline_secs
            .unwrap_or(d.transfer_deadline.as_secs()),
        1,
        86_400,
    );
    TftpSettings {
        root,
        aliases,
        link_targets,
        max_transfers,
        max_per_client,
        max_file_size,
        retries,
        timeout: Duration::from_millis(timeout_ms),
        max_timeout: Duration::from_secs(max_timeout_secs),
        transfer_deadline: Duration::from_secs(transfer_deadline_secs),
        max_blksize,
        max_windowsize,
        single_port: raw.single_port.unwrap_or(d.single_port),
        cache_bytes: raw.cache_bytes.unwrap_or(d.cache_bytes),
        max_filename_len,
    }
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
            (
                "[tftp]\nmax_timeout_secs = 256",
                "tftp.max_timeout_secs: must be between 1 and 255",
            ),
            (
                "[tftp]\ntransfer_deadline_secs = 0",
                "tftp.transfer_deadline_secs: must be between 1 and 86400",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn only_the_first_problem_is_reported() {
        let e = parse("[tftp]\nroot = \"rel\"\nretries = 0").unwrap_err();
        assert_eq!(e, "tftp.root: must be an absolute path");
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
}
