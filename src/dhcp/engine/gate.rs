//! The gate before a decision, one rule for DHCPv4 and DHCPv6: what a relay says is
//! believed only from a relay this server trusts, and no address is offered while the
//! store cannot make it durable. The shells know the facts (who sent the datagram,
//! whether the store takes writes); the engines apply this rule to them
//! (`Engine::admit`, `Engine6::admit`), before anything else is read or counted.

use std::net::Ipv4Addr;

/// How a request reached this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// From a client on the link.
    Direct,
    /// Through a relay agent (v4: giaddr set; v6: a Relay-forward), from a sender this
    /// server trusts as a relay or not.
    Relayed {
        /// The sender is a relay this server trusts.
        trusted: bool,
    },
}

/// What the shell knows of a request before the engine reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// How it reached this server.
    pub path: Path,
    /// Whether the lease store takes writes now (and the shared store answers, when
    /// one is configured): `store::StoreStatus::offers_fresh`.
    pub store_writable: bool,
}

/// Why a request is not decided at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Relayed, but not by a relay this server trusts.
    #[error("relayed by an untrusted sender")]
    UntrustedRelay,
    /// It asks for an offer (DISCOVER, Solicit) while the store cannot write.
    #[error("the lease store cannot write")]
    StoreUnwritable,
}

/// Whether a request is decided. `asks_offer`: a DISCOVER or a Solicit, whose answer
/// promises an address that only a later write can bind.
pub fn admit(inputs: Inputs, asks_offer: bool) -> Result<(), Refused> {
    // RFC 3046 §2.1, RFC 2131 §4.1 (giaddr) and RFC 8415 §19.1 (a Relay-forward's
    // link-address): a relay agent's statement chooses the client's subnet and where
    // the reply goes. Anyone on the link can make one, so it counts only from a relay
    // this server trusts.
    if inputs.path == (Path::Relayed { trusted: false }) {
        return Err(Refused::UntrustedRelay);
    }
    // No offer that could never be bound: another server, or this one once the store
    // writes again, serves the client.
    if asks_offer && !inputs.store_writable {
        return Err(Refused::StoreUnwritable);
    }
    Ok(())
}

impl super::Engine {
    /// How a DHCPv4 request reached this server: directly when `giaddr` is unset, else
    /// through a relay, trusted when `sender` (the datagram's IPv4 source, given only
    /// when it came from the server port, where relay agents send from: RFC 2131 §4.1)
    /// lies in a `dhcp.relays` entry allowed on `interface`.
    pub fn relay_path(&self, giaddr: Ipv4Addr, sender: Option<Ipv4Addr>, interface: &str) -> Path {
        if giaddr.is_unspecified() {
            return Path::Direct;
        }
        let trusted =
            sender.is_some_and(|s| self.settings.relays.iter().any(|r| r.allows(s, interface)));
        Path::Relayed { trusted }
    }

    /// Whether a DHCPv4 request is decided at all ([`admit`]); `discover`: it is a
    /// DISCOVER.
    pub fn admit(&self, inputs: Inputs, discover: bool) -> Result<(), Refused> {
        admit(inputs, discover)
    }
}
