//! A PARSEC-like parallel program in a 12-vCPU VM (one thread per vCPU), optionally next
//! to a co-located CPU-bound VM (sysbench-like: every vCPU always runnable) whose vCPUs
//! share the same pCPUs. Each thread executes `work_us` of user compute; at exponential
//! intervals of user time (the program's [`Profile`]) it unmaps memory (a TLB shootdown
//! to the other vCPUs) or takes a contended kernel lock, and it meets the other threads
//! at blocking barriers. The run's result is the time until the last thread finished
//! (`parsec_exec_us`) and a CPU profile of the VM (`prof_*_bp`, basis points).

use super::profiles::{Profile, Program};
use crate::host::{Core, Hook, IrqSrc, Result, VcpuId, Work};
use crate::sync::{tags, Guest, SyncConfig};
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// PARSEC workload parameters (scenario `[model.workload]`, `kind = "parsec"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParsecConfig {
    /// The program (selects its profile).
    pub program: Program,
    /// Replace the program's profile.
    #[serde(default)]
    pub profile: Option<Profile>,
    /// Threads = vCPUs of the VM.
    #[serde(default = "twelve")]
    pub threads: usize,
    /// A co-located CPU-bound VM with as many vCPUs on the same pCPUs.
    #[serde(default)]
    pub colocated: bool,
    /// User compute per thread, µs.
    pub work_us: u64,
    /// Hot kernel locks the threads contend on.
    #[serde(default = "one")]
    pub locks: usize,
    /// Synchronization mechanisms.
    #[serde(default)]
    pub sync: SyncConfig,
}

fn twelve() -> usize {
    12
}
fn one() -> usize {
    1
}

