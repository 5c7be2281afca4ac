//! Test lab helpers: network namespaces joined by veth pairs, the shardboot binary
//! running inside one, and threads that enter a namespace to use raw sockets there.
//! Everything created is removed on drop, also when a test panics. Traffic only ever goes
//! to addresses inside the namespaces created here.
#![allow(dead_code)]

pub(crate) mod api_lab;
pub(crate) mod checker;
pub(crate) mod clients;
pub(crate) mod db;
pub(crate) mod ironic_lab;
pub(crate) mod lab6;
pub(crate) mod machines;
pub(crate) mod members;
pub(crate) mod powercut;
pub(crate) mod qemu;
pub(crate) mod relay6;
pub(crate) mod relay_client;
pub(crate) mod secure_boot;
pub(crate) mod segment;
mod skip;

// Each test module uses a different subset of these helpers.
#[allow(unused_imports)]
pub(crate) use skip::skip_or_fail;
pub(crate) mod storm;
pub(crate) mod tftp_lab;

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Whether the tests run as root (they need namespaces and port 67).
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Fails the calling test when not root, or skips it with `SB_ALLOW_SKIP=1`
/// ([`skip_or_fail`]). CI runs as root, where nothing is skipped.
#[macro_export]
macro_rules! require_root {
    () => {
        if !common::is_root() {
            common::skip_or_fail("root", "needs root for network namespaces");
            return;
        }
    };
}

/// Fails the calling test unless it runs as root: a test that needs root and passes
/// without running would report a check that never happened.
pub(crate) fn require_root_or_fail() {
    assert!(
        is_root(),
        "this test needs root (network namespaces, database servers run as their users)"
    );
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique name (interface names are limited to 15 bytes).
pub(crate) fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

/// Binds a UDP socket to a fixed port (a relay's 67 or 547) that this test binds again
/// and again. A child another test forks at that moment holds a copy of the previous
/// socket until its `exec` closes it, so the port can stay taken for a few milliseconds
/// after the previous socket was dropped; AddrInUse is retried for up to five seconds.
pub(crate) fn bind_fixed_port(addr: impl std::net::ToSocketAddrs) -> std::net::UdpSocket {
    let addrs: Vec<std::net::SocketAddr> = addr.to_socket_addrs().unwrap().collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::net::UdpSocket::bind(&addrs[..]) {
            Ok(s) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("bind {addrs:?}: {e}"),
        }
    }
}

/// Runs a command, panicking with its output when it fails.
pub(crate) fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with its own resolv.conf (so DHCP clients can't touch the host's).
pub(crate) struct Netns {
    /// Its name.
    pub name: String,
}

impl Netns {
    /// Creates the namespace and brings up its loopback.
    pub(crate) fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name]);
        let etc = format!("/etc/netns/{name}");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(format!("{etc}/resolv.conf"), "# test namespace\n").unwrap();
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Self { name }
    }

    /// A command that runs inside the namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `ip` inside the namespace.
    pub(crate) fn ip(&self, args: &[&str]) {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        sh(&full);
    }

    /// Runs `f` on a thread that has entered this namespace; sockets it creates live here.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = File::open(&path).expect("open netns");
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}

/// Two namespaces, `server` and `client`, joined by a veth pair.
pub(crate) struct Lab {
    /// Where shardboot runs.
    pub server: Netns,
    /// Where the clients run.
    pub client: Netns,
    /// Server-side interface name.
    pub server_if: String,
    /// Client-side interface name.
    pub client_if: String,
}

impl Lab {
    /// The client side's MAC address.
    pub(crate) fn client_mac(&self) -> String {
        let out = self
            .client
            .command("cat")
            .arg(format!("/sys/class/net/{}/address", self.client_if))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Creates the pair; `server_addrs` (CIDR) go on the server side, `client_addrs` on
    /// the client side (none for a DHCP client that configures itself).
    pub(crate) fn new(server_addrs: &[&str], client_addrs: &[&str]) -> Self {
        let server = Netns::new("sbs");
        let client = Netns::new("sbc");
        let server_if = unique("vs");
        let client_if = unique("vc");
        sh(&[
            "ip", "link", "add", &server_if, "type", "veth", "peer", "name", &client_if,
        ]);
        sh(&["ip", "link", "set", &server_if, "netns", &server.name]);
        sh(&["ip", "link", "set", &client_if, "netns", &client.name]);
        for a in server_addrs {
            server.ip(&["addr", "add", a, "dev", &server_if]);
        }
        for a in client_addrs {
            client.ip(&["addr", "add", a, "dev", &client_if]);
        }
        server.ip(&["link", "set", &server_if, "up"]);
        client.ip(&["link", "set", &client_if, "up"]);
        Self {
            server,
            client,
            server_if,
            client_if,
        }
    }
}

/// The `[owner]` line naming the member secret that every member a test starts shares:
/// one file per build, under cargo's scratch directory for tests, mode 0600.
pub(crate) fn member_secret_line() -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("member-secret");
    if !path.exists() {
        let tmp = path.with_extension(unique("tmp"));
        std::fs::write(
            &tmp,
            "test-member-secret-0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Renamed into place, so tests starting at once never read half a file.
        std::fs::rename(&tmp, &path).unwrap();
    }
    format!("member_secret_file = \"{}\"\n", path.display())
}

/// The Python of the venv tests/ironic/lab.sh installs Ironic into, for tests that run
/// Ironic's own code (its PXE filter, its dnsmasq DHCP provider).
pub(crate) fn ironic_python() -> PathBuf {
    // Where lab.sh puts it: SB_IRONIC_VENV, else ironic-venv in the build tree.
    let venv = std::env::var_os("SB_IRONIC_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
                .join("ironic-venv")
        });
    let p = venv.join("bin/python");
    assert!(
        p.exists(),
        "{} missing: run tests/ironic/lab.sh setup (tests/run.sh does)",
        p.display()
    );
    p
}

