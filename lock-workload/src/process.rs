//! This process's CPU time and resident memory, from `/proc/self`: what
//! holding locks costs the client, taken as the difference of two samples;
//! and how busy the machine's cores were, from `/proc/stat`, which tells
//! whether a rate was bounded by the CPU.

use std::time::Duration;

/// Clock ticks per second of `/proc/self/stat`'s times: `USER_HZ`, which
/// Linux fixes at 100 for user space whatever the kernel's own tick rate.
const USER_HZ: u64 = 100;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessSample {
    /// User plus system CPU time of all threads so far (10 ms resolution).
    pub cpu: Duration,
    /// Resident set size, in bytes.
    pub rss_bytes: u64,
}

/// Why `/proc/self` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The file could not be read (not Linux, or no `/proc`).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file did not have the expected field.
    #[error("{path} has no readable {field}")]
    Format {
        /// The file.
        path: &'static str,
        /// The field looked for.
        field: &'static str,
    },
}

impl ProcessSample {
    /// Reads `/proc/self/stat` and `/proc/self/status` now.
    pub fn now() -> Result<Self, ProcessError> {
        let read = |path: &'static str| {
            std::fs::read_to_string(path).map_err(|source| ProcessError::Read { path, source })
        };
        Ok(ProcessSample {
            cpu: cpu_of_stat(&read("/proc/self/stat")?)?,
            rss_bytes: rss_of_status(&read("/proc/self/status")?)?,
        })
    }
}

/// `utime + stime` (fields 14 and 15). The command name (field 2) is in
/// parentheses and may hold spaces, so fields are counted after its `)`.
fn cpu_of_stat(stat: &str) -> Result<Duration, ProcessError> {
    let bad = ProcessError::Format {
        path: "/proc/self/stat",
        field: "utime and stime",
    };
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return Err(bad);
    };
    // After the name come field 3 (state) onwards: utime is the 12th of them.
    let mut fields = after_name.split_whitespace().skip(11);
    let mut tick = || fields.next().and_then(|f| f.parse::<u64>().ok());
    match (tick(), tick()) {
        (Some(user), Some(system)) => Ok(Duration::from_millis((user + system) * 1000 / USER_HZ)),
        _ => Err(bad),
    }
}

/// `VmRSS:   1234 kB`.
fn rss_of_status(status: &str) -> Result<u64, ProcessError> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or(ProcessError::Format {
            path: "/proc/self/status",
            field: "VmRSS",
        })
}

/// The machine's CPU time so far, all cores, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineSample {
    /// Ticks spent on anything but idling or waiting for I/O.
    pub busy: u64,
    /// All ticks.
    pub total: u64,
}

impl MachineSample {
    /// Reads the `cpu` line of `/proc/stat` now.
    pub fn now() -> Result<Self, ProcessError> {
        let path = "/proc/stat";
        let stat =
            std::fs::read_to_string(path).map_err(|source| ProcessError::Read { path, source })?;
        machine_of_stat(&stat).ok_or(ProcessError::Format {
            path,
            field: "the cpu line",
        })
    }

    /// The share of the cores that was busy between `earlier` and this
    /// sample, from 0 to 1.
    pub fn busy_since(&self, earlier: &MachineSample) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        self.busy.saturating_sub(earlier.busy) as f64 / total as f64
    }
}

/// `cpu  user nice system idle iowait irq softirq steal ...`: idle and
/// iowait are the idle ticks.
fn machine_of_stat(stat: &str) -> Option<MachineSample> {
    let ticks: Vec<u64> = stat
        .lines()
        .find(|line| line.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    let total: u64 = ticks.iter().sum();
    Some(MachineSample {
        busy: total - idle,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_utime_plus_stime_even_with_spaces_in_the_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_of_stat(stat).unwrap(), Duration::from_secs(3));
    }

    #[test]
    fn rss_is_read_in_bytes() {
        let status = "Name:\tdistlock\nVmRSS:\t    2048 kB\nThreads:\t3\n";
        assert_eq!(rss_of_status(status).unwrap(), 2048 * 1024);
    }

    #[test]
    fn machine_busy_is_all_but_idle_and_iowait() {
        let stat = "cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 5 0 2 40 3 0 0 0 0 0\n";
        let later = "cpu  40 0 15 120 5 0 0 0 0 0\n";
        let (a, b) = (
            machine_of_stat(stat).unwrap(),
            machine_of_stat(later).unwrap(),
        );
        assert_eq!(
            a,
            MachineSample {
                busy: 15,
                total: 100
            }
        );
        assert_eq!(b.busy_since(&a), 0.5);
    }

    #[test]
    fn this_process_has_some_memory() {
        assert!(ProcessSample::now().unwrap().rss_bytes > 0);
    }
}
