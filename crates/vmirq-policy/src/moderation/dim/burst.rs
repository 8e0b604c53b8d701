//! `dim-lat`: the latency-adaptive DIM of the netdev 0x18 virtio interrupt-moderation talk —
//! packet heuristics that let short messages bypass moderation while bulk stays moderated.
//!
//! # The rule
//! Completions (received packets) are grouped into *bursts*: a burst goes on while packets
//! of its size class arrive less than `gap_us` apart and ends at the first longer gap
//! (notifications do not end a burst). There are two classes: *small* packets (at most
//! `small_bytes`, or TCP ACK-only) and *large* ones, each with its own burst. For a burst the
//! filter keeps packets, bytes and TCP ACK-only packets ([`BurstStats`]). When DIM would hold
//! a packet, the queue notifies at once instead if the packet's burst so far is
//! latency-sensitive:
//! - **ACK share**: more than `ack_pct` % of its packets are TCP ACK-only
//!   (`CompletionMeta::ACK_ONLY`); or
//! - **short message**: it has at most `short_pkts` packets and at most `small_bytes` bytes
//!   per packet.
//!
//! A stream of small packets is one long burst, so it stays moderated; a request/response
//! exchange is a sequence of one- or two-packet bursts, so it is not — also on a queue it
//! shares with a bulk stream, because the bulk stream's large packets make their own burst
//! (the talk does not say how its device delimits bursts; the size classes are vmirq's, so
//! that a short message is not judged by the bulk packets around it). A bypass notification
//! covers the bulk packets held at the time, so a shared queue pays one extra interrupt per
//! short message.
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
//!
//! # Responses on a shared queue
//! A bypass at a response's arrival comes too late on a queue shared with a bulk stream: the
//! response is written behind the bulk packets held since the last interrupt, and the guest
//! reads them first. So a receive queue also hears what its port transmits: a short message
//! sent (a request) releases the held packets at once and stops holding until the response
//! arrives ([`ResponseWait`], `wait=on`; off by default until a quiet run shows it helps).
//!
//! # Overtaking (`overtake=on`, vmirq's, not the talk's)
//! A bypass cannot help a message that is read after the bulk packets in front of it: the
//! driver reads a used ring in order. With `overtake=on` the policy also says which
//! completions the device may keep out of the used ring while it holds their notification
//! ([`BurstFilter::parks`]: the large class). The device writes such a packet into its
//! buffers but publishes its used entry only when the notification goes out; a short
//! message of another flow is published at once, so it lands in the used ring ahead of the
//! parked bulk and the driver reads it first. Which packets share a flow, and the virtio
//! rule that forbids it (VIRTIO_F_IN_ORDER), are the device's to check: the policy only
//! classifies. Without overtaking, holding a notification never delays a published entry.
//!
//! A message can only overtake if it finds a buffer: a held bulk stream fills the ring before
//! its driver is told, and the message then waits for the refill with the bulk. So with
//! `overtake=on` the large class also leaves the last `reserve` receive buffers (default 8)
//! to the small class ([`BurstFilter::reserve_for`]): a bulk packet that would take one of
//! them waits for the refill (the device's backpressure), a short message does not. 8 is a
//! choice, not a published number: a few short messages in flight (netperf TCP_RR keeps
//! one per connection) at a cost of 8 buffers of the bulk's ring.

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
    /// Whether a short message the port transmits makes its receive queue wait for the
    /// response ([`ResponseWait`], `wait=on`). Off by default: on the loaded development
    /// machine it did not lower the messages' latency and cost interrupts (see
    /// `crates/vmirq-net/results/README.md`); a quiet run compares both.
    pub response_wait: bool,
    /// Whether the device may publish a short message ahead of the held bulk packets of
    /// other flows (`overtake=on`, see the module documentation).
    pub overtake: bool,
    /// With `overtake=on`: receive buffers a large-class packet leaves to the small class
    /// (`reserve=N`, see the module documentation).
    pub reserve: u16,
}

impl Default for BurstFilter {
    fn default() -> Self {
        Self {
            ack_pct: 50,
            small_bytes: 256,
            short_pkts: 3,
            gap_us: 15,
            response_wait: false,
            overtake: false,
            reserve: 8,
        }
    }
}

impl BurstFilter {
    /// Whether a packet belongs to the small class (at most `small_bytes`, or ACK-only).
    #[must_use]
    pub fn is_small(&self, meta: &CompletionMeta) -> bool {
        meta.bytes <= self.small_bytes || meta.has(CompletionMeta::ACK_ONLY)
    }

    /// Whether the device should keep a completion with `meta` out of the used ring while
    /// its notification is held (`overtake=on` and the large class), so that short messages
    /// can be published ahead of it.
    #[must_use]
    pub fn parks(&self, meta: &CompletionMeta) -> bool {
        self.overtake && !self.is_small(meta)
    }

