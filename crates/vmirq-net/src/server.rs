//! The server: one vhost-user socket per port, each served by its own thread that accepts
//! one frontend at a time, and optionally tap devices as further ports, each read by a
//! thread of its own ([`crate::tap`]). Each connection gets a fresh device (backend, daemon, worker
//! thread) behind vmirq-vhost's message guard (every vhost-user message checked before
//! rust-vmm's handler sees it); when the frontend goes away the port is detached from the
//! fabric, the device is torn down (worker joined, fds closed, guest memory unmapped) and
//! the next frontend is accepted on the same socket. Counters live in the fabric and
//! survive reconnects.

use crate::backend::NetBackend;
use crate::counters::PortSnapshot;
use crate::fabric::{Fabric, GuestMem, PORTS_MAX};
use crate::pmd::PmdSnapshot;
use crate::queues::{Datapath, Policies, PortModeration};
use crate::switch::{Switch, SwitchMode};
use crate::tap::Tap;
use crate::virtio::{default_mac, queues, Mac, NetConfig, PAIRS_MAX, S_LINK_UP};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::Listener;
use vhost_user_backend::ShutdownHandle;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmirq_vhost::counters::{CounterSet, QueueSnapshot};
use vmirq_vhost::daemon::{readable, Connection, GuardedDaemon};
use vmirq_vhost::guard::rules::Limits;
use vmm_sys_util::epoll::EventSet;

/// How often an accept loop checks for a stop request, in milliseconds.
const ACCEPT_POLL_MS: i32 = 100;

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A socket could not be created.
    #[error("cannot listen on {path}")]
    Listen {
        /// The socket.
        path: PathBuf,
        /// What vhost reported.
        #[source]
        source: vhost::vhost_user::Error,
    },
    /// The vhost-user daemon failed.
    #[error("vhost-user device: {0}")]
    Daemon(String),
    /// A tap device could not be opened.
    #[error("cannot open tap {name}")]
    Tap {
        /// The interface name.
        name: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A system call failed.
    #[error("system call failed")]
    Io(#[from] io::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ServerError>;

/// What to serve.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// One vhost-user socket per port, in port order.
    pub sockets: Vec<PathBuf>,
    /// Tap devices (`--tap NAME`), ports after the sockets' (see [`crate::tap`]).
    pub taps: Vec<String>,
    /// MAC of each port (missing ones get [`default_mac`]).
    pub macs: Vec<Mac>,
    /// Switching mode.
    pub switch: SwitchMode,
    /// Largest queue size a frontend may choose.
    pub queue_size: u16,
    /// Moderation and kick-wait policies of every queue.
    pub policies: Policies,
    /// Ports whose queues follow a moderation of their own instead of
    /// `policies.moderation` (`--port-moderation`; at most one per port, socket ports only).
    pub port_moderation: Vec<PortModeration>,
    /// Queue pairs of each vhost-user port (`--queues`, 1 to [`PAIRS_MAX`]): more than one
    /// offers VIRTIO_NET_F_MQ.
    pub queue_pairs: u16,
    /// Where to serve Prometheus counters (`--metrics`; see [`crate::metrics`]).
    pub metrics: Option<std::net::SocketAddr>,
}

impl ServerConfig {
    /// Two or more ports with default MACs, fixed pairs, queues up to 1024.
    #[must_use]
    pub fn new(sockets: Vec<PathBuf>) -> Self {
        Self {
            sockets,
            taps: Vec::new(),
            macs: Vec::new(),
            switch: SwitchMode::Pairs,
            queue_size: 1024,
            policies: Policies::default(),
            port_moderation: Vec::new(),
            queue_pairs: 1,
            metrics: None,
        }
    }

    fn check(&self) -> Result<()> {
        let n = self.sockets.len() + self.taps.len();
        if !(2..=PORTS_MAX).contains(&n) || self.sockets.is_empty() {
            return Err(ServerError::Config(format!(
                "{} sockets and {} taps; a switch needs 2 to {PORTS_MAX} ports, one a socket",
                self.sockets.len(),
                self.taps.len()
            )));
        }
        if !self.queue_size.is_power_of_two() || self.queue_size > 32768 {
            return Err(ServerError::Config(
                "queue size must be a power of two up to 32768".into(),
            ));
        }
        if !(1..=PAIRS_MAX).contains(&self.queue_pairs) {
            return Err(ServerError::Config(format!(
                "--queues {}: a port has 1 to {PAIRS_MAX} queue pairs",
                self.queue_pairs
            )));
        }
        if self.queue_pairs > 1 && matches!(self.policies.datapath, Datapath::Pmd { .. }) {
            return Err(ServerError::Config(format!(
                "--queues {} with --datapath {}: the pmd thread serves one queue pair per \
                 port; use --datapath per-port for several queue pairs",
                self.queue_pairs, self.policies.datapath
            )));
        }
        for (i, o) in self.port_moderation.iter().enumerate() {
            if o.port >= self.sockets.len() {
                return Err(ServerError::Config(format!(
                    "--port-moderation {o}: the switch has {} socket ports (0 to {}); a tap \
                     port has no virtqueues to moderate",
                    self.sockets.len(),
                    self.sockets.len() - 1
                )));
            }
            if self.port_moderation[..i].iter().any(|p| p.port == o.port) {
                return Err(ServerError::Config(format!(
                    "--port-moderation names port {} twice",
                    o.port
                )));
            }
        }
        for port in 0..self.sockets.len() {
            let moderation = self.policies_of(port).moderation;
            if moderation.build().overtakes()
                && matches!(self.policies.datapath, Datapath::Pmd { .. })
            {
                return Err(ServerError::Config(format!(
                    "moderation {moderation} (port {port}) with --datapath {}: the pmd thread \
                     publishes each run of received frames at once and cannot park them; use \
                     --datapath per-port",
                    self.policies.datapath
                )));
            }
        }
        Ok(())
    }

    /// The policies port `port`'s queues follow: `policies`, with the port's own
    /// moderation if `port_moderation` names it.
    #[must_use]
    pub fn policies_of(&self, port: usize) -> Policies {
        let own = self.port_moderation.iter().find(|o| o.port == port);
        Policies {
            moderation: own.map_or(self.policies.moderation, |o| o.spec),
            ..self.policies
        }
    }
}

/// A handle to stop a running server and read its counters.
#[derive(Clone)]
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    current: Arc<Vec<Mutex<Option<ShutdownHandle>>>>,
    fabric: Arc<Fabric>,
    serving: Arc<Vec<AtomicBool>>,
    connections: Arc<AtomicU64>,
    revoked: Arc<AtomicU64>,
}

