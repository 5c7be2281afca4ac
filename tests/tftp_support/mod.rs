//! Shared helpers for the TFTP integration tests: an in-process server, a temp root with
//! real iPXE binaries and random files, external client runners, a small scriptable
//! TFTP client, and a network-namespace guard.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shardboot::tftp::{self, TftpError, TftpMetrics, TftpSettings};
use tokio_util::sync::CancellationToken;

/// The server running `tftp::run` on its own runtime thread; stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics: Arc<TftpMetrics>,
    token: CancellationToken,
    thread: Option<JoinHandle<Result<(), TftpError>>>,
}

impl TestServer {
    pub fn start(settings: TftpSettings, bind: SocketAddr) -> Self {
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
        let (m, t, s) = (metrics.clone(), token.clone(), Arc::new(settings));
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
    pub fn stop(mut self) -> Result<(), TftpError> {
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
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
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
pub struct Root {
    pub dir: tempfile::TempDir,
    pub files: Vec<(String, Vec<u8>)>,
}

impl Root {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn new() -> Root {
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
pub fn settings(root: &Path) -> TftpSettings {
    TftpSettings {
        root: root.to_owned(),
        timeout: Duration::from_millis(200),
        retries: 8,
        ..TftpSettings::default()
    }
}

/// Runs a command with a hard time limit (coreutils `timeout`), optionally inside a
/// network namespace; returns (success, combined output).
pub fn run_cmd(netns: Option<&str>, args: &[&str]) -> (bool, String) {
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

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// External TFTP clients and their option variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    TftpHpa,
    Atftp,
    AtftpBlksize,
    AtftpWindow8,
    Curl,
    CurlBlksize,
}

pub const ALL_TOOLS: [Tool; 6] = [
    Tool::TftpHpa,
    Tool::Atftp,
    Tool::AtftpBlksize,
    Tool::AtftpWindow8,
    Tool::Curl,
    Tool::CurlBlksize,
];

/// Downloads `name` from `server` with `tool` into `dest`.
pub fn download(
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

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

static NS_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the host by a veth pair with 198.18.N.1 (host side) and
/// 198.18.N.2 (inside); deleted on drop, even when the test fails.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub ns_if: String,
    pub host_ip: std::net::Ipv4Addr,
    pub ns_ip: std::net::Ipv4Addr,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    pub fn new() -> Netns {
        let n = NS_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Distinct /30-ish subnets per namespace inside 198.18.0.0/15 (RFC 2544 bench range).
        let octet = ((pid as usize * 7 + n as usize) % 200 + 20) as u8;
        let ns = Netns {
            name: format!("sbtftp-{pid}-{n}"),
            host_if: format!("sbt{}h{n}", pid % 100_000),
            ns_if: format!("sbt{}n{n}", pid % 100_000),
            host_ip: std::net::Ipv4Addr::new(198, 18, octet, 1),
            ns_ip: std::net::Ipv4Addr::new(198, 18, octet, 2),
        };
        ip(&["netns", "add", &ns.name]);
        // From here on Drop cleans up whatever was created.
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns.ns_if,
        ]);
        ip(&["link", "set", &ns.ns_if, "netns", &ns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", ns.host_ip),
            "dev",
            &ns.host_if,
        ]);
        ip(&["link", "set", &ns.host_if, "up"]);
        let e = |args: &[&str]| {
            let mut v = vec!["netns", "exec", &ns.name, "ip"];
            v.extend_from_slice(args);
            ip(&v);
        };
        e(&["link", "set", "lo", "up"]);
        e(&["addr", "add", &format!("{}/24", ns.ns_ip), "dev", &ns.ns_if]);
        e(&["link", "set", &ns.ns_if, "up"]);
        ns
    }

    /// Adds netem loss on both ends of the veth pair; false when this kernel has no
    /// netem qdisc (the caller then uses [`LossyRelay`]).
    pub fn netem_loss(&self, percent: u32) -> bool {
        let loss = format!("{percent}%");
        let run = |args: &[&str]| {
            let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            if !out.status.success() && err.contains("qdisc kind is unknown") {
                return false;
            }
            assert!(out.status.success(), "{args:?}: {err}");
            true
        };
        run(&[
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.host_if,
            "root",
            "netem",
            "loss",
            &loss,
        ]) && run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.ns_if,
            "root",
            "netem",
            "loss",
            &loss,
        ])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veth end and with it the host end.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// Behaviour knobs for [`TestClient::get`].
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Do not send every k-th ACK (k ≥ 2).
    pub drop_ack_every: Option<u32>,
    /// Send every k-th ACK twice.
    pub dup_ack_every: Option<u32>,
    /// Pretend every k-th DATA packet never arrived.
    pub lose_data_every: Option<u32>,
}

/// What a [`TestClient::get`] saw.
#[derive(Debug, Default)]
pub struct GetResult {
    pub data: Vec<u8>,
    pub data_packets: u64,
    pub oack: Vec<(String, String)>,
    pub server_tid: Option<SocketAddr>,
}

/// A small scriptable TFTP client (RFC 1350 + 2347 + 7440 receiver).
pub struct TestClient {
    pub sock: UdpSocket,
}

impl TestClient {
    pub fn new() -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        TestClient { sock }
    }

    pub fn rrq(name: &[u8], mode: &str, options: &[(&str, &str)]) -> Vec<u8> {
        let mut v = vec![0, 1];
        v.extend_from_slice(name);
        v.push(0);
        v.extend_from_slice(mode.as_bytes());
        v.push(0);
        for (k, val) in options {
            v.extend_from_slice(k.as_bytes());
            v.push(0);
            v.extend_from_slice(val.as_bytes());
            v.push(0);
        }
        v
    }

    /// Sends `datagram` and returns the first reply (bounded wait).
    pub fn request(&self, server: SocketAddr, datagram: &[u8]) -> Option<(Vec<u8>, SocketAddr)> {
        let mut buf = [0u8; 2048];
        for _ in 0..3 {
            self.sock.send_to(datagram, server).unwrap();
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                    return Some((buf[..n].to_vec(), from));
                }
            }
        }
        None
    }

    /// Downloads `name` with the given options, injecting `faults`.
    pub fn get(
        &self,
        server: SocketAddr,
        name: &str,
        options: &[(&str, &str)],
        faults: &Faults,
    ) -> Result<GetResult, String> {
        let rrq = Self::rrq(name.as_bytes(), "octet", options);
        self.sock.send_to(&rrq, server).unwrap();
        let mut res = GetResult::default();
        let mut blksize = 512usize;
        let mut window = 1u32;
        let mut expected: u16 = 1;
        let mut in_window = 0u32;
        let mut acks_sent = 0u32;
        let mut data_seen = 0u32;
        let mut last_ack: Option<u16> = None;
        let mut buf = vec![0u8; 70_000];
        let deadline = Instant::now() + Duration::from_secs(60);
        let send_ack = |n: u16, acks_sent: &mut u32, to: SocketAddr| {
            *acks_sent += 1;
            if faults
                .drop_ack_every
                .is_some_and(|k| (*acks_sent).is_multiple_of(k))
            {
                return;
            }
            let b = n.to_be_bytes();
            self.sock.send_to(&[0, 4, b[0], b[1]], to).unwrap();
            if faults
                .dup_ack_every
                .is_some_and(|k| (*acks_sent).is_multiple_of(k))
            {
                self.sock.send_to(&[0, 4, b[0], b[1]], to).unwrap();
            }
        };
        loop {
            if Instant::now() > deadline {
                return Err("client deadline".into());
            }
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => {
                    // Our timer: resend the last ACK, or the request.
                    match (res.server_tid, last_ack) {
                        (Some(tid), Some(a)) => send_ack(a, &mut acks_sent, tid),
                        (None, _) => {
                            self.sock.send_to(&rrq, server).unwrap();
                        }
                        _ => {}
                    }
                    continue;
                }
            };
            let tid = *res.server_tid.get_or_insert(from);
            if from != tid {
                continue;
            }
            let p = &buf[..n];
            match u16::from_be_bytes([p[0], p[1]]) {
                6 => {
                    let fields: Vec<&[u8]> = p[2..].split(|&b| b == 0).collect();
                    res.oack.clear();
                    for kv in fields.chunks(2) {
                        if kv.len() == 2 && !kv[0].is_empty() {
                            let k = String::from_utf8_lossy(kv[0]).to_lowercase();
                            let v = String::from_utf8_lossy(kv[1]).to_string();
                            if k == "blksize" {
                                blksize = v.parse().unwrap();
                            }
                            if k == "windowsize" {
                                window = v.parse().unwrap();
                            }
                            res.oack.push((k, v));
                        }
                    }
                    last_ack = Some(0);
                    send_ack(0, &mut acks_sent, tid);
                }
                3 => {
                    data_seen += 1;
                    res.data_packets += 1;
                    if res.data_packets > 1_000_000 {
                        return Err("data storm".into());
                    }
                    if faults
                        .lose_data_every
                        .is_some_and(|k| data_seen.is_multiple_of(k))
                    {
                        continue;
                    }
                    let block = u16::from_be_bytes([p[2], p[3]]);
                    let payload = &p[4..];
                    if block == expected {
                        res.data.extend_from_slice(payload);
                        expected = expected.wrapping_add(1);
                        in_window += 1;
                        let last = payload.len() < blksize;
                        if last || in_window >= window {
                            in_window = 0;
                            last_ack = Some(block);
                            send_ack(block, &mut acks_sent, tid);
                        }
                        if last {
                            // RFC 1350 §6: dally, re-acknowledging a retransmitted final
                            // block in case our last ACK was lost.
                            let dally = Instant::now() + Duration::from_secs(1);
                            while Instant::now() < dally {
                                if let Ok((n, f)) = self.sock.recv_from(&mut buf) {
                                    if f == tid && n >= 4 && buf[1] == 3 {
                                        send_ack(block, &mut acks_sent, tid);
                                    }
                                }
                            }
                            return Ok(res);
                        }
                    } else {
                        // Gap or duplicate: RFC 7440 §4, acknowledge the last block we
                        // have in order so the sender restarts after it.
                        in_window = 0;
                        let a = expected.wrapping_sub(1);
                        last_ack = Some(a);
                        send_ack(a, &mut acks_sent, tid);
                    }
                }
                5 => {
                    let code = u16::from_be_bytes([p[2], p[3]]);
                    return Err(format!(
                        "error {code}: {}",
                        String::from_utf8_lossy(&p[4..n.saturating_sub(1)])
                    ));
                }
                op => return Err(format!("unexpected opcode {op}")),
            }
        }
    }
}

