//! What a DHCP request says about the machine asking: which firmware (PXE ROM, UEFI
//! HTTP Boot, or none), whether it is iPXE, and its architecture (RFC 4578 §2.1). Both
//! families' boot selection and the option language's built-in tags read it.

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
    /// Client system architecture (option 93, RFC 4578 §2.1).
    pub arch: Option<u16>,
}
