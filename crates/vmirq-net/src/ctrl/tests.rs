//! Control-queue tests, named after the virtio 1.3 clauses they check where there is one.

use super::wire::{class, feature};
use super::*;

const ALL: u64 = (1 << feature::CTRL_VQ)
    | (1 << feature::CTRL_RX)
    | (1 << feature::CTRL_RX_EXTRA)
    | (1 << feature::GUEST_ANNOUNCE)
    | (1 << feature::MQ)
    | (1 << feature::CTRL_MAC_ADDR)
    | (1 << feature::VQ_NOTF_COAL)
    | (1 << feature::NOTF_COAL);

fn cmd(cls: u8, c: u8, data: &[u8]) -> Vec<u8> {
    let mut v = vec![cls, c];
    v.extend_from_slice(data);
    v
}

fn coal_bytes(pkts: u32, usecs: u32) -> Vec<u8> {
    Coal {
        max_packets: pkts,
        max_usecs: usecs,
    }
    .to_bytes()
    .to_vec()
}

fn vq_set(vq: u16, pkts: u32, usecs: u32) -> Vec<u8> {
    let mut d = vq.to_le_bytes().to_vec();
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(&coal_bytes(pkts, usecs));
    cmd(class::NOTF_COAL, class::coal::VQ_SET, &d)
}

/// Send a command with a one-byte writable part; returns (ack, outcome).
fn send(c: &mut Ctrl, readable: &[u8]) -> (u8, Result<(), Reject>) {
    let mut w = [0xAA];
    let r = c.handle(readable, &mut w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.used_len, 1);
    assert_eq!(w[0], r.ack);
    (r.ack, r.outcome.map(|_| ()))
}

fn assert_ok(c: &mut Ctrl, readable: &[u8]) {
    assert_eq!(send(c, readable), (VIRTIO_NET_OK, Ok(())), "{readable:?}");
}

/// VQ_GET the Linux way: readable `le16 vq_index`, writable coal + ack.
fn vq_get(c: &mut Ctrl, vq: u16) -> (u8, Option<Coal>) {
    let r = cmd(class::NOTF_COAL, class::coal::VQ_GET, &vq.to_le_bytes());
    let mut w = [0xAA; 9];
    let reply = c.handle(&r, &mut w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reply.used_len, 9);
    assert_eq!(w[8], reply.ack);
    let coal = (reply.ack == VIRTIO_NET_OK).then(|| Coal {
        max_packets: u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
        max_usecs: u32::from_le_bytes([w[4], w[5], w[6], w[7]]),
    });
    (reply.ack, coal)
}

/// virtio 1.3 §5.1.6.5.9.1: VQ_SET sets one queue, VQ_GET reads it back; RX_SET / TX_SET set
/// every queue of their direction; the last writer wins.
#[test]
fn verify_virtio_net_notf_coal_set_get_last_writer_wins() {
    let mut c = Ctrl::new(ALL, 2);
    let (ack, _) = send(
        &mut c,
        &cmd(class::NOTF_COAL, class::coal::RX_SET, &coal_bytes(32, 50)),
    );
    assert_eq!(ack, VIRTIO_NET_OK);
    let (ack, _) = send(
        &mut c,
        &cmd(class::NOTF_COAL, class::coal::TX_SET, &coal_bytes(16, 20)),
    );
    assert_eq!(ack, VIRTIO_NET_OK);
    let rx = Coal {
        max_packets: 32,
        max_usecs: 50,
    };
    let tx = Coal {
        max_packets: 16,
        max_usecs: 20,
    };
    assert_eq!(vq_get(&mut c, 0), (VIRTIO_NET_OK, Some(rx)));
    assert_eq!(vq_get(&mut c, 2), (VIRTIO_NET_OK, Some(rx)));
    assert_eq!(vq_get(&mut c, 3), (VIRTIO_NET_OK, Some(tx)));
    // VQ_SET one RX queue; the other keeps RX_SET's values.
    let mut w = [0xAA];
    let set = vq_set(2, 8, 64);
    let reply = c.handle(&set, &mut w).unwrap_or_else(|e| panic!("{e}"));
    let q = Coal {
        max_packets: 8,
        max_usecs: 64,
    };
    assert_eq!(
        reply.outcome,
        Ok(Action::Coalesce {
            target: CoalTarget::Queue(2),
            coal: q
        })
    );
    assert_eq!(vq_get(&mut c, 2), (VIRTIO_NET_OK, Some(q)));
    assert_eq!(vq_get(&mut c, 0), (VIRTIO_NET_OK, Some(rx)));
    // A later RX_SET overrides the per-queue value.
    assert_ok(
        &mut c,
        &cmd(class::NOTF_COAL, class::coal::RX_SET, &coal_bytes(1, 0)),
    );
    assert_eq!(
        vq_get(&mut c, 2).1,
        Some(Coal {
            max_packets: 1,
            max_usecs: 0
        })
    );
}

