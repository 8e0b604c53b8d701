//! The client's main loop over its ports, one thread, shaped like a guest's NAPI driver.
//!
//! Each round receives up to `budget` frames per port (callbacks off), answers requests,
//! reclaims transmitted buffers and sends what the workload wants now. When a round finds
//! nothing to do, interrupt mode re-arms the RX callbacks with EVENT_IDX (and the TX
//! callback, delayed, on a port whose ring is full), re-checks for a race, and sleeps on the
//! call eventfds until a signal or the next paced send; poll mode spins instead. A run has a
//! warm-up, a measured window, and a drain (new traffic stops, in-flight frames may
//! arrive), all bounded in time. Every frame of a run (path probes, bulk, requests and
//! responses, the wire sender's) is sent in the run's encapsulation ([`RunConfig::frames`]);
//! the receivers take either.

mod engine;
pub mod flows;
pub mod halt;
pub mod halves;
pub mod msgpath;
mod os;
mod paths;
pub mod report;
pub mod wire;

use crate::frame::Encap;
use crate::port::{NetPort, PortError};
use crate::workload::{Workload, WorkloadError};
use hdrhistogram::Histogram;
pub use paths::{await_paths, Hellos};
pub use report::{Report, Snapshot};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workload does not fit.
    #[error("workload")]
    Workload(#[from] WorkloadError),
    /// A port failed (broken ring, vanished backend).
    #[error("port {index}")]
    Port {
        /// Port index.
        index: usize,
        /// The port error.
        #[source]
        source: PortError,
    },
    /// The latency histogram could not be created.
    #[error("latency histogram")]
    Histogram(#[from] hdrhistogram::CreationError),
    /// Frames sent between two ports never arrived.
    #[error("no frame from port {from} reached port {to} in {PATH_TIMEOUT:?}")]
    NoPath {
        /// Sending port.
        from: usize,
        /// Receiving port.
        to: usize,
    },
    /// Sleeping on the eventfds failed.
    #[error("waiting for call eventfds")]
    Wait(#[source] std::io::Error),
    /// A wire sender needs a bulk stream.
    #[error("a wire sender needs `stream` or `mix`")]
    WireSender,
    /// The wire sender's (or the responder's) thread could not start.
    #[error("starting the wire sender")]
    Thread(#[source] std::io::Error),
    /// The wire sender's (or the responder's) thread panicked.
    #[error("the wire sender or the responder panicked")]
    WirePanicked,
}

/// Which ports a round of an interrupt-mode client receives from (`--napi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Napi {
    /// `all`: every round looks at every port's receive ring, whichever signal woke the
    /// client (frames a moderated queue holds back without a signal are read as soon as
    /// any other queue's signal, or a send timer, wakes the client).
    #[default]
    All,
    /// `queue`: as Linux virtio-net, one NAPI context per receive queue: a queue is polled
    /// only after its own interrupt (`skb_recv_done` schedules it), for as long as it fills
    /// its budget, and completes (callbacks re-enabled, a raced frame schedules it again)
    /// when a poll finds less; a queue whose frames the device holds is not looked at until
    /// the device signals it.
    Queue,
}

impl Napi {
    /// Name on the command line and in reports.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Queue => "queue",
        }
    }

    /// Parse `all` or `queue`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" => Some(Self::All),
            "queue" => Some(Self::Queue),
            _ => None,
        }
    }
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RunError>;

/// How the client learns that frames arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Sleep on the call eventfds between rounds (a guest's NAPI with interrupts).
    Interrupt,
    /// Never sleep; spin over the used rings (a polling driver, like DPDK's).
    Poll,
}

