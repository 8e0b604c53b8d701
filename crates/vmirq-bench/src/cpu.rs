//! CPU time and CPU placement: per-thread and per-process CPU time from
//! `/proc/.../schedstat` (nanosecond resolution, unlike the tick-based `stat`), and pinning.

use serde::Serialize;
use std::fs;

/// Where the client and the backend run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
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
/// The OS error of `sched_setaffinity`.
pub fn set_affinity(tid: libc::pid_t, cpu: Option<usize>) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let cpus: Vec<usize> = match cpu {
        Some(c) => vec![c],
        None => (0..online_cpus()).collect(),
    };
    for c in cpus {
        // SAFETY: CPU_SET only writes the bit for `c` inside `set`; `c` is below the number of
        // online CPUs, far below CPU_SETSIZE (1024).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid, initialised cpu_set_t and the size passed is its exact size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
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
