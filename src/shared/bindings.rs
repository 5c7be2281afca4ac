//! Bindings in the shared database and back: the rows a batch of lease changes
//! becomes, the conditional writes that let the database refuse a second live binding
//! of an address, and the rows read back into a member's cache.
//!
//! A row carries the whole lease record in this build's store format (`store::codec`,
//! `codec6`), so every value a client sent round-trips through the database as through
//! sled; the columns beside it are what the database decides on: the address (the
//! key), the holder (v4: the MAC; v6: DUID and IAID), the state and the end by the
//! database's clock.

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

use futures_util::TryStreamExt as _;
use sqlx::any::AnyRow;
use sqlx::{Any, Row as _, Transaction};

use super::script;
use super::sql::{state, Family, Sql};
use crate::store::{
    decode_lease, decode_lease6, encode_lease, encode_lease6, Lease6Effect, LeaseEffect,
    LeaseState, SharedChange, Verdict,
};

/// A row's key and holder columns for a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) family: Family,
    pub(super) addr: KeyValue,
    pub(super) holder: Vec<u8>,
}

/// An address as the key column holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum KeyValue {
    /// A v4 address as its 32-bit number.
    V4(i64),
    /// A v6 address's 16 octets in 32 lowercase hex digits (text in both dialects:
    /// MySQL's driver hands a short binary column back as text).
    V6(String),
}

pub(super) fn v4_key(ip: Ipv4Addr) -> KeyValue {
    KeyValue::V4(i64::from(u32::from(ip)))
}

fn v6_key(ip: Ipv6Addr) -> KeyValue {
    KeyValue::V6(super::sql::hex_of(&ip.octets()))
}

/// The 16 octets of a v6 key column.
fn v6_octets(hex: &str) -> Result<[u8; 16], sqlx::Error> {
    let bad = || sqlx::Error::Decode(format!("not a v6 key: {hex:?}").into());
    if hex.len() != 32 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// A v6 binding's holder: RFC 8415 §12.1 names an IA by the client's DUID and the IAID.
pub(crate) fn ia_holder(duid: &[u8], iaid: u32) -> Vec<u8> {
    let mut h = duid.to_vec();
    h.extend_from_slice(&iaid.to_be_bytes());
    h
}

/// The state column of a lease state (offers are never written).
fn state_code(s: LeaseState) -> i16 {
    match s {
        LeaseState::Offered | LeaseState::Bound => state::BOUND,
        LeaseState::Released => state::RELEASED,
        LeaseState::Declined => state::DECLINED,
    }
}

/// The binding a `Put` asks for: its key, state, duration from now (ms) and record.
pub(super) fn put_of(change: &SharedChange, now: u64) -> Option<(Key, i16, i64, Vec<u8>)> {
    let ms =
        |expires: u64| i64::try_from(expires.saturating_sub(now)).unwrap_or(i64::MAX / 2000) * 1000;
    match change {
        SharedChange::V4(LeaseEffect::Put(l)) if l.state != LeaseState::Offered => Some((
            Key {
                family: Family::V4,
                addr: v4_key(l.ip),
                holder: l.mac.0.to_vec(),
            },
            state_code(l.state),
            ms(l.expires),
            encode_lease(l),
        )),
        SharedChange::V6(Lease6Effect::Put(l)) if l.state != LeaseState::Offered => Some((
            Key {
                family: Family::V6,
                addr: v6_key(l.ip),
                holder: ia_holder(&l.duid, l.iaid),
            },
            state_code(l.state),
            ms(l.expires),
            encode_lease6(l),
        )),
        _ => None,
    }
}

fn bind_key<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    addr: &KeyValue,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    match addr {
        KeyValue::V4(n) => q.bind(*n),
        KeyValue::V6(o) => q.bind(o.clone()),
    }
}

