//! `[health]`: how members probe each other's `/healthz`.

use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// `[health]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    dead_after: Option<u32>,
}

/// `[health]` after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    /// Time between probes of one member.
    pub interval: Duration,
    /// Timeout of one probe.
    pub timeout: Duration,
    /// Failed probes in a row before a member counts as dead.
    pub dead_after: u32,
}

/// Validates `[health]`. A probe may not outlast the interval, or probes of one member
/// would pile up.
pub(super) fn validate(raw: RawHealth, issues: &mut Issues) -> HealthSettings {
    let interval = issues.in_range(
        "health.interval_ms",
        raw.interval_ms.unwrap_or(2_000),
        100,
        600_000,
    );
    let timeout = issues.in_range(
        "health.timeout_ms",
        raw.timeout_ms.unwrap_or(1_000),
        50,
        600_000,
    );
    if timeout > interval {
        issues.add("health.timeout_ms", "must not exceed health.interval_ms");
    }
    HealthSettings {
        interval: Duration::from_millis(interval),
        timeout: Duration::from_millis(timeout),
        dead_after: issues.in_range("health.dead_after", raw.dead_after.unwrap_or(3), 1, 100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_timeout_must_fit_the_interval() {
        let mut issues = Issues::default();
        validate(
            RawHealth {
                interval_ms: Some(500),
                timeout_ms: Some(1_000),
                dead_after: Some(0),
            },
            &mut issues,
        );
        assert_eq!(issues.keys(), ["health.timeout_ms", "health.dead_after"]);
    }
}
