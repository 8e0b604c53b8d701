//! Transmitting: writing probe frames into TX buffers, publishing and kicking, reclaiming
//! completions, and the TX interrupt switch.

use super::{kick, ring_err, NetPort, PortError, Result, Written, HDR_U32, HDR_U64};
use crate::frame::{self, Mac, Pattern, Probe};
use crate::memory::{GuestMemory, MemoryError};
use crate::ring::RingError;

/// Offset of the trailer in a frame of `len` bytes.
fn trailer_at(len: u32) -> u64 {
    u64::from(len).saturating_sub(frame::TRAILER_LEN as u64)
}

/// Before frame `now` is written into the TX buffer at `frame_gpa`, put back the payload
/// pattern where the buffer's previous frame `old` wrote and `now` will not: its trailer
/// when the length changes, and the end of its header when `now`'s header is shorter
/// (a `udp` frame followed by a `raw` one). Nothing to do in the steady state.
fn restore_pattern(
    mem: &GuestMemory,
    frame_gpa: u64,
    old: Written,
    now: Written,
    pattern: &Pattern,
) -> std::result::Result<(), MemoryError> {
    if old.len != 0 && old.len != now.len {
        let at = trailer_at(old.len);
        let from = usize::try_from(at).unwrap_or(0);
        let original = &pattern.prefix(old.len as usize)[from..];
        mem.write(frame_gpa + at, original)?;
    }
    if old.header_len > now.header_len {
        let original = &pattern.prefix(old.header_len)[now.header_len..];
        mem.write(frame_gpa + now.header_len as u64, original)?;
    }
    Ok(())
}

impl NetPort {
    /// Put one probe frame in the TX ring, in this port's encapsulation (visible to the
    /// device after [`Self::flush`]). False, counted in `tx_ring_full`, when the ring has no
    /// free descriptor.
    ///
    /// # Errors
    /// [`PortError::Config`] for a length outside the encapsulation's minimum
    /// ([`crate::frame::Encap::frame_len_min`]) ..= `tx_frame_max`.
    pub fn send(&mut self, probe: &Probe, dst: Mac, pattern: &Pattern) -> Result<bool> {
        let len = probe.len;
        if len < self.encap.frame_len_min() || len > self.cfg.tx_frame_max {
            return Err(PortError::Config("frame length outside this port's range"));
        }
        let header = self.encap.header(probe, self.mac, dst);
        let header = header.as_bytes();
        let trailer = frame::trailer(probe.seq);
        let (mem, base, buf_len, last) =
            (&self.mem, self.tx_base, self.tx_buf_len, &mut self.tx_last);
        let added = self.tx.add_with::<RingError>(mem, false, |id| {
            let frame_gpa = base + u64::from(id) * buf_len + HDR_U64;
            let now = Written {
                len,
                header_len: header.len(),
            };
            restore_pattern(mem, frame_gpa, last[usize::from(id)], now, pattern)?;
            mem.write(frame_gpa, header)?;
            mem.write(frame_gpa + trailer_at(len), &trailer)?;
            last[usize::from(id)] = now;
            Ok((frame_gpa - HDR_U64, HDR_U32 + len))
        });
        let added = added.map_err(ring_err("tx"))?;
        if added.is_some() {
            self.counters.tx_frames += 1;
            self.counters.tx_bytes += u64::from(len);
            Ok(true)
        } else {
            self.counters.tx_ring_full += 1;
            Ok(false)
        }
    }

    /// Publish queued frames; kick if the device asks for it.
    ///
    /// # Errors
    /// A failing kick.
    pub fn flush(&mut self) -> Result<()> {
        if self.tx.publish(&self.mem).map_err(ring_err("tx"))? {
            kick(&self.tx_kick)?;
            self.counters.tx_kicks += 1;
        }
        Ok(())
    }

    /// Take back transmitted buffers; returns how many.
    ///
    /// # Errors
    /// A broken TX ring.
    pub fn reclaim_tx(&mut self) -> Result<usize> {
        let mut n = 0;
        loop {
            match self.tx.pop_used(&self.mem) {
                Ok(Some(u)) => {
                    n += 1;
                    if u.len != 0 {
                        self.counters.faults.tx_len_nonzero += 1;
                    }
                }
                Ok(None) => return Ok(n),
                Err(RingError::Fault(f)) if !f.is_fatal() => self.counters.faults.count_ring(f),
                Err(e) => return Err(ring_err("tx")(e)),
            }
        }
    }

    /// Ask for a TX interrupt once three quarters of the in-flight frames completed; false
    /// if that already happened.
    ///
    /// # Errors
    /// Only on a layout bug.
    pub fn tx_enable_cb_delayed(&mut self) -> Result<bool> {
        self.tx.enable_cb_delayed(&self.mem).map_err(ring_err("tx"))
    }

    /// Ask for no TX interrupts.
    ///
    /// # Errors
    /// Only on a layout bug.
    pub fn tx_disable_cb(&mut self) -> Result<()> {
        self.tx.disable_cb(&self.mem).map_err(ring_err("tx"))
    }
}
