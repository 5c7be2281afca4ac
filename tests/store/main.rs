//! The lease store: the shared SQL store against real MariaDB and PostgreSQL, power cuts,
//! a full disk and poisoned records.
//!
//! One test binary per area (docs/layout.md): each file below is a module; the
//! harness is `tests/common`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod disk_full;
mod faults;
mod powercut;
mod powercut_fs;
mod shared;