    /// Receive buffers the device must leave free when it writes a completion with `meta`:
    /// [`Self::reserve`] for the large class with `overtake=on`, 0 otherwise.
    #[must_use]
    pub fn reserve_for(&self, meta: &CompletionMeta) -> u16 {
        if self.parks(meta) {
            self.reserve
        } else {
            0
        }
    }

    /// Whether a burst with these counts should bypass moderation.
    #[must_use]
    pub fn bypass(&self, b: &BurstStats) -> bool {
        let acks = u64::from(b.ack_only) * 100 > u64::from(self.ack_pct) * u64::from(b.packets);
        let short = b.packets <= self.short_pkts
            && b.bytes <= u64::from(self.small_bytes) * u64::from(b.packets);
        b.packets > 0 && (acks || short)
    }
}

/// One size class's current burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ClassBurst {
    stats: BurstStats,
    last: Option<Nanos>,
}

impl ClassBurst {
    fn add(&mut self, gap_ns: Nanos, now: Nanos, meta: &CompletionMeta) {
        if self.last.is_none_or(|t| now.saturating_sub(t) >= gap_ns) {
            self.stats.reset();
        }
        self.last = Some(now);
        self.stats.add(meta);
    }
}

/// Tracks the current burst of each size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstTracker {
    small: ClassBurst,
    large: ClassBurst,
}

/// The response a receive queue expects after its driver sent a short message.
///
/// # The rule
/// The device sees both directions of a port. When the driver transmits a short-message
/// burst (the same test as on receive: at most `short_pkts` packets of at most
/// `small_bytes`, not TCP ACK-only — a bulk receiver's ACKs are not requests), its receive
/// queue *expects a response*: the completions held at that moment are released at once and
/// nothing is held until a small packet arrives (the response, which ends the wait) or one
/// moderation period has passed.
///
/// Why: on a queue shared with a bulk stream the response is written behind the bulk frames
/// held since the last interrupt, and the driver reads all of them before it (virtio's used
/// ring is in order), so a bypass at the response's arrival comes too late. A request/response
/// exchange (netperf TCP_RR) answers every request after one round trip: holding bulk
/// frames only outside that window keeps the response from queueing behind them, which is
/// what the guest's own busy polling for a response (Linux `SO_BUSY_POLL`, `napi_busy_loop`)
/// achieves with a spinning CPU instead.
///
/// # Where the constants come from
/// - The short-message test and its constants are [`BurstFilter`]'s.
/// - The wait ends after one moderation period (the profile's timer in force): a request
///   whose response never comes costs one period of unmoderated completions, no more than
///   the period a hold could have saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseWait {
    sent: ClassBurst,
    until: Option<Nanos>,
}

impl ResponseWait {
    /// The driver transmitted `meta` at `now`; returns whether it starts (or extends) a wait
    /// of `period_ns` for a response.
    pub fn on_transmit(
        &mut self,
        f: &BurstFilter,
        now: Nanos,
        meta: &CompletionMeta,
        period_ns: Nanos,
    ) -> bool {
        if !f.response_wait || !f.is_small(meta) || meta.has(CompletionMeta::ACK_ONLY) {
            return false;
        }
        self.sent.add(u64::from(f.gap_us) * NS_PER_US, now, meta);
        let request = f.bypass(&self.sent.stats);
        if request {
            self.until = Some(now.saturating_add(period_ns));
        }
        request
    }

    /// A completion arrived at `now`; returns whether a response is still expected (the
    /// completion is then not held). A small packet is the response and ends the wait.
    pub fn on_completion(&mut self, f: &BurstFilter, now: Nanos, meta: &CompletionMeta) -> bool {
        let Some(until) = self.until else {
            return false;
        };
        if now >= until || f.is_small(meta) {
            self.until = None;
        }
        now < until
    }

    /// Whether a response is expected at `now`.
    #[must_use]
    pub fn waiting(&self, now: Nanos) -> bool {
        self.until.is_some_and(|u| now < u)
    }
}

impl BurstTracker {
    /// Count a completion at `now`; returns whether its burst bypasses moderation.
    pub fn on_completion(&mut self, f: &BurstFilter, now: Nanos, meta: &CompletionMeta) -> bool {
        let gap_ns = u64::from(f.gap_us) * NS_PER_US;
        let small = f.is_small(meta);
        let burst = if small {
            &mut self.small
        } else {
            &mut self.large
        };
        burst.add(gap_ns, now, meta);
        f.bypass(&burst.stats)
    }

