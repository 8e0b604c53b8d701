//! The forwarding thread's burst (`--datapath pmd`): up to [`crate::pmd::BURST`] transmit
//! chains off one source, in three steps.
//!
//! 1. Take: each chain is checked as [`crate::tx::read_chain`] does (ring rules, readable
//!    descriptors inside guest memory, length bounds, the net header), but only its net
//!    and Ethernet headers, and the rest of a short frame, are copied out ([`scan_chain`]);
//!    the switch routes on those.
//! 2. Deliver, in ring order: consecutive frames for one destination are written into its
//!    receive queue under one RX vring lock and one moderation lock, each frame copied once,
//!    straight from the source's memory into the receive buffers
//!    ([`FrameSrc::Guest`]); their used entries are published with one index store for the
//!    run (a merged frame is never visible in part), then the moderation policy sees each
//!    frame and makes one notification decision for the run. Broadcasts and unknown
//!    destinations (learning mode) take the per-frame path of the port workers.
//! 3. Complete: the chains consumed go to the source's used ring; when a destination had
//!    no room the first frame it refused and every later one stay in the source's ring
//!    (`next_avail` put back), the source is marked blocked on the destination and its
//!    refill kick armed, exactly as on the per-port path: no loss.

use super::tx_return::{TxReturn, TxUsed};
use super::{lock, Attached, Dests, Fabric, Sent, ARM_ATTEMPTS};
use crate::classify::classify;
use crate::counters::PortCounters;
use crate::prefetch;
use crate::queues::TxCtl;
use crate::regions::RegionCache;
use crate::rings::AvailView;
use crate::rx::{
    arm_refill_kick, quiet_refill_kicks, rx_rings, stage, FrameSrc, RxOutcome, RxScratch, UsedBatch,
};
use crate::switch::Route;
use crate::tx::{gather_frame, scan_chain, TxError, COPY_LEN};
use crate::virtio::HDR_LEN;
use std::ops::Range;
use std::sync::atomic::Ordering;
use vhost_user_backend::VringT;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::QueueT;
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryMmap};
use vmirq_policy::moderation::{CompletionMeta, RequestKind};
use vmirq_vhost::chain::{DescTable, TableView};
use vmirq_vhost::sigbus::revoked_in;
use vmirq_vhost::LiveRing;

/// One chain taken off the source.
struct Taken {
    head: u16,
    /// Its descriptors in [`BurstScratch::descs`].
    descs: Range<usize>,
    /// Frame length (net header excluded); 0 for a bad chain.
    len: usize,
    /// Why the chain is dropped, if it is.
    bad: Option<TxError>,
    route: Route,
}

impl Taken {
    /// Bytes of the chain in its [`BurstScratch::prefixes`] entry (net header included).
    fn copied(&self) -> usize {
        (HDR_LEN + self.len).min(COPY_LEN)
    }
}

/// Reusable buffers of a burst (no allocation per frame once warm).
#[derive(Default)]
pub(super) struct BurstScratch {
    taken: Vec<Taken>,
    /// Each taken chain's first bytes (`tx::scan_chain`): net header, Ethernet header,
    /// and a short frame whole (kept apart from `taken`, and reused, so that no frame
    /// moves these bytes around).
    prefixes: Vec<[u8; COPY_LEN]>,
    descs: Vec<Descriptor>,
    one: Vec<Descriptor>,
    frame: Vec<u8>,
    rx: RxScratch,
    used: UsedBatch,
    metas: Vec<CompletionMeta>,
    tx_used: TxUsed,
    dests: Dests,
    /// The source's available ring broke during the last burst.
    pub(super) broken: bool,
}

/// How a run of frames for one destination ended.
struct RunEnd {
    /// Frames consumed from the source (delivered, or dropped and counted).
    consumed: usize,
    /// The next frame found no room: stop the source.
    blocked: bool,
}

/// Prefetch the lines [`scan_chain`] copies out of chain `head`'s first descriptor (a
/// short frame's header and body, its region the one of the chain before).
#[inline]
fn prefetch_frame(table: &TableView<'_>, from: &RegionCache<'_>, head: Option<u16>) {
    if let Some(p) = head
        .and_then(|h| table.addr_hint(h))
        .and_then(|a| from.host_hint(GuestAddress(a)))
    {
        prefetch::lines(p, PREFETCH_LEN);
    }
}

/// Bytes of a frame's first descriptor prefetched: the net header and a 64-byte frame
/// (two lines at most), which [`scan_chain`] copies out.
const PREFETCH_LEN: usize = HDR_LEN + 64;

