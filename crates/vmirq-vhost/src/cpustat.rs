//! What the scheduler did to a queue worker: the input of the kick-wait contention gate
//! ([`vmirq_policy::wait::ContentionGate`]).
//!
//! [`ThreadSchedstat`] reads the calling thread's `/proc/thread-self/schedstat` (time on a CPU,
//! time runnable but waiting for one; Linux `CONFIG_SCHED_INFO`, on in distribution kernels)
//! and the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`): what the process's other threads
//! ran is the waiter's own work (io_uring's io-wq workers run a polling worker's buffered
//! reads on its CPU), not a neighbour's. The file is opened by the first read, so it must
//! happen on the worker thread itself; it is then re-read with `pread` (about 1.7 µs on the
//! test VM), at most once per [`SAMPLE_EVERY_NS`] while the worker polls. Without the file the
//! gate gets no samples and never closes (logged once).

use std::fs::File;
use std::os::unix::fs::FileExt;
use vmirq_policy::wait::CpuSample;
use vmirq_policy::Nanos;

/// Minimum time between two samples (bounds the reads to about 0.2 % of a polling CPU).
pub const SAMPLE_EVERY_NS: Nanos = 1_000_000;

/// Running totals since some fixed point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTotals {
    /// CPU time of the calling thread.
    pub ran_ns: Nanos,
    /// Run-queue delay of the calling thread.
    pub waited_ns: Nanos,
    /// CPU time of the whole process (the calling thread included).
    pub process_ns: Nanos,
}

/// Cumulative CPU time and run-queue delay of the calling thread.
pub trait CpuSource: Send {
    /// The totals so far, or `None` when unavailable.
    fn read(&mut self) -> Option<CpuTotals>;
}

/// `/proc/thread-self/schedstat` of the thread that first reads it.
#[derive(Debug, Default)]
pub struct ThreadSchedstat {
    file: Option<File>,
    failed: bool,
}

impl ThreadSchedstat {
    /// A reader that opens the file at its first read.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl CpuSource for ThreadSchedstat {
    fn read(&mut self) -> Option<CpuTotals> {
        if self.failed {
            return None;
        }
        if self.file.is_none() {
            match File::open("/proc/thread-self/schedstat") {
                Ok(f) => self.file = Some(f),
                Err(e) => {
                    tracing::info!(error = %e, "no schedstat: polling will not stop under CPU contention");
                    self.failed = true;
                    return None;
                }
            }
        }
        let mut buf = [0u8; 96];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        let (ran_ns, waited_ns) = parse_schedstat(buf.get(..n)?)?;
        Some(CpuTotals {
            ran_ns,
            waited_ns,
            process_ns: process_cpu_ns()?,
        })
    }
}

/// `CLOCK_PROCESS_CPUTIME_ID`: CPU time of every thread of this process, nanoseconds.
fn process_cpu_ns() -> Option<Nanos> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// The first two fields of a schedstat line: `cpu_ns run_delay_ns timeslices`.
#[must_use]
pub fn parse_schedstat(text: &[u8]) -> Option<(Nanos, Nanos)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace().map(str::parse::<Nanos>);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

/// Whether the other threads of the process count as the waiter's own work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Siblings {
    /// Yes: their CPU time is taken off the waiter's run-queue delay. Right for a device
    /// whose helpers run on the waiter's CPU (vmirq-blk: io_uring's io-wq workers).
    #[default]
    Discount,
    /// No: the other threads are peers of the waiter, not its helpers (vmirq-net: the
    /// other ports' workers, or the client in the same process). With `Discount`, two
    /// polling workers of one process on different CPUs each report the other's whole CPU
    /// time as sibling time, which cancels every wait the gate sees: that is why two
    /// `--poll kvm` port workers and a polling client on 2 CPUs were never stopped.
    Ignore,
}

