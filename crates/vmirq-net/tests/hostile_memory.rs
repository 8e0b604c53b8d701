//! A frontend that truncates its guest memory (a memfd it handed over) mid-traffic: the
//! backend survives (vmirq-vhost's SIGBUS table turns the faulting pages into zeros), the
//! frame read from the lost memory is neither forwarded nor completed, the port's queue
//! stops and its connection is dropped, and the other ports keep forwarding; with the
//! per-port workers and with the forwarding thread (`--datapath pmd`).

// Frame lengths here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::raw::{RawPort, DATA, F_WRITE};
use std::time::{Duration, Instant};
use vmirq_net::queues::Datapath;
use vmirq_net::virtio::{F_EVENT_IDX, HDR_LEN};

const RX: usize = 0;
const TX: usize = 1;

/// A net header and a 60-byte Ethernet frame tagged with `tag`.
fn packet(tag: u8) -> Vec<u8> {
    let mut p = vec![0u8; HDR_LEN + 60];
    p[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    for (i, b) in p[HDR_LEN + 14..].iter_mut().enumerate() {
        *b = tag ^ (i as u8);
    }
    p
}

/// Send `tag`'s frame from `from` (TX descriptor and buffer `n`) after offering `to` receive
/// buffer `n`, and check that `to` receives it intact (in its first available buffer).
fn cross(from: &mut RawPort, to: &mut RawPort, n: u16, tag: u8) {
    let buf = |i: u32| DATA + u64::from(i) * 2048;
    to.desc(RX, n, buf(u32::from(n)), 2048, F_WRITE, 0);
    to.offer(RX, n);
    let (tx_before, rx_before) = (from.used_idx(TX), to.used_idx(RX));
    let p = packet(tag);
    from.write(buf(u32::from(n)), &p);
    from.desc(TX, n, buf(u32::from(n)), p.len() as u32, 0, 0);
    from.offer(TX, n);
    assert!(
        from.wait_used(TX, tx_before.wrapping_add(1)),
        "frame {tag} completed"
    );
    assert!(
        to.wait_used(RX, rx_before.wrapping_add(1)),
        "frame {tag} received"
    );
    let (id, len) = to.used(RX, rx_before);
    assert_eq!(len, p.len() as u32, "frame {tag}");
    assert_eq!(to.read(buf(id) + HDR_LEN as u64, 60), p[HDR_LEN..].to_vec());
}

#[test]
fn a_port_whose_frontend_truncates_its_memory_is_dropped_and_the_others_forward() {
    for datapath in [Datapath::PerPort, Datapath::Pmd { cpu: None }] {
        truncation(datapath);
    }
}

fn truncation(datapath: Datapath) {
    let server = common::start(4, |c| c.policies.datapath = datapath);
    let connect = |i: usize| RawPort::connect(&server.sockets[i], F_EVENT_IDX);
    let (mut p0, mut p1, mut p2, mut p3) = (connect(0), connect(1), connect(2), connect(3));
    // A frame switched before its destination is attached is dropped (no destination).
    for p in 0..4 {
        server.wait_attached(p);
    }
    cross(&mut p0, &mut p1, 0, 1);
    cross(&mut p2, &mut p3, 0, 2);

    // Port 0's frontend shrinks its memory to the rings (the test's buffers start at DATA)
    // and then offers a frame whose buffer lies in the lost part. The test never touches
    // port 0's buffers again: its own mapping of them would fault too.
    let hostile = p0.mem.try_clone_file().expect("memfd");
    assert!(p0.rings[TX].end() <= DATA, "the rings stay mapped");
    let frame = packet(3);
    p0.write(DATA + 2048, &frame);
    p0.desc(TX, 1, DATA + 2048, frame.len() as u32, 0, 0);
    p1.desc(RX, 1, DATA + 2048, 2048, F_WRITE, 0);
    p1.offer(RX, 1);
    hostile.set_len(DATA).expect("truncate the memfd");
    p0.offer(TX, 1);

    let t = Instant::now();
    while server.handle.memory_revoked() == 0 || server.handle.serving(0) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "port 0 not dropped: revoked {}, serving {}",
            server.handle.memory_revoked(),
            server.handle.serving(0)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = server.handle.counters();
    assert_eq!(
        c[0].tx_frames, 1,
        "the frame from lost memory was not taken: {:?}",
        c[0]
    );
    assert!(c[0].queue_broken >= 1, "{:?}", c[0]);
    assert_eq!(
        p0.used_idx(TX),
        1,
        "the frame from lost memory was not completed"
    );
    assert_eq!(
        c[1].rx_frames, 1,
        "nothing from lost memory forwarded: {:?}",
        c[1]
    );
    assert_eq!(p1.used_idx(RX), 1, "port 1 received nothing more");

    // The other pair keeps forwarding, both ways, on the same (living) backend.
    cross(&mut p2, &mut p3, 1, 4);
    cross(&mut p3, &mut p2, 2, 5);
    // And port 0 takes a new, honest frontend.
    drop(p0);
    let mut p0 = connect(0);
    cross(&mut p0, &mut p1, 3, 6);
    drop((p0, p1, p2, p3));
    server.stop();
}
