//! The classic "hold model" benchmark of event-set implementations: keep `pending` events
//! outstanding; each delivered event schedules one new event an exponential delay later.
//! Used by the criterion bench (events per second) and by the determinism tests.

use crate::engine::{EngineError, EventQueue};
use crate::rng::Rng;
use crate::Nanos;

/// Result of one hold-model run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldResult {
    /// Events delivered.
    pub events: u64,
    /// Simulated time at the end.
    pub end_ns: Nanos,
    /// A hash over every delivered (time, payload): equal runs give equal digests.
    pub digest: u64,
}

/// Run the hold model: `pending` events outstanding, `events` deliveries, mean delay
/// `mean_ns`, payloads are entity numbers, every 8th delivery also cancels and re-arms the
/// event of another entity (exercising lazy cancellation).
///
/// # Errors
/// Engine errors (none expected with these bounds).
pub fn run_hold(
    seed: u64,
    pending: u32,
    events: u64,
    mean_ns: Nanos,
) -> Result<HoldResult, EngineError> {
    let mut q: EventQueue<u32> = EventQueue::new(pending as usize + 1);
    let mut rng = Rng::new(seed, 0);
    let mut ids = Vec::with_capacity(pending as usize);
    for e in 0..pending {
        let d = rng.exp_ns(mean_ns);
        ids.push(q.schedule_in(d, e)?);
    }
    let mut digest = 0xcbf2_9ce4_8422_2325_u64;
    let mut n = 0;
    while n < events {
        let Some((t, _, e)) = q.pop_until(Nanos::MAX) else {
            break;
        };
        n += 1;
        digest = (digest ^ t ^ u64::from(e)).wrapping_mul(0x100_0000_01b3);
        let d = rng.exp_ns(mean_ns);
        ids[e as usize] = q.schedule_in(d, e)?;
        if n % 8 == 0 && pending > 1 {
            let other = u32::try_from(rng.below(u64::from(pending))).unwrap_or(0);
            if q.cancel(ids[other as usize]) {
                let d = rng.exp_ns(mean_ns);
                ids[other as usize] = q.schedule_in(d, other)?;
            }
        }
    }
    Ok(HoldResult {
        events: n,
        end_ns: q.now(),
        digest,
    })
}
