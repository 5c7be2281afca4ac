//! The wall clock, read in one place. Protocol logic never calls it: the shells read it
//! and pass `now` in, so engines and stores stay testable with any time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Current Unix time in seconds (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Current Unix time in milliseconds (0 if the clock is before 1970).
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
