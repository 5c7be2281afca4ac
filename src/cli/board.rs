//! `shardboot board`: the boot board in a terminal, refreshed every two seconds as `top`
//! is (`--once` prints it once, for scripts): the member asked, the members with their
//! liveness and pool fill over the last hour (a one-line chart), the members that
//! could not be asked, this member's pools, machines per stage, then every member's
//! machines, stuck first, each with the members that saw it, from `/v1/board`. Every
//! value is printed escaped.

use std::fmt::Write as _;
use std::io::Write as _;

use super::Remote;

/// What to show.
#[derive(Debug, Clone, Default)]
pub struct BoardArgs {
    /// Part of a MAC or address.
    pub search: Option<String>,
    /// Only this stage.
    pub stage: Option<String>,
    /// Only stuck machines.
    pub stuck: bool,
    /// Only the answering member's own view (`?local=1`).
    pub local: bool,
    /// Rows shown.
    pub limit: usize,
}

impl BoardArgs {
    fn path(&self) -> String {
        let mut p = format!("/v1/board?limit={}", self.limit.clamp(1, 500));
        if let Some(q) = &self.search {
            // The server accepts letters, digits and ':' '.' '-' '_' only.
            let q: String = q
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || ":.-_".contains(*c))
                .collect();
            let _ = write!(p, "&q={q}");
        }
        if let Some(s) = &self.stage {
            let s: String = s
                .chars()
                .filter(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            let _ = write!(p, "&stage={s}");
        }
        if self.stuck {
            p.push_str("&stuck=1");
        }
        if self.local {
            p.push_str("&local=1");
        }
        p
    }
}

