//! Hostile HTTP clients against `shardboot serve` in a namespace: thousands of half-open
//! requests (a partial request head, then silence) are closed within the header timeout
//! while real boot requests and a TFTP download go on, and one source over its
//! connection cap is turned away at once while another source is served.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{config, Lab, Netns, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The flood's source; the well-behaved client's.
const FLOOD: &str = "192.0.2.10";
const GOOD: &str = "192.0.2.11";
const HTTP: &str = "192.0.2.1:8080";
/// The header timeout of the cap and idle tests.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// The flood's: long enough that every connection of the flood is open before the first
/// is closed, even when a dropped SYN makes a connect wait a second for its retry.
const FLOOD_HEADER_TIMEOUT: Duration = Duration::from_secs(4);

/// One lab at a time: the flood's figures (how many held at once, how fast closed)
/// measure the server, not the other tests of this file on the same two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn start(header: Duration, http_keys: &str) -> (Lab, tempfile::TempDir, Server, Vec<u8>) {
    let lab = Lab::new(
        &["192.0.2.1/24"],
        &[&format!("{FLOOD}/24"), &format!("{GOOD}/24")],
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tftp");
    std::fs::create_dir(&root).unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("snponly.efi"), &payload).unwrap();
    let cfg = config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        &format!(
            "\n[tftp]\nlisten = \"192.0.2.1:69\"\nroot = \"{}\"\n[http]\nlisten = \"{HTTP}\"\n\
             header_timeout_ms = {}\n{http_keys}",
            root.display(),
            header.as_millis()
        ),
    );
    let server = Server::start(&lab.server, dir.path(), &cfg);
    (lab, dir, server, payload)
}

