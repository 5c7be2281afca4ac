//! A run of lease changes as one script: the same conditional statements `sql` gives
//! with placeholders, their values written in as literals, sent to the database in a
//! single round trip. Per change, in order:
//! - a binding (`Put`): the conditional replacement, then, unless the address is known
//!   to have a row already (a renewal, the common write), the insert where it has none
//!   (together they write 1 row, or 0 when another holder's live binding stands);
//! - a v4 removal: the tombstone (1 statement);
//! - anything else (an offer): nothing.
//!
//! Every literal is a number or hex digits (`Sql::octets_literal`, `text_literal`), so
//! nothing a client sent, however it is spelled, can end a literal or start a
//! statement.

use super::bindings::{put_of, v4_key, KeyValue};
use super::sql::{Family, Sql};
use crate::store::{LeaseEffect, SharedChange};

/// What one change became in a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Nothing written (an offer).
    Nothing,
    /// The tombstone of a v4 removal.
    Remove,
    /// The conditional replacement, and the insert when `insert`.
    Put { insert: bool },
}

impl Plan {
    /// How many statements (and so results) it holds.
    pub(super) fn statements(self) -> usize {
        match self {
            Self::Nothing => 0,
            Self::Remove => 1,
            Self::Put { insert } => 1 + usize::from(insert),
        }
    }
}

/// The script of `changes` (none a v6 removal: that needs a read first) and each
/// change's plan. `now` is this member's clock (the leases' ends become durations
/// from it); `has_row` says which addresses are known to have a row, whose binding
/// then needs no insert.
pub(super) fn of(
    sql: Sql,
    me: &str,
    changes: &[SharedChange],
    now: u64,
    has_row: impl Fn(&KeyValue) -> bool,
) -> Result<(String, Vec<Plan>), sqlx::Error> {
    let member = sql.text_literal(me);
    let mut text = String::new();
    let mut plans = Vec::with_capacity(changes.len());
    for change in changes {
        if let Some((key, state, duration_ms, record)) = put_of(change, now) {
            let addr = key_literal(&key.addr)?;
            let holder = sql.octets_literal(&key.holder);
            let record = sql.octets_literal(&record);
            let (state, duration) = (state.to_string(), duration_ms.to_string());
            text.push_str(&sql.replace_binding_of(
                key.family,
                &[
                    holder.clone(),
                    state.clone(),
                    duration.clone(),
                    member.clone(),
                    record.clone(),
                    addr.clone(),
                    holder.clone(),
                ],
            ));
            text.push_str(";\n");
            let insert = !has_row(&key.addr);
            if insert {
                text.push_str(&sql.insert_binding_of(
                    key.family,
                    &[addr, holder, state, duration, member.clone(), record],
                ));
                text.push_str(";\n");
            }
            plans.push(Plan::Put { insert });
        } else if let SharedChange::V4(LeaseEffect::Remove(ip, mac)) = change {
            let addr = key_literal(&v4_key(*ip))?;
            text.push_str(&sql.remove_binding_of(
                Family::V4,
                &[member.clone(), addr, sql.octets_literal(&mac.0)],
            ));
            text.push_str(";\n");
            plans.push(Plan::Remove);
        } else {
            plans.push(Plan::Nothing);
        }
    }
    Ok((text, plans))
}

/// An address key as a literal: a number, or a v6 key's 32 hex digits (text in both
/// dialects), refused if anything else.
fn key_literal(key: &KeyValue) -> Result<String, sqlx::Error> {
    match key {
        KeyValue::V4(n) => Ok(n.to_string()),
        KeyValue::V6(hex) if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(format!("'{hex}'"))
        }
        KeyValue::V6(hex) => Err(sqlx::Error::Protocol(format!("not a v6 key: {hex:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Dialect;
    use crate::mac::MacAddr;
    use crate::store::{Lease, LeaseState};
    use std::net::Ipv4Addr;

    fn lease(host: &str, state: LeaseState) -> SharedChange {
        SharedChange::V4(LeaseEffect::Put(Lease {
            ip: Ipv4Addr::new(10, 0, 0, 5),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            state,
            starts: 1_000_000,
            expires: 1_000_600,
            hostname: Some(host.to_string()),
            client_id: None,
            machine_id: None,
            arch: None,
        }))
    }

    #[test]
    fn a_binding_is_two_statements_a_renewal_one_a_removal_one_an_offer_none() {
        let changes = [
            lease("a", LeaseState::Bound),
            lease("b", LeaseState::Offered),
            SharedChange::V4(LeaseEffect::Remove(
                Ipv4Addr::new(10, 0, 0, 5),
                MacAddr([2, 0, 0, 0, 0, 1]),
            )),
        ];
        for dialect in [Dialect::MySql, Dialect::Postgres] {
            let (text, plans) = of(Sql(dialect), "m-1", &changes, 1_000_000, |_| false).unwrap();
            assert_eq!(
                plans,
                [Plan::Put { insert: true }, Plan::Nothing, Plan::Remove]
            );
            assert_eq!(text.matches(";\n").count(), 3, "{text}");
            assert!(text.contains("INSERT"), "{text}");
            assert!(text.contains("expires_ms <= "), "{text}");
            assert!(!text.contains('?') && !text.contains('$'), "{text}");
            assert!(text.contains("WHERE addr = 167772165 AND"), "{text}");
            // An address with a row already: the replacement alone.
            let (text, plans) =
                of(Sql(dialect), "m-1", &changes[..1], 1_000_000, |_| true).unwrap();
            assert_eq!(plans, [Plan::Put { insert: false }]);
            assert!(!text.contains("INSERT"), "{text}");
        }
    }

    #[test]
    fn what_a_client_sent_cannot_leave_its_literal() {
        // A host name with quotes, a backslash and a statement of its own: written as
        // hex, so the script holds exactly the statements it should.
        let change = lease("x'); DROP TABLE shardboot_lease4; --\\", LeaseState::Bound);
        for dialect in [Dialect::MySql, Dialect::Postgres] {
            let (text, plans) = of(
                Sql(dialect),
                "m-1",
                std::slice::from_ref(&change),
                1_000_000,
                |_| false,
            )
            .unwrap();
            assert_eq!(plans, [Plan::Put { insert: true }]);
            assert!(!text.contains("DROP"), "{text}");
            // Quotes only around hex literals and the dialect's own words.
            for quoted in text.split('\'').skip(1).step_by(2) {
                assert!(
                    quoted.bytes().all(|b| b.is_ascii_hexdigit())
                        || ["hex", "UTF8"].contains(&quoted),
                    "{quoted:?} in {text}"
                );
            }
        }
    }

    #[test]
    fn a_v6_key_that_is_not_hex_is_refused() {
        assert!(key_literal(&KeyValue::V6("0'--".repeat(8))).is_err());
        assert_eq!(
            key_literal(&KeyValue::V6("ab".repeat(16))).unwrap(),
            format!("'{}'", "ab".repeat(16))
        );
    }
}