/// The shardboot binary built for these tests.
pub(crate) fn shardboot_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shardboot"))
}

/// A shardboot process inside a namespace, with its own config and state directory.
pub(crate) struct Server {
    child: Option<Child>,
    /// Its stderr log.
    pub log: PathBuf,
    /// Its state directory.
    pub state_dir: PathBuf,
    /// Where the config comes from: `--config <file>` or `--env <source>`.
    source: Vec<String>,
    /// Variables set for the process (the `--env` source reads them).
    vars: Vec<(String, String)>,
    /// The log line that says it is ready (once per start).
    ready: &'static str,
    ns: String,
    /// A command that execs the server (e.g. `setpriv` with fewer capabilities).
    wrapper: Vec<String>,
}

impl Server {
    /// Writes `config` into `dir` and starts `shardboot serve` in `ns`; waits until the
    /// DHCP socket is bound.
    pub(crate) fn start(ns: &Netns, dir: &Path, config: &str) -> Self {
        Self::start_with_state(ns, dir, config, &dir.join("state"))
    }

    /// Like [`Server::start`], with the store in `state_dir` (another file system).
    pub(crate) fn start_with_state(ns: &Netns, dir: &Path, config: &str, state_dir: &Path) -> Self {
        Self::start_ready(ns, dir, config, state_dir, "DHCP listening")
    }

    /// Like [`Server::start_with_state`], ready when the log says `ready` (e.g.
    /// "DHCPv6 listening" for a server without DHCPv4).
    pub(crate) fn start_ready(
        ns: &Netns,
        dir: &Path,
        config: &str,
        state_dir: &Path,
        ready: &'static str,
    ) -> Self {
        let path = dir.join("shardboot.toml");
        std::fs::write(&path, config).unwrap();
        let mut s = Self {
            child: None,
            log: dir.join("shardboot.log"),
            state_dir: state_dir.to_path_buf(),
            source: vec!["--config".into(), path.display().to_string()],
            vars: Vec::new(),
            ready,
            ns: ns.name.clone(),
            wrapper: Vec::new(),
        };
        s.spawn();
        s
    }

    /// Like [`Server::start`], run through `wrapper`: a command and its arguments that
    /// exec the rest (`setpriv --bounding-set=-net_raw`: a server without CAP_NET_RAW).
    pub(crate) fn start_wrapped(ns: &Netns, dir: &Path, config: &str, wrapper: &[&str]) -> Self {
        let path = dir.join("shardboot.toml");
        std::fs::write(&path, config).unwrap();
        let mut s = Self {
            child: None,
            log: dir.join("shardboot.log"),
            state_dir: dir.join("state"),
            source: vec!["--config".into(), path.display().to_string()],
            vars: Vec::new(),
            ready: "DHCP listening",
            ns: ns.name.clone(),
            wrapper: wrapper.iter().map(|w| w.to_string()).collect(),
        };
        s.spawn();
        s
    }

