//! The `.deb` under a real systemd: a clean Debian container (podman) boots systemd as
//! PID 1, the package is installed, and the shipped unit runs the server with all its
//! sandboxing (the system-call filter, the capability sets, the private mounts).
//! `systemctl start` makes it active and `/healthz` answers; `systemctl reload`
//! (ExecReload, SIGHUP) keeps the same main process, which logs the reload and applies
//! a new `log_level`; the system-call filter is in force and killed nothing.

use crate::common;

use std::time::{Duration, Instant};

use super::deb::{build_deb, debian_image, installed, run, run_ok, Cleanup};
use common::Lab;

/// `systemctl show -p KEY --value shardboot` inside the container.
fn show(container: &str, key: &str) -> String {
    run_ok(
        "podman",
        &[
            "exec",
            container,
            "systemctl",
            "show",
            "-p",
            key,
            "--value",
            "shardboot",
        ],
    )
    .trim()
    .to_string()
}

/// The unit's journal inside the container, messages only.
fn journal(container: &str) -> String {
    let out = run(
        "podman",
        &[
            "exec",
            container,
            "journalctl",
            "-u",
            "shardboot",
            "--no-pager",
            "-o",
            "cat",
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `f` every 300 ms until it holds, at most `limit`; panics with `what` and
/// `context()` after.
fn wait_for(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}:\n{}", context());
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn deb_under_systemd_as_pid_1_starts_answers_reloads_in_place_and_survives_its_filter() {
    require_root!();
    for tool in ["dpkg-deb", "dpkg-shlibdeps", "podman", "mmdebstrap"] {
        if !installed(tool) {
            common::skip_or_fail(
                "podman",
                &format!("{tool} is not installed (tests/install-deps.sh installs it)"),
            );
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let deb = build_deb(dir.path());
    let image = format!("localhost/shardboot-systemd-test:{}", common::unique("t"));
    let container = common::unique("sbsysd");
    let _cleanup = Cleanup {
        container: container.clone(),
        image: image.clone(),
    };
    // systemd-sysv: /sbin/init; the rest of what systemd needs comes with systemd.
    debian_image(dir.path(), &image, "ipxe,systemd,systemd-sysv");

    // The built-in default serves 192.0.2.0/24 on the interface that has an address in
    // it: the container runs on a test namespace that has one.
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let mount = format!("{}:/tmp/shardboot.deb:ro", deb.display());
    let netns = format!("ns:/run/netns/{}", lab.server.name);
    run_ok(
        "podman",
        &[
            "run",
            "-d",
            "--pull",
            "never",
            "--name",
            &container,
            "--network",
            &netns,
            // podman mounts what systemd needs (a cgroup tree, tmpfs on /run and /tmp)
            // and stops it with SIGRTMIN+3.
            "--systemd=always",
            "--cap-add",
            "NET_ADMIN,NET_RAW,NET_BIND_SERVICE",
            "-v",
            &mount,
            &image,
            "/lib/systemd/systemd",
        ],
    );
    let exec = |args: &[&str]| {
        let mut all = vec!["exec", container.as_str()];
        all.extend_from_slice(args);
        run("podman", &all)
    };
    let context = || {
        let out = exec(&["journalctl", "--no-pager", "-n", "60"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr)
            + &String::from_utf8_lossy(&run("podman", &["logs", &container]).stderr)
    };
    // "degraded" is running with some unit failed (a container lacks a device or two):
    // what matters here is the one unit below.
    wait_for(
        "systemd did not come up as PID 1",
        Duration::from_secs(60),
        || {
            let out = exec(&["systemctl", "is-system-running"]);
            let state = String::from_utf8_lossy(&out.stdout);
            matches!(state.trim(), "running" | "degraded")
        },
        context,
    );

    run_ok(
        "podman",
        &["exec", &container, "dpkg", "-i", "/tmp/shardboot.deb"],
    );
    run_ok(
        "podman",
        &["exec", &container, "systemctl", "start", "shardboot"],
    );
    wait_for(
        "the service did not start listening",
        Duration::from_secs(60),
        || {
            show(&container, "ActiveState") == "active"
                && journal(&container).contains("DHCP listening")
        },
        || journal(&container),
    );
    let pid = show(&container, "MainPID");
    assert_ne!(pid, "0", "{}", journal(&container));

    let health = lab
        .server
        .command("curl")
        .args(["-sf", "http://127.0.0.1:8080/healthz"])
        .output()
        .unwrap();
    assert!(
        health.status.success(),
        "/healthz:\n{}",
        journal(&container)
    );

    // The system-call filter is in force on the main process (mode 2: a filter).
    let status = run_ok(
        "podman",
        &["exec", &container, "cat", &format!("/proc/{pid}/status")],
    );
    let seccomp = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(str::trim);
    assert_eq!(seccomp, Some("2"), "no system-call filter:\n{status}");

    // `systemctl reload`: SIGHUP to the same process, which reads the file again and
    // applies what changed (here the log level).
    run_ok(
        "podman",
        &[
            "exec",
            &container,
            "sed",
            "-i",
            "s/^log_level = \"info\"/log_level = \"info,shardboot=debug\"/",
            "/etc/shardboot/shardboot.toml",
        ],
    );
    run_ok(
        "podman",
        &["exec", &container, "systemctl", "reload", "shardboot"],
    );
    wait_for(
        "the reload was not logged",
        Duration::from_secs(20),
        || journal(&container).contains("configuration reloaded"),
        || journal(&container),
    );
    let log = journal(&container);
    assert!(log.contains("SIGHUP: reloading the configuration"), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("configuration reloaded"))
        .unwrap();
    assert!(line.contains("applied=log_level"), "{line}");
    assert_eq!(
        show(&container, "MainPID"),
        pid,
        "reload restarted it:\n{log}"
    );
    assert_eq!(show(&container, "ActiveState"), "active");

    // Nothing was killed by the filter (SIGSYS, status 31) or restarted meanwhile.
    for bad in ["SIGSYS", "status=31/SYS", "code=killed"] {
        assert!(!log.contains(bad), "{bad} in the journal:\n{log}");
    }
    assert_eq!(show(&container, "NRestarts"), "0", "{log}");
    run_ok(
        "podman",
        &["exec", &container, "systemctl", "stop", "shardboot"],
    );
    let log = journal(&container);
    assert!(log.contains("shutting down"), "{log}");
    assert!(!log.contains("SIGSYS"), "{log}");
}
