//! `[boot]`: which file or URL a PXE, iPXE or HTTP Boot client is told to load.

use std::net::Ipv4Addr;

use serde::Deserialize;

use super::issues::Issues;

/// Longest boot file name that fits the BOOTP `file` field with its NUL (RFC 2131 §2).
const MAX_BOOT_FILE: usize = 127;

/// `[boot]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBoot {
    tftp_server: Option<String>,
    http_url: Option<String>,
    ipxe_script: Option<String>,
    bios: Option<String>,
    uefi_ia32: Option<String>,
    uefi_x64: Option<String>,
    uefi_arm64: Option<String>,
    http_x64: Option<String>,
    http_arm64: Option<String>,
}

/// `[boot]` after validation: what a PXE or iPXE client is told to load.
#[derive(Debug, Clone)]
pub struct BootSettings {
    /// next-server / option 66; `None` means the address of the answering interface.
    pub tftp_server: Option<Ipv4Addr>,
    /// Base URL of shardboot's HTTP listener; `None` means `http://<interface address>:8080`.
    pub http_url: Option<String>,
    /// Path of the first-stage iPXE script below `http_url`.
    pub ipxe_script: String,
    /// TFTP file for legacy BIOS PXE (arch 0).
    pub bios: String,
    /// TFTP file for 32-bit x86 UEFI (arch 6).
    pub uefi_ia32: String,
    /// TFTP file for x86-64 UEFI (arch 7 and 9).
    pub uefi_x64: String,
    /// TFTP file for arm64 UEFI (arch 11).
    pub uefi_arm64: String,
    /// File (below `http_url`/ipxe/) or absolute URL for x86-64 UEFI HTTP Boot (arch 16).
    pub http_x64: String,
    /// File or absolute URL for arm64 UEFI HTTP Boot (arch 19).
    pub http_arm64: String,
}

/// A boot file name or URL is placed into DHCP replies verbatim, so it must be short
/// printable ASCII with no quoting characters.
pub(super) fn check_boot_value(key: &str, value: &str, issues: &mut Issues) {
    if value.is_empty() || value.len() > MAX_BOOT_FILE {
        issues.add(key, format!("must be 1 to {MAX_BOOT_FILE} characters"));
    } else if !value.bytes().all(|b| b.is_ascii_graphic()) || value.contains(['"', '\'', '\\']) {
        issues.add(
            key,
            "must be printable ASCII without spaces, quotes or backslashes",
        );
    }
}

/// Validates `[boot]`.
pub(super) fn validate(raw: RawBoot, issues: &mut Issues) -> BootSettings {
    let tftp_server = issues.opt_ip("boot.tftp_server", &raw.tftp_server);
    let http_url = raw.http_url.map(|u| u.trim_end_matches('/').to_string());
    if let Some(u) = &http_url {
        check_boot_value("boot.http_url", u, issues);
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            issues.add("boot.http_url", "must start with http:// or https://");
        }
    }
    let mut file = |key: &str, value: Option<String>, default: &str| {
        let v = value.unwrap_or_else(|| default.to_string());
        check_boot_value(&format!("boot.{key}"), &v, issues);
        v
    };
    let settings = BootSettings {
        ipxe_script: file("ipxe_script", raw.ipxe_script, "boot.ipxe"),
        bios: file("bios", raw.bios, "undionly.kpxe"),
        uefi_ia32: file("uefi_ia32", raw.uefi_ia32, "ipxe-ia32.efi"),
        uefi_x64: file("uefi_x64", raw.uefi_x64, "snponly.efi"),
        uefi_arm64: file("uefi_arm64", raw.uefi_arm64, "snponly-arm64.efi"),
        http_x64: file("http_x64", raw.http_x64, "snponly.efi"),
        http_arm64: file("http_arm64", raw.http_arm64, "snponly-arm64.efi"),
        tftp_server,
        http_url,
    };
    check_composed_urls(&settings, issues);
    settings
}

/// The URLs iPXE and UEFI HTTP Boot get are composed from `http_url` and a file name;
/// each must fit one option 67 (255 octets, RFC 2132 §2): a longer one would have to
/// be split (RFC 3396), which not all firmware reads.
fn check_composed_urls(b: &BootSettings, issues: &mut Issues) {
    const MAX_OPTION: usize = 255;
    // Without http_url the base is http://<interface address>:<port>.
    let base = b
        .http_url
        .as_ref()
        .map_or("http://255.255.255.255:65535".len(), String::len);
    let composed = [
        (
            "boot.ipxe_script",
            base + 1 + b.ipxe_script.len(),
            &b.ipxe_script,
        ),
        (
            "boot.http_x64",
            base + "/ipxe/".len() + b.http_x64.len(),
            &b.http_x64,
        ),
        (
            "boot.http_arm64",
            base + "/ipxe/".len() + b.http_arm64.len(),
            &b.http_arm64,
        ),
    ];
    for (key, len, file) in composed {
        if len > MAX_OPTION && !file.contains("://") {
            issues.add(
                key,
                format!(
                    "with boot.http_url its URL is {len} octets; DHCP option 67 holds {MAX_OPTION}"
                ),
            );
        }
    }
}
