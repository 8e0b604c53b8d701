//! Runs N closed-loop decision cycles of one policy, for instruction counting under
//! `valgrind --tool=callgrind` (see `scripts/decision-cost.sh`): the difference between runs
//! with N and 0 cycles, divided by N, is the instruction cost of one cycle.
//!
//! Usage: `decision_loop moderation|wait SPEC N`. A moderation cycle is one `Complete`
//! decision plus the `Submit` that refills a queue of depth 32 (one completion per µs); a wait
//! cycle is one `begin` + `end` pair with alternating short and long idle periods.

use std::hint::black_box;
use std::process::ExitCode;

use vmirq_policy::moderation::{CompletionMeta, Event, Moderator, RequestKind};
use vmirq_policy::spec::{ModerationSpec, WaitSpec};
use vmirq_policy::wait::{Waiter, WakeOutcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(family), Some(spec), Some(n)) = (
        args.get(1),
        args.get(2),
        args.get(3).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: decision_loop moderation|wait SPEC N");
        return ExitCode::FAILURE;
    };
    let mut acc = 0u64;
    match family.as_str() {
        "moderation" => {
            let Ok(spec) = spec.parse::<ModerationSpec>() else {
                return ExitCode::FAILURE;
            };
            let mut p = spec.build();
            let done = Event::Complete(CompletionMeta::new(RequestKind::Read, 4096));
            for _ in 0..32 {
                p.on_event(0, Event::Submit);
            }
            let mut now = 0;
            for _ in 0..n {
                now += 1_000;
                let d = p.on_event(black_box(now), black_box(done));
                acc += u64::from(matches!(d, vmirq_policy::moderation::Decision::Notify));
                p.on_event(now, Event::Submit);
            }
        }
        "wait" => {
            let Ok(spec) = spec.parse::<WaitSpec>() else {
                return ExitCode::FAILURE;
            };
            let mut p = spec.build();
            let mut now = 0;
            for i in 0..n {
                let d = p.begin(black_box(now));
                now += if i % 4 == 0 { 500_000 } else { 20_000 };
                let polled = d.window_ns(0) > 0;
                acc += u64::from(polled);
                p.end(
                    now,
                    if polled {
                        WakeOutcome::POLLED
                    } else {
                        WakeOutcome::SLEPT
                    },
                );
            }
        }
        _ => return ExitCode::FAILURE,
    }
    println!("{acc}");
    ExitCode::SUCCESS
}