    /// The current burst's counts of the small (`true`) or large class.
    #[must_use]
    pub fn stats(&self, small: bool) -> BurstStats {
        if small {
            self.small.stats
        } else {
            self.large.stats
        }
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
        assert_eq!(t.stats(true).packets, 6);
        // A single full-size frame is not a short message.
        let mut t = BurstTracker::default();
        assert!(!t.on_completion(&f, 0, &pkt(1500)));
        // Four small packets 1 µs apart: the fourth ends the short message; a gap of exactly
        // gap_us after it starts a new burst.
        let small: [bool; 4] =
            core::array::from_fn(|i| t.on_completion(&f, 1_000 * (i as u64 + 1), &pkt(64)));
        assert_eq!(small, [true, true, true, false]);
        assert!(t.on_completion(&f, 4_000 + 15_000, &pkt(64)));
        assert_eq!(t.stats(true).packets, 1);
        assert_eq!(t.stats(false).packets, 1);
    }

    #[test]
    fn a_short_transmitted_message_waits_for_its_response_for_one_period() {
        let f = BurstFilter {
            response_wait: true,
            ..BurstFilter::default()
        };
        let mut w = ResponseWait::default();
        let period = 64_000;
        // Bulk sent, and a bulk receiver's ACKs, are not requests.
        assert!(!w.on_transmit(&f, 0, &pkt(1_500), period));
        assert!(!w.on_transmit(&f, 0, &ack(), period));
        assert!(!w.waiting(0));
        // A request: the wait lasts until a small packet arrives...
        assert!(w.on_transmit(&f, 100_000, &pkt(64), period));
        assert!(
            w.on_completion(&f, 110_000, &pkt(1_500)),
            "bulk while waiting"
        );
        assert!(
            w.on_completion(&f, 120_000, &pkt(64)),
            "the response itself"
        );
        assert!(!w.waiting(120_001));
        assert!(!w.on_completion(&f, 121_000, &pkt(1_500)));
        // ... or one period.
        assert!(w.on_transmit(&f, 300_000, &pkt(64), period));
        assert!(w.on_completion(&f, 300_000 + period - 1, &pkt(1_500)));
        assert!(!w.on_completion(&f, 300_000 + period, &pkt(1_500)));
        // A stream of small packets is one long burst: after `short_pkts` it is no request.
        let mut s = ResponseWait::default();
        let sent: [bool; 5] = core::array::from_fn(|i| {
            s.on_transmit(&f, 1_000_000 + 1_000 * i as u64, &pkt(64), period)
        });
        assert_eq!(sent, [true, true, true, false, false]);
        // `wait=off`: the filter on received packets alone.
        let off = BurstFilter {
            response_wait: false,
            ..f
        };
        let mut o = ResponseWait::default();
        assert!(!o.on_transmit(&off, 0, &pkt(64), period));
        assert!(!o.on_completion(&off, 1, &pkt(1_500)));
    }

    #[test]
    fn only_large_packets_park_and_only_with_overtake_on() {
        let on = BurstFilter {
            overtake: true,
            ..BurstFilter::default()
        };
        assert!(on.parks(&pkt(1_514)));
        assert!(on.parks(&pkt(257)));
        assert!(!on.parks(&pkt(256)), "a short message");
        assert!(!on.parks(&pkt(64)));
        let big_ack = pkt(1_514).with(CompletionMeta::ACK_ONLY);
        assert!(!on.parks(&big_ack), "ACK-only is the small class");
        let off = BurstFilter::default();
        assert!(!off.parks(&pkt(1_514)), "overtake is off by default");
        assert_eq!(on.reserve_for(&pkt(1_514)), 8);
        assert_eq!(
            on.reserve_for(&pkt(64)),
            0,
            "the small class uses the reserve"
        );
        assert_eq!(
            off.reserve_for(&pkt(1_514)),
            0,
            "no reserve without overtaking"
        );
    }

    #[test]
    fn short_messages_bypass_on_a_queue_shared_with_bulk() {
        let f = BurstFilter::default();
        let mut t = BurstTracker::default();
        // 9000-byte frames every µs, a 100-byte message every 50 µs in between.
        for us in 0..1_000u64 {
            let now = us * 1_000;
            assert!(!t.on_completion(&f, now, &pkt(9_000)), "bulk at {us} us");
            if us % 50 == 25 {
                assert!(
                    t.on_completion(&f, now + 500, &pkt(100)),
                    "message at {us} us"
                );
            }
        }
        assert_eq!(t.stats(false).packets, 1_000);
        assert_eq!(t.stats(true).packets, 1);
        // Without the size classes the message would be judged with the bulk burst.
        let mut one = BurstStats::default();
        (0..25).for_each(|_| one.add(&pkt(9_000)));
        one.add(&pkt(100));
        assert!(!f.bypass(&one));
    }
}