/// Waits until `cond` holds, bounded.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn scratch(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("dl-{name}"))
}

/// A UDP relay that drops a share of datagrams in both directions: packet loss without
/// netem (absent from some kernels). Clients talk to `addr`; the relay forwards to the
/// server and follows its transfer TID, answering the client from `addr` as a
/// single-port server would (clients latch onto the first reply's port).
///
/// A client's first two datagrams (RRQ and ACK 0) always pass: atftp 0.8 aborts with
/// "unexpected OACK" when its ACK 0 is lost and the server retransmits the OACK, and
/// both clients wait 5 s before resending a request. Server-to-client loss, including
/// the OACK, is unrestricted.
pub struct LossyRelay {
    pub addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl LossyRelay {
    pub fn start(bind: SocketAddr, server: SocketAddr, loss_percent: u64) -> LossyRelay {
        use std::collections::HashMap;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::Mutex;
        let front = UdpSocket::bind(bind).unwrap();
        front
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let rng = Arc::new(Mutex::new(0x1234_5678_9abc_def1u64));
        let lose = {
            let (rng, dropped) = (rng.clone(), dropped.clone());
            move || {
                let mut x = rng.lock().unwrap();
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                let hit = *x % 100 < loss_percent;
                if hit {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
                hit
            }
        };
        type Peer = (
            Arc<UdpSocket>,
            Arc<Mutex<Option<SocketAddr>>>,
            Arc<AtomicU64>,
        );
        let (st, lose2) = (stop.clone(), lose.clone());
        let front_thread = std::thread::spawn(move || {
            let mut peers: HashMap<SocketAddr, Peer> = HashMap::new();
            let mut backs: Vec<JoinHandle<()>> = Vec::new();
            let mut buf = vec![0u8; 70_000];
            let deadline = Instant::now() + Duration::from_secs(300);
            while !st.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((n, client)) = front.recv_from(&mut buf) else {
                    continue;
                };
                let (back, tid, sent) = peers
                    .entry(client)
                    .or_insert_with(|| {
                        let back =
                            Arc::new(UdpSocket::bind(SocketAddr::new(bind.ip(), 0)).unwrap());
                        back.set_read_timeout(Some(Duration::from_millis(50)))
                            .unwrap();
                        let tid = Arc::new(Mutex::new(None));
                        let (b, t, f, s, l) = (
                            back.clone(),
                            tid.clone(),
                            front.try_clone().unwrap(),
                            st.clone(),
                            lose2.clone(),
                        );
                        backs.push(std::thread::spawn(move || {
                            let mut buf = vec![0u8; 70_000];
                            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                                let Ok((n, from)) = b.recv_from(&mut buf) else {
                                    continue;
                                };
                                t.lock().unwrap().get_or_insert(from);
                                if !l() {
                                    let _ = f.send_to(&buf[..n], client);
                                }
                            }
                        }));
                        (back, tid, Arc::new(AtomicU64::new(0)))
                    })
                    .clone();
                if sent.fetch_add(1, Ordering::Relaxed) >= 2 && lose2() {
                    continue;
                }
                let to = tid.lock().unwrap().unwrap_or(server);
                let _ = back.send_to(&buf[..n], to);
            }
            st.store(true, Ordering::Relaxed);
            for b in backs {
                let _ = b.join();
            }
        });
        LossyRelay {
            addr,
            stop,
            threads: vec![front_thread],
            dropped,
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
