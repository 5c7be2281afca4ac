//! The power-cut file system of examples/powercut_fs.rs, run for a test: a FUSE mount
//! that keeps only what was fsynced; `cut` drops everything else and answers EIO until
//! `power_on`. Needs root and /dev/fuse; the tests that use it fail without them.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const WAIT: Duration = Duration::from_secs(30);

/// Fails (never skips) when the test cannot mount a FUSE file system.
pub(crate) fn require_fuse() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "tests/store/powercut_fs.rs needs root: it mounts a FUSE file system (run the suite as root)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "tests/store/powercut_fs.rs needs /dev/fuse (modprobe fuse, or pass the device to the container)"
    );
}

/// `target/<profile>/examples/powercut_fs`, next to this test's `target/<profile>/deps/`.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let bin = profile_dir.join("examples").join("powercut_fs");
    assert!(
        bin.is_file(),
        "{} is missing: run the suite with tests/run.sh, which builds it (or first \
         `cargo build --example powercut_fs` with the same profile)",
        bin.display()
    );
    bin
}

fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.as_os_str().as_bytes();
    let info = fs::read("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    info.split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .any(|point| point == want)
}

/// A running powercut_fs. Dropping it stops the file system and makes sure the mount is gone,
/// also when a test panics.
pub(crate) struct PowercutFs {
    child: Option<Child>,
    /// The mount point.
    pub(crate) mnt: PathBuf,
    lines: mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl PowercutFs {
    pub(crate) fn start(lenient: bool) -> Self {
        require_fuse();
        let bin = binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().canonicalize().expect("canonicalize").join("mnt");
        fs::create_dir(&mnt).expect("create mount point");
        let mut cmd = Command::new(&bin);
        cmd.arg(&mnt)
            .env_remove("POWERCUT_LENIENT_NAMES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if lenient {
            cmd.arg("--lenient-names");
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let fs = PowercutFs {
            child: Some(child),
            mnt,
            lines,
            _dir: dir,
        };
        fs.wait_line("mounted");
        assert!(
            is_mounted(&fs.mnt),
            "{} is not in mountinfo",
            fs.mnt.display()
        );
        fs
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Waits for a stdout line starting with `prefix` and returns it.
    pub(crate) fn wait_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("powercut_fs printed no `{prefix}` line within {WAIT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("powercut_fs exited before printing `{prefix}`")
                }
            }
        }
    }

    pub(crate) fn signal(&self, sig: Signal) {
        let child = self.child.as_ref().expect("running");
        kill(Pid::from_raw(child.id() as i32), sig).expect("kill");
    }

    pub(crate) fn cut(&self) -> String {
        self.signal(Signal::SIGUSR1);
        self.wait_line("cut:")
    }

    pub(crate) fn power_on(&self) {
        self.signal(Signal::SIGUSR2);
        self.wait_line("power on");
    }

    /// SIGTERM, wait for a clean exit and check the mount is gone.
    pub(crate) fn stop(mut self) {
        self.signal(Signal::SIGTERM);
        let mut child = self.child.take().expect("running");
        let status = wait_timeout(&mut child, WAIT).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("powercut_fs did not exit within {WAIT:?} of SIGTERM");
        });
        assert!(status.success(), "powercut_fs exited with {status}");
        assert!(
            !is_mounted(&self.mnt),
            "{} still mounted after powercut_fs exited",
            self.mnt.display()
        );
    }
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

impl Drop for PowercutFs {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            if wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.mnt)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if is_mounted(&self.mnt) {
            if let Ok(path) = std::ffi::CString::new(self.mnt.as_os_str().as_bytes()) {
                // SAFETY: a valid NUL-terminated path.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}
