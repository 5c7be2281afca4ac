//! The shared lease store: with several members, the MariaDB/MySQL or PostgreSQL
//! database Ironic's own HA runs on decides every binding (docs/shared-store.md has the
//! model). sled stays each member's durable cache.
//!
//! - [`SharedStore`]: the pool, the schema's migrations, this member's heartbeat row,
//!   whether the database is reachable.
//! - [`hook`]: the committer's hook: every lease change of a group commit goes to the
//!   database in one transaction before any reply of that batch leaves; a write the
//!   database refuses is withdrawn, never answered.
//! - [`follow`]: other members' bindings read into this member's engines, the
//!   heartbeat, and tombstones purged.
//! - `bindings`: the rows and the conditional writes; `script`: a run of writes in one
//!   round trip; `sql`: the statements.

mod bindings;
pub mod follow;
pub mod hook;
pub mod member_secret;
mod metrics;
mod script;
mod sql;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Row};
use tracing::{error, info, warn};

use crate::config::{Dialect, SharedStoreSettings};
use crate::store::{Change, Lease, Lease6, StoreMetrics};
use bindings::{Decided, KeyValue};
pub use metrics::SharedMetrics;
use sql::{Family, Sql};

/// How long a tombstone (a forgotten binding) stays for the other members' caches to
/// read before it is purged.
const TOMBSTONE_MS: i64 = 3_600_000;

