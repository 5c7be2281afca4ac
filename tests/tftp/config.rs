//! Every file in fixtures/tftp/ is parsed: `valid_*` must convert, `invalid_*` must fail
//! with the error its first-line `# error:` comment announces.

use serde::Deserialize;
use shardboot::config::{RawTftp, TftpSettings};

#[derive(Deserialize)]
struct File {
    tftp: RawTftp,
}

fn parse(text: &str) -> Result<TftpSettings, String> {
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    TftpSettings::try_from(f.tftp).map_err(|e| e.to_string())
}

#[test]
fn fixtures_parse_or_fail_as_named() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tftp");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        seen += 1;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let result = parse(&text);
        if name.starts_with("valid_") {
            assert!(result.is_ok(), "{name}: {:?}", result.err());
        } else if name.starts_with("invalid_") {
            let want = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# error: "))
                .unwrap_or_else(|| panic!("{name}: first line must be `# error: ...`"));
            let err = result.expect_err(&name);
            assert!(err.contains(want), "{name}: got {err:?}, want {want:?}");
        } else {
            panic!("{name}: fixture names start with valid_ or invalid_");
        }
    }
    assert!(seen >= 8, "only {seen} fixtures");
}

#[test]
fn full_fixture_values_arrive() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tftp");
    let s = parse(&std::fs::read_to_string(dir.join("valid_full.toml")).unwrap()).unwrap();
    assert_eq!(s.max_blksize, 1432);
    assert_eq!(s.timeout, std::time::Duration::from_millis(1500));
    assert!(s.single_port);
    assert_eq!(s.aliases["ipxe-arm64.efi"], "arm64/ipxe.efi");
}

#[test]
fn timeout_cap_and_deadline_have_safe_defaults_and_are_settable() {
    let d = parse("[tftp]\n").unwrap();
    assert_eq!(d.max_timeout, std::time::Duration::from_secs(5));
    assert_eq!(d.transfer_deadline, std::time::Duration::from_secs(120));
    let s = parse("[tftp]\nmax_timeout_secs = 255\ntransfer_deadline_secs = 600").unwrap();
    assert_eq!(s.max_timeout, std::time::Duration::from_secs(255));
    assert_eq!(s.transfer_deadline, std::time::Duration::from_secs(600));
    assert_eq!(
        parse("[tftp]\nmax_timeout_secs = 0").unwrap_err(),
        "tftp.max_timeout_secs: must be between 1 and 255"
    );
    assert_eq!(
        parse("[tftp]\ntransfer_deadline_secs = 86401").unwrap_err(),
        "tftp.transfer_deadline_secs: must be between 1 and 86400"
    );
}
