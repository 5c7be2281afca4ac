//! `[timeline]`: how much of each machine's boot history is kept, whether it is kept
//! on disk, how long other members are given to send theirs, and what the boot board
//! calls stuck.

use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// `[timeline]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeline {
    events_per_machine: Option<usize>,
    known_events: Option<usize>,
    unknown_events: Option<usize>,
    persist: Option<bool>,
    flush_ms: Option<u64>,
    peer_timeout_ms: Option<u64>,
    stuck_after_s: Option<u64>,
    board_window_s: Option<u64>,
}

/// `[timeline]` after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineSettings {
    /// Events kept (and shown) per machine.
    pub events_per_machine: usize,
    /// Events kept of machines that were answered or that the operator enrolled.
    pub known_events: usize,
    /// Events kept of every other machine (a flood of random MACs churns only these).
    pub unknown_events: usize,
    /// Keep the timeline in `<state_dir>/timeline/` across restarts.
    pub persist: bool,
    /// How often new events are written to disk.
    pub flush: Duration,
    /// How long another member is given to send its events of a machine.
    pub peer_timeout: Duration,
    /// Time in one stage after which the board calls a machine stuck.
    pub stuck_after: Duration,
    /// Machines seen within this window are on the board.
    pub board_window: Duration,
}

impl Default for TimelineSettings {
    fn default() -> Self {
        validate(RawTimeline::default(), &mut Issues::default())
    }
}

/// Validates `[timeline]`.
pub(super) fn validate(raw: RawTimeline, issues: &mut Issues) -> TimelineSettings {
    let per = issues.in_range(
        "timeline.events_per_machine",
        raw.events_per_machine.unwrap_or(48),
        1,
        1_000,
    );
    let known = issues.in_range(
        "timeline.known_events",
        raw.known_events.unwrap_or(80_000),
        100,
        2_000_000,
    );
    let unknown = issues.in_range(
        "timeline.unknown_events",
        raw.unknown_events.unwrap_or(20_000),
        100,
        2_000_000,
    );
    if per > known {
        issues.add(
            "timeline.events_per_machine",
            "must not exceed timeline.known_events",
        );
    }
    let ms = |issues: &mut Issues, key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
        Duration::from_millis(issues.in_range(key, v.unwrap_or(default), lo, hi))
    };
    let secs = |issues: &mut Issues, key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
        Duration::from_secs(issues.in_range(key, v.unwrap_or(default), lo, hi))
    };
    TimelineSettings {
        events_per_machine: per,
        known_events: known,
        unknown_events: unknown,
        persist: raw.persist.unwrap_or(true),
        flush: ms(
            issues,
            "timeline.flush_ms",
            raw.flush_ms,
            1_000,
            100,
            60_000,
        ),
        peer_timeout: ms(
            issues,
            "timeline.peer_timeout_ms",
            raw.peer_timeout_ms,
            2_000,
            100,
            10_000,
        ),
        stuck_after: secs(
            issues,
            "timeline.stuck_after_s",
            raw.stuck_after_s,
            120,
            5,
            86_400,
        ),
        board_window: secs(
            issues,
            "timeline.board_window_s",
            raw.board_window_s,
            3_600,
            60,
            7 * 86_400,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_value_names_its_key() {
        let mut issues = Issues::default();
        validate(
            RawTimeline {
                events_per_machine: Some(500),
                known_events: Some(200),
                unknown_events: Some(5),
                flush_ms: Some(10),
                peer_timeout_ms: Some(60_000),
                ..RawTimeline::default()
            },
            &mut issues,
        );
        assert_eq!(
            issues.keys(),
            [
                "timeline.unknown_events",
                "timeline.events_per_machine",
                "timeline.flush_ms",
                "timeline.peer_timeout_ms"
            ]
        );
        let d = TimelineSettings::default();
        assert_eq!(
            (d.events_per_machine, d.known_events, d.unknown_events),
            (48, 80_000, 20_000)
        );
        assert!(d.persist);
    }
}
