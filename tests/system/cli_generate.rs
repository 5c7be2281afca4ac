//! `shardboot completions <shell>` and `shardboot man`, which the .deb installs: each
//! is non-empty and names every subcommand an operator can type.

use std::process::Command;

/// The visible subcommands (the hidden `completions` and `man` are for packaging).
const SUBCOMMANDS: [&str; 7] = [
    "serve",
    "check-config",
    "owner",
    "leases",
    "members",
    "trace",
    "hosts",
];

fn output(args: &[&str]) -> String {
    // An environment that would make loading a config fail: generating reads none.
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .args(args)
        .env("SHARDBOOT_CONFIG", "/nonexistent/shardboot.toml")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_for_every_shell_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = output(&["completions", shell]);
        assert!(script.len() > 1000, "{shell}: {script}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
        // Nested subcommands and flags are completed too (fish writes `-l token-file`).
        assert!(
            script.contains("import") && script.contains("token-file"),
            "{shell}"
        );
    }
}

#[test]
fn man_page_names_every_subcommand_and_option() {
    let page = output(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH shardboot 1"),
        "{page}"
    );
    assert!(page.contains(".TH shardboot 1"), "{page}");
    assert!(
        page.contains(env!("CARGO_PKG_VERSION")),
        "the version is in the header"
    );
    // roff escapes the hyphen: check-config is written check\-config.
    let plain = page.replace("\\-", "-");
    for sub in SUBCOMMANDS {
        assert!(plain.contains(sub), "the man page lacks {sub}");
    }
    for flag in [
        "--config",
        "--set",
        "--env",
        "--state-dir",
        "SHARDBOOT_CONFIG",
    ] {
        assert!(plain.contains(flag), "the man page lacks {flag}");
    }
}

#[test]
fn generators_are_hidden_from_help() {
    let help = output(&["--help"]);
    assert!(
        !help.contains("completions") && !help.contains("\n  man"),
        "{help}"
    );
}
