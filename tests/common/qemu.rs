//! Real firmware in the tests: the `qemu/` harness (lab.sh makes the namespace, bridge,
//! member interfaces and taps; vm.sh launches a machine per firmware path) driven from
//! Rust, and a stand-in for a conductor's per-node iPXE config that records what the
//! machines ask for. The namespace, and every VM in it, is removed on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{unique, Netns};

/// What the conductor stand-in answers: proof on the console, then power off.
pub(crate) const BOOTED_LINE: &str = "booted via shardboot";

fn harness(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("qemu")
        .join(script)
}

/// Fails the test early, with the fix, when QEMU is not installed.
pub(crate) fn require_qemu() {
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("qemu-system-x86_64 missing: tests/install-deps.sh installs it");
    }
}

/// `qemu/lab.sh up`: a namespace with bridge `br0`, member interfaces `m0`, `m1`, … with
/// `member_addrs`, and taps `tap0`, `tap1`, …
pub(crate) fn lab(taps: usize, member_addrs: &[&str]) -> Netns {
    let name = unique("sbq");
    let status = Command::new("bash")
        .arg(harness("lab.sh"))
        .args(["up", &name, &taps.to_string()])
        .args(member_addrs)
        .status()
        .expect("qemu/lab.sh");
    // Netns's drop does what `lab.sh down` does, also when `up` failed half-way.
    let ns = Netns { name };
    assert!(status.success(), "qemu/lab.sh up failed");
    ns
}

/// The firmware paths of `qemu/vm.sh`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Firmware {
    /// SeaBIOS, then the iPXE option ROM of the NIC (user class iPXE from the start).
    BiosIpxe,
    /// OVMF's own PXE: TFTP snponly.efi, then iPXE.
    UefiPxe,
    /// OVMF's own PXE with Secure Boot on: the boot file starts only if a key in `db`
    /// signed it ([`Vm::secure_boot`] gives the variable store).
    UefiPxeSecureBoot,
    /// OVMF's UEFI HTTP Boot: snponly.efi over HTTP, then iPXE.
    UefiHttp,
    /// OVMF's PXE over IPv6 (IPv4 off): DHCPv6, TFTP snponly.efi, then iPXE.
    UefiPxe6,
    /// OVMF's UEFI HTTP Boot over IPv6 (IPv4 and PXEv6 off).
    UefiHttp6,
}

impl Firmware {
    fn arg(self) -> &'static str {
        match self {
            Firmware::BiosIpxe => "bios-ipxe",
            Firmware::UefiPxe => "uefi-pxe",
            Firmware::UefiPxeSecureBoot => "uefi-pxe-sb",
            Firmware::UefiHttp => "uefi-http",
            Firmware::UefiPxe6 => "uefi-pxe6",
            Firmware::UefiHttp6 => "uefi-http6",
        }
    }
}

/// `tcpdump` on the lab's bridge, writing every frame to `<SB_CAPTURE_DIR>/<name>.pcap`
/// as it arrives, when `SB_CAPTURE_DIR` is set (how the firmware packets under
/// `fixtures/packets/` were captured); nothing otherwise. Stopped on drop.
pub(crate) struct Capture(Option<Child>);

