//! The process's own metrics, under the names Prometheus client libraries give them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …), so the dashboards
//! and alerts written for any exporter work unchanged. Read from `/proc/self` at each
//! scrape; on a system without `/proc` nothing is written.
//!
//! The parsing is pure (the file contents come in); only [`render_prometheus`] reads.

use std::fmt::Write;

/// What `/proc/self/stat` and `/proc/self/status` say about this process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessSample {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, octets.
    pub resident_bytes: u64,
    /// Virtual memory size, octets.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Reads a `/proc/<pid>/stat` line (proc(5)). `ticks_per_second` is `sysconf(_SC_CLK_TCK)`
/// (100 on Linux), `page_size` in octets, `boot_time` the `btime` of `/proc/stat`.
/// The command name (field 2) may hold spaces and parentheses, so the fields are counted
/// from the last `)`.
pub fn parse_stat(
    stat: &str,
    ticks_per_second: f64,
    page_size: u64,
    boot_time: u64,
) -> Option<ProcessSample> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): field n is at index n - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let (utime, stime) = (field(14)?, field(15)?);
    Some(ProcessSample {
        cpu_seconds: (utime + stime) as f64 / ticks_per_second,
        threads: field(20)?,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / ticks_per_second,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)?.saturating_mul(page_size),
    })
}

/// The `btime` line of `/proc/stat`: when the machine booted, seconds since the epoch.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit on open files from `/proc/self/limits`.
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Writes the process metrics read from `/proc/self`.
pub fn render_prometheus(out: &mut String) {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    // proc(5) counts CPU time in USER_HZ ticks, which Linux fixes at 100 for user space
    // on every architecture.
    let sample = read("/proc/self/stat").and_then(|stat| {
        let boot = read("/proc/stat").as_deref().and_then(parse_boot_time)?;
        parse_stat(&stat, 100.0, page_size(), boot)
    });
    let Some(p) = sample else { return };
    let mut metric = |name: &str, kind: &str, help: &str, v: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    metric(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time spent, seconds",
        format!("{:.2}", p.cpu_seconds),
    );
    metric(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size, octets",
        p.resident_bytes.to_string(),
    );
    metric(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size, octets",
        p.virtual_bytes.to_string(),
    );
    metric(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, seconds",
        format!("{:.2}", p.start_time_seconds),
    );
    metric(
        "process_threads",
        "gauge",
        "Threads of the process",
        p.threads.to_string(),
    );
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metric(
            "process_open_fds",
            "gauge",
            "Open file descriptors",
            fds.count().to_string(),
        );
    }
    if let Some(max) = read("/proc/self/limits").as_deref().and_then(parse_max_fds) {
        metric(
            "process_max_fds",
            "gauge",
            "Limit on open file descriptors",
            max.to_string(),
        );
    }
}

/// The memory page size (`rss` in proc(5) counts pages), read once from the first
/// mapping's `KernelPageSize` in `/proc/self/smaps`; 4096 when it cannot be read.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        std::fs::read_to_string("/proc/self/smaps")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("KernelPageSize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(4096, |kib| kib * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_a_command_name_holding_spaces_and_parentheses() {
        // proc(5) fields 1..=24 of a process named "shard (boot) x".
        let stat = "4242 (shard (boot) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    250 50 0 0 20 0 7 0 1000 123456789 2000 18446744073709551615";
        let p = parse_stat(stat, 100.0, 4096, 1_700_000_000).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.threads, 7);
        assert_eq!(p.start_time_seconds, 1_700_000_010.0);
        assert_eq!(p.virtual_bytes, 123_456_789);
        assert_eq!(p.resident_bytes, 2000 * 4096);
        assert_eq!(parse_stat("garbage", 100.0, 4096, 0), None);
        assert_eq!(parse_stat("1 (x) S 1 2", 100.0, 4096, 0), None);
    }

    #[test]
    fn boot_time_and_the_open_files_limit() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1765000000\nprocesses 9\n"),
            Some(1_765_000_000)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
    }

    #[test]
    fn this_process_is_rendered_under_the_usual_names() {
        let mut out = String::new();
        render_prometheus(&mut out);
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(out.contains(name), "{name} missing from:\n{out}");
        }
        let rss: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rss > 1 << 20,
            "a running test binary holds more than 1 MiB: {rss}"
        );
    }
}
