//! The statements of the shared lease store, in each dialect. Pure text: nothing here
//! talks to a database.
//!
//! Times are the database server's clock in milliseconds (`now_ms`), never a member's:
//! a member whose clock is off must not see another member's binding as expired. A
//! member gives each binding a duration; the database turns it into an end.

use crate::config::Dialect;

/// A binding's state column.
pub(super) mod state {
    /// Forgotten (released by the operator, or withdrawn): a tombstone the other
    /// members' caches read, deleted after [`super::super::TOMBSTONE_MS`].
    pub(crate) const REMOVED: i16 = 0;
    /// Acknowledged to its client.
    pub(crate) const BOUND: i16 = 1;
    /// Released by its client: free for anyone, kept so the client gets it back.
    pub(crate) const RELEASED: i16 = 2;
    /// Declined (an address conflict): nobody's until it ends.
    pub(crate) const DECLINED: i16 = 3;
}

/// Octets in lowercase hex.
pub(super) fn hex_of(octets: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(octets.len() * 2);
    for b in octets {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The statements of one dialect, with its placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sql(pub(super) Dialect);

/// Which family's table a statement is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    V4,
    V6,
}

impl Family {
    pub(super) fn table(self) -> &'static str {
        match self {
            Self::V4 => "shardboot_lease4",
            Self::V6 => "shardboot_lease6",
        }
    }
}

impl Sql {
    /// The database's clock, in milliseconds since the epoch.
    pub(super) fn now_ms(self) -> &'static str {
        match self.0 {
            Dialect::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }

    /// The n-th (1-based) placeholder.
    fn p(self, n: usize) -> String {
        match self.0 {
            Dialect::MySql => "?".into(),
            Dialect::Postgres => format!("${n}"),
        }
    }

