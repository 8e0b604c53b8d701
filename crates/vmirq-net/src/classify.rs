//! Packet classification for latency-adaptive moderation: what the `dim-lat` heuristics
//! (netdev 0x18 virtio interrupt-moderation talk) need to know about a frame.
//!
//! # API (for the data path)
//! ```text
//! let info = classify(frame);          // frame = bytes after the virtio-net header
//! info.ack_only()                      // a TCP segment that only acknowledges (no payload,
//!                                      // ACK set, no SYN/FIN/RST)
//! info.payload_bytes                   // TCP/UDP payload (0 for other frames)
//! info.completion_meta()               // vmirq_policy CompletionMeta for the RX completion:
//!                                      // bytes = frame length, ACK_ONLY flag if ack-only
//! let mut burst = Burst::default();    // per-burst accumulator (vmirq-policy's BurstStats,
//! burst.add(&info.completion_meta());  // the same one dim-lat's filter keeps)
//! burst.packets / burst.bytes / burst.ack_only;
//! burst.bytes_per_packet(); burst.ack_only_pct();
//! ```
//!
//! Parsing is bounds-checked everywhere and never trusts a length field beyond the bytes
//! present: Ethernet II with up to two VLAN tags (802.1Q / 802.1ad), IPv4 (options, total
//! length bounding the payload so that padding of short frames is not counted, fragments
//! carry no transport information), IPv6 with up to [`IPV6_EXT_MAX`] extension
//! headers (hop-by-hop, routing, destination options, fragment), TCP (data offset) and UDP
//! (length field). Anything it cannot parse is classified as far as it got; it never fails.

use vmirq_policy::moderation::{CompletionMeta, RequestKind};

/// Ethernet header length without VLAN tags.
pub const ETH_HLEN: usize = 14;
/// Most IPv6 extension headers walked before giving up on finding the transport header.
pub const IPV6_EXT_MAX: usize = 8;

pub(crate) const ETH_P_IPV4: u16 = 0x0800;
pub(crate) const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
pub(crate) const IPPROTO_TCP: u8 = 6;
pub(crate) const IPPROTO_UDP: u8 = 17;

/// TCP flag bits (byte 13 of the TCP header).
pub mod tcp_flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field significant.
    pub const ACK: u8 = 0x10;
}

/// The network layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// Not IP, or the frame is too short for its Ethernet header.
    #[default]
    Other,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// The transport layer of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Not TCP/UDP, a fragment, or a header that does not fit.
    #[default]
    Other,
    /// TCP with its flags byte.
    Tcp {
        /// The flags (see [`tcp_flags`]).
        flags: u8,
    },
    /// UDP.
    Udp,
}

/// What the latency heuristics need to know about one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameInfo {
    /// Frame length in bytes (everything after the virtio-net header).
    pub frame_bytes: u32,
    /// Network layer.
    pub network: Network,
    /// Transport layer.
    pub transport: Transport,
    /// TCP / UDP payload bytes (0 otherwise).
    pub payload_bytes: u32,
}

impl FrameInfo {
    /// A TCP segment that carries only an acknowledgement: ACK set, no SYN, FIN or RST, and
    /// no payload.
    #[must_use]
    pub fn ack_only(&self) -> bool {
        use tcp_flags::{ACK, FIN, RST, SYN};
        matches!(self.transport, Transport::Tcp { flags }
            if flags & ACK != 0 && flags & (SYN | FIN | RST) == 0 && self.payload_bytes == 0)
    }

