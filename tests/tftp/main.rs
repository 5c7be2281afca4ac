//! TFTP: real clients, protocol behaviour over real sockets, load, and the `[tftp]`
//! configuration.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod clients;
mod config;
mod load;
mod netns;
mod protocol;
