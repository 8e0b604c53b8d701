//! The workloads the load generator plays, as plain data: what each request is (pattern and
//! size) and how many are kept outstanding over time (shape).

use serde::{Deserialize, Serialize};

/// 4 KiB: the random-I/O block size.
pub const BLOCK_4K: u32 = 4096;
/// 128 KiB: the sequential block size.
pub const BLOCK_128K: u32 = 128 * 1024;
/// The ping-pong request size: the smallest virtio-blk transfer (one sector).
pub const BLOCK_PINGPONG: u32 = 512;

/// Where and in which direction requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random reads and writes, `read_pct` percent reads.
    RandMix {
        /// Percentage of reads (0..=100).
        read_pct: u8,
    },
    /// Sequential reads.
    SeqRead,
    /// Sequential writes.
    SeqWrite,
}

/// How many requests are outstanding over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Keep `qd` requests outstanding all the time (closed loop).
    Steady {
        /// Queue depth.
        qd: u32,
    },
    /// Alternate phases of `low` and `high` outstanding requests; each phase lasts between
    /// `phase_min_us` and `2 * phase_min_us` microseconds (drawn from the seeded generator).
    Bursty {
        /// Outstanding requests in a quiet phase.
        low: u32,
        /// Outstanding requests in a busy phase.
        high: u32,
        /// Shortest phase in microseconds.
        phase_min_us: u32,
    },
    /// One request at a time, started every `interval_us` microseconds (open loop, a few
    /// hundred IOPS): the client sleeps in between, as a lightly loaded guest does.
    Trickle {
        /// Time between request starts in microseconds.
        interval_us: u32,
    },
}

impl Shape {
    /// The most requests this shape ever has outstanding.
    #[must_use]
    pub fn max_qd(&self) -> u32 {
        match *self {
            Self::Steady { qd } => qd,
            Self::Bursty { low, high, .. } => low.max(high),
            Self::Trickle { .. } => 1,
        }
    }
}

/// One workload: a name for reports, the request pattern, the request size and the shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Report name without the queue depth, e.g. `randread-4k`, `pingpong`, `bursty`.
    pub name: &'static str,
    /// Request pattern.
    pub pattern: Pattern,
    /// Bytes per request.
    pub block_size: u32,
    /// Outstanding-request shape.
    pub shape: Shape,
}

impl Workload {
    /// 4 KiB random reads at queue depth `qd`.
    #[must_use]
    pub const fn randread(qd: u32) -> Self {
        Self::steady("randread-4k", Pattern::RandRead, BLOCK_4K, qd)
    }

    /// 4 KiB random writes at queue depth `qd`.
    #[must_use]
    pub const fn randwrite(qd: u32) -> Self {
        Self::steady("randwrite-4k", Pattern::RandWrite, BLOCK_4K, qd)
    }

    /// 4 KiB random 70% read / 30% write at queue depth `qd`.
    #[must_use]
    pub const fn randrw(qd: u32) -> Self {
        Self::steady(
            "randrw70-4k",
            Pattern::RandMix { read_pct: 70 },
            BLOCK_4K,
            qd,
        )
    }

    /// 128 KiB sequential reads at queue depth `qd`.
    #[must_use]
    pub const fn seqread(qd: u32) -> Self {
        Self::steady("seqread-128k", Pattern::SeqRead, BLOCK_128K, qd)
    }

    /// 128 KiB sequential writes at queue depth `qd`.
    #[must_use]
    pub const fn seqwrite(qd: u32) -> Self {
        Self::steady("seqwrite-128k", Pattern::SeqWrite, BLOCK_128K, qd)
    }

    /// QD-1 ping-pong of one-sector reads: the storage analogue of TCP_RR.
    #[must_use]
    pub const fn pingpong() -> Self {
        Self::steady("pingpong", Pattern::RandRead, BLOCK_PINGPONG, 1)
    }

    /// 4 KiB random reads whose outstanding count swings between 1 and 64 (the TPC-C-like
    /// pattern vIC adapts to).
    #[must_use]
    pub const fn bursty() -> Self {
        Self {
            name: "bursty",
            pattern: Pattern::RandRead,
            block_size: BLOCK_4K,
            shape: Shape::Bursty {
                low: 1,
                high: 64,
                phase_min_us: 5_000,
            },
        }
    }

    /// 4 KiB random reads at about 300 IOPS, one at a time.
    #[must_use]
    pub const fn trickle() -> Self {
        Self {
            name: "trickle",
            pattern: Pattern::RandRead,
            block_size: BLOCK_4K,
            shape: Shape::Trickle { interval_us: 3_333 },
        }
    }

    const fn steady(name: &'static str, pattern: Pattern, block_size: u32, qd: u32) -> Self {
        Self {
            name,
            pattern,
            block_size,
            shape: Shape::Steady { qd },
        }
    }

    /// The queue depth reported for this workload (the maximum outstanding requests).
    #[must_use]
    pub fn queue_depth(&self) -> u32 {
        self.shape.max_qd()
    }

    /// Short label with the queue depth, e.g. `randread-4k@qd16`.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}@qd{}", self.name, self.queue_depth())
    }

    /// Whether a request drawn with the percentile roll `roll` (0..100) is a read.
    #[must_use]
    pub fn is_read(&self, roll: u8) -> bool {
        match self.pattern {
            Pattern::RandRead | Pattern::SeqRead => true,
            Pattern::RandWrite | Pattern::SeqWrite => false,
            Pattern::RandMix { read_pct } => roll < read_pct,
        }
    }

    /// Whether offsets are sequential.
    #[must_use]
    pub fn is_sequential(&self) -> bool {
        matches!(self.pattern, Pattern::SeqRead | Pattern::SeqWrite)
    }
}

/// How the client learns about completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientMode {
    /// The guest's interrupt: block on the queue's completion eventfd when nothing is ready.
    Interrupt,
    /// A poll-mode queue: spin on the used ring, notifications disabled.
    Poll,
}

impl ClientMode {
    /// The name used in reports and on the command line.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Poll => "poll",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_reads_seventy_percent_of_rolls() {
        let w = Workload::randrw(4);
        let reads = (0..100u8).filter(|r| w.is_read(*r)).count();
        assert_eq!(reads, 70);
        assert!(Workload::randread(1).is_read(99));
        assert!(!Workload::randwrite(1).is_read(0));
    }

    #[test]
    fn queue_depth_is_the_most_outstanding() {
        assert_eq!(Workload::bursty().queue_depth(), 64);
        assert_eq!(Workload::trickle().queue_depth(), 1);
        assert_eq!(Workload::randread(32).label(), "randread-4k@qd32");
    }
}
