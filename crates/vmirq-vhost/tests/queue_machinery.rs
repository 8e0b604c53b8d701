//! The shared queue machinery driven directly against the mock guest: what the notifier
//! signals (policy decisions folded per batch, EVENT_IDX and NO_INTERRUPT on top, held
//! completions and their timer, the resume timer) and what the kick poller does.

use std::sync::Arc;
use virtio_queue::QueueT;
use vmirq_policy::moderation::{CompletionMeta, Decision, RequestKind};
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::counters::{Counters, QueueCounters, QueueSnapshot};
use vmirq_vhost::cpustat::CpuSampler;
use vmirq_vhost::mock_guest::{Desc, MockGuest, SimulatedCpu};
use vmirq_vhost::notify::{QueueNotifier, Submissions};
use vmirq_vhost::poll::{has_work, KickPoller, PollStart};

type Shared = Arc<Counters<QueueCounters>>;

fn notifier(spec: &str) -> (QueueNotifier, Shared) {
    let counters: Shared = Arc::default();
    let policy = spec.parse::<ModerationSpec>().expect("spec").build();
    let n = QueueNotifier::new(policy, counters.clone()).expect("timerfd");
    (n, counters)
}

fn snap(c: &Shared) -> QueueSnapshot {
    c.snapshot().queue
}

fn meta() -> CompletionMeta {
    CompletionMeta::new(RequestKind::Read, 512)
}

/// Publish one chain and put it in the used ring at once (the device side of a completion).
fn complete_one(g: &mut MockGuest) {
    let addr = g.alloc(64);
    let head = g.push_chain(&[Desc {
        addr,
        len: 64,
        write: true,
    }]);
    let mem = Arc::clone(&g.mem);
    let q = &mut g.ring.queue;
    assert_eq!(
        q.pop_descriptor_chain(&*mem).map(|c| c.head_index()),
        Some(head)
    );
    q.add_used(&*mem, head, 0).expect("add_used");
}

/// Complete `n` requests as one batch; returns the batch's last decision.
fn complete_batch(n: &mut QueueNotifier, g: &mut MockGuest, count: usize) -> Decision {
    let mut batch = n.completions();
    for _ in 0..count {
        complete_one(g);
        n.completed(&mut batch, meta(), &mut g.ring, &g.mem)
            .expect("completed");
    }
    n.completions_done(batch, &mut g.ring, &g.mem)
        .expect("done")
}

#[test]
fn the_first_notify_of_a_batch_signals_at_once_and_the_rest_fold_into_one() {
    let (mut n, c) = notifier("none");
    let mut g = MockGuest::new(16, false);
    let last = complete_batch(&mut n, &mut g, 3);
    assert_eq!(last, Decision::Notify);
    assert_eq!(
        g.ring.signals.get(),
        2,
        "one at the first completion, one at the end"
    );
    assert_eq!(snap(&c).notifications, 2);
    assert_eq!(snap(&c).suppressed, 0);
    // A batch of one signals once.
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 3);
}

#[test]
fn verify_spec_2_7_7_1_no_interrupt_suppresses_signals_without_event_idx() {
    let (mut n, c) = notifier("none");
    let mut g = MockGuest::new(16, false);
    g.set_avail_flags(1); // VRING_AVAIL_F_NO_INTERRUPT
    complete_batch(&mut n, &mut g, 3);
    assert_eq!(g.ring.signals.get(), 0);
    assert_eq!(snap(&c).notifications, 0);
    assert_eq!(snap(&c).suppressed, 2);
    g.set_avail_flags(0);
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 1);
}

#[test]
fn verify_spec_2_7_7_2_event_idx_signals_only_when_the_used_index_passes_used_event() {
    let (mut n, c) = notifier("none");
    let mut g = MockGuest::new(16, true);
    g.set_used_event(1);
    // Used index 1 has not passed used_event 1 (the driver wants a signal once entry 1,
    // the second, is used).
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 0);
    // Used index 2 passes used_event 1: signal.
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 1);
    // Used index 3: used_event 1 was passed already; the driver has not asked again.
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 1);
    assert_eq!(snap(&c).suppressed, 2);
    // The driver moves used_event to 3: the next completion (index 4) passes it.
    g.set_used_event(3);
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(g.ring.signals.get(), 2);
    assert_eq!(snap(&c).notifications, 2);
}