impl ServerHandle {
    /// Stop: every connection is closed and [`Server::run`] returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(pmd) = self.fabric.pmd() {
            pmd.wake();
        }
        for c in self.current.iter() {
            if let Some(h) = c.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                h.shutdown();
            }
        }
    }

    /// Counters of every port.
    #[must_use]
    pub fn counters(&self) -> Vec<PortSnapshot> {
        (0..self.fabric.ports())
            .filter_map(|p| self.fabric.slot(p).map(|s| s.counters.snapshot()))
            .collect()
    }

    /// The generic counters of port `p`'s receive and transmit queues of pair 0.
    #[must_use]
    pub fn queue_counters(&self, p: usize) -> Option<(QueueSnapshot, QueueSnapshot)> {
        self.pair_counters(p, 0)
    }

    /// The generic counters of port `p`'s receive and transmit queues of pair `q`.
    #[must_use]
    pub fn pair_counters(&self, p: usize, q: usize) -> Option<(QueueSnapshot, QueueSnapshot)> {
        let s = self.fabric.slot(p)?;
        Some((
            s.rx_queues.get(q)?.snapshot(),
            s.tx_queues.get(q)?.snapshot(),
        ))
    }

    /// Queue pairs of port `p`.
    #[must_use]
    pub fn pairs(&self, p: usize) -> usize {
        self.fabric.slot(p).map_or(0, crate::fabric::Slot::pairs)
    }

    /// Whether port `p` has a frontend right now (false again only after its connection
    /// is fully torn down).
    #[must_use]
    pub fn serving(&self, p: usize) -> bool {
        self.serving
            .get(p)
            .is_some_and(|s| s.load(Ordering::Acquire))
    }

    /// What the forwarding thread did (`--datapath pmd` only) and its kick waits.
    #[must_use]
    pub fn pmd_counters(&self) -> Option<(PmdSnapshot, QueueSnapshot)> {
        let pmd = self.fabric.pmd()?;
        Some((pmd.counters.snapshot(), pmd.queue.snapshot()))
    }

    /// Connections dropped because their frontend truncated its guest memory (see
    /// `vmirq_vhost::sigbus`).
    #[must_use]
    pub fn memory_revoked(&self) -> u64 {
        self.revoked.load(Ordering::Relaxed)
    }

    /// Whether port `p`'s frontend is attached to the switch (frames reach it).
    #[must_use]
    pub fn attached(&self, p: usize) -> bool {
        self.fabric.is_attached(p)
    }

    /// Frontend connections accepted so far, all ports.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// The vhost-user-net switch.
