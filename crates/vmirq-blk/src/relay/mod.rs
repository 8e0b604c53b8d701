//! The vhost-user front door: sits between the frontend's socket and vhost-user-backend's
//! request handler, passes every message through unchanged, and answers the two messages of
//! INFLIGHT_SHMFD itself ([`crate::inflight`]).
//!
//! Why a relay: vhost-user-backend 0.24 keeps its request handler (`VhostUserHandler`) private
//! inside `VhostUserDaemon`, refuses GET/SET_INFLIGHT_FD, and offers no hook; the vhost crate's
//! handler trait has the two methods but nothing to delegate the other messages to. So the
//! daemon is connected to the relay over a private socket, and the relay:
//! - adds `INFLIGHT_SHMFD` to the GET_PROTOCOL_FEATURES reply and remembers what the frontend
//!   acknowledges (SET_PROTOCOL_FEATURES, passed on unchanged);
//! - answers GET_INFLIGHT_FD (a sealed memfd; `mmap_size` 0 and no fd when the requested
//!   geometry is not this device's, which QEMU takes as "no inflight area") and
//!   SET_INFLIGHT_FD (checked, mapped, installed per queue; a refused area ends the connection
//!   after the REPLY_ACK answer, as the daemon does for any failed request);
//! - after passing SET_VRING_KICK on (or SET_INFLIGHT_FD, for rings already kicked), tells
//!   the queue's engine that the ring started and writes its kick eventfd once, so the engine
//!   resubmits what the area lists even if the guest never kicks again.
//!
//! Two threads per connection: requests (frontend to daemon) and replies (daemon to frontend).
//! Replies of both the daemon and the relay go through one lock, whole messages at a time.
//! When either side closes, both sockets are shut down and both threads end.

pub mod wire;

use crate::inflight::InflightState;
use std::fs::File;
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use vhost::vhost_user::message::{
    FrontendReq, VhostUserInflight, VhostUserProtocolFeatures, VhostUserVringState,
};
use vm_memory::ByteValued;
use wire::{Message, WireError};

/// Request codes the relay looks at.
const GET_PROTOCOL_FEATURES: u32 = FrontendReq::GET_PROTOCOL_FEATURES as u32;
const SET_PROTOCOL_FEATURES: u32 = FrontendReq::SET_PROTOCOL_FEATURES as u32;
const SET_VRING_KICK: u32 = FrontendReq::SET_VRING_KICK as u32;
const GET_VRING_BASE: u32 = FrontendReq::GET_VRING_BASE as u32;
const GET_INFLIGHT_FD: u32 = FrontendReq::GET_INFLIGHT_FD as u32;
const SET_INFLIGHT_FD: u32 = FrontendReq::SET_INFLIGHT_FD as u32;
/// SET_VRING_KICK payload: queue index bits and the "no fd" flag.
const VRING_IDX_MASK: u64 = 0xff;
const VRING_NOFD: u64 = 0x100;

