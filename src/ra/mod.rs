//! "No router here": answers IPv6 Router Solicitations on the DHCP interfaces.
//!
//! iPXE configures IPv6 alongside DHCPv4 and does not boot until router discovery has
//! finished. On an IPv4-only provisioning network no Router Advertisement ever comes,
//! so every iPXE boot waits out its solicitations: 12 s in the QEMU lab, for each of
//! Ironic's boots (inspection, cleaning, deployment). A unicast Router Advertisement
//! with router lifetime 0, no prefixes and the M/O flags clear (RFC 4861 §4.2, §6.2.6)
//! ends that wait without configuring anything. Off unless `[ra] enabled = true`; it
//! stands down while a real IPv6 router speaks on the segment.

pub mod responder;
pub mod server;
pub mod wire;
