//! What binary is running: the crate's version and the commit it was built from (set
//! once by `main`, from `SHARDBOOT_COMMIT` at build time), for the `shardboot_build_info`
//! metric.

use std::sync::OnceLock;

static COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Records the commit; the first call wins.
pub fn set_commit(commit: &'static str) {
    let _ = COMMIT.set(commit);
}

/// The commit, or "unknown" when `main` did not say (tests, the library alone).
pub fn commit() -> &'static str {
    COMMIT.get().copied().unwrap_or("unknown")
}

/// `shardboot_build_info{version, commit} 1`, as Prometheus' `*_build_info` convention.
pub fn render_prometheus(out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP shardboot_build_info The running binary: its version and commit\n# TYPE shardboot_build_info gauge\nshardboot_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        commit()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_metric_names_the_version_and_the_commit() {
        super::set_commit("0123456789ab");
        let mut out = String::new();
        super::render_prometheus(&mut out);
        assert!(out.contains(&format!(
            "shardboot_build_info{{version=\"{}\",commit=\"0123456789ab\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }
}
