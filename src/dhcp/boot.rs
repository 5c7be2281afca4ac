//! PXE / UEFI HTTP Boot / iPXE boot selection: classify the client from its options
//! (60 vendor class, 77 user class, 93 architecture, 175 iPXE encapsulated options) and
//! pick what it should load next. Pure: no I/O, table-tested.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, DhcpOptions, OptionCode};

use crate::client_class::{is_tls_user_class, ClientClass, Firmware};
use crate::config::BootSettings;

/// iPXE's encapsulated option space (iPXE sends it in every request).
pub(crate) const IPXE_ENCAP_OPTION: u8 = 175;

/// What to tell the client to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootDirective {
    /// `siaddr` / next-server (and option 66 as text).
    pub next_server: Ipv4Addr,
    /// `file` / option 67: a TFTP file name or an HTTP URL.
    pub file: String,
    /// Option 60 to echo: PXE and HTTP Boot firmware ignore offers without it.
    pub vendor_class: Option<&'static str>,
    /// The client is iPXE: tell it this offer is complete, so it need not wait for
    /// ProxyDHCP offers.
    pub ipxe: bool,
}

/// Classifies a request from its options.
pub fn classify(opts: &DhcpOptions) -> ClientClass {
    let vendor = match opts.get(OptionCode::ClassIdentifier) {
        Some(DhcpOption::ClassIdentifier(v)) => v.as_slice(),
        _ => &[],
    };
    let firmware = if vendor.starts_with(b"PXEClient") {
        Firmware::Pxe
    } else if vendor.starts_with(b"HTTPClient") {
        Firmware::Http
    } else {
        Firmware::None
    };
    // iPXE sends its user class as the bare string "iPXE" rather than RFC 3004's
    // length-prefixed list, so look for the bytes anywhere in the option.
    let user_class_ipxe = matches!(
        opts.get(OptionCode::UserClass),
        Some(DhcpOption::UserClass(v)) if v.windows(4).any(|w| w == b"iPXE")
    );
    let ipxe = user_class_ipxe || opts.get(OptionCode::Unknown(IPXE_ENCAP_OPTION)).is_some();
    // The site's TLS build replaces the user class with its own (`TLS_USER_CLASS`), raw
    // like iPXE's, or length-prefixed (RFC 3004 §4) by a build that sets it that way.
    let ipxe_tls = ipxe
        && matches!(
            opts.get(OptionCode::UserClass),
            Some(DhcpOption::UserClass(v)) if is_tls_user_class(v)
        );
    let arch = match opts.get(OptionCode::ClientSystemArchitecture) {
        Some(DhcpOption::ClientSystemArchitecture(a)) => Some(a.0),
        _ => None,
    };
    ClientClass {
        firmware,
        ipxe,
        ipxe_tls,
        arch,
    }
}

/// The HTTPS base URL the site's TLS iPXE build is sent to.
pub fn https_base(settings: &BootSettings, server: Ipv4Addr) -> String {
    match &settings.https_url {
        Some(u) => u.clone(),
        None => format!("https://{server}:{}", settings.https_port),
    }
}

/// The boot file of the site's TLS build: the script's URL without its scheme, which
/// the build's embedded script puts back (`chain https://${filename}`). The scheme is
/// in the firmware, so a rogue DHCP server cannot send it to plain `http://`; the host
/// comes from the answering member, and TLS with the built-in CA proves it.
pub fn tls_file(settings: &BootSettings, server: Ipv4Addr) -> String {
    let base = https_base(settings, server);
    let host = base.strip_prefix("https://").unwrap_or(&base);
    format!("{host}/{}", settings.ipxe_script)
}

/// The HTTP base URL clients are sent to.
pub fn http_base(settings: &BootSettings, server: Ipv4Addr) -> String {
    match &settings.http_url {
        Some(u) => u.clone(),
        None => format!("http://{server}:8080"),
    }
}

/// The file a PXE ROM of architecture `arch` loads (RFC 4578 §2.1 types; a ROM that
/// names none is legacy BIOS); `None` for an architecture with no file.
pub(crate) fn pxe_file(settings: &BootSettings, arch: Option<u16>) -> Option<&String> {
    match arch.unwrap_or(0) {
        0 => Some(&settings.bios),
        6 => Some(&settings.uefi_ia32),
        7 | 9 => Some(&settings.uefi_x64),
        11 => Some(&settings.uefi_arm64),
        _ => None,
    }
}

/// The file UEFI HTTP Boot of architecture `arch` loads (16: x64, 19: ARM64).
pub(crate) fn http_file(settings: &BootSettings, arch: Option<u16>) -> Option<&String> {
    match arch? {
        16 => Some(&settings.http_x64),
        19 => Some(&settings.http_arm64),
        _ => None,
    }
}

