//! HTTP: the boot routes, hostile clients, and the operator API (plain, TLS, DHCPv6
//! leases, the `/ui` page in a real browser).
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod boot;
mod boot_tls;
mod hostile;
mod operator_api;
mod operator_leases6;
mod operator_tls;
mod operator_ui;
mod timeline_board;