#[test]
fn a_pending_resume_keeps_its_timer_from_fire_due() {
    let (mut n, c) = notifier("none");
    let mut g = MockGuest::new(16, false);
    n.resume_later().expect("arm the resume");
    let at = n.deadline().expect("the resume armed the timer");
    n.fire_due(at + 1_000_000, &mut g.ring, &g.mem)
        .expect("due");
    assert!(n.resuming(), "fire_due consumed a pending resume");
    assert_eq!(n.deadline(), Some(at));
    assert_eq!(snap(&c).timer_fires, 0);
    assert!(n.on_timer(&mut g.ring, &g.mem).expect("timer"));
    assert!(!n.resuming());
}

#[test]
fn a_held_completion_goes_out_when_its_timer_is_due_and_not_before() {
    let (mut n, c) = notifier("count:usecs=200,frames=4");
    let mut g = MockGuest::new(16, false);
    let last = complete_batch(&mut n, &mut g, 1);
    let Decision::Hold { deadline } = last else {
        panic!("count holds the first completion, got {last:?}");
    };
    n.follow(last).expect("arm");
    assert_eq!(n.deadline(), Some(deadline));
    assert_eq!(n.held(), 1);
    assert_eq!(snap(&c).held, 1);
    assert_eq!(g.ring.signals.get(), 0);
    n.fire_due(deadline - 1, &mut g.ring, &g.mem)
        .expect("early");
    assert_eq!(g.ring.signals.get(), 0);
    n.fire_due(deadline, &mut g.ring, &g.mem).expect("due");
    assert_eq!(g.ring.signals.get(), 1);
    assert_eq!(snap(&c).timer_fires, 1);
    assert_eq!(
        n.deadline(),
        None,
        "the timer follows the Notify: cancelled"
    );
    assert_eq!(n.held(), 0);
}

#[test]
fn the_ring_stop_flushes_held_completions() {
    let (mut n, _c) = notifier("count:usecs=200,frames=4");
    let mut g = MockGuest::new(16, false);
    let last = complete_batch(&mut n, &mut g, 1);
    n.follow(last).expect("arm");
    n.flush(false, &mut g.ring, &g.mem).expect("flush");
    assert_eq!(g.ring.signals.get(), 1);
    assert_eq!(n.deadline(), None);
}

#[test]
fn a_pending_resume_keeps_the_timer_and_is_reported_once() {
    let (mut n, c) = notifier("count:usecs=200,frames=4");
    let mut g = MockGuest::new(16, false);
    n.resume_later().expect("arm now");
    assert!(n.resuming());
    let armed = n.deadline().expect("armed");
    let last = complete_batch(&mut n, &mut g, 1);
    n.follow(last).expect("follow");
    assert_eq!(
        n.deadline(),
        Some(armed),
        "a Hold does not move the resume timer"
    );
    // The timerfd was armed at an absolute time already past: it has expired.
    let until = now_ns() + 1_000_000_000;
    while !n.take_expiry() {
        assert!(now_ns() < until, "resume timer never expired");
        std::thread::yield_now();
    }
    assert!(n.on_timer(&mut g.ring, &g.mem).expect("timer"));
    assert!(!n.resuming());
    assert_eq!(snap(&c).timer_fires, 1);
    // The policy's timer event was delivered; its held completion now has a real deadline.
    assert!(n.deadline().is_some() || g.ring.signals.get() == 1);
}

#[test]
fn restore_policy_forgets_what_the_policy_counted() {
    let (mut n, _c) = notifier("count:usecs=200,frames=4");
    let mut g = MockGuest::new(16, false);
    let mut subs = Submissions::default();
    n.submitted(&mut subs);
    n.submissions_done(&subs, &mut g.ring, &g.mem)
        .expect("subs");
    complete_batch(&mut n, &mut g, 1);
    assert_eq!(n.held(), 1);
    n.restore_policy();
    n.clear(0);
    assert_eq!(n.held(), 0);
    assert_eq!(n.deadline(), None);
}