impl Fabric {
    /// One burst of at most `limit` chains off `src` (the caller holds its TX vring and
    /// moderation locks). Returns the chains consumed.
    pub(super) fn burst(
        &self,
        src: usize,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
        b: &mut BurstScratch,
        limit: usize,
    ) -> usize {
        let start = tx.state.get_queue().next_avail();
        if revoked_in(mem).is_some() {
            b.broken = true; // the frontend truncated its memory (vmirq_vhost::sigbus)
            return 0;
        }
        // The source's memory with its last used region, for the whole burst.
        let from = RegionCache::new(mem);
        self.take(src, tx, &from, b, limit);
        if revoked_in(mem).is_some() {
            // The headers read as zeros: forward and complete nothing.
            tx.state.get_queue_mut().set_next_avail(start);
            PortCounters::add(&self.slots[src].counters.queue_broken, 1);
            b.broken = true;
            return 0;
        }
        let done = self.deliver_all(src, &from, b);
        if revoked_in(mem).is_some() {
            // A frame's body (copied straight into its destination) lay in memory revoked
            // during this burst: complete none of it; what reached a destination was the
            // hostile source's own data or zeros.
            tx.state.get_queue_mut().set_next_avail(start);
            PortCounters::add(&self.slots[src].counters.queue_broken, 1);
            b.broken = true;
            let mut dests = std::mem::take(&mut b.dests);
            self.flush_dests(&mut dests);
            dests.cache.clear();
            b.dests = dests;
            return 0;
        }
        tx.state
            .get_queue_mut()
            .set_next_avail(start.wrapping_add(u16::try_from(done).unwrap_or(u16::MAX)));
        if self.complete(src, tx, ctl, mem, &b.taken[..done], &mut b.tx_used) {
            b.broken = true; // its used ring broke: stop looking at it
        }
        let mut dests = std::mem::take(&mut b.dests);
        self.flush_dests(&mut dests);
        dests.cache.clear();
        b.dests = dests;
        done
    }

    /// Step 1: take and check up to `limit` chains, route the good ones.
    fn take(
        &self,
        src: usize,
        tx: &mut LiveRing<'_>,
        from: &RegionCache<'_>,
        b: &mut BurstScratch,
        limit: usize,
    ) {
        b.taken.clear();
        b.descs.clear();
        b.broken = false;
        let mem = from.mem();
        let q = tx.state.get_queue_mut();
        // The descriptor table translated once for the burst (the TX vring lock is held).
        let table = TableView::new(
            mem,
            DescTable {
                addr: GuestAddress(q.desc_table()),
                size: q.size(),
                indirect: false,
            },
        );
        // The available ring translated once for the burst too.
        let avail = AvailView::new(q, mem);
        for n in 0..limit {
            let head = match avail.pop(q, mem) {
                Ok(Some(head)) => head,
                Ok(None) => break,
                Err(e) => {
                    // The chains taken so far are valid and go on; the queue stops after.
                    tracing::warn!(port = src, error = %e, "transmit queue broken");
                    PortCounters::add(&self.slots[src].counters.queue_broken, 1);
                    b.broken = true;
                    break;
                }
            };
            // Prefetch (crate::prefetch): after the first head (which copied up to a burst of
            // heads out of the ring), every copied chain's descriptor.
            if n == 0 {
                prefetch::descs(&avail, q, &table, limit);
            }
            let k = b.taken.len();
            if b.prefixes.len() <= k {
                b.prefixes.push([0; COPY_LEN]);
            }
            let prefix = &mut b.prefixes[k];
            let scanned = scan_chain(from, &table, head, &mut b.one, prefix);
            // While this chain's frame is routed and the next one scanned, the frame of the
            // chain after next comes (and after the first, the next one's too), its
            // descriptor brought by the prefetch above and its region the one just used.
            if n == 0 {
                prefetch_frame(&table, from, avail.copied_ahead(q, 0));
            }
            prefetch_frame(&table, from, avail.copied_ahead(q, 1));
            if let Err(TxError::Ring(v)) = scanned {
                // A ring rule broken: the chain cannot be completed (its head may name no
                // descriptor); the chains before it go on, and the queue stops after them
                // (not consumed: `burst` moves the available index past the done ones).
                tracing::warn!(port = src, error = %v, "transmit queue broken");
                PortCounters::add(&self.slots[src].counters.queue_broken, 1);
                b.broken = true;
                break;
            }
            let at = b.descs.len();
            b.descs.extend_from_slice(&b.one);
            let route = match scanned {
                Ok(_) => self.switch.route(src, &prefix[HDR_LEN..]),
                Err(_) => Route::Drop,
            };
            b.taken.push(Taken {
                head,
                descs: at..b.descs.len(),
                len: scanned.unwrap_or(0),
                bad: scanned.err(),
                route,
            });
        }
    }

