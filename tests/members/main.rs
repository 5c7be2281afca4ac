//! Several members: on one segment (DHCPv4, DHCPv6), agreeing through a real database,
//! following a members file or a real Ironic's conductors, and watching each other.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod dhcp;
mod dhcp6;
mod file;
mod health;
mod ironic;
mod ironic_routing;
mod shared;
mod shared_secret;
mod timeline_merge;
