//! shardboot: a PXE/iPXE-aware DHCPv4, DHCPv6, TFTP and HTTP boot server that runs beside
//! each OpenStack Ironic conductor. docs/design.md has the design, docs/code-map.md the modules.

pub mod app;
pub mod build_info;
pub mod cli;
pub mod client_class;
pub mod clock;
pub mod config;
pub mod confine;
pub mod dhcp;
pub mod dhcp6;
pub mod engine_thread;
pub mod handles;
pub mod http;
pub mod http_metrics;
pub mod ipxe;
pub mod limits;
pub mod mac;
pub mod metrics;
pub mod net_error;
pub mod options;
pub mod owner;
pub mod process_metrics;
pub mod ra;
pub mod reload;
pub mod secret_file;
pub mod shared;
pub mod site_ca;
pub mod sockopt;
pub mod store;
pub mod tftp;
pub mod timeline;
pub mod udp_batch;
