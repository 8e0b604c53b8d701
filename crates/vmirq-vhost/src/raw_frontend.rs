//! An adversarial vhost-user frontend for tests and fuzzing (feature `test-utils`).
//!
//! [`RawFrontend`] sends any bytes with any file descriptors and reads what comes back, so a
//! test can send truncated headers, lying sizes, wrong descriptor counts or out-of-range
//! fields. [`Session`] drives a real device the way QEMU does (SET_OWNER, features, memory
//! table, then each vring) over memfd-backed guest memory shared with the backend, with one
//! [`MockGuest`] per queue on that memory: descriptor-level hostile input then reaches the
//! real server through the real protocol.

use crate::mock_guest::{Layout, MockGuest, REGION0_LEN, REGION1_LEN, REGION1_START};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::event::{EventConsumer, EventFlag, EventNotifier};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

pub use crate::guard::wire::req;

/// Header flags: version 1.
pub const VERSION_1: u32 = 0x1;
/// Header flags: reply.
pub const FLAG_REPLY: u32 = 0x4;
/// Header flags: the frontend wants an ack.
pub const FLAG_NEED_REPLY: u32 = 0x8;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (virtio feature bit 30).
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// `VIRTIO_RING_F_EVENT_IDX`.
pub const F_EVENT_IDX: u64 = 1 << 29;
/// `VHOST_USER_PROTOCOL_F_REPLY_ACK`.
pub const PROTOCOL_REPLY_ACK: u64 = 1 << 3;
/// Frontend (virtual) address of guest address 0: ring addresses are sent as `gpa + VA_BASE`.
pub const VA_BASE: u64 = 0x7f00_0000_0000;
/// Bit 8 of SET_VRING_KICK/CALL/ERR: no descriptor attached.
pub const NO_FD: u64 = 0x100;

/// What came back from the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A reply message.
    Message {
        /// Request code it answers.
        request: u32,
        /// Header flags.
        flags: u32,
        /// Payload.
        payload: Vec<u8>,
    },
    /// The backend closed the connection.
    Closed,
    /// Nothing within the timeout.
    Timeout,
}

impl Reply {
    /// The u64 payload of a reply (REPLY_ACK status, GET_FEATURES value, ...).
    #[must_use]
    pub fn value(&self) -> Option<u64> {
        match self {
            Reply::Message { payload, .. } if payload.len() >= 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&payload[..8]);
                Some(u64::from_le_bytes(b))
            }
            _ => None,
        }
    }
}

/// A frontend that sends whatever it is told.
pub struct RawFrontend {
    sock: UnixStream,
    reply_timeout: Duration,
}

/// How long [`RawFrontend::call`] waits for a reply unless told otherwise.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

impl RawFrontend {
    /// Connect to `path`, retrying briefly while the server is between bind() and listen().
    ///
    /// # Errors
    /// When the server does not accept within a second.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match UnixStream::connect(path) {
                Ok(sock) => return Ok(Self::from_stream(sock)),
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionRefused
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Use an already connected stream.
    #[must_use]
    pub fn from_stream(sock: UnixStream) -> Self {
        Self {
            sock,
            reply_timeout: REPLY_TIMEOUT,
        }
    }

