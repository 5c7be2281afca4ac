//! The one collector of validation problems. Every section's validation adds to it and
//! goes on, so `check-config` lists every bad key of a file in one run.

use std::fmt;
use std::net::Ipv4Addr;

/// One invalid setting: the dotted key and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Dotted path such as `subnet[0].ranges[1]`.
    pub key: String,
    /// Human-readable reason.
    pub reason: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// The problems found so far, in the order they were found.
#[derive(Debug, Default)]
pub(super) struct Issues(Vec<ConfigIssue>);

impl Issues {
    /// Records that `key` is invalid because of `reason`.
    pub(super) fn add(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.0.push(ConfigIssue {
            key: key.into(),
            reason: reason.into(),
        });
    }

    /// Records an issue found elsewhere (a section that stops at its first problem).
    pub(super) fn push(&mut self, issue: ConfigIssue) {
        self.0.push(issue);
    }

    /// `value` unchanged; an issue when it lies outside `lo..=hi`. The value is kept
    /// either way so later checks can go on and report their own keys.
    pub(super) fn in_range<T: PartialOrd + Copy + fmt::Display>(
        &mut self,
        key: &str,
        value: T,
        lo: T,
        hi: T,
    ) -> T {
        if value < lo || value > hi {
            self.add(key, format!("must be between {lo} and {hi}"));
        }
        value
    }

    /// `s` as an IPv4 address, or an issue.
    pub(super) fn ip(&mut self, key: &str, s: &str) -> Option<Ipv4Addr> {
        match s.trim().parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.add(key, "not an IPv4 address");
                None
            }
        }
    }

    /// Like [`Issues::ip`] for an optional value.
    pub(super) fn opt_ip(&mut self, key: &str, s: &Option<String>) -> Option<Ipv4Addr> {
        s.as_deref().and_then(|s| self.ip(key, s))
    }

    /// Every address of `list` that parses; an issue (`key[i]`) for each that does not.
    pub(super) fn ips(&mut self, key: &str, list: &[String]) -> Vec<Ipv4Addr> {
        list.iter()
            .enumerate()
            .filter_map(|(i, s)| self.ip(&format!("{key}[{i}]"), s))
            .collect()
    }

    /// An issue under `key` unless `name` is a DNS name: 1 to 253 letters, digits, '-'
    /// and '.'.
    pub(super) fn dns_name(&mut self, key: &str, name: &str) {
        let ok = (1..=253).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok {
            self.add(key, "must be a DNS name (letters, digits, '-' and '.')");
        }
    }

    /// The keys of the issues so far, for tests that check which keys are named.
    #[cfg(test)]
    pub(super) fn keys(&self) -> Vec<String> {
        self.0.iter().map(|i| i.key.clone()).collect()
    }

    /// The issues, or `Ok(())` when there are none.
    pub(super) fn finish(self) -> Result<(), Vec<ConfigIssue>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}
