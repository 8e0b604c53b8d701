//! Child processes that cannot outlive their owner: every process the harness starts (QEMU,
//! backends, the build script) gets `PR_SET_PDEATHSIG` = SIGKILL, so it dies with the thread
//! that started it even if that thread's owner is killed before any `Drop` runs, and waits
//! are bounded.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Make `cmd`'s process receive SIGKILL when the thread that spawns it exits.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // async-signal-safe prctl system call with constant arguments; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Wait up to `limit` for `child` to exit; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// Send `signal` to `child` (ignored if it has exited).
pub fn signal(child: &Child, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers; `pid` is our own child, not yet reaped (the
    // caller still owns the Child), so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// SIGKILL and reap `child`.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Find `name` on `PATH` (and in /usr/sbin, /sbin).
#[must_use]
pub fn find_program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            ["/usr/sbin", "/sbin"]
                .into_iter()
                .map(std::path::PathBuf::from),
        )
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
