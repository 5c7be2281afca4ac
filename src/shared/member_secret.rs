//! The member secret kept in the shared lease store, for members given no
//! `owner.member_secret_file`.
//!
//! Why the database may hold it: with a shared store every member already trusts the
//! database with every binding (a member that could write it could hand out any
//! address), so a secret only members' database users can read adds no party to
//! trust. The secret authenticates what members ask each other directly (the timeline
//! merge, health answers); it is the key material the file would hold.
//!
//! The first member to start makes 32 random octets (as 64 hex digits) and inserts
//! them if no row exists; every member then reads the one row that won, so members
//! that start at once still agree. The table stands apart from the lease schema's
//! versions (`CREATE TABLE IF NOT EXISTS` at start), so it needs no migration step and
//! an older member simply never reads it.

use ring::rand::{SecureRandom, SystemRandom};
use sqlx::Row;

use super::SharedStore;
use crate::config::Dialect;

/// Random octets in a new secret (written as twice as many hex digits).
const SECRET_OCTETS: usize = 32;

/// Attempts at reading the secret when the database fails transiently (a second apart).
const ATTEMPTS: u32 = 5;

/// Why the secret cannot be read from the shared store.
#[derive(Debug, thiserror::Error)]
pub enum MemberSecretError {
    /// The database answered with an error, or not at all.
    #[error("shared lease store: the member secret: {0}")]
    Db(#[from] sqlx::Error),
    /// The OS random generator failed.
    #[error("shared lease store: the member secret: the OS random generator failed")]
    Random,
}

/// The statements of `dialect`: create, insert if absent (`$1`: the secret), read.
fn statements(dialect: Dialect) -> [&'static str; 3] {
    let create = "CREATE TABLE IF NOT EXISTS shardboot_member_secret (\
                  id INT NOT NULL PRIMARY KEY, \
                  secret VARCHAR(128) NOT NULL)";
    let insert = match dialect {
        // IGNORE turns only the duplicate key into a warning: the row another member
        // inserted first stands.
        Dialect::MySql => "INSERT IGNORE INTO shardboot_member_secret (id, secret) VALUES (1, ?)",
        Dialect::Postgres => {
            "INSERT INTO shardboot_member_secret (id, secret) VALUES (1, $1) \
             ON CONFLICT (id) DO NOTHING"
        }
    };
    let read = "SELECT secret FROM shardboot_member_secret WHERE id = 1";
    [create, insert, read]
}

/// 32 octets from the OS generator, as 64 lowercase hex digits.
fn new_secret() -> Result<String, MemberSecretError> {
    let mut b = [0u8; SECRET_OCTETS];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| MemberSecretError::Random)?;
    Ok(super::sql::hex_of(&b))
}

impl SharedStore {
    /// The member secret every member of this store shares: the row one member
    /// inserted first (this one's, when it is the first). Its text is what a secret
    /// file's line would hold. A transient failure is tried again a few times.
    pub async fn member_secret(&self) -> Result<String, MemberSecretError> {
        let mut attempt = 1;
        loop {
            match self.read_or_make_secret().await {
                Err(MemberSecretError::Db(e)) if attempt < ATTEMPTS && super::is_transient(&e) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                other => return other,
            }
        }
    }

    async fn read_or_make_secret(&self) -> Result<String, MemberSecretError> {
        let [create, insert, read] = statements(self.sql.0);
        if let Err(e) = sqlx::query(create).execute(&self.pool).await {
            // Two members creating the table at once: PostgreSQL may refuse the second
            // (a duplicate in its catalogue) though the table now exists.
            if sqlx::query(read).fetch_optional(&self.pool).await.is_err() {
                return Err(e.into());
            }
        }
        let row = sqlx::query(read).fetch_optional(&self.pool).await?;
        let secret: String = match row {
            Some(r) => r.try_get(0)?,
            None => {
                sqlx::query(insert)
                    .bind(new_secret()?)
                    .execute(&self.pool)
                    .await?;
                sqlx::query(read).fetch_one(&self.pool).await?.try_get(0)?
            }
        };
        Ok(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_secret_is_random_and_long_enough_to_sign() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 2 * SECRET_OCTETS);
        assert!(crate::owner::peer_auth::MemberSecret::from_lines(a.as_bytes()).is_some());
    }
}
