//! netload ports and a mix slow enough for a debug build on a loaded machine, shared by the
//! tests that run netload's mix in `udp` frames through an in-process serve-net.

use std::time::Duration;
use vmirq_netload::frame::{self, Encap, Pattern};
use vmirq_netload::port::{NetPort, PortConfig};
use vmirq_netload::run::{Mode, Report, RunConfig};
use vmirq_netload::workload::Workload;

/// Connect netload port `i` (its MAC `frame::port_mac(i)`) to the socket at `path`: 512
/// receive and 256 transmit entries, frames up to 1514 bytes.
pub fn connect(path: &std::path::Path, i: usize) -> NetPort {
    let cfg = PortConfig {
        rx_queue_size: 512,
        tx_queue_size: 256,
        tx_frame_max: 1514,
        ..PortConfig::default()
    };
    NetPort::connect(path, cfg, frame::port_mac(i), &Pattern::new())
        .unwrap_or_else(|e| panic!("connect port {i}: {e:?}"))
}

/// A mix slow enough for a debug build: a paced 1514-byte stream at 5 kpps and a
/// `msg_len`-byte message every 200 us, 100 ms of warm-up, `measure_ms` measured, up to 2 s
/// of drain.
pub fn mix(msg_len: u32, measure_ms: u64) -> RunConfig {
    let mix = Workload::Mix {
        bulk_len: 1514,
        bulk_rate_pps: Some(5_000),
        msg_len,
        msg_interval_us: 200,
    };
    let mut cfg = RunConfig::new(mix, Mode::Interrupt);
    cfg.warmup = Duration::from_millis(100);
    cfg.measure = Duration::from_millis(measure_ms);
    cfg.drain_max = Duration::from_secs(2);
    cfg
}

/// [`mix`] in `udp` frames, 96-byte messages, 500 ms measured.
pub fn udp_mix() -> RunConfig {
    let mut cfg = mix(96, 500);
    cfg.frames = Encap::Udp;
    cfg
}

/// The mix ran whole: clean, the bulk received in full and in order, no unexpected
/// response, and enough of both flows (correctness, not speed: a loaded machine slows the
/// senders, and the wire slips).
pub fn assert_mix_whole(r: &Report) {
    super::assert_clean(r);
    let (b, t) = (r.bulk.expect("bulk"), r.rr.expect("rr"));
    assert_eq!(b.sent, b.received, "{}", r.summary());
    assert_eq!((b.out_of_order, t.unexpected), (0, 0), "{}", r.summary());
    assert!(b.frames >= 100 && t.transactions >= 5, "{}", r.summary());
}
