//! Where a short message's latency goes on a queue it shares with a bulk stream: for every
//! response the client reads, how many frames it read from that port before it since it
//! last found that port's receive ring empty (the backlog the response was written behind:
//! a moderated stream held back and then released with the message's interrupt shows up
//! here), and how long after the client's last wakeup it reached the response.

use hdrhistogram::{CreationError, Histogram};

/// Counts of the message path (one per client).
#[derive(Debug, Clone)]
pub struct MsgPath {
    /// Frames read from each port since its receive ring was last found empty.
    backlog: Vec<u64>,
    /// When it last woke (ns since the run started).
    woke_ns: u64,
    /// Frames read from its port ahead of each response, since the ring was last empty.
    pub ahead: Histogram<u64>,
    /// Time from the last wakeup to reading each response (ns).
    pub wake_to_read: Histogram<u64>,
}

impl MsgPath {
    /// For a client with `ports` ports.
    ///
    /// # Errors
    /// The histograms cannot be created (not with these constant bounds).
    pub fn new(ports: usize) -> Result<Self, CreationError> {
        Ok(Self {
            backlog: vec![0; ports],
            woke_ns: 0,
            ahead: Histogram::new_with_bounds(1, 1 << 32, 3)?,
            wake_to_read: Histogram::new_with_bounds(1, 10_000_000_000, 3)?,
        })
    }

    /// The client returned from a sleep at `now_ns`.
    pub fn woke(&mut self, now_ns: u64) {
        self.woke_ns = now_ns;
    }

    /// Frames read from `port` since its ring was last empty (the position of the next one).
    #[must_use]
    pub fn position(&self, port: usize) -> u64 {
        self.backlog.get(port).copied().unwrap_or(0)
    }

    /// A receive pass read `n` frames from `port`; `drained`: it stopped because the ring
    /// was empty (not at its budget).
    pub fn read(&mut self, port: usize, n: usize, drained: bool) {
        if let Some(c) = self.backlog.get_mut(port) {
            *c = if drained { 0 } else { *c + n as u64 };
        }
    }

    /// A response was read at `now_ns` with `ahead` frames of its port read before it since
    /// the ring was last empty (recorded + 1: the histograms start at 1).
    pub fn response(&mut self, ahead: u64, now_ns: u64) {
        let _ = self.ahead.record(ahead + 1);
        let _ = self
            .wake_to_read
            .record(now_ns.saturating_sub(self.woke_ns).max(1));
    }

    /// Quantile `q` of the frames read ahead of a response (`None` before any response).
    #[must_use]
    pub fn ahead_quantile(&self, q: f64) -> Option<u64> {
        (!self.ahead.is_empty()).then(|| self.ahead.value_at_quantile(q).saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::MsgPath;

    #[test]
    fn counts_the_backlog_since_the_ring_was_last_empty() {
        let mut m = MsgPath::new(2).expect("histograms");
        m.read(0, 5, false);
        m.read(1, 7, true);
        assert_eq!((m.position(0), m.position(1)), (5, 0));
        m.read(0, 64, false);
        assert_eq!(m.position(0), 69);
        m.woke(1_000);
        // The response is the 4th frame of a pass that drains port 0's ring.
        m.response(m.position(0) + 3, 21_000);
        m.read(0, 10, true);
        assert_eq!(m.position(0), 0);
        assert_eq!(m.ahead_quantile(0.5), Some(72));
        let lag = m.wake_to_read.value_at_quantile(0.5);
        assert!(m.wake_to_read.equivalent(lag, 20_000), "{lag}");
        assert_eq!(m.position(5), 0, "no such port");
    }
}
