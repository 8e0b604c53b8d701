//! The control loop: one wakeup per period, net_dim's 64-interrupt windows, a walk towards
//! fewer interrupts at equal throughput, and the one-policy form equal to eager ticking.

extern crate std;

use super::*;
use crate::moderation::{CompletionMeta, RequestKind};
use std::vec::Vec;

const MS: Nanos = NS_PER_MS;

#[test]
fn one_wakeup_per_period_without_drift_and_late_callers_reschedule() {
    let mut l = DimLoop::new(DimLoopConfig::default(), 5);
    assert_eq!(l.next_wakeup(), 5 + 10 * MS);
    // One second of on-time wakeups: 100 (the talk's ~100 host interrupts/s per device).
    for _ in 0..100 {
        let at = l.next_wakeup();
        let _ = l.on_period(at + 3_000, QueueCounters::default()); // 3 µs of timer slack
    }
    assert_eq!(l.wakeups(), 100);
    assert_eq!(l.next_wakeup(), 5 + 1_010 * MS, "slack must not accumulate");
    // A caller 35 ms late: the next wakeup is one period after it.
    let late = l.next_wakeup() + 35 * MS;
    let _ = l.on_period(late, QueueCounters::default());
    assert_eq!(l.next_wakeup(), late + 10 * MS);
    let slow = DimLoop::new(
        DimLoopConfig {
            period_ms: u32::MAX,
            ..DimLoopConfig::default()
        },
        0,
    );
    assert_eq!(slow.config().period_ms, DIM_LOOP_PERIOD_MS_MAX);
}

#[test]
fn decides_only_after_64_interrupts_in_a_window() {
    let mut l = DimLoop::new(DimLoopConfig::default(), 0);
    let mut c = QueueCounters::default();
    let mut first_change = None;
    for period in 1..=20u64 {
        c.packets += 1_000;
        c.bytes += 1_500_000;
        c.interrupts += 10;
        let at = l.next_wakeup();
        if let Some(cfg) = l.on_period(at, c) {
            first_change = Some((period, cfg));
            break;
        }
    }
    // The first wakeup opens the window; 64 interrupts later (7 periods of 10) net_dim decides:
    // traffic appeared, it leaves parking and steps left from the default profile 1 to 0.
    let (period, cfg) = first_change.unwrap_or_else(|| panic!("no decision in 20 periods"));
    assert_eq!(period, 8);
    assert_eq!((cfg.usecs, cfg.frames), (1, 256));
    assert_eq!(l.index(), 0);
}

/// A device at a fixed packet rate whose interrupt count follows the programmed profile
/// (EQE: at most one interrupt per `usecs`, at least one per `frames` packets).
fn interrupts_per_period(cfg: CountConfig, packets: u64, period_us: u64) -> u64 {
    let by_timer = period_us / u64::from(cfg.usecs.max(1));
    let by_count = packets / u64::from(cfg.frames.max(1));
    by_timer.max(by_count).min(packets)
}

#[test]
fn walks_to_fewer_interrupts_at_equal_throughput() {
    let mut l = DimLoop::new(DimLoopConfig::default(), 0);
    let mut c = QueueCounters::default();
    let packets = 10_000; // 1 Mpps in 10 ms
    let start_irqs = interrupts_per_period(l.profile(), packets, 10_000);
    let mut last = start_irqs;
    for _ in 0..200 {
        last = interrupts_per_period(l.profile(), packets, 10_000);
        c.packets += packets;
        c.bytes += packets * 1_500;
        c.interrupts += last;
        let at = l.next_wakeup();
        let _ = l.on_period(at, c);
    }
    // Bandwidth and packet rate are the same at every profile, so only the interrupt rate
    // decides: net_dim must end on the most moderated profile with at least 3x fewer
    // interrupts than the default profile gives.
    assert_eq!(l.index(), 4);
    assert!(
        start_irqs >= 3 * last,
        "default profile {start_irqs}/period, final {last}/period"
    );
    assert_eq!(l.wakeups(), 200);
}

fn complete(bytes: u32) -> Event {
    Event::Complete(CompletionMeta::new(RequestKind::Read, bytes))
}

