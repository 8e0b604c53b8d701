//! One frontend connection of a vhost-user device: rust-vmm's `VhostUserDaemon` behind the
//! message [`crate::guard`], and its teardown without leaks.
//!
//! [`GuardedDaemon::start`] creates the daemon for a fresh backend, lets the device register
//! its own fds (hold timers, completion fds) in the worker epolls, connects the daemon to a
//! private [`Rendezvous`] socket and starts the [`Guard`] between the frontend and it.
//! [`GuardedDaemon::wait`] serves until the frontend goes away (or a shutdown is requested);
//! [`GuardedDaemon::finish`] closes the guard, drops the daemon (which sends the exit events
//! and joins the worker threads) and closes the exit-event fds the library leaks
//! ([`ExitEvents`]).

use crate::guard::rules::Limits;
use crate::guard::{Guard, Rendezvous};
use crate::inflight::InflightState;
use crate::GuestMem;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, PoisonError};
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VhostUserDaemon, VringRwLock};
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

/// Errors of a connection's setup.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// vhost-user-backend refused (its error is neither `Sync` nor `std::error::Error`; its
    /// text is kept).
    #[error("cannot start the vhost-user device: {0}")]
    Daemon(String),
    /// A system call failed (epoll registration, sockets, the guard thread).
    #[error("system call failed")]
    Io(#[from] io::Error),
}

fn daemon_error(e: vhost_user_backend::Error) -> DaemonError {
    DaemonError::Daemon(e.to_string())
}

/// The exit events a backend hands to vhost-user-backend's worker loops
/// (`VhostUserBackend::exit_event`). The library registers each consumer with `into_raw_fd`
/// and never closes it; this keeps the raw fds so they can be closed once the daemon and all
/// its workers are gone, so reconnects do not leak descriptors.
#[derive(Debug, Default)]
pub struct ExitEvents {
    fds: Mutex<Vec<RawFd>>,
}

impl ExitEvents {
    /// A new exit event (call from `VhostUserBackend::exit_event`).
    #[must_use]
    pub fn create(&self) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) =
            new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        self.fds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(consumer.as_raw_fd());
        Some((consumer, notifier))
    }

    /// Close every exit-event fd created so far.
    ///
    /// # Safety
    /// The daemon these events were handed to, and all its worker threads and their epoll
    /// fds, must be gone: nothing else may refer to the descriptors any more.
    pub unsafe fn close_all(&self) {
        let fds = std::mem::take(&mut *self.fds.lock().unwrap_or_else(PoisonError::into_inner));
        for fd in fds {
            // SAFETY: the fd was created by `create` and handed to vhost-user-backend, which
            // only registered it with `into_raw_fd` and never closes it; the caller
            // guarantees the daemon and its workers are gone, so nothing else uses it.
            unsafe { libc::close(fd) };
        }
    }
}

/// A backend whose exit events are kept in an [`ExitEvents`].
pub trait HasExitEvents {
    /// The backend's exit events.
    fn exit_events(&self) -> &ExitEvents;
}

/// What a connection is built from.
pub struct Connection<B> {
    /// Daemon name (for vhost-user-backend's thread names and logs).
    pub name: &'static str,
    /// The device of this connection.
    pub backend: Arc<B>,
    /// Its guest memory.
    pub mem: GuestMem,
    /// What the guard allows.
    pub limits: Limits,
    /// INFLIGHT_SHMFD state, if the device offers it.
    pub inflight: Option<Arc<InflightState>>,
}

/// A running connection: the daemon and its guard.
pub struct GuardedDaemon<B>
where
    B: VhostUserBackend<Bitmap = (), Vring = VringRwLock<GuestMem>> + HasExitEvents + 'static,
{
    daemon: VhostUserDaemon<Arc<B>>,
    guard: Guard,
    backend: Arc<B>,
}

impl<B> GuardedDaemon<B>
where
    B: VhostUserBackend<Bitmap = (), Vring = VringRwLock<GuestMem>> + HasExitEvents + 'static,
{
    /// Create the daemon, let `register` add the device's fds to its worker epolls (it gets
    /// the daemon, e.g. for `get_epoll_handlers`), and start serving `frontend` through the
    /// guard.
    ///
    /// # Errors
    /// When the daemon, the rendezvous socket or the guard cannot be set up, or `register`
    /// fails.
    pub fn start<F>(
        frontend: UnixStream,
        c: Connection<B>,
        register: F,
    ) -> Result<Self, DaemonError>
    where
        F: FnOnce(&mut VhostUserDaemon<Arc<B>>) -> io::Result<()>,
    {
        let mut daemon = VhostUserDaemon::new(c.name.to_owned(), Arc::clone(&c.backend), c.mem)
            .map_err(daemon_error)?;
        register(&mut daemon)?;
        let rendezvous = Rendezvous::new()?;
        let path = rendezvous.path().to_string_lossy().into_owned();
        daemon.start_client(&path).map_err(daemon_error)?;
        let guard = Guard::spawn(frontend, rendezvous.accept_own()?, c.limits, c.inflight)?;
        Ok(Self {
            daemon,
            guard,
            backend: c.backend,
        })
    }

    /// A handle that stops the daemon from another thread.
    #[must_use]
    pub fn shutdown_handle(&self) -> Option<ShutdownHandle> {
        self.daemon.shutdown_handle()
    }

    /// Ask the daemon to stop (e.g. the server was stopped while the connection started).
    pub fn request_shutdown(&self) {
        self.daemon.request_shutdown();
    }

    /// Serve until the frontend disconnects, a message is refused, or a shutdown is
    /// requested; logs how it ended.
    pub fn wait(&mut self) {
        match self.daemon.wait() {
            Ok(())
            | Err(vhost_user_backend::Error::HandleRequest(
                vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
            )) => tracing::info!("frontend disconnected"),
            Err(e) => tracing::warn!(error = %e, "frontend connection ended with an error"),
        }
    }

    /// Tear the connection down: close the guard, drop the daemon (exit events, worker
    /// threads joined) and close the exit-event fds.
    pub fn finish(self) {
        let Self {
            daemon,
            guard,
            backend,
        } = self;
        guard.close();
        drop(daemon); // sends the exit events and joins the worker threads
                      // SAFETY: the daemon was just dropped, which joined every worker thread and closed
                      // their epoll fds; the exit events were handed to nobody else.
        unsafe { backend.exit_events().close_all() };
    }
}

/// Wait up to `timeout_ms` for `fd` to become readable (an accept loop that checks for a
/// stop request between waits). An interrupted wait is `false`.
///
/// # Errors
/// When `poll` fails otherwise.
pub fn readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd and the count is 1.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0 && pfd.revents & libc::POLLIN != 0)
}