/// virtio 1.3 §5.1.6.5.9: a queue that is reset reverts to the TX_SET / RX_SET values; a
/// device reset sets every parameter to 0.
#[test]
fn verify_virtio_net_notf_coal_queue_reset_and_device_reset() {
    let mut c = Ctrl::new(ALL, 1);
    assert_ok(
        &mut c,
        &cmd(class::NOTF_COAL, class::coal::RX_SET, &coal_bytes(32, 50)),
    );
    assert_ok(&mut c, &vq_set(0, 4, 4));
    let rx = Coal {
        max_packets: 32,
        max_usecs: 50,
    };
    assert_eq!(c.queue_reset(0), Some(rx));
    assert_eq!(c.coal(0), Some(rx));
    c.reset();
    assert_eq!(c.coal(0), Some(Coal::default()));
    assert_eq!(c.queue_pairs(), 1);
}

/// virtio 1.3 §5.1.6.5.9.2: TX_SET / RX_SET need NOTF_COAL, VQ_SET / VQ_GET need VQ_NOTF_COAL.
#[test]
fn verify_virtio_net_notf_coal_needs_its_feature() {
    let only_vq = (1 << feature::CTRL_VQ) | (1 << feature::VQ_NOTF_COAL);
    let mut c = Ctrl::new(only_vq, 1);
    let rx_set = cmd(class::NOTF_COAL, class::coal::RX_SET, &coal_bytes(1, 1));
    assert_eq!(
        send(&mut c, &rx_set),
        (
            VIRTIO_NET_ERR,
            Err(Reject::NotNegotiated(feature::NOTF_COAL))
        )
    );
    assert_eq!(send(&mut c, &vq_set(0, 1, 1)).0, VIRTIO_NET_OK);
    let only_dev = (1 << feature::CTRL_VQ) | (1 << feature::NOTF_COAL);
    let mut d = Ctrl::new(only_dev, 1);
    assert_eq!(send(&mut d, &rx_set).0, VIRTIO_NET_OK);
    assert_eq!(
        send(&mut d, &vq_set(0, 1, 1)),
        (
            VIRTIO_NET_ERR,
            Err(Reject::NotNegotiated(feature::VQ_NOTF_COAL))
        )
    );
    assert_eq!(vq_get(&mut d, 0), (VIRTIO_NET_ERR, None));
}

/// vq_index must name an RX/TX queue: the control queue (index 2 * pairs) and beyond are
/// refused, and nothing changes.
#[test]
fn vq_index_out_of_range_is_refused() {
    let mut c = Ctrl::new(ALL, 2);
    let before = c.clone();
    for vq in [4, 5, 1000, u16::MAX] {
        assert_eq!(
            send(&mut c, &vq_set(vq, 1, 1)),
            (VIRTIO_NET_ERR, Err(Reject::QueueOutOfRange)),
            "vq {vq}"
        );
        assert_eq!(vq_get(&mut c, vq), (VIRTIO_NET_ERR, None));
    }
    assert_eq!(c, before);
    assert_eq!(vq_get(&mut c, 3).0, VIRTIO_NET_OK);
}

