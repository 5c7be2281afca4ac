//! Counters and histograms kept as atomics and rendered in the Prometheus text format.
//! Each listener owns its metric struct; `/metrics` concatenates them.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds (seconds) of the latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, secs: f64) {
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Writes the histogram's exposition lines.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// One counter per label of a fixed set, exposed as one metric family
/// (`name{key="label"} n`). Unknown labels are ignored.
#[derive(Debug)]
pub struct LabeledCounters<const N: usize> {
    labels: [&'static str; N],
    counters: [Counter; N],
}

impl<const N: usize> LabeledCounters<N> {
    /// Counters for `labels`, all zero.
    pub fn new(labels: [&'static str; N]) -> Self {
        Self {
            labels,
            counters: std::array::from_fn(|_| Counter::default()),
        }
    }

    fn index(&self, label: &str) -> Option<usize> {
        self.labels.iter().position(|l| *l == label)
    }

    /// Adds one to `label`.
    pub fn inc(&self, label: &str) {
        if let Some(i) = self.index(label) {
            self.counters[i].inc();
        }
    }

    /// Adds `n` to `label`.
    pub fn add(&self, label: &str, n: u64) {
        if let Some(i) = self.index(label) {
            self.counters[i].add(n);
        }
    }

    /// The count for `label` (0 for an unknown label).
    pub fn get(&self, label: &str) -> u64 {
        self.index(label).map_or(0, |i| self.counters[i].get())
    }

    /// Writes the family: a header, then one sample per label.
    pub fn render(&self, out: &mut String, name: &str, key: &str, help: &str) {
        header(out, name, "counter", help);
        for (l, c) in self.labels.iter().zip(&self.counters) {
            sample(out, name, key, l, c.get());
        }
    }
}

/// Writes a `# HELP`/`# TYPE` header.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Writes one sample without labels.
pub fn value(out: &mut String, name: &str, v: u64) {
    let _ = writeln!(out, "{name} {v}");
}

/// Writes one sample with a single label.
pub fn sample(out: &mut String, name: &str, label: &str, value_label: &str, v: u64) {
    let _ = writeln!(out, "{name}{{{label}=\"{value_label}\"}} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labeled_counters_count_and_render() {
        let c = LabeledCounters::new(["a", "b"]);
        c.inc("a");
        c.inc("a");
        c.inc("zzz");
        assert_eq!((c.get("a"), c.get("b"), c.get("zzz")), (2, 0, 0));
        let mut s = String::new();
        c.render(&mut s, "x_total", "kind", "test");
        assert!(
            s.contains("x_total{kind=\"a\"} 2\nx_total{kind=\"b\"} 0\n"),
            "{s}"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(0.0002);
        h.observe(0.003);
        h.observe(5.0);
        let mut s = String::new();
        h.render(&mut s, "x_seconds", "test");
        assert!(s.contains("x_seconds_bucket{le=\"0.00025\"} 1"), "{s}");
        assert!(s.contains("x_seconds_bucket{le=\"0.005\"} 2"), "{s}");
        assert!(s.contains("x_seconds_bucket{le=\"1\"} 2"), "{s}");
        assert!(s.contains("x_seconds_bucket{le=\"+Inf\"} 3"), "{s}");
        assert!(s.contains("x_seconds_count 3"), "{s}");
    }
}
