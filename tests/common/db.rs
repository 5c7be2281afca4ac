//! Real database servers for the shared lease store's tests: MariaDB and PostgreSQL
//! from Debian's packages, each a private instance in a temporary directory, listening
//! on loopback (of the test's own network namespace, when one is given) on a free port.
//! Nothing touches the system's services. Stopped and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Netns;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    MariaDb,
    Postgres,
}

/// The user and password every test database is made for.
pub(crate) const USER: &str = "shardboot";
pub(crate) const PASSWORD: &str = "s3cret:p@ss/word";

/// A running private database server.
pub(crate) struct DbServer {
    pub(crate) kind: Kind,
    dir: tempfile::TempDir,
    child: Option<Child>,
    pub(crate) port: u16,
    ns: Option<String>,
    databases: u32,
    /// The address it listens on.
    bind: &'static str,
}

fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop()
        .expect("PostgreSQL's server is installed (tests/install-deps.sh)")
        .join(name)
}

fn run(c: &mut Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl DbServer {
    /// Starts a server of `kind` on loopback of `ns` (the root namespace's for `None`).
    pub(crate) fn start(kind: Kind, ns: Option<&Netns>) -> Self {
        Self::start_on(kind, ns, "127.0.0.1")
    }

    /// Like [`DbServer::start`], listening on `bind` ("0.0.0.0": every loopback address
    /// of its namespace, so each member can reach it at one of its own and be cut off
    /// alone).
    pub(crate) fn start_on(kind: Kind, ns: Option<&Netns>, bind: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = super::members::free_port();
        let mut s = Self {
            kind,
            dir,
            child: None,
            port,
            ns: ns.map(|n| n.name.clone()),
            databases: 0,
            bind,
        };
        match kind {
            Kind::MariaDb => {
                let install = || {
                    Command::new("mariadb-install-db")
                        .arg("--no-defaults")
                        .arg(format!("--datadir={}", s.data().display()))
                        .args(["--user=root", "--auth-root-authentication-method=normal"])
                        .output()
                        .is_ok_and(|o| o.status.success())
                };
                // Seen once failing when two tests made their servers at the same
                // moment: tried again on a clean directory before failing.
                if !install() {
                    let _ = std::fs::remove_dir_all(s.data());
                    std::thread::sleep(Duration::from_millis(500));
                    let mut c = Command::new("mariadb-install-db");
                    c.arg("--no-defaults")
                        .arg(format!("--datadir={}", s.data().display()))
                        .args(["--user=root", "--auth-root-authentication-method=normal"]);
                    run(&mut c, "mariadb-install-db");
                }
            }
            Kind::Postgres => {
                // PostgreSQL refuses to run as root: its files belong to `postgres`.
                std::fs::create_dir_all(s.data()).unwrap();
                run(
                    Command::new("chown")
                        .args(["-R", "postgres:postgres"])
                        .arg(s.dir.path()),
                    "chown",
                );
                run(
                    Command::new("chmod").args(["755"]).arg(s.dir.path()),
                    "chmod",
                );
                run(
                    Command::new("runuser")
                        .args(["-u", "postgres", "--"])
                        .arg(pg_bin("initdb"))
                        .args(["-A", "scram-sha-256", "-U", "postgres", "--pwfile"])
                        .arg(s.pwfile())
                        .arg("-D")
                        .arg(s.data()),
                    "initdb",
                );
            }
        }
        s.run_server();
        s
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pwfile(&self) -> PathBuf {
        let f = self.dir.path().join("pw");
        if !f.exists() {
            std::fs::write(&f, "postgres-root\n").unwrap();
            let _ = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&f)
                .status();
        }
        f
    }

    fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    fn in_ns(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn run_server(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let mut c = match self.kind {
            Kind::MariaDb => {
                let mut c = self.in_ns("mariadbd");
                c.arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data().display()))
                    .arg(format!(
                        "--socket={}",
                        self.socket_dir().join("sock").display()
                    ))
                    .arg(format!("--port={}", self.port))
                    .arg(format!("--bind-address={}", self.bind))
                    .args([
                        "--user=root",
                        "--skip-log-bin",
                        "--skip-name-resolve",
                        "--innodb-flush-log-at-trx-commit=1",
                    ]);
                c
            }
            Kind::Postgres => {
                let mut c = self.in_ns("runuser");
                c.args(["-u", "postgres", "--"])
                    .arg(pg_bin("postgres"))
                    .arg("-D")
                    .arg(self.data())
                    .arg("-k")
                    .arg(self.socket_dir())
                    .args(["-p", &self.port.to_string(), "-c"])
                    .arg(format!("listen_addresses={}", self.bind));
                c
            }
        };
        let child = c
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the database server");
        self.child = Some(child);
        let started = Instant::now();
        while !self.answers() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "database server did not start: {}",
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `sql` as the server's administrator over its socket.
    pub(crate) fn admin(&self, sql: &str) -> std::process::Output {
        self.admin_in(None, sql)
    }

    /// Runs `sql` as the administrator in database `db` (the server's own for `None`).
    pub(crate) fn admin_in(&self, db: Option<&str>, sql: &str) -> std::process::Output {
        match self.kind {
            Kind::MariaDb => Command::new("mariadb")
                .arg("--no-defaults")
                .arg(format!(
                    "--socket={}",
                    self.socket_dir().join("sock").display()
                ))
                .args(["-uroot", "-N", "-B", "-e", sql])
                .args(db)
                .output()
                .unwrap(),
            Kind::Postgres => Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg_bin("psql"))
                .arg("-h")
                .arg(self.socket_dir())
                .args([
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                    "-d",
                    db.unwrap_or("postgres"),
                ])
                .args(["-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
                .env("PGPASSWORD", "postgres-root")
                .output()
                .unwrap(),
        }
    }

    fn answers(&self) -> bool {
        self.admin("SELECT 1").status.success()
    }

    /// A new, empty database for [`USER`]; its URL without credentials, and the same
    /// database's URL with them.
    pub(crate) fn database(&mut self) -> (String, String) {
        self.databases += 1;
        let name = format!("sb{}", self.databases);
        let statements = match self.kind {
            Kind::MariaDb => vec![
                format!("CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'"),
                format!("CREATE DATABASE {name}"),
                format!("GRANT ALL ON {name}.* TO '{USER}'@'%'"),
            ],
            Kind::Postgres => vec![
                format!(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{USER}') \
                     THEN CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'; END IF; END $$"
                ),
                format!("CREATE DATABASE {name} OWNER {USER}"),
            ],
        };
        for sql in statements {
            let out = self.admin(&sql);
            assert!(
                out.status.success(),
                "{sql}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let scheme = match self.kind {
            Kind::MariaDb => "mysql",
            Kind::Postgres => "postgresql",
        };
        let bare = format!("{scheme}://127.0.0.1:{}/{name}", self.port);
        let with = format!(
            "{scheme}://{USER}:{}@127.0.0.1:{}/{name}",
            PASSWORD
                .replace('%', "%25")
                .replace(':', "%3A")
                .replace('@', "%40")
                .replace('/', "%2F"),
            self.port
        );
        (bare, with)
    }

    /// A directory holding `username` and `password` files, as a mounted Secret.
    pub(crate) fn credentials_dir(&self) -> PathBuf {
        let d = self.dir.path().join("credentials");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("username"), format!("{USER}\n")).unwrap();
        std::fs::write(d.join("password"), PASSWORD).unwrap();
        d
    }

    /// Stops the server at once (SIGKILL: as a crash, or a failover's lost node).
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.kind == Kind::Postgres {
            // `runuser` is the child; the postmaster is its own process: kill it and
            // wait until it is gone, then clear what a SIGKILL leaves behind (its pid
            // file and the socket's lock file), as a restarted node would find them.
            let pattern = format!("postgres -D {}", self.data().display());
            // Its backends first: a backend outlives a killed postmaster and keeps
            // serving the connections it has.
            let postmaster = std::fs::read_to_string(self.data().join("postmaster.pid"))
                .ok()
                .and_then(|t| t.lines().next().map(str::to_string));
            if let Some(pid) = postmaster {
                let _ = Command::new("pkill").args(["-9", "-P", &pid]).status();
            }
            let _ = Command::new("pkill").args(["-9", "-f", &pattern]).status();
            let started = Instant::now();
            while Command::new("pgrep")
                .args(["-f", &pattern])
                .output()
                .is_ok_and(|o| o.status.success())
                && started.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
            for f in [".s.PGSQL.{}", ".s.PGSQL.{}.lock"] {
                let _ = std::fs::remove_file(
                    self.socket_dir()
                        .join(f.replace("{}", &self.port.to_string())),
                );
            }
        }
    }

    /// Starts the server again on its data, on the same port.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.run_server();
    }
}

impl Drop for DbServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl DbServer {
    /// A new database on this server as the `[store]` table of a member's config:
    /// every member of one test gets the same table. Append it to the config's text.
    /// Heartbeats every second, so a dead member is found within a few.
    pub(crate) fn store_table(&mut self) -> String {
        let (url, _) = self.database();
        format!(
            "\n[store]\nshared = \"{url}\"\ncredentials_dir = \"{}\"\nheartbeat_secs = 1\n",
            self.credentials_dir().display()
        )
    }
}
