//! The frames the load generator sends, in one of two encapsulations ([`Encap`]):
//!
//! - `raw`: Ethernet with the local experimental EtherType 0x88B5, then the probe fields.
//!   Every flow between two ports carries the same addresses (the MAC pair).
//! - `udp`: Ethernet, a 20-byte IPv4 header and an 8-byte UDP header ([`ipv4`]), then the
//!   probe fields: what a guest's stack sends, so that a switch that tells flows apart by
//!   IP addresses and ports sees one UDP flow per probe flow (ports `0xC000 + flow`).
//!
//! The probe fields (magic, kind, flow, length, sequence number, send time) are followed by
//! a payload that is a fixed function of the byte offset in the frame and a trailer that
//! repeats the sequence number. The receiver ([`parse`]) recognises either encapsulation
//! and checks all of it (the length in every layer, the IPv4 checksum, trailer, payload),
//! so truncation, corruption, reordering of merged buffers and stale buffers are caught. A
//! transmit buffer is filled with the payload once and only the header and trailer are
//! written per frame.

pub mod ipv4;

use serde::Serialize;
use std::net::Ipv4Addr;

/// EtherType of `raw` probe frames (IEEE 802 local experimental).
pub const ETHERTYPE: u16 = 0x88B5;
/// EtherType of `udp` probe frames (IPv4).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Probe magic, "VMIQ".
pub const MAGIC: u32 = 0x564D_4951;
/// Ethernet header length (no VLAN tag).
pub const ETH_LEN: usize = 14;
/// Probe fields: magic, kind, flow, length, sequence number, send time (and padding).
pub const PROBE_LEN: usize = 32;
/// Ethernet header plus probe fields (`raw`).
pub const HEADER_LEN: usize = ETH_LEN + PROBE_LEN;
/// Ethernet, IPv4 and UDP headers plus probe fields (`udp`): 74 bytes.
pub const UDP_HEADER_LEN: usize = ETH_LEN + ipv4::LEN + PROBE_LEN;
/// Trailer length (the sequence number again, keyed).
pub const TRAILER_LEN: usize = 8;
/// Smallest `raw` probe frame (Ethernet's minimum without FCS).
pub const FRAME_LEN_MIN: u32 = 60;
/// Smallest `udp` probe frame: its headers and the trailer (14 + 20 + 8 + 32 + 8 bytes).
pub const UDP_FRAME_LEN_MIN: u32 = 82;
/// Largest probe frame (a 9000-byte MTU frame is 9014 bytes).
pub const FRAME_LEN_MAX: u32 = 9216;
const TRAILER_KEY: u64 = 0xA5C3_5A3C_0FF0_F00F;
const _: () = assert!(UDP_FRAME_LEN_MIN as usize == UDP_HEADER_LEN + TRAILER_LEN);
// IPv4 and UDP lengths of every probe frame fit their 16-bit fields.
const _: () = assert!(FRAME_LEN_MAX <= u16::MAX as u32);

/// A MAC address.
pub type Mac = [u8; 6];

/// The MAC address of client port `index` (locally administered, unicast).
#[must_use]
pub fn port_mac(index: usize) -> Mac {
    let i = u8::try_from(index & 0xff).unwrap_or(0);
    [0x52, 0x54, 0x00, 0x6e, 0x6c, i]
}

/// The IPv4 address of client port `index` in `udp` frames, 10.0.0.(`index` + 1), derived
/// like [`port_mac`] from the index's low byte (so port 255 wraps to 10.0.0.0).
#[must_use]
pub fn port_ip(index: usize) -> Ipv4Addr {
    mac_ip(port_mac(index))
}

/// The IPv4 address of the port whose MAC address is `mac` ([`port_ip`] of the index that
/// [`port_mac`] put in its last byte).
#[must_use]
pub const fn mac_ip(mac: Mac) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, mac[5].wrapping_add(1))
}

/// How probe frames are carried (`--frames`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encap {
    /// `raw`: Ethernet (EtherType 0x88B5), then the probe fields.
    #[default]
    Raw,
    /// `udp`: Ethernet, IPv4 and UDP (both ports `0xC000 + flow`), then the probe fields.
    Udp,
}

impl Encap {
    /// Bytes before the payload: Ethernet (and IPv4 and UDP) headers and probe fields.
    #[must_use]
    pub const fn header_len(self) -> usize {
        match self {
            Self::Raw => HEADER_LEN,
            Self::Udp => UDP_HEADER_LEN,
        }
    }

