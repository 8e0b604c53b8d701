//! Where a short message's latency goes on a queue it shares with a bulk stream: for every
//! response the client reads, how many frames it read from that port before it since it
//! last found that port's receive ring empty (the backlog the response was written behind:
//! a moderated stream held back and then released with the message's interrupt shows up
//! here), how long after the client's last wakeup it reached the response, and how many
//! frames the client read from all its ports while the message was in flight (from sending
//! the request to reading the response: the client's time on other queues' frames, which a
//! one-CPU guest spends before it can answer or read the message). When another thread
//! answers, the round trip's halves too ([`super::halves`]).

use super::halves::Halves;
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
    /// Frames read from every port so far.
    read_total: u64,
    /// (sequence, `read_total` when it was sent) of the requests in flight, oldest first.
    marks: Vec<(u64, u64)>,
    /// Frames read from every port between sending each request and reading its response
    /// (recorded + 1).
    pub in_flight: Histogram<u64>,
    /// The round trip's halves, when another thread answers.
    pub halves: Halves,
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
            read_total: 0,
            marks: Vec::new(),
            in_flight: Histogram::new_with_bounds(1, 1 << 32, 3)?,
            halves: Halves::new()?,
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

    /// Frames read from every port so far (the index of the next one read).
    #[must_use]
    pub fn read_total(&self) -> u64 {
        self.read_total
    }

    /// A receive pass read `n` frames from `port`; `drained`: it stopped because the ring
    /// was empty (not at its budget).
    pub fn read(&mut self, port: usize, n: usize, drained: bool) {
        if let Some(c) = self.backlog.get_mut(port) {
            *c = if drained { 0 } else { *c + n as u64 };
        }
        self.read_total += n as u64;
    }

    /// Request `seq` was sent (after the frames read so far).
    pub fn request(&mut self, seq: u64) {
        self.marks.push((seq, self.read_total));
    }

    /// The response to request `seq` was read at `now_ns` as the client's frame number
    /// `index` (of all ports), with `ahead` frames of its port read before it since the
    /// ring was last empty (recorded + 1: the histograms start at 1).
    pub fn response(&mut self, seq: u64, index: u64, ahead: u64, now_ns: u64) {
        let _ = self.ahead.record(ahead + 1);
        let _ = self
            .wake_to_read
            .record(now_ns.saturating_sub(self.woke_ns).max(1));
        if let Some(&(_, mark)) = self.marks.iter().find(|&&(s, _)| s == seq) {
            let _ = self.in_flight.record(index.saturating_sub(mark) + 1);
        }
        // Responses come back in order on one path: an earlier request still marked lost
        // its response (a dropped frame), so its mark goes too and the list stays as long
        // as the requests in flight.
        self.marks.retain(|&(s, _)| s > seq);
    }

    /// Forget request `seq` (its response came outside the measured window).
    pub fn unmark(&mut self, seq: u64) {
        self.marks.retain(|&(s, _)| s != seq);
    }

    /// Quantile `q` of the frames read ahead of a response (`None` before any response).
    #[must_use]
    pub fn ahead_quantile(&self, q: f64) -> Option<u64> {
        (!self.ahead.is_empty()).then(|| self.ahead.value_at_quantile(q).saturating_sub(1))
    }

    /// Quantile `q` of the frames read from every port while a message was in flight
    /// (`None` before any response).
    #[must_use]
    pub fn in_flight_quantile(&self, q: f64) -> Option<u64> {
        (!self.in_flight.is_empty()).then(|| self.in_flight.value_at_quantile(q).saturating_sub(1))
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
        // Request 7 goes out after 76 frames; 3 more arrive on port 1 before the response,
        // the 4th frame of a pass that drains port 0's ring.
        assert_eq!(m.read_total(), 76);
        m.request(7);
        m.read(1, 3, true);
        m.response(7, m.read_total() + 3, m.position(0) + 3, 21_000);
        m.read(0, 10, true);
        assert_eq!(m.position(0), 0);
        assert_eq!(m.ahead_quantile(0.5), Some(72));
        assert_eq!(m.in_flight_quantile(0.5), Some(6));
        // A response to no known request counts no frames in flight.
        m.response(8, 1_000, 0, 22_000);
        assert_eq!(m.in_flight.len(), 1);
        let lag = m.wake_to_read.value_at_quantile(0.5);
        assert!(m.wake_to_read.equivalent(lag, 20_000), "{lag}");
        assert_eq!(m.position(5), 0, "no such port");
    }

    #[test]
    fn a_request_whose_response_was_lost_is_forgotten_at_a_later_response() {
        let mut m = MsgPath::new(1).expect("histograms");
        for seq in 1..=1_000 {
            m.request(seq);
        }
        m.read(0, 4, true);
        m.request(1_001);
        // Requests 1..=1000 lost their responses; 1001's comes back.
        m.response(1_001, m.read_total(), 0, 5_000);
        assert_eq!(m.in_flight_quantile(0.5), Some(0));
        assert!(m.marks.is_empty(), "{} marks left", m.marks.len());
    }
}
