//! The vCPU run loop shared by the measurements: run until the guest reports DONE, turning
//! faults and failed entries into errors and passing every other exit to the caller.

use crate::error::{Error, Result};
use crate::layout::port;
use crate::watchdog::Watchdog;
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::time::Duration;

/// What the caller wants after an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Re-enter the guest.
    Continue,
    /// Stop running (as if the guest had reported DONE).
    Stop,
}

/// Run `vcpu` until the guest writes [`port::DONE`], at most `max_exits` exits and at most
/// `timeout` of wall time (enforced by a [`Watchdog`] even while the vCPU is inside the
/// kernel). Returns the number of exits to userspace seen.
///
/// # Errors
/// [`Error::Guest`] on a guest exception, shutdown, failed entry or an exit the caller
/// rejects; [`Error::Kvm`] if `KVM_RUN` fails; whatever `on_exit` returns.
pub fn run_until_done(
    vcpu: &mut VcpuFd,
    max_exits: u64,
    timeout: Duration,
    mut on_exit: impl FnMut(VcpuExit<'_>) -> Result<Next>,
) -> Result<u64> {
    let watchdog = Watchdog::arm(timeout);
    for count in 1..=max_exits {
        let exit = match vcpu.run() {
            Ok(exit) => exit,
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                if watchdog.fired() {
                    return Err(Error::Timeout("the guest (vCPU stuck without exits)"));
                }
                continue;
            }
            Err(e) => return Err(Error::kvm("KVM_RUN")(e)),
        };
        match exit {
            VcpuExit::IoOut(port::DONE, _) => return Ok(count),
            VcpuExit::IoOut(port::FAULT, data) => {
                let vector = data.first().copied().unwrap_or(0xff);
                return Err(Error::Guest(format!("exception, vector {vector:#x}")));
            }
            VcpuExit::Shutdown => return Err(Error::Guest("shutdown (triple fault)".into())),
            VcpuExit::FailEntry(reason, cpu) => {
                return Err(Error::Guest(format!(
                    "entry failed, reason {reason:#x} on cpu {cpu}"
                )))
            }
            VcpuExit::InternalError => return Err(Error::Guest("KVM internal error".into())),
            other => {
                if on_exit(other)? == Next::Stop {
                    return Ok(count);
                }
            }
        }
    }
    Err(Error::Guest(format!("no DONE after {max_exits} exits")))
}

/// Describe an exit the caller did not expect, as an error.
#[must_use]
pub fn unexpected(exit: &VcpuExit<'_>) -> Error {
    Error::Guest(format!("unexpected exit {exit:?}"))
}