    /// Step 2: deliver in ring order; returns how many chains (from the first) are
    /// consumed.
    fn deliver_all(&self, src: usize, from: &RegionCache<'_>, b: &mut BurstScratch) -> usize {
        let c = &self.slots[src].counters;
        let n = b.taken.len();
        let mut i = 0;
        while i < n {
            let t = &b.taken[i];
            if t.bad.is_some() {
                i += 1;
                continue;
            }
            match t.route {
                Route::Drop => {
                    PortCounters::add(&c.tx_no_destination, 1);
                    i += 1;
                }
                Route::Port(dst) if !self.is_tap(dst) => {
                    let mut j = i + 1;
                    while j < n && b.taken[j].bad.is_none() && b.taken[j].route == t.route {
                        j += 1;
                    }
                    match self.deliver_run(src, dst, from, i..j, b) {
                        None => {
                            PortCounters::add(&c.tx_no_destination, (j - i) as u64);
                            i = j;
                        }
                        Some(end) => {
                            i += end.consumed;
                            if end.blocked {
                                PortCounters::add(&c.tx_backpressure, 1);
                                return i;
                            }
                        }
                    }
                }
                // A tap port has no receive ring to run frames into: its frames take the
                // per-frame path, which writes them to the tap.
                Route::Flood | Route::Port(_) => {
                    let descs = &b.descs[t.descs.clone()];
                    if gather_frame(from.mem(), descs, &mut b.frame).is_err() {
                        // The memory changed under the chain since it was checked.
                        PortCounters::add(&c.tx_no_destination, 1);
                    } else if let Sent::Wait =
                        self.switch_frame(src, &b.frame, &mut b.dests, &mut b.rx)
                    {
                        return i;
                    }
                    i += 1;
                }
            }
        }
        n
    }

    /// Whether port `p` is a tap device (`--tap`), which has no receive ring.
    fn is_tap(&self, p: usize) -> bool {
        self.slots.get(p).is_some_and(|s| s.tap.get().is_some())
    }

