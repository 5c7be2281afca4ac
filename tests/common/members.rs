//! Two shardboot members on loopback (HTTP only), as separate `shardboot serve`
//! processes: member `a` beside conductor `127.0.0.1`, member `b` beside conductor
//! `127.0.0.2:8090` (the names a two-conductor Ironic lab reports).

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub(crate) const CONDUCTOR_1: &str = "127.0.0.1";
pub(crate) const CONDUCTOR_2: &str = "127.0.0.2:8090";
pub(crate) const FALLBACK: &str = "http://127.0.0.1:9/inspector.ipxe";

/// Where each conductor serves `pxelinux.cfg/<mac-hyphen>` in these tests.
pub(crate) fn conductor_url(conductor: &str) -> String {
    if conductor == CONDUCTOR_1 {
        "http://127.0.0.1:8088/c1".into()
    } else {
        "http://127.0.0.1:8088/c2".into()
    }
}

/// A free TCP port on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 100 ms until it holds; panics after `limit`.
pub(crate) fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One `shardboot serve` process, killed on drop.
pub(crate) struct Member {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Member {
    /// Starts member `name` ("a" or "b") on `ports` (a's, b's), with `owner` appended to
    /// its `[owner]` section (resolvers, an `[owner.ironic]` table…).
    pub(crate) fn start(name: &str, ports: (u16, u16), owner: &str) -> Self {
        let port = if name == "a" { ports.0 } else { ports.1 };
        Self::serve(port, |dir| {
            format!(
                r#"
state_dir = "{state}"
[dhcp]
enabled = false
[tftp]
enabled = false
[http]
listen = "127.0.0.1:{port}"
[health]
interval_ms = 300
timeout_ms = 250
dead_after = 2
[[member]]
name = "a"
http_url = "http://127.0.0.1:{pa}"
conductor = "{CONDUCTOR_1}"
conductor_url = "{c1}"
[[member]]
name = "b"
http_url = "http://127.0.0.1:{pb}"
conductor = "{CONDUCTOR_2}"
conductor_url = "{c2}"
[owner]
self = "{name}"
fallback = "{FALLBACK}"
{secret}{owner}
"#,
                secret = super::member_secret_line(),
                state = dir.join("state").display(),
                pa = ports.0,
                pb = ports.1,
                c1 = conductor_url(CONDUCTOR_1),
                c2 = conductor_url(CONDUCTOR_2),
            )
        })
    }

    /// Starts `shardboot serve` with the config `config` writes for its own directory
    /// (state, extra files), its HTTP listener on 127.0.0.1:`port`.
    pub(crate) fn serve(port: u16, config: impl FnOnce(&std::path::Path) -> String) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let path = dir.path().join("shardboot.toml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_shardboot"))
            .arg("--config")
            .arg(&path)
            .arg("serve")
            .env("SHARDBOOT_LOG", "shardboot=debug")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let m = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        wait_until("member answers /healthz", Duration::from_secs(20), || {
            m.get("/healthz").0 == 200
        });
        m
    }

    /// GET with curl; (status, body).
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        self.get_as(path, None)
    }

    /// GET with curl and `token` as the bearer token (None: no header); (status, body).
    pub(crate) fn get_as(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut curl = Command::new("curl");
        if let Some(t) = token {
            curl.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        let out = curl
            .args(["-s", "--noproxy", "*", "--path-as-is", "-m", "10"])
            .args(["-o", "-", "-w", "\n%{http_code}"])
            .arg(format!("http://{}{path}", self.addr))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.parse().unwrap_or(0), body.to_string())
    }

    /// The value of the `/metrics` sample whose line starts with `line_prefix`.
    pub(crate) fn metric(&self, line_prefix: &str) -> Option<u64> {
        let (_, body) = self.get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(line_prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The member's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The URL a boot script chains.
pub(crate) fn chained_url(script: &str) -> Option<&str> {
    script
        .lines()
        .find_map(|l| l.strip_prefix("chain --timeout "))
        .and_then(|rest| rest.split_whitespace().nth(1))
}

/// Writes an `owner.members = "file"` list of `(name, http_url)`, whole and renamed into
/// place, as an operator should: a member never reads half a list.
pub(crate) fn write_members_file(path: &std::path::Path, members: &[(&str, String)]) {
    let text: String = members
        .iter()
        .map(|(name, url)| format!("[[member]]\nname = \"{name}\"\nhttp_url = \"{url}\"\n"))
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The tables every member on a test segment shares: no TFTP, HTTP (the member URL) on
/// `ip`:8080, health probes every 300 ms (dead after two misses), `self = me`, the
/// member secret, and a `[[member]]` per `(name, address)` at that address's :8080.
pub(crate) fn segment_member_tables(
    ip: impl std::fmt::Display,
    me: &str,
    members: &[(&str, String)],
) -> String {
    let mut out = format!(
        "[tftp]\nenabled = false\n[http]\nlisten = \"{ip}:8080\"\n\
         [health]\ninterval_ms = 300\ntimeout_ms = 250\ndead_after = 2\n\
         [owner]\nself = \"{me}\"\n{}",
        super::member_secret_line()
    );
    for (name, addr) in members {
        out.push_str(&format!(
            "[[member]]\nname = \"{name}\"\nhttp_url = \"http://{addr}:8080\"\n"
        ));
    }
    out
}
