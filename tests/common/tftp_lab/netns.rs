//! Network namespaces for tests, and a lossy UDP relay for kernels without netem.

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static NS_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the host by a veth pair with 198.18.N.1 (host side) and
/// 198.18.N.2 (inside); deleted on drop, even when the test fails.
pub(crate) struct Netns {
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
    pub(crate) fn new() -> Netns {
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
    pub(crate) fn netem_loss(&self, percent: u32) -> bool {
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

/// A UDP relay that drops a share of datagrams in both directions: packet loss without
/// netem (absent from some kernels). Clients talk to `addr`; the relay forwards to the
/// server and follows its transfer TID, answering the client from `addr` as a
/// single-port server would (clients latch onto the first reply's port).
///
/// A client's first two datagrams (RRQ and ACK 0) always pass: atftp 0.8 aborts with
/// "unexpected OACK" when its ACK 0 is lost and the server retransmits the OACK, and
/// both clients wait 5 s before resending a request. Server-to-client loss, including
/// the OACK, is unrestricted.
pub(crate) struct LossyRelay {
    pub addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl LossyRelay {
    pub(crate) fn start(bind: SocketAddr, server: SocketAddr, loss_percent: u64) -> LossyRelay {
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
