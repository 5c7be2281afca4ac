//! Skipping a test whose prerequisite is missing, only where the run allows it.

/// The variable that lets a test whose prerequisite is missing skip instead of
/// failing: `1` for any prerequisite, or a comma-separated list of them (`root`,
/// `podman`, `ipxe`, `ipv6`, `tools`, `netem`; tests/run.sh allows `netem` only on a
/// kernel without it, and says so). Otherwise a missing prerequisite fails the test: a
/// run that checked nothing must not report ok. Not `SHARDBOOT_*`: the servers the
/// tests start inherit the environment and take those as configuration keys.
pub(crate) const ALLOW_SKIP: &str = "SB_ALLOW_SKIP";

/// What a skipped test prints first, on a line of its own: tests/run.sh counts these
/// lines, so that a test that returned early is not taken for one that passed.
pub(crate) const SKIPPED: &str = "SKIPPED: ";

/// Says why the calling test cannot run: `what` is missing. When [`ALLOW_SKIP`] allows
/// it, prints `SKIPPED: <binary>::<test> (<what>): <reason>` and returns (the caller
/// then returns); otherwise the test fails with it.
pub(crate) fn skip_or_fail(what: &str, reason: &str) {
    let allowed =
        std::env::var(ALLOW_SKIP).is_ok_and(|v| v == "1" || v.split(',').any(|w| w.trim() == what));
    if allowed {
        // Straight to the process's stderr: libtest captures `eprintln!` of a test that
        // passes, and a skipped test passes. One write, so parallel tests' lines stay
        // whole (one may still start after another test's "test … " on the same line).
        use std::io::Write;
        // The test binary's name without cargo's hash: `dhcp-0a1b…`.
        let exe = std::env::current_exe().unwrap_or_default();
        let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
        let binary = stem.rsplit_once('-').map_or(&*stem, |(name, _hash)| name);
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("?");
        let line =
            format!("{SKIPPED}{binary}::{test} ({what}): {reason} ({ALLOW_SKIP} allows it)\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
        return;
    }
    panic!("cannot run: {reason} (set {ALLOW_SKIP}={what} to skip such tests instead)");
}
