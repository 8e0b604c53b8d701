//! Which receive queue of a multiqueue port (`--queues N`) a switched frame goes to.
//!
//! A frame goes to one of the destination's enabled queue pairs (the first `n`, `n` set by
//! the driver's VQ_PAIRS_SET, 1 until then): the one its flow hash picks, so that every
//! frame of one flow lands on one queue and keeps its order. The flow is the frame's
//! addresses: the IPv4 or IPv6 source and destination (with the TCP or UDP ports of an
//! unfragmented packet), or the two MAC addresses of a frame that is not IP (ARP, ...).
//! An IP frame too short for its IP header (or a TCP/UDP one too short for its ports) has
//! no trustworthy addresses: it goes to the queue of the index it was sent on (modulo `n`),
//! so a driver's own per-queue order is kept for it too. The hash is FNV-1a, not keyed:
//! steering is a performance matter here, not isolation (one driver's frames only reach its
//! own partner's queues). The Ethernet header (with up to two VLAN tags) is read by
//! [`crate::classify`]'s parser, the one `dim-lat` uses.

use crate::classify::{ethernet, ETH_P_IPV4, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP};

const IPV6_HDR_LEN: usize = 40;

/// The receive queue pair (0..`active`) for `frame`, sent on transmit queue pair `src_q`.
#[must_use]
pub fn rx_pair(frame: &[u8], src_q: usize, active: usize) -> usize {
    if active <= 1 {
        return 0;
    }
    match flow_hash(frame) {
        Some(h) => usize::try_from(h % active as u64).unwrap_or(0),
        None => src_q % active,
    }
}

/// The flow hash of `frame` (an Ethernet frame), `None` when it is IP with a truncated
/// header.
#[must_use]
pub fn flow_hash(frame: &[u8]) -> Option<u64> {
    let (ethertype, l3) = ethernet(frame)?;
    let mut h = Fnv::default();
    match ethertype {
        ETH_P_IPV4 => {
            let ihl = usize::from(*l3.first()? & 0x0f) * 4;
            if ihl < 20 || l3.len() < ihl {
                return None;
            }
            let proto = l3[9];
            h.add(&[proto]);
            h.add(&l3[12..20]);
            let frag = u16::from_be_bytes([l3[6], l3[7]]) & 0x3fff; // MF and offset
            if frag == 0 && matches!(proto, IPPROTO_TCP | IPPROTO_UDP) {
                h.add(l3.get(ihl..ihl + 4)?);
            }
        }
        ETH_P_IPV6 => {
            let hdr = l3.get(..IPV6_HDR_LEN)?;
            let next = hdr[6];
            h.add(&[next]);
            h.add(&hdr[8..40]);
            if matches!(next, IPPROTO_TCP | IPPROTO_UDP) {
                h.add(l3.get(IPV6_HDR_LEN..IPV6_HDR_LEN + 4)?);
            }
        }
        _ => h.add(frame.get(..12)?),
    }
    Some(h.0)
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::ETH_HDR_LEN;

    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; ETH_HDR_LEN + 28];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        let ip = &mut f[ETH_HDR_LEN..];
        ip[0] = 0x45;
        ip[9] = IPPROTO_UDP;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        ip[20..22].copy_from_slice(&sport.to_be_bytes());
        ip[22..24].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn one_flow_one_queue_whatever_its_payload_or_source_queue() {
        let a = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000);
        let mut b = a.clone();
        b.extend_from_slice(&[0xab; 100]);
        for src_q in 0..4 {
            assert_eq!(rx_pair(&a, src_q, 4), rx_pair(&a, 0, 4));
            assert_eq!(rx_pair(&b, src_q, 4), rx_pair(&a, 0, 4));
        }
    }

    #[test]
    fn flows_spread_over_the_enabled_pairs_only() {
        let mut seen = [0usize; 4];
        for port in 0..64u16 {
            let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1000 + port, 2000);
            let q = rx_pair(&f, 0, 3);
            assert!(q < 3);
            seen[q] += 1;
            assert_eq!(rx_pair(&f, 0, 1), 0);
        }
        assert!(seen[..3].iter().all(|&n| n > 0), "{seen:?}");
        assert_eq!(seen[3], 0);
    }

    #[test]
    fn ports_and_addresses_are_part_of_the_flow() {
        let base = flow_hash(&udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2));
        assert_ne!(base, flow_hash(&udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 3)));
        assert_ne!(base, flow_hash(&udp4([10, 0, 0, 3], [10, 0, 0, 2], 1, 2)));
        // A fragment has no ports: only its addresses count.
        let mut frag = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        frag[ETH_HDR_LEN + 6] = 0x20; // MF
        let mut frag2 = udp4([10, 0, 0, 1], [10, 0, 0, 2], 7, 9);
        frag2[ETH_HDR_LEN + 6] = 0x20;
        assert_eq!(flow_hash(&frag), flow_hash(&frag2));
    }

    #[test]
    fn truncated_ip_headers_go_by_the_source_queue() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        for cut in [ETH_HDR_LEN, ETH_HDR_LEN + 10, ETH_HDR_LEN + 22] {
            assert_eq!(flow_hash(&f[..cut]), None, "{cut}");
            assert_eq!(rx_pair(&f[..cut], 3, 2), 1);
            assert_eq!(rx_pair(&f[..cut], 2, 2), 0);
        }
        // A bad IHL (below 5 words) is truncated too.
        let mut bad = f.clone();
        bad[ETH_HDR_LEN] = 0x41;
        assert_eq!(flow_hash(&bad), None);
        assert_eq!(flow_hash(&f[..10]), None);
        let mut v6 = vec![0u8; ETH_HDR_LEN + 30];
        v6[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
        assert_eq!(flow_hash(&v6), None);
    }

    #[test]
    fn a_vlan_tagged_frame_hashes_its_ip_flow() {
        let plain = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&0x8100u16.to_be_bytes());
        tagged.extend_from_slice(&7u16.to_be_bytes()); // VLAN 7
        tagged.extend_from_slice(&plain[12..]);
        let other = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 3);
        let mut tagged_other = other[..12].to_vec();
        tagged_other.extend_from_slice(&[0x81, 0, 0, 7]);
        tagged_other.extend_from_slice(&other[12..]);
        assert_eq!(flow_hash(&tagged), flow_hash(&plain));
        assert_ne!(flow_hash(&tagged), flow_hash(&tagged_other));
    }

    #[test]
    fn non_ip_frames_go_by_their_mac_addresses() {
        let mut arp = vec![0u8; 60];
        arp[..6].copy_from_slice(&[0xff; 6]);
        arp[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let h = flow_hash(&arp);
        assert!(h.is_some());
        arp[40] = 9; // payload: same flow
        assert_eq!(flow_hash(&arp), h);
        arp[11] = 2; // another source
        assert_ne!(flow_hash(&arp), h);
    }
}
