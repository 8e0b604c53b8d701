//! A bound on how long a vCPU may stay inside `KVM_RUN` without exiting to userspace. After
//! the timeout, a helper thread signals the vCPU thread (SIGUSR1 with an empty handler and no
//! SA_RESTART), so `KVM_RUN` returns EINTR and the run loop can give up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SIGNAL: libc::c_int = libc::SIGUSR1;

extern "C" fn on_signal(_: libc::c_int) {}

fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: an all-zero sigaction is valid (empty mask, no flags); we set a handler that
        // does nothing, which is async-signal-safe.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        // SAFETY: `sa` is initialised; the old action is not needed (null).
        let rc = unsafe { libc::sigaction(SIGNAL, &sa, std::ptr::null_mut()) };
        if rc != 0 {
            tracing::warn!("installing the SIGUSR1 handler failed; KVM_RUN cannot be bounded");
        }
    });
}

/// Armed while the calling thread runs a vCPU; disarmed (and its thread joined) on drop.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Arm for the calling thread.
    #[must_use]
    pub fn arm(timeout: Duration) -> Self {
        install_handler();
        // SAFETY: pthread_self has no preconditions.
        let target = unsafe { libc::pthread_self() };
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let (s, f) = (Arc::clone(&stop), Arc::clone(&fired));
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            while !s.load(Ordering::Acquire) {
                if start.elapsed() >= timeout {
                    f.store(true, Ordering::Release);
                    // SAFETY: the target thread is alive: it joins this thread (Drop) before it
                    // can exit, and `stop` is checked before every signal.
                    unsafe { libc::pthread_kill(target, SIGNAL) };
                    std::thread::sleep(Duration::from_millis(50));
                } else {
                    std::thread::sleep(Duration::from_millis(5).min(timeout));
                }
            }
        });
        Self {
            stop,
            fired,
            handle: Some(handle),
        }
    }

    /// The timeout has passed.
    #[must_use]
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
