//! What a DHCP request says about the machine asking: which firmware (PXE ROM, UEFI
//! HTTP Boot, or none), whether it is iPXE, and its architecture (RFC 4578 §2.1). Both
//! families' boot selection and the option language's built-in tags read it.

/// The user class (option 77) the site's iPXE build sends: its embedded script sets
/// it before `dhcp`, which iPXE copies into every request in place of `iPXE`. Its
/// option 175 still marks it as iPXE. A feature flag of option 175 (HTTPS, 0x14) would
/// not do: a NIC's own iPXE may speak HTTPS yet trust only iPXE's public CA.
pub const TLS_USER_CLASS: &str = "shardboot-tls";

/// Whether a user class is exactly [`TLS_USER_CLASS`]: DHCPv4's option 77 bare, as
/// iPXE sends it, or as one RFC 3004 §4 item; or one item of DHCPv6's option 15
/// (RFC 8415 §21.15), whose items come without their length.
pub(crate) fn is_tls_user_class(v: &[u8]) -> bool {
    let want = TLS_USER_CLASS.as_bytes();
    v == want || (v.len() == want.len() + 1 && usize::from(v[0]) == want.len() && &v[1..] == want)
}

/// Which firmware is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    /// Not a network-boot client (an OS DHCP client).
    None,
    /// PXE ROM (vendor class `PXEClient…`, RFC 4578).
    Pxe,
    /// UEFI HTTP Boot (vendor class `HTTPClient…`, UEFI spec §24.7).
    Http,
}

/// What the DHCP options say about the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientClass {
    /// Firmware family.
    pub firmware: Firmware,
    /// The client is iPXE (user class `iPXE` or option 175 present).
    pub ipxe: bool,
    /// The client is the site's own iPXE build, with the site's CA built in: its
    /// embedded script sets the user class [`TLS_USER_CLASS`] before `dhcp`
    /// (`deploy/ipxe/build.sh`). Only then is it sent to an `https://` URL.
    pub ipxe_tls: bool,
    /// Client system architecture (option 93, RFC 4578 §2.1).
    pub arch: Option<u16>,
}
