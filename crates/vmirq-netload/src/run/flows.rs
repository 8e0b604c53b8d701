//! Traffic state of each flow, as pure functions of the time passed in: what a bulk stream
//! may send now (pacing), which requests a request/response flow may start, and what the
//! receiving side saw (sequence gaps, reordering, round-trip times).

use crate::frame::{Kind, Probe};

const NS_PER_S: u128 = 1_000_000_000;

/// A stream of bulk frames from one port to another.
#[derive(Debug, Clone)]
pub struct BulkFlow {
    /// Flow id in the frames.
    pub flow: u8,
    /// Sending port.
    pub tx: usize,
    /// Receiving port.
    pub rx: usize,
    /// Frame length.
    pub len: u32,
    rate_pps: Option<u64>,
    /// Sending allowed (false once the measured window ends).
    pub active: bool,
    /// Frames sent.
    pub sent: u64,
    /// Frames received.
    pub received: u64,
    /// Frames that arrived with a lower sequence number than one seen before.
    pub out_of_order: u64,
    next_expected: u64,
    pace_base_ns: u64,
    pace_base_sent: u64,
    /// Frames a paced sender skipped because it fell behind by more than `slack`.
    pub pace_slips: u64,
    slack: u64,
}

impl BulkFlow {
    /// A flow starting at time 0; a paced sender may run `slack` frames behind before it
    /// gives up on them (a stalled client does not turn into a burst afterwards).
    #[must_use]
    pub fn new(
        flow: u8,
        tx: usize,
        rx: usize,
        len: u32,
        rate_pps: Option<u64>,
        slack: u64,
    ) -> Self {
        Self {
            flow,
            tx,
            rx,
            len,
            rate_pps,
            active: true,
            sent: 0,
            received: 0,
            out_of_order: 0,
            next_expected: 0,
            pace_base_ns: 0,
            pace_base_sent: 0,
            pace_slips: 0,
            slack: slack.max(1),
        }
    }

    /// Frames that may be sent at `now_ns`, at most `cap`.
    pub fn due(&mut self, now_ns: u64, cap: u64) -> u64 {
        if !self.active {
            return 0;
        }
        let Some(rate) = self.rate_pps else {
            return cap;
        };
        let elapsed = u128::from(now_ns.saturating_sub(self.pace_base_ns));
        let target = u64::try_from(elapsed * u128::from(rate) / NS_PER_S).unwrap_or(u64::MAX);
        let due = (self.pace_base_sent + target).saturating_sub(self.sent);
        if due > self.slack {
            self.pace_slips += due - self.slack;
            self.pace_base_ns = now_ns;
            self.pace_base_sent = self.sent;
            return self.slack.min(cap);
        }
        due.min(cap)
    }

    /// True if a frame is due at `now_ns` (without the side effects of [`Self::due`]).
    #[must_use]
    pub fn wants(&self, now_ns: u64) -> bool {
        self.active && self.next_due_ns().is_none_or(|t| t <= now_ns)
    }

    /// When the next frame is due (paced flows only).
    #[must_use]
    pub fn next_due_ns(&self) -> Option<u64> {
        let rate = self.rate_pps?;
        if !self.active {
            return None;
        }
        let frames = u128::from(self.sent - self.pace_base_sent + 1);
        let after = (frames * NS_PER_S).div_ceil(u128::from(rate));
        Some(
            self.pace_base_ns
                .saturating_add(u64::try_from(after).unwrap_or(u64::MAX)),
        )
    }

    /// The probe of the next frame (call when it was queued).
    pub fn next_probe(&mut self, now_ns: u64) -> Probe {
        let p = Probe {
            kind: Kind::Bulk,
            flow: self.flow,
            seq: self.sent,
            t_ns: now_ns,
            len: self.len,
        };
        self.sent += 1;
        p
    }

    /// Record a received frame of this flow.
    pub fn on_receive(&mut self, p: &Probe) {
        self.received += 1;
        if p.seq < self.next_expected {
            self.out_of_order += 1;
        } else {
            self.next_expected = p.seq + 1;
        }
    }

