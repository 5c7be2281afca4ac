//! A real OpenStack Ironic (tests/ironic/lab.sh: PyPI `ironic`, conductors sharing a
//! PostgreSQL database) for the tests that route and follow membership by it. The labs
//! share fixed RPC ports, so the tests of one binary take turns ([`ONE_LAB_AT_A_TIME`]);
//! test binaries run one after another.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub(crate) static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lab_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ironic/lab.sh")
}

/// A running Ironic lab, stopped on drop.
pub(crate) struct IronicLab {
    pub(crate) dir: tempfile::TempDir,
    /// The network namespace it runs in (None: the test's own).
    netns: Option<String>,
}

impl IronicLab {
    pub(crate) fn start(extra: &[&str]) -> Self {
        Self::start_in(None, extra)
    }

    pub(crate) fn start_in(netns: Option<&str>, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("sb-ironic-")
            .tempdir_in("/tmp")
            .unwrap();
        // PostgreSQL runs as user postgres and must reach its socket directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let lab = Self {
            dir,
            netns: netns.map(str::to_string),
        };
        // Set-up may download from PyPI: always from the test's own namespace.
        let setup = Command::new("bash")
            .arg(lab_sh())
            .arg("setup")
            .stderr(Stdio::inherit())
            .status()
            .expect("lab.sh setup");
        assert!(setup.success(), "lab.sh setup failed");
        lab.run(&["start"], extra);
        lab
    }

    /// Runs `lab.sh CMD DIR ARGS…` (setup takes no DIR); returns stdout.
    pub(crate) fn run(&self, cmd: &[&str], args: &[&str]) -> String {
        let mut c = self.command();
        c.args(cmd);
        if cmd != ["setup"] {
            c.arg(self.dir.path());
        }
        let out = c
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .expect("lab.sh");
        assert!(out.status.success(), "lab.sh {cmd:?} {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    }

    pub(crate) fn api_url(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("api_url"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// MAC → conductor, as Ironic reports it now.
    pub(crate) fn owners(&self) -> Vec<(String, Option<String>)> {
        self.run(&["owners"], &[])
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["mac"].as_str().unwrap().to_string(),
                    v["conductor"].as_str().map(str::to_string),
                )
            })
            .collect()
    }
}

impl IronicLab {
    /// `bash lab.sh`, inside the lab's namespace when it has one.
    pub(crate) fn command(&self) -> Command {
        let mut c = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "bash"]);
                c
            }
            None => Command::new("bash"),
        };
        c.arg(lab_sh());
        c
    }
}

impl IronicLab {
    /// Sends `signal` (STOP, CONT) to the API's process group: a stopped API accepts
    /// connections and never answers, as an Ironic that hangs does.
    pub(crate) fn signal_api(&self, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.path().join("ironic-1.pid")).unwrap();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", pid.trim()))
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} the Ironic API");
    }
}

impl Drop for IronicLab {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("stop")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .status();
    }
}

/// The name Ironic reports for conductor `n` of a lab (tests/ironic/lab.sh): conductor 1
/// on Ironic's default JSON-RPC port, conductor n >= 2 on 127.0.0.n:(8088 + n).
pub(crate) fn conductor_name(n: u8) -> String {
    if n == 1 {
        "127.0.0.1".into()
    } else {
        format!("127.0.0.{n}:{}", 8088 + u16::from(n))
    }
}

impl IronicLab {
    /// Starts conductor `n` (>= 2): again, or for the first time (a conductor joining).
    pub(crate) fn start_conductor(&self, n: u8) {
        self.run(&["start-conductor"], &[&n.to_string()]);
    }

    /// Stops conductor `n` (>= 2) with SIGTERM (it deregisters) or SIGKILL (a crash,
    /// noticed after the heartbeat timeout); returns once Ironic reports no node on it.
    pub(crate) fn stop_conductor(&self, n: u8, kill: bool) {
        let n = n.to_string();
        let mut args = vec![n.as_str()];
        if kill {
            args.push("--kill");
        }
        self.run(&["stop-conductor"], &args);
    }
}
