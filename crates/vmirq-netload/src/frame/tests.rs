//! Frames in both encapsulations: round trips at every size, the exact header bytes, and
//! damage to every layer caught by the right error.

use super::ipv4::{checksum, udp_port};
use super::*;

fn probe(len: u32) -> Probe {
    Probe {
        kind: Kind::Request,
        flow: 3,
        seq: 77,
        t_ns: 123_456,
        len,
    }
}

fn frame(encap: Encap, p: &Probe, pat: &Pattern) -> Vec<u8> {
    build(encap, p, port_mac(0), port_mac(1), pat)
}

const RAW_SIZES: [u32; 8] = [60, 64, 81, 82, 1500, 1514, 9014, FRAME_LEN_MAX];
const UDP_SIZES: [u32; 7] = [82, 83, 96, 1500, 1514, 9014, FRAME_LEN_MAX];

#[test]
fn frames_round_trip_at_every_size_in_both_encapsulations() {
    let pat = Pattern::new();
    for (encap, sizes) in [(Encap::Raw, &RAW_SIZES[..]), (Encap::Udp, &UDP_SIZES[..])] {
        for &len in sizes {
            for kind in [Kind::Bulk, Kind::Request, Kind::Response] {
                let p = Probe { kind, ..probe(len) };
                let f = frame(encap, &p, &pat);
                assert_eq!(f.len(), len as usize);
                assert_eq!(
                    parse_encap(&f, &pat, true),
                    Ok((encap, p)),
                    "{encap:?} {len}"
                );
                assert_eq!(parse(&f, &pat, true), Ok(p));
            }
        }
    }
}

#[test]
fn the_raw_header_keeps_its_layout() {
    let p = probe(1514);
    let h = Encap::Raw.header(&p, port_mac(0), port_mac(1));
    let h = h.as_bytes();
    assert_eq!(h.len(), HEADER_LEN);
    let mut want = Vec::new();
    want.extend_from_slice(&port_mac(1));
    want.extend_from_slice(&port_mac(0));
    want.extend_from_slice(&[0x88, 0xB5, 0x51, 0x49, 0x4D, 0x56, 2, 3, 0, 0]);
    want.extend_from_slice(&1514u32.to_le_bytes());
    want.extend_from_slice(&77u64.to_le_bytes());
    want.extend_from_slice(&123_456u64.to_le_bytes());
    want.extend_from_slice(&[0; 4]);
    assert_eq!(h, want.as_slice());
}

#[test]
fn udp_headers_are_valid_ipv4_and_udp() {
    let p = Probe {
        flow: 2,
        ..probe(1514)
    };
    let h = Encap::Udp.header(&p, port_mac(0), port_mac(3));
    let h = h.as_bytes();
    assert_eq!(h.len(), UDP_HEADER_LEN);
    assert_eq!(&h[0..6], &port_mac(3));
    assert_eq!(&h[6..12], &port_mac(0));
    assert_eq!(&h[12..14], &[0x08, 0x00]);
    let ip = &h[14..34];
    assert_eq!(ip[0], 0x45, "version 4, IHL 5");
    assert_eq!(ip[1], 0, "DSCP/ECN");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 1500, "total length");
    assert_eq!(&ip[4..6], &[0, 0], "identification");
    assert_eq!(&ip[6..8], &[0x40, 0], "DF, offset 0");
    assert_eq!((ip[8], ip[9]), (64, 17), "TTL, UDP");
    assert_eq!(checksum(ip), 0, "header checksum");
    assert_ne!(&ip[10..12], &[0, 0]);
    assert_eq!(&ip[12..16], &[10, 0, 0, 1]);
    assert_eq!(&ip[16..20], &[10, 0, 0, 4]);
    let udp = &h[34..42];
    assert_eq!(&udp[0..2], &0xC002u16.to_be_bytes());
    assert_eq!(&udp[2..4], &0xC002u16.to_be_bytes());
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 1480, "UDP length");
    assert_eq!(&udp[6..8], &[0, 0], "no UDP checksum");
    // The probe fields follow, as in a raw frame.
    let raw = Encap::Raw.header(&p, port_mac(0), port_mac(3));
    assert_eq!(&h[42..], &raw.as_bytes()[14..]);
    assert_eq!(UDP_FRAME_LEN_MIN, 14 + 20 + 8 + 32 + 8);
}

#[test]
fn the_internet_checksum_matches_a_known_header() {
    // A textbook IPv4 header (192.168.0.1 -> 192.168.0.199, UDP, total length 115).
    let mut h = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(checksum(&h), 0xb861);
    h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
    assert_eq!(checksum(&h), 0);
}

