//! Signal handling for a server process: SIGUSR1 calls a report (a device prints its
//! counters to stderr), SIGINT and SIGTERM call a stop (the server's `run` returns, and the
//! caller prints the final counters).
//!
//! Signals are blocked in the calling thread and every thread it spawns afterwards, and a
//! dedicated thread takes them with `sigwait`, so no code runs in signal-handler context.

use std::io;

/// Block SIGINT, SIGTERM and SIGUSR1 and start the thread that handles them: `report` on
/// every SIGUSR1, `stop` on the first SIGINT or SIGTERM (then the thread ends). Call this
/// before the server starts any thread.
///
/// # Errors
/// When the signal mask cannot be changed or the thread cannot be spawned.
pub fn install<R, S>(report: R, stop: S) -> io::Result<()>
where
    R: Fn() + Send + 'static,
    S: FnOnce() + Send + 'static,
{
    let set = signal_set();
    // SAFETY: `set` is an initialised sigset_t; the old-mask pointer may be null.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    std::thread::Builder::new()
        .name("vmirq-signals".to_owned())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is initialised and `sig` is a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                continue;
            }
            if sig == libc::SIGUSR1 {
                report();
            } else {
                stop();
                return;
            }
        })?;
    Ok(())
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset fully initialises the zeroed set before sigaddset uses it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}
