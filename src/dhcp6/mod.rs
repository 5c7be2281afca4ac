//! DHCPv6 (RFC 8415) for IPv6 provisioning networks, beside v4 on the same store,
//! member list and listeners: which MAC a v6 client is ([`client_mac`]: owner routing,
//! host policies and the member bucket are by MAC), what its firmware asks to boot
//! ([`boot`]: RFC 5970, with the vendor-class fallback firmware without option 61
//! needs), the relay layers around a client's message ([`relay`]: unwrapped by hand,
//! depth-capped, echoed back), the checks before a client message is decoded ([`wire`]),
//! the pure decisions ([`engine`]), the server loop ([`shell`]) and what the rest of
//! shardboot asks it ([`control`]), the server's DUID
//! ([`duid`]) and counters ([`metrics`]).

pub mod boot;
pub mod client_mac;
pub mod control;
pub mod duid;
pub mod engine;
pub mod metrics;
pub mod relay;
pub mod shell;
pub mod wire;
