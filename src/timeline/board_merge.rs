//! The board across members: each member's machines (its board rows, as it sends
//! them to the others over the member channel, `peers`) joined into one row per
//! machine, with the members that saw it. Pure.
//!
//! One machine is seen by several members: the one that answers its DHCP, the others
//! silent for it (`not_responsible`), and whichever serves its boot requests. The
//! row shown is the member's view that moved the machine last: a view past `silent`
//! wins over a silence, and of two such views the one that entered its stage later
//! (a reboot's new OFFER, the per-node config chained by another member). Members'
//! clocks are only as close as NTP keeps them; a tie goes to the later stage.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::intern;
use super::pool_fill::Sample;
use super::stage::{Progress, Stage};
use super::Row;
use crate::mac::MacAddr;

/// Most rows a member sends (its machines seen last) and takes from each member.
pub const MAX_PEER_ROWS: usize = 20_000;

/// One machine as a member tells the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedRow {
    /// The machine.
    pub mac: String,
    /// Its stage on that member.
    pub stage: Stage,
    /// Since when (Unix ms, that member's clock).
    pub since_ms: u64,
    /// Its newest event there.
    pub last_ms: u64,
    /// Answered or enrolled there.
    pub known: bool,
    /// Why the newest event there was a silence or a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The address it was given there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
}

impl SharedRow {
    /// This member's `row`.
    pub fn of(row: &Row) -> Self {
        Self {
            mac: row.mac.to_string(),
            stage: row.progress.stage,
            since_ms: row.progress.since_ms,
            last_ms: row.progress.last_ms,
            known: row.known,
            why: row.progress.why.map(str::to_string),
            ip: row.progress.ip,
        }
    }

    /// The row another member sent; None when its MAC does not parse. Its reason
    /// becomes one of the bounded labels (`intern`), as a label read from disk does.
    fn to_row(&self) -> Option<Row> {
        Some(Row {
            mac: self.mac.parse().ok()?,
            progress: Progress {
                stage: self.stage,
                since_ms: self.since_ms,
                last_ms: self.last_ms,
                why: self.why.as_deref().map(intern::label),
                ip: self.ip,
            },
            known: self.known,
        })
    }
}

/// A member's pool, as on the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolLine {
    /// The subnet.
    pub subnet: String,
    /// Addresses held by leases or offers.
    pub in_use: u64,
    /// Addresses this member can still hand out.
    pub free_in_share: u64,
}

/// What a member sends the others: its board (the machines it saw last, at most
/// [`MAX_PEER_ROWS`]), its pools and its pool fill over the last hour.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemberBoard {
    /// Its machines, newest first.
    pub rows: Vec<SharedRow>,
    /// It saw more machines than it sent.
    #[serde(default)]
    pub truncated: bool,
    /// Its pools.
    #[serde(default)]
    pub pools: Vec<PoolLine>,
    /// Its pool fill samples, oldest first.
    #[serde(default)]
    pub pool_fill: Vec<Sample>,
}

impl MemberBoard {
    /// This member's board from its `rows`: the [`MAX_PEER_ROWS`] seen last.
    pub fn of(mut rows: Vec<Row>, pools: Vec<PoolLine>, pool_fill: Vec<Sample>) -> Self {
        let truncated = rows.len() > MAX_PEER_ROWS;
        if truncated {
            rows.select_nth_unstable_by(MAX_PEER_ROWS, |a, b| {
                b.progress.last_ms.cmp(&a.progress.last_ms)
            });
            rows.truncate(MAX_PEER_ROWS);
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.progress.last_ms));
        Self {
            rows: rows.iter().map(SharedRow::of).collect(),
            truncated,
            pools,
            pool_fill,
        }
    }
}

/// Every member's machines as one row each, and who saw each.
#[derive(Debug, Default)]
pub struct Joined {
    /// One row per machine.
    pub rows: Vec<Row>,
    /// The members that saw each machine, sorted.
    pub seen_by: HashMap<MacAddr, Vec<String>>,
}

/// The order of views of one machine: the greater moved it last.
fn weight(p: &Progress) -> (bool, u64, Stage) {
    let moved = p.stage != Stage::Silent;
    (moved, if moved { p.since_ms } else { p.last_ms }, p.stage)
}

