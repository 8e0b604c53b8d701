//! `dim-lat`: the latency-adaptive DIM of the netdev 0x18 virtio interrupt-moderation talk —
//! packet heuristics that let short messages bypass moderation while bulk stays moderated.
//!
//! # The rule
//! Completions (received packets) are grouped into *bursts*: a burst goes on while packets
//! arrive less than `gap_us` apart and ends at the first longer gap (notifications do not end
//! a burst). For the current burst the filter keeps packets, bytes and TCP ACK-only packets
//! ([`BurstStats`]). When DIM would hold a packet, the queue notifies at once instead if the
//! burst so far is latency-sensitive:
//! - **ACK share**: more than `ack_pct` % of its packets are TCP ACK-only
//!   (`CompletionMeta::ACK_ONLY`); or
//! - **short message**: it has at most `short_pkts` packets and at most `small_bytes` bytes
//!   per packet.
//!
//! A stream of small packets is one long burst, so it stays moderated; a request/response
//! exchange is a sequence of one- or two-packet bursts, so it is not.
//!
//! # Where the constants come from
//! - `ack_pct = 50`: the talk's "more than 50 % TCP ACK-only packets" (it also names 20 % as
//!   an alternative; `ack_pct=20` selects it).
//! - `small_bytes = 256`: the talk judges short messages by bytes per packet in a burst but
//!   its threshold is not public; 256 B is where Linux mlx4's adaptive RX moderation stops
//!   treating traffic as small packets (it moderates only above an average of 256 B).
//! - `short_pkts = 3`: Linux ixgbe's adaptive ITR switches to its latency mode for fewer than
//!   4 packets in an interrupt interval.
//! - `gap_us = 15`: the burst-detection gap Δ of cinterrupts (OSDI'21) for its slower device
//!   (6 µs for the faster one); a request/response round trip through a software switch is
//!   longer than that, a back-to-back stream far shorter.
//!
//! (Sources as summarized in the project's shared reference notes on moderation.)

use crate::moderation::CompletionMeta;
use crate::{Nanos, NS_PER_US};

/// Counts over one burst of completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstStats {
    /// Packets.
    pub packets: u32,
    /// Bytes.
    pub bytes: u64,
    /// TCP ACK-only packets.
    pub ack_only: u32,
}

impl BurstStats {
    /// Count one completion.
    pub fn add(&mut self, meta: &CompletionMeta) {
        self.packets = self.packets.saturating_add(1);
        self.bytes = self.bytes.saturating_add(u64::from(meta.bytes));
        if meta.has(CompletionMeta::ACK_ONLY) {
            self.ack_only = self.ack_only.saturating_add(1);
        }
    }

    /// Mean bytes per packet (0 for an empty burst).
    #[must_use]
    pub fn bytes_per_packet(&self) -> u64 {
        self.bytes.checked_div(u64::from(self.packets)).unwrap_or(0)
    }

    /// Share of ACK-only packets in percent, rounded down (0 for an empty burst).
    #[must_use]
    pub fn ack_only_pct(&self) -> u32 {
        let pct = (u64::from(self.ack_only) * 100).checked_div(u64::from(self.packets));
        u32::try_from(pct.unwrap_or(0)).unwrap_or(100)
    }

    /// Start a new burst.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Parameters of the latency-adaptive filter (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstFilter {
    /// ACK-only share above which a burst bypasses moderation (%).
    pub ack_pct: u8,
    /// Largest mean packet size of a short-message burst (bytes).
    pub small_bytes: u32,
    /// Most packets in a short-message burst.
    pub short_pkts: u32,
    /// Gap that ends a burst (µs).
    pub gap_us: u32,
}

impl Default for BurstFilter {
    fn default() -> Self {
        Self {
            ack_pct: 50,
            small_bytes: 256,
            short_pkts: 3,
            gap_us: 15,
        }
    }
}

impl BurstFilter {
    /// Whether a burst with these counts should bypass moderation.
    #[must_use]
    pub fn bypass(&self, b: &BurstStats) -> bool {
        let acks = u64::from(b.ack_only) * 100 > u64::from(self.ack_pct) * u64::from(b.packets);
        let short = b.packets <= self.short_pkts
            && b.bytes <= u64::from(self.small_bytes) * u64::from(b.packets);
        b.packets > 0 && (acks || short)
    }
}

/// Tracks the current burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstTracker {
    stats: BurstStats,
    last: Option<Nanos>,
}

impl BurstTracker {
    /// Count a completion at `now`; returns whether its burst bypasses moderation.
    pub fn on_completion(&mut self, f: &BurstFilter, now: Nanos, meta: &CompletionMeta) -> bool {
        let gap_ns = u64::from(f.gap_us) * NS_PER_US;
        if self.last.is_none_or(|t| now.saturating_sub(t) >= gap_ns) {
            self.stats.reset();
        }
        self.last = Some(now);
        self.stats.add(meta);
        f.bypass(&self.stats)
    }

    /// The current burst's counts.
    #[must_use]
    pub fn stats(&self) -> BurstStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::RequestKind;

    fn pkt(bytes: u32) -> CompletionMeta {
        CompletionMeta::new(RequestKind::Read, bytes)
    }

    fn ack() -> CompletionMeta {
        pkt(66).with(CompletionMeta::ACK_ONLY)
    }

    #[test]
    fn ack_share_must_exceed_the_threshold() {
        let f = BurstFilter::default();
        let mut b = BurstStats::default();
        assert!(!f.bypass(&b), "empty burst");
        for _ in 0..10 {
            b.add(&pkt(1500));
            b.add(&ack());
        }
        assert_eq!(b.ack_only_pct(), 50);
        assert!(!f.bypass(&b), "exactly 50 % is not more than 50 %");
        b.add(&ack());
        assert!(f.bypass(&b));
        let twenty = BurstFilter { ack_pct: 20, ..f };
        let mut c = BurstStats::default();
        (0..4).for_each(|_| c.add(&pkt(1500)));
        c.add(&ack());
        assert!(!twenty.bypass(&c));
        c.add(&ack());
        assert!(twenty.bypass(&c));
    }

    #[test]
    fn short_message_bursts_bypass_and_long_or_large_ones_do_not() {
        let f = BurstFilter::default();
        let mut t = BurstTracker::default();
        // Request/response: one 100-byte packet every 40 µs: each its own short burst.
        for i in 0..10 {
            assert!(t.on_completion(&f, i * 40_000, &pkt(100)), "message {i}");
        }
        // A back-to-back stream of 64-byte packets 1 µs apart: short for three packets,
        // then one long burst that stays moderated.
        let mut t = BurstTracker::default();
        let answers: [bool; 6] =
            core::array::from_fn(|i| t.on_completion(&f, 1_000_000 + 1_000 * i as u64, &pkt(64)));
        assert_eq!(answers, [true, true, true, false, false, false]);
        assert_eq!(t.stats().packets, 6);
        // A single full-size frame is not a short message.
        let mut t = BurstTracker::default();
        assert!(!t.on_completion(&f, 0, &pkt(1500)));
        // A gap of exactly gap_us starts a new burst.
        assert!(!t.on_completion(&f, 1_000, &pkt(64)));
        assert!(t.on_completion(&f, 1_000 + 15_000, &pkt(64)));
        assert_eq!(t.stats().packets, 1);
    }
}
