//! Config parsing on arbitrary UTF-8: `Config::from_toml_with_overrides` returns a
//! config or an error, never a panic. Text after the first NUL is read as `--set`
//! lines (`key=value`), so the override layer is reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardboot::config::{parse_flag, Config};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (toml, flags) = text.split_once('\0').unwrap_or((text, ""));
    let overrides: Vec<(String, String)> =
        flags.lines().filter_map(|l| parse_flag(l).ok()).collect();
    if let Ok(cfg) = Config::from_toml_with_overrides(toml, &overrides) {
        // A valid config names its boot files without panicking.
        let _ = cfg.boot_file_names();
    }
});