    /// Frames sent and not (yet) received.
    #[must_use]
    pub const fn missing(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

/// Request/response transactions between a client port and a server port.
#[derive(Debug, Clone)]
pub struct RrFlow {
    /// Flow id in the frames.
    pub flow: u8,
    /// Port that sends requests.
    pub client: usize,
    /// Port that answers.
    pub server: usize,
    /// Request and response length.
    pub len: u32,
    depth: usize,
    interval_ns: u64,
    /// Starting new transactions allowed.
    pub active: bool,
    next_seq: u64,
    /// (sequence, send time) of transactions in flight.
    outstanding: Vec<(u64, u64)>,
    next_request_ns: u64,
    /// Transactions completed.
    pub completed: u64,
    /// Responses that matched no outstanding request (or carried another send time).
    pub unexpected: u64,
}

impl RrFlow {
    /// A flow with `depth` transactions in flight and `interval_ns` between a response and
    /// the next request (0: at once).
    #[must_use]
    pub fn new(
        flow: u8,
        client: usize,
        server: usize,
        len: u32,
        depth: u32,
        interval_ns: u64,
    ) -> Self {
        Self {
            flow,
            client,
            server,
            len,
            depth: usize::try_from(depth.max(1)).unwrap_or(1),
            interval_ns,
            active: true,
            next_seq: 0,
            outstanding: Vec::new(),
            next_request_ns: 0,
            completed: 0,
            unexpected: 0,
        }
    }

    /// Requests that may start at `now_ns`.
    #[must_use]
    pub fn due(&self, now_ns: u64) -> usize {
        if !self.active || now_ns < self.next_request_ns {
            return 0;
        }
        let free = self.depth - self.outstanding.len().min(self.depth);
        if self.interval_ns > 0 {
            free.min(1)
        } else {
            free
        }
    }

    /// When the next request may start, if one can.
    #[must_use]
    pub fn next_due_ns(&self) -> Option<u64> {
        (self.active && self.outstanding.len() < self.depth).then_some(self.next_request_ns)
    }

    /// The probe of a new request sent at `now_ns` (call when it was queued).
    pub fn next_request(&mut self, now_ns: u64) -> Probe {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.outstanding.push((seq, now_ns));
        if self.interval_ns > 0 {
            // One at a time: the next waits for this response.
            self.next_request_ns = u64::MAX;
        }
        Probe {
            kind: Kind::Request,
            flow: self.flow,
            seq,
            t_ns: now_ns,
            len: self.len,
        }
    }

    /// A response arrived at `now_ns`; returns the round-trip time if it answers an
    /// outstanding request.
    pub fn on_response(&mut self, p: &Probe, now_ns: u64) -> Option<u64> {
        let Some(i) = self
            .outstanding
            .iter()
            .position(|&(seq, t)| seq == p.seq && t == p.t_ns)
        else {
            self.unexpected += 1;
            return None;
        };
        self.outstanding.swap_remove(i);
        self.completed += 1;
        if self.interval_ns > 0 {
            self.next_request_ns = now_ns.saturating_add(self.interval_ns);
        }
        Some(now_ns.saturating_sub(p.t_ns))
    }

    /// Transactions in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }
}

/// The response a server sends for `request`.
#[must_use]
pub const fn response_to(request: &Probe) -> Probe {
    Probe {
        kind: Kind::Response,
        ..*request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_stream_sends_at_its_rate_and_slips_when_stalled() {
        let mut f = BulkFlow::new(0, 0, 1, 64, Some(1_000_000), 64);
        // 1 Mpps: 10 frames due after 10 us.
        assert_eq!(f.due(10_000, 1000), 10);
        for _ in 0..10 {
            f.next_probe(10_000);
        }
        assert_eq!(f.due(10_000, 1000), 0);
        assert_eq!(f.next_due_ns(), Some(11_000));
        // Stalled for 1 ms: 990 due, only 64 allowed; the rest are slips.
        assert_eq!(f.due(1_000_000, 1000), 64);
        assert_eq!(f.pace_slips, 990 - 64);
        // Capped by the ring.
        let mut g = BulkFlow::new(0, 0, 1, 64, None, 64);
        assert_eq!(g.due(5, 17), 17);
        g.active = false;
        assert_eq!(g.due(5, 17), 0);
    }

    #[test]
    fn receiver_counts_gaps_and_reordering() {
        let mut f = BulkFlow::new(0, 0, 1, 64, None, 1);
        let probes: Vec<Probe> = (0..5).map(|_| f.next_probe(0)).collect();
        for i in [0, 2, 1, 4] {
            f.on_receive(&probes[i]);
        }
        assert_eq!(f.received, 4);
        assert_eq!(f.out_of_order, 1);
        assert_eq!(f.missing(), 1);
    }

    #[test]
    fn request_response_tracks_depth_interval_and_rtt() {
        let mut r = RrFlow::new(1, 0, 1, 64, 2, 0);
        assert_eq!(r.due(0), 2);
        let a = r.next_request(100);
        let b = r.next_request(150);
        assert_eq!(r.due(200), 0);
        assert_eq!(r.on_response(&response_to(&b), 400), Some(250));
        assert_eq!(r.on_response(&response_to(&b), 401), None, "answered twice");
        assert_eq!(r.unexpected, 1);
        assert_eq!(r.due(401), 1);
        let mut forged = response_to(&a);
        forged.t_ns = 1;
        assert_eq!(r.on_response(&forged, 500), None);
        assert_eq!(r.on_response(&response_to(&a), 500), Some(400));
        assert_eq!(r.completed, 2);
        // With an interval: one at a time, the next one interval after the response.
        let mut m = RrFlow::new(2, 2, 3, 64, 4, 1_000);
        assert_eq!(m.due(0), 1);
        let p = m.next_request(0);
        assert_eq!(m.due(5_000), 0);
        assert_eq!(m.on_response(&response_to(&p), 300), Some(300));
        assert_eq!(m.due(1_000), 0);
        assert_eq!(m.next_due_ns(), Some(1_300));
        assert_eq!(m.due(1_300), 1);
    }
}