/// Writes one transaction's changes in `tx`, in order, and gives each its verdict: a
/// `Put` on an address another holder's live binding holds is `Refused` with that
/// binding (in this member's clock), never written. `now` is this member's clock, only
/// used to turn the leases' ends into durations; `rows` holds the addresses known to
/// have a row (a hint, see [`write_run`]).
///
/// The writes go as scripts: every statement of a run of changes in one round trip
/// (`script`), so a transaction costs the database's latency once, not once per
/// change. A v6 removal reads its row first, so it ends a run.
pub(super) async fn write(
    tx: &mut Transaction<'_, Any>,
    sql: Sql,
    me: &str,
    changes: &[SharedChange],
    now: u64,
    rows: &Mutex<HashSet<KeyValue>>,
) -> Result<Vec<Verdict>, sqlx::Error> {
    let mut verdicts = Vec::with_capacity(changes.len());
    let mut rest = changes;
    while !rest.is_empty() {
        let run = rest
            .iter()
            .position(|c| matches!(c, SharedChange::V6(Lease6Effect::Remove(..))))
            .unwrap_or(rest.len());
        verdicts.extend(write_run(tx, sql, me, &rest[..run], now, rows).await?);
        let Some(SharedChange::V6(Lease6Effect::Remove(ip, duid))) = rest.get(run) else {
            break;
        };
        remove_v6(tx, sql, me, &v6_key(*ip), duid).await?;
        verdicts.push(Verdict::Accepted);
        rest = &rest[run + 1..];
    }
    Ok(verdicts)
}

/// Writes a run of changes with no v6 removal as one script, then reads the binding
/// that stands in the way of each refused `Put`.
///
/// A binding on an address `rows` says has a row is sent without its insert; when its
/// replacement then writes nothing, the row may be gone after all (purged since), so
/// the insert is tried on its own before the write counts as refused.
async fn write_run(
    tx: &mut Transaction<'_, Any>,
    sql: Sql,
    me: &str,
    changes: &[SharedChange],
    now: u64,
    rows: &Mutex<HashSet<KeyValue>>,
) -> Result<Vec<Verdict>, sqlx::Error> {
    let (text, plans) = {
        let rows = rows.lock().unwrap_or_else(|p| p.into_inner());
        script::of(sql, me, changes, now, |k| rows.contains(k))?
    };
    let statements: usize = plans.iter().map(|p| p.statements()).sum();
    if statements == 0 {
        return Ok(vec![Verdict::Accepted; changes.len()]);
    }
    let affected: Vec<u64> = sqlx::raw_sql(&text)
        .execute_many(&mut **tx)
        .map_ok(|r| r.rows_affected())
        .try_collect()
        .await?;
    if affected.len() != statements {
        return Err(sqlx::Error::Protocol(format!(
            "a script of {statements} statements gave {} results",
            affected.len()
        )));
    }
    let mut verdicts = Vec::with_capacity(changes.len());
    let mut affected = affected.into_iter();
    for (change, plan) in changes.iter().zip(plans) {
        let written: u64 = affected.by_ref().take(plan.statements()).sum();
        let Some((key, state, duration_ms, record)) = put_of(change, now) else {
            verdicts.push(Verdict::Accepted);
            continue;
        };
        if written > 0 {
            verdicts.push(Verdict::Accepted);
            continue;
        }
        if plan == (script::Plan::Put { insert: false }) {
            let insert = sql.insert_binding_of(key.family, &sql.placeholders());
            let q = bind_key(sqlx::query(&insert), &key.addr)
                .bind(key.holder.clone())
                .bind(state)
                .bind(duration_ms)
                .bind(me.to_string())
                .bind(record);
            if q.execute(&mut **tx).await?.rows_affected() > 0 {
                verdicts.push(Verdict::Accepted);
                continue;
            }
        }
        verdicts.push(refusal(tx, sql, &key, now).await?);
    }
    Ok(verdicts)
}

/// Forgets every IA of a DUID on an address: the holder column ends in the IAID, so
/// the row is read to match the DUID as its prefix (a removal is rare: a withdrawal or
/// an operator's).
async fn remove_v6(
    tx: &mut Transaction<'_, Any>,
    sql: Sql,
    me: &str,
    addr: &KeyValue,
    duid: &[u8],
) -> Result<(), sqlx::Error> {
    let q = sql.binding(Family::V6);
    let row = bind_key(sqlx::query(&q), addr)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(row) = row else { return Ok(()) };
    let record: Vec<u8> = row.try_get(0)?;
    let KeyValue::V6(hex) = addr else {
        return Ok(());
    };
    if let Ok(l) = decode_lease6(&v6_octets(hex)?, &record) {
        if l.duid == duid {
            let q = sql.remove_binding(Family::V6);
            let q = bind_key(sqlx::query(&q).bind(me.to_string()), addr)
                .bind(ia_holder(&l.duid, l.iaid));
            q.execute(&mut **tx).await?;
        }
    }
    Ok(())
}

