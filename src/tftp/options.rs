//! Option negotiation: RFC 2347 (framework), 2348 (blksize), 2349 (timeout, tsize),
//! 7440 (windowsize). Pure: request options + limits + file size in, agreed values and
//! the OACK contents out.

use std::time::Duration;

use super::packet::RawOption;
use crate::config::{BLKSIZE_RANGE, WINDOWSIZE_RANGE};

/// RFC 1350 §2: without options every block is 512 octets.
pub const DEFAULT_BLKSIZE: u16 = 512;
/// RFC 2349 §2: valid timeout values, in seconds.
pub const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=255;

/// Server-side ceilings applied to what clients ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest blksize we agree to.
    pub max_blksize: u16,
    /// Largest windowsize we agree to.
    pub max_windowsize: u16,
    /// Retransmission timeout when the client does not ask for one.
    pub default_timeout: Duration,
    /// Largest `timeout` option accepted, in seconds. A larger request is ignored (the
    /// option is left out of the OACK and `default_timeout` applies): RFC 2349 §2 lets
    /// the server only echo the exact value or omit it, and a hostile client asking
    /// 255 s would otherwise hold its slot for many minutes of retransmissions.
    pub max_timeout_secs: u64,
}

/// The parameters a transfer runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Octets per DATA block.
    pub blksize: u16,
    /// Blocks sent before waiting for an ACK.
    pub windowsize: u16,
    /// Retransmission timeout.
    pub timeout: Duration,
    /// Options to acknowledge, in the client's order; empty means "send DATA 1 at once"
    /// (RFC 2347 §3: no OACK when no option is accepted).
    pub oack: Vec<(&'static str, u64)>,
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    // Digits only, no sign or whitespace; 20 digits already overflow u64's useful range.
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Negotiates the options of a read request for a file of `size` octets (as it will
/// be sent, i.e. after netascii conversion).
///
/// Unknown or invalid options are ignored rather than refused: RFC 2347 §4 lets the
/// server omit any option it does not accept, and a client then falls back to the
/// RFC 1350 default. A repeated option counts once (the first).
pub fn negotiate(options: &[RawOption<'_>], limits: &Limits, size: u64) -> Negotiated {
    let mut n = Negotiated {
        blksize: DEFAULT_BLKSIZE,
        windowsize: 1,
        timeout: limits.default_timeout,
        oack: Vec::new(),
    };
    let mut seen = [false; 4];
    for opt in options {
        let idx = if opt.name.eq_ignore_ascii_case(b"blksize") {
            0
        } else if opt.name.eq_ignore_ascii_case(b"timeout") {
            1
        } else if opt.name.eq_ignore_ascii_case(b"tsize") {
            2
        } else if opt.name.eq_ignore_ascii_case(b"windowsize") {
            3
        } else {
            continue;
        };
        if std::mem::replace(&mut seen[idx], true) {
            continue;
        }
        let Some(value) = parse_decimal(opt.value) else {
            continue;
        };
        match idx {
            0 if BLKSIZE_RANGE.contains(&value) => {
                // RFC 2348 §2: the server may answer with a smaller size.
                let agreed = value.min(u64::from(limits.max_blksize)) as u16;
                n.blksize = agreed;
                n.oack.push(("blksize", u64::from(agreed)));
            }
            1 if TIMEOUT_RANGE.contains(&value) && value <= limits.max_timeout_secs => {
                // RFC 2349 §2: the server must echo exactly the requested value or omit
                // it; above our cap we omit it (RFC 2347 §4), never echo a smaller one.
                n.timeout = Duration::from_secs(value);
                n.oack.push(("timeout", value));
            }
            // RFC 2349 §3: a read request carries tsize 0 and we answer with the size.
            2 => n.oack.push(("tsize", size)),
            3 if WINDOWSIZE_RANGE.contains(&value) => {
                // RFC 7440 §3: the server may answer with a smaller window.
                let agreed = value.min(u64::from(limits.max_windowsize)) as u16;
                n.windowsize = agreed;
                n.oack.push(("windowsize", u64::from(agreed)));
            }
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_blksize: 1468,
        max_windowsize: 16,
        default_timeout: Duration::from_secs(1),
        max_timeout_secs: 5,
    };

    fn opts<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<RawOption<'a>> {
        pairs
            .iter()
            .map(|(n, v)| RawOption {
                name: n.as_bytes(),
                value: v.as_bytes(),
            })
            .collect()
    }

    #[test]
    fn no_options_means_rfc1350_defaults_and_no_oack() {
        let n = negotiate(&[], &LIMITS, 10);
        assert_eq!(n.blksize, 512);
        assert_eq!(n.windowsize, 1);
        assert_eq!(n.timeout, Duration::from_secs(1));
        assert!(n.oack.is_empty());
    }

    #[test]
    fn clamps_blksize_and_windowsize_and_reports_tsize() {
        let o = opts(&[
            ("BlkSize", "65464"),
            ("tsize", "0"),
            ("windowsize", "64"),
            ("timeout", "3"),
        ]);
        let n = negotiate(&o, &LIMITS, 4242);
        assert_eq!(n.blksize, 1468);
        assert_eq!(n.windowsize, 16);
        assert_eq!(n.timeout, Duration::from_secs(3));
        assert_eq!(
            n.oack,
            vec![
                ("blksize", 1468),
                ("tsize", 4242),
                ("windowsize", 16),
                ("timeout", 3)
            ]
        );
    }

    #[test]
    fn ignores_invalid_unknown_and_repeated() {
        let o = opts(&[
            ("blksize", "7"),
            ("blksize", "1024"),
            ("timeout", "0"),
            ("timeout", "256"),
            ("windowsize", "0"),
            ("multicast", ""),
            ("tsize", "-1"),
            ("tsize", "99999999999999999999999"),
        ]);
        let n = negotiate(&o, &LIMITS, 1);
        // The first blksize was invalid; the repeat does not get a second chance.
        assert_eq!(n.blksize, 512);
        assert!(n.oack.is_empty());
    }

    #[test]
    fn keeps_smaller_requested_blksize() {
        let n = negotiate(&opts(&[("blksize", "1432")]), &LIMITS, 1);
        assert_eq!(n.blksize, 1432);
        assert_eq!(n.oack, vec![("blksize", 1432)]);
    }

    #[test]
    fn timeout_above_the_cap_is_ignored_not_shortened() {
        // RFC 2349 §2 allows only the exact echo or omission; omission means the client
        // keeps its own default and we keep ours.
        let n = negotiate(
            &opts(&[("timeout", "255"), ("blksize", "1024")]),
            &LIMITS,
            1,
        );
        assert_eq!(n.timeout, Duration::from_secs(1));
        assert_eq!(n.oack, vec![("blksize", 1024)]);
        let n = negotiate(&opts(&[("timeout", "6")]), &LIMITS, 1);
        assert!(n.oack.is_empty());
        // At the cap it is accepted and echoed.
        let n = negotiate(&opts(&[("timeout", "5")]), &LIMITS, 1);
        assert_eq!(n.timeout, Duration::from_secs(5));
        assert_eq!(n.oack, vec![("timeout", 5)]);
    }
}
