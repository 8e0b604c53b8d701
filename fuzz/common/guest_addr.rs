//! Guest addresses for the fuzz targets that write descriptors into a
//! `vmirq_vhost::mock_guest::MockGuest`: every interesting part of its memory (the data area,
//! the edge of the hole between its two regions, region 1) and anything at all.

use arbitrary::Arbitrary;
use vmirq_vhost::mock_guest::{REGION0_LEN, REGION1_START};

/// Where a descriptor points.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Addr {
    /// Inside the target's data area.
    Data(u32),
    /// Just before the hole between the regions (a buffer may run into it).
    BeforeHole(u16),
    /// Inside region 1.
    Region1(u16),
    /// Anything at all (the rings themselves, the hole, past the end, overflow).
    Raw(u64),
}

impl Addr {
    /// The guest address; `data` is the data area `[start, end)` that `Data` lands in.
    pub fn resolve(self, data: (u64, u64)) -> u64 {
        match self {
            Addr::Data(x) => data.0 + u64::from(x) % (data.1 - data.0).max(1),
            Addr::BeforeHole(x) => REGION0_LEN - 1 - u64::from(x),
            Addr::Region1(x) => REGION1_START + u64::from(x),
            Addr::Raw(x) => x,
        }
    }
}
