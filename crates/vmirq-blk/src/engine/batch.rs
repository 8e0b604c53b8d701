//! Requests on their way through the queue: pop available chains (as many as free tags
//! allow), validate them, start their storage operations; later, put finished requests in
//! the used ring and feed each completion to the moderation policy.
//!
//! Storage completes asynchronously (the file backend) or inside `start` (RAM and null
//! disks); both look the same here: finished operations come back from `QueueIo::reap` with
//! the tag they were started under. A request in flight keeps the guest-memory snapshot its
//! buffers point into, so a memory-table change cannot unmap them under the kernel.

use super::{EngineError, QueueEngine, Ring};
use crate::chain::DescTable;
use crate::counters::QueueCounters;
use crate::guest_io;
use crate::request::{self, Failure, Request, RequestType};
use crate::storage::{Done, Io, IoKind};
use crate::virtio::status;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmirq_policy::moderation::{CompletionMeta, Decision, RequestKind};
use vmirq_vhost::notify::Submissions;

/// A request between parsing and completion.
pub(super) struct Slot {
    head: u16,
    /// Where the status byte goes (checked by the parser).
    status_addr: GuestAddress,
    status: u8,
    /// Bytes written into device-writable buffers, not counting the status byte.
    written: u32,
    meta: CompletionMeta,
}

/// A request whose storage operation is in flight, with the memory its buffers live in.
struct Pending {
    slot: Slot,
    mem: Arc<GuestMemoryMmap>,
}

/// Requests in flight, by tag, plus reusable buffers (emptied, capacity kept), so the
/// steady state allocates nothing per batch.
pub(super) struct Inflight {
    pending: Vec<Option<Pending>>,
    free: Vec<u32>,
    /// Requests that finished without storage (rejected, GET_ID, unmappable buffers).
    ready: Vec<Slot>,
    done: Vec<Done>,
    /// Parser buffers reused across requests.
    scratch: request::Scratch,
}

impl Inflight {
    /// Room for `capacity` requests in flight (the storage context's capacity).
    pub(super) fn new(capacity: usize) -> Self {
        let capacity = u32::try_from(capacity.max(1)).unwrap_or(u32::MAX);
        Self {
            pending: (0..capacity).map(|_| None).collect(),
            free: (0..capacity).rev().collect(),
            ready: Vec::new(),
            done: Vec::new(),
            scratch: request::Scratch::default(),
        }
    }

    /// Requests in flight.
    pub(super) fn len(&self) -> usize {
        self.pending.len() - self.free.len()
    }

    /// Whether a tag is free (another request can start).
    pub(super) fn has_free_tag(&self) -> bool {
        !self.free.is_empty()
    }

    /// Whether a request with head `head` has its storage operation in flight.
    pub(super) fn holds(&self, head: u16) -> bool {
        self.pending.iter().flatten().any(|p| p.slot.head == head)
    }

    /// Drop the requests storage reported finished (`done`), then keep the guest memory of
    /// every request still pending mapped for the life of the process: its storage operation
    /// may still be running in the kernel.
    pub(super) fn leak_memory_of_unfinished(&mut self) {
        for d in &self.done {
            if let Some(p) = self.pending.get_mut(d.tag as usize) {
                *p = None;
            }
        }
        for p in &mut self.pending {
            if let Some(p) = p.take() {
                std::mem::forget(p.mem);
            }
        }
    }

    /// Operations storage reported finished but failed, not yet taken.
    pub(super) fn failed_done(&self) -> usize {
        self.done.iter().filter(|d| !d.ok).count()
    }

    /// Forget every request (after the device reset; their storage has finished).
    pub(super) fn clear(&mut self) {
        for (tag, p) in self.pending.iter_mut().enumerate() {
            if p.take().is_some() {
                self.free.push(u32::try_from(tag).unwrap_or(u32::MAX));
            }
        }
        self.ready.clear();
        self.done.clear();
    }
}

