//! The IPv4 and UDP headers of `udp` probe frames (RFC 791, RFC 768): written per frame,
//! checked on receipt. IPv4 without options (IHL 5), identification 0 and Don't Fragment
//! (nothing is ever fragmented), TTL 64, protocol UDP, the header checksum; UDP with both
//! ports `0xC000 + flow` (the dynamic range) and checksum 0 ("not computed", which IPv4
//! allows), so only the lengths and the IPv4 checksum change from frame to frame.

use super::{FrameError, ETH_LEN};
use std::net::Ipv4Addr;

/// IPv4 header length without options.
pub const IPV4_LEN: usize = 20;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// Both headers.
pub const LEN: usize = IPV4_LEN + UDP_LEN;
/// The UDP port of flow 0; flow `f` uses `UDP_PORT_BASE + f` as source and destination.
pub const UDP_PORT_BASE: u16 = 0xC000;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// Time to live of sent frames.
pub const TTL: u8 = 64;
const VERSION_IHL: u8 = 0x45;
const DONT_FRAGMENT: u16 = 0x4000;

/// The UDP port of `flow`.
#[must_use]
pub const fn udp_port(flow: u8) -> u16 {
    UDP_PORT_BASE + flow as u16
}

/// Write the IPv4 and UDP headers ([`LEN`] bytes of `h`) of a frame of `frame_len` bytes
/// (Ethernet header included) of `flow` from `addrs.0` to `addrs.1`.
pub(super) fn put(h: &mut [u8], frame_len: u32, flow: u8, addrs: (Ipv4Addr, Ipv4Addr)) {
    let l3_len = usize::try_from(frame_len)
        .unwrap_or(usize::MAX)
        .saturating_sub(ETH_LEN);
    let total = u16::try_from(l3_len).unwrap_or(u16::MAX);
    let udp_len = u16::try_from(l3_len.saturating_sub(IPV4_LEN)).unwrap_or(u16::MAX);
    let ip = &mut h[..IPV4_LEN];
    ip[0] = VERSION_IHL;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].fill(0);
    ip[6..8].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
    ip[8] = TTL;
    ip[9] = PROTO_UDP;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&addrs.0.octets());
    ip[16..20].copy_from_slice(&addrs.1.octets());
    let sum = checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut h[IPV4_LEN..LEN];
    let port = udp_port(flow).to_be_bytes();
    udp[0..2].copy_from_slice(&port);
    udp[2..4].copy_from_slice(&port);
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0);
}

/// Whether the bytes after an IPv4 EtherType start like a probe's: version 4 without
/// options, protocol UDP, both ports in the probe range.
pub(super) fn is_probe(l3: &[u8]) -> bool {
    let port_hi = udp_port(0).to_be_bytes()[0];
    l3.len() >= LEN
        && l3[0] == VERSION_IHL
        && l3[9] == PROTO_UDP
        && l3[IPV4_LEN] == port_hi
        && l3[IPV4_LEN + 2] == port_hi
}

/// Check the IPv4 and UDP headers `h` ([`LEN`] bytes, recognised by [`is_probe`]) of a
/// frame of `frame_len` bytes whose probe fields say `flow`.
///
/// # Errors
/// A length that disagrees with the frame's, a wrong IPv4 checksum, ports not of `flow`.
pub(super) fn check(h: &[u8], frame_len: usize, flow: u8) -> Result<(), FrameError> {
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    let total = be16(2);
    if usize::from(total) + ETH_LEN != frame_len {
        return Err(FrameError::Ipv4Length {
            claimed: total,
            got: frame_len,
        });
    }
    let udp_len = be16(IPV4_LEN + 4);
    if usize::from(udp_len) + ETH_LEN + IPV4_LEN != frame_len {
        return Err(FrameError::UdpLength {
            claimed: udp_len,
            got: frame_len,
        });
    }
    if checksum(&h[..IPV4_LEN]) != 0 {
        return Err(FrameError::Ipv4Checksum { found: be16(10) });
    }
    let (src, dst) = (be16(IPV4_LEN), be16(IPV4_LEN + 2));
    if src != udp_port(flow) || dst != udp_port(flow) {
        return Err(FrameError::UdpPorts { src, dst, flow });
    }
    Ok(())
}

/// The Internet checksum of `b` (an even number of bytes): the ones' complement of the
/// ones' complement sum of its 16-bit words. Over a header with its checksum field in
/// place it is 0 when the field is right.
#[must_use]
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).unwrap_or(u16::MAX)
}
