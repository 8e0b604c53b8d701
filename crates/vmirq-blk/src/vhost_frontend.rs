//! A vhost-user-blk frontend over a real socket (feature `test-utils`): what QEMU does for a
//! vhost-user-blk device, driving [`MockGuest`] queues in shared guest memory, with the
//! inflight protocol (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) as the spec describes it: the
//! area is asked for once (GET_INFLIGHT_FD), kept across connections, and handed back
//! (SET_INFLIGHT_FD) before the rings start on every connection. After losing the backend it
//! restarts the rings where QEMU does (SET_VRING_BASE with the used index, or any other
//! value a test picks) and never resubmits anything itself: that is the backend's job.
//!
//! Requests use three descriptors of a fixed slot (head `3k`: header, data, status), so a
//! slot is reused only after its completion: `queue_size / 3` requests at most per queue.
//! The message encoding is the `vhost` crate's frontend.

use crate::inflight::area::{AreaLimits, InflightArea, QueueLog};
use crate::mock_guest::{BlkRequests, Layout, MockGuest, F_NEXT, F_WRITE};
use crate::virtio::{feature, req, HEADER_LEN};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vhost::vhost_user::message::{VhostUserInflight, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestRegionMmap,
    MmapRegion,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Bytes before a slot's data buffer: the request header and, after it, the status byte.
const SLOT_HEADER_BYTES: u64 = 512;
/// Offset of the status byte in a slot.
const STATUS_OFFSET: u64 = 64;

/// Frontend errors.
#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    /// A system call failed.
    #[error("system call failed")]
    Io(#[from] std::io::Error),
    /// A vhost-user request failed.
    #[error("vhost-user request failed: {0}")]
    Vhost(#[from] vhost::Error),
    /// The backend went away (its socket closed).
    #[error("backend disconnected")]
    Disconnected,
    /// No completion arrived in time.
    #[error("no completion within the timeout")]
    Timeout,
    /// The backend does not offer a protocol feature this frontend needs.
    #[error("backend does not offer {0:?}")]
    Missing(VhostUserProtocolFeatures),
    /// Guest memory could not be set up.
    #[error("guest memory setup failed: {0}")]
    Memory(String),
    /// Not connected.
    #[error("not connected")]
    NotConnected,
}

/// Settings of a [`VhostFrontend`].
#[derive(Debug, Clone, Copy)]
pub struct FrontendConfig {
    /// Queues.
    pub queues: u16,
    /// Entries per queue.
    pub queue_size: u16,
    /// Largest data buffer of one request.
    pub max_request_bytes: u32,
    /// Negotiate VIRTIO_F_EVENT_IDX.
    pub event_idx: bool,
}

/// Where the rings restart after SET_VRING_BASE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingBase {
    /// The used index in guest memory: what QEMU sends after it lost the backend (its
    /// GET_VRING_BASE failed) and what a first connection sends (0).
    UsedIdx,
    /// The available index the driver published.
    AvailIdx,
    /// The values of the last GET_VRING_BASE (a clean stop), per queue.
    Reported,
}

/// One completed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Head descriptor (the request's id).
    pub head: u16,
    /// Status byte (0xFF when the device did not write it).
    pub status: u8,
    /// Used length reported by the device.
    pub used_len: u32,
    /// Data of a read.
    pub data: Vec<u8>,
    /// The head was not in flight: a duplicate or invented completion.
    pub unexpected: bool,
}

/// A request submitted and not completed.
#[derive(Debug, Clone, Copy)]
struct Pending {
    kind: u32,
    len: u32,
}

/// One queue of the frontend.
struct FrontendQueue {
    guest: MockGuest,
    kick: EventFd,
    call: EventFd,
    free: Vec<u16>,
    pending: HashMap<u16, Pending>,
    slot_base: u64,
    slot_bytes: u64,
    reported_base: u16,
}

/// An open vhost-user connection.
struct Connection {
    frontend: Frontend,
    /// The same socket, polled for the backend going away.
    sock: UnixStream,
}

/// The frontend: guest memory, queues, the inflight area and (when connected) the socket.
pub struct VhostFrontend {
    cfg: FrontendConfig,
    memfd: File,
    mem: Arc<GuestMemoryMmap>,
    queues: Vec<FrontendQueue>,
    conn: Option<Connection>,
    inflight: Option<(File, VhostUserInflight, Arc<InflightArea>)>,
}

