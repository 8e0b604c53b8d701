//! Receiving: refilling the RX ring, reassembling frames from merged buffers, checking
//! what the device wrote, and the RX interrupt switch.

use super::{kick, ring_err, NetPort, Result, HDR_U64};
use crate::ring::{RingError, Used};
use crate::virtio_net::{self as vn, HDR_LEN};

impl NetPort {
    fn rx_gpa(&self, id: u16) -> u64 {
        self.rx_base + u64::from(id) * u64::from(self.cfg.rx_buf_len)
    }

    /// Make every free receive buffer available; kick if the device asks for it. Returns the
    /// number of buffers added.
    ///
    /// # Errors
    /// [`PortError`].
    pub fn fill_rx(&mut self) -> Result<usize> {
        let (base, len) = (self.rx_base, self.cfg.rx_buf_len);
        let mut added = 0;
        while self
            .rx
            .add_with::<RingError>(&self.mem, true, |id| {
                Ok((base + u64::from(id) * u64::from(len), len))
            })
            .map_err(ring_err("rx"))?
            .is_some()
        {
            added += 1;
        }
        if added > 0 && self.rx.publish(&self.mem).map_err(ring_err("rx"))? {
            kick(&self.rx_kick)?;
            self.counters.rx_kicks += 1;
        }
        Ok(added)
    }

    /// Receive up to `budget` frames: each is reassembled into `scratch` and passed to
    /// `on_frame`; then the RX ring is refilled. Returns the frames delivered (dropped,
    /// faulty packets are counted in [`Faults`], not delivered).
    ///
    /// # Errors
    /// A broken ring or an unusable memory access.
    pub fn receive(
        &mut self,
        budget: usize,
        scratch: &mut Vec<u8>,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        let mut delivered = 0;
        while delivered < budget {
            let Some(first) = self.pop_rx()? else {
                break;
            };
            scratch.clear();
            if self.read_packet(first, scratch)? {
                self.counters.rx_frames += 1;
                self.counters.rx_bytes += scratch.len() as u64;
                delivered += 1;
                on_frame(scratch);
            }
        }
        self.fill_rx()?;
        Ok(delivered)
    }

    fn pop_rx(&mut self) -> Result<Option<Used>> {
        loop {
            match self.rx.pop_used(&self.mem) {
                Ok(u) => return Ok(u),
                Err(RingError::Fault(f)) if !f.is_fatal() => self.counters.faults.count_ring(f),
                Err(e) => return Err(ring_err("rx")(e)),
            }
        }
    }

    /// Copy the packet whose first buffer is `first` (and its further buffers) into `out`.
    /// False when the packet is dropped for a fault; its buffers are recycled either way.
    fn read_packet(&mut self, first: Used, out: &mut Vec<u8>) -> Result<bool> {
        self.counters.rx_buffers += 1;
        if first.len > first.desc_len {
            self.counters.faults.used_len_too_long += 1;
            return Ok(false);
        }
        let first_len = first.len as usize;
        if first_len < HDR_LEN {
            self.counters.faults.rx_short += 1;
            return Ok(false);
        }
        let gpa = self.rx_gpa(first.id);
        let mut hdr = [0u8; HDR_LEN];
        self.mem.read(gpa, &mut hdr)?;
        let Ok(buffers) = vn::parse_rx_hdr(&hdr, self.mrg_rxbuf, self.cfg.rx_queue_size) else {
            self.counters.faults.rx_bad_header += 1;
            return Ok(false);
        };
        self.mem
            .read_append(gpa + HDR_U64, first_len - HDR_LEN, out)?;
        let mut intact = true;
        for _ in 1..buffers {
            let Some(next) = self.pop_rx()? else {
                self.counters.faults.rx_missing_buffers += 1;
                return Ok(false);
            };
            self.counters.rx_buffers += 1;
            if next.len > next.desc_len {
                self.counters.faults.used_len_too_long += 1;
                intact = false;
            } else if intact {
                let gpa = self.rx_gpa(next.id);
                self.mem.read_append(gpa, next.len as usize, out)?;
            }
        }
        Ok(intact)
    }

    /// True if received frames are waiting.
    ///
    /// # Errors
    /// Only on a layout bug.
    pub fn rx_pending(&self) -> Result<bool> {
        self.rx.has_used(&self.mem).map_err(ring_err("rx"))
    }

    /// Ask for no RX interrupts (NAPI scheduled).
    ///
    /// # Errors
    /// Only on a layout bug.
    pub fn rx_disable_cb(&mut self) -> Result<()> {
        self.rx.disable_cb(&self.mem).map_err(ring_err("rx"))
    }

    /// Ask for an RX interrupt on the next frame; false if one is already waiting.
    ///
    /// # Errors
    /// Only on a layout bug.
    pub fn rx_enable_cb(&mut self) -> Result<bool> {
        self.rx.enable_cb(&self.mem).map_err(ring_err("rx"))
    }
}
