//! The receive low-water mark (`--rx-low-water`): a receive notification the moderation
//! policy holds goes out at once when the driver's available receive buffers fall to a
//! fraction of the ring, so that a hold never lets the ring run dry.
//!
//! Why: a policy that holds up to as many frames as the ring has buffers (net_dim's receive
//! profiles hold 256 packets; QEMU's and Linux's default receive ring has 256 entries)
//! fills the ring before it notifies. The driver cannot refill buffers it has not been told
//! about, so the sources wait (here: backpressure into their transmit rings, and whatever
//! they queue behind, such as a response, waits too) or, on a NIC, frames are dropped.
//! NICs guard against it with a separate interrupt cause: Intel's 8254x/e1000 family raises
//! RXDMT0 when the free receive descriptors fall to the fraction of the ring set in
//! RCTL.RDMTS (1/2, 1/4 or 1/8; 1/2 after reset, and the one Linux's e1000/e1000e drivers
//! program). Virtio has no such cause; the device can do the same with the queue's own
//! notification.
//!
//! The mark is edge-triggered, as RXDMT0 is: one notification when the buffers left cross
//! the mark while frames are held, and none again until the driver has refilled above it
//! (a driver busy in its poll has notifications off anyway, and EVENT_IDX suppresses the
//! rest). The policy is not told: it goes on holding what it held and its own timer or
//! count notifies as before (the window then covers only newer frames).

use std::sync::atomic::Ordering;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestMemoryMmap;

/// Where the receive low-water mark lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LowWater {
    /// No mark: a held notification waits for the policy (`off`).
    #[default]
    Off,
    /// At `1 / 2^shift` of the ring's entries (`1/2`, `1/4`, `1/8`).
    Fraction {
        /// 1, 2 or 3.
        shift: u8,
    },
}

impl LowWater {
    /// Whether `left` buffers available to the device in a ring of `size` entries is at or
    /// below the mark.
    #[must_use]
    pub fn reached(self, left: u16, size: u16) -> bool {
        match self {
            Self::Off => false,
            Self::Fraction { shift } => left <= size >> shift,
        }
    }
}

impl std::str::FromStr for LowWater {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "1/2" => Ok(Self::Fraction { shift: 1 }),
            "1/4" => Ok(Self::Fraction { shift: 2 }),
            "1/8" => Ok(Self::Fraction { shift: 3 }),
            _ => Err(format!(
                "{s:?}: the receive low-water mark is off, 1/2, 1/4 or 1/8 of the ring"
            )),
        }
    }
}

impl std::fmt::Display for LowWater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Fraction { shift } => write!(f, "1/{}", 1u32 << shift),
        }
    }
}

/// Receive buffers the driver made available that the device has not taken yet.
///
/// # Errors
/// The available ring lies outside guest memory.
pub fn buffers_left(q: &Queue, mem: &GuestMemoryMmap) -> Result<u16, virtio_queue::Error> {
    let avail = q.avail_idx(mem, Ordering::Acquire)?;
    Ok(avail.0.wrapping_sub(q.next_avail()))
}

#[cfg(test)]
mod tests {
    use super::LowWater;

    #[test]
    fn marks_parse_print_and_lie_at_their_fraction() {
        for s in ["off", "1/2", "1/4", "1/8"] {
            let m: LowWater = s.parse().expect(s);
            assert_eq!(m.to_string(), s);
        }
        for bad in ["", "1/3", "half", "1/16", "0"] {
            assert!(bad.parse::<LowWater>().is_err(), "{bad}");
        }
        let half: LowWater = "1/2".parse().expect("1/2");
        assert!(half.reached(128, 256));
        assert!(!half.reached(129, 256));
        let eighth: LowWater = "1/8".parse().expect("1/8");
        assert!(eighth.reached(32, 256) && !eighth.reached(33, 256));
        assert!(!LowWater::Off.reached(0, 256));
    }
}