/// curl from the well-behaved source; the status (0: no answer).
fn curl(ns: &Netns, path: &str) -> u16 {
    let out = ns
        .command("curl")
        .args(["-s", "-m", "5", "--noproxy", "*", "--interface", GOOD])
        .args(["-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://{HTTP}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// One sample of `/metrics` (from the well-behaved source).
fn metric(ns: &Netns, sample: &str) -> u64 {
    let out = ns
        .command("curl")
        .args(["-s", "-m", "5", "--noproxy", "*", "--interface", GOOD])
        .arg(format!("http://{HTTP}/metrics"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{text}"))
}

/// Opens `n` connections from [`FLOOD`] at once, each sending a partial request head
/// and then nothing; for each, how long after its bytes went out the server closed it
/// (None: still open after `wait`, or the connect failed). Runs on its own thread.
fn half_open_flood(
    ns: &Netns,
    n: usize,
    wait: Duration,
) -> std::thread::JoinHandle<Vec<Option<Duration>>> {
    ns.run(move || {
        // Thousands of sockets in this process, beside the test harness's own.
        shardboot::limits::raise_open_files();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            // A few hundred connects in flight at a time: more overflow the listen
            // backlog, and a dropped SYN is retried only after a second.
            let connecting = std::sync::Arc::new(tokio::sync::Semaphore::new(200));
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let connecting = connecting.clone();
                    tokio::spawn(async move {
                        let slot = connecting.acquire_owned().await.ok()?;
                        let sock = tokio::net::TcpSocket::new_v4().ok()?;
                        sock.bind(format!("{FLOOD}:0").parse().unwrap()).ok()?;
                        let mut tcp = tokio::time::timeout(
                            Duration::from_secs(5),
                            sock.connect(HTTP.parse().unwrap()),
                        )
                        .await
                        .ok()?
                        .ok()?;
                        // A request line and one header, never the blank line.
                        tcp.write_all(b"GET /boot.ipxe HTTP/1.1\r\nHost: 192.0.2.1\r\n")
                            .await
                            .ok()?;
                        let sent = Instant::now();
                        drop(slot);
                        let mut buf = [0u8; 256];
                        loop {
                            match tokio::time::timeout(wait, tcp.read(&mut buf)).await {
                                Err(_) => return None,
                                // EOF or a reset: the server closed it.
                                Ok(Ok(0)) | Ok(Err(_)) => return Some(sent.elapsed()),
                                Ok(Ok(_)) => {}
                            }
                        }
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(n);
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        })
    })
}

#[test]
fn half_open_requests_are_closed_within_the_header_timeout_while_boots_go_on() {
    require_root!();
    let _serial = serial();
    const N: usize = 2500;
    let (lab, dir, mut server, payload) = start(
        FLOOD_HEADER_TIMEOUT,
        "max_connections = 8192\nmax_connections_per_source = 4096",
    );
    let flood = half_open_flood(&lab.client, N, Duration::from_secs(10));
    // Meanwhile, from another source: boot scripts, TFTP, and how many are held open.
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let out = dir.path().join("snponly.efi");
    let tftp = lab
        .client
        .command("curl")
        .args(["-s", "-m", "20", "--interface", GOOD, "-o"])
        .arg(&out)
        .arg("tftp://192.0.2.1/snponly.efi")
        .status()
        .unwrap()
        .success();
    let (mut answered, mut failed, mut held) = (0, 0, 0);
    while !flood.is_finished() {
        for path in ["/boot.ipxe", "/v1/boot/52:54:00:00:00:01/boot.ipxe"] {
            match curl(&lab.client, path) {
                200 | 404 => answered += 1,
                _ => failed += 1,
            }
        }
        held = held.max(metric(&lab.client, "shardboot_http_connections_open"));
    }
    let closed = flood.join().unwrap();
    let took = started.elapsed();
    let times: Vec<Duration> = closed.iter().flatten().copied().collect();
    let (fastest, slowest) = (
        times.iter().min().copied().unwrap_or_default(),
        times.iter().max().copied().unwrap_or_default(),
    );
    eprintln!(
        "{N} half-open requests, {held} open at once; {} closed by the server, after {fastest:?} to {slowest:?}; \
         {answered} boot requests answered, {failed} failed, in {took:?}; TFTP ok: {tftp}",
        times.len()
    );
    assert_eq!(
        times.len(),
        N,
        "every half-open request is closed by the server"
    );
    // None was refused at accept: each was admitted and then held until the header
    // timeout (the `fastest` bound below). How many were open at once is sampled
    // between boot requests, so on a loaded machine the sample misses the peak (CI saw
    // 1,882 of 2,500 once): only a loose floor on it.
    for cap in ["global", "per_source"] {
        let sample = format!("shardboot_http_connections_refused_total{{cap=\"{cap}\"}}");
        assert_eq!(metric(&lab.client, &sample), 0, "{sample}");
    }
    assert!(held >= N as u64 / 2, "only {held} of {N} were open at once");
    // Admitted (not refused), then closed by the header timeout, with slack for a busy
    // machine.
    assert!(
        fastest >= FLOOD_HEADER_TIMEOUT - Duration::from_millis(300),
        "{fastest:?}"
    );
    assert!(
        slowest <= FLOOD_HEADER_TIMEOUT + Duration::from_millis(1500),
        "{slowest:?}"
    );
    assert!(tftp, "TFTP download during the flood failed");
    assert!(std::fs::read(&out).unwrap() == payload);
    assert_eq!(
        failed, 0,
        "boot requests without an answer during the flood"
    );
    assert!(answered >= 10, "{answered}");
    assert!(
        metric(
            &lab.client,
            "shardboot_http_connections_timed_out_total{timeout=\"header\"}"
        ) >= N as u64
    );
    assert_eq!(metric(&lab.client, "shardboot_http_connections_open"), 1);
    server.stop();
}

#[test]
fn one_source_over_its_cap_is_refused_at_once_while_another_is_served() {
    require_root!();
    let _serial = serial();
    const CAP: usize = 50;
    const N: usize = 300;
    let (lab, _dir, mut server, _) = start(
        HEADER_TIMEOUT,
        &format!("max_connections_per_source = {CAP}"),
    );
    let flood = half_open_flood(&lab.client, N, Duration::from_secs(10));
    // While the flood's source holds its cap, this source is served.
    std::thread::sleep(Duration::from_millis(700));
    let mut served = 0;
    for _ in 0..5 {
        served += usize::from(curl(&lab.client, "/boot.ipxe") == 200);
    }
    let closed = flood.join().unwrap();
    let at_once = closed
        .iter()
        .flatten()
        .filter(|d| **d < Duration::from_millis(500))
        .count();
    let by_timeout = closed
        .iter()
        .flatten()
        .filter(|d| **d >= HEADER_TIMEOUT - Duration::from_millis(300))
        .count();
    eprintln!("{N} from one source, cap {CAP}: {at_once} refused at once, {by_timeout} closed by the header timeout; {served}/5 served from another source");
    assert_eq!(served, 5);
    assert_eq!(at_once, N - CAP);
    assert_eq!(by_timeout, CAP);
    assert_eq!(
        metric(
            &lab.client,
            "shardboot_http_connections_refused_total{cap=\"per_source\"}"
        ),
        (N - CAP) as u64
    );
    server.stop();
}

/// The `curl` this test needs, so a missing one fails loudly rather than as no answer.
#[test]
fn curl_speaks_tftp() {
    let out = Command::new("curl").arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("tftp"));
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    require_root!();
    let _serial = serial();
    let (lab, _dir, mut server, _) = start(HEADER_TIMEOUT, "idle_timeout_ms = 1500");
    let closed_after = lab
        .client
        .run(|| {
            use std::io::{Read, Write};
            let mut tcp = std::net::TcpStream::connect(HTTP).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            tcp.write_all(b"GET /boot.ipxe HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n")
                .unwrap();
            // The answer, then silence on a connection kept alive.
            let mut buf = [0u8; 4096];
            let n = tcp.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            let answered = Instant::now();
            loop {
                match tcp.read(&mut buf) {
                    Ok(0) | Err(_) => return answered.elapsed(),
                    Ok(_) => {}
                }
            }
        })
        .join()
        .unwrap();
    eprintln!("idle keep-alive connection closed {closed_after:?} after its answer");
    assert!(
        closed_after >= Duration::from_millis(1300),
        "{closed_after:?}"
    );
    assert!(
        closed_after <= Duration::from_millis(3000),
        "{closed_after:?}"
    );
    assert_eq!(
        metric(
            &lab.client,
            "shardboot_http_connections_timed_out_total{timeout=\"idle\"}"
        ),
        1
    );
    server.stop();
}