impl VhostFrontend {
    /// Guest memory (a shared memfd) with `cfg.queues` queues laid out in it.
    ///
    /// # Errors
    /// When the memfd or its mapping cannot be created.
    pub fn new(cfg: FrontendConfig) -> Result<Self, FrontendError> {
        let slots = u64::from(cfg.queue_size / 3);
        let slot_bytes =
            (SLOT_HEADER_BYTES + u64::from(cfg.max_request_bytes)).next_multiple_of(4096);
        let rings = ring_bytes(cfg.queue_size).next_multiple_of(4096);
        let per_queue = rings + slots * slot_bytes;
        let size = (u64::from(cfg.queues) * per_queue).next_multiple_of(1 << 20);
        let memfd = crate::raw_frontend::memfd(size)?;
        let len = usize::try_from(size).map_err(|e| FrontendError::Memory(e.to_string()))?;
        let region = MmapRegion::from_file(FileOffset::new(memfd.try_clone()?, 0), len)
            .map_err(|e| FrontendError::Memory(e.to_string()))?;
        let region = GuestRegionMmap::new(region, GuestAddress(0))
            .ok_or_else(|| FrontendError::Memory("region".into()))?;
        let mem = Arc::new(
            GuestMemoryMmap::from_regions(vec![region])
                .map_err(|e| FrontendError::Memory(e.to_string()))?,
        );
        let queues = (0..u64::from(cfg.queues))
            .map(|q| {
                let base = q * per_queue;
                let layout = Layout {
                    ring_base: base,
                    data_start: base + rings,
                    data_end: base + per_queue,
                };
                let guest =
                    MockGuest::on_memory(Arc::clone(&mem), cfg.queue_size, cfg.event_idx, layout);
                Ok(FrontendQueue {
                    guest,
                    kick: EventFd::new(EFD_NONBLOCK)?,
                    call: EventFd::new(EFD_NONBLOCK)?,
                    free: (0..cfg.queue_size / 3).rev().collect(),
                    pending: HashMap::new(),
                    slot_base: base + rings,
                    slot_bytes,
                    reported_base: 0,
                })
            })
            .collect::<Result<Vec<_>, FrontendError>>()?;
        Ok(Self {
            cfg,
            memfd,
            mem,
            queues,
            conn: None,
            inflight: None,
        })
    }