#[test]
fn absurd_coalescing_values_are_refused() {
    let mut c = Ctrl::new(ALL, 1);
    let before = c.clone();
    for (p, u) in [
        (u32::MAX, 1),
        (1, u32::MAX),
        (MAX_PACKETS + 1, 0),
        (0, MAX_USECS + 1),
    ] {
        assert_eq!(
            send(&mut c, &vq_set(0, p, u)),
            (VIRTIO_NET_ERR, Err(Reject::ValueOutOfRange))
        );
        let all = cmd(class::NOTF_COAL, class::coal::TX_SET, &coal_bytes(p, u));
        assert_eq!(send(&mut c, &all).0, VIRTIO_NET_ERR);
    }
    assert_eq!(c, before);
}

#[test]
fn vq_get_accepts_the_full_struct_and_refuses_a_short_result_area() {
    let mut c = Ctrl::new(ALL, 1);
    assert_ok(&mut c, &vq_set(1, 7, 9));
    // A driver that sends the whole struct virtio_net_ctrl_coal_vq.
    let mut d = 1u16.to_le_bytes().to_vec();
    d.extend_from_slice(&[0; 10]);
    let r = cmd(class::NOTF_COAL, class::coal::VQ_GET, &d);
    let mut w = [0; 9];
    let reply = c.handle(&r, &mut w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reply.ack, VIRTIO_NET_OK);
    assert_eq!(&w[..8], &coal_bytes(7, 9)[..]);
    // Writable part of 8 bytes: no room for the coal struct and the ack: ERR in its last byte.
    let mut w = [0xAA; 8];
    let reply = c.handle(&r, &mut w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (reply.ack, reply.used_len, reply.outcome),
        (VIRTIO_NET_ERR, 8, Err(Reject::ResultDoesNotFit))
    );
    assert_eq!(w, [0, 0, 0, 0, 0, 0, 0, VIRTIO_NET_ERR]);
    // A 3-byte vq_index is malformed; the result area is zeroed and the ack follows it.
    let mut w = [0xAA; 9];
    let bad = cmd(class::NOTF_COAL, class::coal::VQ_GET, &[1, 0, 0]);
    let reply = c.handle(&bad, &mut w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((reply.ack, reply.used_len), (VIRTIO_NET_ERR, 9));
    assert_eq!(w, [0, 0, 0, 0, 0, 0, 0, 0, VIRTIO_NET_ERR]);
}

#[test]
fn a_chain_without_a_writable_byte_is_never_answered() {
    let mut c = Ctrl::new(ALL, 1);
    let before = c.clone();
    assert_eq!(
        c.handle(&vq_set(0, 1, 1), &mut []),
        Err(CtrlError::NoStatusByte)
    );
    assert_eq!(c, before);
}

/// virtio 1.3 §5.1.6.5.5: VQ_PAIRS_SET takes 1 to max_virtqueue_pairs, needs MQ.
#[test]
fn verify_virtio_net_mq_pairs_range() {
    let mut c = Ctrl::new(ALL, 4);
    let set = |n: u16| cmd(class::MQ, class::MQ_VQ_PAIRS_SET, &n.to_le_bytes());
    assert_eq!(send(&mut c, &set(4)).0, VIRTIO_NET_OK);
    assert_eq!(c.queue_pairs(), 4);
    assert_eq!(send(&mut c, &set(1)).0, VIRTIO_NET_OK);
    for n in [0, 5, 0x8000, u16::MAX] {
        assert_eq!(
            send(&mut c, &set(n)),
            (VIRTIO_NET_ERR, Err(Reject::ValueOutOfRange))
        );
    }
    assert_eq!(c.queue_pairs(), 1);
    assert_eq!(
        send(&mut c, &cmd(class::MQ, class::MQ_VQ_PAIRS_SET, &[2])).1,
        Err(Reject::Malformed)
    );
    // RSS_CONFIG (1) is not offered.
    assert_eq!(
        send(&mut c, &cmd(class::MQ, 1, &[0; 8])).1,
        Err(Reject::UnknownCommand {
            class: 4,
            command: 1
        })
    );
    let mut no_mq = Ctrl::new(ALL & !(1 << feature::MQ), 4);
    assert_eq!(
        send(&mut no_mq, &set(2)).1,
        Err(Reject::NotNegotiated(feature::MQ))
    );
}

/// virtio 1.3 §5.1.6.5.1: RX mode commands take one byte, 0 or 1; the extra ones need
/// CTRL_RX_EXTRA.
#[test]
fn verify_virtio_net_rx_modes() {
    let mut c = Ctrl::new(ALL, 1);
    assert!(c.rx_mode(RxMode::Promisc));
    assert_eq!(
        send(&mut c, &cmd(class::RX, class::rx::PROMISC, &[0])).0,
        VIRTIO_NET_OK
    );
    assert!(!c.rx_mode(RxMode::Promisc));
    assert_eq!(
        send(&mut c, &cmd(class::RX, class::rx::NOBCAST, &[1])).0,
        VIRTIO_NET_OK
    );
    assert!(c.rx_mode(RxMode::NoBcast));
    assert_eq!(
        send(&mut c, &cmd(class::RX, class::rx::ALLMULTI, &[2])).1,
        Err(Reject::ValueOutOfRange)
    );
    assert_eq!(
        send(&mut c, &cmd(class::RX, class::rx::ALLMULTI, &[1, 1])).1,
        Err(Reject::Malformed)
    );
    assert_eq!(
        send(&mut c, &cmd(class::RX, 6, &[1])).1,
        Err(Reject::UnknownCommand {
            class: 0,
            command: 6
        })
    );
    let basic = (1 << feature::CTRL_VQ) | (1 << feature::CTRL_RX);
    let mut b = Ctrl::new(basic, 1);
    assert_eq!(
        send(&mut b, &cmd(class::RX, class::rx::ALLMULTI, &[1])).0,
        0
    );
    assert_eq!(
        send(&mut b, &cmd(class::RX, class::rx::NOUNI, &[1])).1,
        Err(Reject::NotNegotiated(feature::CTRL_RX_EXTRA))
    );
}

#[test]
fn mac_commands_apply_and_borrow_the_table() {
    let mut c = Ctrl::new(ALL, 1);
    let (ack, out) = send(
        &mut c,
        &cmd(class::MAC, class::mac::ADDR_SET, &[2, 0, 0, 0, 0, 7]),
    );
    assert_eq!((ack, out), (VIRTIO_NET_OK, Ok(())));
    assert_eq!(c.mac(), Some([2, 0, 0, 0, 0, 7]));
    let mut t = 1u32.to_le_bytes().to_vec();
    t.extend_from_slice(&[2, 0, 0, 0, 0, 8]);
    t.extend_from_slice(&0u32.to_le_bytes());
    let r = cmd(class::MAC, class::mac::TABLE_SET, &t);
    let mut w = [0];
    let reply = c.handle(&r, &mut w).unwrap_or_else(|e| panic!("{e}"));
    match reply.outcome {
        Ok(Action::MacTable { unicast, multicast }) => {
            assert_eq!(unicast.iter().collect::<Vec<_>>(), vec![[2, 0, 0, 0, 0, 8]]);
            assert!(multicast.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let no_addr = Ctrl::new(ALL & !(1 << feature::CTRL_MAC_ADDR), 1);
    let mut n = no_addr.clone();
    assert_eq!(
        send(
            &mut n,
            &cmd(class::MAC, class::mac::ADDR_SET, &[2, 0, 0, 0, 0, 7])
        )
        .1,
        Err(Reject::NotNegotiated(feature::CTRL_MAC_ADDR))
    );
    assert_eq!(n, no_addr);
}

#[test]
fn unknown_classes_commands_and_unoffered_classes_get_err() {
    let mut c = Ctrl::new(ALL, 1);
    let before = c.clone();
    assert_eq!(
        send(&mut c, &cmd(class::VLAN, 0, &[0, 0])).1,
        Err(Reject::UnknownClass(class::VLAN))
    );
    assert_eq!(
        send(&mut c, &cmd(class::GUEST_OFFLOADS, 0, &[0; 8])).1,
        Err(Reject::UnknownClass(class::GUEST_OFFLOADS))
    );
    assert_eq!(
        send(&mut c, &cmd(200, 0, &[])).1,
        Err(Reject::UnknownClass(200))
    );
    assert_eq!(
        send(&mut c, &cmd(class::NOTF_COAL, 4, &[])).1,
        Err(Reject::UnknownCommand {
            class: 6,
            command: 4
        })
    );
    assert_eq!(send(&mut c, &[]).1, Err(Reject::Short));
    assert_eq!(send(&mut c, &[class::NOTF_COAL]).1, Err(Reject::Short));
    assert_eq!(c, before);
    assert_eq!(
        send(&mut c, &cmd(class::ANNOUNCE, class::ANNOUNCE_ACK, &[])).0,
        VIRTIO_NET_OK
    );
}

/// Every strict prefix and every one-byte extension of a valid command is refused, and
/// leaves the state as it was.
#[test]
fn truncated_or_extended_commands_change_nothing() {
    let mut t = 1u32.to_le_bytes().to_vec();
    t.extend_from_slice(&[2, 0, 0, 0, 0, 8]);
    t.extend_from_slice(&0u32.to_le_bytes());
    let valid = [
        vq_set(1, 3, 3),
        cmd(class::NOTF_COAL, class::coal::RX_SET, &coal_bytes(3, 3)),
        cmd(class::MQ, class::MQ_VQ_PAIRS_SET, &2u16.to_le_bytes()),
        cmd(class::MAC, class::mac::ADDR_SET, &[2, 0, 0, 0, 0, 7]),
        cmd(class::MAC, class::mac::TABLE_SET, &t),
        cmd(class::RX, class::rx::PROMISC, &[0]),
    ];
    for v in &valid {
        let mut c = Ctrl::new(ALL, 2);
        let before = c.clone();
        for len in 0..v.len() {
            assert_eq!(send(&mut c, &v[..len]).0, VIRTIO_NET_ERR, "{v:?}[..{len}]");
        }
        let mut longer = v.clone();
        longer.push(0);
        assert_eq!(send(&mut c, &longer).0, VIRTIO_NET_ERR, "{longer:?}");
        assert_eq!(c, before, "{v:?}");
        assert_eq!(send(&mut c, v).0, VIRTIO_NET_OK, "{v:?}");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn command_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            0u8..8,
            0u8..6,
            proptest::collection::vec(any::<u8>(), 0..40),
        )
            .prop_map(|(cls, c, data)| {
                let mut v = vec![cls, c];
                v.extend(data);
                v
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any bytes: an ack is written where the reply says, within the writable part; a
        /// refused command changes nothing; VQ_GET reports what the state holds.
        #[test]
        fn any_command_is_answered_safely(
            cmds in proptest::collection::vec((command_bytes(), 0usize..12), 1..20),
            features in any::<u64>(),
            pairs in 0u16..5,
        ) {
            let mut c = Ctrl::new(features | (ALL * u64::from(pairs % 2)), pairs);
            for (readable, wlen) in cmds {
                let before = c.clone();
                let mut w = vec![0xAAu8; wlen];
                match c.handle(&readable, &mut w) {
                    Err(CtrlError::NoStatusByte) => {
                        prop_assert_eq!(wlen, 0);
                        prop_assert_eq!(&c, &before);
                    }
                    Ok(r) => {
                        prop_assert!(r.used_len >= 1 && r.used_len <= wlen);
                        prop_assert_eq!(w[r.used_len - 1], r.ack);
                        prop_assert_eq!(r.ack == VIRTIO_NET_OK, r.outcome.is_ok());
                        match r.outcome {
                            Err(_) => prop_assert_eq!(&c, &before),
                            Ok(Action::CoalReport { vq, coal }) => {
                                prop_assert_eq!(&w[..COAL_BYTES], &coal.to_bytes()[..]);
                                prop_assert_eq!(c.coal(vq), Some(coal));
                            }
                            Ok(Action::Coalesce { coal, .. }) => {
                                prop_assert!(coal.max_packets <= MAX_PACKETS);
                                prop_assert!(coal.max_usecs <= MAX_USECS);
                            }
                            Ok(_) => {}
                        }
                    }
                }
            }
        }
    }
}
