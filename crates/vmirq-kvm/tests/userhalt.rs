//! Real-KVM tests of the userspace halt path. Skipped, with the reason printed, when
//! `/dev/kvm` is unusable.

mod common;

use std::io::Write as _;
use std::time::Duration;
use vmirq_kvm::gaps::Gaps;
use vmirq_kvm::host::TscClock;
use vmirq_kvm::userhalt::{parse_wait, run_halt_cell, HaltCell, Poller};
use vmirq_kvm::wake::Placement;

fn run_gaps(spec: &str, gaps: Gaps, (warmup, samples): (u32, u32)) -> HaltCell {
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let poller = Poller::User(parse_wait(spec).expect("valid spec"));
    let c =
        run_halt_cell(poller, gaps, Placement::Other, (warmup, samples), clock).expect("cell runs");
    eprintln!("{c:?}");
    c
}

fn run(spec: &str) -> HaltCell {
    run_gaps(spec, Gaps::constant_ns(50_000), (10, 80))
}

#[test]
fn never_policy_sleeps_on_every_halt_and_injection_reaches_the_handler() {
    let Some(_serial) = common::kvm_or_skip("never_policy_sleeps_on_every_halt") else {
        return;
    };
    let c = run("never");
    assert_eq!(
        c.samples, 80,
        "every KVM_INTERRUPT injection reached the guest handler"
    );
    // Counted over the measured phase only, like KVM's stats for kernel cells: one halt per
    // measured wake, none of the 10 warm-up halts nor the final one.
    assert_eq!(
        c.halts, 80,
        "one HLT exit per measured wake, warm-up excluded"
    );
    assert_eq!((c.polled, c.poll_ns, c.max_window_ns), (0, 0, 0));
}

#[test]
fn fixed_policy_polls_within_its_window_and_catches_wakes() {
    let Some(_serial) = common::kvm_or_skip("fixed_policy_polls_within_its_window") else {
        return;
    };
    let c = run("fixed:ns=400000");
    assert_eq!(c.samples, 80);
    assert_eq!(c.max_window_ns, 400_000, "the policy's window was used");
    assert!(
        c.polled > 0,
        "a 400 us window catches some 50 us-interval wakes"
    );
    // A poll loop checks its deadline on every iteration; only preemption of the vCPU thread
    // (other builds on this 2-CPU machine) can overrun it, so the bound is loose.
    assert!(
        c.max_overrun_ns < 20_000_000,
        "poll overran its window by {} ns",
        c.max_overrun_ns
    );
    assert!(
        c.poll_ns <= c.halts * (400_000 + c.max_overrun_ns),
        "total polling bounded by windows"
    );
    assert_eq!(c.halts, 80, "measured phase only");
    assert_eq!(
        c.poll_success_ns + c.poll_fail_ns,
        c.poll_ns,
        "success and fail parts add up"
    );
    assert!(
        c.handler_to_send_ns >= 50_000,
        "the sender waited the interval"
    );
}

#[test]
fn adaptive_policies_run_on_the_halt_path() {
    let Some(_serial) = common::kvm_or_skip("adaptive_policies_run_on_the_halt_path") else {
        return;
    };
    for spec in [
        "kvm:max_ns=200000",
        "guest-haltpoll:max_ns=200000",
        "histogram:max_ns=200000",
    ] {
        let c = run(spec);
        assert_eq!(c.samples, 80, "{spec}");
        assert!(
            c.max_window_ns <= 200_000,
            "{spec} stays within max_ns: {}",
            c.max_window_ns
        );
    }
}

/// 70 % of gaps 20 µs, 30 % 1000 µs: a window between the two catches the short ones only,
/// and a policy that learns the gaps need not poll through the long ones.
#[test]
fn bimodal_gaps_a_window_between_the_modes_catches_the_short_share() {
    let Some(_serial) = common::kvm_or_skip("bimodal_gaps_a_window_between_the_modes") else {
        return;
    };
    let gaps = Gaps {
        spec: "bimodal:short_us=20,long_us=1000,short_pct=70"
            .parse()
            .expect("valid gap spec"),
        seed: 11,
    };
    let (warmup, samples) = (40u32, 200u32);
    // The halts of the measured phase are the gaps of sends warmup..warmup+samples.
    let mut draws = gaps.draws();
    let short = (0..warmup + samples)
        .map(|_| draws.next_ns())
        .skip(warmup as usize)
        .filter(|&g| g == 20_000)
        .count() as u64;
    assert!(
        (110..=170).contains(&short),
        "seed 11 draws {short} short gaps"
    );

    let fixed = run_gaps("fixed:ns=65536", gaps, (warmup, samples));
    assert_eq!((fixed.samples, fixed.halts), (200, 200));
    assert_eq!(fixed.gaps, gaps.spec);
    assert_eq!(fixed.interval_ns, 314_000, "interval_ns is the mean gap");
    // A 65 µs poll cannot outlast a 1000 µs gap, and catches a 20 µs one unless the vCPU
    // thread is preempted (other builds share this 2-CPU host): bounds in counts, loose below.
    assert!(
        fixed.polled <= short + 5,
        "caught {} halts with {short} short gaps",
        fixed.polled
    );
    assert!(
        fixed.polled >= short / 2,
        "caught only {} of {short} short gaps",
        fixed.polled
    );

    let wide = run_gaps("fixed:ns=200000", gaps, (warmup, samples));
    let hist = run_gaps("histogram:max_ns=200000", gaps, (warmup, samples));
    assert_eq!(hist.halts, 200);
    // fixed 200 µs polls the full window before each of ~60 long gaps (~12 ms); histogram
    // learns a window just above the short gaps (~13 µs of polling per short one, ~2 ms).
    assert!(
        hist.max_window_ns < 200_000,
        "histogram never needs the full window here: {}",
        hist.max_window_ns
    );
    assert!(
        hist.poll_ns < wide.poll_ns,
        "histogram polled {} ns, fixed 200 us {} ns",
        hist.poll_ns,
        wide.poll_ns
    );
    assert!(
        hist.polled >= short / 2,
        "histogram caught only {} of {short} short gaps",
        hist.polled
    );
}