pub struct Server {
    config: ServerConfig,
    handle: ServerHandle,
    listeners: Vec<Listener>,
    taps: Vec<Arc<Tap>>,
}

impl Server {
    /// Check the configuration and create every socket.
    ///
    /// # Errors
    /// [`ServerError::Config`] or [`ServerError::Listen`].
    pub fn new(config: ServerConfig) -> Result<Self> {
        config.check()?;
        let n = config.sockets.len() + config.taps.len();
        let listeners = config
            .sockets
            .iter()
            .map(|path| {
                Listener::new(path, true).map_err(|source| ServerError::Listen {
                    path: path.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let switch = Switch::new(config.switch, n);
        let fabric = Arc::new(match config.policies.datapath {
            Datapath::PerPort => Fabric::with_pairs(switch, config.queue_pairs),
            Datapath::Pmd { .. } => Fabric::with_pmd(switch).0,
        });
        let taps = config
            .taps
            .iter()
            .map(|name| {
                Tap::open(name)
                    .map(Arc::new)
                    .map_err(|source| ServerError::Tap {
                        name: name.clone(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        for (i, tap) in taps.iter().enumerate() {
            fabric.set_tap(config.sockets.len() + i, Arc::clone(tap));
        }
        let handle = ServerHandle {
            stop: Arc::new(AtomicBool::new(false)),
            current: Arc::new((0..n).map(|_| Mutex::new(None)).collect()),
            fabric,
            serving: Arc::new((0..n).map(|_| AtomicBool::new(false)).collect()),
            connections: Arc::new(AtomicU64::new(0)),
            revoked: Arc::new(AtomicU64::new(0)),
        };
        Ok(Self {
            config,
            handle,
            listeners,
            taps,
        })
    }

    /// A handle for stopping the server and reading counters.
    #[must_use]
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// Serve every port until stopped.
    ///
    /// # Errors
    /// The first port whose device cannot be set up (the others are stopped).
    pub fn run(self) -> Result<()> {
        let Self {
            config,
            handle,
            listeners,
            taps,
        } = self;
        let first_tap = listeners.len();
        if let Some(addr) = config.metrics {
            let h = handle.clone();
            vmirq_vhost::metrics::spawn(addr, Box::new(move || crate::metrics::prometheus(&h)))?;
        }
        tracing::info!(
            sockets = listeners.len(),
            taps = taps.len(),
            switch = ?config.switch,
            "serving"
        );
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            if let (Some(pmd), Datapath::Pmd { cpu }) =
                (handle.fabric.pmd(), config.policies.datapath)
            {
                let (fabric, stop, policies) = (&handle.fabric, &handle.stop, &config.policies);
                std::thread::Builder::new()
                    .name("vmirq-net-pmd".into())
                    .spawn_scoped(scope, move || {
                        crate::pmd::run(fabric, pmd, stop, policies, cpu);
                    })?;
            }
            let threads: Vec<_> = listeners
                .into_iter()
                .enumerate()
                .map(|(port, listener)| {
                    let h = handle.clone();
                    let cfg = &config;
                    std::thread::Builder::new()
                        .name(format!("vmirq-net-port{port}"))
                        .spawn_scoped(scope, move || {
                            let r = serve_port(cfg, &h, port, listener);
                            if r.is_err() {
                                h.stop();
                            }
                            r
                        })
                })
                .collect::<io::Result<Vec<_>>>()?;
            let mut threads = threads;
            for (i, tap) in taps.into_iter().enumerate() {
                let h = handle.clone();
                let port = first_tap + i;
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("vmirq-net-tap{port}"))
                        .spawn_scoped(scope, move || serve_tap(&h, port, &tap))?,
                );
            }
            Ok::<_, ServerError>(
                threads
                    .into_iter()
                    .map(|t| {
                        t.join().unwrap_or_else(|_| {
                            Err(ServerError::Daemon("port thread panicked".into()))
                        })
                    })
                    .collect(),
            )
        })?;
        results.into_iter().collect()
    }
}

/// Read frames the kernel sends on tap port `port` and switch them, until the server stops.
fn serve_tap(h: &ServerHandle, port: usize, tap: &Tap) -> Result<()> {
    tracing::info!(port, tap = tap.name(), "tap port");
    let mut buf = Vec::with_capacity(crate::tap::TAP_FRAME_MAX);
    while !h.stop.load(Ordering::Acquire) {
        match tap.recv(&mut buf, ACCEPT_POLL_MS) {
            Ok(Some(_)) => h.fabric.from_tap(port, &buf),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(port, tap = tap.name(), error = %e, "tap read failed");
                return Err(ServerError::Io(e));
            }
        }
    }
    Ok(())
}

fn serve_port(cfg: &ServerConfig, h: &ServerHandle, port: usize, listener: Listener) -> Result<()> {
    let mac = cfg
        .macs
        .get(port)
        .copied()
        .unwrap_or_else(|| default_mac(port));
    while !h.stop.load(Ordering::Acquire) {
        if !readable(listener.as_raw_fd(), ACCEPT_POLL_MS)? {
            continue;
        }
        let frontend = listener.accept().map_err(|source| ServerError::Listen {
            path: cfg.sockets[port].clone(),
            source,
        })?;
        if let Some(frontend) = frontend {
            serve_connection(cfg, h, port, mac, frontend)?;
        }
    }
    Ok(())
}

/// Serve one frontend of `port` until it disconnects or the server stops. Every message
/// passes vmirq-vhost's guard before vhost-user-backend's handler sees it.
fn serve_connection(
    cfg: &ServerConfig,
    h: &ServerHandle,
    port: usize,
    mac: Mac,
    frontend: UnixStream,
) -> Result<()> {
    let mem: GuestMem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let config = NetConfig {
        mac,
        status: S_LINK_UP,
        max_pairs: cfg.queue_pairs,
    };
    let backend = Arc::new(NetBackend::new(
        port,
        Arc::clone(&h.fabric),
        config,
        cfg.queue_size,
        mem.clone(),
        &cfg.policies_of(port),
    )?);
    let timers = backend.timer_fds();
    let attach = backend.attach_fd();
    let resume = backend.resume_fd();
    let events = backend.events();
    let connection = Connection {
        name: "vmirq-net",
        backend: Arc::clone(&backend),
        mem,
        limits: Limits {
            queues: u16::try_from(queues(cfg.queue_pairs)).unwrap_or(u16::MAX),
            max_queue_size: cfg.queue_size,
        },
        inflight: None,
    };
    let mut conn = GuardedDaemon::start(frontend, connection, |daemon| {
        for handler in daemon.get_epoll_handlers() {
            handler.register_listener(attach, EventSet::IN, events.attach())?;
            for (q, &(rx_timer, tx_timer)) in timers.iter().enumerate() {
                handler.register_listener(rx_timer, EventSet::IN, events.rx_timer(q))?;
                handler.register_listener(tx_timer, EventSet::IN, events.tx_timer(q))?;
            }
            handler.register_listener(resume, EventSet::IN, events.resume())?;
        }
        Ok(())
    })
    .map_err(|e| ServerError::Daemon(e.to_string()))?;
    backend.attach()?;
    backend.revocation().set_shutdown(conn.shutdown_handle());
    if let Some(slot) = h.fabric.slot(port) {
        slot.counters.connections.fetch_add(1, Ordering::Relaxed);
    }
    h.connections.fetch_add(1, Ordering::Relaxed);
    h.serving[port].store(true, Ordering::Release);
    *h.current[port]
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = conn.shutdown_handle();
    if h.stop.load(Ordering::Acquire) {
        conn.request_shutdown();
    }
    tracing::info!(port, "frontend connected");
    conn.wait();
    if let Some(what) = backend.revocation().revoked() {
        h.revoked.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            port,
            "the frontend truncated guest memory it had handed over: {what}; its queues \
             are stopped, no frame that touched that memory was forwarded or completed, and \
             the connection is dropped"
        );
    }
    *h.current[port]
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = None;
    h.fabric.detach(port);
    conn.finish();
    h.serving[port].store(false, Ordering::Release);
    Ok(())
}
