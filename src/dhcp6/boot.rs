//! What a DHCPv6 client's firmware asks to boot (RFC 5970), in the same terms as v4
//! ([`crate::dhcp::boot::ClientClass`]), so one selection serves both families.
//!
//! - **Architecture**: option 61 (client architecture type, RFC 5970 §3.3; the first
//!   listed). Some firmware sends none; Metal3's IPv6 failures with dnsmasq come from
//!   exactly that (ironic-image issues 916 and 924). Then it is read from the vendor
//!   class, option 16 with IANA enterprise 343 (Intel, as PXE and UEFI use it), whose
//!   data reads `PXEClient:Arch:00007:…` or `HTTPClient:Arch:00016:…`: the five digits
//!   after `Arch:` are the same architecture number (RFC 4578 §2.1 registry).
//! - **Firmware family**: the vendor class data starting with `PXEClient` (PXE over
//!   IPv6) or `HTTPClient` (UEFI HTTP Boot, which must see `HTTPClient` echoed).
//! - **iPXE**: option 15, user class, with an item `iPXE` (RFC 8415 §21.15: a list of
//!   length-prefixed items; iPXE sends one).
//! - **The site's TLS build**: an item `shardboot-tls` instead. iPXE's DHCPv6 request
//!   carries its `user-class` setting as that one item, in place of `iPXE`
//!   (`dhcpv6_user_class` in iPXE's `net/udp/dhcpv6.c`), and nothing else marks it as
//!   iPXE (no option 175 as over DHCPv4): the item alone says both.

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, DhcpOptions, OptionCode};

use crate::client_class::{is_tls_user_class, ClientClass, Firmware};
use crate::config::BootSettings;
use crate::dhcp::boot::{http_file, pxe_file};

/// The enterprise number PXE and UEFI put in option 16.
pub const PXE_ENTERPRISE: u32 = 343;

/// Classifies a DHCPv6 client from its options.
pub fn classify(opts: &DhcpOptions) -> ClientClass {
    let vendor: Option<&[u8]> = match opts.get(OptionCode::VendorClass) {
        Some(DhcpOption::VendorClass(v)) if v.num == PXE_ENTERPRISE => {
            v.data.first().map(Vec::as_slice)
        }
        _ => None,
    };
    let firmware = match vendor {
        Some(v) if v.starts_with(b"PXEClient") => Firmware::Pxe,
        Some(v) if v.starts_with(b"HTTPClient") => Firmware::Http,
        _ => Firmware::None,
    };
    let items: &[Vec<u8>] = match opts.get(OptionCode::UserClass) {
        Some(DhcpOption::UserClass(u)) => &u.data,
        _ => &[],
    };
    let ipxe_tls = items.iter().any(|item| is_tls_user_class(item));
    let ipxe = ipxe_tls || items.iter().any(|item| item.as_slice() == b"iPXE");
    let arch = match opts.get(OptionCode::ClientArchType) {
        Some(DhcpOption::ClientArchType(types)) => types.first().map(|a| u16::from(*a)),
        _ => None,
    }
    .or_else(|| vendor.and_then(arch_from_vendor_class));
    ClientClass {
        firmware,
        ipxe,
        ipxe_tls,
        arch,
    }
}

/// What to tell a v6 client to load: option 59's URL (RFC 5970 §3.1), and the vendor
/// class to echo in option 16 (UEFI HTTP Boot ignores an Advertise without
/// `HTTPClient`). PXE over IPv6 gets no vendor class back: UEFI PXE (edk2's
/// `PxeBcParseDhcp6Packet`) takes an Advertise with an address and `PXEClient` for a
/// BINL offer and asks a boot server on port 4011 for the file before it would use
/// option 59; without `PXEClient` the offer is "DHCP only with a boot file URL",
/// which it boots at once (found by the QEMU IPv6 test: OVMF released the address and
/// reported "PXE-E16: No valid offer received").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootUrl {
    /// Option 59.
    pub url: String,
    /// Option 16's data to echo (enterprise 343).
    pub vendor_class: Option<&'static str>,
}

