//! Every file in fixtures/config/ goes through `shardboot check-config`: valid ones pass,
//! `invalid-*` ones fail with the error their first line announces (`# error: …`), and
//! that error names the key.

use std::process::Command;

fn check_config(path: &std::path::Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("check-config")
        .arg("--config")
        .arg(path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_fixture_config_is_judged_as_its_name_says() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/config");
    let mut seen = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let (ok, stdout, stderr) = check_config(&path, &[]);
        if name.starts_with("invalid-") {
            let expected = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# error: "))
                .unwrap_or_else(|| panic!("{name}: first line must be '# error: …'"));
            assert!(!ok, "{name} was accepted");
            assert!(
                stderr.contains(expected),
                "{name}: expected {expected:?} in:\n{stderr}"
            );
            seen.1 += 1;
        } else {
            assert!(ok, "{name} rejected:\n{stderr}");
            assert!(stdout.contains("configuration OK"), "{stdout}");
            seen.0 += 1;
        }
    }
    assert!(seen.0 >= 1 && seen.1 >= 5, "fixtures found: {seen:?}");
}

#[test]
fn check_config_reports_every_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "log_format = \"yaml\"\n[dhcp]\nserver_id = \"1.2.3\"\n[[subnet]]\nnetwork = \"192.0.2.0/33\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = check_config(&path, &[]);
    assert!(!ok);
    for key in ["log_format:", "dhcp.server_id:", "subnet[0].network:"] {
        assert!(stderr.contains(key), "{key} missing from:\n{stderr}");
    }
}

#[test]
fn every_unknown_key_and_wrongly_typed_value_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[dhcp]\nportt = 67\nnever_nak = \"yes\"\n[[subnet]]\nnetwork = \"192.0.2.0/24\"\n\
         ranges = [\"192.0.2.10 - 192.0.2.20\"]\nlease_time = -1\n[tftp]\nblocksize = 1468\n",
    )
    .unwrap();
    // The CLI's own variables are not config keys and must not break the config.
    let (ok, _, stderr) = check_config(
        &path,
        &[
            ("SHARDBOOT_SERVER", "http://127.0.0.1:8080"),
            ("SHARDBOOT_TOKEN_FILE", "/nonexistent"),
        ],
    );
    assert!(!ok);
    for key in [
        "dhcp.portt: unknown field",
        "dhcp.never_nak: invalid type",
        "subnet[0].lease_time: invalid value",
        "tftp.blocksize: unknown field",
    ] {
        assert!(stderr.contains(key), "{key} missing from:\n{stderr}");
    }
    assert!(
        !stderr.contains("SERVER") && !stderr.contains("server:"),
        "{stderr}"
    );
}

#[test]
fn environment_overrides_are_validated_too() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/config/production-example.toml");
    let (ok, _, stderr) = check_config(&path, &[("SHARDBOOT_SUBNET__0__LEASE_TIME", "5")]);
    assert!(!ok);
    assert!(
        stderr.contains("subnet[0].lease_time: must be at least 60 seconds"),
        "{stderr}"
    );
    let (ok, stdout, _) = check_config(&path, &[("SHARDBOOT_SUBNET__0__LEASE_TIME", "7200")]);
    assert!(ok);
    assert!(stdout.contains("lease 7200 s"), "{stdout}");
}

#[test]
fn the_built_in_default_passes() {
    let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
        .arg("check-config")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("192.0.2.0/24"));
}

#[test]
fn the_documented_example_config_is_valid() {
    // The configuration reference holds the complete example and the Ironic one.
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let block: String = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/configuration.md has a toml block")
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("readme.toml");
    let secret = dir.path().join("member-secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    let block = block.replace(
        "/etc/shardboot/member-secret",
        &secret.display().to_string(),
    );
    std::fs::write(&path, block).unwrap();
    let (ok, stdout, stderr) = check_config(&path, &[]);
    assert!(ok, "docs/configuration.md example rejected:\n{stderr}");
    assert!(stdout.contains("subnet[1] 172.23.4.0/24"), "{stdout}");

    // The Ironic example, with its secret and CA files put where it says.
    let ironic: String = readme
        .split("```toml\n")
        .find(|b| b.starts_with("[owner.ironic]"))
        .and_then(|rest| rest.split("```").next())
        .expect("docs/configuration.md has an [owner.ironic] example")
        .to_string();
    let (pw, ca) = (dir.path().join("password"), dir.path().join("ca.pem"));
    std::fs::write(&pw, "secret\n").unwrap();
    std::fs::write(&ca, "not checked until serve\n").unwrap();
    let ironic = ironic
        .replace("/auth/ironic/password", &pw.display().to_string())
        .replace("/certs/ca/ironic/tls.crt", &ca.display().to_string());
    let path = dir.path().join("ironic.toml");
    std::fs::write(&path, ironic).unwrap();
    let (ok, _, stderr) = check_config(&path, &[]);
    assert!(
        ok,
        "docs/configuration.md Ironic example rejected:\n{stderr}"
    );
}