impl Mode {
    /// Name on the command line and in reports.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Poll => "poll",
        }
    }

    /// Parse `interrupt` or `poll`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "interrupt" | "irq" => Some(Self::Interrupt),
            "poll" => Some(Self::Poll),
            _ => None,
        }
    }
}

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Traffic.
    pub workload: Workload,
    /// Interrupt or poll mode.
    pub mode: Mode,
    /// Unmeasured time at the start.
    pub warmup: Duration,
    /// Measured window.
    pub measure: Duration,
    /// Longest wait for in-flight frames after the window.
    pub drain_max: Duration,
    /// Frames received per port per round (NAPI weight).
    pub budget: usize,
    /// Which ports a round receives from in interrupt mode ([`Napi`]).
    pub napi: Napi,
    /// Compare every payload byte (header, length and trailer are always checked).
    pub verify_payload: bool,
    /// Pin the client thread to this CPU.
    pub cpu: Option<usize>,
    /// At most this many bulk frames sent and not yet received (a receive window, as TCP
    /// keeps); `None`: unlimited, the peer drops what the receiver has no buffers for.
    pub bulk_window: Option<u64>,
    /// The backend's process: its CPU time (all threads) is sampled at the window's edges,
    /// giving backend CPU per packet; `None` when the backend is not a process of its own.
    pub backend_pid: Option<u32>,
    /// Send the bulk stream from a thread of its own ([`wire`]: another host on the wire)
    /// pinned to this CPU (`Some(None)`: unpinned), so that the client thread only receives
    /// it; `None`: the client thread sends it. `stream` or `mix`; in the mix on two ports
    /// the wire also answers the client's requests (its port 0 is the far end); the mix on
    /// three ports needs it, its requests answered by a responder on port 2.
    pub wire_sender: Option<Option<usize>>,
    /// Pin the responder of the three-port mix ([`wire::respond`], port 2's thread) to this
    /// CPU; `None`: unpinned.
    pub responder_cpu: Option<usize>,
    /// Encapsulation of every frame the run sends (`--frames`; [`run`] sets it on every
    /// port). `raw` by default, so earlier numbers stay comparable.
    pub frames: Encap,
    /// The client's halt polling in interrupt mode ([`halt`], `--halt-poll`); `None`: it
    /// sleeps at once (the default, so that earlier numbers stay comparable).
    pub halt_poll: Option<vmirq_policy::spec::WaitSpec>,
}

impl RunConfig {
    /// Defaults: 0.5 s warm-up, 2 s measured, 0.5 s drain, budget 64, payload verified.
    #[must_use]
    pub const fn new(workload: Workload, mode: Mode) -> Self {
        Self {
            workload,
            mode,
            warmup: Duration::from_millis(500),
            measure: Duration::from_secs(2),
            drain_max: Duration::from_millis(500),
            budget: 64,
            napi: Napi::All,
            verify_payload: true,
            cpu: None,
            bulk_window: None,
            backend_pid: None,
            wire_sender: None,
            responder_cpu: None,
            frames: Encap::Raw,
            halt_poll: None,
        }
    }
}

/// Flow id of the path probes of [`await_paths`].
pub const HELLO_FLOW: u8 = 0;
/// Flow id of the bulk stream.
pub const BULK_FLOW: u8 = 1;
/// Flow id of the request/response transactions.
pub const RR_FLOW: u8 = 2;

pub(crate) fn port_err(index: usize) -> impl FnOnce(PortError) -> RunError {
    move |source| RunError::Port { index, source }
}

/// How long [`await_paths`] tries before giving up.
const PATH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// Run `cfg` over `ports` (connected, in the workload's port order) in the calling thread.
///
/// # Errors
/// [`RunError`].
pub fn run(ports: &mut [NetPort], cfg: &RunConfig) -> Result<Report> {
    cfg.workload.validate()?;
    cfg.workload.check_encap(cfg.frames)?;
    cfg.workload
        .check_ports(ports.len(), cfg.wire_sender.is_some())?;
    for p in ports.iter_mut() {
        p.set_encap(cfg.frames);
    }
    if let Some(cpu) = cfg.cpu {
        os::pin_to(cpu);
    }
    os::precise_timers();
    let hellos = await_paths(ports)?;
    // 1 ns .. 10 s at 3 significant digits.
    let rtt = Histogram::new_with_bounds(1, 10_000_000_000, 3)?;
    let msgs = msgpath::MsgPath::new(ports.len())?;
    let Some(wire_cpu) = cfg.wire_sender else {
        return engine::Engine::new(ports, cfg, (rtt, msgs), hellos, None).run();
    };
    let (frame_len, rate) = match cfg.workload {
        Workload::Stream {
            frame_len,
            rate_pps,
        } => (frame_len, rate_pps),
        Workload::Mix {
            bulk_len,
            bulk_rate_pps,
            ..
        } => (bulk_len, bulk_rate_pps),
        Workload::Rr { .. } => return Err(RunError::WireSender),
    };
    let (sender, client) = ports.split_at_mut(1);
    let sender = &mut sender[0];
    // The mix on three ports: the client has port 1 only, port 2 answers on its own thread;
    // on two ports the wire also answers the client's requests (same queue).
    let mix = matches!(cfg.workload, Workload::Mix { .. });
    let (client, responder) = if mix && client.len() == 2 {
        let (c, r) = client.split_at_mut(1);
        (c, r.first_mut())
    } else {
        (client, None)
    };
    let answer = mix && client.len() == 1 && responder.is_none();
    let slack = u64::from(sender.tx_in_flight()) + sender.tx_free() as u64;
    let far = FarSide {
        flow: flows::BulkFlow::new(BULK_FLOW, 0, 1, frame_len, rate, slack),
        wire_cpu,
        answer,
        responder,
    };
    with_far_side(sender, client, far, cfg, (rtt, msgs), hellos)
}