impl Capture {
    /// Starts capturing in `ns` if `SB_CAPTURE_DIR` asks for it.
    pub(crate) fn start(ns: &Netns, name: &str) -> Self {
        let Some(dir) = std::env::var_os("SB_CAPTURE_DIR") else {
            return Self(None);
        };
        std::fs::create_dir_all(&dir).unwrap();
        let file = Path::new(&dir).join(format!("{name}.pcap"));
        let child = ns
            .command("tcpdump")
            .args(["-U", "-s", "0", "-i", "br0", "-w"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpdump (SB_CAPTURE_DIR is set)");
        // tcpdump drops what arrives before its socket is open.
        std::thread::sleep(Duration::from_secs(1));
        Self(Some(child))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            // SIGTERM: tcpdump closes the file cleanly.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }
}

/// A QEMU machine booting from the network; killed on drop.
pub(crate) struct Vm {
    child: Child,
    /// Its serial console.
    pub console: PathBuf,
    /// When it was started.
    pub started: Instant,
}

impl Vm {
    /// `qemu/vm.sh` inside `ns`, on `tap`, with NIC `mac`; the console goes into `dir`.
    pub(crate) fn start(ns: &Netns, firmware: Firmware, tap: &str, mac: &str, dir: &Path) -> Self {
        Self::with_nics_before(ns, firmware, tap, mac, &[], dir)
    }

    /// OVMF with Secure Boot on ([`Firmware::UefiPxeSecureBoot`]), starting from a copy
    /// of the variable store `vars` (its `db` decides which boot files start).
    pub(crate) fn secure_boot(ns: &Netns, tap: &str, mac: &str, vars: &Path, dir: &Path) -> Self {
        Self::launch(
            ns,
            Firmware::UefiPxeSecureBoot,
            tap,
            mac,
            &[],
            dir,
            Some(vars),
        )
    }

    /// Like [`Vm::start`], with NICs `before` (connected to nothing) ahead of the
    /// booting NIC: iPXE numbers them `net0`, `net1`, … and the booting NIC last.
    pub(crate) fn with_nics_before(
        ns: &Netns,
        firmware: Firmware,
        tap: &str,
        mac: &str,
        before: &[&str],
        dir: &Path,
    ) -> Self {
        Self::launch(ns, firmware, tap, mac, before, dir, None)
    }

    fn launch(
        ns: &Netns,
        firmware: Firmware,
        tap: &str,
        mac: &str,
        before: &[&str],
        dir: &Path,
        vars: Option<&Path>,
    ) -> Self {
        let console = dir.join(format!("console-{}.log", mac.replace(':', "")));
        let started = Instant::now();
        let mut command = ns.command("bash");
        if let Some(vars) = vars {
            command.env("OVMF_VARS", vars);
        }
        let child = command
            .arg(harness("vm.sh"))
            .args([firmware.arg(), tap, mac])
            .arg(&console)
            .args(before)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("qemu/vm.sh");
        Self {
            child,
            console,
            started,
        }
    }

    /// The console so far, without terminal control sequences (sgabios positions the
    /// cursor before every character it copies from the screen).
    pub(crate) fn console_text(&self) -> String {
        let raw = std::fs::read(&self.console).unwrap_or_default();
        strip_control_sequences(&String::from_utf8_lossy(&raw))
    }

    /// Whether the machine has stopped (powered off, or QEMU failed).
    pub(crate) fn stopped(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits until the console shows `line`.
    pub(crate) fn wait_console(&mut self, line: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.console_text().contains(line) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` without ANSI CSI sequences (ESC [ parameters final-byte) and carriage returns.
pub(crate) fn strip_control_sequences(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' if chars.peek() == Some(&'[') => {
                chars.next();
                // Parameters and intermediates, up to the final byte (@ to ~).
                for p in chars.by_ref() {
                    if ('@'..='~').contains(&p) {
                        break;
                    }
                }
            }
            '\u{1b}' | '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// One request the conductor stand-in saw.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    /// `GET` (a machine loading it) or `HEAD` (shardboot checking it before chaining).
    pub method: String,
    pub path: String,
    pub at: Instant,
}

/// A conductor's HTTP server as far as a booting machine sees it: a path it has a config
/// for gets a script that prints [`BOOTED_LINE`] and the path, and powers the machine
/// off (the BIOS ROM's iPXE has no `poweroff`: it then waits until the test stops it);
/// any other path gets 404, as a conductor answers for a machine it holds no config for.
pub(crate) struct ConductorStub {
    asked: mpsc::Receiver<Asked>,
    seen: Vec<Asked>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl ConductorStub {
    /// Listens on `addr` inside `ns`, with a config for every path.
    pub(crate) fn start(ns: &Netns, addr: SocketAddr) -> Self {
        let listener = ns
            .run(move || TcpListener::bind(addr).expect("bind the conductor stand-in"))
            .join()
            .unwrap();
        Self::serve(listener, None)
    }

    /// Listens on `addr` (inside `ns`, if given) with configs for `paths` only (`None`:
    /// every path).
    pub(crate) fn start_knowing(
        ns: Option<&Netns>,
        addr: SocketAddr,
        paths: Option<&[String]>,
    ) -> Self {
        let bind = move || TcpListener::bind(addr).expect("bind the conductor stand-in");
        let listener = match ns {
            Some(ns) => ns.run(bind).join().unwrap(),
            None => bind(),
        };
        Self::serve(listener, paths.map(<[String]>::to_vec))
    }

    fn serve(listener: TcpListener, known: Option<Vec<String>>) -> Self {
        let addr = listener.local_addr().unwrap();
        let (tx, asked) = mpsc::channel();
        std::thread::spawn(move || {
            // Bounded: a boot asks a handful of times, a test's checks a few dozen.
            for conn in listener.incoming().take(500) {
                let Ok(mut conn) = conn else { continue };
                let at = Instant::now();
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                let mut words = line.split_whitespace();
                let method = words.next().unwrap_or("").to_string();
                let path = words.next().unwrap_or("").to_string();
                let has = known.as_ref().is_none_or(|k| k.contains(&path));
                let (status, body) = if has {
                    (
                        "200 OK",
                        format!("#!ipxe\necho {BOOTED_LINE} {path}\npoweroff ||\nsleep 600\n"),
                    )
                } else {
                    ("404 Not Found", "not found\n".to_string())
                };
                let _ = write!(
                    conn,
                    "HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if method != "HEAD" {
                    let _ = conn.write_all(body.as_bytes());
                }
                if tx.send(Asked { method, path, at }).is_err() {
                    return;
                }
            }
        });
        Self {
            asked,
            seen: Vec::new(),
            addr,
        }
    }

    /// Waits until `path` is asked for, or `limit` passes, or the VM stops; returns when
    /// it was asked for, or every path seen so far.
    pub(crate) fn wait_for(
        &mut self,
        path: &str,
        vm: &mut Vm,
        limit: Duration,
    ) -> Result<Instant, Vec<String>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(a) = self
                .seen
                .iter()
                .find(|a| a.method == "GET" && a.path == path)
            {
                return Ok(a.at);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || vm.stopped() {
                return Err(self
                    .seen
                    .iter()
                    .map(|a| format!("{} {}", a.method, a.path))
                    .collect());
            }
            if let Ok(a) = self.asked.recv_timeout(left.min(Duration::from_secs(1))) {
                self.seen.push(a);
            }
        }
    }

    /// Every path a machine loaded (`GET`) so far.
    pub(crate) fn paths(&mut self) -> Vec<String> {
        self.requests("GET")
    }

    /// Every path shardboot checked (`HEAD`) before chaining it.
    pub(crate) fn checked(&mut self) -> Vec<String> {
        self.requests("HEAD")
    }

    fn requests(&mut self, method: &str) -> Vec<String> {
        while let Ok(a) = self.asked.try_recv() {
            self.seen.push(a);
        }
        self.seen
            .iter()
            .filter(|a| a.method == method)
            .map(|a| a.path.clone())
            .collect()
    }
}

/// Waits until `vm` loads `path` from `conductor` and shows [`BOOTED_LINE`]; returns the
/// seconds from VM start to the load. Panics with the console and `log()` otherwise.
pub(crate) fn wait_booted(
    conductor: &mut ConductorStub,
    vm: &mut Vm,
    path: &str,
    limit: Duration,
    log: impl Fn() -> String,
) -> f64 {
    let at = match conductor.wait_for(path, vm, limit) {
        Ok(at) => at,
        Err(asked) => panic!(
            "never asked for {path} (asked: {asked:?})\nconsole:\n{}\nlog:\n{}",
            vm.console_text(),
            log()
        ),
    };
    assert!(
        vm.wait_console(BOOTED_LINE, Duration::from_secs(30)),
        "{}",
        vm.console_text()
    );
    (at - vm.started).as_secs_f64()
}

/// The per-node config path a member chains `mac` to.
pub(crate) fn per_node_path(mac: &str) -> String {
    format!("/pxelinux.cfg/{}", mac.replace(':', "-"))
}

/// `curl` inside `ns`; returns the body.
pub(crate) fn curl(ns: &Netns, url: &str, token: Option<&str>) -> String {
    let mut c = ns.command("curl");
    c.args(["-s", "-m", "5", "--noproxy", "*"]);
    if let Some(t) = token {
        c.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = c.arg(url).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the metric line that starts with `prefix` (name and labels), or 0.
pub(crate) fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
