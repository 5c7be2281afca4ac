//! DHCPv4 against the `shardboot` binary and real clients: exchanges, options, relays,
//! hostile and malformed packets, floods, crash safety and migration from dnsmasq.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bad_packets;
mod clients;
mod crash;
mod hostsdir;
mod leasefile;
mod malformed;
mod migrate;
mod options;
mod packet_fixtures;
mod probe;
mod relay_trust;
mod release;
mod reload;
mod starvation;
mod storm;
