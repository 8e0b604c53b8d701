//! Dedicated-core polling workloads (IBM, FAST 2012): an external ping flood answered by
//! the guest, and 4 KiB synchronous writes through a virtio-like block path whose host
//! side is either an I/O thread woken by exits and answering with interrupts, or a pair of
//! polling threads (guest and host, each on its own core) with no exits and no interrupts.

use crate::host::{Cat, Core, Ev, Hook, Irq, IrqSrc, Result, Work};
use crate::profiles::{extra_exit_ns, Governor};
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// Ping-flood parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingConfig {
    /// Round trip outside the server (client, wire, NIC), in ns: an input derived from the
    /// published bare-metal-with-polling latency.
    pub outside_ns: Nanos,
    /// Guest CPU to answer one echo request (driver + ICMP), ns.
    pub guest_ns: Nanos,
    /// The reply leaves through a paravirtual NIC whose doorbell exits (virtio-net TX
    /// kick); false for an assigned NIC (SR-IOV) or bare metal.
    #[serde(default)]
    pub tx_exit: bool,
    /// A guest (or native) thread on vCPU 0 spins on the NIC's receive ring instead of
    /// taking its interrupts (FAST'12: "To eliminate exits for interrupts, we use polling
    /// instead of interrupts"): it sees a packet `poll_notice_ns` after it lands and answers
    /// it itself. The thread is runnable, so vCPU 0 never enters its idle loop.
    #[serde(default)]
    pub polled: bool,
}

/// How the block path between guest and host signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathMode {
    /// Guest kicks (exit), host I/O thread wakes, completion by virtual interrupt.
    Exits,
    /// Host polling thread sees submissions, guest polling thread (vCPU 1) sees completions.
    Polling,
}

/// Synchronous-write parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncWriteConfig {
    /// Signalling of the block path.
    pub mode: PathMode,
    /// Guest CPU per write before the request is on the ring (app + fs + block + driver), ns.
    pub submit_ns: Nanos,
    /// Guest CPU per completion (driver + block + wakeup of the writer), ns.
    pub complete_ns: Nanos,
    /// Host controller processing per request, ns.
    pub host_ns: Nanos,
    /// Storage service time (controller cache / NVRAM), ns.
    pub device_ns: Nanos,
}

const ARRIVE: u32 = 20;
const INJECT: u32 = 21;
const REPLY: u32 = 22;
const TX_DONE: u32 = 23;
/// The NIC polling thread's spin (ends when a packet is seen).
const RX_SPIN: u32 = 24;
const SUBMIT: u32 = 30;
const HOST_START: u32 = 31;
const HOST_DONE: u32 = 32;
const GUEST_SEEN: u32 = 33;
const DONE: u32 = 34;

fn device_irq(core: &Core) -> Irq {
    Irq {
        src: IrqSrc::Device { queue: 0 },
        sent: core.now(),
    }
}

/// The host CPU that takes the assigned NIC's interrupt when it is not the vCPU's
/// (`Core::assigned_irq_remote`, `crate::era`): it runs nothing else, so it idles between
/// interrupts in the state its own menu-like governor picks (multiplier 1: no I/O waiter).
#[derive(Debug, Clone, Default)]
struct IrqCpu {
    gov: Governor,
}

impl IrqCpu {
    /// The interrupt wakes the CPU: the extra exit latency of the state it idled in.
    fn wake(&mut self, core: &mut Core) -> Nanos {
        let Some((since, i)) = self.gov.idle.take() else {
            return 0;
        };
        self.gov.record(core.now().saturating_sub(since));
        let extra = extra_exit_ns(&core.idle_states, i);
        core.metrics.add("irq_cpu_idle_exit_ns", extra);
        extra
    }