/// The threads that play the other hosts when the bulk comes from the wire.
struct FarSide<'a> {
    /// The stream the wire sends (port 0 -> the client's first port).
    flow: flows::BulkFlow,
    /// CPU of the wire's thread.
    wire_cpu: Option<usize>,
    /// The wire answers the client's requests (the mix on two ports).
    answer: bool,
    /// The responder's port (the mix on three ports).
    responder: Option<&'a mut NetPort>,
}

/// Run the client thread's engine over `client` while the wire sends from `sender` (and
/// the responder answers on its port), then stop them and join them.
fn with_far_side(
    sender: &mut NetPort,
    client: &mut [NetPort],
    far: FarSide<'_>,
    cfg: &RunConfig,
    stats: (Histogram<u64>, msgpath::MsgPath),
    hellos: Hellos,
) -> Result<Report> {
    let dst = client[0].mac();
    let remote = far.responder.as_ref().map_or(sender.mac(), |p| p.mac());
    let FarSide {
        flow,
        wire_cpu,
        answer,
        responder,
    } = far;
    let shared = wire::WireShared::default();
    let pattern = crate::frame::Pattern::new();
    let quit = |shared: &wire::WireShared| {
        shared.stop.store(true, Ordering::Release);
        shared.quit.store(true, Ordering::Release);
    };
    std::thread::scope(|s| {
        // The responder first: if the wire's thread cannot start, it is told to quit.
        let responder = responder
            .map(|port| {
                std::thread::Builder::new()
                    .name("netload-responder".into())
                    .spawn_scoped(s, || {
                        wire::respond(port, dst, &pattern, &shared, cfg.responder_cpu)
                    })
            })
            .transpose()
            .map_err(RunError::Thread)?;
        let wire = std::thread::Builder::new()
            .name("netload-wire".into())
            .spawn_scoped(s, || {
                wire::send(sender, flow, dst, &pattern, &shared, wire_cpu, answer)
            })
            .map_err(|e| {
                quit(&shared);
                RunError::Thread(e)
            })?;
        let link = engine::WireLink {
            shared: &shared,
            remote,
        };
        let report = engine::Engine::new(client, cfg, stats, hellos, Some(link)).run();
        quit(&shared);
        let sent = wire.join().map_err(|_| RunError::WirePanicked)?;
        let responded = responder
            .map(|r| r.join().map_err(|_| RunError::WirePanicked))
            .transpose()?;
        let report = report?;
        sent?;
        responded.transpose()?;
        Ok(report)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadError;

    #[test]
    fn a_workload_too_short_for_its_encapsulation_is_refused_before_anything_runs() {
        let w: Workload = "mix:1514@812744+64/200".parse().expect("valid raw");
        let mut cfg = RunConfig::new(w, Mode::Interrupt);
        cfg.frames = Encap::Udp;
        let e = run(&mut [], &cfg).expect_err("64-byte messages in udp frames");
        assert!(
            matches!(
                e,
                RunError::Workload(WorkloadError::TooShortFor {
                    len: 64,
                    encap: Encap::Udp,
                    min: 82
                })
            ),
            "{e:?}"
        );
        // Raw frames of 64 bytes are fine: the run goes on to count the ports.
        cfg.frames = Encap::Raw;
        let e = run(&mut [], &cfg).expect_err("no ports");
        assert!(
            matches!(e, RunError::Workload(WorkloadError::Ports { .. })),
            "{e:?}"
        );
    }
}