/// A burst of 500 gaps of 20 µs, then an idle phase of 4000 gaps of 1000 µs: `histogram`
/// polls through the burst and stops polling early in the idle phase (runs of polls that ran
/// out make it forget the burst); without `forget` it takes about half the phase, and a fixed
/// window keeps polling (and failing) on every idle halt. Checked in counts: how many polls
/// ran out, how many halts were caught.
#[test]
fn phased_gaps_histogram_stops_polling_in_the_idle_phase() {
    let Some(_serial) = common::kvm_or_skip("phased_gaps_histogram_stops_polling") else {
        return;
    };
    let gaps = Gaps {
        spec: "phased:short_us=20,long_us=1000,short_n=500,long_n=4000"
            .parse()
            .expect("valid gap spec"),
        seed: 1,
    };
    // Measured: gaps 100..4500, i.e. the last 400 of the burst and the whole idle phase.
    let (warmup, samples) = (100u32, 4400u32);
    let (short, long) = (400u64, 4000u64);

    let fixed = run_gaps("fixed:ns=32768", gaps, (warmup, samples));
    assert_eq!((fixed.samples, fixed.halts), (4400, 4400));
    // A fixed window polls on every halt; the idle-phase polls run out. A vCPU thread the
    // host preempts for most of a 1 ms gap starts its 32 µs poll late and can catch that
    // gap's wakeup (3,998 of 4,400 once under load: two caught), so 1 % may be caught.
    assert!(
        fixed.attempted - fixed.polled >= long * 99 / 100,
        "fixed 32 768 ns: {} of {} polls ran out",
        fixed.attempted - fixed.polled,
        fixed.attempted
    );

    let hist = run_gaps("histogram:max_ns=200000", gaps, (warmup, samples));
    assert_eq!((hist.samples, hist.halts), (4400, 4400));
    // Runs of 8 polls that ran out halve the counts (`forget=8`, the default): the policy
    // stops polling ~80 halts into the idle phase (model), not after the whole phase.
    // Preemption can only make it miss short gaps.
    let wasted = hist.attempted - hist.polled;
    assert!(
        wasted <= long / 10,
        "histogram: {wasted} of {long} idle-phase halts polled in vain"
    );
    assert!(
        hist.polled >= short / 2 && hist.polled <= short + 5,
        "histogram caught {} halts with {short} short gaps",
        hist.polled
    );
    // Every wasted fixed poll lasts at least its 32 768 ns window (131 ms in all); histogram
    // polls at most ~400 × 32 768 ns plus the caught short gaps (~21 ms).
    assert!(
        hist.poll_ns < fixed.poll_ns,
        "histogram polled {} ns, fixed 32 768 ns {} ns",
        hist.poll_ns,
        fixed.poll_ns
    );

    // Without `forget` only the decaying counts let go of the burst: ~1800-2300 idle halts on
    // a quiet machine (3021 seen on a loaded one, where preempted halts shift the counts), so
    // the bounds say what the mechanism guarantees: it lets go well after `forget=8` does
    // and well before the end of the idle phase, where a fixed window never lets go.
    let slow = run_gaps("histogram:max_ns=200000,forget=0", gaps, (warmup, samples));
    // The decay needs halts of the scheduled lengths: on a host that preempts the vCPU
    // thread for much of the run (wake p90 2.5 ms and 15 s of wall time with a test suite
    // and a build on both CPUs, against 80 µs and 4.4 s quiet), the halts it observes are
    // not the schedule's, and it never let go (3976 of 4000). Say so loudly rather than
    // judge the decay on them.
    if slow.lat_ns.p90 > 500_000 {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED phased_gaps_histogram_stops_polling (forget=0 part only): host overloaded, \
             wake p90 {} ns",
            slow.lat_ns.p90
        );
        return;
    }
    let slow_wasted = slow.attempted - slow.polled;
    assert!(
        slow_wasted >= long / 4 && slow_wasted <= long * 7 / 8,
        "histogram without forget: {slow_wasted} of {long} idle-phase polls ran out"
    );
}
