//! Moderation of one queue's used-buffer notifications: a `vmirq_policy` moderation policy
//! decides per submission, completion and timer expiry; [`QueueNotifier`] executes its
//! decisions. A `Notify` signals the driver at once, subject to EVENT_IDX (or, without it,
//! the available ring's NO_INTERRUPT flag); the hold timer follows the last decision (armed
//! for `Hold`, cancelled otherwise).
//!
//! Work comes in batches, and so do decisions: the clock is read once per batch of
//! submissions and once per batch of completions; within a batch of completions the first
//! `Notify` signals at once (the driver can start reaping while the rest complete) and later
//! ones are folded into one check at the end of the batch, which covers every completion
//! added since (EVENT_IDX looks at the whole range).
//!
//! A policy with a periodic control loop (`dim-loop`, [`Moderation::control_loop`]) also gets
//! the timer when nothing is held: instead of being cancelled it is armed at the loop's next
//! wakeup, so the loop wakes the queue's worker every period whatever the traffic (the
//! talk's hypervisor-side loop), and its wakeups are counted in `loop_wakeups`.
//!
//! The hold timer doubles as the "resume" timer: a device that stops after a bounded amount
//! of work arms it at once ([`QueueNotifier::resume_later`]) to come back through its event
//! loop; while a resume is pending, decisions do not touch the timer.

use crate::clock::now_ns;
use crate::counters::{QueueCounters, SharedQueueCounters};
use crate::timer::HoldTimer;
use crate::{Result, Ring};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use vm_memory::GuestMemoryMmap;
use vmirq_policy::moderation::{CompletionMeta, Decision, Event, Moderation, Moderator};
use vmirq_policy::Nanos;

/// Submissions of one batch, for the moderation policy.
#[derive(Debug, Default)]
pub struct Submissions {
    /// When the batch's chains were taken (read once, at the first).
    at: Option<Nanos>,
    /// The policy's decision for the last submission.
    last: Option<Decision>,
    /// Some submission asked for a notification.
    notify: bool,
}

/// Completions of one batch, for the moderation policy.
#[derive(Debug)]
pub struct Completions {
    /// When the batch's completions became visible.
    at: Nanos,
    last: Decision,
    /// The batch's first `Notify` has been acted on.
    checked: bool,
    /// A later `Notify` waits for the end of the batch.
    deferred: bool,
}

/// One queue's notification moderation.
pub struct QueueNotifier {
    policy: Moderation,
    /// The policy as built, restored when a broken queue recovers (the requests it counted
    /// in flight were dropped).
    fresh: Moderation,
    timer: HoldTimer,
    /// The device stopped early and must be resumed by its (immediately armed) timer.
    resume: bool,
    counters: SharedQueueCounters,
    /// The policy's control-loop wakeups already added to `loop_wakeups`.
    loop_seen: u64,
}

impl std::fmt::Debug for QueueNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueNotifier")
            .field("policy", &self.policy)
            .field("timer", &self.timer)
            .field("resume", &self.resume)
            .finish_non_exhaustive()
    }
}

impl QueueNotifier {
    /// A notifier applying `policy`, counting into `counters`.
    ///
    /// # Errors
    /// When the hold timer cannot be created.
    pub fn new(mut policy: Moderation, counters: SharedQueueCounters) -> io::Result<Self> {
        policy.start_at(now_ns());
        Ok(Self {
            policy,
            fresh: policy,
            timer: HoldTimer::new()?,
            resume: false,
            counters,
            loop_seen: 0,
        })
    }

    /// The policy in force (read-only: its knob, its control loop).
    #[must_use]
    pub fn policy(&self) -> &Moderation {
        &self.policy
    }

    /// Add the policy's new control-loop wakeups to `loop_wakeups`.
    fn count_loop_wakeups(&mut self) {
        let Some(w) = self.policy.control_loop().map(|l| l.wakeups()) else {
            return;
        };
        let new = w.saturating_sub(self.loop_seen);
        self.loop_seen = w;
        if new > 0 {
            QueueCounters::add(&self.c().loop_wakeups, new);
        }
    }

    fn c(&self) -> &QueueCounters {
        (*self.counters).as_ref()
    }

    /// The hold timer's fd, to register in the worker's epoll.
    #[must_use]
    pub fn timer_fd(&self) -> RawFd {
        self.timer.as_raw_fd()
    }

    /// The hold timer deadline currently armed.
    #[must_use]
    pub fn deadline(&self) -> Option<Nanos> {
        self.timer.deadline()
    }

    /// The hold timer's deadline for readers on other threads, without this notifier's
    /// lock (a hint: see [`crate::timer::DeadlineWatch`]).
    pub fn deadline_watch(&mut self) -> crate::timer::DeadlineWatch {
        self.timer.watch()
    }

