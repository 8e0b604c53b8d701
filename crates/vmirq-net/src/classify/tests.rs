//! Classification against hand-built frames: exact answers for every layer combination,
//! and no panic or invented payload on truncated or random bytes.

use super::*;
use proptest::prelude::*;

/// A frame description the builder turns into bytes.
#[derive(Debug, Clone)]
struct Spec {
    vlans: usize,
    ipv6: bool,
    ip_options: usize,
    v6_ext: usize,
    proto: u8,
    tcp_flags: u8,
    tcp_options: usize,
    payload: usize,
    padding: usize,
}

fn build(s: &Spec) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for _ in 0..s.vlans {
        f.extend_from_slice(&ETH_P_8021Q.to_be_bytes());
        f.extend_from_slice(&[0, 5]);
    }
    f.extend_from_slice(&(if s.ipv6 { ETH_P_IPV6 } else { ETH_P_IPV4 }).to_be_bytes());
    let mut l4 = Vec::new();
    match s.proto {
        IPPROTO_TCP => {
            let hlen = 20 + 4 * s.tcp_options;
            l4.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 2]);
            l4.push(u8::try_from(hlen / 4).unwrap_or(15) << 4);
            l4.push(s.tcp_flags);
            l4.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
            l4.resize(hlen, 1); // NOP options
        }
        IPPROTO_UDP => {
            let len = u16::try_from(8 + s.payload).unwrap_or(u16::MAX);
            l4.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
            l4.extend_from_slice(&len.to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
        }
        _ => {}
    }
    l4.extend(std::iter::repeat_n(0xab, s.payload));
    if s.ipv6 {
        let mut ext = Vec::new();
        let mut next = s.proto;
        for _ in 0..s.v6_ext {
            // Destination options, 8 bytes, chained in front.
            let mut e = vec![next, 0, 1, 4, 0, 0, 0, 0];
            e.extend_from_slice(&ext);
            ext = e;
            next = 60;
        }
        let plen = u16::try_from(ext.len() + l4.len()).unwrap_or(u16::MAX);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[next, 64]);
        f.extend_from_slice(&[0x20; 32]);
        f.extend_from_slice(&ext);
    } else {
        let ihl = 20 + 4 * s.ip_options;
        let total = u16::try_from(ihl + l4.len()).unwrap_or(u16::MAX);
        f.push(0x40 | u8::try_from(ihl / 4).unwrap_or(15));
        f.push(0);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, s.proto, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.resize(f.len() + 4 * s.ip_options, 1);
    }
    f.extend_from_slice(&l4);
    f.resize(f.len() + s.padding, 0);
    f
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (0usize..3, any::<bool>(), 0usize..11, 0usize..4),
        prop_oneof![Just(IPPROTO_TCP), Just(IPPROTO_UDP), Just(1u8), Just(47u8)],
        (any::<u8>(), 0usize..11),
        (
            prop_oneof![Just(0usize), 1usize..100, 1400usize..9000],
            0usize..40,
        ),
    )
        .prop_map(
            |(
                (vlans, ipv6, ip_options, v6_ext),
                proto,
                (tcp_flags, tcp_options),
                (payload, padding),
            )| Spec {
                vlans,
                ipv6,
                ip_options,
                v6_ext,
                proto,
                tcp_flags,
                tcp_options,
                payload,
                padding,
            },
        )
}

fn tcp_ack(payload: usize) -> Spec {
    Spec {
        vlans: 0,
        ipv6: false,
        ip_options: 0,
        v6_ext: 0,
        proto: IPPROTO_TCP,
        tcp_flags: tcp_flags::ACK,
        tcp_options: 3, // timestamps, as Linux sends them
        payload,
        padding: 0,
    }
}

#[test]
fn a_pure_ack_padded_to_the_ethernet_minimum_is_ack_only() {
    // 14 + 20 + 32 = 66 bytes; add padding as a NIC would for short frames.
    let mut s = tcp_ack(0);
    s.padding = 6;
    let info = classify(&build(&s));
    assert_eq!(info.network, Network::Ipv4);
    assert_eq!(
        info.transport,
        Transport::Tcp {
            flags: tcp_flags::ACK
        }
    );
    assert_eq!(info.payload_bytes, 0, "padding must not count as payload");
    assert!(info.ack_only());
    assert!(info.completion_meta().has(CompletionMeta::ACK_ONLY));
    assert_eq!(info.completion_meta().bytes, 72);
}