/// Feed `gaps` (ns between completions) to `q`, obeying holds; with `eager`, also deliver a
/// timer at every period boundary. Returns the notifications.
fn drive(q: &mut DimLoopQueue, gaps: &[u64], eager: bool) -> u64 {
    let (mut now, mut notes, mut timer) = (0u64, 0u64, None::<Nanos>);
    let mut boundary = 10 * MS;
    for gap in gaps {
        let next = now + gap;
        loop {
            let due_timer = timer.filter(|t| *t <= next);
            let due_boundary = Some(boundary).filter(|b| eager && *b <= next);
            let at = match (due_timer, due_boundary) {
                (Some(t), Some(b)) => t.min(b),
                (Some(t), None) => t,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if Some(at) == due_boundary {
                boundary += 10 * MS;
            }
            if Some(at) == due_timer {
                timer = None;
            }
            match q.on_event(at, Event::Timer) {
                Decision::Notify => notes += 1,
                Decision::Hold { deadline } => timer = Some(deadline),
                Decision::Idle => {}
            }
        }
        now = next;
        q.on_event(now, Event::Submit);
        match q.on_event(now, complete(1_500)) {
            Decision::Notify => notes += 1,
            Decision::Hold { deadline } => {
                assert!(deadline >= now && deadline <= q.control_loop().next_wakeup());
                timer = Some(deadline);
            }
            Decision::Idle => {}
        }
    }
    notes
}

#[test]
fn replaying_missed_wakeups_equals_eager_ticking() {
    // Bursts of traffic at 1 µs with idle stretches of up to a second between them.
    let mut gaps = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..60 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        gaps.extend(std::iter::repeat_n(
            1_000,
            usize::try_from(x % 4_000).unwrap_or(0),
        ));
        gaps.push(x % 1_000_000_000);
    }
    let mut lazy = DimLoopQueue::new(DimLoopConfig::default());
    let mut eager = lazy;
    let n_lazy = drive(&mut lazy, &gaps, false);
    let n_eager = drive(&mut eager, &gaps, true);
    let (a, b) = (lazy.control_loop(), eager.control_loop());
    // The lazy queue has not woken for the stretch after its last event; bring it level.
    assert!(a.wakeups() <= b.wakeups());
    assert_eq!(lazy.counters().packets, eager.counters().packets);
    assert_eq!(n_lazy, n_eager);
    assert_eq!(lazy.counters().interrupts, n_lazy);
    let _ = lazy.on_event(b.next_wakeup() - 1, Event::Timer);
    let _ = eager.on_event(b.next_wakeup() - 1, Event::Timer);
    assert_eq!(lazy.control_loop(), eager.control_loop());
    assert!(eager.control_loop().wakeups() > 100);
}

#[test]
fn a_loop_started_late_counts_no_wakeups_before_its_start() {
    // A backend's CLOCK_MONOTONIC is hours past 0: the time before the queue existed is no
    // missed wakeups.
    let start = 3_600_000 * MS;
    let mut m = crate::moderation::Moderation::DimLoop(DimLoopQueue::new(DimLoopConfig::default()));
    m.start_at(start);
    let l = m.control_loop().expect("dim-loop has a control loop");
    assert_eq!((l.wakeups(), l.next_wakeup()), (0, start + 10 * MS));
    let _ = m.on_event(start + 35 * MS, Event::Submit);
    assert_eq!(m.control_loop().map(DimLoop::wakeups), Some(3));
    // Without the start, the first event replays or skips an hour of periods.
    let mut from_zero = DimLoopQueue::new(DimLoopConfig::default());
    let _ = from_zero.on_event(start + 35 * MS, Event::Submit);
    assert!(from_zero.control_loop().wakeups() > 300_000);
    // The other policies have no loop and ignore the start.
    let none = crate::moderation::Moderation::None(crate::moderation::NoModeration::default());
    assert!(none.control_loop().is_none());
}

/// The hold of a steady stream under `dim-loop` follows the programmed profile in EQE mode:
/// its timer starts at the first packet held after a notification and is not restarted by
/// the packets after it, so each hold ends within `usecs` of its first packet (or at
/// `frames` packets, or at a loop wakeup, which only ends it sooner). Checked at every
/// profile the loop walks through on a 1.4 Mpps stream (the 1514-byte stream of the
/// moderation runs), including the profiles whose timer ends a hold before `frames` do.
#[test]
fn a_steady_stream_is_released_by_the_profile_timer_from_the_first_held_packet() {
    let mut q = DimLoopQueue::new(DimLoopConfig::default());
    let gap = 700; // ns between packets
    let (mut now, mut timer) = (0u64, None::<Nanos>);
    let mut first: Option<Nanos> = None;
    let (mut by_timer, mut holds) = (0u64, 0u64);
    let mut released = |at: Nanos, first: &mut Option<Nanos>, cfg: CountConfig| {
        let f = first.take().expect("a hold was open");
        let bound = u64::from(cfg.usecs) * 1_000;
        assert!(at - f <= bound, "held {} ns > {bound} ns at {at}", at - f);
        holds += 1;
    };
    for _ in 0..300_000u64 {
        let next = now + gap;
        while let Some(t) = timer.filter(|t| *t <= next) {
            timer = None;
            let cfg = q.control_loop().profile();
            match q.on_event(t, Event::Timer) {
                Decision::Notify => {
                    by_timer += 1;
                    released(t, &mut first, cfg);
                }
                Decision::Hold { deadline } => timer = Some(deadline),
                Decision::Idle => {}
            }
        }
        now = next;
        let cfg = q.control_loop().profile();
        match q.on_event(now, complete(1_514)) {
            Decision::Notify => {
                if first.is_some() {
                    released(now, &mut first, cfg);
                }
            }
            Decision::Hold { deadline } => {
                first.get_or_insert(now);
                // The deadline is the first held packet's, whatever came since.
                let f = first.unwrap_or(now);
                let cap = f + u64::from(cfg.usecs) * 1_000;
                assert!(deadline <= cap, "deadline {deadline} past {cap}");
                timer = Some(deadline);
            }
            Decision::Idle => {}
        }
    }
    // The loop walked to the profiles whose timer ends holds (usecs < frames x gap).
    assert!(
        by_timer > 1_000,
        "{by_timer} of {holds} holds ended by the timer"
    );
    assert!(q.control_loop().index() >= 2, "{:?}", q.knob());
}