/// The HTTP base for v6 clients: `boot.http_url` when set, else this member's address
/// in brackets (RFC 3986 §3.2.2) on port 8080.
pub fn http_base(settings: &BootSettings, server: Ipv6Addr) -> String {
    match &settings.http_url {
        Some(u) => u.clone(),
        None => format!("http://[{server}]:8080"),
    }
}

/// The boot file of the site's TLS build over DHCPv6, as [`crate::dhcp::boot::tls_file`]
/// gives it over DHCPv4: `boot.https_url`, or this member's address in brackets on
/// `boot.https_port`, without the scheme. RFC 5970 §3.1 wants a URL in option 59; only
/// the build that asked with the TLS user class gets this, and its embedded script puts
/// `https://` back itself, so no DHCPv6 answer can send it to plain HTTP either.
pub fn tls_file(settings: &BootSettings, server: Ipv6Addr) -> String {
    let base = match &settings.https_url {
        Some(u) => u.clone(),
        None => format!("https://[{server}]:{}", settings.https_port),
    };
    let host = base.strip_prefix("https://").unwrap_or(&base);
    format!("{host}/{}", settings.ipxe_script)
}

/// Picks option 59 for `class`, as [`crate::dhcp::boot::select`] does for v4 (the same
/// files by architecture, iPXE always to the script, the site's TLS build to the TLS
/// route): PXE over IPv6 loads its file by TFTP, `tftp://[server]/file`, UEFI HTTP Boot
/// by HTTP. `host_file` is a per-host override for firmware.
///
/// Unlike v4, an iPXE that is not the site's build is not sent that build over TFTP
/// when `boot.ipxe_tls` is on: iPXE's DHCPv6 request names no architecture (no option
/// 61), so which build it needs is unknown. It gets the plain script, as before.
pub fn select(
    class: ClientClass,
    settings: &BootSettings,
    server: Ipv6Addr,
    host_file: Option<&str>,
) -> Option<BootUrl> {
    if class.ipxe {
        let url = if class.ipxe_tls && (settings.ipxe_tls || settings.https_url.is_some()) {
            tls_file(settings, server)
        } else {
            // Also the site's build at a member without TLS: it prefixes `https://`, so
            // this fails closed rather than boot in clear.
            format!("{}/{}", http_base(settings, server), settings.ipxe_script)
        };
        return Some(BootUrl {
            url,
            vendor_class: None,
        });
    }
    let absolute = |file: String, otherwise: String| {
        if file.contains("://") {
            file
        } else {
            otherwise
        }
    };
    match class.firmware {
        Firmware::None => None,
        Firmware::Pxe => {
            let file = host_file
                .map(str::to_string)
                .or_else(|| pxe_file(settings, class.arch).cloned())?;
            let tftp = format!("tftp://[{server}]/{}", file.trim_start_matches('/'));
            Some(BootUrl {
                url: absolute(file, tftp),
                vendor_class: None,
            })
        }
        Firmware::Http => {
            let file = host_file
                .map(str::to_string)
                .or_else(|| http_file(settings, class.arch).cloned())?;
            let http = format!("{}/ipxe/{}", http_base(settings, server), file);
            Some(BootUrl {
                url: absolute(file, http),
                vendor_class: Some("HTTPClient"),
            })
        }
    }
}