/// Why the relay ends a connection.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Reading or writing a message failed.
    #[error("vhost-user socket")]
    Wire(#[from] WireError),
    /// An inflight message although INFLIGHT_SHMFD was not negotiated.
    #[error("{0} without VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD")]
    NotNegotiated(&'static str),
    /// A malformed inflight message (payload size, descriptors).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// SET_INFLIGHT_FD with an area this device refuses.
    #[error("inflight area refused")]
    Area(#[from] crate::inflight::area::AreaError),
}

/// The relay threads of one connection.
#[derive(Debug)]
pub struct Relay {
    requests: JoinHandle<()>,
    replies: JoinHandle<()>,
}

impl Relay {
    /// Relay between `frontend` and `device` (the daemon's end of the private socket).
    ///
    /// # Errors
    /// When the sockets cannot be duplicated or a thread cannot be started.
    pub fn spawn(
        frontend: UnixStream,
        device: UnixStream,
        state: Arc<InflightState>,
    ) -> std::io::Result<Self> {
        let to_frontend = Arc::new(Mutex::new(frontend.try_clone()?));
        let front_for_replies = frontend.try_clone()?;
        let device_for_replies = device.try_clone()?;
        let out = Arc::clone(&to_frontend);
        let replies = std::thread::Builder::new()
            .name("vhost-relay-rep".to_owned())
            .spawn(move || relay_replies(&device_for_replies, &out, &front_for_replies))?;
        let requests = std::thread::Builder::new()
            .name("vhost-relay-req".to_owned())
            .spawn(move || {
                let mut req = Requests {
                    state,
                    to_frontend,
                    device,
                    protocol: 0,
                    kicks: Vec::new(),
                };
                if let Err(e) = req.run(&frontend) {
                    match e {
                        RelayError::Wire(WireError::Closed) => {}
                        e => tracing::warn!(error = %e, "vhost-user connection ended by the relay"),
                    }
                }
                let _ = req.device.shutdown(Shutdown::Both);
                let _ = frontend.shutdown(Shutdown::Both);
            })?;
        Ok(Self { requests, replies })
    }

    /// Wait for both threads (they end once either side has closed).
    pub fn join(self) {
        let _ = self.requests.join();
        let _ = self.replies.join();
    }
}

/// Daemon to frontend: pass replies on, adding INFLIGHT_SHMFD to the protocol features.
fn relay_replies(device: &UnixStream, out: &Mutex<UnixStream>, frontend: &UnixStream) {
    loop {
        let mut msg = match wire::recv(device) {
            Ok(m) => m,
            Err(WireError::Closed) => break,
            Err(e) => {
                tracing::warn!(error = %e, "bad message from the device side");
                break;
            }
        };
        if msg.request == GET_PROTOCOL_FEATURES {
            if let Some(f) = msg.u64_payload() {
                let f = f | VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits();
                msg.payload = f.to_ne_bytes().to_vec();
            }
        }
        let sent = wire::send(&out.lock().unwrap_or_else(PoisonError::into_inner), &msg);
        if sent.is_err() {
            break;
        }
    }
    let _ = frontend.shutdown(Shutdown::Both);
    let _ = device.shutdown(Shutdown::Both);
}

/// Frontend to daemon.
struct Requests {
    state: Arc<InflightState>,
    to_frontend: Arc<Mutex<UnixStream>>,
    device: UnixStream,
    /// Protocol features the frontend acknowledged.
    protocol: u64,
    /// A duplicate of each queue's kick eventfd, while its ring runs.
    kicks: Vec<Option<File>>,
}

impl Requests {
    fn run(&mut self, frontend: &UnixStream) -> Result<(), RelayError> {
        loop {
            let msg = wire::recv(frontend)?;
            match msg.request {
                GET_INFLIGHT_FD => self.get_inflight(&msg)?,
                SET_INFLIGHT_FD => self.set_inflight(msg)?,
                SET_PROTOCOL_FEATURES => {
                    self.protocol = msg.u64_payload().unwrap_or(0);
                    wire::send(&self.device, &msg)?;
                }
                SET_VRING_KICK => self.set_vring_kick(msg)?,
                GET_VRING_BASE => {
                    if let Some(s) = parse::<VhostUserVringState>(&msg.payload) {
                        self.forget_kick(s.index as usize);
                    }
                    wire::send(&self.device, &msg)?;
                }
                _ => wire::send(&self.device, &msg)?,
            }
        }
    }

    fn negotiated(&self, f: VhostUserProtocolFeatures) -> bool {
        self.protocol & f.bits() != 0
    }

    fn reply(&self, msg: &Message) -> Result<(), RelayError> {
        let out = self
            .to_frontend
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(wire::send(&out, msg)?)
    }

    /// GET_INFLIGHT_FD: a new area, or `mmap_size` 0 without an fd when refused.
    fn get_inflight(&self, msg: &Message) -> Result<(), RelayError> {
        if !self.negotiated(VhostUserProtocolFeatures::INFLIGHT_SHMFD) {
            return Err(RelayError::NotNegotiated("GET_INFLIGHT_FD"));
        }
        let req = parse::<VhostUserInflight>(&msg.payload)
            .filter(|_| msg.files.is_empty())
            .ok_or(RelayError::Malformed("GET_INFLIGHT_FD"))?;
        let (answer, files) = match self.state.get(&req) {
            Ok((answer, file)) => (answer, vec![file]),
            Err(e) => {
                tracing::warn!(error = %e, "GET_INFLIGHT_FD refused");
                (
                    VhostUserInflight::new(0, 0, req.num_queues, req.queue_size),
                    vec![],
                )
            }
        };
        self.reply(&Message::reply(
            GET_INFLIGHT_FD,
            answer.as_slice().to_vec(),
            files,
        ))
    }

    /// SET_INFLIGHT_FD: map and install the area; rings already kicked recover at once.
    fn set_inflight(&mut self, mut msg: Message) -> Result<(), RelayError> {
        if !self.negotiated(VhostUserProtocolFeatures::INFLIGHT_SHMFD) {
            return Err(RelayError::NotNegotiated("SET_INFLIGHT_FD"));
        }
        let parsed = parse::<VhostUserInflight>(&msg.payload);
        let result = match (parsed, msg.files.len()) {
            (Some(m), 1) => {
                let file = msg.files.remove(0);
                self.state.set(&m, file).map_err(RelayError::from)
            }
            _ => Err(RelayError::Malformed("SET_INFLIGHT_FD")),
        };
        if msg.needs_reply() && self.negotiated(VhostUserProtocolFeatures::REPLY_ACK) {
            let status: u64 = if result.is_ok() { 0 } else { 1 };
            self.reply(&Message::reply(
                SET_INFLIGHT_FD,
                status.to_ne_bytes().to_vec(),
                vec![],
            ))?;
        }
        result?;
        for q in 0..self.kicks.len() {
            self.ring_started(q);
        }
        Ok(())
    }

    /// SET_VRING_KICK: pass it on, then start the ring's recovery if an area is installed.
    fn set_vring_kick(&mut self, msg: Message) -> Result<(), RelayError> {
        let payload = msg.u64_payload();
        let kick = match (payload, msg.files.first()) {
            (Some(v), Some(f)) if v & VRING_NOFD == 0 && msg.files.len() == 1 => {
                f.try_clone().ok().map(|f| (v & VRING_IDX_MASK, f))
            }
            _ => None,
        };
        wire::send(&self.device, &msg)?;
        if let Some((q, file)) = kick {
            let q = usize::try_from(q).unwrap_or(usize::MAX);
            if self.state.slot(q).is_some() {
                if self.kicks.len() <= q {
                    self.kicks.resize_with(q + 1, || None);
                }
                self.kicks[q] = Some(file);
                self.ring_started(q);
            }
        }
        Ok(())
    }

    fn forget_kick(&mut self, q: usize) {
        if let Some(k) = self.kicks.get_mut(q) {
            *k = None;
        }
    }

    /// Tell queue `q`'s engine its ring started (if an area is installed) and kick it once.
    fn ring_started(&mut self, q: usize) {
        let (Some(slot), Some(Some(kick))) = (self.state.slot(q), self.kicks.get_mut(q)) else {
            return;
        };
        if !slot.has_log() {
            return;
        }
        slot.ring_started();
        // An eventfd takes 8-byte writes; a failure only means no early kick.
        if let Err(e) = kick.write_all(&1u64.to_ne_bytes()) {
            tracing::warn!(queue = q, error = %e, "cannot kick the ring after its start");
        }
    }
}

/// A message body of exactly `size_of::<T>()` bytes (copied: payloads have no alignment).
fn parse<T: ByteValued + Default>(bytes: &[u8]) -> Option<T> {
    let mut v = T::default();
    if bytes.len() != v.as_slice().len() {
        return None;
    }
    v.as_mut_slice().copy_from_slice(bytes);
    Some(v)
}
