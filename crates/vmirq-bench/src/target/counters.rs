//! The backend's own counters: `vmirq serve` prints one line per queue when it exits
//! (`queue 0: requests=N kicks=N notifications=N suppressed=N held=N ...`). The bench reads
//! them from the backend's log after each run to see, from the device side, how many
//! notifications the policy asked for, how many EVENT_IDX suppressed, and how kick waits
//! ended. They cover the whole connection (warm-up included), so only ratios per request are
//! reported.

use serde::{Deserialize, Serialize};

/// Totals over all queues of the counters the bench reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackendCounters {
    /// Requests completed.
    pub requests: u64,
    /// Kick eventfd wakeups.
    pub kicks: u64,
    /// Call-eventfd writes (notifications sent).
    pub notifications: u64,
    /// Notifications the policy asked for that EVENT_IDX suppressed.
    pub suppressed: u64,
    /// Completions the policy held back.
    pub held: u64,
    /// Hold-timer expiries.
    pub timer_fires: u64,
    /// Kick waits that ended while polling.
    pub poll_hits: u64,
    /// Kick waits where polling found nothing and the worker slept.
    pub poll_misses: u64,
    /// Kick polls the contention gate refused or cut short.
    pub poll_contended: u64,
}

impl BackendCounters {
    /// Parse the exit summary in `log`; `None` if it has no `queue N:` line.
    #[must_use]
    pub fn parse(log: &str) -> Option<Self> {
        let mut total = Self::default();
        let mut found = false;
        for line in log.lines().filter(|l| l.trim_start().starts_with("queue ")) {
            let Some((_, fields)) = line.split_once(':') else {
                continue;
            };
            found = true;
            for (key, value) in fields
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
            {
                let Ok(v) = value.parse::<u64>() else {
                    continue;
                };
                let slot = match key {
                    "requests" => &mut total.requests,
                    "kicks" => &mut total.kicks,
                    "notifications" => &mut total.notifications,
                    "suppressed" => &mut total.suppressed,
                    "held" => &mut total.held,
                    "timer_fires" => &mut total.timer_fires,
                    "poll_hits" => &mut total.poll_hits,
                    "poll_misses" => &mut total.poll_misses,
                    "poll_contended" => &mut total.poll_contended,
                    _ => continue,
                };
                *slot = slot.saturating_add(v);
            }
        }
        found.then_some(total)
    }

    /// Every counter divided by the requests completed (`None` if there were none).
    #[must_use]
    pub fn per_request(&self) -> Option<BackendPerIo> {
        if self.requests == 0 {
            return None;
        }
        let f = crate::stats::as_f64;
        let per = |x: u64| f(x) / f(self.requests);
        Some(BackendPerIo {
            kicks: per(self.kicks),
            notifications: per(self.notifications),
            suppressed: per(self.suppressed),
            held: per(self.held),
            timer_fires: per(self.timer_fires),
            poll_hits: per(self.poll_hits),
            poll_misses: per(self.poll_misses),
            poll_contended: per(self.poll_contended),
        })
    }
}

/// Backend counters per completed request (whole connection, warm-up included).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BackendPerIo {
    /// Kicks received per request.
    pub kicks: f64,
    /// Notifications sent per request.
    pub notifications: f64,
    /// Policy notifications suppressed by EVENT_IDX per request.
    pub suppressed: f64,
    /// Completions held by the policy per request.
    pub held: f64,
    /// Hold-timer expiries per request.
    pub timer_fires: f64,
    /// Kick waits ended by polling per request.
    pub poll_hits: f64,
    /// Kick waits that fell asleep per request.
    pub poll_misses: f64,
    /// Kick polls refused or cut short by the contention gate per request (0 in reports
    /// written before the gate existed).
    #[serde(default)]
    pub poll_contended: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_exit_summary_of_every_queue() {
        let log =
            "WARN something\nqueue 0: requests=100 read_bytes=4096 kicks=40 notifications=30 \
                   suppressed=70 held=5 timer_fires=2 poll_hits=1 poll_misses=39 poll_contended=8 \
                   errors=0\n\
                   queue 1: requests=100 kicks=10 notifications=x\n";
        let c = BackendCounters::parse(log).expect("summary");
        assert_eq!(c.requests, 200);
        assert_eq!(c.kicks, 50);
        assert_eq!(c.notifications, 30);
        assert_eq!((c.suppressed, c.held, c.timer_fires), (70, 5, 2));
        assert_eq!((c.poll_hits, c.poll_misses, c.poll_contended), (1, 39, 8));
        let per = c.per_request().expect("ratios");
        assert!((per.kicks - 0.25).abs() < 1e-12);
        assert!((per.suppressed - 0.35).abs() < 1e-12);
        assert_eq!(BackendCounters::parse("no summary here"), None);
        assert_eq!(BackendCounters::default().per_request(), None);
    }
}