    /// The shortest frame in this encapsulation.
    #[must_use]
    pub const fn frame_len_min(self) -> u32 {
        match self {
            Self::Raw => FRAME_LEN_MIN,
            Self::Udp => UDP_FRAME_LEN_MIN,
        }
    }

    /// Name on the command line and in reports.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Udp => "udp",
        }
    }

    /// Parse `raw` or `udp`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "raw" => Some(Self::Raw),
            "udp" => Some(Self::Udp),
            _ => None,
        }
    }

    /// The headers of a frame with probe `p` from `src` to `dst` in this encapsulation.
    #[must_use]
    pub fn header(self, p: &Probe, src: Mac, dst: Mac) -> Header {
        let mut bytes = [0u8; UDP_HEADER_LEN];
        match self {
            Self::Raw => put_raw(&mut bytes[..HEADER_LEN], p, src, dst),
            Self::Udp => put_udp(&mut bytes, p, src, dst),
        }
        Header {
            bytes,
            len: self.header_len(),
        }
    }
}

/// The headers of one frame (what a send writes before the payload), in either
/// encapsulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    bytes: [u8; UDP_HEADER_LEN],
    len: usize,
}

impl Header {
    /// The header bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Valid probe frames counted by encapsulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EncapCounts {
    /// `raw` frames.
    pub raw: u64,
    /// `udp` frames.
    pub udp: u64,
}

impl EncapCounts {
    /// Count one frame.
    pub fn add(&mut self, encap: Encap) {
        match encap {
            Encap::Raw => self.raw += 1,
            Encap::Udp => self.udp += 1,
        }
    }