    /// The moderation metadata of this frame's completion: a device-to-driver transfer of
    /// the frame's length, flagged ACK_ONLY when it is one.
    #[must_use]
    pub fn completion_meta(&self) -> CompletionMeta {
        let m = CompletionMeta::new(RequestKind::Read, self.frame_bytes);
        if self.ack_only() {
            m.with(CompletionMeta::ACK_ONLY)
        } else {
            m
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(s.try_into().ok()?))
}

/// Classify one Ethernet frame.
#[must_use]
pub fn classify(frame: &[u8]) -> FrameInfo {
    let mut info = FrameInfo {
        frame_bytes: u32::try_from(frame.len()).unwrap_or(u32::MAX),
        ..FrameInfo::default()
    };
    let Some((ethertype, l3)) = ethernet(frame) else {
        return info;
    };
    let l4 = match ethertype {
        ETH_P_IPV4 => {
            info.network = Network::Ipv4;
            ipv4(l3)
        }
        ETH_P_IPV6 => {
            info.network = Network::Ipv6;
            ipv6(l3)
        }
        _ => None,
    };
    if let Some((proto, segment)) = l4 {
        (info.transport, info.payload_bytes) = transport(proto, segment);
    }
    info
}

/// The ethertype after up to two VLAN tags, and the bytes after the Ethernet header.
pub(crate) fn ethernet(frame: &[u8]) -> Option<(u16, &[u8])> {
    let mut at = 12;
    let mut ethertype = be16(frame, at)?;
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        at += 4;
        ethertype = be16(frame, at)?;
    }
    Some((ethertype, frame.get(at + 2..)?))
}

/// (protocol, transport segment) of an IPv4 packet, bounded by its total length.
fn ipv4(p: &[u8]) -> Option<(u8, &[u8])> {
    let (&vihl, _) = p.split_first()?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 {
        return None;
    }
    let total = usize::from(be16(p, 2)?);
    let frag = be16(p, 6)?;
    let more_fragments = frag & 0x2000 != 0;
    let offset = frag & 0x1fff;
    if offset != 0 || more_fragments {
        // Later fragments have no transport header and a first fragment only part of the payload.
        return None;
    }
    let proto = *p.get(9)?;
    Some((proto, p.get(ihl..total)?))
}

/// (protocol, transport segment) of an IPv6 packet after its extension headers.
fn ipv6(p: &[u8]) -> Option<(u8, &[u8])> {
    if p.first()? >> 4 != 6 {
        return None;
    }
    let payload_len = usize::from(be16(p, 4)?);
    let mut next = *p.get(6)?;
    let mut rest = p.get(40..40 + payload_len)?;
    for _ in 0..IPV6_EXT_MAX {
        match next {
            // Hop-by-hop, routing, destination options: (len + 1) * 8 bytes.
            0 | 43 | 60 => {
                let len = (usize::from(*rest.get(1)?) + 1) * 8;
                next = *rest.first()?;
                rest = rest.get(len..)?;
            }
            // Fragment header (8 bytes): fragments carry no whole transport segment.
            44 => {
                let frag = be16(rest, 2)?;
                if frag & 0xfff9 != 0 {
                    return None;
                }
                next = *rest.first()?;
                rest = rest.get(8..)?;
            }
            _ => return Some((next, rest)),
        }
    }
    None
}

fn transport(proto: u8, seg: &[u8]) -> (Transport, u32) {
    let payload = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    match proto {
        IPPROTO_TCP => {
            let (Some(&doff), Some(&flags)) = (seg.get(12), seg.get(13)) else {
                return (Transport::Other, 0);
            };
            let hlen = usize::from(doff >> 4) * 4;
            if hlen < 20 || hlen > seg.len() {
                return (Transport::Other, 0);
            }
            (Transport::Tcp { flags }, payload(seg.len() - hlen))
        }
        IPPROTO_UDP => match be16(seg, 4).map(usize::from) {
            Some(len) if (8..=seg.len()).contains(&len) => (Transport::Udp, payload(len - 8)),
            _ => (Transport::Other, 0),
        },
        _ => (Transport::Other, 0),
    }
}

/// Counts over a burst of frames: vmirq-policy's accumulator, the one `dim-lat` decides on
/// (`burst.add(&info.completion_meta())`).
pub use vmirq_policy::moderation::BurstStats as Burst;

#[cfg(test)]
mod tests;
