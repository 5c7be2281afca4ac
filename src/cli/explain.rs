//! `check-config --explain`: the effective configuration with each value's source.

use std::io::Write;

use crate::config::{explain, ExplainBase, Layer};

/// Prints every key of the configuration `base` and `layers` give, one per line
/// (`key = value  # source`; a key no layer sets as a comment), a blank line between
/// top-level sections.
pub fn print_explained(base: ExplainBase<'_>, layers: &[Layer]) -> anyhow::Result<()> {
    let keys = explain(base, layers)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n# effective configuration (later layers win: file or environment mapping, SHARDBOOT_* variables, flags)")?;
    let mut section = "";
    for k in &keys {
        let top = k.key.split(['.', '[']).next().unwrap_or("");
        if top != section && k.key.contains(['.', '[']) {
            writeln!(out)?;
        }
        section = top;
        writeln!(out, "{k}")?;
    }
    Ok(())
}