const USER: u32 = 60;
const SYSBENCH: u32 = 61;
const SYSBENCH_CHUNK_NS: Nanos = 10_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TState {
    Running,
    Barrier(u64),
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Thread {
    left: Nanos,
    to_tlb: Nanos,
    to_lock: Nanos,
    to_barrier: Nanos,
    burst: Nanos,
    state: TState,
}

/// Running PARSEC-like program.
#[derive(Debug, Clone)]
pub struct Parsec {
    cfg: ParsecConfig,
    prof: Profile,
    guest: Guest,
    th: Vec<Thread>,
    waiting: Vec<VcpuId>,
    generation: u64,
    finished: usize,
}

impl Parsec {
    /// Build.
    #[must_use]
    pub fn new(cfg: ParsecConfig) -> Self {
        let prof = cfg.profile.unwrap_or_else(|| cfg.program.profile());
        let n = cfg.threads * (1 + usize::from(cfg.colocated));
        let mut guest = Guest::new(cfg.sync, (0..cfg.threads).collect(), n, cfg.locks);
        guest.set_free_cs_ns(prof.cs_ns);
        Self {
            cfg,
            prof,
            guest,
            th: Vec::new(),
            waiting: Vec::new(),
            generation: 0,
            finished: 0,
        }
    }

    /// Ranges: 1-64 threads (Shoot4U's hypercall carries a 64-bit vCPU bitmap), 1-64
    /// locks, 1 µs to 1,000 s of work per thread.
    pub(super) fn validate(&self) -> core::result::Result<(), crate::model::ConfigError> {
        let c = &self.cfg;
        let bad = |m: &str| Err(crate::model::ConfigError::Range(m.to_string()));
        if !(1..=64).contains(&c.threads) {
            return bad("parsec threads must be 1..=64");
        }
        if !(1..=64).contains(&c.locks) {
            return bad("parsec locks must be 1..=64");
        }
        if !(1..=1_000_000_000).contains(&c.work_us) {
            return bad("parsec work_us must be 1..=1e9");
        }
        let p = &self.prof;
        let big = 1_000_000_000;
        if [
            p.tlb_gap_us,
            p.lock_gap_us,
            p.barrier_us,
            p.cs_ns,
            p.unmap_ns,
        ]
        .iter()
        .any(|&x| x > big)
        {
            return bad("parsec profile values must be at most 1e9");
        }
        let s = &c.sync;
        if s.pmt_shift > 24 {
            return bad("pmt_shift must be at most 24");
        }
        let k = &s.costs;
        if k.pause_iter_ns > 10_000 || k.pv_spin_threshold_iters > 1 << 24 {
            return bad("pause_iter_ns must be at most 10000, pv_spin_threshold_iters 2^24");
        }
        let costs = [
            k.flush_handler_ns,
            k.local_flush_ns,
            k.pv_check_ns,
            k.invvpid_ns,
            k.host_ipi_flight_ns,
            k.on_spin_ns,
        ];
        if costs.iter().any(|&x| x > big) || s.ple_params.window > u64::from(u32::MAX) {
            return bad("sync costs must be at most 1e9 ns, the PLE window at most 2^32");
        }
        Ok(())
    }

    /// vCPUs needed (both VMs).
    #[must_use]
    pub fn vcpus(&self) -> usize {
        self.cfg.threads * (1 + usize::from(self.cfg.colocated))
    }

    fn gap(core: &mut Core, us: u64) -> Nanos {
        if us == 0 {
            Nanos::MAX
        } else {
            core.rng.exp_ns(us * 1_000).max(1)
        }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        let barrier = if self.prof.barrier_us == 0 {
            Nanos::MAX
        } else {
            self.prof.barrier_us * 1_000
        };
        for v in 0..self.cfg.threads {
            let t = Thread {
                left: self.cfg.work_us * 1_000,
                to_tlb: Self::gap(core, self.prof.tlb_gap_us),
                to_lock: Self::gap(core, self.prof.lock_gap_us),
                to_barrier: barrier,
                burst: 0,
                state: TState::Running,
            };
            self.th.push(t);
            self.next(core, v)?;
        }
        for v in self.cfg.threads..self.vcpus() {
            core.vcpus[v].vm = 1;
            core.vcpus[v]
                .work
                .push_back(Work::app(SYSBENCH_CHUNK_NS, SYSBENCH));
        }
        for v in 0..self.vcpus() {
            core.dispatch(v)?;
        }
        Ok(())
    }

    /// Thread `v` continues with user work, or its next kernel operation.
    fn next(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let t = self.th[v];
        if t.left == 0 {
            return self.finish(core, v);
        }
        if t.to_barrier == 0 {
            return self.barrier(core, v);
        }
        if t.to_tlb == 0 {
            self.th[v].to_tlb = Self::gap(core, self.prof.tlb_gap_us);
            return self.guest.start_shootdown(core, v, self.prof.unmap_ns);
        }
        if t.to_lock == 0 {
            self.th[v].to_lock = Self::gap(core, self.prof.lock_gap_us);
            let n = self.guest.n_locks() as u64;
            let l = usize::try_from(core.rng.below(n)).unwrap_or(0);
            let cs = core.rng.exp_ns(self.prof.cs_ns).max(1);
            return self.guest.acquire(core, v, l, cs);
        }
        let burst = t.left.min(t.to_tlb).min(t.to_lock).min(t.to_barrier);
        self.th[v].burst = burst;
        core.vcpus[v].work.push_back(Work::app(burst, USER));
        Ok(())
    }

    fn user_done(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let t = &mut self.th[v];
        let b = t.burst;
        t.left -= b;
        t.to_tlb = t.to_tlb.saturating_sub(b);
        t.to_lock = t.to_lock.saturating_sub(b);
        t.to_barrier = t.to_barrier.saturating_sub(b);
        self.next(core, v)
    }

    /// A blocking barrier: wait (the vCPU halts) or, as the last arrival, wake everyone
    /// (futex wake: a reschedule IPI per waiter).
    fn barrier(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        self.th[v].to_barrier = self.prof.barrier_us * 1_000;
        let active = self.th.iter().filter(|t| t.state != TState::Done).count();
        if self.waiting.len() + 1 < active {
            self.th[v].state = TState::Barrier(self.generation);
            self.guest.set_thread_idle(v, true);
            self.waiting.push(v);
            return Ok(());
        }
        core.metrics.count("barriers");
        self.generation += 1;
        for w in std::mem::take(&mut self.waiting) {
            core.send_ipi(v, w, IrqSrc::Resched { from: v })?;
        }
        self.next(core, v)
    }

    fn finish(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        self.th[v].state = TState::Done;
        self.guest.set_thread_idle(v, true);
        self.finished += 1;
        if self.finished == self.cfg.threads {
            core.metrics.add("parsec_exec_us", core.now() / 1_000);
            core.metrics.count("parsec_finished");
            self.profile(core);
        } else if !self.waiting.is_empty() && self.waiting.len() + self.finished == self.th.len() {
            // Everyone still running waits at a barrier this thread will never reach.
            for w in std::mem::take(&mut self.waiting) {
                core.send_ipi(v, w, IrqSrc::Resched { from: v })?;
            }
            self.generation += 1;
        }
        Ok(())
    }

    /// CPU profile of the program's vCPUs: user, kernel lock, kernel TLB, other kernel
    /// (critical sections, unmapping, interrupt entries, exits), in basis points.
    fn profile(&self, core: &mut Core) {
        let (mut total, mut user, mut lock, mut tlb) = (0u64, 0u64, 0u64, 0u64);
        for v in 0..self.cfg.threads {
            let vc = &core.vcpus[v];
            total += vc.run_ns;
            for (&t, &ns) in &vc.app_ns {
                match t {
                    USER => user += ns,
                    tags::SPIN_LOCK | tags::PLE_EXIT_LOCK | tags::KICK => lock += ns,
                    tags::LOCAL_FLUSH
                    | tags::PV_CHECK
                    | tags::SPIN_TLB
                    | tags::PLE_EXIT
                    | tags::S4U_STEP => tlb += ns,
                    t if t >= tags::FLUSH_HANDLER => tlb += ns,
                    _ => {}
                }
            }
        }
        let bp = |x: u64| x * 10_000 / total.max(1);
        let other = total.saturating_sub(user + lock + tlb);
        core.metrics.add("prof_user_bp", bp(user));
        core.metrics.add("prof_lock_bp", bp(lock));
        core.metrics.add("prof_tlb_bp", bp(tlb));
        core.metrics.add("prof_other_bp", bp(other));
        // The co-located VM's share of its vCPUs' time while the program ran.
        let colo: u64 = (self.cfg.threads..self.vcpus())
            .map(|v| core.vcpus[v].run_ns)
            .sum();
        if colo > 0 {
            let avail = core.now() * self.cfg.threads as u64;
            core.metrics
                .add("colo_cpu_bp", colo * 10_000 / avail.max(1));
        }
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32, data: u64) -> Result<()> {
        if tag == crate::sync::GAP_TIMER {
            let p = usize::try_from(data).unwrap_or(usize::MAX);
            self.guest.gap_timer(core, p)?;
        }
        Ok(())
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match hook {
            Hook::App(v, USER) => self.user_done(core, v)?,
            Hook::App(v, SYSBENCH) => {
                core.vcpus[v]
                    .work
                    .push_back(Work::app(SYSBENCH_CHUNK_NS, SYSBENCH));
            }
            Hook::Irq(v, irq) if matches!(irq.src, IrqSrc::Resched { .. }) => {
                if let Some(TState::Barrier(g)) = self.th.get(v).map(|t| t.state) {
                    if g < self.generation {
                        self.th[v].state = TState::Running;
                        self.guest.set_thread_idle(v, false);
                        self.next(core, v)?;
                    }
                }
            }
            h => {
                self.guest.hook(core, h)?;
            }
        }
        for v in std::mem::take(&mut self.guest.ready) {
            self.next(core, v)?;
            core.dispatch(v)?;
        }
        Ok(())
    }
}