/// Picks the boot directive. `server` is the answering address (the default next-server
/// and HTTP host); `host_file` is a per-host override, applied to firmware (not to iPXE,
/// which must always get the script, or it would chain itself forever).
pub fn select(
    class: ClientClass,
    settings: &BootSettings,
    server: Ipv4Addr,
    host_file: Option<&str>,
) -> Option<BootDirective> {
    let next_server = settings.tftp_server.unwrap_or(server);
    if class.ipxe && settings.ipxe_tls && !class.ipxe_tls {
        // An iPXE that may not trust the site's CA (a NIC's own ROM, a stock build):
        // it loads the site's build over TFTP first, as PXE firmware does. That build
        // answers with the TLS user class, so it is never sent here again.
        let file = host_file
            .map(str::to_string)
            .or_else(|| pxe_file(settings, class.arch).cloned())?;
        return Some(BootDirective {
            next_server,
            file,
            vendor_class: None,
            ipxe: true,
        });
    }
    if class.ipxe {
        let file = if class.ipxe_tls && (settings.ipxe_tls || settings.https_url.is_some()) {
            tls_file(settings, server)
        } else {
            // Also the site's build at a member without TLS: it prefixes `https://`, so
            // this fails closed rather than boot in clear.
            format!("{}/{}", http_base(settings, server), settings.ipxe_script)
        };
        return Some(BootDirective {
            next_server,
            file,
            vendor_class: None,
            ipxe: true,
        });
    }
    match class.firmware {
        Firmware::None => None,
        Firmware::Pxe => {
            let file = host_file
                .map(str::to_string)
                .or_else(|| pxe_file(settings, class.arch).cloned())?;
            Some(BootDirective {
                next_server,
                file,
                vendor_class: Some("PXEClient"),
                ipxe: false,
            })
        }
        Firmware::Http => {
            let file = host_file
                .map(str::to_string)
                .or_else(|| http_file(settings, class.arch).cloned())?;
            let url = if file.contains("://") {
                file
            } else {
                format!("{}/ipxe/{}", http_base(settings, server), file)
            };
            Some(BootDirective {
                next_server,
                file: url,
                vendor_class: Some("HTTPClient"),
                ipxe: false,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_class::TLS_USER_CLASS;
    use crate::config::{Config, DEFAULT_CONFIG_TOML};
    use dhcproto::v4::{Architecture, UnknownOption};

    fn settings() -> BootSettings {
        Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[])
            .unwrap()
            .boot
    }

    fn opts(
        vendor: Option<&str>,
        user: Option<&str>,
        arch: Option<u16>,
        encap: bool,
    ) -> DhcpOptions {
        let mut o = DhcpOptions::new();
        if let Some(v) = vendor {
            o.insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
        }
        if let Some(u) = user {
            o.insert(DhcpOption::UserClass(u.as_bytes().to_vec()));
        }
        if let Some(a) = arch {
            o.insert(DhcpOption::ClientSystemArchitecture(Architecture(a)));
        }
        if encap {
            o.insert(DhcpOption::Unknown(UnknownOption::new(
                175.into(),
                vec![177, 1, 1],
            )));
        }
        o
    }

    #[test]
    fn decision_table() {
        let s = settings();
        let srv = Ipv4Addr::new(192, 0, 2, 1);
        let script = "http://192.0.2.1:8080/boot.ipxe";
        // (request options, expected (file, echoed vendor class))
        type Expected<'a> = Option<(&'a str, Option<&'a str>)>;
        let cases: Vec<(DhcpOptions, Expected<'_>)> = vec![
            (opts(None, None, None, false), None),
            (
                opts(
                    Some("PXEClient:Arch:00000:UNDI:002001"),
                    None,
                    Some(0),
                    false,
                ),
                Some(("undionly.kpxe", Some("PXEClient"))),
            ),
            (
                opts(Some("PXEClient:Arch:00000"), None, None, false),
                Some(("undionly.kpxe", Some("PXEClient"))),
            ),
            (
                opts(Some("PXEClient:Arch:00006"), None, Some(6), false),
                Some(("ipxe-ia32.efi", Some("PXEClient"))),
            ),
            (
                opts(
                    Some("PXEClient:Arch:00007:UNDI:003000"),
                    None,
                    Some(7),
                    false,
                ),
                Some(("snponly.efi", Some("PXEClient"))),
            ),
            (
                opts(Some("PXEClient:Arch:00009"), None, Some(9), false),
                Some(("snponly.efi", Some("PXEClient"))),
            ),
            (
                opts(Some("PXEClient:Arch:00011"), None, Some(11), false),
                Some(("snponly-arm64.efi", Some("PXEClient"))),
            ),
            (
                opts(Some("PXEClient:Arch:00002"), None, Some(2), false),
                None,
            ),
            (
                opts(Some("HTTPClient:Arch:00016"), None, Some(16), false),
                Some(("http://192.0.2.1:8080/ipxe/snponly.efi", Some("HTTPClient"))),
            ),
            (
                opts(Some("HTTPClient:Arch:00019"), None, Some(19), false),
                Some((
                    "http://192.0.2.1:8080/ipxe/snponly-arm64.efi",
                    Some("HTTPClient"),
                )),
            ),
            (opts(Some("HTTPClient"), None, None, false), None),
            (
                opts(Some("PXEClient:Arch:00000"), Some("iPXE"), Some(0), false),
                Some((script, None)),
            ),
            (
                opts(Some("PXEClient:Arch:00007"), None, Some(7), true),
                Some((script, None)),
            ),
            (
                opts(None, Some("\x04iPXE"), None, false),
                Some((script, None)),
            ),
            (opts(None, Some("gPXE"), None, false), None),
        ];
        for (i, (o, want)) in cases.into_iter().enumerate() {
            let got = select(classify(&o), &s, srv, None);
            let got = got.as_ref().map(|d| (d.file.as_str(), d.vendor_class));
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn with_ipxe_tls_only_the_site_build_gets_https_and_other_ipxe_loads_it() {
        // The site's build gets the URL without its scheme: it chains https:// + it.
        let mut s = settings();
        s.ipxe_tls = true;
        let srv = Ipv4Addr::new(192, 0, 2, 1);
        let tls = |arch| {
            opts(
                Some("PXEClient:Arch:00000"),
                Some(TLS_USER_CLASS),
                Some(arch),
                true,
            )
        };
        let rom = |arch| opts(Some("PXEClient:Arch:00000"), Some("iPXE"), Some(arch), true);
        let file =
            |s: &BootSettings, o: &DhcpOptions| select(classify(o), s, srv, None).map(|d| d.file);
        assert_eq!(
            file(&s, &tls(0)).as_deref(),
            Some("192.0.2.1:8084/boot.ipxe")
        );
        assert_eq!(
            file(&s, &tls(7)).as_deref(),
            Some("192.0.2.1:8084/boot.ipxe")
        );
        // The NIC's own iPXE: the site's build, by architecture, over TFTP.
        assert_eq!(file(&s, &rom(0)).as_deref(), Some("undionly.kpxe"));
        assert_eq!(file(&s, &rom(7)).as_deref(), Some("snponly.efi"));
        // Length-prefixed (RFC 3004) is the same class; a longer one is not.
        let prefixed = format!("\x0d{TLS_USER_CLASS}");
        let o = opts(None, Some(&prefixed), Some(0), true);
        assert!(classify(&o).ipxe_tls);
        let o = opts(None, Some("shardboot-tls-x"), Some(0), true);
        assert!(!classify(&o).ipxe_tls);
        // The user class alone, without iPXE's option 175, is not iPXE.
        let o = opts(None, Some(TLS_USER_CLASS), Some(0), false);
        assert!(!classify(&o).ipxe);
        s.https_url = Some("https://boot.example:9443".into());
        assert_eq!(
            file(&s, &tls(0)).as_deref(),
            Some("boot.example:9443/boot.ipxe")
        );
        // Without ipxe_tls other iPXE gets the plain script; so does the TLS build when
        // no https_url is known (it prefixes https://, so it fails closed).
        s.ipxe_tls = false;
        assert_eq!(
            file(&s, &rom(0)).as_deref(),
            Some("http://192.0.2.1:8080/boot.ipxe")
        );
        s.https_url = None;
        assert_eq!(
            file(&s, &tls(0)).as_deref(),
            Some("http://192.0.2.1:8080/boot.ipxe")
        );
    }

    #[test]
    fn host_override_and_configured_servers() {
        let mut s = settings();
        s.tftp_server = Some(Ipv4Addr::new(192, 0, 2, 9));
        s.http_url = Some("http://boot.example:8081".into());
        let srv = Ipv4Addr::new(192, 0, 2, 1);
        let pxe = classify(&opts(Some("PXEClient:Arch:00007"), None, Some(7), false));
        let d = select(pxe, &s, srv, Some("custom.efi")).unwrap();
        assert_eq!(
            (d.next_server, d.file.as_str()),
            (Ipv4Addr::new(192, 0, 2, 9), "custom.efi")
        );
        let ipxe = classify(&opts(None, Some("iPXE"), None, false));
        let d = select(ipxe, &s, srv, Some("custom.efi")).unwrap();
        assert_eq!(d.file, "http://boot.example:8081/boot.ipxe");
    }
}