    /// How long [`RawFrontend::call`] waits for a reply (5 s by default).
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.reply_timeout = timeout;
    }

    /// The socket.
    #[must_use]
    pub fn stream(&self) -> &UnixStream {
        &self.sock
    }

    /// Send raw bytes with `fds` attached.
    ///
    /// # Errors
    /// When the socket fails (the backend closed it).
    pub fn send_bytes(&self, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let mut sent = 0;
        let mut first = true;
        while sent < bytes.len() || first {
            let fds_now: &[RawFd] = if first { fds } else { &[] };
            sent += self
                .sock
                .send_with_fds(&[&bytes[sent..]], fds_now)
                .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
            first = false;
        }
        Ok(())
    }

    /// Send a message: header (`request`, `flags`, the payload's size) and payload.
    ///
    /// # Errors
    /// When the socket fails.
    pub fn send(&self, request: u32, flags: u32, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
        self.send_bytes(&message(request, flags, payload), fds)
    }

    /// Read one reply, waiting up to `timeout`.
    #[must_use]
    pub fn recv(&self, timeout: Duration) -> Reply {
        let mut hdr = [0u8; 12];
        match self.read_exact_within(&mut hdr, timeout) {
            Ok(true) => {}
            Ok(false) => return Reply::Closed,
            Err(_) => return Reply::Timeout,
        }
        let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let size = usize::try_from(word(8)).unwrap_or(0).min(0x1000);
        let mut payload = vec![0u8; size];
        match self.read_exact_within(&mut payload, timeout) {
            Ok(true) => Reply::Message {
                request: word(0),
                flags: word(4),
                payload,
            },
            Ok(false) => Reply::Closed,
            Err(_) => Reply::Timeout,
        }
    }

    /// Read exactly `buf.len()` bytes; `Ok(false)` at end of stream, `Err` on timeout.
    fn read_exact_within(&self, buf: &mut [u8], timeout: Duration) -> io::Result<bool> {
        self.sock.set_read_timeout(Some(timeout))?;
        let mut got = 0;
        while got < buf.len() {
            match (&self.sock).read(&mut buf[got..]) {
                Ok(0) => return Ok(false),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Send a message asking for a reply (NEED_REPLY) and read the reply.
    #[must_use]
    pub fn call(&self, request: u32, payload: &[u8], fds: &[RawFd]) -> Reply {
        if self
            .send(request, VERSION_1 | FLAG_NEED_REPLY, payload, fds)
            .is_err()
        {
            return Reply::Closed;
        }
        self.recv(self.reply_timeout)
    }

    /// Whether the backend closes the connection within `timeout` (replies are read and
    /// dropped meanwhile).
    #[must_use]
    pub fn closed_within(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.recv(left) {
                Reply::Closed => return true,
                Reply::Timeout => return false,
                Reply::Message { .. } => {}
            }
        }
    }
}

/// A message on the wire: header and payload.
#[must_use]
pub fn message(request: u32, flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + payload.len());
    out.extend_from_slice(&request.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(payload);
    out
}

/// Payload of a vring state message (SET_VRING_NUM/BASE/ENABLE, GET_VRING_BASE).
#[must_use]
pub fn vring_state(index: u32, num: u32) -> Vec<u8> {
    let mut p = index.to_le_bytes().to_vec();
    p.extend_from_slice(&num.to_le_bytes());
    p
}

/// Payload of SET_VRING_ADDR (frontend addresses).
#[must_use]
pub fn vring_addr(index: u32, desc: u64, used: u64, avail: u64) -> Vec<u8> {
    let mut p = index.to_le_bytes().to_vec();
    p.extend_from_slice(&0u32.to_le_bytes()); // flags
    for v in [desc, used, avail, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

/// One memory region entry: guest address, size, frontend address, mmap offset.
pub type RegionEntry = (u64, u64, u64, u64);

/// Payload of SET_MEM_TABLE with `count` in the header field (which may lie) and `regions`.
#[must_use]
pub fn mem_table(count: u32, regions: &[RegionEntry]) -> Vec<u8> {
    let mut p = count.to_le_bytes().to_vec();
    p.extend_from_slice(&0u32.to_le_bytes()); // padding
    for &(gpa, size, va, offset) in regions {
        for v in [gpa, size, va, offset] {
            p.extend_from_slice(&v.to_le_bytes());
        }
    }
    p
}

/// A memfd of `len` bytes.
///
/// # Errors
/// When memfd_create or ftruncate fails.
pub fn memfd(len: u64) -> io::Result<File> {
    let name = c"vmirq-raw-frontend";
    // SAFETY: `name` is a valid NUL-terminated string; the call creates a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    Ok(file)
}

/// Guest memory shared with the backend: two memfds laid out as the mock guest's regions
/// (region 0 at guest address 0, region 1 after a hole).
pub struct SharedMemory {
    files: [File; 2],
    /// The frontend's mapping of the same memory.
    pub mem: Arc<GuestMemoryMmap>,
}

impl SharedMemory {
    /// Create and map the two regions.
    ///
    /// # Errors
    /// When a memfd cannot be created or mapped.
    pub fn new() -> io::Result<Self> {
        let f0 = memfd(REGION0_LEN)?;
        let f1 = memfd(REGION1_LEN)?;
        let len = |n: u64| usize::try_from(n).map_err(|_| io::Error::other("region size"));
        let mem = GuestMemoryMmap::from_ranges_with_files([
            (
                GuestAddress(0),
                len(REGION0_LEN)?,
                Some(FileOffset::new(f0.try_clone()?, 0)),
            ),
            (
                GuestAddress(REGION1_START),
                len(REGION1_LEN)?,
                Some(FileOffset::new(f1.try_clone()?, 0)),
            ),
        ])
        .map_err(io::Error::other)?;
        Ok(Self {
            files: [f0, f1],
            mem: Arc::new(mem),
        })
    }

    /// The two regions as SET_MEM_TABLE entries.
    #[must_use]
    pub fn regions(&self) -> [RegionEntry; 2] {
        [
            (0, REGION0_LEN, VA_BASE, 0),
            (REGION1_START, REGION1_LEN, VA_BASE + REGION1_START, 0),
        ]
    }

    /// The descriptors of the two regions' files.
    #[must_use]
    pub fn fds(&self) -> [RawFd; 2] {
        [self.files[0].as_raw_fd(), self.files[1].as_raw_fd()]
    }
}

/// One queue as the frontend sees it.
pub struct QueueSide {
    /// The driver side of the rings, on the shared memory.
    pub guest: MockGuest,
    /// The backend reads this eventfd (SET_VRING_KICK).
    pub kick: EventNotifier,
    /// The backend writes this eventfd (SET_VRING_CALL).
    pub call: EventConsumer,
}

/// A device set up the way QEMU does it, over a [`RawFrontend`].
pub struct Session {
    /// The connection.
    pub fe: RawFrontend,
    /// The shared guest memory.
    pub mem: SharedMemory,
    /// The queues, in order.
    pub queues: Vec<QueueSide>,
}

/// Why a [`Session`] step failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The backend refused a message (failure ack, or no reply).
    #[error("message {request} answered {reply:?}")]
    Refused {
        /// Request code.
        request: u32,
        /// What came back.
        reply: Reply,
    },
    /// Local setup failed.
    #[error("frontend setup failed")]
    Io(#[from] io::Error),
}

impl Session {
    /// Connect to `path` and set up `queues` queues of `size` entries.
    ///
    /// # Errors
    /// When the backend refuses a step or the local setup fails.
    pub fn start(path: &Path, queues: u16, size: u16) -> Result<Self, SessionError> {
        let fe = RawFrontend::connect(path)?;
        let s = Self::prepare(fe, queues, size)?;
        s.handshake()?;
        s.set_mem_table()?;
        for q in 0..queues {
            s.start_vring(q)?;
        }
        Ok(s)
    }

    /// Shared memory and one mock guest per queue, nothing sent yet.
    ///
    /// # Errors
    /// When memory or eventfds cannot be created.
    pub fn prepare(fe: RawFrontend, queues: u16, size: u16) -> Result<Self, SessionError> {
        let mem = SharedMemory::new()?;
        let n = u64::from(queues.max(1));
        let data = (REGION0_LEN - (1 << 20)) / n;
        let mut sides = Vec::new();
        for q in 0..u64::from(queues) {
            let layout = Layout {
                ring_base: q * (128 << 10),
                data_start: (1 << 20) + q * data,
                data_end: (1 << 20) + (q + 1) * data,
            };
            let guest = MockGuest::on_memory(Arc::clone(&mem.mem), size, false, layout);
            let flag = EventFlag::NONBLOCK | EventFlag::CLOEXEC;
            let (_, kick) = vmm_sys_util::event::new_event_consumer_and_notifier(flag)?;
            let (call, _) = vmm_sys_util::event::new_event_consumer_and_notifier(flag)?;
            sides.push(QueueSide { guest, kick, call });
        }
        Ok(Self {
            fe,
            mem,
            queues: sides,
        })
    }

    /// Send a message that must be acked with 0.
    ///
    /// # Errors
    /// [`SessionError::Refused`] otherwise.
    pub fn expect_ack(
        &self,
        request: u32,
        payload: &[u8],
        fds: &[RawFd],
    ) -> Result<(), SessionError> {
        match self.fe.call(request, payload, fds) {
            r if r.value() == Some(0) => Ok(()),
            reply => Err(SessionError::Refused { request, reply }),
        }
    }

    fn get(&self, request: u32) -> Result<u64, SessionError> {
        let reply = self.fe.call(request, &[], &[]);
        reply
            .value()
            .ok_or(SessionError::Refused { request, reply })
    }

    /// SET_OWNER, features (without EVENT_IDX), protocol features with REPLY_ACK.
    ///
    /// # Errors
    /// When the backend refuses a step.
    pub fn handshake(&self) -> Result<(), SessionError> {
        self.fe.send(req::SET_OWNER, VERSION_1, &[], &[])?;
        let features = self.get(req::GET_FEATURES)?;
        let protocol = self.get(req::GET_PROTOCOL_FEATURES)?;
        self.fe.send(
            req::SET_PROTOCOL_FEATURES,
            VERSION_1,
            &protocol.to_le_bytes(),
            &[],
        )?;
        let acked = (features & !F_EVENT_IDX) | F_PROTOCOL_FEATURES;
        self.expect_ack(req::SET_FEATURES, &acked.to_le_bytes(), &[])
    }

    /// SET_MEM_TABLE with the shared memory's two regions.
    ///
    /// # Errors
    /// When the backend refuses it.
    pub fn set_mem_table(&self) -> Result<(), SessionError> {
        let p = mem_table(2, &self.mem.regions());
        self.expect_ack(req::SET_MEM_TABLE, &p, &self.mem.fds())
    }

    /// SET_VRING_NUM, BASE 0, ADDR, CALL, KICK and ENABLE for queue `q`.
    ///
    /// # Errors
    /// When the backend refuses a step.
    pub fn start_vring(&self, q: u16) -> Result<(), SessionError> {
        self.restart_vring(q, 0)
    }

    /// Like [`Session::start_vring`] from ring position `base` (after GET_VRING_BASE).
    ///
    /// # Errors
    /// When the backend refuses a step.
    pub fn restart_vring(&self, q: u16, base: u16) -> Result<(), SessionError> {
        let side = &self.queues[usize::from(q)];
        let i = u32::from(q);
        let size = u32::from(side.guest.size());
        let [desc, avail, used] = side.guest.ring_addresses();
        self.expect_ack(req::SET_VRING_NUM, &vring_state(i, size), &[])?;
        self.expect_ack(req::SET_VRING_BASE, &vring_state(i, u32::from(base)), &[])?;
        let addr = vring_addr(i, VA_BASE + desc, VA_BASE + used, VA_BASE + avail);
        self.expect_ack(req::SET_VRING_ADDR, &addr, &[])?;
        let fd_msg = u64::from(q).to_le_bytes();
        self.expect_ack(req::SET_VRING_CALL, &fd_msg, &[side.call.as_raw_fd()])?;
        self.expect_ack(req::SET_VRING_KICK, &fd_msg, &[side.kick.as_raw_fd()])?;
        self.expect_ack(req::SET_VRING_ENABLE, &vring_state(i, 1), &[])
    }

    /// GET_VRING_BASE for queue `q` (the ring stops); returns the position.
    ///
    /// # Errors
    /// When the backend refuses it.
    pub fn stop_vring(&self, q: u16) -> Result<u16, SessionError> {
        let request = req::GET_VRING_BASE;
        let reply = self.fe.call(request, &vring_state(u32::from(q), 0), &[]);
        match &reply {
            Reply::Message { payload, .. } if payload.len() == 8 => {
                Ok(u16::from_le_bytes([payload[4], payload[5]]))
            }
            _ => Err(SessionError::Refused { request, reply }),
        }
    }

    /// Kick queue `q`.
    ///
    /// # Errors
    /// When the eventfd write fails.
    pub fn kick(&self, q: u16) -> io::Result<()> {
        self.queues[usize::from(q)].kick.notify()
    }

    /// Wait until queue `q` has at least `n` new used entries (or `timeout`); returns them.
    pub fn wait_used(&mut self, q: u16, n: usize, timeout: Duration) -> Vec<(u32, u32)> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let side = &mut self.queues[usize::from(q)];
        loop {
            out.extend(side.guest.take_used());
            if out.len() >= n || Instant::now() >= deadline {
                return out;
            }
            let _ = side.call.consume();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
