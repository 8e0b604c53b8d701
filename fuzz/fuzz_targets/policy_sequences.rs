//! Drives arbitrary sequences of policy calls (one enum variant per call, as in rust-vmm's
//! virtio-queue fuzzers) and checks the invariants every policy promises: a hold always has a
//! deadline no earlier than now and no later than the oldest held completion plus the
//! policy's bound; a notification covers everything held; wait windows never exceed the max.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vmirq_policy::moderation::{CompletionMeta, Decision, Event, Moderator, RequestKind};
use vmirq_policy::spec::{ModerationSpec, WaitSpec};
use vmirq_policy::wait::{WaitDecision, WakeOutcome, Waiter};

const MODERATION: &[&str] =
    &["none", "count", "count:usecs=1,frames=2", "vic", "ipi-gap", "dim", "dim:mode=cqe,latency=on", "dim:variant=rdma", "dim-loop", "dim-loop:period_ms=1", "dim-lat", "spdk", "budget"];
const WAIT: &[&str] = &["never", "fixed", "kvm", "kvm:shrink=0", "guest-haltpoll", "histogram"];

#[derive(Debug, Arbitrary)]
enum Op {
    Advance(u32),
    Submit,
    Complete { kind: u8, bytes: u32, flags: u8 },
    Timer,
    WaitCycle { idle_ns: u32, valid: bool, cost: u16 },
}

#[derive(Debug, Arbitrary)]
struct Input {
    moderation: u8,
    wait: u8,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let m = MODERATION[usize::from(input.moderation) % MODERATION.len()];
    let w = WAIT[usize::from(input.wait) % WAIT.len()];
    let (Ok(m), Ok(w)) = (m.parse::<ModerationSpec>(), w.parse::<WaitSpec>()) else { return };
    let mut policy = m.build();
    let mut waiter = w.build();
    let bound = policy.max_hold_ns();
    let mut now: u64 = 0;
    let mut oldest: Option<u64> = None;
    for op in input.ops.iter().take(10_000) {
        let event = match *op {
            Op::Advance(dt) => {
                now += u64::from(dt);
                continue;
            }
            Op::WaitCycle { idle_ns, valid, cost } => {
                let d = waiter.begin(now);
                assert!(d.window_ns(now) <= waiter.max_window_ns());
                if let WaitDecision::Poll { until } = d {
                    assert!(until >= now);
                }
                let slept = u64::from(idle_ns) > d.window_ns(now);
                now += u64::from(idle_ns);
                waiter.end(now, WakeOutcome { slept, valid, wake_cost_ns: u64::from(cost) });
                continue;
            }
            Op::Submit => Event::Submit,
            Op::Timer => Event::Timer,
            Op::Complete { kind, bytes, flags } => {
                let kind = [RequestKind::Read, RequestKind::Write, RequestKind::Flush, RequestKind::Other][usize::from(kind % 4)];
                oldest.get_or_insert(now);
                Event::Complete(CompletionMeta { kind, bytes, flags })
            }
        };
        match policy.on_event(now, event) {
            Decision::Notify => {
                assert_eq!(policy.held(), 0);
                oldest = None;
            }
            Decision::Hold { deadline } => {
                let first = oldest.expect("hold with nothing held");
                assert!(policy.held() > 0);
                // (A deadline already in the past means "fire now": the caller was late.)
                assert!(deadline <= first + bound, "deadline {deadline} beyond {first} + {bound}");
            }
            Decision::Idle => assert_eq!(policy.held(), 0),
        }
    }
});