impl QueueEngine {
    /// Pop and start every chain available now (as many as free tags allow), then complete
    /// whatever has finished. Returns how many chains were popped.
    ///
    /// The clock is read once for the submissions (all chains are popped together; not at all
    /// when nothing is available) and once for the completions (they become visible together).
    pub(super) fn process_batch(
        &mut self,
        ring: &mut dyn Ring,
        mem: &Arc<GuestMemoryMmap>,
    ) -> Result<usize, EngineError> {
        let mut subs = Submissions::default();
        let mut popped = 0usize;
        let mut broken = None;
        // The available index first, then the memory the chains are translated with: every
        // chain counted here was published after any memory-table change the frontend saw
        // acknowledged, so the memory read after it has that change (the snapshot the event,
        // or a long poll, started with may not). Only the chains counted here are popped.
        let available = {
            let queue = ring.queue_mut();
            let avail = queue.avail_idx(&**mem, Ordering::Acquire)?;
            usize::from(avail.0.wrapping_sub(queue.next_avail()))
        };
        let fresh = ring.current_memory();
        let mem = fresh.as_ref().unwrap_or(mem);
        {
            let queue = ring.queue_mut();
            let table = DescTable {
                addr: GuestAddress(queue.desc_table()),
                size: queue.size(),
                indirect: self.indirect_desc,
            };
            let mut chains = queue.iter(&**mem)?;
            while popped < available && !self.inflight.free.is_empty() {
                let Some(chain) = chains.next() else { break };
                popped += 1;
                let head = chain.head_index();
                self.tracking.popped(head);
                if let Err(e) = self.take_chain(head, table, mem, &mut subs) {
                    // Stop reading the avail ring at the broken chain.
                    broken = Some(e);
                    break;
                }
            }
        }
        if popped == 0 {
            self.stalled = false;
            return Ok(0);
        }
        self.end_batch(subs, broken, ring, mem)?;
        Ok(popped)
    }

    /// Validate and start the chain at `head` (taken from the ring, or resubmitted), and tell
    /// the policy. A chain that breaks a ring rule is an error: the caller stops there.
    pub(super) fn take_chain(
        &mut self,
        head: u16,
        table: DescTable,
        mem: &Arc<GuestMemoryMmap>,
        subs: &mut Submissions,
    ) -> Result<(), EngineError> {
        match request::parse(
            head,
            table,
            mem,
            &self.parts.geometry,
            &mut self.inflight.scratch,
        ) {
            Ok(req) => self.start(req, mem),
            Err(Failure::Rejected(rej)) => self.inflight.ready.push(rejected_slot(rej)),
            Err(Failure::Broken(violation)) => return Err(EngineError::Chain { head, violation }),
        }
        // One clock read per batch, and none for the empty batch that ends a drain.
        self.notifier.submitted(subs);
        Ok(())
    }

    /// After a batch of [`QueueEngine::take_chain`]: submit to storage, then fail with
    /// `broken` if a chain broke the ring; otherwise notify if a submission asked for it,
    /// complete whatever finished, and set the hold timer.
    pub(super) fn end_batch(
        &mut self,
        subs: Submissions,
        broken: Option<EngineError>,
        ring: &mut dyn Ring,
        mem: &Arc<GuestMemoryMmap>,
    ) -> Result<(), EngineError> {
        // Operations started before a broken chain still go to storage: they are reaped
        // (not completed) as they finish, instead of waiting unsubmitted.
        self.parts.io.submit();
        if let Some(e) = broken {
            return Err(e);
        }
        let mut last = self.notifier.submissions_done(&subs, ring, mem)?;
        if let Some(d) = self.complete_finished(ring, mem)? {
            last = Some(d);
        }
        // The timer follows the batch's last decision (one timerfd update per batch).
        if let Some(d) = last {
            self.notifier.follow(d)?;
        }
        // Out of tags: the rest of the ring waits until storage gives some back.
        self.stalled = self.inflight.free.is_empty();
        Ok(())
    }