/// The refusal of a write the database did not take: the binding that holds the
/// address.
async fn refusal(
    tx: &mut Transaction<'_, Any>,
    sql: Sql,
    key: &Key,
    now: u64,
) -> Result<Verdict, sqlx::Error> {
    let q = sql.binding(key.family);
    let row = bind_key(sqlx::query(&q), &key.addr)
        .fetch_one(&mut **tx)
        .await?;
    let record: Vec<u8> = row.try_get(0)?;
    let st: i16 = row.try_get(1)?;
    let expires_ms: i64 = row.try_get(2)?;
    let now_ms: i64 = row.try_get(3)?;
    let end = local_end(now, expires_ms, now_ms);
    let bad = |e| sqlx::Error::Decode(Box::new(e));
    Ok(match &key.addr {
        KeyValue::V4(n) => {
            let mut l = decode_lease(&(*n as u32).to_be_bytes(), &record).map_err(bad)?;
            l.expires = end;
            l.state = lease_state(st, l.state);
            Verdict::Refused(l)
        }
        KeyValue::V6(hex) => {
            let mut l = decode_lease6(&v6_octets(hex)?, &record).map_err(bad)?;
            l.expires = end;
            l.preferred = l.preferred.min(end);
            l.state = lease_state(st, l.state);
            Verdict::Refused6(l)
        }
    })
}

/// A binding's end in this member's clock: as far from `now` as the database's end
/// is from the database's clock, so a member's clock offset never shortens another
/// member's binding.
pub(super) fn local_end(now: u64, expires_ms: i64, now_ms: i64) -> u64 {
    let left = u64::try_from(expires_ms.saturating_sub(now_ms)).unwrap_or(0);
    now.saturating_add(left.div_ceil(1000))
}

fn lease_state(code: i16, recorded: LeaseState) -> LeaseState {
    match code {
        state::BOUND => LeaseState::Bound,
        state::RELEASED | state::REMOVED => LeaseState::Released,
        state::DECLINED => LeaseState::Declined,
        _ => recorded,
    }
}

/// One row another member wrote, as the change to make in this member's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decided {
    /// A v4 binding.
    V4(LeaseEffect),
    /// A v6 binding.
    V6(Lease6Effect),
}

/// A row read by [`Sql::changed_since`], as the change this member's cache makes (its
/// end in this member's clock). An error: a record this build cannot read (logged by
/// the caller, counted).
pub(super) fn decided(family: Family, row: &AnyRow, now: u64) -> Result<Written, sqlx::Error> {
    let record: Vec<u8> = row.try_get(1)?;
    let st: i16 = row.try_get(2)?;
    let expires_ms: i64 = row.try_get(3)?;
    let stamp_ms: i64 = row.try_get(4)?;
    let now_ms: i64 = row.try_get(5)?;
    let gen: i64 = row.try_get(6)?;
    let end = local_end(now, expires_ms, now_ms);
    let bad = |e| sqlx::Error::Decode(Box::new(e));
    let change = match family {
        Family::V4 => {
            let addr: i64 = row.try_get(0)?;
            let ip = u32::try_from(addr).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            let mut l = decode_lease(&ip.to_be_bytes(), &record).map_err(bad)?;
            if st == state::REMOVED {
                Decided::V4(LeaseEffect::Remove(l.ip, l.mac))
            } else {
                l.expires = end;
                l.state = lease_state(st, l.state);
                Decided::V4(LeaseEffect::Put(l))
            }
        }
        Family::V6 => {
            let addr: String = row.try_get(0)?;
            let mut l = decode_lease6(&v6_octets(&addr)?, &record).map_err(bad)?;
            if st == state::REMOVED {
                Decided::V6(Lease6Effect::Remove(l.ip, l.duid))
            } else {
                l.expires = end;
                l.preferred = l.preferred.min(end);
                l.state = lease_state(st, l.state);
                Decided::V6(Lease6Effect::Put(l))
            }
        }
    };
    Ok(Written {
        change,
        stamp_ms,
        gen,
    })
}

/// A row read back: the change it makes in a cache, when it was written (the
/// database's clock) and its generation (every write moves it).
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub(super) change: Decided,
    pub(super) stamp_ms: i64,
    pub(super) gen: i64,
}