    /// Starts `shardboot serve --env ironic-image` in `ns` with `vars` (its config comes
    /// from them alone) and the store in `dir`/state; waits for the `ready` log line
    /// ("DHCP listening", or "TFTP listening" when the variables turn DHCP off).
    pub(crate) fn start_ironic_env(
        ns: &Netns,
        dir: &Path,
        vars: &[(&str, &str)],
        ready: &'static str,
    ) -> Self {
        let mut s = Self {
            child: None,
            log: dir.join("shardboot.log"),
            state_dir: dir.join("state"),
            source: vec!["--env".into(), "ironic-image".into()],
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ready,
            ns: ns.name.clone(),
            wrapper: Vec::new(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(&self.wrapper)
            .arg(shardboot_bin())
            .arg("serve")
            .args(&self.source)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .env(
                "SHARDBOOT_LOG",
                std::env::var("SB_TEST_LOG").unwrap_or("info".into()),
            )
            // After SHARDBOOT_LOG, so a test's own value (even an empty one) wins.
            .envs(self.vars.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start shardboot");
        self.child = Some(child);
        let before = self.listening_count();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.listening_count() == before {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("shardboot exited with {status}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "shardboot did not start:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn listening_count(&self) -> usize {
        self.log_text().matches(self.ready).count()
    }

    /// The log so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no chance to flush or clean up.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if c.try_wait().unwrap().is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("shardboot did not stop on SIGTERM:\n{}", self.log_text());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The process id (shardboot itself: `ip netns exec` execs in place).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sets (or, with `None`, removes) a variable for the next start.
    pub(crate) fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.vars.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.vars.push((key.to_string(), v.to_string()));
        }
    }

    /// Starts it again on the same config and store.
    pub(crate) fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// `shardboot leases --json` from inside the server's namespace: it reads the store,
    /// or asks the running server (over its own `http.listen`) while that holds it.
    pub(crate) fn leases_json(&self) -> serde_json::Value {
        self.leases_json_with(&[])
    }

    /// [`Server::leases_json`] with more `leases` flags (`--v6`).
    pub(crate) fn leases_json_with(&self, flags: &[&str]) -> serde_json::Value {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(shardboot_bin())
            .args(["leases", "--json"])
            .args(flags)
            .args(&self.source)
            .envs(self.vars.iter().cloned())
            .arg("--state-dir")
            .arg(&self.state_dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The `[dhcp]` key that trusts the lab's relays (the client side, 198.18.0.0/16).
pub(crate) const RELAYS: &str = "relays = [\"198.18.0.0/16\"]\n";

/// A config serving `network` with `range` on `interface`, plus `extra` TOML keys for
/// the `[dhcp]` section (or whole sections after them). The router is the network's
/// first host address.
pub(crate) fn config(interface: &str, network: &str, range: &str, extra: &str) -> String {
    let net: ipnet::Ipv4Net = network.parse().unwrap();
    let router = net.hosts().next().unwrap();
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
{extra}

[[subnet]]
network = "{network}"
ranges = ["{range}"]
lease_time = 3600
router = "{router}"
dns = ["{router}"]
"#
    )
}

/// A lab with shardboot serving 192.0.2.0/24 (.100–.199) on the server side; the client
/// side has no address (a DHCP client configures it).
pub(crate) fn small_lab() -> (Lab, tempfile::TempDir, Server) {
    small_lab_with("")
}

/// [`small_lab`] with `subnet_keys` (TOML lines) added to its one subnet.
pub(crate) fn small_lab_with(subnet_keys: &str) -> (Lab, tempfile::TempDir, Server) {
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        "",
    ) + subnet_keys;
    let server = Server::start(&lab.server, dir.path(), &cfg);
    (lab, dir, server)
}

/// A lab with shardboot serving 198.18.0.0/16 (.1.0–.255.254, room for 65,000 clients);
/// the client side is 198.18.0.2, where load clients act as a relay agent.
pub(crate) fn relay_lab() -> (Lab, tempfile::TempDir, Server) {
    relay_lab_with(None)
}

/// [`relay_lab`] with the store in `state_dir` (another file system).
pub(crate) fn relay_lab_storing_in(state_dir: &Path) -> (Lab, tempfile::TempDir, Server) {
    relay_lab_with(Some(state_dir))
}

fn relay_lab_with(state_dir: Option<&Path>) -> (Lab, tempfile::TempDir, Server) {
    let lab = Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &lab.server_if,
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.255.254",
        RELAYS,
    );
    let state = state_dir.map_or_else(|| dir.path().join("state"), Path::to_path_buf);
    let server = Server::start_with_state(&lab.server, dir.path(), &cfg, &state);
    (lab, dir, server)
}

/// `shardboot::http::run` over one `HttpState` on 127.0.0.1 (a port of its own), on a
/// thread of its own; stopped and joined on drop.
pub(crate) struct HttpOnLoopback {
    pub addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpOnLoopback {
    pub(crate) fn start(state: std::sync::Arc<shardboot::http::HttpState>) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                shardboot::http::run(listener, state, s).await.unwrap();
            });
        });
        Self {
            addr: rx.recv().unwrap(),
            stop,
            thread: Some(thread),
        }
    }
}

impl HttpOnLoopback {
    /// The token that stops it (for tasks that should stop with it).
    pub(crate) fn stop_token(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }
}

impl Drop for HttpOnLoopback {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