    /// Frames `run` of the burst, all for `dst`, under one lock of its receive queue;
    /// `None` when it has no running queue.
    fn deliver_run(
        &self,
        src: usize,
        dst: usize,
        from: &RegionCache<'_>,
        run: Range<usize>,
        b: &mut BurstScratch,
    ) -> Option<RunEnd> {
        let slot = self.slots.get(dst)?;
        let a: std::sync::Arc<Attached> = self.attached(dst)?;
        let c = &slot.counters;
        let mem = a.mem.memory();
        if revoked_in(&mem).is_some() {
            return None; // its frontend truncated its memory: the connection is going away
        }
        let mut rx = a.rx.get_mut();
        if !rx.get_queue().ready() || !rx.is_enabled() {
            return None;
        }
        let mrg = a.mrg_rxbuf();
        // The receive descriptor table and available ring translated once for the run (its vring lock is held).
        let table = rx_rings(rx.get_queue(), &mem);
        let mut ctl = lock(&a.rx_ctl);
        b.metas.clear();
        let mut end = RunEnd {
            consumed: 0,
            blocked: false,
        };
        let mut broken = false;
        // Counted once for the run (one atomic add per counter, not per frame).
        let mut sum = [0u64; 3]; // frames, bytes, buffers
        let (first, end_k) = (run.start, run.end);
        for k in run {
            let t = &b.taken[k];
            if broken {
                PortCounters::add(&self.slots[src].counters.tx_no_destination, 1);
                end.consumed += 1;
                continue;
            }
            let frame = FrameSrc::Guest {
                mem: from,
                descs: &b.descs[t.descs.clone()],
                head: &b.prefixes[k][HDR_LEN..t.copied()],
                skip: t.copied(),
                len: t.len,
            };
            let q = rx.get_queue_mut();
            let mut out = stage(q, &mem, &table, frame, mrg, &mut b.rx, &mut b.used);
            if k == first {
                // The first frame copied the receive heads out of the ring: their
                // descriptors (the driver's refill wrote them) are on their way while the
                // next frames are written.
                table.prefetch_descs(rx.get_queue(), end_k - first);
            }
            if out == RxOutcome::NoRoom {
                // Mark before arming, so that a refill after the arm finds the mark; then
                // always look once more (buffers added between the failed staging and the
                // arm raise no kick and show no change during the arm: the per-frame path's
                // lost wakeup, see `Fabric::switch_frame`); look again while buffers arrive
                // during the arm (bounded).
                slot.blocked.fetch_or(1 << src, Ordering::AcqRel);
                for attempt in 1..ARM_ATTEMPTS {
                    let arrived = arm_refill_kick(rx.get_queue(), &*mem).unwrap_or(false);
                    if !arrived && attempt > 1 {
                        break;
                    }
                    let q = rx.get_queue_mut();
                    out = stage(q, &mem, &table, frame, mrg, &mut b.rx, &mut b.used);
                    if out != RxOutcome::NoRoom {
                        break;
                    }
                }
            }
            match out {
                RxOutcome::Delivered(n) => {
                    sum[0] += 1;
                    sum[1] += t.len as u64;
                    sum[2] += u64::from(n);
                    let bytes = u32::try_from(t.len).unwrap_or(u32::MAX);
                    let meta = if ctl.classify && t.copied() == HDR_LEN + t.len {
                        classify(&b.prefixes[k][HDR_LEN..t.copied()]).completion_meta()
                    } else if ctl.classify {
                        match gather_frame(from.mem(), &b.descs[t.descs.clone()], &mut b.frame) {
                            Ok(()) => classify(&b.frame).completion_meta(),
                            Err(_) => CompletionMeta::new(RequestKind::Read, bytes),
                        }
                    } else {
                        CompletionMeta::new(RequestKind::Read, bytes)
                    };
                    b.metas.push(meta);
                }
                RxOutcome::NoRoom => {
                    end.blocked = true;
                    break;
                }
                RxOutcome::TooBig => PortCounters::add(&c.rx_too_big, 1),
                RxOutcome::BadChain => PortCounters::add(&c.rx_bad_chain, 1),
                RxOutcome::Broken => broken = true,
            }
            end.consumed += 1;
        }
        if sum[0] > 0 {
            PortCounters::add(&c.rx_frames, sum[0]);
            PortCounters::add(&c.rx_bytes, sum[1]);
            PortCounters::add(&c.rx_buffers, sum[2]);
        }
        if !b.used.is_empty() && b.used.publish(rx.get_queue_mut(), &mem).is_err() {
            broken = true;
        }
        if !end.blocked && !broken {
            // The source found room: it no longer waits here. With no source waiting, the
            // driver's refills need not kick (each kick cost the driver an eventfd write and
            // this port's worker a wakeup). Under the RX vring lock, which every arm holds,
            // so an arm by another thread lands before (its mark is seen) or after this.
            let me = 1u64 << src;
            let mut waiting = slot.blocked.load(Ordering::Acquire);
            if waiting & me != 0 {
                waiting = slot.blocked.fetch_and(!me, Ordering::AcqRel) & !me;
            }
            if waiting == 0 && quiet_refill_kicks(rx.get_queue(), &*mem).is_err() {
                broken = true;
            }
        }
        let mut batch = ctl.notifier.completions();
        let (notifier, mut ring) = ctl.split(&mut rx);
        // The run's completions in one call (the same decisions as one per frame); the
        // first `Notify` covers them all, published above.
        let done = notifier
            .completed_all(&mut batch, &b.metas, &mut ring, &mem)
            .and_then(|_| notifier.completions_done(batch, &mut ring, &mem))
            .and_then(|last| notifier.follow(last))
            .and_then(|()| ctl.check_low_water(&mut rx, &mem));
        b.metas.clear();
        match done {
            Ok(true) => PortCounters::add(&c.rx_low_water, 1),
            Ok(false) => {}
            Err(e) => tracing::warn!(port = dst, error = %e, "receive notification failed"),
        }
        if broken {
            tracing::warn!(port = dst, "receive queue broken");
            PortCounters::add(&c.queue_broken, 1);
            drop(ctl);
            drop(rx);
            a.rx.set_queue_ready(false);
        }
        Some(end)
    }

    /// Step 3: the consumed chains go to the source's used ring, with the transmit
    /// queue's moderation. Returns whether the used ring broke.
    fn complete(
        &self,
        src: usize,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
        taken: &[Taken],
        used: &mut TxUsed,
    ) -> bool {
        if taken.is_empty() {
            return false;
        }
        let c = &self.slots[src].counters;
        let mut back = TxReturn::new(used);
        // Counted once for the burst (one atomic add per counter, not per frame).
        let (mut frames, mut sent) = (0u64, 0u64);
        for t in taken {
            let bytes = match t.bad {
                None => {
                    frames += 1;
                    sent += t.len as u64;
                    u32::try_from(t.len).unwrap_or(u32::MAX)
                }
                Some(TxError::Header(_)) => {
                    PortCounters::add(&c.tx_bad_header, 1);
                    0
                }
                Some(e) => {
                    tracing::debug!(port = src, error = %e, "transmit chain dropped");
                    PortCounters::add(&c.tx_bad_chain, 1);
                    0
                }
            };
            if !back.chain(ctl, tx, mem, t.head, bytes, c) {
                break;
            }
        }
        if frames > 0 {
            PortCounters::add(&c.tx_frames, frames);
            PortCounters::add(&c.tx_bytes, sent);
        }
        back.finish(ctl, tx, mem, c)
    }
}
