//! Records the commit the binary is built from (`SHARDBOOT_COMMIT`, for `--version`,
//! the start-up line and the `shardboot_build_info` metric): the variable itself when
//! the build sets it (an image built from a tarball), else `git rev-parse`, else
//! "unknown". Only the binary reads it, so a commit without a source change rebuilds
//! the binary, not the library and every test.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SHARDBOOT_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    // The branch HEAD names moves with each commit.
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{r}");
        }
    }
    println!("cargo:rerun-if-changed=.git/packed-refs");
    let commit = std::env::var("SHARDBOOT_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    let commit = commit
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_alphanumeric()))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SHARDBOOT_COMMIT={commit}");
}
