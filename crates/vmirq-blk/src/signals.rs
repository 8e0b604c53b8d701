//! Signal handling for a server process: SIGUSR1 prints the counters to stderr, SIGINT and
//! SIGTERM stop the server (its `run` returns, and the caller prints the final counters).
//!
//! Signals are blocked in the calling thread and every thread it spawns afterwards, and a
//! dedicated thread takes them with `sigwait`, so no code runs in signal-handler context.

use crate::counters::summary;
use crate::server::ServerHandle;
use std::io;

/// Block SIGINT, SIGTERM and SIGUSR1 and start the thread that handles them. Call this
/// before the server starts any thread.
///
/// # Errors
/// When the signal mask cannot be changed or the thread cannot be spawned.
pub fn install(handle: ServerHandle) -> io::Result<()> {
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
                eprint!("{}", summary(&handle.counters()));
            } else {
                handle.stop();
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
