//! `--metrics`: serve-net's Prometheus endpoint answers with every port's and queue's
//! counters, and with `--datapath pmd` the forwarding thread's (passes, empty passes,
//! frames, sleeps), after frames went through.

// Frame sizes here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::raw::{RawPort, DATA};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use vmirq_net::queues::Datapath;
use vmirq_net::virtio::{F_EVENT_IDX, HDR_LEN};
use vmirq_vhost::mock_guest::Desc;
use vmirq_vhost::raw_frontend::Session;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
    l.local_addr().expect("addr").port()
}

fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    text
}

/// The value of the sample line starting with `series ` (labels included).
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// One frame from port 0 (raw ring) to port 1 (one receive buffer); waits for delivery.
fn one_frame(server: &common::Running, s1: &mut Session) {
    let rx = &mut s1.queues[0].guest;
    let buf = rx.alloc(2048);
    rx.push_chain(&[Desc {
        addr: buf,
        len: 2048,
        write: true,
    }]);
    s1.kick(0).expect("kick");
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    server.wait_attached(0);
    server.wait_attached(1);
    let mut frame = vec![0u8; HDR_LEN + 60];
    frame[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p0.write(DATA, &frame);
    p0.desc(1, 0, DATA, frame.len() as u32, 0, 0);
    p0.offer(1, 0);
    assert_eq!(
        s1.wait_used(0, 1, Duration::from_secs(3)).len(),
        1,
        "delivered"
    );
    assert!(p0.wait_used(1, 1), "transmit chain returned");
    p0.close();
}

#[test]
fn pmd_thread_and_port_counters_are_served() {
    let port = free_port();
    let server = common::start(2, |c| {
        c.policies.datapath = Datapath::Pmd { cpu: None };
        c.metrics = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    });
    let mut s1 = Session::start(&server.sockets[1], 3, 64).expect("port 1 frontend");
    one_frame(&server, &mut s1);
    // The thread counts a pass when it ends: wait (bounded) until the frame's pass is in.
    let t = Instant::now();
    let text = loop {
        let text = scrape(port);
        if value(&text, "vmirq_net_pmd_chains_total").is_some_and(|v| v >= 1) {
            break text;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{text}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        value(&text, "vmirq_net_port_tx_frames_total{port=\"0\"}"),
        Some(1),
        "{text}"
    );
    assert_eq!(
        value(&text, "vmirq_net_port_rx_frames_total{port=\"1\"}"),
        Some(1),
        "{text}"
    );
    let passes = value(&text, "vmirq_net_pmd_passes_total").expect("passes");
    let idle = value(&text, "vmirq_net_pmd_idle_passes_total").expect("idle passes");
    let busy = value(&text, "vmirq_net_pmd_busy_passes_total").expect("busy passes");
    assert!(busy >= 1 && passes == idle + busy, "{text}");
    for name in ["sleeps", "wakeups", "cpu_ns", "poll_misses"] {
        assert!(
            value(&text, &format!("vmirq_net_pmd_{name}_total")).is_some(),
            "{name}: {text}"
        );
    }
    // Port 1's receive queue (virtqueue 0) signalled the frame.
    assert!(
        value(
            &text,
            "vmirq_net_notifications_total{port=\"1\",queue=\"0\"}"
        )
        .is_some_and(|v| v >= 1),
        "{text}"
    );
    drop(s1);
    server.stop();
}

#[test]
fn every_queue_of_a_multiqueue_port_is_served_and_no_pmd_lines_without_pmd() {
    let port = free_port();
    let server = common::start(2, |c| {
        c.queue_pairs = 2;
        c.metrics = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    });
    // The endpoint is up once the server runs (bounded wait for its thread).
    let t = Instant::now();
    let text = loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break scrape(port);
        }
        assert!(t.elapsed() < Duration::from_secs(3), "no endpoint");
        std::thread::sleep(Duration::from_millis(5));
    };
    for p in 0..2 {
        for q in 0..4 {
            let series = format!("vmirq_net_kicks_total{{port=\"{p}\",queue=\"{q}\"}}");
            assert_eq!(value(&text, &series), Some(0), "{series}: {text}");
        }
    }
    assert!(
        !text.contains("queue=\"4\""),
        "the control queue has no counters"
    );
    assert!(!text.contains("vmirq_net_pmd_"), "{text}");
    server.stop();
}
