//! DHCPv6 and the IPv6 router-advertisement responder against real clients (ISC
//! `dhclient -6`, dhcpcd, ndisc6) in network namespaces, and relay trust.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod clients;
mod dhcpcd;
mod ra_responder;
mod relay_trust;
