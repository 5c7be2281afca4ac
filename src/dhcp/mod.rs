//! DHCPv4: wire checks, the pure decision engine, boot selection, address pools, and the
//! socket server that persists lease changes before replying.

mod allocate;
pub mod arp;
pub mod boot;
pub mod decision;
pub mod engine;
pub mod hostsdir;
pub mod hostsdir_watch;
pub mod metrics;
pub mod policy;
pub mod pool;
pub mod reply;
pub mod reserve;
pub mod responsibility;
pub mod server;
pub mod socket;
pub mod table;
pub mod wire;

#[cfg(test)]
mod engine_tests;

pub use engine::{
    Decision, Engine, IgnoreReason, Interface, Outcome, PacketContext, Reply, Responsibility,
};
pub use reply::Destination;
