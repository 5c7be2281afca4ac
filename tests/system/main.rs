//! The whole system: config fixtures, the OCI image, ironic-image's environment, the
//! Kubernetes overlays, real firmware in QEMU, `serve` wiring and the site simulation.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[path = "../sim/mod.rs"]
mod sim;

mod cli_generate;
mod config_fixtures;
mod container;
mod deb;
mod deb_systemd;
mod docs_paths;
mod explain;
mod ironic_env;
mod kubernetes;
mod qemu_boot;
mod qemu_boot6;
mod qemu_secure_boot;
mod serve_wiring;
mod site_sim;
