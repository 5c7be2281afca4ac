//! Shared helpers for the TFTP integration tests: an in-process server, a temp root with
//! real iPXE binaries and random files, external client runners, a small scriptable
//! TFTP client, and a network-namespace guard.
// Each test module uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

mod client;
mod netns;

pub(crate) use super::skip_or_fail;

pub(crate) use client::*;
pub(crate) use netns::*;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shardboot::config::TftpSettings;
use shardboot::tftp::{self, TftpError, TftpMetrics};
use tokio_util::sync::CancellationToken;

/// The server running `tftp::run` on its own runtime thread; stopped on drop.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    pub metrics: Arc<TftpMetrics>,
    token: CancellationToken,
    thread: Option<JoinHandle<Result<(), TftpError>>>,
}

impl TestServer {
    pub(crate) fn start(settings: TftpSettings, bind: SocketAddr) -> Self {
        // RUST_LOG=shardboot=debug shows the server's events in failing tests.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let sock = UdpSocket::bind(bind).expect("bind test server");
        sock.set_nonblocking(true).unwrap();
        let addr = sock.local_addr().unwrap();
        let metrics = Arc::new(TftpMetrics::default());
        let token = CancellationToken::new();
        let (m, t, s) = (
            metrics.clone(),
            token.clone(),
            tftp::FileRoot::new(settings),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let sock = tokio::net::UdpSocket::from_std(sock).unwrap();
                tftp::run(sock, s, m, t).await
            })
        });
        TestServer {
            addr,
            metrics,
            token,
            thread: Some(thread),
        }
    }

    /// Cancels and waits (bounded) for `run` to return.
    pub(crate) fn stop(mut self) -> Result<(), TftpError> {
        self.token.cancel();
        let h = self.thread.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !h.is_finished() {
            assert!(Instant::now() < deadline, "tftp::run did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().expect("server thread panicked")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.token.cancel();
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift64*), so failures reproduce.
pub(crate) fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// A temp root holding copies of the iPXE binaries and random files of awkward sizes.
pub(crate) struct Root {
    pub dir: tempfile::TempDir,
    pub files: Vec<(String, Vec<u8>)>,
}

impl Root {
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn new() -> Root {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (i, name) in ["ipxe.efi", "snponly.efi", "undionly.kpxe"]
            .iter()
            .enumerate()
        {
            // Follow Debian's symlink (ipxe.efi -> /boot/ipxe.efi) when copying.
            let data = std::fs::read(Path::new("/usr/lib/ipxe").join(name))
                .unwrap_or_else(|_| random_bytes(300_000 + i * 1000, i as u64));
            files.push((name.to_string(), data));
        }
        for (name, len) in [
            ("empty.bin", 0usize),
            ("one.bin", 1),
            ("b511.bin", 511),
            ("b512.bin", 512),
            ("b1468.bin", 1468),
            ("w8.bin", 1468 * 8),
            ("rand-300k.bin", 300_001),
        ] {
            files.push((name.to_string(), random_bytes(len, len as u64 + 7)));
        }
        for (name, data) in &files {
            std::fs::write(dir.path().join(name), data).unwrap();
        }
        Root { dir, files }
    }
}

/// Settings for tests: the temp root, quick retransmission.
pub(crate) fn settings(root: &Path) -> TftpSettings {
    TftpSettings {
        root: root.to_owned(),
        timeout: Duration::from_millis(200),
        retries: 8,
        ..TftpSettings::default()
    }
}

/// Runs a command with a hard time limit (coreutils `timeout`), optionally inside a
/// network namespace; returns (success, combined output).
pub(crate) fn run_cmd(netns: Option<&str>, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg("60");
    if let Some(ns) = netns {
        cmd.args(["ip", "netns", "exec", ns]);
    }
    cmd.args(args);
    let out = cmd.output().expect("spawn client");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

pub(crate) fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// External TFTP clients and their option variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    TftpHpa,
    Atftp,
    AtftpBlksize,
    AtftpWindow8,
    Curl,
    CurlBlksize,
}

pub(crate) const ALL_TOOLS: [Tool; 6] = [
    Tool::TftpHpa,
    Tool::Atftp,
    Tool::AtftpBlksize,
    Tool::AtftpWindow8,
    Tool::Curl,
    Tool::CurlBlksize,
];

/// Downloads `name` from `server` with `tool` into `dest`.
pub(crate) fn download(
    tool: Tool,
    netns: Option<&str>,
    server: SocketAddr,
    name: &str,
    dest: &Path,
) -> (bool, String) {
    let host = server.ip().to_string();
    let port = server.port().to_string();
    let dest_s = dest.to_str().unwrap();
    let url = format!("tftp://{host}:{port}/{name}");
    let args: Vec<&str> = match tool {
        Tool::TftpHpa => vec![
            "tftp", "-m", "binary", &host, &port, "-c", "get", name, dest_s,
        ],
        Tool::Atftp => vec!["atftp", "-g", "-r", name, "-l", dest_s, &host, &port],
        Tool::AtftpBlksize => vec![
            "atftp",
            "--option",
            "blksize 1468",
            "-g",
            "-r",
            name,
            "-l",
            dest_s,
            &host,
            &port,
        ],
        Tool::AtftpWindow8 => vec![
            "atftp",
            "--option",
            "blksize 1468",
            "--option",
            "windowsize 8",
            "-g",
            "-r",
            name,
            "-l",
            dest_s,
            &host,
            &port,
        ],
        Tool::Curl => vec!["curl", "-sS", "--max-time", "50", "-o", dest_s, &url],
        Tool::CurlBlksize => vec![
            "curl",
            "-sS",
            "--max-time",
            "50",
            "--tftp-blksize",
            "1468",
            "-o",
            dest_s,
            &url,
        ],
    };
    run_cmd(netns, &args)
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Waits until `cond` holds, bounded.
pub(crate) fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn scratch(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("dl-{name}"))
}