/// The holder and end a change leaves in the database, for the coverage of renewals
/// while it is unreachable: `None` when the change frees the address.
pub(super) fn covered_by(change: &SharedChange) -> Option<(KeyValue, Vec<u8>, u64)> {
    match change {
        SharedChange::V4(LeaseEffect::Put(l)) if holds(l.state) => {
            Some((v4_key(l.ip), l.mac.0.to_vec(), l.expires))
        }
        SharedChange::V6(Lease6Effect::Put(l)) if holds(l.state) => {
            Some((v6_key(l.ip), ia_holder(&l.duid, l.iaid), l.expires))
        }
        _ => None,
    }
}

fn holds(s: LeaseState) -> bool {
    matches!(s, LeaseState::Bound | LeaseState::Declined)
}

/// The address a change is about, as the key column holds it.
pub(super) fn key_of(change: &SharedChange) -> KeyValue {
    match change {
        SharedChange::V4(e) => v4_key(e.ip()),
        SharedChange::V6(Lease6Effect::Put(l)) => v6_key(l.ip),
        SharedChange::V6(Lease6Effect::Remove(ip, _)) => v6_key(*ip),
    }
}

/// The holder a `Put` names (`None` for a removal).
pub(super) fn holder_of(change: &SharedChange) -> Option<Vec<u8>> {
    match change {
        SharedChange::V4(LeaseEffect::Put(l)) => Some(l.mac.0.to_vec()),
        SharedChange::V6(Lease6Effect::Put(l)) => Some(ia_holder(&l.duid, l.iaid)),
        _ => None,
    }
}

/// A decided row's coverage entry, as [`covered_by`] for a change.
pub(super) fn covered_by_decided(d: &Decided) -> (KeyValue, Option<(Vec<u8>, u64)>) {
    match d {
        Decided::V4(LeaseEffect::Put(l)) => (
            v4_key(l.ip),
            holds(l.state).then(|| (l.mac.0.to_vec(), l.expires)),
        ),
        Decided::V4(LeaseEffect::Remove(ip, _)) => (v4_key(*ip), None),
        Decided::V6(Lease6Effect::Put(l)) => (
            v6_key(l.ip),
            holds(l.state).then(|| (ia_holder(&l.duid, l.iaid), l.expires)),
        ),
        Decided::V6(Lease6Effect::Remove(ip, _)) => (v6_key(*ip), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mac::MacAddr;
    use crate::store::Lease;

    #[test]
    fn an_end_keeps_its_distance_whatever_the_members_clock() {
        // The database says 90.5 s left; this member's clock is an hour behind.
        assert_eq!(local_end(1_000, 5_090_500, 5_000_000), 1_091);
        // Ended by the database's clock: now, never earlier.
        assert_eq!(local_end(1_000, 4_000_000, 5_000_000), 1_000);
    }

    #[test]
    fn a_v6_key_reads_back() {
        let ip: Ipv6Addr = "2001:db8::1:ff".parse().unwrap();
        let KeyValue::V6(hex) = v6_key(ip) else {
            unreachable!()
        };
        assert_eq!(hex, "20010db80000000000000000000100ff");
        assert_eq!(Ipv6Addr::from(v6_octets(&hex).unwrap()), ip);
        assert!(v6_octets("20010db8").is_err());
        assert!(v6_octets("é0010db80000000000000000000100f").is_err());
    }

    #[test]
    fn a_v6_holder_is_the_duid_then_the_iaid() {
        assert_eq!(
            ia_holder(&[0, 3, 0, 1], 0x0102_0304),
            [0, 3, 0, 1, 1, 2, 3, 4]
        );
    }

    #[test]
    fn offers_are_never_written() {
        let l = Lease {
            ip: Ipv4Addr::new(192, 0, 2, 9),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            state: LeaseState::Offered,
            starts: 10,
            expires: 70,
            hostname: None,
            client_id: None,
            machine_id: None,
            arch: None,
        };
        assert_eq!(
            put_of(&SharedChange::V4(LeaseEffect::Put(l.clone())), 10),
            None
        );
        let bound = Lease {
            state: LeaseState::Bound,
            ..l
        };
        let (key, st, ms, _) = put_of(&SharedChange::V4(LeaseEffect::Put(bound)), 10).unwrap();
        assert_eq!(
            (key.addr, st, ms),
            (KeyValue::V4(0xc000_0209), state::BOUND, 60_000)
        );
    }
}
