//! One connection's side of the SIGBUS protection, for any device: its registered guest
//! memory, the handle that ends its daemon, and whether (and what) the frontend revoked.
//! A device calls [`Revocation::update`] from `update_memory`, [`Revocation::check`] after
//! each worker event, and the server hands it the daemon's shutdown handle.

use super::{Registration, Revoked};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost_user_backend::ShutdownHandle;
use vm_memory::GuestMemoryMmap;

/// What a connection does when its frontend truncates guest memory it handed over: the
/// first check that sees it records it once and shuts the connection down.
#[derive(Default)]
pub struct Revocation {
    registration: Mutex<Registration>,
    shutdown: Mutex<Option<ShutdownHandle>>,
    seen: AtomicBool,
    what: Mutex<Option<Revoked>>,
}

impl Revocation {
    /// Nothing registered yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The connection's memory is now `mem`: register it (a failure is logged, not fatal: a
    /// frontend that truncates unregistered memory still kills the process).
    pub fn update(&self, mem: Arc<GuestMemoryMmap>) {
        let mut reg = lock(&self.registration);
        if let Err(e) = reg.update(mem) {
            tracing::warn!(
                error = %e,
                "guest memory not protected against truncation by the frontend"
            );
        }
    }

    /// The handle that ends this connection's daemon; if the revocation was already seen,
    /// the connection is shut down at once.
    pub fn set_shutdown(&self, handle: Option<ShutdownHandle>) {
        *lock(&self.shutdown) = handle;
        if self.seen.load(Ordering::Acquire) {
            self.shut_down();
        }
    }

    /// After a worker event: if a mapping of this connection was revoked, record it once and
    /// shut the connection down. One atomic load while nothing in the process is revoked.
    pub fn check(&self) {
        if !super::TABLE.any_revoked() || self.seen.load(Ordering::Acquire) {
            return;
        }
        let Some(what) = lock(&self.registration).revoked() else {
            return;
        };
        if self.seen.swap(true, Ordering::AcqRel) {
            return;
        }
        *lock(&self.what) = Some(what);
        self.shut_down();
    }

    /// The region the frontend truncated, once [`Revocation::check`] saw it.
    #[must_use]
    pub fn revoked(&self) -> Option<Revoked> {
        *lock(&self.what)
    }

    fn shut_down(&self) {
        if let Some(h) = lock(&self.shutdown).as_ref() {
            h.shutdown();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