    /// Connect to `socket` (retrying while it does not accept, up to `timeout`) and start
    /// every ring from `base`: features, memory table, inflight area, vrings.
    ///
    /// # Errors
    /// When the backend cannot be reached in time or refuses a step.
    pub fn connect(
        &mut self,
        socket: &Path,
        base: RingBase,
        timeout: Duration,
    ) -> Result<(), FrontendError> {
        self.conn = None;
        let sock = connect_retry(socket, timeout)?;
        let mut fe = Frontend::from_stream(sock.try_clone()?, u64::from(self.cfg.queues));
        fe.set_owner()?;
        let offered = fe.get_features()?;
        let mut features = offered;
        if !self.cfg.event_idx {
            features &= !(1u64 << feature::RING_EVENT_IDX);
        }
        fe.set_features(features)?;
        let wanted = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::INFLIGHT_SHMFD;
        let protocol = fe.get_protocol_features()?;
        if !protocol.contains(wanted) {
            return Err(FrontendError::Missing(wanted - protocol));
        }
        fe.set_protocol_features(wanted)?;
        fe.set_hdr_flags(vhost::vhost_user::message::VhostUserHeaderFlag::NEED_REPLY);
        let (info, host) = {
            let region = self
                .mem
                .iter()
                .next()
                .ok_or_else(|| FrontendError::Memory("no region".into()))?;
            (
                VhostUserMemoryRegionInfo::from_guest_region(region)?,
                region.as_ptr() as u64,
            )
        };
        fe.set_mem_table(&[info])?;
        self.set_inflight(&mut fe)?;
        for (q, queue) in self.queues.iter_mut().enumerate() {
            let [desc, avail, used] = queue.guest.ring_addresses();
            let start = match base {
                RingBase::UsedIdx => queue.guest.used_idx(),
                RingBase::AvailIdx => queue.guest.avail_idx(),
                RingBase::Reported => queue.reported_base,
            };
            fe.set_vring_num(q, self.cfg.queue_size)?;
            fe.set_vring_base(q, start)?;
            fe.set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: self.cfg.queue_size,
                    queue_size: self.cfg.queue_size,
                    flags: 0,
                    desc_table_addr: host + desc,
                    used_ring_addr: host + used,
                    avail_ring_addr: host + avail,
                    log_addr: None,
                },
            )?;
            fe.set_vring_kick(q, &queue.kick)?;
            fe.set_vring_call(q, &queue.call)?;
            fe.set_vring_enable(q, true)?;
        }
        self.conn = Some(Connection { frontend: fe, sock });
        Ok(())
    }

    /// GET_INFLIGHT_FD the first time, SET_INFLIGHT_FD every time.
    fn set_inflight(&mut self, fe: &mut Frontend) -> Result<(), FrontendError> {
        if self.inflight.is_none() {
            let ask = VhostUserInflight::new(0, 0, self.cfg.queues, self.cfg.queue_size);
            let (info, file) = fe.get_inflight_fd(&ask)?;
            let limits = AreaLimits {
                max_queues: self.cfg.queues,
                max_queue_size: self.cfg.queue_size,
            };
            let area = InflightArea::map(file.try_clone()?, &info, limits)
                .map_err(|e| FrontendError::Memory(e.to_string()))?;
            self.inflight = Some((file, info, area));
        }
        if let Some((file, info, _)) = &self.inflight {
            fe.set_inflight_fd(info, file.as_raw_fd())?;
        }
        Ok(())
    }

    /// Stop every ring (GET_VRING_BASE: the backend finishes what it started) and remember
    /// the reported positions, then close the connection.
    ///
    /// # Errors
    /// When a request fails.
    pub fn stop(&mut self) -> Result<Vec<u16>, FrontendError> {
        let conn = self.conn.take().ok_or(FrontendError::NotConnected)?;
        let mut bases = Vec::new();
        for (q, queue) in self.queues.iter_mut().enumerate() {
            let b = conn.frontend.get_vring_base(q)?;
            queue.reported_base = u16::try_from(b & 0xffff).unwrap_or(0);
            bases.push(queue.reported_base);
        }
        Ok(bases)
    }

    /// Close the connection without stopping the rings.
    pub fn drop_connection(&mut self) {
        self.conn = None;
    }

    /// Whether a connection is open.
    #[must_use]
    pub fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The queue's region of the inflight area, as this frontend maps it.
    #[must_use]
    pub fn inflight_log(&self, q: u16) -> Option<QueueLog> {
        self.inflight.as_ref().and_then(|(_, _, a)| a.queue(q))
    }

    /// Heads the backend has marked in flight on queue `q` right now.
    #[must_use]
    pub fn inflight_marked(&self, q: u16) -> Vec<u16> {
        self.inflight_log(q)
            .map(|l| l.marked(self.cfg.queue_size))
            .unwrap_or_default()
    }

    /// The memfd backing guest memory.
    #[must_use]
    pub fn memory_file(&self) -> &File {
        &self.memfd
    }

    /// Requests submitted and not completed on queue `q`.
    #[must_use]
    pub fn in_flight(&self, q: usize) -> usize {
        self.queues.get(q).map_or(0, |x| x.pending.len())
    }

    /// Free request slots on queue `q`.
    #[must_use]
    pub fn free_slots(&self, q: usize) -> usize {
        self.queues.get(q).map_or(0, |x| x.free.len())
    }

    /// Submit a request of type `kind` at `sector` on queue `q` (not kicked). `data` is what
    /// OUT writes; IN reads `len` bytes. Returns the head, or `None` when no slot is free.
    ///
    /// # Panics
    /// If `q` is not a queue or the request is larger than the configured maximum.
    pub fn submit(
        &mut self,
        q: usize,
        kind: u32,
        sector: u64,
        data: &[u8],
        len: u32,
    ) -> Option<u16> {
        assert!(
            len <= self.cfg.max_request_bytes,
            "request larger than configured"
        );
        let queue = &mut self.queues[q];
        let slot = queue.free.pop()?;
        let base = queue.slot_base + u64::from(slot) * queue.slot_bytes;
        let head = slot * 3;
        let g = &mut queue.guest;
        g.write_header(base, kind, sector);
        g.mem_write(base + STATUS_OFFSET, &[0xFF]);
        let data_addr = base + SLOT_HEADER_BYTES;
        if kind == req::OUT {
            g.mem_write(data_addr, data);
        }
        let status = base + STATUS_OFFSET;
        if len == 0 {
            g.write_desc(head, base, HEADER_LEN, F_NEXT, head + 2);
        } else {
            let write = if kind == req::IN || kind == req::GET_ID {
                F_WRITE
            } else {
                0
            };
            g.write_desc(head, base, HEADER_LEN, F_NEXT, head + 1);
            g.write_desc(head + 1, data_addr, len, write | F_NEXT, head + 2);
        }
        g.write_desc(head + 2, status, 1, F_WRITE, 0);
        g.publish(head);
        queue.pending.insert(head, Pending { kind, len });
        Some(head)
    }

    /// Kick queue `q`.
    ///
    /// # Errors
    /// When the eventfd write fails.
    pub fn kick(&self, q: usize) -> Result<(), FrontendError> {
        if let Some(queue) = self.queues.get(q) {
            queue.kick.write(1)?;
        }
        Ok(())
    }

    /// Completions in the used ring of queue `q` now (no waiting).
    pub fn completions(&mut self, q: usize) -> Vec<Completion> {
        let Some(queue) = self.queues.get_mut(q) else {
            return Vec::new();
        };
        let used = queue.guest.take_used();
        if self.cfg.event_idx {
            // As a driver does: ask for a notification at the next completion.
            queue.guest.set_used_event(queue.guest.used_seen());
        }
        let mut out = Vec::with_capacity(used.len());
        for (id, used_len) in used {
            let head = u16::try_from(id).unwrap_or(u16::MAX);
            let Some(p) = queue.pending.remove(&head) else {
                out.push(Completion {
                    head,
                    status: 0xFF,
                    used_len,
                    data: Vec::new(),
                    unexpected: true,
                });
                continue;
            };
            let slot = head / 3;
            let base = queue.slot_base + u64::from(slot) * queue.slot_bytes;
            let status = queue.guest.byte_at(base + STATUS_OFFSET);
            let mut data = Vec::new();
            if p.kind == req::IN && p.len > 0 {
                data = vec![0u8; usize::try_from(p.len).unwrap_or(0)];
                let _ = queue
                    .guest
                    .mem
                    .read_slice(&mut data, GuestAddress(base + SLOT_HEADER_BYTES));
            }
            queue.free.push(slot);
            out.push(Completion {
                head,
                status,
                used_len,
                data,
                unexpected: false,
            });
        }
        out
    }

    /// Wait up to `timeout` until queue `q` has completions and return them. Fails with
    /// [`FrontendError::Disconnected`] as soon as the backend's socket closes.
    ///
    /// # Errors
    /// Disconnected, timeout, or a failed system call.
    pub fn wait(&mut self, q: usize, timeout: Duration) -> Result<Vec<Completion>, FrontendError> {
        let deadline = Instant::now() + timeout;
        loop {
            let done = self.completions(q);
            if !done.is_empty() {
                return Ok(done);
            }
            let conn = self.conn.as_ref().ok_or(FrontendError::NotConnected)?;
            let call = self.queues.get(q).map_or(-1, |x| x.call.as_raw_fd());
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(FrontendError::Timeout);
            }
            let ms = i32::try_from(left.as_millis().clamp(1, 100)).unwrap_or(100);
            let mut fds = [
                libc::pollfd {
                    fd: call,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: conn.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            if fds[0].revents & libc::POLLIN != 0 {
                if let Some(x) = self.queues.get(q) {
                    let _ = x.call.read();
                }
            }
            // Nothing is ever sent to the frontend unasked on this socket: readable means
            // closed.
            if fds[1].revents != 0 {
                let done = self.completions(q);
                if !done.is_empty() {
                    return Ok(done);
                }
                self.conn = None;
                return Err(FrontendError::Disconnected);
            }
        }
    }
}

/// Bytes the rings of a queue of `size` entries take (descriptor table, available ring with
/// `used_event`, used ring with `avail_event`), as [`MockGuest`] lays them out.
fn ring_bytes(size: u16) -> u64 {
    let avail = 16 * u64::from(size);
    let used = (avail + 6 + 2 * u64::from(size)).next_multiple_of(4);
    used + 6 + 8 * u64::from(size)
}

/// Connect to a unix socket, retrying while it does not exist or refuses (a backend being
/// started).
fn connect_retry(path: &Path, timeout: Duration) -> Result<UnixStream, FrontendError> {
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