    /// Completions currently held back by the policy.
    #[must_use]
    pub fn held(&self) -> u32 {
        self.policy.held()
    }

    /// Replace the policy (e.g. the guest set new coalescing parameters); it also becomes
    /// the policy restored by [`QueueNotifier::restore_policy`].
    pub fn set_policy(&mut self, mut policy: Moderation) {
        self.count_loop_wakeups();
        policy.start_at(now_ns());
        self.policy = policy;
        self.fresh = policy;
        self.loop_seen = 0;
    }

    /// Go back to the policy as built (its requests in flight were dropped).
    pub fn restore_policy(&mut self) {
        self.count_loop_wakeups();
        self.policy = self.fresh;
        self.policy.start_at(now_ns());
        self.loop_seen = 0;
    }

    /// Whether a resume is pending (the device should stop working and return to its
    /// event loop, which calls [`QueueNotifier::on_timer`] at once).
    #[must_use]
    pub fn resuming(&self) -> bool {
        self.resume
    }

    /// Come back through the event loop: arm the timer now and mark a resume.
    ///
    /// # Errors
    /// When the timer cannot be armed.
    pub fn resume_later(&mut self) -> Result<()> {
        self.resume = true;
        self.timer.arm(now_ns())?;
        Ok(())
    }

    /// Forget a pending resume and disarm the timer (device reset, queue broken or
    /// recovered). A failure to disarm is logged.
    pub fn clear(&mut self, queue: u16) {
        self.resume = false;
        if let Err(e) = self.timer.cancel() {
            tracing::warn!(queue, error = %e, "cannot cancel hold timer");
        }
    }

    /// A chain was taken from the ring: tell the policy (one clock read per batch).
    pub fn submitted(&mut self, subs: &mut Submissions) {
        let at = *subs.at.get_or_insert_with(now_ns);
        let d = self.policy.on_event(at, Event::Submit);
        subs.notify |= d == Decision::Notify;
        subs.last = Some(d);
    }

    /// `n` chains were taken from the ring: tell the policy in one call
    /// ([`Moderation::on_submits`], the same decisions as `n` calls of
    /// [`QueueNotifier::submitted`]).
    pub fn submitted_n(&mut self, subs: &mut Submissions, n: u32) {
        if n == 0 {
            return;
        }
        let at = *subs.at.get_or_insert_with(now_ns);
        let d = self.policy.on_submits(at, n);
        subs.notify |= d.notify > 0;
        subs.last = Some(d.last);
    }

