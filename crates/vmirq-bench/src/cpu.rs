//! CPU time and CPU placement: per-thread and per-process CPU time from
//! `/proc/.../schedstat` (nanosecond resolution, unlike the tick-based `stat`), and pinning.

use serde::{Deserialize, Serialize};
use std::fs;

/// Where the client and the backend run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Client and backend pinned to different CPUs (default).
    Split,
    /// Client and backend pinned to the same CPU (they compete: wakeups cost a context switch).
    Same,
    /// No pinning; the scheduler decides.
    Free,
}

impl Placement {
    /// Parse `same`, `split` or `free`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "split" => Some(Self::Split),
            "same" => Some(Self::Same),
            "free" => Some(Self::Free),
            _ => None,
        }
    }

    /// The name used on the command line and in reports.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Split => "split",
            Self::Same => "same",
            Self::Free => "free",
        }
    }

    /// The CPU for the client thread, if pinned.
    #[must_use]
    pub fn client_cpu(&self) -> Option<usize> {
        match self {
            Self::Split | Self::Same => Some(0),
            Self::Free => None,
        }
    }

    /// The CPU for the backend process, if pinned (falls back to CPU 0 on a 1-CPU machine).
    #[must_use]
    pub fn backend_cpu(&self) -> Option<usize> {
        match self {
            Self::Split => Some(if online_cpus() > 1 { 1 } else { 0 }),
            Self::Same => Some(0),
            Self::Free => None,
        }
    }
}

/// Number of CPUs this process may use.
#[must_use]
pub fn online_cpus() -> usize {
    vmirq_os::online_cpus()
}

/// Pin the calling thread to `cpu` (`None` allows every CPU). Failure is logged, not fatal:
/// the run is still valid, only noisier.
pub fn pin_current_thread(cpu: Option<usize>) {
    if let Err(err) = set_affinity(0, cpu) {
        tracing::warn!(?cpu, %err, "could not pin the client thread");
    }
}

/// Set the affinity of task `tid` (0 = calling thread) to `cpu`, or to all CPUs for `None`.
///
/// # Errors
/// The OS error of `sched_setaffinity` (see [`vmirq_os::set_affinity`]).
pub fn set_affinity(tid: libc::pid_t, cpu: Option<usize>) -> std::io::Result<()> {
    vmirq_os::set_affinity(tid, cpu)
}

/// Whole-machine CPU time in clock ticks, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SystemTicks {
    /// user + nice + system + irq + softirq (time some task or interrupt ran).
    pub busy: u64,
    /// Time this VM wanted to run but the hypervisor ran someone else.
    pub steal: u64,
    /// Every field (all CPUs).
    pub total: u64,
}

impl SystemTicks {
    /// Parse the aggregate `cpu` line of a `/proc/stat` text.
    #[must_use]
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        // Fields: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
        // already included in user/nice.
        Some(Self {
            busy: get(0) + get(1) + get(2) + get(5) + get(6),
            steal: get(7),
            total: (0..8).map(get).sum(),
        })
    }

    /// Read `/proc/stat` now.
    #[must_use]
    pub fn read() -> Option<Self> {
        Self::parse(&fs::read_to_string("/proc/stat").ok()?)
    }

    /// The ticks between `earlier` and `self`.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(earlier.busy),
            steal: self.steal.saturating_sub(earlier.steal),
            total: self.total.saturating_sub(earlier.total),
        }
    }
}

/// The first field of a schedstat file: nanoseconds spent running on a CPU.
fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// CPU nanoseconds consumed so far by the calling thread.
#[must_use]
pub fn thread_cpu_ns() -> Option<u64> {
    parse_schedstat(&fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// CPU nanoseconds consumed so far by every thread of process `pid`.
#[must_use]
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let dir = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for entry in dir.flatten() {
        let path = entry.path().join("schedstat");
        if let Some(ns) = fs::read_to_string(path)
            .ok()
            .as_deref()
            .and_then(parse_schedstat)
        {
            total = total.saturating_add(ns);
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_first_field_is_runtime() {
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn proc_stat_cpu_line_is_split_into_busy_steal_total() {
        let text = "cpu  10 1 5 100 2 3 4 7 9 0\ncpu0 1 1 1 1 1 1 1 1 1 1\n";
        let t = SystemTicks::parse(text).expect("cpu line");
        assert_eq!(
            t,
            SystemTicks {
                busy: 23,
                steal: 7,
                total: 132
            }
        );
        let later = SystemTicks {
            busy: 30,
            steal: 8,
            total: 200,
        };
        assert_eq!(
            later.since(&t),
            SystemTicks {
                busy: 7,
                steal: 1,
                total: 68
            }
        );
        assert!(SystemTicks::parse("intr 1 2").is_none());
        assert!(SystemTicks::read().is_some_and(|s| s.total > 0));
    }

    #[test]
    fn own_cpu_time_grows_while_spinning() {
        let Some(before) = thread_cpu_ns() else {
            panic!("/proc/thread-self/schedstat is not readable: is this Linux with schedstats?");
        };
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = thread_cpu_ns().unwrap_or(0);
        assert!(after > before, "thread CPU time did not advance");
        let own = process_cpu_ns(std::process::id()).unwrap_or(0);
        assert!(own >= after - before);
    }

    #[test]
    fn placement_names_and_cpus() {
        assert_eq!(Placement::parse("same"), Some(Placement::Same));
        assert_eq!(Placement::parse("bogus"), None);
        assert_eq!(Placement::Same.client_cpu(), Placement::Same.backend_cpu());
        assert_eq!(Placement::Free.backend_cpu(), None);
    }
}
