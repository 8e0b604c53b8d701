//! `dim`: dynamic interrupt moderation (Linux net_dim / rdma_dim) driving `count`, plus the
//! latency-adaptive variant from the netdev 0x18 virtio interrupt-moderation talk.
//!
//! The queue runs [`Count`] with the current DIM profile (timer, frames). Each notification is
//! a DIM *event*; every 64 events the DIM state machine ([`NetDim`] or [`RdmaDim`]) compares
//! rates with the previous window and may move to another profile, which is applied to the
//! count policy at once (what a driver's DIM work function does by reprogramming the device).
//!
//! The latency filter ([`LatencyFilter`]) is a high-pass filter on completion metadata:
//! latency-sensitive completions (FLUSH, urgent, TCP ACK-only, small synchronous requests, and
//! a completion that leaves nothing in flight — queue depth 1) bypass moderation when they make
//! up at least `share_pct` percent of the completions held in the current burst.
//!
//! Two network forms build on the same net_dim state machine: [`control_loop`] (`dim-loop`,
//! DIM run by the hypervisor every `period_ms` on the device's counters) and [`burst`]
//! (`dim-lat`, the talk's packet heuristics: ACK-only share and bytes per packet in a burst).

pub mod burst;
pub mod control_loop;
mod net;
mod profiles;
mod rdma;
mod stats;

pub use burst::{BurstFilter, BurstStats, BurstTracker, ResponseWait};
pub use control_loop::{DimLoop, DimLoopConfig, DimLoopQueue, QueueCounters};
pub use net::{NetDim, TuneState};
pub use profiles::{net_table, DimDirection, DimMode, DimProfile, NET_DEFAULT_INDEX, RDMA};
pub use rdma::RdmaDim;
pub use stats::{
    calc_stats, calc_stats_with, DimSample, DimStats, EventCount, Verdict, DIM_NEVENTS,
};

use super::{
    CompletionMeta, Count, CountConfig, Decision, Event, Knob, Moderator, Pending, RequestKind,
};
use crate::Nanos;

/// Which DIM algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DimVariant {
    /// net_dim: bandwidth, packet rate, interrupt rate; parking and tired logic.
    #[default]
    Net,
    /// rdma_dim: completion rate and completions per event; no parking.
    Rdma,
}

/// The latency-adaptive high-pass filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyFilter {
    /// Whether the filter is on.
    pub enabled: bool,
    /// Share of latency-sensitive completions in the held burst that triggers a bypass (%).
    pub share_pct: u8,
    /// Largest synchronous request counted as "small", in bytes.
    pub small_bytes: u32,
}

impl Default for LatencyFilter {
    fn default() -> Self {
        Self {
            enabled: false,
            share_pct: 50,
            small_bytes: 16 * 1024,
        }
    }
}

impl LatencyFilter {
    /// Whether this completion is latency-sensitive. `cif_after` is what is still in flight.
    #[must_use]
    pub fn sensitive(&self, meta: &CompletionMeta, cif_after: u32) -> bool {
        meta.kind == RequestKind::Flush
            || meta.has(CompletionMeta::URGENT | CompletionMeta::ACK_ONLY)
            || (meta.has(CompletionMeta::SYNC) && meta.bytes <= self.small_bytes)
            || cif_after == 0
    }
}

/// Parameters of [`Dim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DimConfig {
    /// net_dim or rdma_dim.
    pub variant: DimVariant,
    /// EQE or CQE timer mode (net_dim; rdma_dim uses EQE).
    pub mode: DimMode,
    /// RX or TX table (net_dim).
    pub dir: DimDirection,
    /// The latency-adaptive filter.
    pub latency: LatencyFilter,
    /// The packet-burst heuristics of `dim-lat` (none for `dim`).
    pub burst: Option<BurstFilter>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Net(NetDim),
    Rdma(RdmaDim),
}

/// DIM-driven count/timer moderation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim {
    cfg: DimConfig,
    table: &'static [DimProfile],
    engine: Engine,
    count: Count,
    counters: DimSample,
    burst_sensitive: u32,
    tracker: BurstTracker,
    response: ResponseWait,
    /// The last `Notify` came from a response wait alone: not a DIM event.
    uncounted: bool,
}