    /// The batch of submissions is over: signal if one asked for it. Returns the policy's
    /// last decision for the batch (for [`QueueNotifier::follow`]), `None` if it was empty.
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn submissions_done(
        &mut self,
        subs: &Submissions,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<Option<Decision>> {
        if subs.notify {
            self.signal(ring, mem)?;
        }
        Ok(subs.last)
    }

    /// Start a batch of completions (reads the clock once).
    #[must_use]
    pub fn completions(&self) -> Completions {
        Completions {
            at: now_ns(),
            last: Decision::Idle,
            checked: false,
            deferred: false,
        }
    }

    /// One request was put in the used ring: feed it to the policy. The first `Notify` of a
    /// batch signals at once, later ones at [`QueueNotifier::completions_done`].
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn completed(
        &mut self,
        batch: &mut Completions,
        meta: CompletionMeta,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<Decision> {
        let d = self.policy.on_event(batch.at, Event::Complete(meta));
        match d {
            Decision::Notify if batch.checked => batch.deferred = true,
            Decision::Notify => {
                batch.checked = true;
                self.signal(ring, mem)?;
            }
            Decision::Hold { .. } => QueueCounters::add(&self.c().held, 1),
            Decision::Idle => {}
        }
        batch.last = d;
        Ok(d)
    }

    /// Requests put in the used ring, one per `metas` entry, all visible to the driver
    /// already: the policy sees them in one call ([`Moderation::on_completions`], the same
    /// decisions as one [`QueueNotifier::completed`] per entry), and the batch's first
    /// `Notify` signals at once. Since every entry of the call is visible before that
    /// signal, it covers them all: only a `Notify` of a later call is deferred.
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn completed_all(
        &mut self,
        batch: &mut Completions,
        metas: &[CompletionMeta],
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<Decision> {
        if metas.is_empty() {
            return Ok(batch.last);
        }
        let d = self.policy.on_completions(batch.at, metas);
        if d.hold > 0 {
            QueueCounters::add(&self.c().held, u64::from(d.hold));
        }
        batch.last = d.last;
        if d.notify > 0 {
            if batch.checked {
                batch.deferred = true;
            } else {
                batch.checked = true;
                self.signal(ring, mem)?;
            }
        }
        Ok(d.last)
    }

    /// The batch of completions is over: signal once for the deferred `Notify`s. Returns the
    /// last decision (for [`QueueNotifier::follow`]).
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn completions_done(
        &mut self,
        batch: Completions,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<Decision> {
        if batch.deferred {
            self.signal(ring, mem)?;
        }
        Ok(batch.last)
    }

    /// The hold timer follows the policy's last decision: armed for `Hold`, otherwise armed
    /// at the policy's next control-loop wakeup if it has a loop, else cancelled (untouched
    /// while a resume is pending).
    ///
    /// # Errors
    /// When the timer cannot be set.
    pub fn follow(&mut self, last: Decision) -> Result<()> {
        self.count_loop_wakeups();
        let wakeup = self.policy.control_loop().map(|l| l.next_wakeup());
        match (last, wakeup) {
            _ if self.resume => {}
            (Decision::Hold { deadline }, _) => self.timer.arm(deadline)?,
            (Decision::Notify | Decision::Idle, Some(at)) => self.timer.arm(at)?,
            (Decision::Notify | Decision::Idle, None) => self.timer.cancel()?,
        }
        Ok(())
    }

    /// Consume the timer's expiry after epoll reported its fd readable, counting it.
    /// Returns `false` for a stale readiness (re-armed or cancelled since): do nothing then.
    pub fn take_expiry(&mut self) -> bool {
        if !self.timer.consume() {
            return false;
        }
        QueueCounters::add(&self.c().timer_fires, 1);
        true
    }

    /// After [`QueueNotifier::take_expiry`]: give the policy its timer event and act on it.
    /// Returns whether a resume was pending (the device continues its work now).
    ///
    /// # Errors
    /// When the rings, the timer or the call eventfd cannot be accessed.
    pub fn on_timer(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<bool> {
        // Clear `resume` first: `follow` must arm a `Hold` deadline now, or a held
        // completion would wait for a timer nobody armed (a lost notification).
        let resume = std::mem::take(&mut self.resume);
        let decision = self.policy.on_event(now_ns(), Event::Timer);
        self.act(decision, ring, mem)?;
        Ok(resume)
    }

    /// The same port's driver transmitted frames described by `metas` (a receive queue
    /// hears of its port's transmissions): the policy may release held completions at once
    /// ahead of an expected response (`Moderation::on_transmit`, `dim-lat` only).
    ///
    /// # Errors
    /// When the rings, the timer or the call eventfd cannot be accessed.
    pub fn transmitted(
        &mut self,
        metas: &[CompletionMeta],
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<()> {
        let now = now_ns();
        let mut notify = false;
        for m in metas {
            notify |= self.policy.on_transmit(now, *m) == Some(Decision::Notify);
        }
        if notify {
            self.act(Decision::Notify, ring, mem)?;
        }
        Ok(())
    }

    /// While the worker polls it is not in epoll: deliver a due hold timer here.
    ///
    /// A pending resume ([`Self::resume_later`]) owns the timer: it is left to the event
    /// loop, whose [`Self::on_timer`] clears the resume and gives the policy its timer
    /// event. Consumed here, the resume would stay marked and the queue would never come
    /// back through the event loop.
    ///
    /// # Errors
    /// When the rings, the timer or the call eventfd cannot be accessed.
    pub fn fire_due(
        &mut self,
        now: Nanos,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<()> {
        if self.resume {
            return Ok(());
        }
        match self.timer.deadline() {
            Some(deadline) if now >= deadline => {
                let _ = self.timer.consume();
                self.timer.cancel()?;
                QueueCounters::add(&self.c().timer_fires, 1);
                let decision = self.policy.on_event(now, Event::Timer);
                self.act(decision, ring, mem)
            }
            _ => Ok(()),
        }
    }

    /// The ring stops (the frontend asked for its position): whatever the policy held goes
    /// out now if `completed` (something was just completed) or completions are held, and
    /// the timer is disarmed.
    ///
    /// # Errors
    /// When the rings, the timer or the call eventfd cannot be accessed.
    pub fn flush(
        &mut self,
        completed: bool,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<()> {
        if completed || self.policy.held() > 0 {
            self.signal(ring, mem)?;
        }
        self.timer.cancel()?;
        Ok(())
    }

    /// Signal after `decision` if it is `Notify`, then let the timer follow it.
    fn act(
        &mut self,
        decision: Decision,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<()> {
        if decision == Decision::Notify {
            self.signal(ring, mem)?;
        }
        self.follow(decision)
    }

    /// Signal the driver unless it suppressed signals ([`Ring::needs_notification`]:
    /// EVENT_IDX's `used_event` not passed, or without EVENT_IDX the available ring's
    /// NO_INTERRUPT flag). Counts the signal or its suppression.
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn signal(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<()> {
        let wanted = ring.needs_notification(mem)?;
        if wanted {
            ring.signal()?;
            QueueCounters::add(&self.c().notifications, 1);
        } else {
            QueueCounters::add(&self.c().suppressed, 1);
        }
        Ok(())
    }
}
