//! The frames the load generator sends: Ethernet (local experimental EtherType 0x88B5), a
//! probe header (kind, flow, sequence number, send time, length), a payload that is a fixed
//! function of the byte offset, and a trailer that repeats the sequence number. The receiver
//! checks all of it, so truncation, corruption, reordering of merged buffers and stale
//! buffers are caught; a transmit buffer is filled with the payload once and only the header
//! and trailer are written per frame.

/// EtherType of probe frames (IEEE 802 local experimental).
pub const ETHERTYPE: u16 = 0x88B5;
/// Probe magic, "VMIQ".
pub const MAGIC: u32 = 0x564D_4951;
/// Ethernet header plus probe header.
pub const HEADER_LEN: usize = 46;
/// Trailer length (the sequence number again, keyed).
pub const TRAILER_LEN: usize = 8;
/// Smallest probe frame (Ethernet's minimum without FCS).
pub const FRAME_LEN_MIN: u32 = 60;
/// Largest probe frame (a 9000-byte MTU frame is 9014 bytes).
pub const FRAME_LEN_MAX: u32 = 9216;
const TRAILER_KEY: u64 = 0xA5C3_5A3C_0FF0_F00F;

/// A MAC address.
pub type Mac = [u8; 6];

/// The MAC address of client port `index` (locally administered, unicast).
#[must_use]
pub fn port_mac(index: usize) -> Mac {
    let i = u8::try_from(index & 0xff).unwrap_or(0);
    [0x52, 0x54, 0x00, 0x6e, 0x6c, i]
}

/// What a frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Part of a bulk stream.
    Bulk,
    /// A request; the receiver answers with a response of the same sequence number.
    Request,
    /// The answer to a request.
    Response,
}

impl Kind {
    const fn code(self) -> u8 {
        match self {
            Self::Bulk => 1,
            Self::Request => 2,
            Self::Response => 3,
        }
    }

    const fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Self::Bulk),
            2 => Some(Self::Request),
            3 => Some(Self::Response),
            _ => None,
        }
    }
}

/// The probe header's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Purpose of the frame.
    pub kind: Kind,
    /// Flow number (which stream or request/response pair).
    pub flow: u8,
    /// Sequence number within the flow.
    pub seq: u64,
    /// Send time (ns since the run started) of the frame, or of the request it answers.
    pub t_ns: u64,
    /// Frame length in bytes (Ethernet header to end of trailer).
    pub len: u32,
}

/// Why a received frame is not a valid probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not a probe frame at all (another EtherType, magic or kind).
    #[error("not a probe frame")]
    Foreign,
    /// The frame is shorter or longer than its header says.
    #[error("frame of {got} bytes claims {claimed}")]
    Length {
        /// Length in the header.
        claimed: u32,
        /// Bytes received.
        got: usize,
    },
    /// A payload byte differs from the pattern.
    #[error("payload differs at byte {offset}")]
    Payload {
        /// Offset in the frame.
        offset: usize,
    },
    /// The trailer does not repeat the sequence number.
    #[error("trailer does not match sequence {seq}")]
    Trailer {
        /// Sequence number in the header.
        seq: u64,
    },
}

/// The payload pattern: byte `i` of every probe frame (outside header and trailer).
#[derive(Debug, Clone)]
pub struct Pattern {
    bytes: Vec<u8>,
}

impl Default for Pattern {
    fn default() -> Self {
        Self::new()
    }
}

impl Pattern {
    /// The pattern for frames up to [`FRAME_LEN_MAX`].
    #[must_use]
    pub fn new() -> Self {
        let bytes = (0..FRAME_LEN_MAX)
            .map(|i: u32| i.wrapping_mul(0x9E37_79B1).to_be_bytes()[0] ^ i.to_le_bytes()[1])
            .collect();
        Self { bytes }
    }

    /// The first `len` bytes.
    #[must_use]
    pub fn prefix(&self, len: usize) -> &[u8] {
        &self.bytes[..len.min(self.bytes.len())]
    }
}

/// Encode the Ethernet and probe headers.
#[must_use]
pub fn header(p: &Probe, src: Mac, dst: Mac) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    h[14..18].copy_from_slice(&MAGIC.to_le_bytes());
    h[18] = p.kind.code();
    h[19] = p.flow;
    h[22..26].copy_from_slice(&p.len.to_le_bytes());
    h[26..34].copy_from_slice(&p.seq.to_le_bytes());
    h[34..42].copy_from_slice(&p.t_ns.to_le_bytes());
    h
}