impl Dim {
    /// A DIM policy with these parameters.
    #[must_use]
    pub fn new(cfg: DimConfig) -> Self {
        let (table, engine, index, timer): (&'static [DimProfile], _, u8, _) = match cfg.variant {
            DimVariant::Net => {
                let t = net_table(cfg.dir, cfg.mode);
                (
                    t,
                    Engine::Net(NetDim::new(5, NET_DEFAULT_INDEX)),
                    NET_DEFAULT_INDEX,
                    cfg.mode.timer(),
                )
            }
            DimVariant::Rdma => (
                &RDMA,
                Engine::Rdma(RdmaDim::new(9)),
                0,
                DimMode::Eqe.timer(),
            ),
        };
        let count = Count::new(Self::count_config(table, index, timer));
        Self {
            cfg,
            table,
            engine,
            count,
            counters: DimSample::default(),
            burst_sensitive: 0,
            tracker: BurstTracker::default(),
            response: ResponseWait::default(),
            uncounted: false,
        }
    }

    fn count_config(table: &[DimProfile], index: u8, timer: super::TimerStart) -> CountConfig {
        let p = table
            .get(usize::from(index))
            .copied()
            .unwrap_or(DimProfile {
                usecs: 0,
                frames: 1,
            });
        CountConfig {
            usecs: u32::from(p.usecs),
            frames: u32::from(p.frames),
            timer,
        }
    }

    /// The parameters it was built with.
    #[must_use]
    pub fn config(&self) -> &DimConfig {
        &self.cfg
    }

    /// The current profile index.
    #[must_use]
    pub fn index(&self) -> u8 {
        match &self.engine {
            Engine::Net(d) => d.index(),
            Engine::Rdma(d) => d.index(),
        }
    }

    /// A notification went out at `now`: count a DIM event and maybe change profile.
    fn on_notified(&mut self, now: Nanos) {
        self.burst_sensitive = 0;
        self.counters.events = self.counters.events.wrapping_add(1);
        self.counters.time = now;
        let changed = match &mut self.engine {
            Engine::Net(d) => d.on_sample(self.counters),
            Engine::Rdma(d) => d.on_sample(self.counters),
        };
        if let Some(index) = changed {
            let timer = self.count.config().timer;
            // Nothing is held right after a notification, so this cannot notify again.
            let _ = self
                .count
                .reconfigure(now, Self::count_config(self.table, index, timer));
        }
    }

    fn on_complete(&mut self, now: Nanos, meta: CompletionMeta) -> Decision {
        self.counters.pkts = self.counters.pkts.wrapping_add(1);
        self.counters.bytes = self.counters.bytes.wrapping_add(meta.bytes);
        self.counters.comps = self.counters.comps.wrapping_add(1);
        let mut decision = self.count.on_event(now, Event::Complete(meta));
        if let Some(f) = self.cfg.burst {
            let bypass = self.tracker.on_completion(&f, now, &meta);
            let expected = self.response.on_completion(&f, now, &meta);
            if (bypass || expected) && decision != Decision::Notify {
                self.count.covered();
                decision = Decision::Notify;
                // Not a DIM event: see `Dim::on_transmit`.
                self.uncounted = !bypass;
            }
        }
        let filter = self.cfg.latency;
        if filter.enabled && filter.sensitive(&meta, self.count.in_flight()) {
            self.burst_sensitive += 1;
            let burst = self.count.held().max(1);
            let share_met = u64::from(self.burst_sensitive) * 100
                >= u64::from(filter.share_pct) * u64::from(burst);
            if decision != Decision::Notify && share_met {
                self.count.covered();
                decision = Decision::Notify;
            }
        }
        decision
    }
}