    fn blob(self) -> &'static str {
        match self.0 {
            Dialect::MySql => "LONGBLOB",
            Dialect::Postgres => "BYTEA",
        }
    }

    fn key(self, family: Family) -> &'static str {
        match (self.0, family) {
            (Dialect::MySql, Family::V4) => "BIGINT",
            (Dialect::MySql, Family::V6) => "VARCHAR(32)",
            (Dialect::Postgres, Family::V4) => "BIGINT",
            (Dialect::Postgres, Family::V6) => "VARCHAR(32)",
        }
    }

    fn holder(self) -> &'static str {
        match self.0 {
            Dialect::MySql => "VARBINARY(255)",
            Dialect::Postgres => "BYTEA",
        }
    }

    /// The schema's versions, in order: each step's statements (every one idempotent,
    /// so members that start together may both run a step).
    pub(super) fn migrations(self) -> Vec<Vec<String>> {
        let lease = |family: Family| {
            let t = family.table();
            let index = match self.0 {
                // Inline: MySQL has no CREATE INDEX IF NOT EXISTS.
                Dialect::MySql => ", INDEX shardboot_stamp (stamp_ms)".to_string(),
                Dialect::Postgres => String::new(),
            };
            format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                 addr {key} NOT NULL PRIMARY KEY, \
                 holder {holder} NOT NULL, \
                 state SMALLINT NOT NULL, \
                 expires_ms BIGINT NOT NULL, \
                 member VARCHAR(64) NOT NULL, \
                 gen BIGINT NOT NULL, \
                 stamp_ms BIGINT NOT NULL, \
                 record {blob} NOT NULL{index})",
                key = self.key(family),
                holder = self.holder(),
                blob = self.blob(),
            )
        };
        let mut v1 = vec![
            lease(Family::V4),
            lease(Family::V6),
            "CREATE TABLE IF NOT EXISTS shardboot_member (\
             name VARCHAR(64) NOT NULL PRIMARY KEY, \
             heartbeat_ms BIGINT NOT NULL, \
             started_ms BIGINT NOT NULL, \
             version VARCHAR(32) NOT NULL)"
                .to_string(),
        ];
        if self.0 == Dialect::Postgres {
            for family in [Family::V4, Family::V6] {
                let t = family.table();
                v1.push(format!(
                    "CREATE INDEX IF NOT EXISTS {t}_stamp ON {t} (stamp_ms)"
                ));
            }
        }
        // v2: the member list each member serves, by fingerprint, in its heartbeat
        // row (members check each other's lists through the database). MySQL has no
        // ADD COLUMN IF NOT EXISTS: its "duplicate column" is taken as done
        // (`SharedStore::migrate`).
        let v2 = vec![match self.0 {
            Dialect::MySql => {
                "ALTER TABLE shardboot_member ADD COLUMN fingerprint VARCHAR(64) NOT NULL DEFAULT ''"
            }
            Dialect::Postgres => {
                "ALTER TABLE shardboot_member ADD COLUMN IF NOT EXISTS fingerprint VARCHAR(64) NOT NULL DEFAULT ''"
            }
        }
        .to_string()];
        vec![v1, v2]
    }

    /// Creates the table of applied schema versions.
    pub(super) fn create_versions(self) -> &'static str {
        "CREATE TABLE IF NOT EXISTS shardboot_schema (version INT NOT NULL PRIMARY KEY, applied_ms BIGINT NOT NULL)"
    }

    /// The newest applied schema version (`NULL` on a new database).
    pub(super) fn schema_version(self) -> &'static str {
        "SELECT MAX(version) FROM shardboot_schema"
    }

    /// Records version `$1` as applied (nothing when another member did first).
    pub(super) fn record_version(self) -> String {
        let now = self.now_ms();
        match self.0 {
            Dialect::MySql => format!(
                "INSERT INTO shardboot_schema (version, applied_ms) VALUES (?, {now}) \
                 ON DUPLICATE KEY UPDATE version = version"
            ),
            Dialect::Postgres => format!(
                "INSERT INTO shardboot_schema (version, applied_ms) VALUES ($1, {now}) \
                 ON CONFLICT (version) DO NOTHING"
            ),
        }
    }

    /// Inserts a binding where the address has none: (addr, holder, state,
    /// duration_ms, member, record), as literals (`script`). Affects 0 rows when a
    /// row exists.
    pub(super) fn insert_binding_of(self, family: Family, v: &[String; 6]) -> String {
        let t = family.table();
        let now = self.now_ms();
        let [addr, holder, st, duration, member, record] = v;
        let values =
            format!("({addr}, {holder}, {st}, {now} + {duration}, {member}, 1, {now}, {record})");
        let columns = "(addr, holder, state, expires_ms, member, gen, stamp_ms, record)";
        match self.0 {
            // Not ON DUPLICATE KEY UPDATE: with CLIENT_FOUND_ROWS (which the driver
            // sets) a duplicate counts as one row too. Every column fits its type, so
            // IGNORE turns nothing but the duplicate into a warning.
            Dialect::MySql => format!("INSERT IGNORE INTO {t} {columns} VALUES {values}"),
            Dialect::Postgres => {
                format!("INSERT INTO {t} {columns} VALUES {values} ON CONFLICT (addr) DO NOTHING")
            }
        }
    }

    /// Replaces the binding on an address only where that is no second live binding:
    /// the row is the same holder's, or free (removed, released, or ended by the
    /// database's clock). Values (holder, state, duration_ms, member, record, addr,
    /// holder), as literals (`script`) or placeholders. Affects 1 row when replaced, 0
    /// when another holder's live binding stands (`gen` always moves, so an identical
    /// write still counts as one).
    pub(super) fn replace_binding_of(self, family: Family, v: &[String; 7]) -> String {
        let t = family.table();
        let now = self.now_ms();
        let [holder, st, duration, member, record, addr, same_holder] = v;
        format!(
            "UPDATE {t} SET holder = {holder}, state = {st}, expires_ms = {now} + {duration}, \
             member = {member}, gen = gen + 1, stamp_ms = {now}, record = {record} \
             WHERE addr = {addr} AND (holder = {same_holder} OR state IN ({}, {}) OR expires_ms <= {now})",
            state::REMOVED,
            state::RELEASED,
        )
    }

    /// Forgets the binding on an address if this holder's: a tombstone the other
    /// members' caches read. Binds (member, addr, holder).
    pub(super) fn remove_binding(self, family: Family) -> String {
        self.remove_binding_of(family, &self.placeholders::<3>())
    }

    /// [`Sql::remove_binding`] with its values given (placeholders or literals).
    pub(super) fn remove_binding_of(self, family: Family, v: &[String; 3]) -> String {
        let t = family.table();
        let now = self.now_ms();
        let [member, addr, holder] = v;
        format!(
            "UPDATE {t} SET state = {}, expires_ms = {now}, member = {member}, gen = gen + 1, \
             stamp_ms = {now} WHERE addr = {addr} AND holder = {holder} AND state <> {}",
            state::REMOVED,
            state::REMOVED,
        )
    }

    /// The placeholders 1..=N.
    pub(super) fn placeholders<const N: usize>(self) -> [String; N] {
        std::array::from_fn(|i| self.p(i + 1))
    }

    /// Octets as a literal of the dialect: hex digits only, so nothing a client sent
    /// can end the literal.
    pub(super) fn octets_literal(self, octets: &[u8]) -> String {
        let hex = hex_of(octets);
        match self.0 {
            Dialect::MySql => format!("X'{hex}'"),
            // Not '\x…': that depends on standard_conforming_strings.
            Dialect::Postgres => format!("decode('{hex}', 'hex')"),
        }
    }

    /// Text as a literal of the dialect, spelled in hex for the same reason.
    pub(super) fn text_literal(self, text: &str) -> String {
        match self.0 {
            // A binary string converts to the column's character set on the way in.
            Dialect::MySql => self.octets_literal(text.as_bytes()),
            Dialect::Postgres => format!(
                "convert_from({}, 'UTF8')",
                self.octets_literal(text.as_bytes())
            ),
        }
    }

    /// The binding on an address, with the database's clock: (record, state,
    /// expires_ms, now_ms). Binds (addr).
    pub(super) fn binding(self, family: Family) -> String {
        format!(
            "SELECT record, state, expires_ms, {} FROM {} WHERE addr = {}",
            self.now_ms(),
            family.table(),
            self.p(1)
        )
    }

    /// Bindings written at or after a time by members other than the one given (every
    /// row for ""): (addr, record, state, expires_ms, stamp_ms, now_ms, gen). Never the
    /// holder column: MySQL's driver hands a short binary column back as text, which a
    /// MAC's octets are not.
    /// Binds (since_ms, member).
    pub(super) fn changed_since(self, family: Family) -> String {
        format!(
            "SELECT addr, record, state, expires_ms, stamp_ms, {}, gen FROM {} \
             WHERE stamp_ms >= {} AND member <> {} ORDER BY stamp_ms",
            self.now_ms(),
            family.table(),
            self.p(1),
            self.p(2)
        )
    }

    /// Deletes tombstones and ended bindings older than a time. Binds (before_ms).
    pub(super) fn purge(self, family: Family) -> String {
        format!(
            "DELETE FROM {} WHERE stamp_ms < {} AND (state = {} OR expires_ms < {})",
            family.table(),
            self.p(1),
            state::REMOVED,
            self.p(2)
        )
    }

    /// Writes this member's heartbeat: (fingerprint, name), keeping `started_ms` of
    /// this run from [`Sql::register`].
    pub(super) fn heartbeat(self) -> String {
        format!(
            "UPDATE shardboot_member SET heartbeat_ms = {}, fingerprint = {} WHERE name = {}",
            self.now_ms(),
            self.p(1),
            self.p(2)
        )
    }

    /// Marks this member's run as ended (a graceful stop): the other members count it
    /// dead at their next reading, instead of after its heartbeat goes stale. (name)
    pub(super) fn sign_off(self) -> String {
        format!(
            "UPDATE shardboot_member SET heartbeat_ms = 0 WHERE name = {}",
            self.p(1)
        )
    }

    /// Registers this member's run: (name, version, fingerprint).
    pub(super) fn register(self) -> String {
        let now = self.now_ms();
        match self.0 {
            Dialect::MySql => format!(
                "INSERT INTO shardboot_member (name, heartbeat_ms, started_ms, version, fingerprint) \
                 VALUES (?, {now}, {now}, ?, ?) ON DUPLICATE KEY UPDATE heartbeat_ms = {now}, \
                 started_ms = {now}, version = VALUES(version), fingerprint = VALUES(fingerprint)"
            ),
            Dialect::Postgres => format!(
                "INSERT INTO shardboot_member (name, heartbeat_ms, started_ms, version, fingerprint) \
                 VALUES ($1, {now}, {now}, $2, $3) ON CONFLICT (name) DO UPDATE SET \
                 heartbeat_ms = {now}, started_ms = {now}, version = EXCLUDED.version, \
                 fingerprint = EXCLUDED.fingerprint"
            ),
        }
    }

    /// Every member's heartbeat row: (name, heartbeat_ms, started_ms, version, now_ms,
    /// fingerprint).
    pub(super) fn members(self) -> String {
        format!(
            "SELECT name, heartbeat_ms, started_ms, version, {}, fingerprint FROM shardboot_member \
             ORDER BY name",
            self.now_ms()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_follow_the_dialect() {
        let (my, pg) = (Sql(Dialect::MySql), Sql(Dialect::Postgres));
        let my = my.replace_binding_of(Family::V4, &my.placeholders());
        let pg = pg.replace_binding_of(Family::V4, &pg.placeholders());
        assert_eq!(my.matches('?').count(), 7, "{my}");
        assert!(!my.contains('$'));
        for n in 1..=7 {
            assert!(pg.contains(&format!("${n}")), "{pg}");
        }
        assert!(!pg.contains('?'));
    }

    #[test]
    fn a_replacement_only_takes_a_free_or_own_binding() {
        let pg = Sql(Dialect::Postgres);
        let q = pg.replace_binding_of(Family::V6, &pg.placeholders());
        assert!(
            q.contains("WHERE addr = $6 AND (holder = $7 OR state IN (0, 2) OR expires_ms <= CAST"),
            "{q}"
        );
        assert!(q.contains("gen = gen + 1"));
    }
}