    /// Frames of both encapsulations.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.raw + self.udp
    }
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
    /// Flow number (which stream or request/response pair; in `udp` frames also the UDP
    /// ports).
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
    /// Not a probe frame at all (another EtherType, IP protocol, UDP port, magic or kind).
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
    /// The IPv4 total length disagrees with the frame's length.
    #[error("IPv4 total length {claimed} in a frame of {got} bytes")]
    Ipv4Length {
        /// Total length in the IPv4 header.
        claimed: u16,
        /// Bytes received (Ethernet header included).
        got: usize,
    },
    /// The UDP length disagrees with the frame's length.
    #[error("UDP length {claimed} in a frame of {got} bytes")]
    UdpLength {
        /// Length in the UDP header.
        claimed: u16,
        /// Bytes received (Ethernet header included).
        got: usize,
    },
    /// The IPv4 header checksum is wrong.
    #[error("IPv4 header checksum {found:#06x} is wrong")]
    Ipv4Checksum {
        /// The checksum in the header.
        found: u16,
    },
    /// The UDP ports are not `0xC000 + flow`.
    #[error("UDP ports {src:#06x} -> {dst:#06x} in a frame of flow {flow}")]
    UdpPorts {
        /// Source port.
        src: u16,
        /// Destination port.
        dst: u16,
        /// Flow in the probe fields.
        flow: u8,
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

fn put_ethernet(h: &mut [u8], src: Mac, dst: Mac, ethertype: u16) {
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// The probe fields into `h` ([`PROBE_LEN`] bytes; the padding is left as it is).
fn put_probe(h: &mut [u8], p: &Probe) {
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4] = p.kind.code();
    h[5] = p.flow;
    h[8..12].copy_from_slice(&p.len.to_le_bytes());
    h[12..20].copy_from_slice(&p.seq.to_le_bytes());
    h[20..28].copy_from_slice(&p.t_ns.to_le_bytes());
}

fn put_raw(h: &mut [u8], p: &Probe, src: Mac, dst: Mac) {
    put_ethernet(h, src, dst, ETHERTYPE);
    put_probe(&mut h[ETH_LEN..HEADER_LEN], p);
}

fn put_udp(h: &mut [u8; UDP_HEADER_LEN], p: &Probe, src: Mac, dst: Mac) {
    const PROBE_AT: usize = UDP_HEADER_LEN - PROBE_LEN;
    put_ethernet(h, src, dst, ETHERTYPE_IPV4);
    let addrs = (mac_ip(src), mac_ip(dst));
    ipv4::put(&mut h[ETH_LEN..PROBE_AT], p.len, p.flow, addrs);
    put_probe(&mut h[PROBE_AT..], p);
}

/// Encode the trailer of a frame with sequence number `seq`.
#[must_use]
pub fn trailer(seq: u64) -> [u8; TRAILER_LEN] {
    (seq ^ TRAILER_KEY).to_le_bytes()
}

/// A whole frame: `p.len` bytes of the pattern with `p`'s headers and trailer (for tests
/// and tools; the data path writes headers and trailer into a buffer that holds the
/// pattern already). `p.len` must be at least `encap`'s minimum.
#[must_use]
pub fn build(encap: Encap, p: &Probe, src: Mac, dst: Mac, pattern: &Pattern) -> Vec<u8> {
    let len = usize::try_from(p.len).unwrap_or(usize::MAX);
    let mut f = pattern.prefix(len).to_vec();
    let h = encap.header(p, src, dst);
    let hdr = h.as_bytes().len().min(f.len());
    f[..hdr].copy_from_slice(&h.as_bytes()[..hdr]);
    let t = f.len().saturating_sub(TRAILER_LEN);
    let tr = trailer(p.seq);
    let n = f.len() - t;
    f[t..].copy_from_slice(&tr[..n]);
    f
}

/// Check a received frame and return its probe header. With `verify_payload` every payload
/// byte is compared with `pattern`; headers, lengths and trailer are always checked.
///
/// # Errors
/// [`FrameError`].
pub fn parse(frame: &[u8], pattern: &Pattern, verify_payload: bool) -> Result<Probe, FrameError> {
    parse_encap(frame, pattern, verify_payload).map(|(_, p)| p)
}

/// [`parse`], also saying which encapsulation the frame had.
///
/// # Errors
/// [`FrameError`].
pub fn parse_encap(
    frame: &[u8],
    pattern: &Pattern,
    verify_payload: bool,
) -> Result<(Encap, Probe), FrameError> {
    let encap = recognise(frame).ok_or(FrameError::Foreign)?;
    let hdr = encap.header_len();
    let p = read_probe(&frame[hdr - PROBE_LEN..hdr]).ok_or(FrameError::Foreign)?;
    if p.len < encap.frame_len_min() || usize::try_from(p.len).ok() != Some(frame.len()) {
        return Err(FrameError::Length {
            claimed: p.len,
            got: frame.len(),
        });
    }
    if encap == Encap::Udp {
        ipv4::check(&frame[ETH_LEN..hdr - PROBE_LEN], frame.len(), p.flow)?;
    }
    let body_end = frame.len() - TRAILER_LEN;
    if le64(&frame[body_end..]) != p.seq ^ TRAILER_KEY {
        return Err(FrameError::Trailer { seq: p.seq });
    }
    if verify_payload {
        let want = &pattern.prefix(body_end)[hdr..];
        let got = &frame[hdr..body_end];
        if want != got {
            let offset = hdr + want.iter().zip(got).take_while(|(a, b)| a == b).count();
            return Err(FrameError::Payload { offset });
        }
    }
    Ok((encap, p))
}

/// The encapsulation of a probe frame, from its EtherType, (IPv4 protocol and UDP ports,)
/// and the magic; `None` for anything else (or a frame too short for its headers).
fn recognise(frame: &[u8]) -> Option<Encap> {
    let has_magic = |at: usize| {
        frame
            .get(at..at + PROBE_LEN)
            .is_some_and(|f| f[..4] == MAGIC.to_le_bytes())
    };
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    match ethertype {
        ETHERTYPE if has_magic(ETH_LEN) => Some(Encap::Raw),
        ETHERTYPE_IPV4
            if ipv4::is_probe(&frame[ETH_LEN..]) && has_magic(UDP_HEADER_LEN - PROBE_LEN) =>
        {
            Some(Encap::Udp)
        }
        _ => None,
    }
}

/// The probe fields of `f` ([`PROBE_LEN`] bytes, magic already checked); `None` for an
/// unknown kind.
fn read_probe(f: &[u8]) -> Option<Probe> {
    Some(Probe {
        kind: Kind::from_code(f[4])?,
        flow: f[5],
        len: u32::from_le_bytes([f[8], f[9], f[10], f[11]]),
        seq: le64(&f[12..20]),
        t_ns: le64(&f[20..28]),
    })
}

/// The little-endian u64 at the start of `b` (at least 8 bytes).
fn le64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests;
