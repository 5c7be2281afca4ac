//! What the DHCPv6 engine is given with a message (where it arrived, the client's
//! MAC, this member's responsibility, `now`) and what it decides.

use std::net::Ipv6Addr;

use dhcproto::v6::Message;

use crate::dhcp::engine::Responsibility;
use crate::mac::MacAddr;
use crate::store::Lease6Effect;

/// Where a message arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The interface's name.
    pub interface: &'a str,
    /// This server's addresses on it.
    pub addresses: &'a [Ipv6Addr],
    /// The message's destination (multicast for a client on the link, one of ours for
    /// a relay).
    pub destination: Ipv6Addr,
}

/// Per-message inputs besides the message.
#[derive(Debug, Clone, Copy)]
pub struct Context6<'a> {
    /// Where it arrived.
    pub arrival: Arrival<'a>,
    /// The client's MAC (`dhcp6::client_mac`), when one was found.
    pub mac: Option<MacAddr>,
    /// Whether this member is the one to answer the client.
    pub responsibility: Responsibility,
    /// The run-time allow/deny for the client's MAC (operator API, Ironic's hosts
    /// directory), if any: the same PXE filter as v4.
    pub policy: Option<(
        crate::dhcp::host_policy::HostPolicy,
        crate::dhcp::host_policy::PolicySource,
    )>,
    /// Unix seconds.
    pub now: u64,
}

/// Why a message got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ignore6 {
    /// Another member answers this client.
    NotResponsible,
    /// No `[[subnet6]]` for the client's link.
    NoSubnet,
    /// A message RFC 8415 §16 says to discard: no Client Identifier, a Server
    /// Identifier where none belongs, or none where one must be.
    Malformed,
    /// The Server Identifier is another server's.
    OtherServer,
    /// Nothing to answer (a Confirm without addresses, a Rebind for addresses this
    /// member never handed out).
    NothingToAnswer,
    /// Denied by a policy or `[[host]]` entry (Ironic's PXE filter).
    Denied,
    /// `dhcp.known_only` and nothing names the machine (or it shows no MAC).
    UnknownClient,
    /// A Solicit, Rebind, Confirm or Information-request a client on the link sent
    /// to one of our addresses rather than to the multicast group (RFC 8415 §16:
    /// discarded).
    Unicast,
}

impl Ignore6 {
    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotResponsible => "not_responsible",
            Self::NoSubnet => "no_subnet",
            Self::Malformed => "malformed",
            Self::OtherServer => "other_server",
            Self::NothingToAnswer => "nothing_to_answer",
            Self::Denied => "denied",
            Self::UnknownClient => "unknown_client",
            Self::Unicast => "unicast",
        }
    }
}

/// What the engine decided, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome6 {
    /// An Advertise with this many addresses.
    Advertise(usize),
    /// A Reply binding (or extending) this many addresses.
    Bound(usize),
    /// Addresses were released.
    Released,
    /// Addresses were declined and quarantined.
    Declined,
    /// A Confirm answered: whether the addresses are on the link.
    Confirmed(bool),
    /// An Information-request answered.
    Informed,
    /// An Advertise or Reply saying no address is available.
    NoAddresses,
    /// A Reply saying the client's binding is not known, or only withdrawing (with
    /// lifetimes 0) addresses it may not use.
    NoBinding,
    /// A Reply telling a client that sent to a unicast address to use multicast.
    UseMulticast,
    /// No reply.
    Ignored(Ignore6),
}

/// The engine's answer to one message.
#[derive(Debug, Clone)]
pub struct Decision6 {
    /// The reply to the client (the shell wraps it in the relay layers). When
    /// `effects` is non-empty it may be sent only once they are durable.
    pub reply: Option<Message>,
    /// Lease changes to persist.
    pub effects: Vec<Lease6Effect>,
    /// Summary.
    pub outcome: Outcome6,
}

impl Decision6 {
    pub(super) fn ignore(why: Ignore6) -> Self {
        Self {
            reply: None,
            effects: Vec::new(),
            outcome: Outcome6::Ignored(why),
        }
    }
}
