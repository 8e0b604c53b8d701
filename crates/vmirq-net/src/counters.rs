//! What each port's data path did: monotonic counters shared between the data-path threads
//! (writers) and the server handle, tests and `vmirq serve-net`'s exit summary (readers).
//! The per-queue counters (kicks, notifications, held completions, timer fires, polls) are
//! the shared crate's `vmirq_vhost::counters::QueueCounters`, one per queue in the port's
//! [`crate::fabric::Slot`]; these are the switch's own.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Live counters of one port (they survive its frontend's reconnects).
        #[derive(Debug, Default)]
        pub struct PortCounters {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A copy of [`PortCounters`] at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct PortSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl PortCounters {
            /// Read every counter.
            #[must_use]
            pub fn snapshot(&self) -> PortSnapshot {
                PortSnapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }

        impl PortSnapshot {
            /// `name=value` pairs of every counter, for logs.
            #[must_use]
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Valid frames taken off the port's transmit queue (delivered, or dropped and counted
    /// under a reason below).
    tx_frames,
    /// Their bytes (Ethernet frame, no net header).
    tx_bytes,
    /// Frames delivered into the port's receive queue.
    rx_frames,
    /// Their bytes.
    rx_bytes,
    /// Receive buffers used (more than frames when MRG_RXBUF merges).
    rx_buffers,
    /// Transmitted chains dropped: a device-writable descriptor, outside guest memory,
    /// longer than the largest frame, or shorter than a net header and an Ethernet header.
    tx_bad_chain,
    /// Transmitted frames dropped: their net header asks for an offload not offered.
    tx_bad_header,
    /// Transmitted frames dropped: no destination (no partner port, hairpin, or the
    /// destination port has no frontend or its receive queue is stopped).
    tx_no_destination,
    /// Times the transmit queue waited for room in a destination's receive queue.
    tx_backpressure,
    /// Times a transmit queue's drain reached the per-event bound with frames left and
    /// went back to the port worker's event loop (resumed by its timer, armed at once).
    tx_yields,
    /// Total time (ns) the transmit queue waited for room: from the first frame a
    /// destination had no room for to that destination's refill (per-port data path).
    tx_blocked_ns,
    /// Times this port's worker took up a resume: a destination that had no room for its
    /// frames got receive buffers, and that destination's worker woke this one (the resume
    /// eventfd, `Fabric::on_resume`; per-port data path).
    tx_resumes,
    /// Their total wait (ns): from the destination's worker writing the resume to this
    /// port's worker taking it up (the wake of this port's worker, and its wait for a CPU).
    tx_resume_wait_ns,
    /// Frames dropped: larger than the destination's receive buffers can hold.
    rx_too_big,
    /// Frames dropped on a flood: the destination had no receive buffer.
    rx_no_room,
    /// Receive chains returned unused: a device-readable descriptor, no room at all, or
    /// outside guest memory (the frame they were for is dropped).
    rx_bad_chain,
    /// Frames written into the port's receive queue whose used entries waited for the
    /// queue's next notification (`dim-lat:overtake=on`, `rx::Parked`).
    rx_parked,
    /// Frames published ahead of parked ones (short messages of other flows).
    rx_overtakes,
    /// Times a large frame waited for room because the receive buffers left were the
    /// reserve `dim-lat:overtake=on` keeps for short messages.
    rx_reserved,
    /// Held receive notifications sent early: the driver's available buffers fell to the
    /// low-water mark (`--rx-low-water`, `rx::LowWater`).
    rx_low_water,
    /// Queue stops: the available ring index jumped further than the queue size, a chain
    /// broke a ring rule, the used ring could not be written, or the frontend revoked its
    /// memory.
    queue_broken,
    /// Control-queue commands answered (OK or ERR).
    ctrl_commands,
    /// Frontend connections served.
    connections,
}

impl PortCounters {
    /// Add `n` to `c`.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl PortSnapshot {
    /// Frames dropped for any reason.
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.tx_bad_chain
            + self.tx_bad_header
            + self.tx_no_destination
            + self.rx_too_big
            + self.rx_no_room
    }
}