/// Prints the board, and (unless `once`) again every two seconds until interrupted.
pub fn board(remote: &Remote, args: &BoardArgs, once: bool) -> anyhow::Result<()> {
    loop {
        let v = remote.call(reqwest::Method::GET, &args.path(), None)?;
        let mut out = std::io::stdout().lock();
        if !once {
            // Home and clear, as top redraws.
            out.write_all(b"\x1b[H\x1b[2J")?;
        }
        out.write_all(render(&v).as_bytes())?;
        out.flush()?;
        if once {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.escape_default().to_string(),
        serde_json::Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

/// `ms` as a person reads a time in a stage: `45s`, `5m02s`, `2h03m`, `3d04h`.
pub(super) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

/// Percentages (0–100) as one line of block characters, one per sample.
fn sparkline(percent: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    percent
        .iter()
        .map(|p| BLOCKS[(*p.min(&100) as usize * 7).div_ceil(100)])
        .collect()
}

/// The board as text.
pub(super) fn render(v: &serde_json::Value) -> String {
    let mut o = String::new();
    let now = v["now_ms"].as_u64().unwrap_or(0);
    let when = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(now),
    );
    let _ = writeln!(
        o,
        "shardboot board: member {}, {when}: {} machines seen in the last {}, {} stuck (over {} in one stage)",
        text(&v["member"]),
        v["seen"].as_u64().unwrap_or(0),
        duration(v["window_ms"].as_u64().unwrap_or(0)),
        v["stuck"].as_u64().unwrap_or(0),
        duration(v["stuck_after_ms"].as_u64().unwrap_or(0)),
    );
    for m in v["members"].as_array().into_iter().flatten() {
        let state = match (m["self"].as_bool(), m["alive"].as_bool()) {
            (Some(true), _) => "this member",
            (_, Some(true)) => "alive",
            _ => "DEAD",
        };
        let fill: Vec<u64> = m["pool_fill"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let used = f["in_use"].as_u64().unwrap_or(0);
                let free = f["free"].as_u64().unwrap_or(0);
                (used * 100).checked_div(used + free).unwrap_or(0)
            })
            .collect();
        let now = fill.last().map_or("-".to_string(), |p| format!("{p}%"));
        let _ = writeln!(
            o,
            "member {} ({state}): pools {now} full, last hour {}",
            text(&m["name"]),
            sparkline(&fill)
        );
    }
    for u in v["unasked"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "member {} not asked: {}",
            text(&u["member"]),
            text(&u["why"])
        );
    }
    for p in v["pools"].as_array().into_iter().flatten() {
        let used = p["in_use"].as_u64().unwrap_or(0);
        let free = p["free_in_share"].as_u64().unwrap_or(0);
        let pct = (used * 100).checked_div(used + free).unwrap_or(0);
        let _ = writeln!(
            o,
            "pool {}: {used} in use, {free} free in this member's share ({pct}% full)",
            text(&p["subnet"])
        );
    }
    let seen = v["seen"].as_u64().unwrap_or(0).max(1);
    let _ = writeln!(o, "stages:");
    for name in crate::timeline::stage::Stage::ALL.map(|s| s.as_str()) {
        let c = &v["stages"][name];
        let n = c["machines"].as_u64().unwrap_or(0);
        let bar = "#".repeat(((n * 40).div_ceil(seen)) as usize);
        let _ = writeln!(
            o,
            "  {name:<12} {n:>6}  stuck {:>5}  {bar}",
            c["stuck"].as_u64().unwrap_or(0)
        );
    }
    let _ = writeln!(
        o,
        "{:<17}  {:<11}  {:>8}  {:<5}  {:<5}  {:<39}  {:<12}  WHY",
        "MAC", "STAGE", "IN STAGE", "STUCK", "KNOWN", "IP", "SEEN BY"
    );
    let machines = v["machines"].as_array().cloned().unwrap_or_default();
    for m in &machines {
        let _ = writeln!(
            o,
            "{:<17}  {:<11}  {:>8}  {:<5}  {:<5}  {:<39}  {:<12}  {}",
            text(&m["mac"]),
            text(&m["stage"]),
            duration(m["in_stage_ms"].as_u64().unwrap_or(0)),
            if m["stuck"].as_bool() == Some(true) {
                "STUCK"
            } else {
                ""
            },
            if m["known"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            text(&m["ip"]),
            m["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect::<Vec<_>>()
                .join(","),
            text(&m["why"]),
        );
    }
    let offset = v["offset"].as_u64().unwrap_or(0);
    let _ = writeln!(
        o,
        "shown {}-{} of {} matching",
        if machines.is_empty() { 0 } else { offset + 1 },
        offset + machines.len() as u64,
        v["matching"].as_u64().unwrap_or(0)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_reads_as_a_table_with_stuck_machines_marked_and_text_escaped() {
        let v = serde_json::json!({
            "member": "a", "now_ms": 1_700_000_000_000u64, "window_ms": 3_600_000,
            "stuck_after_ms": 120_000, "seen": 2, "stuck": 1, "matching": 2, "offset": 0,
            "stages": {"bound": {"machines": 1, "stuck": 1}, "chained": {"machines": 1, "stuck": 0}},
            "members": [
                {"name": "a", "self": true, "alive": true, "pool_fill": [
                    {"at_ms": 1, "in_use": 0, "free": 100}, {"at_ms": 2, "in_use": 50, "free": 50},
                    {"at_ms": 3, "in_use": 25, "free": 75}]},
                {"name": "b\u{1b}", "self": false, "alive": false, "pool_fill": []}],
            "unasked": [{"member": "b\u{1b}", "why": "unreachable"}],
            "pools": [{"subnet": "192.0.2.0/24", "in_use": 25, "free_in_share": 75}],
            "machines": [
                {"mac": "52:54:00:00:00:01", "stage": "bound", "in_stage_ms": 302_000, "stuck": true, "known": true, "ip": "192.0.2.10", "members": ["a", "b"]},
                {"mac": "52:54:00:00:00:02", "stage": "chained", "in_stage_ms": 4_000, "stuck": false, "known": true}
            ]
        });
        let t = render(&v);
        assert!(
            t.contains(
                "member a, 2023-11-14T22:13:20Z: 2 machines seen in the last 1h00m, 1 stuck"
            ),
            "{t}"
        );
        assert!(
            t.contains("member a (this member): pools 25% full, last hour ▁▅▃\n"),
            "{t}"
        );
        assert!(
            t.contains("member b\\u{1b} (DEAD): pools - full, last hour \n"),
            "{t}"
        );
        assert!(t.contains("member b\\u{1b} not asked: unreachable"), "{t}");
        assert!(
            t.contains("pool 192.0.2.0/24: 25 in use, 75 free in this member's share (25% full)"),
            "{t}"
        );
        assert!(
            t.contains("  bound             1  stuck     1  ####################"),
            "{t}"
        );
        let first = t
            .lines()
            .find(|l| l.starts_with("52:54:00:00:00:01"))
            .unwrap();
        assert!(
            first.contains("bound")
                && first.contains("5m02s")
                && first.contains("STUCK")
                && first.contains(" a,b "),
            "{first}"
        );
        assert!(t.ends_with("shown 1-2 of 2 matching\n"), "{t}");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }

    #[test]
    fn the_query_keeps_only_what_the_server_accepts() {
        let a = BoardArgs {
            search: Some("52:54&x=<b>".into()),
            stage: Some("Bound!".into()),
            stuck: true,
            local: true,
            limit: 9999,
        };
        assert_eq!(
            a.path(),
            "/v1/board?limit=500&q=52:54xb&stage=ound&stuck=1&local=1"
        );
    }
}
