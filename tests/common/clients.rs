//! The real DHCP and TFTP clients as the tests run them inside a namespace: udhcpc with
//! the event-recording script, and tftp-hpa fetching one file.

use std::path::Path;
use std::process::{ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use super::Netns;

/// The path of a script in `tests/scripts/`.
pub(crate) fn script(name: &str) -> String {
    format!("{}/tests/scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// One-shot udhcpc on `iface` in `ns`: obtain a lease and quit (`-q`), fail rather than
/// background (`-n`), five tries a second apart; `extra` flags first (vendor class,
/// options). Its events go to `events` (tests/scripts/udhcpc-script).
pub(crate) fn udhcpc_once(ns: &Netns, iface: &str, events: &Path, extra: &[&str]) -> ExitStatus {
    ns.command("udhcpc")
        .args(extra)
        .args(["-q", "-n", "-f", "-t", "5", "-T", "1", "-A", "1", "-s"])
        .arg(script("udhcpc-script"))
        .args(["-i", iface])
        .env("SB_EVENTS", events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
}

/// tftp-hpa in `ns` fetching `file` from `server` in binary mode into `dest`.
pub(crate) fn tftp_get(ns: &Netns, server: &str, file: &str, dest: &Path) -> Output {
    ns.command("tftp")
        .args(["-m", "binary", server, "-c", "get", file])
        .arg(dest)
        .output()
        .unwrap()
}

/// A wrapper around `tests/scripts/<hook>` for dhclient, which runs its script with a
/// clean environment: the events path is baked in. Written into `dir`.
pub(crate) fn dhclient_hook(dir: &Path, hook: &str, events: &Path) -> std::path::PathBuf {
    let wrapper = dir.join(format!("{hook}-wrapper"));
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nSB_EVENTS={} exec {} \"$@\"\n",
            events.display(),
            script(hook)
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    wrapper
}

/// Waits until the events file has a line starting with `event`; returns that line's fields.
pub(crate) fn wait_event(events: &Path, event: &str, nth: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = std::fs::read_to_string(events).unwrap_or_default();
        let hits: Vec<&str> = text
            .lines()
            .filter(|l| l.split(' ').next() == Some(event))
            .collect();
        if hits.len() >= nth {
            return hits[nth - 1].split(' ').map(str::to_string).collect();
        }
        assert!(
            Instant::now() < deadline,
            "no {event} #{nth} event; events so far:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
