//! Tests that load the whole machine (Kea's perfdhcp at full rate): a binary of their
//! own, so that nothing else runs beside them and a shortfall is the server's, not the
//! neighbour test's. Its tests still take one lock, so they run one at a time.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod perfdhcp;
