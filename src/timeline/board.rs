//! The boot board: every machine seen recently, by stage, stuck machines first, one
//! page at a time. Pure: [`page`] takes the timeline's rows and `now`, and returns what
//! `/v1/board`, `/ui` and `shardboot board` show.
//!
//! Order: stuck machines first (in a stage that is not an end for longer than
//! `timeline.stuck_after_s`), known machines before strangers, then the longest in
//! its stage; the MAC breaks ties, so pages are stable between refreshes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use super::stage::Stage;
use super::Row;

/// Largest page.
pub const MAX_LIMIT: usize = 500;
/// The page size unless asked.
pub const DEFAULT_LIMIT: usize = 100;
/// Longest search text.
pub const MAX_SEARCH: usize = 64;

/// What the board is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Part of a MAC (any spelling: separators are ignored) or of an address.
    pub search: Option<String>,
    /// Only this stage.
    pub stage: Option<Stage>,
    /// Only stuck machines.
    pub stuck: bool,
    /// Rows skipped.
    pub offset: usize,
    /// Rows returned (at most [`MAX_LIMIT`]).
    pub limit: usize,
}

/// One machine on the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// The machine.
    pub mac: String,
    /// Its stage.
    pub stage: Stage,
    /// Since when (Unix ms).
    pub since_ms: u64,
    /// How long it has been in the stage.
    pub in_stage_ms: u64,
    /// Its newest event (Unix ms).
    pub last_ms: u64,
    /// In a stage it should have left by now.
    pub stuck: bool,
    /// Answered or enrolled (else never answered: a stranger).
    pub known: bool,
    /// Why the newest event was a silence or a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
    /// The address it was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
}

/// Machines in one stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// All of them.
    pub machines: usize,
    /// Stuck.
    pub stuck: usize,
}

/// One page of the board.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// Machines seen in the window.
    pub seen: usize,
    /// Of them, stuck.
    pub stuck: usize,
    /// Per stage, over every machine seen (not only the page).
    pub stages: BTreeMap<&'static str, Count>,
    /// Machines that match the query.
    pub matching: usize,
    /// The first row's index among them.
    pub offset: usize,
    /// The page size.
    pub limit: usize,
    /// The page.
    pub machines: Vec<Line>,
}

/// Hex digits only, lowercase: a MAC in any spelling, or the search text.
fn hex_only(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn matches(row: &Row, search: &str, search_hex: &str) -> bool {
    let mac_hit = !search_hex.is_empty()
        && search_hex.len() * 2 >= search.len()
        && hex_only(&row.mac.to_string()).contains(search_hex);
    mac_hit
        || row
            .progress
            .ip
            .is_some_and(|ip| ip.to_string().contains(search))
}

/// The page `q` asks for, of `rows` at `now_ms`.
pub fn page(rows: Vec<Row>, now_ms: u64, stuck_after_ms: u64, q: &Query) -> Page {
    let mut stages: BTreeMap<&'static str, Count> = Stage::ALL
        .iter()
        .map(|s| (s.as_str(), Count::default()))
        .collect();
    let mut stuck_total = 0;
    let seen = rows.len();
    let search = q.search.as_deref().map(|s| s.trim().to_ascii_lowercase());
    let search_hex = search.as_deref().map(hex_only).unwrap_or_default();
    let mut picked: Vec<(bool, Row)> = Vec::new();
    for row in rows {
        let stuck = row.progress.is_stuck(now_ms, stuck_after_ms);
        let c = stages.entry(row.progress.stage.as_str()).or_default();
        c.machines += 1;
        c.stuck += usize::from(stuck);
        stuck_total += usize::from(stuck);
        let wanted = q.stage.is_none_or(|s| s == row.progress.stage)
            && (!q.stuck || stuck)
            && search
                .as_deref()
                .is_none_or(|s| s.is_empty() || matches(&row, s, &search_hex));
        if wanted {
            picked.push((stuck, row));
        }
    }
    picked.sort_by(|(sa, a), (sb, b)| {
        sb.cmp(sa)
            .then(b.known.cmp(&a.known))
            .then(a.progress.since_ms.cmp(&b.progress.since_ms))
            .then(a.mac.cmp(&b.mac))
    });
    let limit = q.limit.clamp(1, MAX_LIMIT);
    let machines = picked
        .iter()
        .skip(q.offset)
        .take(limit)
        .map(|(stuck, r)| Line {
            mac: r.mac.to_string(),
            stage: r.progress.stage,
            since_ms: r.progress.since_ms,
            in_stage_ms: now_ms.saturating_sub(r.progress.since_ms),
            last_ms: r.progress.last_ms,
            stuck: *stuck,
            known: r.known,
            why: r.progress.why,
            ip: r.progress.ip,
        })
        .collect();
    Page {
        seen,
        stuck: stuck_total,
        stages,
        matching: picked.len(),
        offset: q.offset,
        limit,
        machines,
    }
}

#[cfg(test)]
mod tests {
    use super::super::stage::Progress;
    use super::*;
    use crate::mac::MacAddr;

    fn row(n: u8, stage: Stage, since_ms: u64, known: bool) -> Row {
        Row {
            mac: MacAddr([0x52, 0x54, 0, 0, 0, n]),
            progress: Progress {
                stage,
                since_ms,
                last_ms: since_ms,
                why: None,
                ip: Some(IpAddr::from([192, 0, 2, n])),
            },
            known,
        }
    }

    fn q() -> Query {
        Query {
            limit: 10,
            ..Query::default()
        }
    }

    #[test]
    fn stuck_known_machines_come_first_and_counts_cover_every_machine() {
        let rows = vec![
            row(1, Stage::Chained, 0, true),
            row(2, Stage::Bound, 900, true),
            row(3, Stage::Silent, 0, false),
            row(4, Stage::Bound, 0, true),
            row(5, Stage::Offered, 500, true),
        ];
        let p = page(rows, 1_000, 400, &q());
        let order: Vec<&str> = p.machines.iter().map(|l| &l.mac[15..]).collect();
        // Stuck (time in stage >= 400 ms, not an end): 4 (1000 ms), 5 (500), 3 (a
        // stranger, last of the stuck); then the others, longest in stage first.
        assert_eq!(order, ["04", "05", "03", "01", "02"]);
        assert_eq!((p.seen, p.stuck, p.matching), (5, 3, 5));
        assert_eq!(
            p.stages["bound"],
            Count {
                machines: 2,
                stuck: 1
            }
        );
        assert_eq!(p.machines[0].in_stage_ms, 1_000);
    }

    #[test]
    fn search_stage_and_paging() {
        let rows: Vec<Row> = (1..=30).map(|n| row(n, Stage::Bound, 0, true)).collect();
        let by_mac = Query {
            search: Some("52-54-00-00-00-1A".into()),
            ..q()
        };
        let p = page(rows.clone(), 10, 1_000, &by_mac);
        assert_eq!(p.matching, 1);
        assert_eq!(p.machines[0].mac, "52:54:00:00:00:1a");
        let by_ip = Query {
            search: Some("192.0.2.7".into()),
            ..q()
        };
        assert_eq!(page(rows.clone(), 10, 1_000, &by_ip).matching, 1);
        let second = Query { offset: 10, ..q() };
        let p = page(rows.clone(), 10, 1_000, &second);
        assert_eq!((p.matching, p.machines.len()), (30, 10));
        assert_eq!(p.machines[0].mac, "52:54:00:00:00:0b");
        let other_stage = Query {
            stage: Some(Stage::Offered),
            ..q()
        };
        assert_eq!(page(rows, 10, 1_000, &other_stage).matching, 0);
    }
}