#[test]
fn addresses_follow_the_port_index() {
    assert_eq!(port_ip(0), Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(port_ip(3), Ipv4Addr::new(10, 0, 0, 4));
    assert_eq!(mac_ip(port_mac(7)), port_ip(7));
    assert_eq!(udp_port(0), 0xC000);
    assert_eq!(udp_port(255), 0xC0FF);
    for e in [Encap::Raw, Encap::Udp] {
        assert_eq!(Encap::parse(e.as_str()), Some(e));
    }
    assert_eq!(Encap::parse("tcp"), None);
    assert_eq!(Encap::default(), Encap::Raw);
}

#[test]
fn damage_is_detected() {
    let pat = Pattern::new();
    let p = probe(1500);
    let good = frame(Encap::Raw, &p, &pat);
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

/// `good` with `damage` applied, parsed with the payload verified.
fn damaged(good: &[u8], damage: impl FnOnce(&mut Vec<u8>)) -> Result<Probe, FrameError> {
    let mut f = good.to_vec();
    damage(&mut f);
    parse(&f, &Pattern::new(), true)
}

#[test]
fn damage_to_a_udp_frame_is_detected_in_every_layer() {
    let pat = Pattern::new();
    let p = probe(1500);
    let good = frame(Encap::Udp, &p, &pat);
    assert_eq!(parse(&good, &pat, true), Ok(p));
    // Payload: the first byte after the headers, and one in the middle.
    for at in [UDP_HEADER_LEN, 700, 1491] {
        let r = damaged(&good, |f| f[at] ^= 1);
        assert_eq!(r, Err(FrameError::Payload { offset: at }), "{at}");
    }
    let mut f = good.clone();
    f[700] ^= 1;
    assert!(parse(&f, &pat, false).is_ok(), "payload unchecked");
    // Trailer.
    let r = damaged(&good, |f| f[1495] ^= 0x80);
    assert_eq!(r, Err(FrameError::Trailer { seq: 77 }));
    // Truncated (the probe length no longer matches).
    let r = parse(&good[..1400], &pat, true);
    assert_eq!(
        r,
        Err(FrameError::Length {
            claimed: 1500,
            got: 1400
        })
    );
    // IPv4 total length (one less, one more).
    for claimed in [1485u16, 1487] {
        let r = damaged(&good, |f| f[16..18].copy_from_slice(&claimed.to_be_bytes()));
        assert_eq!(r, Err(FrameError::Ipv4Length { claimed, got: 1500 }));
    }
    // UDP length.
    for claimed in [1465u16, 1481, 0] {
        let r = damaged(&good, |f| f[38..40].copy_from_slice(&claimed.to_be_bytes()));
        assert_eq!(r, Err(FrameError::UdpLength { claimed, got: 1500 }));
    }
    // The IPv4 checksum itself, and fields it covers (TTL, source address, DF).
    let found = u16::from_be_bytes([good[24], good[25]]);
    let r = damaged(&good, |f| f[25] ^= 0x10);
    assert_eq!(
        r,
        Err(FrameError::Ipv4Checksum {
            found: found ^ 0x10
        })
    );
    for at in [22, 29, 20] {
        let r = damaged(&good, |f| f[at] ^= 0x01);
        assert_eq!(r, Err(FrameError::Ipv4Checksum { found }), "byte {at}");
    }
    // Ports that are not the probe's flow (the flow byte or a port damaged).
    let r = damaged(&good, |f| f[47] = 4);
    let (src, dst) = (0xC003, 0xC003);
    assert_eq!(r, Err(FrameError::UdpPorts { src, dst, flow: 4 }));
    let r = damaged(&good, |f| f[37] = 9);
    let dst = 0xC009;
    assert_eq!(r, Err(FrameError::UdpPorts { src, dst, flow: 3 }));
}

#[test]
fn frames_that_are_not_udp_probes_are_foreign() {
    let pat = Pattern::new();
    let good = frame(Encap::Udp, &probe(200), &pat);
    let cases: [(usize, u8); 7] = [
        (13, 0xDD), // EtherType IPv6
        (14, 0x46), // IPv4 with options
        (14, 0x65), // version 6
        (23, 6),    // TCP
        (34, 0x12), // source port outside the probe range
        (36, 0x12), // destination port outside the probe range
        (42, 0),    // magic
    ];
    for (at, byte) in cases {
        let r = damaged(&good, |f| f[at] = byte);
        assert_eq!(r, Err(FrameError::Foreign), "byte {at} = {byte:#x}");
    }
    // Too short for its headers.
    for len in [14, 40, 73] {
        assert_eq!(parse(&good[..len], &pat, true), Err(FrameError::Foreign));
    }
    // A probe kind that does not exist.
    assert_eq!(damaged(&good, |f| f[46] = 9), Err(FrameError::Foreign));
}

#[test]
fn udp_frames_shorter_than_their_headers_and_trailer_are_refused() {
    let pat = Pattern::new();
    let ok = frame(Encap::Udp, &probe(UDP_FRAME_LEN_MIN), &pat);
    assert!(parse(&ok, &pat, true).is_ok());
    // 81 bytes: the trailer overlaps the probe fields' padding; every length agrees.
    let short = frame(Encap::Udp, &probe(UDP_FRAME_LEN_MIN - 1), &pat);
    assert_eq!(
        parse(&short, &pat, true),
        Err(FrameError::Length {
            claimed: 81,
            got: 81
        })
    );
}

#[test]
fn the_pattern_is_not_periodic_at_256() {
    let pat = Pattern::new();
    let b = pat.prefix(9000);
    assert_ne!(&b[0..256], &b[256..512]);
    assert_ne!(&b[100..356], &b[4196..4452]);
}
