//! The moderation profiles DIM moves between (Linux `lib/dim/net_dim.c`, `rdma_dim.c`).

use crate::moderation::TimerStart;

/// One moderation setting: a timer in microseconds and a completion count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DimProfile {
    /// Timer in microseconds.
    pub usecs: u16,
    /// Completions (packets) per notification.
    pub frames: u16,
}

const fn p(usecs: u16, frames: u16) -> DimProfile {
    DimProfile { usecs, frames }
}

/// net_dim RX profiles, timer started from the event (EQE mode).
pub const NET_RX_EQE: [DimProfile; 5] =
    [p(1, 256), p(8, 256), p(64, 256), p(128, 256), p(256, 256)];
/// net_dim RX profiles, timer restarted by each completion (CQE mode).
pub const NET_RX_CQE: [DimProfile; 5] = [p(2, 256), p(8, 128), p(16, 64), p(32, 64), p(64, 64)];
/// net_dim TX profiles, EQE mode.
pub const NET_TX_EQE: [DimProfile; 5] = [p(1, 128), p(8, 128), p(32, 128), p(64, 128), p(128, 128)];
/// net_dim TX profiles, CQE mode.
pub const NET_TX_CQE: [DimProfile; 5] = [p(5, 128), p(8, 64), p(16, 32), p(32, 32), p(64, 32)];
/// rdma_dim profiles (usec, completions).
pub const RDMA: [DimProfile; 9] = [
    p(1, 1),
    p(1, 4),
    p(2, 4),
    p(2, 8),
    p(4, 8),
    p(16, 8),
    p(16, 16),
    p(32, 16),
    p(32, 32),
];

/// net_dim's default profile index (`NET_DIM_DEF_PROFILE_EQE` / `_CQE`).
pub const NET_DEFAULT_INDEX: u8 = 1;

/// CQ period mode: where DIM's timer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DimMode {
    /// `DIM_CQ_PERIOD_MODE_START_FROM_EQE`: from the first completion after an interrupt.
    #[default]
    Eqe,
    /// `DIM_CQ_PERIOD_MODE_START_FROM_CQE`: restarted by each completion.
    Cqe,
}

impl DimMode {
    /// The count-policy timer start this mode means.
    #[must_use]
    pub const fn timer(self) -> TimerStart {
        match self {
            DimMode::Eqe => TimerStart::FirstCompletion,
            DimMode::Cqe => TimerStart::LastCompletion,
        }
    }
}

/// Which net_dim table: receive or transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DimDirection {
    /// RX profiles.
    #[default]
    Rx,
    /// TX profiles.
    Tx,
}

/// The net_dim table for a direction and mode.
#[must_use]
pub const fn net_table(dir: DimDirection, mode: DimMode) -> &'static [DimProfile; 5] {
    match (dir, mode) {
        (DimDirection::Rx, DimMode::Eqe) => &NET_RX_EQE,
        (DimDirection::Rx, DimMode::Cqe) => &NET_RX_CQE,
        (DimDirection::Tx, DimMode::Eqe) => &NET_TX_EQE,
        (DimDirection::Tx, DimMode::Cqe) => &NET_TX_CQE,
    }
}
