//! The control virtqueue of one port's connection (virtqueue 2N with CTRL_VQ and N queue
//! pairs): each chain is
//! walked by the shared ring-rule walker (its last descriptor must hold the ack byte),
//! gathered into bounded buffers, answered by [`Ctrl`] (the parser and state machine of
//! `ctrl/`), and the device-writable bytes it wrote are copied back. NOTF_COAL's values
//! become the `count` policy of the queues they cover (the guest's `ethtool -C`); MQ's
//! VQ_PAIRS_SET sets how many pairs frames are delivered to. A chain without a trustworthy
//! ack byte is never completed.

use crate::ctrl::{Action, Ctrl, CtrlError};
use crate::fabric::{GuestMem, Vring};
use crate::queues::{RxCtl, TxCtl};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost_user_backend::VringT;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace};
use vmirq_policy::moderation::{Count, Moderation};
use vmirq_vhost::chain::{walk, DescTable};

/// Largest command (device-readable bytes) accepted: a full MAC table and then some.
const READABLE_MAX: usize = 4096;
/// The receive and transmit virtqueue indices of pair 0 in the control queue's numbering
/// (pair `i`'s are `2i` and `2i + 1`).
const RX_VQ: u16 = 0;
const TX_VQ: u16 = 1;
const _: () =
    assert!(RX_VQ as usize == crate::virtio::RX_QUEUE && TX_VQ as usize == crate::virtio::TX_QUEUE);

/// Each queue pair's receive and transmit moderation, pair 0 first.
pub type PairCtls = [(Arc<Mutex<RxCtl>>, Arc<Mutex<TxCtl>>)];

/// Largest device-writable part used (VQ_GET's answer and the ack byte).
const WRITABLE_MAX: usize = 64;

/// What the control queue did (counted by the caller).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CtrlStats {
    /// Commands answered (OK or ERR).
    pub answered: u64,
    /// Chains that broke a ring rule or lack an ack byte (left uncompleted; the queue stops).
    pub broken: u64,
}

/// Answer every available command of the control queue; VQ_PAIRS_SET's count goes to
/// `active`.
pub fn service(
    vring: &Vring,
    gm: &GuestMem,
    ctrl: &Mutex<Ctrl>,
    ctls: &PairCtls,
    active: &AtomicU16,
) -> CtrlStats {
    let mut stats = CtrlStats::default();
    let mem = gm.memory();
    let mut state = vring.get_mut();
    if !state.get_queue().ready() || !state.is_enabled() {
        return stats;
    }
    let mut descs: Vec<Descriptor> = Vec::new();
    let mut readable = Vec::new();
    let mut writable = [0u8; WRITABLE_MAX];
    let mut ctrl = ctrl.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let q = state.get_queue_mut();
        let head = match q.iter(&*mem) {
            Ok(mut it) => match it.next() {
                Some(chain) => chain.head_index(),
                None => break,
            },
            Err(_) => {
                stats.broken += 1;
                break;
            }
        };
        let table = DescTable {
            addr: GuestAddress(q.desc_table()),
            size: q.size(),
            indirect: false,
        };
        if walk(&mem, table, head, &mut descs).is_err() {
            // No trustworthy ack byte: never completed; the queue stops here.
            stats.broken += 1;
            break;
        }
        readable.clear();
        let mut w_len = 0usize;
        let mut fits = true;
        for d in &descs {
            let len = d.len() as usize;
            if d.is_write_only() {
                w_len += len;
            } else if readable.len() + len > READABLE_MAX || w_len > 0 || {
                let start = readable.len();
                readable.resize(start + len, 0);
                mem.read_slice(&mut readable[start..], d.addr()).is_err()
            } {
                fits = false;
            }
        }
        // The ack byte is the last writable byte; a command that cannot be read (too long,
        // readable after writable, outside memory) is answered ERR with an empty command.
        if !fits {
            readable.clear();
        }
        let w = w_len.min(WRITABLE_MAX);
        let out = &mut writable[..w];
        out.fill(0);
        let used = match ctrl.handle(&readable, out) {
            Ok(reply) => {
                match reply.outcome {
                    Ok(Action::Coalesce { target, coal }) => {
                        let count = || Moderation::Count(Count::new(coal.count_config()));
                        for (i, (rx, tx)) in ctls.iter().enumerate() {
                            let base = u16::try_from(2 * i).unwrap_or(u16::MAX - 1);
                            if target.covers(base + RX_VQ) {
                                lock(rx).notifier.set_policy(count());
                            }
                            if target.covers(base + TX_VQ) {
                                lock(tx).notifier.set_policy(count());
                            }
                        }
                        tracing::info!(?target, ?coal, "guest set notification coalescing");
                    }
                    Ok(Action::QueuePairs(n)) => {
                        // Ctrl accepts 1..=max pairs only; frames delivered from now on go
                        // to the first `n` pairs' receive queues.
                        active.store(n, Ordering::Release);
                        tracing::info!(pairs = n, "guest set the queue pairs in use");
                    }
                    _ => {}
                }
                reply.used_len
            }
            Err(CtrlError::NoStatusByte) => {
                stats.broken += 1;
                break;
            }
        };
        // Copy the written bytes back; the ack byte (last) goes to the chain's last byte.
        if scatter(&mem, &descs, &writable[..used.min(w)], w_len).is_err() {
            stats.broken += 1;
            break;
        }
        if q.add_used(&*mem, head, u32::try_from(used).unwrap_or(0))
            .is_err()
        {
            stats.broken += 1;
            break;
        }
        stats.answered += 1;
    }
    if stats.answered > 0 && state.needs_notification().unwrap_or(true) {
        let _ = state.signal_used_queue();
    }
    stats
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Write `bytes` over the writable descriptors of the chain, in order. When the writable
/// part is longer than [`WRITABLE_MAX`], the ack (the last byte written) goes to the very
/// last byte of the chain, where the driver reads it.
fn scatter(
    mem: &vm_memory::GuestMemoryMmap,
    descs: &[Descriptor],
    bytes: &[u8],
    w_len: usize,
) -> Result<(), vm_memory::GuestMemoryError> {
    let (body, ack) = match bytes.split_last() {
        Some((ack, body)) if w_len > WRITABLE_MAX => (body, Some(*ack)),
        _ => (bytes, None),
    };
    let mut left = body;
    let mut last = None;
    for d in descs.iter().filter(|d| d.is_write_only()) {
        let n = left.len().min(d.len() as usize);
        if n > 0 {
            mem.write_slice(&left[..n], d.addr())?;
            left = &left[n..];
        }
        if d.len() > 0 {
            last = Some(d.addr().0 + u64::from(d.len()) - 1);
        }
    }
    if let (Some(ack), Some(at)) = (ack, last) {
        mem.write_slice(&[ack], GuestAddress(at))?;
    }
    Ok(())
}
