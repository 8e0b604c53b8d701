//! The server: owns the disk and the counters, listens on the vhost-user socket and serves
//! one frontend connection at a time. Each connection gets a fresh device (queue engines,
//! policies, worker threads, inflight state); when the frontend goes away everything of that
//! connection is torn down (threads joined, fds closed, guest memory unmapped) and the next
//! connection is accepted on the same socket, unless `once` is set.
//!
//! The frontend's socket is served by the [`crate::guard`], which checks every message,
//! answers the INFLIGHT_SHMFD messages itself and passes the rest to vhost-user-backend's
//! daemon over a private socket.

use crate::backend::{BlkBackend, DeviceParams, GuestMem};
use crate::config::{DiskSpec, ServerConfig};
use crate::counters::{BlkQueueCounters, CounterSnapshot};
use crate::engine::{Dropped, EngineParts, QueueEngine};
use crate::guard::rules::Limits;
use crate::inflight::InflightState;
use crate::request::DiskGeometry;
use crate::storage::{Disk, FileDisk, NullDisk, RamDisk, StorageError};
use crate::virtio::{BlkConfig, SECTOR_SHIFT};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmirq_vhost::daemon::{Connection, DaemonError, GuardedDaemon};
use vmm_sys_util::epoll::EventSet;

/// Largest payload of one request (64 MiB); larger requests get IOERR.
pub const MAX_REQUEST_BYTES: u32 = 64 << 20;
/// Largest DISCARD / WRITE_ZEROES range advertised, in sectors (2 GiB).
pub const MAX_DISCARD_SECTORS: u32 = 1 << 22;
/// How often the accept loop checks for a stop request, in milliseconds.
const ACCEPT_POLL_MS: i32 = 100;

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The disk could not be opened.
    #[error("cannot open the disk")]
    Storage(#[from] StorageError),
    /// The socket could not be created.
    #[error("cannot listen on the vhost-user socket")]
    Listen(#[source] vhost::vhost_user::Error),
    /// The vhost-user daemon of a connection failed to start.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// A system call failed (timer, epoll registration, poll).
    #[error("system call failed")]
    Io(#[from] io::Error),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ServerError>;

/// A handle to stop a running server and read its counters from another thread.
#[derive(Clone)]
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    current: Arc<Mutex<Option<ShutdownHandle>>>,
    counters: Arc<Vec<Arc<BlkQueueCounters>>>,
    connections: Arc<AtomicU64>,
    serving: Arc<AtomicBool>,
    dropped: Arc<Mutex<Dropped>>,
}

impl ServerHandle {
    /// Ask the server to stop: the current connection is closed and `run` returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            h.shutdown();
        }
    }

    /// Counter values of every queue.
    #[must_use]
    pub fn counters(&self) -> Vec<CounterSnapshot> {
        self.counters.iter().map(|c| c.snapshot()).collect()
    }

    /// Whether a frontend is attached right now (false again only after its connection is
    /// fully torn down: worker threads joined, descriptors closed).
    #[must_use]
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    /// Handle the process's signals (see [`vmirq_vhost::signals`]): SIGUSR1 prints the
    /// counters to stderr, SIGINT and SIGTERM stop the server. Call before the server starts
    /// any thread.
    ///
    /// # Errors
    /// When the signal mask cannot be changed or the thread cannot be spawned.
    pub fn install_signals(&self) -> io::Result<()> {
        let (report, stop) = (self.clone(), self.clone());
        vmirq_vhost::signals::install(
            move || eprint!("{}", crate::counters::summary(&report.counters())),
            move || stop.stop(),
        )
    }

    /// Requests that were in flight when their frontend went away, over every connection so
    /// far: storage finished them (or failed them, or not within the timeout), nobody
    /// completed them.
    #[must_use]
    pub fn dropped_in_flight(&self) -> Dropped {
        *self.dropped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Frontend connections accepted so far.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// The vhost-user-blk server.
pub struct Server {
    config: ServerConfig,
    disk: Arc<dyn Disk>,
    handle: ServerHandle,
}

impl Server {
    /// Open the disk and prepare the counters.
    ///
    /// # Errors
    /// When the disk cannot be opened.
    pub fn new(config: ServerConfig) -> Result<Self> {
        let disk: Arc<dyn Disk> = match &config.disk {
            DiskSpec::Image { path, direct } => {
                Arc::new(FileDisk::open(path, config.read_only, *direct)?)
            }
            DiskSpec::Ram(n) => Arc::new(RamDisk::new(*n)?),
            DiskSpec::Null(n) => Arc::new(NullDisk::new(*n)?),
        };
        let counters = (0..config.queues)
            .map(|_| Arc::new(BlkQueueCounters::default()))
            .collect();
        let handle = ServerHandle {
            stop: Arc::new(AtomicBool::new(false)),
            current: Arc::new(Mutex::new(None)),
            counters: Arc::new(counters),
            connections: Arc::new(AtomicU64::new(0)),
            serving: Arc::new(AtomicBool::new(false)),
            dropped: Arc::new(Mutex::new(Dropped::default())),
        };
        Ok(Self {
            config,
            disk,
            handle,
        })
    }

    /// A handle for stopping the server and reading counters.
    #[must_use]
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// The disk's capacity in bytes.
    #[must_use]
    pub fn capacity_bytes(&self) -> u64 {
        self.disk.capacity_bytes()
    }

    /// Serve frontends until stopped (or after the first one with `once`).
    ///
    /// # Errors
    /// When the socket cannot be created or a device cannot be set up.
    pub fn run(&self) -> Result<()> {
        let mut listener = Listener::new(&self.config.socket, true).map_err(ServerError::Listen)?;
        if let Some(addr) = self.config.metrics {
            let handle = self.handle.clone();
            vmirq_vhost::metrics::spawn(
                addr,
                Box::new(move || crate::counters::prometheus(&handle.counters())),
            )?;
        }
        tracing::info!(socket = %self.config.socket.display(), disk = %self.disk.describe(), "serving");
        while !self.handle.stop.load(Ordering::Acquire) {
            if !vmirq_vhost::daemon::readable(listener.as_raw_fd(), ACCEPT_POLL_MS)? {
                continue;
            }
            self.serve_one(&mut listener)?;
            if self.config.once {
                break;
            }
        }
        Ok(())
    }

    /// Accept one frontend and serve it until it disconnects.
    fn serve_one(&self, listener: &mut Listener) -> Result<()> {
        match listener.accept().map_err(ServerError::Listen)? {
            Some(frontend) => self.serve_connection(frontend),
            None => Ok(()),
        }
    }

    /// Serve one frontend connection until it ends (the frontend disconnects, a message is
    /// refused, or the server is stopped). Every message passes the [`crate::guard`] first.
    ///
    /// # Errors
    /// When the device of the connection cannot be set up.
    pub fn serve_connection(&self, frontend: UnixStream) -> Result<()> {
        let c = &self.config;
        let inflight = Arc::new(InflightState::new(c.queues, c.queue_size));
        let mem: GuestMem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let backend = Arc::new(self.device(mem.clone(), &inflight)?);
        let connection = Connection {
            name: "vmirq-blk",
            backend: Arc::clone(&backend),
            mem,
            limits: Limits {
                queues: c.queues,
                max_queue_size: c.queue_size,
            },
            inflight: Some(inflight),
        };
        let mut conn = GuardedDaemon::start(frontend, connection, |daemon| {
            register_queue_fds(daemon, &backend)
        })?;
        self.handle.serving.store(true, Ordering::Release);
        self.handle.connections.fetch_add(1, Ordering::Relaxed);
        *self
            .handle
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = conn.shutdown_handle();
        if self.handle.stop.load(Ordering::Acquire) {
            conn.request_shutdown();
        }
        conn.wait();
        *self
            .handle
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        // Storage in flight is waited for before the worker threads exit, not after: io_uring
        // ties an operation to the thread that submitted it, and when that thread exits the
        // kernel cancels what has not reached the device (-ECANCELED, or -EFAULT for a retry
        // queued to the exiting thread). Each request keeps its guest memory mapped until its
        // operation is reaped; none is completed (the rings are the gone frontend's).
        let dropped = backend.detach();
        if dropped != Dropped::default() {
            tracing::info!(
                requests = dropped.requests,
                failed = dropped.failed,
                unfinished = dropped.unfinished,
                "requests in flight when the frontend went away: storage finished, not completed"
            );
        }
        self.handle
            .dropped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(dropped);
        conn.finish();
        self.handle.serving.store(false, Ordering::Release);
        Ok(())
    }

    /// Build the device of one connection.
    fn device(&self, mem: GuestMem, inflight: &InflightState) -> Result<BlkBackend> {
        let c = &self.config;
        let capacity = self.disk.capacity_bytes();
        let discard = !c.read_only && self.disk.supports_discard();
        let geometry = DiskGeometry {
            capacity_bytes: capacity,
            read_only: c.read_only,
            discard,
            write_zeroes: discard,
            max_data_bytes: MAX_REQUEST_BYTES,
            block_size: u64::from(self.disk.block_size()),
        };
        let mut engines = Vec::with_capacity(usize::from(c.queues));
        for q in 0..c.queues {
            let parts = EngineParts {
                index: q,
                io: self.disk.open_queue(u32::from(c.queue_size))?,
                geometry,
                device_id: c.serial,
                moderation: c.moderation.build(),
                waiter: c.poll.build(),
                contention: c.contention.build(),
                cpu: vmirq_vhost::cpustat::CpuSampler::new(Box::new(
                    vmirq_vhost::cpustat::ThreadSchedstat::new(),
                )),
                counters: Arc::clone(&self.handle.counters[usize::from(q)]),
                max_batches_per_event: crate::engine::MAX_BATCHES_PER_EVENT,
            };
            let mut engine = QueueEngine::new(parts)?;
            if let Some(slot) = inflight.slot(usize::from(q)) {
                engine.attach_inflight(Arc::clone(slot));
            }
            engines.push(engine);
        }
        let seg_max = u32::from(c.queue_size)
            .saturating_sub(2)
            .clamp(1, u32::from(crate::request::MAX_DESCRIPTORS) - 2);
        let config = BlkConfig {
            capacity_sectors: capacity >> SECTOR_SHIFT,
            seg_max,
            blk_size: self.disk.block_size(),
            num_queues: c.queues,
            max_discard_sectors: if discard { MAX_DISCARD_SECTORS } else { 0 },
            max_write_zeroes_sectors: if discard { MAX_DISCARD_SECTORS } else { 0 },
        };
        let params = DeviceParams {
            config,
            read_only: c.read_only,
            queue_size: c.queue_size,
            threads: c.threads,
        };
        Ok(BlkBackend::new(params, mem, engines))
    }
}

/// Register each queue's hold timer and storage completion fd in the epoll of the worker
/// thread that serves the queue.
fn register_queue_fds(
    daemon: &mut VhostUserDaemon<Arc<BlkBackend>>,
    backend: &BlkBackend,
) -> io::Result<()> {
    for (thread, handler) in daemon.get_epoll_handlers().iter().enumerate() {
        let mask = backend.masks().get(thread).copied().unwrap_or(0);
        for q in (0..64).filter(|q| mask & (1 << q) != 0) {
            if let Some(fd) = backend.timer_fd(q) {
                handler.register_listener(fd, EventSet::IN, backend.timer_event(q))?;
            }
            if let Some(fd) = backend.io_fd(q) {
                handler.register_listener(fd, EventSet::IN, backend.io_event(q))?;
            }
        }
    }
    Ok(())
}