impl Dim {
    /// `dim-lat` on a receive queue: the same port's driver transmitted `meta` at `now`.
    /// A short message starts a wait for its response ([`ResponseWait`]): `Some(Notify)`
    /// when completions were held (they go out now, ahead of the response), `None` when
    /// there is nothing to do (also for `dim` without the packet heuristics).
    pub fn on_transmit(&mut self, now: Nanos, meta: CompletionMeta) -> Option<Decision> {
        let f = self.cfg.burst?;
        let period_ns = u64::from(self.count.config().usecs) * crate::NS_PER_US;
        if !self.response.on_transmit(&f, now, &meta, period_ns) || self.count.held() == 0 {
            return None;
        }
        // Not a DIM event: net_dim judges a profile by the interrupts it causes, and these
        // come from the requests whatever the profile (counting them made DIM walk to
        // lower profiles that did not reduce them, and hold the stream less outside the
        // waits).
        self.count.covered();
        Some(Decision::Notify)
    }

    /// Whether a response is expected on this queue at `now` (`dim-lat`).
    #[must_use]
    pub fn awaiting_response(&self, now: Nanos) -> bool {
        self.response.waiting(now)
    }
}

impl Moderator for Dim {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        let decision = match event {
            Event::Submit | Event::Timer => self.count.on_event(now, event),
            Event::Complete(meta) => self.on_complete(now, meta),
        };
        if decision == Decision::Notify && !core::mem::take(&mut self.uncounted) {
            self.on_notified(now);
        }
        decision
    }
    fn pending(&self) -> &Pending {
        self.count.pending()
    }
    fn max_hold_ns(&self) -> Nanos {
        max_hold_over(self.table, self.count.config().timer)
    }
    fn knob(&self) -> Knob {
        let c = self.count.config();
        Knob::Profile {
            index: self.index(),
            usecs: u16::try_from(c.usecs).unwrap_or(u16::MAX),
            frames: u16::try_from(c.frames).unwrap_or(u16::MAX),
        }
    }
}

