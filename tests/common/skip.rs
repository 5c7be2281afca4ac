//! Skipping a test whose prerequisite is missing, only where the run allows it (shared
//! by `tests/common` and `tests/tftp_support`).

/// The variable that lets a test whose prerequisite is missing skip instead of
/// failing: `1` for any prerequisite, or a comma-separated list of them (`root`,
/// `podman`, `ipxe`, `ipv6`, `tools`, `netem`; tests/run.sh allows `netem` only on a
/// kernel without it, and says so). Otherwise a missing prerequisite fails the test: a
/// run that checked nothing must not report ok. Not `SHARDBOOT_*`: the servers the
/// tests start inherit the environment and take those as configuration keys.
pub(crate) const ALLOW_SKIP: &str = "SB_ALLOW_SKIP";

/// Says why the calling test cannot run: `what` is missing. When [`ALLOW_SKIP`] allows
/// it, prints the reason and returns (the caller then returns); otherwise the test
/// fails with it.
pub(crate) fn skip_or_fail(what: &str, reason: &str) {
    let allowed =
        std::env::var(ALLOW_SKIP).is_ok_and(|v| v == "1" || v.split(',').any(|w| w.trim() == what));
    if allowed {
        eprintln!("skipped ({ALLOW_SKIP} allows {what}): {reason}");
        return;
    }
    panic!("cannot run: {reason} (set {ALLOW_SKIP}={what} to skip such tests instead)");
}