#[test]
fn data_syn_fin_rst_and_non_tcp_are_not_ack_only() {
    assert!(!classify(&build(&tcp_ack(1))).ack_only());
    for f in [tcp_flags::SYN, tcp_flags::FIN, tcp_flags::RST] {
        let mut s = tcp_ack(0);
        s.tcp_flags |= f;
        assert!(!classify(&build(&s)).ack_only(), "flags {f:#x}");
    }
    let mut s = tcp_ack(0);
    s.tcp_flags = tcp_flags::PSH;
    assert!(!classify(&build(&s)).ack_only());
    let mut u = tcp_ack(0);
    u.proto = IPPROTO_UDP;
    let info = classify(&build(&u));
    assert_eq!((info.transport, info.payload_bytes), (Transport::Udp, 0));
    assert!(!info.ack_only());
    assert!(!info.completion_meta().has(CompletionMeta::ACK_ONLY));
}

#[test]
fn fragments_and_non_ip_have_no_transport() {
    let mut f = build(&tcp_ack(0));
    f[ETH_HLEN + 6] = 0x20; // IPv4 MF set
    assert_eq!(classify(&f).transport, Transport::Other);
    let mut arp = build(&tcp_ack(0));
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let info = classify(&arp);
    assert_eq!(
        (info.network, info.transport),
        (Network::Other, Transport::Other)
    );
    assert_eq!(classify(&[]).frame_bytes, 0);
    assert_eq!(classify(&[0; 13]).network, Network::Other);
}

#[test]
fn burst_accumulates_packets_bytes_and_acks() {
    let mut b = Burst::default();
    assert_eq!((b.bytes_per_packet(), b.ack_only_pct()), (0, 0));
    let ack = classify(&build(&tcp_ack(0)));
    let data = classify(&build(&tcp_ack(1448)));
    for _ in 0..3 {
        b.add(&ack.completion_meta());
    }
    b.add(&data.completion_meta());
    assert_eq!((b.packets, b.ack_only), (4, 3));
    assert_eq!(
        b.bytes,
        3 * u64::from(ack.frame_bytes) + u64::from(data.frame_bytes)
    );
    assert_eq!(b.ack_only_pct(), 75);
    assert_eq!(b.bytes_per_packet(), b.bytes / 4);
    b.reset();
    assert_eq!(b, Burst::default());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Every built frame classifies to exactly what was built.
    #[test]
    fn built_frames_classify_exactly(s in spec()) {
        let f = build(&s);
        let info = classify(&f);
        prop_assert_eq!(info.frame_bytes as usize, f.len());
        prop_assert_eq!(info.network, if s.ipv6 { Network::Ipv6 } else { Network::Ipv4 });
        let tcp_ok = s.proto == IPPROTO_TCP && 20 + 4 * s.tcp_options <= 60;
        let (transport, payload) = match s.proto {
            IPPROTO_TCP if tcp_ok => (Transport::Tcp { flags: s.tcp_flags }, s.payload),
            IPPROTO_UDP => (Transport::Udp, s.payload),
            _ => (Transport::Other, 0),
        };
        // An IPv4 header longer than 60 bytes cannot be expressed: no transport then.
        let ip_ok = s.ipv6 || s.ip_options <= 10;
        if ip_ok {
            prop_assert_eq!(info.transport, transport);
            prop_assert_eq!(info.payload_bytes as usize, payload);
            let ack_only = tcp_ok && s.payload == 0
                && s.tcp_flags & tcp_flags::ACK != 0
                && s.tcp_flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) == 0;
            prop_assert_eq!(info.ack_only(), ack_only);
        }
    }

    /// Truncated frames never panic and never report payload beyond the bytes present.
    #[test]
    fn truncated_frames_are_safe(s in spec(), cut in any::<prop::sample::Index>()) {
        let f = build(&s);
        let cut = cut.index(f.len() + 1);
        let info = classify(&f[..cut]);
        prop_assert_eq!(info.frame_bytes as usize, cut);
        prop_assert!((info.payload_bytes as usize) <= cut);
    }

    /// Random bytes never panic.
    #[test]
    fn random_bytes_are_safe(f in proptest::collection::vec(any::<u8>(), 0..200)) {
        let info = classify(&f);
        prop_assert!((info.payload_bytes as usize) <= f.len());
    }
}
