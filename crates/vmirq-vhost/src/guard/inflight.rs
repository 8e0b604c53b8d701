//! The guard's part of INFLIGHT_SHMFD ([`crate::inflight`]), which vhost-user-backend 0.24
//! refuses and offers no hook for (its request handler is private to `VhostUserDaemon`):
//! - GET_PROTOCOL_FEATURES replies from the handler get `INFLIGHT_SHMFD` added; what the
//!   frontend acknowledges (SET_PROTOCOL_FEATURES, passed on unchanged) is remembered;
//! - GET_INFLIGHT_FD is answered here: a sealed memfd, or `mmap_size` 0 and no fd when the
//!   requested geometry is not this device's (QEMU takes that as "no inflight area");
//! - SET_INFLIGHT_FD is answered here: the area is checked and mapped and each queue's region
//!   installed; a refused area is refused like any other message (failure ack, connection
//!   closed);
//! - after SET_VRING_KICK is passed on (and after SET_INFLIGHT_FD, for rings already kicked),
//!   the queue's engine is told that its ring started and the kick eventfd is written once,
//!   so the engine resubmits what the area lists even if the guest never kicks again.

use super::wire::{Message, FLAG_NEED_REPLY, FLAG_REPLY, VERSION_1};
use crate::inflight::area::AreaError;
use crate::inflight::InflightState;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use vhost::vhost_user::message::{VhostUserInflight, VhostUserProtocolFeatures};
use vm_memory::ByteValued;

use super::wire::req as code;

const INFLIGHT_SHMFD: u64 = VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits();
const REPLY_ACK: u64 = VhostUserProtocolFeatures::REPLY_ACK.bits();
/// SET_VRING_KICK payload: the no-fd flag.
const NO_FD: u64 = 0x100;

/// Why an inflight message is refused (the connection then ends).
#[derive(Debug, thiserror::Error)]
pub enum InflightError {
    /// An inflight message although INFLIGHT_SHMFD was not negotiated.
    #[error("{0} without VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD")]
    NotNegotiated(&'static str),
    /// Wrong payload size or descriptor count.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// SET_INFLIGHT_FD with an area this device refuses.
    #[error("SET_INFLIGHT_FD refused")]
    Area(#[from] AreaError),
}

/// What the guard does with a frontend message after [`Inflight::request`].
#[derive(Debug)]
pub enum Step {
    /// Pass it to the handler (then call [`Inflight::forwarded`]).
    Forward,
    /// Answered here: send this reply, if any, to the frontend.
    Answered(Option<Message>),
}

/// The inflight state of one guarded connection.
#[derive(Debug)]
pub struct Inflight {
    state: Arc<InflightState>,
    /// Protocol features the frontend acknowledged.
    protocol: u64,
    /// A duplicate of each queue's kick eventfd while its ring runs.
    kicks: Vec<Option<File>>,
}

impl Inflight {
    /// Inflight handling over the connection's shared state.
    #[must_use]
    pub fn new(state: Arc<InflightState>) -> Self {
        Self {
            state,
            protocol: 0,
            kicks: Vec::new(),
        }
    }

    /// A reply of the handler on its way to the frontend: offer INFLIGHT_SHMFD.
    pub fn rewrite_reply(&self, msg: &mut Message) {
        if msg.request == code::GET_PROTOCOL_FEATURES
            && msg.flags & FLAG_REPLY != 0
            && msg.payload.len() == 8
        {
            let features = msg.u64_at(0) | INFLIGHT_SHMFD;
            msg.payload = features.to_le_bytes().to_vec();
        }
    }

    /// A checked frontend message: answer it here, or let it pass.
    ///
    /// # Errors
    /// An inflight message that must be refused.
    pub fn request(&mut self, msg: &mut Message) -> Result<Step, InflightError> {
        match msg.request {
            code::GET_INFLIGHT_FD => self.get(msg).map(|r| Step::Answered(Some(r))),
            code::SET_INFLIGHT_FD => self.set(msg).map(Step::Answered),
            code::SET_PROTOCOL_FEATURES => {
                self.protocol = msg.u64_at(0);
                Ok(Step::Forward)
            }
            _ => Ok(Step::Forward),
        }
    }

    /// `msg` was passed to the handler.
    pub fn forwarded(&mut self, msg: &Message) {
        match msg.request {
            code::SET_VRING_KICK => {
                let v = msg.u64_at(0);
                let q = usize::try_from(v & 0xff).unwrap_or(usize::MAX);
                let kick = msg.files.first().filter(|_| v & NO_FD == 0);
                if let (Some(file), Some(_)) = (kick, self.state.slot(q)) {
                    if self.kicks.len() <= q {
                        self.kicks.resize_with(q + 1, || None);
                    }
                    self.kicks[q] = file.try_clone().ok();
                    self.ring_started(q);
                }
            }
            code::GET_VRING_BASE => {
                let q = usize::try_from(msg.u32_at(0)).unwrap_or(usize::MAX);
                if let Some(k) = self.kicks.get_mut(q) {
                    *k = None;
                }
            }
            _ => {}
        }
    }

    fn negotiated(&self, what: &'static str) -> Result<(), InflightError> {
        if self.protocol & INFLIGHT_SHMFD == 0 {
            return Err(InflightError::NotNegotiated(what));
        }
        Ok(())
    }

    /// GET_INFLIGHT_FD: a new area, or `mmap_size` 0 without an fd when refused.
    fn get(&self, msg: &Message) -> Result<Message, InflightError> {
        self.negotiated("GET_INFLIGHT_FD")?;
        let req = body::<VhostUserInflight>(&msg.payload)
            .filter(|_| msg.files.is_empty())
            .ok_or(InflightError::Malformed("GET_INFLIGHT_FD"))?;
        let (answer, files) = match self.state.get(&req) {
            Ok((answer, file)) => (answer, vec![file]),
            Err(e) => {
                tracing::warn!("GET_INFLIGHT_FD refused: {e}");
                let none = VhostUserInflight::new(0, 0, req.num_queues, req.queue_size);
                (none, vec![])
            }
        };
        Ok(reply(msg.request, answer.as_slice().to_vec(), files))
    }

    /// SET_INFLIGHT_FD: map and install the area (an ack if asked for); rings already kicked
    /// recover at once.
    fn set(&mut self, msg: &mut Message) -> Result<Option<Message>, InflightError> {
        self.negotiated("SET_INFLIGHT_FD")?;
        let area = body::<VhostUserInflight>(&msg.payload)
            .filter(|_| msg.files.len() == 1)
            .ok_or(InflightError::Malformed("SET_INFLIGHT_FD"))?;
        let file = msg.files.remove(0);
        self.state.set(&area, file)?;
        for q in 0..self.kicks.len() {
            self.ring_started(q);
        }
        let ack = msg.flags & FLAG_NEED_REPLY != 0 && self.protocol & REPLY_ACK != 0;
        Ok(ack.then(|| reply(msg.request, 0u64.to_le_bytes().to_vec(), vec![])))
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

/// A reply to `request`.
fn reply(request: u32, payload: Vec<u8>, files: Vec<File>) -> Message {
    Message {
        request,
        flags: VERSION_1 | FLAG_REPLY,
        payload,
        files,
    }
}

/// A message body of exactly `size_of::<T>()` bytes (copied: payloads have no alignment).
fn body<T: ByteValued + Default>(bytes: &[u8]) -> Option<T> {
    let mut v = T::default();
    if bytes.len() != v.as_slice().len() {
        return None;
    }
    v.as_mut_slice().copy_from_slice(bytes);
    Some(v)
}