/// Why the shared store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// A credentials file cannot be read.
    #[error("store.credentials_dir: {path}: {source}")]
    Credentials {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The URL or its options do not parse.
    #[error("store.shared: {0}")]
    Url(String),
    /// The database answered with an error, or not at all.
    #[error("shared lease store: {0}")]
    Db(#[from] sqlx::Error),
    /// The database's schema is newer than this build knows.
    #[error("shared lease store schema version {found} is newer than this build's ({supported}); upgrade this member")]
    Newer {
        /// The version found.
        found: i32,
        /// The newest this build writes.
        supported: i32,
    },
}

/// One member's connection to the shared lease store.
pub struct SharedStore {
    pool: AnyPool,
    sql: Sql,
    me: String,
    timeout: Duration,
    up: AtomicBool,
    store: Arc<StoreMetrics>,
    /// Who holds each address in the database, and to when (this member's clock), as
    /// far as this member knows: a renewal up to that end needs no write while the
    /// database is unreachable, since that binding already stands.
    coverage: Mutex<std::collections::HashMap<KeyValue, (Vec<u8>, u64)>>,
    /// Addresses known to have a row (written, refused or read): a binding on one is
    /// written without an insert. A hint only: a purge may have deleted a row since
    /// (`bindings::write_run` then inserts after all).
    rows: Mutex<std::collections::HashSet<KeyValue>>,
    /// The fingerprint of the member list this member serves (its heartbeat row).
    fingerprint: Mutex<String>,
    /// This run has ended (`sign_off`): no more heartbeats.
    signed_off: AtomicBool,
    /// Counters, for `/metrics`.
    pub metrics: SharedMetrics,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("me", &self.me)
            .field("dialect", &self.sql.0)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

/// The connection options: the URL, with the user and password from
/// `credentials_dir` and TLS verified against `ca_file` where given.
fn connect_options(s: &SharedStoreSettings) -> Result<AnyConnectOptions, SharedError> {
    let mut url = url_with_credentials(&s.url, s.credentials_dir.as_deref())?;
    if let Some(ca) = &s.ca_file {
        let ca = ca.display().to_string();
        let sep = if url.contains('?') { '&' } else { '?' };
        let tls = match s.dialect {
            Dialect::MySql => format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", encode(&ca, true)),
            Dialect::Postgres => format!("sslmode=verify-full&sslrootcert={}", encode(&ca, true)),
        };
        url = format!("{url}{sep}{tls}");
    }
    // The Any driver picks MySQL or PostgreSQL by the scheme; mariadb:// is MySQL's.
    let url = url.replacen("mariadb://", "mysql://", 1);
    url.parse::<AnyConnectOptions>()
        .map_err(|e| SharedError::Url(e.to_string()))
}

/// `url` with any password replaced by `***`, for logs and `check-config`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

/// Percent-encodes what a URL's user, password or query value cannot hold as is (a
/// path's slashes kept where `path` says so).
fn encode(s: &str, path: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (path && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `url` with `user:password@` from `dir/username` and `dir/password` (trailing
/// newlines dropped, as Secrets written by hand often end in one).
fn url_with_credentials(url: &str, dir: Option<&Path>) -> Result<String, SharedError> {
    let Some(dir) = dir else {
        return Ok(url.to_string());
    };
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
            .map_err(|source| SharedError::Credentials {
                path: path.display().to_string(),
                source,
            })
    };
    let (user, password) = (read("username")?, read("password")?);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(SharedError::Url("no scheme".into()));
    };
    // Credentials in the files win over any in the URL's authority.
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    Ok(format!(
        "{scheme}://{}:{}@{rest}",
        encode(&user, false),
        encode(&password, false)
    ))
}

/// Whether an error is one a retry may clear: a lost or refused connection (a
/// failover, a restart), a deadlock or a certification conflict (Galera answers a
/// conflicting commit as a deadlock), a lock wait that ran out.
pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            let code = d.code().unwrap_or_default();
            let msg = d.message();
            code.starts_with("40")
                || code.starts_with("08")
                || code.starts_with("57P")
                || msg.contains("Lock wait timeout")
                || msg.contains("WSREP")
                || msg.contains("Deadlock")
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

impl SharedStore {
    /// Connects as member `me`, serving the member list of `fingerprint`, runs the
    /// schema's migrations and registers this run. Waits (logging) until the database
    /// answers: a member that cannot read the bindings must not hand out addresses.
    pub async fn connect(
        settings: &SharedStoreSettings,
        me: String,
        fingerprint: String,
        store: Arc<StoreMetrics>,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Result<Arc<Self>, SharedError> {
        sqlx::any::install_default_drivers();
        let options = connect_options(settings)?;
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .acquire_timeout(settings.timeout)
            .connect_lazy_with(options);
        let s = Arc::new(Self {
            pool,
            sql: Sql(settings.dialect),
            me,
            timeout: settings.timeout,
            up: AtomicBool::new(false),
            store,
            coverage: Mutex::default(),
            rows: Mutex::default(),
            fingerprint: Mutex::new(fingerprint),
            signed_off: AtomicBool::new(false),
            metrics: SharedMetrics::default(),
        });
        let mut logged = false;
        loop {
            match s.migrate().await.and(s.register().await) {
                Ok(()) => break,
                Err(e @ SharedError::Newer { .. }) => return Err(e),
                Err(e) => {
                    if !logged {
                        warn!(error = %e, "shared lease store not reachable; DHCP waits for it");
                        logged = true;
                    }
                    s.set_up(false, Some(&e.to_string()));
                    tokio::select! {
                        () = shutdown.cancelled() => return Err(e),
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
        s.set_up(true, None);
        info!(member = %s.me, dialect = ?settings.dialect, "shared lease store ready");
        Ok(s)
    }

    /// This member's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Whether the last write or heartbeat reached the database.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Records whether the database answered; the first change either way is logged
    /// once, and the store's status (readiness, the DHCP shells) follows.
    fn set_up(&self, up: bool, why: Option<&str>) {
        let was = self.up.swap(up, Ordering::Relaxed);
        self.store
            .status
            .set_shared_down((!up).then(|| why.unwrap_or("unreachable").to_string()));
        if was && !up {
            self.metrics.outages.inc();
            error!(error = why.unwrap_or("unreachable"), "shared lease store unreachable: no fresh address is acknowledged, renewals run only to their current end");
        } else if !was && up && self.metrics.outages.get() > 0 {
            warn!("shared lease store reachable again");
        }
    }

    async fn migrate(&self) -> Result<(), SharedError> {
        sqlx::query(self.sql.create_versions())
            .execute(&self.pool)
            .await?;
        let found: Option<i32> = sqlx::query(self.sql.schema_version())
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        let found = found.unwrap_or(0);
        let steps = self.sql.migrations();
        let supported = steps.len() as i32;
        if found > supported {
            return Err(SharedError::Newer { found, supported });
        }
        for (i, step) in steps.iter().enumerate().skip(found as usize) {
            for statement in step {
                match sqlx::query(statement).execute(&self.pool).await {
                    // Another member ran this step first (MySQL error 1060,
                    // ER_DUP_FIELDNAME: the column exists).
                    Err(sqlx::Error::Database(e))
                        if e.code().as_deref() == Some("42S21")
                            || e.message().contains("Duplicate column") => {}
                    Err(e) => return Err(e.into()),
                    Ok(_) => {}
                }
            }
            sqlx::query(&self.sql.record_version())
                .bind(i as i32 + 1)
                .execute(&self.pool)
                .await?;
            info!(version = i + 1, "shared lease store schema migrated");
        }
        Ok(())
    }

    async fn register(&self) -> Result<(), SharedError> {
        sqlx::query(&self.sql.register())
            .bind(self.me.clone())
            .bind(env!("CARGO_PKG_VERSION").to_string())
            .bind(self.fingerprint())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The fingerprint of the member list this member serves, as its heartbeat row
    /// says it.
    pub fn fingerprint(&self) -> String {
        self.fingerprint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the fingerprint the next heartbeat writes (the member list changed).
    pub fn set_fingerprint(&self, fingerprint: &str) {
        let mut f = self.fingerprint.lock().unwrap_or_else(|p| p.into_inner());
        if *f != fingerprint {
            *f = fingerprint.to_string();
        }
    }

    /// Every binding the database holds, in this member's clock (a member starting, on
    /// whatever its disk holds): v4 and v6 leases, and the addresses whose binding
    /// was forgotten.
    pub async fn load(&self, now: u64) -> Result<Loaded, SharedError> {
        let mut out = Loaded::default();
        for row in self.changed_since(0, "", now).await? {
            out.newest_ms = out.newest_ms.max(row.stamp_ms);
            self.cover(&row.change);
            match row.change {
                Decided::V4(crate::store::LeaseEffect::Put(l)) => out.leases.push(l),
                Decided::V4(crate::store::LeaseEffect::Remove(ip, _)) => out.removed.push(ip),
                Decided::V6(crate::store::Lease6Effect::Put(l)) => out.leases6.push(l),
                Decided::V6(crate::store::Lease6Effect::Remove(ip, _)) => out.removed6.push(ip),
            }
        }
        Ok(out)
    }

    /// Rows written at or after `since_ms` by members other than `member` (every row
    /// for `""`), oldest first in each family.
    async fn changed_since(
        &self,
        since_ms: i64,
        member: &str,
        now: u64,
    ) -> Result<Vec<bindings::Written>, SharedError> {
        let mut out = Vec::new();
        for family in [Family::V4, Family::V6] {
            let q = self.sql.changed_since(family);
            let rows = sqlx::query(&q)
                .bind(since_ms)
                .bind(member.to_string())
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                match bindings::decided(family, row, now) {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        self.metrics.unreadable.inc();
                        warn!(error = %e, "shared lease store row unreadable; skipped");
                    }
                }
            }
        }
        Ok(out)
    }

    /// Remembers what a decided row leaves in the database.
    fn cover(&self, d: &Decided) {
        let (key, holder) = bindings::covered_by_decided(d);
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        let mut c = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
        match holder {
            Some(h) => {
                c.insert(key, h);
            }
            None => {
                c.remove(&key);
            }
        }
    }

    /// Every member's heartbeat row, for `/v1/members`.
    pub async fn members(&self) -> Result<Vec<MemberRow>, SharedError> {
        let rows = sqlx::query(&self.sql.members())
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let now_ms: i64 = r.try_get(4)?;
                let heartbeat_ms: i64 = r.try_get(1)?;
                let started_ms: i64 = r.try_get(2)?;
                Ok(MemberRow {
                    name: r.try_get(0)?,
                    heartbeat_age_ms: now_ms.saturating_sub(heartbeat_ms).max(0),
                    up_ms: now_ms.saturating_sub(started_ms).max(0),
                    version: r.try_get(3)?,
                    fingerprint: r.try_get(5)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(SharedError::from)
    }
}

impl SharedStore {
    /// Writes the live bindings this member's disk holds on addresses the database has
    /// no row for (a member upgraded from lease replication, or one whose last writes
    /// never reached the database), so the database knows every address this member's
    /// clients hold. A binding the database refuses (another holder's, written
    /// meanwhile) is replaced by that holder's. Call after [`Loaded::over`].
    pub async fn seed(
        &self,
        loaded: &Loaded,
        leases: &mut [Lease],
        leases6: &mut [Lease6],
        now: u64,
    ) {
        use crate::store::{Lease6Effect, LeaseEffect, LeaseState, SharedChange, Verdict};
        let rows: std::collections::HashSet<std::net::IpAddr> = loaded
            .leases
            .iter()
            .map(|l| l.ip.into())
            .chain(loaded.removed.iter().map(|ip| (*ip).into()))
            .chain(loaded.leases6.iter().map(|l| l.ip.into()))
            .chain(loaded.removed6.iter().map(|ip| (*ip).into()))
            .collect();
        let live = |state: LeaseState| matches!(state, LeaseState::Bound | LeaseState::Declined);
        let missing: Vec<SharedChange> = leases
            .iter()
            .filter(|l| live(l.state) && l.is_active(now) && !rows.contains(&l.ip.into()))
            .map(|l| SharedChange::V4(LeaseEffect::Put(l.clone())))
            .chain(
                leases6
                    .iter()
                    .filter(|l| live(l.state) && l.is_active(now) && !rows.contains(&l.ip.into()))
                    .map(|l| SharedChange::V6(Lease6Effect::Put(l.clone()))),
            )
            .collect();
        let mut written = 0;
        for chunk in missing.chunks(1000) {
            for verdict in self.commit_at(chunk, now).await {
                match verdict {
                    Verdict::Accepted => written += 1,
                    Verdict::Refused(holder) => {
                        if let Some(l) = leases.iter_mut().find(|l| l.ip == holder.ip) {
                            *l = holder;
                        }
                    }
                    Verdict::Refused6(holder) => {
                        if let Some(l) = leases6.iter_mut().find(|l| l.ip == holder.ip) {
                            *l = holder;
                        }
                    }
                    Verdict::Unavailable(_) => {}
                }
            }
        }
        if !missing.is_empty() {
            info!(
                written,
                of = missing.len(),
                "bindings this member's disk held written to the shared lease store"
            );
        }
    }
}

/// What a member starting reads from the database.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    /// Live and released v4 bindings.
    pub leases: Vec<Lease>,
    /// v4 addresses whose binding was forgotten.
    pub removed: Vec<std::net::Ipv4Addr>,
    /// v6 bindings.
    pub leases6: Vec<Lease6>,
    /// v6 addresses whose binding was forgotten.
    pub removed6: Vec<std::net::Ipv6Addr>,
    /// The newest row's stamp (the database's clock, ms): where following starts.
    pub newest_ms: i64,
}

impl Loaded {
    /// `stored` (this member's disk) with the database's word on every address it has
    /// one for: the database decides, the disk is a cache. Returns the changes that
    /// bring the disk to the same (only what differs), so the cache holds what this
    /// member answers renewals from if the database is unreachable after a restart.
    pub fn over(&self, stored: &mut Vec<Lease>, stored6: &mut Vec<Lease6>) -> Vec<Change> {
        use crate::store::{Lease6Effect, LeaseEffect};
        let mut changes = Vec::new();
        let before: std::collections::HashMap<_, _> =
            stored.iter().map(|l| (l.ip, l.clone())).collect();
        for l in &self.leases {
            if before.get(&l.ip) != Some(l) {
                changes.push(Change::Replica(LeaseEffect::Put(l.clone())));
            }
        }
        for ip in &self.removed {
            if let Some(old) = before.get(ip) {
                changes.push(Change::Replica(LeaseEffect::Remove(*ip, old.mac)));
            }
        }
        let taken: std::collections::HashSet<std::net::Ipv4Addr> = self
            .leases
            .iter()
            .map(|l| l.ip)
            .chain(self.removed.iter().copied())
            .collect();
        stored.retain(|l| !taken.contains(&l.ip));
        stored.extend(self.leases.iter().cloned());
        let before6: std::collections::HashMap<_, _> =
            stored6.iter().map(|l| (l.ip, l.clone())).collect();
        for l in &self.leases6 {
            if before6.get(&l.ip) != Some(l) {
                changes.push(Change::Replica6(Lease6Effect::Put(l.clone())));
            }
        }
        for ip in &self.removed6 {
            if let Some(old) = before6.get(ip) {
                changes.push(Change::Replica6(Lease6Effect::Remove(
                    *ip,
                    old.duid.clone(),
                )));
            }
        }
        let taken6: std::collections::HashSet<std::net::Ipv6Addr> = self
            .leases6
            .iter()
            .map(|l| l.ip)
            .chain(self.removed6.iter().copied())
            .collect();
        stored6.retain(|l| !taken6.contains(&l.ip));
        stored6.extend(self.leases6.iter().cloned());
        changes
    }
}

/// One member's heartbeat row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemberRow {
    /// The member.
    pub name: String,
    /// Milliseconds since its last heartbeat, by the database's clock.
    pub heartbeat_age_ms: i64,
    /// Milliseconds since its run started.
    pub up_ms: i64,
    /// Its version.
    pub version: String,
    /// The fingerprint of the member list it serves.
    pub fingerprint: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_leaves_in_the_text() {
        assert_eq!(
            redacted("mysql://ironic:s3cret@db:3306/shardboot"),
            "mysql://ironic:***@db:3306/shardboot"
        );
        assert_eq!(redacted("postgresql://db/x"), "postgresql://db/x");
    }

    #[test]
    fn credentials_from_files_replace_the_urls() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("username"), "ironic\n").unwrap();
        std::fs::write(dir.path().join("password"), "p@ss:w/rd").unwrap();
        let u = url_with_credentials("mysql://old:x@db:3306/shardboot", Some(dir.path())).unwrap();
        assert_eq!(u, "mysql://ironic:p%40ss%3Aw%2Frd@db:3306/shardboot");
        let u = url_with_credentials("postgresql://db/shardboot", Some(dir.path())).unwrap();
        assert_eq!(u, "postgresql://ironic:p%40ss%3Aw%2Frd@db/shardboot");
        let missing = url_with_credentials("mysql://db/x", Some(&dir.path().join("no")));
        assert!(matches!(missing, Err(SharedError::Credentials { .. })));
    }
}