/// The longest a `count` policy can hold under any profile of `table`: whatever profile DIM
/// (in the data path or as a control loop) moves to, no hold lasts longer.
pub(crate) fn max_hold_over(table: &[DimProfile], timer: super::TimerStart) -> Nanos {
    table
        .iter()
        .map(|p| {
            Count::new(CountConfig {
                usecs: u32::from(p.usecs),
                frames: u32::from(p.frames),
                timer,
            })
            .max_hold_ns()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(bytes: u32) -> Event {
        Event::Complete(CompletionMeta::new(RequestKind::Read, bytes))
    }

    /// Run a closed loop at a fixed completion gap, honouring timers; returns notifications.
    fn run(d: &mut Dim, qd: u32, gap: Nanos, n: u32) -> u32 {
        let mut t = 0;
        for _ in 0..qd {
            d.on_event(t, Event::Submit);
        }
        let (mut notes, mut timer) = (0, None);
        for _ in 0..n {
            t += gap;
            if let Some(deadline) = timer.take().filter(|dl| *dl <= t) {
                if d.on_event(deadline, Event::Timer) == Decision::Notify {
                    notes += 1;
                }
            }
            match d.on_event(t, complete(1500)) {
                Decision::Notify => notes += 1,
                Decision::Hold { deadline } => timer = Some(deadline),
                Decision::Idle => {}
            }
            d.on_event(t, Event::Submit);
            assert!(d.index() < 5);
        }
        notes
    }

    #[test]
    fn moderates_a_steady_stream_and_keeps_index_in_range() {
        let mut d = Dim::new(DimConfig::default());
        let notes = run(&mut d, 256, 1_000, 200_000);
        // Profile 1 (8 µs) or above at one completion per µs: far fewer than one per completion.
        assert!(notes < 200_000 / 4, "{notes}");
        assert!(matches!(d.knob(), Knob::Profile { .. }));
    }

    /// Under a steady stream bandwidth and packet rate do not change with the profile, so
    /// net_dim's only signal is the interrupt rate: it must walk right to the most moderated
    /// RX profile (256 us, as Linux's net_dim does for a bulk receiver) and stay there, at
    /// the 200 kpps of a paced stream and at the 1.4 Mpps of an unpaced one.
    #[test]
    fn climbs_to_the_most_moderated_profile_under_a_steady_stream() {
        for gap in [5_000, 700] {
            let mut d = Dim::new(DimConfig::default());
            assert_eq!(d.index(), NET_DEFAULT_INDEX);
            let n = 400_000;
            let notes = run(&mut d, 256, gap, n);
            assert_eq!(d.index(), 4, "gap {gap} ns: {:?}", d.knob());
            // At 200 kpps the 256 us timer batches ~51 packets; at 1.4 Mpps the 256-frame
            // count ends holds first.
            assert!(
                u64::from(notes) * 20 < u64::from(n),
                "gap {gap}: {notes} notifications"
            );
        }
    }

    #[test]
    fn latency_filter_bypasses_flush_and_qd1() {
        let cfg = DimConfig {
            latency: LatencyFilter {
                enabled: true,
                ..LatencyFilter::default()
            },
            ..DimConfig::default()
        };
        let mut d = Dim::new(cfg);
        for _ in 0..4 {
            d.on_event(0, Event::Submit);
        }
        // Three bulk reads are held; a FLUSH completes: 1 of 4 sensitive < 50 %: still held.
        for t in 1..=3 {
            assert!(matches!(
                d.on_event(t, complete(65_536)),
                Decision::Hold { .. }
            ));
        }
        let flush = Event::Complete(CompletionMeta::new(RequestKind::Flush, 0));
        // The flush is sensitive, but it is 1 of 4 held completions (25 % < 50 %): the burst
        // is bulk, so it stays moderated (held until the profile-1 timer, 8 µs).
        let d4 = d.on_event(4, flush);
        assert_eq!(
            d4,
            Decision::Hold {
                deadline: 1 + 8_000
            }
        );
        // At QD 1 every completion is sensitive and bypasses.
        let mut q = Dim::new(cfg);
        for t in 0..10 {
            q.on_event(t * 100, Event::Submit);
            assert_eq!(q.on_event(t * 100 + 50, complete(4096)), Decision::Notify);
        }
        // Without the filter QD 1 completions are held by the timer.
        let mut plain = Dim::new(DimConfig::default());
        plain.on_event(0, Event::Submit);
        assert!(matches!(
            plain.on_event(50, complete(4096)),
            Decision::Hold { .. }
        ));
    }

    /// One receive queue carries a bulk stream (1500-byte frames every 1.25 us, 800 kpps) and
    /// the responses to requests its driver sends every 250 us (a response 50 us after its
    /// request). Counted at each response: the bulk frames held ahead of it (the guest reads
    /// them before the response). With the response wait nothing is held when a response
    /// arrives, and the bulk still notifies far less than once per frame.
    #[test]
    fn dim_lat_releases_bulk_before_an_expected_response_and_holds_it_otherwise() {
        let cfg = DimConfig {
            burst: Some(BurstFilter {
                response_wait: true,
                ..BurstFilter::default()
            }),
            ..DimConfig::default()
        };
        // The executor: a notification (1) cancels the timer, a hold arms it.
        fn act(dec: Decision, timer: &mut Option<Nanos>) -> u64 {
            *timer = match dec {
                Decision::Hold { deadline } => Some(deadline),
                Decision::Notify | Decision::Idle => None,
            };
            u64::from(dec == Decision::Notify)
        }
        const CYCLES: usize = 2_000;
        let run = |announce: bool| {
            let mut d = Dim::new(cfg);
            let (mut notes, mut timer, mut frames) = (0u64, None::<Nanos>, 0u64);
            let mut ahead = [0u32; CYCLES];
            for tick in 0..(CYCLES as u64 * 200) {
                let t = tick * 1_250;
                if let Some(dl) = timer.filter(|dl| *dl <= t) {
                    notes += act(d.on_event(dl, Event::Timer), &mut timer);
                }
                if announce && tick % 200 == 7 {
                    let req = CompletionMeta::new(RequestKind::Write, 64);
                    if let Some(dec) = d.on_transmit(t, req) {
                        notes += act(dec, &mut timer);
                    }
                }
                d.on_event(t, Event::Submit);
                frames += 1;
                notes += act(d.on_event(t, complete(1_500)), &mut timer);
                if tick % 200 == 47 {
                    // The response, 40 ticks (50 us) after the request.
                    ahead[(tick / 200) as usize] = d.held();
                    d.on_event(t + 100, Event::Submit);
                    let dec = d.on_event(t + 100, complete(64));
                    assert_eq!(dec, Decision::Notify, "response at {t}");
                    notes += act(dec, &mut timer);
                }
            }
            ahead.sort_unstable();
            // The waits do not walk DIM off the most moderated profile of a steady stream.
            assert_eq!(d.index(), 4, "announce {announce}: {:?}", d.knob());
            (ahead[CYCLES / 2], notes, frames)
        };
        let (ahead_plain, notes_plain, frames) = run(false);
        let (ahead, notes, _) = run(true);
        assert!(
            ahead_plain > 20,
            "without the wait: {ahead_plain} held ahead"
        );
        assert_eq!(
            ahead, 0,
            "with the wait nothing is held ahead of a response"
        );
        // Within a wait every completion asks for a notification (41 frames of 200 per
        // cycle, plus the release at the request), as without moderation: EVENT_IDX then
        // suppresses those the driver does not want while it is busy. Outside the waits
        // DIM holds as before.
        assert!(notes > notes_plain, "{notes} vs {notes_plain}");
        assert!(
            notes <= notes_plain + frames * 42 / 200,
            "{notes} vs {notes_plain} for {frames} frames"
        );
    }

    /// `dim-lat` on two queues: request/response messages bypass moderation one by one, a
    /// bulk stream on the other queue keeps DIM's moderation (the talk's mixed traffic).
    #[test]
    fn dim_lat_bypasses_ping_pong_and_keeps_bulk_moderated() {
        let cfg = DimConfig {
            burst: Some(BurstFilter::default()),
            ..DimConfig::default()
        };
        let mut rr = Dim::new(cfg);
        let mut plain = Dim::new(DimConfig::default());
        for i in 0..1_000u64 {
            let t = i * 40_000;
            rr.on_event(t, Event::Submit);
            assert_eq!(
                rr.on_event(t + 1, complete(100)),
                Decision::Notify,
                "msg {i}"
            );
            // (the previous message's hold timer has long expired)
            plain.on_event(t, Event::Timer);
            plain.on_event(t, Event::Submit);
            assert!(matches!(
                plain.on_event(t + 1, complete(100)),
                Decision::Hold { .. }
            ));
        }
        let mut bulk = Dim::new(cfg);
        let n = 100_000;
        let notes = run(&mut bulk, 256, 1_000, n);
        assert!(
            notes * 2 <= n,
            "bulk notified {notes} times for {n} packets"
        );
        // The same on one queue: 1500-byte frames every µs with a 100-byte message every
        // 50 µs. Every message notifies at once; the bulk still takes far fewer interrupts.
        let mut mix = Dim::new(cfg);
        let (mut notes, mut timer, mut packets) = (0u32, None::<Nanos>, 0u32);
        for us in 0..100_000u64 {
            let t = us * 1_000;
            if let Some(dl) = timer.filter(|dl| *dl <= t) {
                timer = None;
                match mix.on_event(dl, Event::Timer) {
                    Decision::Notify => notes += 1,
                    Decision::Hold { deadline } => timer = Some(deadline),
                    Decision::Idle => {}
                }
            }
            let mut feed = |at: Nanos, bytes: u32, must_notify: bool| {
                mix.on_event(at, Event::Submit);
                packets += 1;
                match mix.on_event(at, complete(bytes)) {
                    Decision::Notify => notes += 1,
                    Decision::Hold { deadline } => {
                        assert!(!must_notify, "message at {at} held");
                        timer = Some(deadline);
                    }
                    Decision::Idle => {}
                }
            };
            feed(t, 1_500, false);
            if us % 50 == 25 {
                feed(t + 500, 100, true);
            }
        }
        assert!(
            notes * 2 <= packets,
            "{notes} notifications for {packets} packets"
        );
        // ACK-only packets bypass even inside a long burst once they are the majority.
        let mut acks = Dim::new(cfg);
        acks.on_event(0, Event::Submit);
        let ack = CompletionMeta::new(RequestKind::Read, 1_500).with(CompletionMeta::ACK_ONLY);
        let mut notified = 0;
        for t in 0..100u64 {
            acks.on_event(t * 1_000, Event::Submit);
            if acks.on_event(t * 1_000 + 1, Event::Complete(ack)) == Decision::Notify {
                notified += 1;
            }
        }
        assert_eq!(notified, 100);
    }
}