/// Turns a [`CpuSource`]'s running totals into [`CpuSample`]s, at most one per
/// [`SAMPLE_EVERY_NS`].
pub struct CpuSampler {
    source: Box<dyn CpuSource>,
    last: Option<CpuTotals>,
    next_ns: Nanos,
    siblings: Siblings,
}

impl CpuSampler {
    /// A sampler over `source`.
    #[must_use]
    pub fn new(source: Box<dyn CpuSource>) -> Self {
        Self {
            source,
            last: None,
            next_ns: 0,
            siblings: Siblings::Discount,
        }
    }

    /// The same sampler, treating the process's other threads as `siblings` says.
    #[must_use]
    pub fn with_siblings(mut self, siblings: Siblings) -> Self {
        self.siblings = siblings;
        self
    }

    /// The change since the previous sample if one is due at `now` (the first read only sets
    /// the baseline).
    pub fn sample(&mut self, now: Nanos) -> Option<CpuSample> {
        if now < self.next_ns {
            return None;
        }
        self.next_ns = now.saturating_add(SAMPLE_EVERY_NS);
        let cur = self.source.read()?;
        let prev = self.last.replace(cur)?;
        let ran_ns = cur.ran_ns.saturating_sub(prev.ran_ns);
        Some(CpuSample {
            ran_ns,
            waited_ns: cur.waited_ns.saturating_sub(prev.waited_ns),
            siblings_ns: match self.siblings {
                Siblings::Discount => cur
                    .process_ns
                    .saturating_sub(prev.process_ns)
                    .saturating_sub(ran_ns),
                Siblings::Ignore => 0,
            },
        })
    }
}

impl std::fmt::Debug for CpuSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuSampler")
            .field("last", &self.last)
            .field("next_ns", &self.next_ns)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn parses_schedstat_lines_and_refuses_garbage() {
        assert_eq!(
            parse_schedstat(b"383020276 23395999 194\n"),
            Some((383_020_276, 23_395_999))
        );
        assert_eq!(parse_schedstat(b"12"), None);
        assert_eq!(parse_schedstat(b"a b c"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    #[test]
    fn this_threads_schedstat_is_readable_and_grows() {
        let mut s = ThreadSchedstat::new();
        let Some(CpuTotals { ran_ns: ran0, .. }) = s.read() else {
            // Straight to stderr: the harness hides `eprintln!` of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED this_threads_schedstat_is_readable_and_grows: no /proc/thread-self/schedstat"
            );
            return;
        };
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let t1 = s.read().expect("second read");
        assert!(t1.ran_ns > ran0, "{ran0} -> {}", t1.ran_ns);
        assert!(t1.process_ns >= t1.ran_ns, "{t1:?}");
    }

    struct Counter(Nanos);
    impl CpuSource for Counter {
        fn read(&mut self) -> Option<CpuTotals> {
            self.0 += 1000;
            Some(CpuTotals {
                ran_ns: self.0,
                waited_ns: self.0 / 10,
                process_ns: self.0 * 3 / 2,
            })
        }
    }

    #[test]
    fn sampler_ignoring_siblings_reports_none() {
        let mut s = CpuSampler::new(Box::new(Counter(0))).with_siblings(Siblings::Ignore);
        assert_eq!(s.sample(0), None);
        assert_eq!(
            s.sample(SAMPLE_EVERY_NS),
            Some(CpuSample {
                ran_ns: 1000,
                waited_ns: 100,
                siblings_ns: 0,
            })
        );
    }

    #[test]
    fn sampler_gives_differences_at_most_once_per_period() {
        let mut s = CpuSampler::new(Box::new(Counter(0)));
        assert_eq!(s.sample(0), None); // baseline
        assert_eq!(s.sample(SAMPLE_EVERY_NS - 1), None); // not due
        assert_eq!(
            s.sample(SAMPLE_EVERY_NS),
            Some(CpuSample {
                ran_ns: 1000,
                waited_ns: 100,
                siblings_ns: 500,
            })
        );
    }
}