    /// Complete every request whose storage has finished (and those that needed none).
    /// Returns the policy's last decision, or `None` when nothing completed. The caller
    /// applies the decision to the hold timer.
    pub(super) fn complete_finished(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<Option<Decision>, EngineError> {
        let mut done = std::mem::take(&mut self.inflight.done);
        let mut ready = std::mem::take(&mut self.inflight.ready);
        if self.parts.io.in_flight() > 0 {
            self.parts.io.reap(&mut done);
        }
        let result = self.complete_all(ring, mem, &mut ready, &mut done);
        // On an error (the queue breaks) `done` keeps the operations not yet handled, so
        // `discard_finished` can give their tags back.
        ready.clear();
        self.inflight.ready = ready;
        self.inflight.done = done;
        result
    }

    /// Block until storage has finished every operation in flight (or `timeout_ms`), keeping
    /// the finished ones for `complete_finished`.
    pub(super) fn wait_for_storage(&mut self, timeout_ms: u32) {
        let mut done = std::mem::take(&mut self.inflight.done);
        self.parts.io.wait(&mut done, timeout_ms);
        self.inflight.done = done;
    }

    /// Reap finished storage operations and drop their requests without completing them
    /// (the queue is broken; the driver must reset it).
    pub(super) fn discard_finished(&mut self) {
        let mut done = std::mem::take(&mut self.inflight.done);
        if self.parts.io.in_flight() > 0 {
            self.parts.io.reap(&mut done);
        }
        for d in done.drain(..) {
            let slot = usize::try_from(d.tag)
                .ok()
                .and_then(|i| self.inflight.pending.get_mut(i));
            if let Some(entry) = slot {
                if entry.take().is_some() {
                    self.inflight.free.push(d.tag);
                }
            }
        }
        self.inflight.ready.clear();
        self.inflight.done = done;
    }

    fn complete_all(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
        ready: &mut Vec<Slot>,
        done: &mut Vec<Done>,
    ) -> Result<Option<Decision>, EngineError> {
        if ready.is_empty() && done.is_empty() {
            return Ok(None);
        }
        let mut batch = self.notifier.completions();
        for slot in ready.drain(..) {
            self.complete(&slot, mem, ring, mem)?;
            self.notifier.completed(&mut batch, slot.meta, ring, mem)?;
        }
        // Handled from the back of a reversed list, so an error leaves exactly the
        // unhandled ones in `done`, in storage's order.
        done.reverse();
        while let Some(d) = done.pop() {
            let entry = usize::try_from(d.tag)
                .ok()
                .and_then(|i| self.inflight.pending.get_mut(i))
                .and_then(Option::take);
            let Some(Pending {
                mut slot,
                mem: data_mem,
            }) = entry
            else {
                tracing::error!(
                    queue = self.parts.index,
                    tag = d.tag,
                    "storage finished an unknown tag"
                );
                continue;
            };
            self.inflight.free.push(d.tag);
            if !d.ok {
                slot.status = status::IOERR;
                slot.written = 0;
            }
            self.complete(&slot, &data_mem, ring, mem)?;
            self.notifier.completed(&mut batch, slot.meta, ring, mem)?;
        }
        Ok(Some(self.notifier.completions_done(batch, ring, mem)?))
    }

    /// Start a valid request: its storage operation under a free tag, or straight to the
    /// ready list when it needs no storage (or its buffers cannot be mapped).
    fn start(&mut self, req: Request, mem: &Arc<GuestMemoryMmap>) {
        self.start_request(&req, mem);
        self.inflight.scratch.recycle(req.data);
    }

    fn start_request(&mut self, req: &Request, mem: &Arc<GuestMemoryMmap>) {
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
            status_addr: req.status,
            status: status::OK,
            written: 0,
            meta,
        };
        let io = match req.kind {
            RequestType::In | RequestType::Out => {
                let Some(iov) = guest_io::iovecs(mem, &req.data) else {
                    slot.status = status::IOERR;
                    self.inflight.ready.push(slot);
                    return;
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
                slot.written = self.write_id(req, mem).unwrap_or_else(|| {
                    slot.status = status::IOERR;
                    0
                });
                None
            }
        };
        let Some(io) = io else {
            self.inflight.ready.push(slot);
            return;
        };
        // Chains are only popped while a tag is free, so there always is one here; tags are
        // indices of `pending` by construction (`Inflight::new`).
        let Some(tag) = self.inflight.free.pop() else {
            slot.status = status::IOERR;
            slot.written = 0;
            self.inflight.ready.push(slot);
            return;
        };
        self.inflight.pending[tag as usize] = Some(Pending {
            slot,
            mem: Arc::clone(mem),
        });
        self.parts.io.start(tag, io);
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

    /// Write the status (into the memory the request's buffers came from), put the chain in
    /// the used ring (of the current memory) and count it.
    fn complete(
        &mut self,
        slot: &Slot,
        data_mem: &GuestMemoryMmap,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<(), EngineError> {
        let c = &self.parts.counters.device;
        // The parser checked that the status byte lies in `data_mem` (the memory the request
        // was parsed against, kept alive while it is in flight), so this write does not fail;
        // if it ever did, the chain must not be completed (the driver would read a stale
        // status): the queue breaks instead.
        if data_mem.write_obj(slot.status, slot.status_addr).is_err() {
            return Err(EngineError::StatusWrite { head: slot.head });
        }
        let used_len = slot.written.saturating_add(1);
        self.tracking.before_used(slot.head);
        ring.queue_mut().add_used(mem, slot.head, used_len)?;
        self.tracking
            .after_used(slot.head, ring.queue_mut().next_used());
        QueueCounters::add(&c.requests, 1);
        if slot.status != status::OK {
            QueueCounters::add(&self.parts.counters.queue.errors, 1);
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
    }
}
