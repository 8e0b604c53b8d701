//! The process-wide SIGBUS handler: a fault inside a registered guest memory mapping (the
//! frontend shrank the file under it) gets the mapping replaced by private anonymous zero
//! memory and marked revoked, and the access completes; any other SIGBUS goes
//! to the disposition that was there before (by default: the process dies, as without this
//! handler).
//!
//! Everything the handler does is async-signal-safe: atomic loads and stores on the static
//! [`super::TABLE`], `mmap`, `sigaction` and `raise` (system calls), and reading the
//! previous disposition, written once before the handler was installed.

use super::TABLE;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The disposition SIGBUS had before [`install`] (written once, before the handler runs).
static PREVIOUS: OnceLock<Previous> = OnceLock::new();
/// Page size, read at install time (sysconf is not async-signal-safe).
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);
/// The outcome of the one installation (`Ok` or the OS error number).
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// A `libc::sigaction` that can live in a static.
struct Previous(libc::sigaction);

// SAFETY: plain data (a handler address, flags and a signal mask), written once before the
// handler is installed and only read afterwards.
unsafe impl Sync for Previous {}
// SAFETY: as above; nothing in it refers to thread-local state.
unsafe impl Send for Previous {}

/// Install the handler once per process (later calls return the first call's result).
///
/// # Errors
/// When `sigaction` fails.
pub fn install() -> io::Result<()> {
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: sysconf with a valid name has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(page) = usize::try_from(page) {
            if page.is_power_of_two() {
                PAGE_SIZE.store(page, Ordering::Relaxed);
            }
        }
        // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags, empty mask).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying the current disposition into a valid, writable sigaction.
        if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        // The previous disposition is stored before the handler can run, and never changed.
        let _ = PREVIOUS.set(Previous(old));
        // SAFETY: as above, an all-zero sigaction is valid; fields are set below.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_sigbus;
        new.sa_sigaction = f as usize;
        // SA_ONSTACK: a thread with an alternate signal stack (Rust's main thread has one for
        // stack overflows) uses it; SA_SIGINFO: the handler gets the fault address.
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `new.sa_mask` is a valid sigset owned by this frame.
        unsafe { libc::sigemptyset(&mut new.sa_mask) };
        // SAFETY: `new` is fully initialized and `on_sigbus` has the SA_SIGINFO signature;
        // the old disposition is not needed (already read above).
        if unsafe { libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(())
    });
    result.map_err(io::Error::from_raw_os_error)
}

/// The SIGBUS handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; the pointer libc returns is valid for this thread. It is
    // saved and restored so the interrupted code does not see the handler's mmap errors.
    let errno = unsafe { *libc::__errno_location() };
    let handled = !info.is_null() && repair(info);
    if !handled {
        chain(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Replace the faulting page of a registered mapping; `false` when the fault is not ours.
fn repair(info: *mut libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler (checked non-null).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code <= 0 {
        return false; // sent by kill/tgkill/sigqueue, not a memory fault
    }
    let Some((slot, m)) = TABLE.find(addr) else {
        return false;
    };
    // The whole registered mapping at once: the connection is going away and completes
    // nothing from now on, so its other pages need not stay the frontend's, and one
    // replacement costs one memory map entry where page after page would split the mapping
    // into thousands (and could run into vm.max_map_count). If that fails, the faulting page.
    let page = PAGE_SIZE.load(Ordering::Relaxed);
    if !zero_fill(m.start, m.len) && !zero_fill(addr & !(page - 1), page) {
        return false;
    }
    TABLE.mark_revoked(slot);
    true
}

/// Map private anonymous zero memory over `[addr, addr + len)`; `true` on success.
fn zero_fill(addr: usize, len: usize) -> bool {
    // SAFETY: the range lies inside a guest memory mapping registered in TABLE, which stays
    // mapped while registered (the registration holds the mapping's owner; see
    // `Registration`), and the faulting thread is using that mapping right now, so the range
    // is not unmapped or reused under this call. MAP_FIXED replaces those pages only: the
    // mapping keeps its size and protection, reads now see zeros instead of faulting, and
    // writes go to memory private to this process (the frontend already gave these pages
    // up). mmap is a plain system call, safe in a signal handler.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    p as usize == addr
}

/// Hand a SIGBUS that is not ours to the previous disposition.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(Previous(prev)) = PREVIOUS.get() else {
        return;
    };
    match prev.sa_sigaction {
        libc::SIG_DFL => {
            // Put the default back and re-raise: SIGBUS is blocked while this handler runs,
            // so the raised signal is delivered on return and ends the process as it would
            // have without this handler (a fault would also recur at the same instruction).
            // SAFETY: `prev` is a valid sigaction read from the kernel; sigaction and raise
            // are async-signal-safe.
            unsafe {
                libc::sigaction(sig, prev, std::ptr::null_mut());
                libc::raise(sig);
            }
        }
        libc::SIG_IGN => {
            // An ignored SIGBUS sent by another process stays ignored; for a fault the kernel
            // forces the default action when it recurs.
            // SAFETY: as above.
            if unsafe { (*info).si_code } > 0 {
                // SAFETY: as above.
                unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
            }
        }
        f if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so this is its
            // address with that signature; it gets the arguments the kernel gave us.
            let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(f) };
            h(sig, info, ctx);
        }
        f => {
            // SAFETY: a handler installed without SA_SIGINFO takes the signal number only.
            let h: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(f) };
            h(sig);
        }
    }
}
