//! The thread that runs a vCPU until DONE, pinned to a host CPU, with a bounded join.

use crate::error::{Error, Result};
use crate::host::{pin_to, thread_cpu_ns};
use crate::layout::port;
use crate::runner::{run_until_done, unexpected, Next};
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exits to userspace allowed for a vCPU that only reports READY and DONE.
const MAX_EXITS: u64 = 1_000_000;
/// Longest a wake cell's target vCPU may run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// What a finished vCPU thread reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VcpuDone {
    /// CPU time of the thread.
    pub(crate) cpu_ns: u64,
}

/// A running vCPU thread.
pub(crate) struct Running {
    ready: Arc<AtomicBool>,
    done: mpsc::Receiver<Result<VcpuDone>>,
}

/// Run `vcpu` on `cpu` until it reports DONE; READY sets a flag; any other exit is an error.
pub(crate) fn spawn(mut vcpu: VcpuFd, cpu: usize) -> Running {
    let ready = Arc::new(AtomicBool::new(false));
    let (tx, done) = mpsc::channel();
    let flag = Arc::clone(&ready);
    std::thread::spawn(move || {
        let result = (|| {
            pin_to(cpu)?;
            let cpu0 = thread_cpu_ns();
            run_until_done(&mut vcpu, MAX_EXITS, RUN_TIMEOUT, |exit| match exit {
                VcpuExit::IoOut(port::READY, _) => {
                    flag.store(true, Ordering::Release);
                    Ok(Next::Continue)
                }
                other => Err(unexpected(&other)),
            })?;
            Ok(VcpuDone {
                cpu_ns: thread_cpu_ns() - cpu0,
            })
        })();
        // The receiver may have given up after a timeout; nothing to do then.
        let _ = tx.send(result);
    });
    Running { ready, done }
}

impl Running {
    /// Wait (bounded) for the guest's READY.
    pub(crate) fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        while !self.ready.load(Ordering::Acquire) {
            if let Ok(result) = self.done.try_recv() {
                result?;
                return Err(Error::Guest("finished before READY".into()));
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout("the guest to become ready"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Wait (bounded) for the thread to finish.
    pub(crate) fn join(self, timeout: Duration) -> Result<VcpuDone> {
        self.done
            .recv_timeout(timeout)
            .map_err(|_| Error::Timeout("the vCPU thread to finish"))?
    }
}
