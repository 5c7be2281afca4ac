//! DHCPv6 (RFC 8415) for IPv6 provisioning networks, being built (issue: IPv6
//! provisioning). So far the pure parts that everything else keys on: which MAC a v6
//! client is ([`client_mac`]: owner routing, host policies and reservations are by MAC),
//! and what its firmware asks to boot ([`boot`]: RFC 5970, with the vendor-class
//! fallback firmware without option 61 needs), and the relay layers around a client's
//! message ([`relay`]: unwrapped by hand, depth-capped, echoed back), and the checks
//! before a client message is decoded ([`wire`]). The server loop, leases and replies come
//! next, on the same store, engine shape and listeners as v4.

pub mod boot;
pub mod client_mac;
pub mod duid;
pub mod engine;
pub mod metrics;
pub mod relay;
pub mod shell;
pub mod wire;
