//! One batch: pop every available chain, validate, execute on storage, complete.

use super::{EngineError, QueueEngine, Ring};
use crate::clock::now_ns;
use crate::counters::QueueCounters;
use crate::guest_io;
use crate::request::{self, Request, RequestType};
use crate::storage::{Io, IoKind};
use crate::virtio::status;
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmirq_policy::moderation::{CompletionMeta, Decision, Event, Moderator, RequestKind};

/// A request of the batch on its way to completion.
struct Slot {
    head: u16,
    status_addr: Option<GuestAddress>,
    status: u8,
    /// Bytes written into device-writable buffers, not counting the status byte.
    written: u32,
    meta: CompletionMeta,
    /// Index into the storage batch, when the request needs storage.
    io: Option<usize>,
}

/// The request slots of one batch, reused by the next (emptied, capacity kept). Storage
/// operations are not kept: they hold raw iovec pointers into guest memory, which must not
/// outlive the batch (and would make the engine `!Send`).
#[derive(Default)]
pub(super) struct BatchBuffers {
    slots: Vec<Slot>,
}

impl QueueEngine {
    /// Pop, execute and complete every chain available now. Returns how many there were.
    ///
    /// The clock is read twice per batch, not per request: once for the submissions (all
    /// chains are popped together) and once when storage has finished (all completions
    /// become visible together).
    pub(super) fn process_batch(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<usize, EngineError> {
        let mut slots = std::mem::take(&mut self.buffers.slots);
        slots.clear();
        let result = self.run_batch(ring, mem, &mut slots);
        self.buffers.slots = slots;
        result
    }

    fn run_batch(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
        slots: &mut Vec<Slot>,
    ) -> Result<usize, EngineError> {
        let mut ios = Vec::new();
        let submitted_at = now_ns();
        let queue = ring.queue_mut();
        let mut last = Decision::Idle;
        let mut notify_at_submit = false;
        for chain in queue.iter(mem)? {
            let head = chain.head_index();
            let slot = match request::parse(head, chain, mem, &self.parts.geometry) {
                Ok(req) => self.prepare(req, mem, &mut ios),
                Err(rej) => rejected_slot(rej),
            };
            slots.push(slot);
            last = self.parts.moderation.on_event(submitted_at, Event::Submit);
            notify_at_submit |= last == Decision::Notify;
        }
        if slots.is_empty() {
            return Ok(0);
        }
        if notify_at_submit {
            self.notify(ring, mem)?;
        }
        self.parts.io.execute(&mut ios);
        for slot in slots.iter_mut() {
            if let Some(i) = slot.io {
                if !ios[i].ok {
                    slot.status = status::IOERR;
                    slot.written = 0;
                }
            }
        }
        let completed_at = now_ns();
        for slot in slots.iter() {
            self.complete(slot, ring, mem)?;
            last = self
                .parts
                .moderation
                .on_event(completed_at, Event::Complete(slot.meta));
            // Signal as soon as the policy says so: the driver can start reaping (and
            // resubmitting) while the rest of the batch completes. EVENT_IDX suppresses
            // signals the driver has not asked for yet.
            match last {
                Decision::Notify => self.notify(ring, mem)?,
                Decision::Hold { .. } => QueueCounters::add(&self.parts.counters.held, 1),
                Decision::Idle => {}
            }
        }
        // The timer follows the batch's last decision (one timerfd update per batch).
        self.apply(last, false, ring, mem)?;
        Ok(slots.len())
    }

    /// Turn a valid request into a slot, adding its storage operation to `ios`.
    fn prepare(&mut self, req: Request, mem: &GuestMemoryMmap, ios: &mut Vec<Io>) -> Slot {
        let (kind, bytes, sync) = match req.kind {
            RequestType::In => (RequestKind::Read, req.data_len, false),
            RequestType::Out => (RequestKind::Write, req.data_len, false),
            RequestType::Flush => (RequestKind::Flush, 0, true),
            _ => (RequestKind::Other, 0, false),
        };
        let mut meta = CompletionMeta::new(kind, bytes);
        if sync {
            meta = meta.with(CompletionMeta::SYNC);
        }
        let mut slot = Slot {
            head: req.head,
            status_addr: Some(req.status),
            status: status::OK,
            written: 0,
            meta,
            io: None,
        };
        let io = match req.kind {
            RequestType::In | RequestType::Out => {
                let Some(iov) = guest_io::iovecs(mem, &req.data) else {
                    slot.status = status::IOERR;
                    return slot;
                };
                let kind = if req.kind == RequestType::In {
                    IoKind::Read
                } else {
                    IoKind::Write
                };
                let mut io = Io::new(kind, req.offset, u64::from(req.data_len));
                io.iov = iov;
                if req.kind == RequestType::In {
                    slot.written = req.data_len;
                }
                Some(io)
            }
            RequestType::Flush => Some(Io::new(IoKind::Flush, 0, 0)),
            RequestType::Discard | RequestType::WriteZeroes => {
                let kind = if req.kind == RequestType::Discard {
                    IoKind::Discard
                } else {
                    IoKind::WriteZeroes
                };
                // The parser allows at most MAX_DISCARD_SEGMENTS (1) range per request.
                req.ranges.first().map(|r| Io::new(kind, r.offset, r.len))
            }
            RequestType::GetId => {
                slot.written = self.write_id(&req, mem).unwrap_or_else(|| {
                    slot.status = status::IOERR;
                    0
                });
                None
            }
        };
        if let Some(io) = io {
            slot.io = Some(ios.len());
            ios.push(io);
        }
        slot
    }

    /// Copy the device id into the request's buffers; returns the bytes written.
    fn write_id(&self, req: &Request, mem: &GuestMemoryMmap) -> Option<u32> {
        let mut left: &[u8] = &self.parts.device_id;
        let mut written = 0u32;
        for seg in &req.data {
            if left.is_empty() {
                break;
            }
            let n = left.len().min(usize::try_from(seg.len).ok()?);
            mem.write_slice(&left[..n], seg.addr).ok()?;
            left = &left[n..];
            written += u32::try_from(n).ok()?;
        }
        Some(written)
    }

    /// Write the status, put the chain in the used ring and count it.
    fn complete(
        &mut self,
        slot: &Slot,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<(), EngineError> {
        let c = &self.parts.counters;
        let mut used_len = 0;
        if let Some(addr) = slot.status_addr {
            // The parser checked that the status byte lies in guest memory; if memory was
            // replaced since, the write fails and the driver sees used len 0.
            if mem.write_obj(slot.status, addr).is_ok() {
                used_len = slot.written.saturating_add(1);
            }
        }
        ring.queue_mut().add_used(mem, slot.head, used_len)?;
        QueueCounters::add(&c.requests, 1);
        if slot.status != status::OK {
            QueueCounters::add(&c.errors, 1);
        } else {
            match slot.meta.kind {
                RequestKind::Read => QueueCounters::add(&c.read_bytes, u64::from(slot.meta.bytes)),
                RequestKind::Write => {
                    QueueCounters::add(&c.write_bytes, u64::from(slot.meta.bytes))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A slot for a chain the parser rejected.
fn rejected_slot(rej: request::Rejected) -> Slot {
    tracing::debug!(head = rej.head, error = %rej.error, "request rejected");
    Slot {
        head: rej.head,
        status_addr: rej.status_addr,
        status: rej.error.status(),
        written: 0,
        meta: CompletionMeta::new(RequestKind::Other, 0),
        io: None,
    }
}