fn poller(wait: &str) -> (KickPoller, Shared) {
    let counters: Shared = Arc::default();
    let waiter = wait.parse::<WaitSpec>().expect("spec").build();
    let cpu = CpuSampler::new(Box::new(SimulatedCpu::new(0)));
    let p = KickPoller::new(waiter, ContentionSpec::OFF.build(), cpu, counters.clone());
    (p, counters)
}

#[test]
fn never_polling_sleeps_at_once() {
    let (mut p, c) = poller("never");
    let mut g = MockGuest::new(16, false);
    assert_eq!(
        p.begin(&mut g.ring, &g.mem).expect("begin"),
        PollStart::Sleep
    );
    p.on_kick();
    assert_eq!(snap(&c).kicks, 1);
    assert_eq!(snap(&c).poll_hits + snap(&c).poll_misses, 0);
}

#[test]
fn a_poll_window_finds_published_work_and_an_empty_one_ends_in_a_miss() {
    let (mut p, c) = poller("fixed:ns=2000000");
    let mut g = MockGuest::new(16, false);
    // Work already there: the first iteration finds it.
    let addr = g.alloc(64);
    g.push_chain(&[Desc {
        addr,
        len: 64,
        write: true,
    }]);
    let PollStart::Poll(_) = p.begin(&mut g.ring, &g.mem).expect("begin") else {
        panic!("fixed polls");
    };
    assert!(has_work(&mut g.ring, &g.mem).expect("avail"));
    p.hit(now_ns());
    assert_eq!(snap(&c).poll_hits, 1);
    // Consume it; the next window finds nothing and ends after its 2 ms.
    let mem = Arc::clone(&g.mem);
    assert!(g.ring.queue.pop_descriptor_chain(&*mem).is_some());
    let start = now_ns();
    let PollStart::Poll(mut w) = p.begin(&mut g.ring, &g.mem).expect("begin") else {
        panic!("fixed polls");
    };
    loop {
        let now = now_ns();
        assert!(!has_work(&mut g.ring, &g.mem).expect("avail"));
        if !p.spin(&mut w, now, false) {
            break;
        }
        assert!(now - start < 1_000_000_000, "the window must end");
    }
    assert!(now_ns() - start >= 2_000_000);
    assert!(!p.finish(&mut g.ring, &g.mem).expect("finish"));
    assert_eq!(snap(&c).poll_misses, 1);
}

#[test]
fn a_control_loop_keeps_the_timer_armed_at_its_period_and_counts_its_wakeups() {
    let (mut n, c) = notifier("dim-loop:period_ms=10");
    let first = n
        .policy()
        .control_loop()
        .expect("dim-loop has a loop")
        .next_wakeup();
    // The loop starts when the notifier is built, not at the clock's 0 (the uptime).
    assert!(first > now_ns() && first <= now_ns() + 10_000_000);
    let mut g = MockGuest::new(16, false);
    let last = complete_batch(&mut n, &mut g, 1);
    n.follow(last).expect("arm");
    assert_eq!(snap(&c).loop_wakeups, 0);
    // Held or not, the timer is armed no later than the loop's next wakeup.
    let deadline = n.deadline().expect("armed for the loop");
    assert!(deadline <= first, "{deadline} > {first}");
    // Deliver the timer at each wakeup: every one is counted, and the timer is re-armed
    // one period later even with nothing held.
    let mut at = first;
    for k in 1..=3u64 {
        n.fire_due(at, &mut g.ring, &g.mem).expect("due");
        assert_eq!(n.held(), 0);
        assert_eq!(snap(&c).loop_wakeups, k);
        let next = n.deadline().expect("re-armed with nothing held");
        assert_eq!(next, at + 10_000_000);
        at = next;
    }
    assert!(snap(&c).timer_fires >= 3);
    // A policy without a loop cancels the timer when nothing is held.
    let (mut plain, pc) = notifier("count:usecs=200,frames=1");
    let last = complete_batch(&mut plain, &mut g, 1);
    plain.follow(last).expect("cancel");
    assert_eq!((plain.deadline(), snap(&pc).loop_wakeups), (None, 0));
}