    /// Nothing left to run on it: it idles.
    fn idle(&mut self, core: &mut Core) {
        if core.idle_states.is_empty() {
            return;
        }
        let i = self.gov.select(
            &core.idle_states,
            core.next_timer_ns,
            1,
            core.governor_correction,
        );
        self.gov.idle = Some((core.now(), i));
        core.metrics.count(match i {
            0 => "irq_cpu_idle_state0",
            1 => "irq_cpu_idle_state1",
            2 => "irq_cpu_idle_state2",
            3 => "irq_cpu_idle_state3",
            _ => "irq_cpu_idle_state4",
        });
    }
}

/// Running ping flood.
#[derive(Debug, Clone)]
pub struct Ping {
    cfg: PingConfig,
    arrived: Nanos,
    irq_cpu: IrqCpu,
}

impl Ping {
    /// Build.
    #[must_use]
    pub fn new(cfg: PingConfig) -> Self {
        Self {
            cfg,
            arrived: 0,
            irq_cpu: IrqCpu::default(),
        }
    }

    /// The NIC's interrupt is taken on a host CPU of its own (a VM taking interrupts, with
    /// the era's remote assigned-device IRQ).
    fn remote_irq(&self, core: &Core) -> bool {
        !self.cfg.polled && !core.bare() && core.assigned_irq_remote
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        // An echo is answered in the receive softirq: with `idle_softirq_echo` its
        // interrupt wakes no task and the guest stays in its idle loop.
        core.vcpus[0].device_irq_stays_idle = core.idle_softirq_echo;
        core.q
            .schedule_in(self.cfg.outside_ns / 2, Ev::Workload(ARRIVE, 0))?;
        if self.cfg.polled {
            Self::spin(core);
        }
        if self.remote_irq(core) {
            self.irq_cpu.idle(core);
        }
        core.dispatch(0)
    }

