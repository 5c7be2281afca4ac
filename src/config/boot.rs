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
    https_url: Option<String>,
    ipxe_tls: Option<bool>,
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
    /// Base URL of shardboot's TLS boot listener for the site's own iPXE build; `None`
    /// means `https://<interface address>:<https_port>`.
    pub https_url: Option<String>,
    /// The port of `http.tls_listen` (8084, ironic-image's `IPXE_TLS_PORT`, without one).
    pub https_port: u16,
    /// iPXE boots over TLS (`boot.ipxe_tls`; on by default with `http.tls_listen`): the
    /// site's iPXE build (user class [`crate::client_class::TLS_USER_CLASS`]) gets
    /// `https_url`, and any other iPXE (a NIC's own ROM, a stock build that does not
    /// trust the site's CA) is sent that build over TFTP first, as PXE firmware is.
    pub ipxe_tls: bool,
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

/// Validates `[boot]`; the second value is `boot.ipxe_tls` as written, settled by
/// [`apply_http`] once `[http]` is known.
pub(super) fn validate(raw: RawBoot, issues: &mut Issues) -> (BootSettings, Option<bool>) {
    let tftp_server = issues.opt_ip("boot.tftp_server", &raw.tftp_server);
    let http_url = raw.http_url.map(|u| u.trim_end_matches('/').to_string());
    if let Some(u) = &http_url {
        check_boot_value("boot.http_url", u, issues);
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            issues.add("boot.http_url", "must start with http:// or https://");
        }
    }
    let https_url = raw.https_url.map(|u| u.trim_end_matches('/').to_string());
    if let Some(u) = &https_url {
        check_boot_value("boot.https_url", u, issues);
        // Only TLS: the firmware that asks for it trusts the site's CA and nothing else.
        if !u.starts_with("https://") {
            issues.add("boot.https_url", "must start with https://");
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
        https_url,
        https_port: 8084,
        ipxe_tls: false,
    };
    check_composed_urls(&settings, issues);
    (settings, raw.ipxe_tls)
}

/// Settles what `[boot]` takes from `[http]`: the TLS port, and `ipxe_tls` (on by
/// default when `http.tls_listen` is set). iPXE sent to TLS needs somewhere to go: this
/// member's TLS listener or a configured `boot.https_url`.
pub(super) fn apply_http(
    boot: &mut BootSettings,
    ipxe_tls: Option<bool>,
    http: &super::HttpSettings,
    issues: &mut Issues,
) {
    if let Some(addr) = http.tls_listen {
        boot.https_port = addr.port();
    }
    boot.ipxe_tls = ipxe_tls.unwrap_or(http.tls_listen.is_some());
    if boot.ipxe_tls && http.tls_listen.is_none() && boot.https_url.is_none() {
        issues.add(
            "boot.ipxe_tls",
            "needs http.tls_listen or boot.https_url: the URL the site's iPXE is sent to",
        );
    }
    if !http.plain_boot && !boot.ipxe_tls {
        issues.add(
            "boot.ipxe_tls",
            "false with http.plain_boot = false: iPXE would be sent to boot routes no \
             listener serves",
        );
    }
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
    let https = b
        .https_url
        .as_ref()
        .map_or("https://255.255.255.255:65535".len(), String::len);
    let composed = [
        (
            "boot.https_url",
            https + 1 + b.ipxe_script.len(),
            &b.ipxe_script,
        ),
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

/// With `boot.ipxe_tls`, every URL a boot route may chain must be `https://`: a script
/// fetched over TLS may chain any URL, and iPXE follows a plain one in clear, with
/// nothing proving the server (docs/tls-boot.md).
pub(super) fn check_tls_chains(
    boot: &BootSettings,
    members: &[super::Member],
    owner: &super::OwnerSettings,
    issues: &mut Issues,
) {
    if !boot.ipxe_tls {
        return;
    }
    let mut plain = |key: String, url: &str| {
        if !url.starts_with("https://") {
            issues.add(
                key,
                "must be https:// with boot.ipxe_tls: iPXE would chain it in clear",
            );
        }
    };
    for (i, m) in members.iter().enumerate() {
        plain(format!("member[{i}].http_url"), &m.http_url);
        if let Some(c) = &m.conductor_url {
            plain(format!("member[{i}].conductor_url"), c);
        }
    }
    if let super::MembersSource::Ironic(ironic) = &owner.members {
        plain("owner.member_http_url".into(), &ironic.http_url);
        if let Some(c) = &ironic.conductor_url {
            plain("owner.member_conductor_url".into(), c);
        }
    }
    if let super::Fallback::Chain(url) = &owner.fallback {
        plain("owner.fallback".into(), url);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    /// The issues of `[http]` with a TLS boot listener plus `rest`.
    fn issues(rest: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "x").unwrap();
        std::fs::write(&key, "x").unwrap();
        let toml = format!(
            "[http]\ntls_listen = \"0.0.0.0:8084\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{rest}",
            cert.display(),
            key.display()
        );
        match Config::from_toml_with_overrides(&toml, &[]) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid(v)) => v.iter().map(|i| i.to_string()).collect(),
            Err(e) => panic!("{e}"),
        }
    }

    const MEMBER: &str = "[owner]\nself = \"a\"\n[[member]]\nname = \"a\"\n";

    #[test]
    fn with_ipxe_tls_every_url_a_route_chains_is_https() {
        let https =
            format!("{MEMBER}http_url = \"https://a:8084\"\nconductor_url = \"https://a:8084\"");
        assert_eq!(issues(&https), Vec::<String>::new());
        let plain =
            format!("{MEMBER}http_url = \"http://a:8080\"\nconductor_url = \"http://a:6180\"");
        let got = issues(&plain);
        for key in ["member[0].http_url", "member[0].conductor_url"] {
            assert!(
                got.iter()
                    .any(|g| g.starts_with(key) && g.contains("in clear")),
                "{key} not in {got:?}"
            );
        }
        // Turned off explicitly, plain URLs are the operator's choice again.
        let off = plain.replace("[owner]", "[boot]\nipxe_tls = false\n[owner]");
        assert_eq!(issues(&off), Vec::<String>::new());
        let fallback = "[owner]\nfallback = \"http://inspector.example/inspector.ipxe\"";
        assert!(
            issues(fallback)
                .iter()
                .any(|g| g.starts_with("owner.fallback")),
            "{:?}",
            issues(fallback)
        );
    }

    #[test]
    fn plain_boot_off_needs_the_tls_listener_and_tls_ipxe() {
        let got = issues("plain_boot = false\n[boot]\nipxe_tls = false");
        assert!(
            got.iter()
                .any(|g| g.starts_with("boot.ipxe_tls: false with http.plain_boot")),
            "{got:?}"
        );
        let no_tls = Config::from_toml_with_overrides("[http]\nplain_boot = false", &[]);
        let Err(ConfigError::Invalid(v)) = no_tls else {
            panic!("accepted")
        };
        assert!(v.iter().any(|i| i.key == "http.plain_boot"), "{v:?}");
        let no_url = Config::from_toml_with_overrides("[boot]\nipxe_tls = true", &[]);
        let Err(ConfigError::Invalid(v)) = no_url else {
            panic!("accepted")
        };
        assert!(v.iter().any(|i| i.key == "boot.ipxe_tls"), "{v:?}");
    }
}