/// The architecture in a `PXEClient:Arch:NNNNN:…` / `HTTPClient:Arch:NNNNN:…` vendor
/// class (five decimal digits, as the PXE and UEFI specifications write it).
pub fn arch_from_vendor_class(data: &[u8]) -> Option<u16> {
    let at = data.windows(5).position(|w| w == b"Arch:")? + 5;
    let digits = data.get(at..at + 5)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v6::{UserClass, VendorClass};

    fn vendor(text: &str) -> DhcpOption {
        DhcpOption::VendorClass(VendorClass {
            num: PXE_ENTERPRISE,
            data: vec![text.as_bytes().to_vec()],
        })
    }

    fn opts(list: Vec<DhcpOption>) -> DhcpOptions {
        let mut o = DhcpOptions::new();
        for x in list {
            o.insert(x);
        }
        o
    }

    #[test]
    fn option_61_gives_the_architecture() {
        let o = opts(vec![
            DhcpOption::ClientArchType(vec![7.into()]),
            vendor("PXEClient:Arch:00007:UNDI:003016"),
        ]);
        let c = classify(&o);
        assert_eq!(c.arch, Some(7));
        assert_eq!(c.firmware, Firmware::Pxe);
        assert!(!c.ipxe);
    }

    #[test]
    fn without_option_61_the_vendor_class_gives_it() {
        // OVMF's UEFI HTTP Boot over IPv6 as Metal3 sees it: no option 61.
        let c = classify(&opts(vec![vendor("HTTPClient:Arch:00016:UNDI:003001")]));
        assert_eq!(c.arch, Some(16));
        assert_eq!(c.firmware, Firmware::Http);
        let c = classify(&opts(vec![vendor("PXEClient:Arch:00011:UNDI:003016")]));
        assert_eq!(c.arch, Some(11));
        assert_eq!(c.firmware, Firmware::Pxe);
    }

    #[test]
    fn ipxe_by_its_user_class() {
        let o = opts(vec![
            DhcpOption::UserClass(UserClass {
                data: vec![b"iPXE".to_vec()],
            }),
            DhcpOption::ClientArchType(vec![0.into()]),
        ]);
        let c = classify(&o);
        assert!(c.ipxe);
        assert_eq!(c.arch, Some(0));
        assert_eq!(c.firmware, Firmware::None);
    }

    #[test]
    fn another_enterprise_or_no_class_is_no_firmware() {
        let o = opts(vec![DhcpOption::VendorClass(VendorClass {
            num: 9,
            data: vec![b"PXEClient:Arch:00007".to_vec()],
        })]);
        let c = classify(&o);
        assert_eq!((c.firmware, c.arch, c.ipxe), (Firmware::None, None, false));
        let c = classify(&DhcpOptions::new());
        assert_eq!((c.firmware, c.arch, c.ipxe), (Firmware::None, None, false));
    }

    fn settings() -> BootSettings {
        crate::config::Config::from_toml_with_overrides(crate::config::DEFAULT_CONFIG_TOML, &[])
            .unwrap()
            .boot
    }

    const SERVER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    #[test]
    fn each_client_gets_its_url_with_the_address_in_brackets() {
        let s = settings();
        let class = |firmware, arch, ipxe| ClientClass {
            firmware,
            ipxe,
            ipxe_tls: false,
            arch,
        };
        let pxe = select(class(Firmware::Pxe, Some(7), false), &s, SERVER, None).unwrap();
        assert_eq!(pxe.url, format!("tftp://[2001:db8::2]/{}", s.uefi_x64));
        // No PXEClient echo: UEFI PXE would wait for a BINL server on port 4011.
        assert_eq!(pxe.vendor_class, None);
        let http = select(class(Firmware::Http, Some(16), false), &s, SERVER, None).unwrap();
        assert_eq!(
            http.url,
            format!("http://[2001:db8::2]:8080/ipxe/{}", s.http_x64)
        );
        assert_eq!(http.vendor_class, Some("HTTPClient"));
        let ipxe = select(class(Firmware::Pxe, Some(7), true), &s, SERVER, None).unwrap();
        assert_eq!(
            ipxe.url,
            format!("http://[2001:db8::2]:8080/{}", s.ipxe_script)
        );
        assert_eq!(ipxe.vendor_class, None);
        // An OS client, an architecture with no file, and HTTP Boot that names none.
        assert_eq!(
            select(class(Firmware::None, None, false), &s, SERVER, None),
            None
        );
        assert_eq!(
            select(class(Firmware::Pxe, Some(2), false), &s, SERVER, None),
            None
        );
        assert_eq!(
            select(class(Firmware::Http, None, false), &s, SERVER, None),
            None
        );
        // A per-host file, relative or a URL of its own.
        let own = select(
            class(Firmware::Pxe, Some(7), false),
            &s,
            SERVER,
            Some("custom.efi"),
        )
        .unwrap();
        assert_eq!(own.url, "tftp://[2001:db8::2]/custom.efi");
        let url = select(
            class(Firmware::Http, Some(16), false),
            &s,
            SERVER,
            Some("http://[2001:db8::9]/x.efi"),
        )
        .unwrap();
        assert_eq!(url.url, "http://[2001:db8::9]/x.efi");
    }

    fn user_class(items: &[&[u8]]) -> DhcpOptions {
        opts(vec![DhcpOption::UserClass(UserClass {
            data: items.iter().map(|i| i.to_vec()).collect(),
        })])
    }

    #[test]
    fn the_site_build_is_told_by_its_user_class_item_alone() {
        // What the site's build sends over DHCPv6: its user class, no `iPXE` item and
        // nothing else that marks iPXE.
        let c = classify(&user_class(&[b"shardboot-tls"]));
        assert!(c.ipxe && c.ipxe_tls, "{c:?}");
        // Among other items too; but not a longer or a different one, nor stock iPXE.
        assert!(classify(&user_class(&[b"rack7", b"shardboot-tls"])).ipxe_tls);
        for other in [&b"shardboot-tls-x"[..], b"Shardboot-TLS", b"iPXE", b""] {
            assert!(!classify(&user_class(&[other])).ipxe_tls, "{other:?}");
        }
        assert!(classify(&user_class(&[b"iPXE"])).ipxe);
    }

    #[test]
    fn the_site_build_gets_this_members_tls_route_without_a_scheme() {
        let mut s = settings();
        s.ipxe_tls = true;
        s.https_port = 8443;
        let site = classify(&user_class(&[b"shardboot-tls"]));
        let stock = classify(&user_class(&[b"iPXE"]));
        assert_eq!(
            select(site, &s, SERVER, None).unwrap().url,
            format!("[2001:db8::2]:8443/{}", s.ipxe_script)
        );
        // Stock iPXE names no architecture over DHCPv6: the plain script, as before.
        assert_eq!(
            select(stock, &s, SERVER, None).unwrap().url,
            format!("http://[2001:db8::2]:8080/{}", s.ipxe_script)
        );
        // A configured HTTPS base wins, still without its scheme.
        s.https_url = Some("https://boot.site.test:8084".into());
        assert_eq!(
            select(site, &s, SERVER, None).unwrap().url,
            format!("boot.site.test:8084/{}", s.ipxe_script)
        );
        // A member without TLS sends even the site's build the plain URL, which its
        // script turns into https://http://…: it fails closed.
        let plain = settings();
        assert_eq!(
            select(site, &plain, SERVER, None).unwrap().url,
            format!("http://[2001:db8::2]:8080/{}", plain.ipxe_script)
        );
    }

    #[test]
    fn only_five_digits_after_arch_count() {
        assert_eq!(arch_from_vendor_class(b"PXEClient:Arch:00007"), Some(7));
        assert_eq!(arch_from_vendor_class(b"PXEClient:Arch:0007"), None);
        assert_eq!(arch_from_vendor_class(b"PXEClient:Arch:0x007:UNDI"), None);
        assert_eq!(arch_from_vendor_class(b"PXEClient:Arch:99999"), None);
        assert_eq!(arch_from_vendor_class(b"PXEClient"), None);
        assert_eq!(arch_from_vendor_class(b""), None);
    }
}