    /// The NIC polling thread spins until [`Core::end_spin`] ends the item.
    fn spin(core: &mut Core) {
        core.vcpus[0].work.push_back(Work {
            ns: Nanos::MAX / 4,
            cat: Cat::Poll,
            tag: crate::host::Tag::App(RX_SPIN),
        });
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        match tag {
            ARRIVE => {
                self.arrived = core.now();
                if self.cfg.polled {
                    // The spinning thread sees the descriptor at its next check.
                    let notice = core.costs.poll_notice_ns;
                    if !core.end_spin(0, RX_SPIN, notice)? {
                        core.metrics.count("ping_poll_misses");
                    }
                } else if core.bare() {
                    core.deliver(0, device_irq(core), None)?;
                } else {
                    // The assigned NIC interrupts the host first, which injects it (in
                    // the westmere-2012 era from the IRQ thread: one more switch).
                    let mut ns = core.costs.host_irq_ns;
                    if self.remote_irq(core) {
                        // On a CPU of its own, idle since the last injection.
                        ns += self.irq_cpu.wake(core);
                    }
                    if core.assigned_irq_thread {
                        ns += core.costs.context_switch_ns;
                        core.metrics.count("assigned_irq_thread_switches");
                    }
                    core.q.schedule_in(ns, Ev::Workload(INJECT, 0))?;
                }
            }
            INJECT => {
                if self.remote_irq(core) {
                    // The IRQ thread has injected; its CPU has nothing else to run.
                    self.irq_cpu.idle(core);
                }
                core.deliver(0, device_irq(core), None)?;
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match hook {
            Hook::Irq(0, _) | Hook::App(0, RX_SPIN) => core.vcpus[0]
                .work
                .push_back(Work::app(self.cfg.guest_ns, REPLY)),
            Hook::App(0, REPLY) if self.cfg.tx_exit && !core.bare() => {
                let ns = core.costs.exit_roundtrip_ns + core.costs.wrmsr_exit_ns;
                let kick = Work {
                    ns,
                    cat: Cat::Exit,
                    tag: crate::host::Tag::App(TX_DONE),
                };
                core.vcpus[0].work.push_front(kick);
            }
            Hook::App(0, REPLY | TX_DONE) => {
                let rtt = core.now() - self.arrived + self.cfg.outside_ns;
                core.metrics.sample("ping_rtt_ns", rtt);
                core.q
                    .schedule_in(self.cfg.outside_ns, Ev::Workload(ARRIVE, 0))?;
                if self.cfg.polled {
                    Self::spin(core);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Running synchronous writer (vCPU 0) with the block path of `mode`.
#[derive(Debug, Clone)]
pub struct SyncWrite {
    cfg: SyncWriteConfig,
    started: Nanos,
}

impl SyncWrite {
    /// Build.
    #[must_use]
    pub fn new(cfg: SyncWriteConfig) -> Self {
        Self { cfg, started: 0 }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.vcpus[0]
            .work
            .push_back(Work::app(self.cfg.submit_ns, SUBMIT));
        if self.cfg.mode == PathMode::Polling && core.vcpus.len() > 1 {
            // The guest polling thread owns vCPU 1 for the whole run.
            core.vcpus[1].work.push_back(Work {
                ns: Nanos::MAX / 4,
                cat: Cat::Poll,
                tag: crate::host::Tag::Plain,
            });
        }
        core.dispatch(0)?;
        core.dispatch(1)
    }

    fn signal_ns(&self, core: &Core, sleeping_thread: bool) -> Nanos {
        if self.cfg.mode == PathMode::Polling {
            core.costs.poll_notice_ns
        } else if sleeping_thread {
            // ioeventfd signal wakes the host I/O thread: kick plus scheduler wakeup.
            core.costs.kick_ns + core.costs.sched_wakeup_ns
        } else {
            0
        }
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        match tag {
            HOST_START => {
                core.metrics.add("host_io_ns", self.cfg.host_ns);
                core.q.schedule_in(
                    self.cfg.host_ns + self.cfg.device_ns,
                    Ev::Workload(HOST_DONE, 0),
                )?;
            }
            HOST_DONE if self.cfg.mode == PathMode::Polling => {
                core.q
                    .schedule_in(core.costs.poll_notice_ns, Ev::Workload(GUEST_SEEN, 0))?;
            }
            HOST_DONE => core.deliver(0, device_irq(core), None)?,
            GUEST_SEEN => core.send_ipi(1, 0, IrqSrc::Resched { from: 1 })?,
            _ => {}
        }
        Ok(())
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match hook {
            Hook::App(0, SUBMIT) => {
                self.started = core.now() - self.cfg.submit_ns;
                core.metrics.count("writes");
                let bare = core.bare();
                if self.cfg.mode == PathMode::Exits {
                    // Doorbell: an exit in a VM (ioeventfd), a posted MMIO write on bare metal.
                    let ns = if bare {
                        core.costs.native_msr_ns
                    } else {
                        core.costs.exit_roundtrip_ns + core.costs.wrmsr_exit_ns
                    };
                    let cat = if bare { Cat::Guest } else { Cat::Exit };
                    core.vcpus[0].work.push_front(Work {
                        ns,
                        cat,
                        tag: crate::host::Tag::Plain,
                    });
                }
                // On bare metal the controller is reached directly; in a VM the host side
                // has to notice: a sleeping I/O thread wakes, or the polling thread sees it.
                let d = if bare { 0 } else { self.signal_ns(core, true) };
                if bare {
                    // The writer sleeps in io_schedule() until the completion interrupt:
                    // an I/O waiter on its CPU for the idle governor.
                    let p = core.vcpus[0].pcpu;
                    core.pcpus[p].iowait += 1;
                }
                core.q.schedule_in(d, Ev::Workload(HOST_START, 0))?;
            }
            Hook::Irq(0, _) => {
                if core.bare() {
                    let p = core.vcpus[0].pcpu;
                    core.pcpus[p].iowait = core.pcpus[p].iowait.saturating_sub(1);
                }
                core.vcpus[0]
                    .work
                    .push_back(Work::app(self.cfg.complete_ns, DONE));
            }
            Hook::App(0, DONE) => {
                core.metrics
                    .sample("write_latency_ns", core.now() - self.started);
                core.vcpus[0]
                    .work
                    .push_back(Work::app(self.cfg.submit_ns, SUBMIT));
            }
            _ => {}
        }
        Ok(())
    }
}
