//! DHCPv4: wire checks, the pure decision engine, boot selection, address pools, and the
//! socket server that persists lease changes before replying.

pub mod boot;
pub mod control;
pub mod dnsmasq_leases;
pub mod engine;
pub mod host_policy;
pub mod leasefile;
pub mod metrics;
pub mod option_fit;
pub mod peek;
pub mod responsibility;
pub mod shell;
pub mod wire;

pub use engine::reply::Destination;
pub use engine::{
    Decision, Engine, IgnoreReason, Interface, Outcome, PacketContext, Reply, Responsibility,
};
