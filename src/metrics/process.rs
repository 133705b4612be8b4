//! The standard `process_*` families of Prometheus' client libraries, read from `/proc`
//! at each scrape (on the metrics thread, off the shards): resident and virtual memory,
//! CPU time, open and allowed file descriptors, start time. A figure that cannot be read
//! (no `/proc`: not Linux, or a sandbox) is left out rather than given as 0.

use std::fmt::Write as _;

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, 100 on every Linux
/// architecture the node builds for (the kernel scales to it whatever `HZ` is).
const USER_HZ: f64 = 100.0;

/// What one read of `/proc/self` found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// Reads `/proc/self`.
pub fn read() -> ProcessFigures {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| boot_time(&text));
    let (cpu_seconds, start_ticks) = stat_times(&stat).unzip();
    ProcessFigures {
        resident_bytes: status_kib(&status, "VmRSS:").map(|kib| kib * 1024),
        virtual_bytes: status_kib(&status, "VmSize:").map(|kib| kib * 1024),
        cpu_seconds,
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64),
        max_fds: std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|text| max_open_files(&text)),
        start_time_seconds: boot
            .zip(start_ticks)
            .map(|(boot, ticks)| boot as f64 + ticks as f64 / USER_HZ),
    }
}

/// `VmRSS:   123 kB` → 123.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// User plus system CPU seconds and the start time in ticks since boot, from
/// `/proc/self/stat` (fields 14, 15 and 22; the command name in field 2 may hold spaces
/// and parentheses, so fields are counted after its last `)`).
fn stat_times(stat: &str) -> Option<(f64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    // `after` starts at field 3 (state).
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let cpu_ticks = field(14)? + field(15)?;
    Some((cpu_ticks as f64 / USER_HZ, field(22)?))
}

/// `btime 1700000000` of `/proc/stat`.
fn boot_time(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|line| line.starts_with("btime "))?;
    line["btime ".len()..].trim().parse().ok()
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Writes the `process_*` families that could be read.
pub fn render(out: &mut String) {
    let figures = read();
    let families: [(&str, &str, &str, Option<String>); 6] = [
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            figures.resident_bytes.map(|v| v.to_string()),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            figures.virtual_bytes.map(|v| v.to_string()),
        ),
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            figures.cpu_seconds.map(|v| format!("{v:.2}")),
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            figures.open_fds.map(|v| v.to_string()),
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            figures.max_fds.map(|v| v.to_string()),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            figures.start_time_seconds.map(|v| format!("{v:.2}")),
        ),
    ];
    for (name, kind, help, value) in families {
        if let Some(value) = value {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, then fields 3..22.
        let stat = "4242 (ring mq) (x)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 9 0 123456 0 0";
        assert_eq!(stat_times(stat), Some((4.0, 123_456)));
        assert_eq!(stat_times("garbage"), None);
    }

    #[test]
    fn status_limits_and_boot_time_parse() {
        assert_eq!(
            status_kib("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2048)
        );
        assert_eq!(status_kib("Name:\tx\n", "VmRSS:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n";
        assert_eq!(max_open_files(limits), Some(20_000));
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reads_on_linux() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return;
        }
        let figures = read();
        assert!(figures.resident_bytes.unwrap() > 0);
        assert!(figures.open_fds.unwrap() > 0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = figures.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0 * 365.0,
            "{started}"
        );
    }
}