/// Encode the trailer of a frame with sequence number `seq`.
#[must_use]
pub fn trailer(seq: u64) -> [u8; TRAILER_LEN] {
    (seq ^ TRAILER_KEY).to_le_bytes()
}

/// Check a received frame and return its probe header. With `verify_payload` every payload
/// byte is compared with `pattern`; header, length and trailer are always checked.
///
/// # Errors
/// [`FrameError`].
pub fn parse(frame: &[u8], pattern: &Pattern, verify_payload: bool) -> Result<Probe, FrameError> {
    if frame.len() < HEADER_LEN
        || frame[12..14] != ETHERTYPE.to_be_bytes()
        || frame[14..18] != MAGIC.to_le_bytes()
    {
        return Err(FrameError::Foreign);
    }
    let kind = Kind::from_code(frame[18]).ok_or(FrameError::Foreign)?;
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&frame[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let len = u32::from_le_bytes([frame[22], frame[23], frame[24], frame[25]]);
    let p = Probe {
        kind,
        flow: frame[19],
        seq: word(26),
        t_ns: word(34),
        len,
    };
    if len < FRAME_LEN_MIN || usize::try_from(len).ok() != Some(frame.len()) {
        return Err(FrameError::Length {
            claimed: len,
            got: frame.len(),
        });
    }
    let body_end = frame.len() - TRAILER_LEN;
    if word(body_end) != p.seq ^ TRAILER_KEY {
        return Err(FrameError::Trailer { seq: p.seq });
    }
    if verify_payload {
        let want = &pattern.prefix(body_end)[HEADER_LEN..];
        let got = &frame[HEADER_LEN..body_end];
        if want != got {
            let offset = HEADER_LEN + want.iter().zip(got).take_while(|(a, b)| a == b).count();
            return Err(FrameError::Payload { offset });
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(p: &Probe, pattern: &Pattern) -> Vec<u8> {
        let len = p.len as usize;
        let mut f = pattern.prefix(len).to_vec();
        f[..HEADER_LEN].copy_from_slice(&header(p, port_mac(0), port_mac(1)));
        f[len - TRAILER_LEN..].copy_from_slice(&trailer(p.seq));
        f
    }

    fn probe(len: u32) -> Probe {
        Probe {
            kind: Kind::Request,
            flow: 3,
            seq: 77,
            t_ns: 123_456,
            len,
        }
    }

    #[test]
    fn frames_round_trip_at_every_size() {
        let pat = Pattern::new();
        for len in [60, 64, 1500, 1514, 9014, FRAME_LEN_MAX] {
            let p = probe(len);
            assert_eq!(parse(&build(&p, &pat), &pat, true), Ok(p), "len {len}");
        }
    }

    #[test]
    fn damage_is_detected() {
        let pat = Pattern::new();
        let p = probe(1500);
        let good = build(&p, &pat);
        let mut f = good.clone();
        f[700] ^= 1;
        assert_eq!(
            parse(&f, &pat, true),
            Err(FrameError::Payload { offset: 700 })
        );
        assert!(parse(&f, &pat, false).is_ok(), "payload unchecked");
        assert!(matches!(
            parse(&good[..1400], &pat, true),
            Err(FrameError::Length { .. })
        ));
        let mut f = good.clone();
        f[1499] ^= 0x80;
        assert_eq!(parse(&f, &pat, false), Err(FrameError::Trailer { seq: 77 }));
        let mut f = good.clone();
        f[12] = 0x08;
        assert_eq!(parse(&f, &pat, true), Err(FrameError::Foreign));
        let mut f = good;
        f[18] = 9;
        assert_eq!(parse(&f, &pat, true), Err(FrameError::Foreign));
        assert_eq!(parse(&[0u8; 10], &pat, true), Err(FrameError::Foreign));
    }

    #[test]
    fn the_pattern_is_not_periodic_at_256() {
        let pat = Pattern::new();
        let b = pat.prefix(9000);
        assert_ne!(&b[0..256], &b[256..512]);
        assert_ne!(&b[100..356], &b[4196..4452]);
    }
}
