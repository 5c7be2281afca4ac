//! The engine's inputs and outputs: the request context it is given and the decision it
//! returns.

use std::net::Ipv4Addr;

use dhcproto::v4::Message;

use super::reply::Destination;
use crate::store::LeaseEffect;

/// The interface a request arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Kernel name, e.g. `br-prov`.
    pub name: String,
    /// This server's address on it.
    pub addr: Ipv4Addr,
    /// The socket is the PXE boot-server port (4011, ProxyDHCP), not the DHCP port.
    pub boot_server: bool,
}

/// Whether this member is the one that should answer the client (docs/design.md,
/// "DHCP decisions" 2). Computed outside the engine from the owner resolver and the
/// live member set; a single instance is always responsible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Responsibility {
    /// Answer.
    Mine,
    /// Another member answers; stay silent unless the client is already ours.
    NotMine,
}

/// Per-request inputs besides the message.
#[derive(Debug, Clone, Copy)]
pub struct PacketContext<'a> {
    /// Receiving interface.
    pub interface: &'a Interface,
    /// Ownership decision for the client.
    pub responsibility: Responsibility,
    /// The run-time allow/deny for the client's MAC, if any, and where it comes from.
    pub policy: Option<(
        crate::dhcp::host_policy::HostPolicy,
        crate::dhcp::host_policy::PolicySource,
    )>,
    /// Whether the owner resolver knows the MAC (Ironic or the inventory names its
    /// owner): such a machine is never held back by the limits on unknown ones.
    pub known: bool,
    /// What Ironic's dnsmasq directories say about the client: its hosts-directory
    /// tags and the options directory's entries.
    pub dnsmasq: DnsmasqDirs<'a>,
    /// The datagram's IP source address: a relay's when relayed, else the client's
    /// (0.0.0.0 before it has an address). A RELEASE counts only from the address it
    /// releases (`Engine::release`).
    pub source: Ipv4Addr,
    /// Unix seconds.
    pub now: u64,
}

/// The followed dnsmasq directories' part in a reply (`dhcp.hostsdir`, `dhcp.optsdir`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DnsmasqDirs<'a> {
    /// The client's `set:` tags.
    pub tags: &'a [String],
    /// Every options-directory entry.
    pub options: &'a [crate::options::OptionRule],
}

/// A reply and where it goes.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The message.
    pub message: Message,
    /// Its destination.
    pub destination: Destination,
    /// What the request says about the reply it takes (options 55, 57).
    pub fit: crate::dhcp::option_fit::Fit,
}

impl Reply {
    /// Encodes the reply for its client into `buf`.
    pub fn encode(
        &self,
        buf: &mut Vec<u8>,
    ) -> Result<crate::dhcp::option_fit::Laid, dhcproto::error::EncodeError> {
        crate::dhcp::wire::encode_reply_for(&self.message, &self.fit, buf)
    }
}

/// Why a request got no reply and no lease change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// Another member is responsible.
    NotResponsible,
    /// The MAC is denied by a `[[host]]` entry.
    Denied,
    /// `known_only` is set and the MAC has no `[[host]]` entry.
    UnknownClient,
    /// No configured subnet matches the interface, relay or requested address.
    NoSubnet,
    /// No free address.
    PoolExhausted,
    /// The client chose another server's offer.
    OtherServer,
    /// No record of the client's address; RFC 2131 §4.3.2 says stay silent.
    NoRecord,
    /// A NAK was due but `never_nak` is set.
    NakSuppressed,
    /// A message type clients do not send, or a request missing a required field.
    Unsupported,
    /// An unknown machine over a limit (outstanding offers, the rate, the addresses
    /// reserved for known machines, or declines), or any machine over its DECLINEs
    /// per MAC.
    Limited,
    /// ProxyDHCP: not network-boot firmware (the address server answers it alone).
    NotBootClient,
    /// A probe of the address chosen for the client is in flight; its DISCOVER is
    /// answered when the probe ends.
    Probing,
    /// A RELEASE sent on the link from an address other than the one it releases:
    /// anyone can copy a client's chaddr and ciaddr (RFC 2131 §4.4.6).
    NotFromClient,
}

impl IgnoreReason {
    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotResponsible => "not_responsible",
            Self::Denied => "denied",
            Self::UnknownClient => "unknown_client",
            Self::NoSubnet => "no_subnet",
            Self::PoolExhausted => "pool_exhausted",
            Self::OtherServer => "other_server",
            Self::NoRecord => "no_record",
            Self::NakSuppressed => "nak_suppressed",
            Self::Unsupported => "unsupported",
            Self::Limited => "limited",
            Self::NotBootClient => "not_boot_client",
            Self::Probing => "probing",
            Self::NotFromClient => "not_from_client",
        }
    }
}

/// What the engine decided, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// DHCPOFFER of this address.
    Offer(Ipv4Addr),
    /// DHCPACK binding this address.
    Ack(Ipv4Addr),
    /// DHCPNAK.
    Nak,
    /// DHCPACK to an INFORM.
    Inform,
    /// The client released this address.
    Release(Ipv4Addr),
    /// The client declined this address; it is quarantined.
    Decline(Ipv4Addr),
    /// ProxyDHCP: boot information offered, no address.
    ProxyOffer,
    /// ProxyDHCP: boot information acknowledged on the boot-server port.
    ProxyAck,
    /// No reply yet: probe this address (never seen by the store, or inherited from a
    /// departed member) first, then report the result and decide the DISCOVER again
    /// (`Engine::handle_probe_result`).
    Probe(Ipv4Addr),
    /// No reply.
    Ignored(IgnoreReason),
}

/// The engine's answer to one request.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Reply to send, if any. When `effects` is non-empty it may be sent only after they
    /// are durable.
    pub reply: Option<Reply>,
    /// Lease changes to persist.
    pub effects: Vec<LeaseEffect>,
    /// Summary.
    pub outcome: Outcome,
}

impl Decision {
    pub(super) fn ignore(reason: IgnoreReason) -> Self {
        Self {
            reply: None,
            effects: Vec::new(),
            outcome: Outcome::Ignored(reason),
        }
    }
}

/// Free and used addresses of one subnet, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    /// The subnet.
    pub network: ipnet::Ipv4Net,
    /// Addresses that can still be handed out.
    pub free: u64,
    /// Addresses held by leases or offers.
    pub in_use: u64,
}