/// `local` (this member's rows, as `me`) and each other member's rows joined.
pub fn join(me: &str, local: Vec<Row>, others: &[(String, Vec<SharedRow>)]) -> Joined {
    let mut by_mac: HashMap<MacAddr, (Row, Vec<String>)> = HashMap::new();
    let mut add = |member: &str, row: Row| match by_mac.get_mut(&row.mac) {
        None => {
            by_mac.insert(row.mac, (row, vec![member.to_string()]));
        }
        Some((kept, members)) => {
            if !members.iter().any(|m| m == member) {
                members.push(member.to_string());
            }
            let last_ms = kept.progress.last_ms.max(row.progress.last_ms);
            let known = kept.known || row.known;
            let other_ip = kept.progress.ip.or(row.progress.ip);
            if weight(&row.progress) > weight(&kept.progress) {
                *kept = row;
            }
            kept.progress.last_ms = last_ms;
            kept.progress.ip = kept.progress.ip.or(other_ip);
            kept.known = known;
        }
    };
    for row in local {
        add(me, row);
    }
    for (member, rows) in others {
        for row in rows
            .iter()
            .take(MAX_PEER_ROWS)
            .filter_map(SharedRow::to_row)
        {
            add(member, row);
        }
    }
    let mut out = Joined::default();
    out.rows.reserve(by_mac.len());
    for (mac, (row, mut members)) in by_mac {
        members.sort();
        out.rows.push(row);
        out.seen_by.insert(mac, members);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mac: u8, stage: Stage, since_ms: u64, last_ms: u64, why: Option<&'static str>) -> Row {
        Row {
            mac: MacAddr([0x52, 0x54, 0, 0, 0, mac]),
            progress: Progress {
                stage,
                since_ms,
                last_ms,
                why,
                ip: None,
            },
            known: stage != Stage::Silent,
        }
    }

    #[test]
    fn each_machine_once_with_the_view_that_moved_it_last_and_every_member_that_saw_it() {
        // Machine 1: bound by a; b silent for it later; then b chains its config.
        // Machine 2: only b saw it. Machine 3: silent on both.
        let a = vec![
            row(1, Stage::Bound, 10, 30, None),
            row(3, Stage::Silent, 5, 6, Some("not_responsible")),
        ];
        let b_rows = [
            row(1, Stage::Chained, 20, 25, None),
            row(2, Stage::Offered, 40, 41, None),
            row(3, Stage::Silent, 7, 8, Some("unknown_machine")),
        ];
        let mut b: Vec<SharedRow> = b_rows.iter().map(SharedRow::of).collect();
        // A row whose MAC does not parse is dropped, not shown.
        b.push(SharedRow {
            mac: "<script>".into(),
            ..SharedRow::of(&b_rows[1])
        });
        let j = join("a", a, &[("b".to_string(), b)]);
        assert_eq!(j.rows.len(), 3);
        let get = |n: u8| {
            let mac = MacAddr([0x52, 0x54, 0, 0, 0, n]);
            let r = j.rows.iter().find(|r| r.mac == mac).unwrap();
            (r.progress, r.known, j.seen_by[&mac].clone())
        };
        let (p1, known1, by1) = get(1);
        assert_eq!(
            (p1.stage, p1.since_ms, p1.last_ms),
            (Stage::Chained, 20, 30)
        );
        assert!(known1);
        assert_eq!(by1, ["a", "b"]);
        assert_eq!(get(2).2, ["b"]);
        let (p3, _, by3) = get(3);
        assert_eq!((p3.stage, p3.why), (Stage::Silent, Some("unknown_machine")));
        assert_eq!(by3, ["a", "b"]);
        // A reboot seen by a (a new OFFER) beats b's older chained view.
        let j = join(
            "a",
            vec![row(1, Stage::Offered, 100, 100, None)],
            &[(
                "b".into(),
                vec![SharedRow::of(&row(1, Stage::Chained, 20, 25, None))],
            )],
        );
        assert_eq!(j.rows[0].progress.stage, Stage::Offered);
    }

    #[test]
    fn a_member_sends_its_newest_rows_at_most() {
        let rows: Vec<Row> = (0..(MAX_PEER_ROWS as u64 + 10))
            .map(|i| Row {
                mac: MacAddr([2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8]),
                ..row(0, Stage::Offered, i, i, None)
            })
            .collect();
        let b = MemberBoard::of(rows, Vec::new(), Vec::new());
        assert!(b.truncated);
        assert_eq!(b.rows.len(), MAX_PEER_ROWS);
        assert_eq!(b.rows[0].last_ms, MAX_PEER_ROWS as u64 + 9, "newest first");
        assert_eq!(
            b.rows.last().unwrap().last_ms,
            10,
            "the oldest ten left out"
        );
    }
}
