//! End-to-end: the in-process server driven by libblkio over a real vhost-user socket.
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::{checksum, pattern, Running};
use vmirq_blk::DiskSpec;

const BLOCK: usize = 4096;

/// Write `count` distinct blocks at queue depth `qd`, read them back, compare checksums.
/// Returns the client so callers can look at its counters.
fn write_read_verify(c: &mut Client, seed: u64, count: usize, qd: usize) {
    assert!(count % qd == 0 && qd * 2 * BLOCK <= c.buf().len());
    let blocks = c.capacity() / BLOCK as u64;
    let lba = |i: u64| (i.wrapping_mul(7919) + seed) % blocks * BLOCK as u64;
    let mut sums = Vec::with_capacity(count);
    for round in 0..count / qd {
        for k in 0..qd {
            let i = (round * qd + k) as u64;
            pattern(seed, i, &mut c.buf()[k * BLOCK..(k + 1) * BLOCK]);
            sums.push(checksum(&c.buf()[k * BLOCK..(k + 1) * BLOCK]));
            c.write(0, lba(i), k * BLOCK, BLOCK, k);
        }
        for (tag, ret) in c.drain(0) {
            assert_eq!(ret, 0, "write {tag} failed");
        }
    }
    for round in 0..count / qd {
        for k in 0..qd {
            let i = (round * qd + k) as u64;
            c.buf()[(qd + k) * BLOCK..(qd + k + 1) * BLOCK].fill(0xAA);
            c.read(0, lba(i), (qd + k) * BLOCK, BLOCK, k);
        }
        for (tag, ret) in c.drain(0) {
            assert_eq!(ret, 0, "read {tag} failed");
            let i = round * qd + tag;
            let got = checksum(&c.buf()[(qd + tag) * BLOCK..(qd + tag + 1) * BLOCK]);
            assert_eq!(got, sums[i], "block {i} read back wrong data");
        }
    }
}

#[test]
fn ram_disk_write_read_back_qd1_and_qd32() {
    let srv = Running::start(DiskSpec::Ram(64 << 20), |_| {});
    let mut c = Client::connect(&srv.socket, 1, 64 * BLOCK).expect("connect");
    assert_eq!(c.capacity(), 64 << 20);
    write_read_verify(&mut c, 1, 64, 1);
    write_read_verify(&mut c, 2, 256, 32);
    drop(c);
    srv.stop();
}

/// Every moderation policy the spec syntax knows, with small parameters.
const POLICIES: &[&str] = vmirq_blk::mock_guest::EVERY_MODERATION;

/// Backend notifications (call-eventfd writes) summed over queues.
fn backend_notifications(srv: &Running) -> u64 {
    srv.handle
        .counters()
        .iter()
        .map(|c| c.queue.notifications)
        .sum()
}

#[test]
fn every_moderation_policy_keeps_data_intact_and_counts_match_the_client() {
    for spec in POLICIES {
        let moderation = spec.parse().unwrap_or_else(|e| panic!("spec {spec}: {e}"));
        let srv = Running::start(DiskSpec::Ram(16 << 20), |o| o.moderation = moderation);
        let mut c = Client::connect(&srv.socket, 1, 64 * BLOCK).expect("connect");
        write_read_verify(&mut c, 11, 32, 1);
        write_read_verify(&mut c, 12, 256, 32);
        c.settle(20);
        let client_seen: u64 = c.notifications.iter().sum();
        drop(c);
        let backend = backend_notifications(&srv);
        let totals = srv.handle.counters()[0];
        srv.stop();
        // Requests: 32 + 32 (QD1) + 256 + 256 (QD32).
        assert_eq!(totals.device.requests, 576, "{spec}: request count");
        assert_eq!(totals.queue.errors, 0, "{spec}: errors");
        assert_eq!(
            client_seen, backend,
            "{spec}: client saw {client_seen} notifications, backend sent {backend}"
        );
        assert!(backend > 0, "{spec}: no notifications at all");
    }
}

#[test]
fn image_file_backend_write_read_back_and_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("disk.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(8 << 20))
        .expect("image");
    for spec in ["none", "vic"] {
        let moderation = spec.parse().expect("spec");
        let image = DiskSpec::Image {
            path: path.clone(),
            direct: false,
        };
        let srv = Running::start(image, |o| o.moderation = moderation);
        let mut c = Client::connect(&srv.socket, 1, 64 * BLOCK).expect("connect");
        assert_eq!(c.capacity(), 8 << 20);
        write_read_verify(&mut c, 21, 32, 1);
        write_read_verify(&mut c, 22, 128, 32);
        c.flush(0, 99);
        assert_eq!(c.drain(0), vec![(99, 0)], "flush");
        // DISCARD and WRITE_ZEROES on the file (punch hole / zero range), read back as zeroes.
        c.buf()[..4 * BLOCK].fill(0x3C);
        c.write(0, 0, 0, 4 * BLOCK, 1);
        assert_eq!(c.drain(0), vec![(1, 0)]);
        c.discard(0, 0, BLOCK as u64, 2);
        assert_eq!(c.drain(0), vec![(2, 0)]);
        c.write_zeroes(0, BLOCK as u64, BLOCK as u64, 3);
        assert_eq!(c.drain(0), vec![(3, 0)]);
        c.read(0, 0, 4 * BLOCK, 4 * BLOCK, 4);
        assert_eq!(c.drain(0), vec![(4, 0)]);
        let back = c.buf()[4 * BLOCK..8 * BLOCK].to_vec();
        assert!(
            back[..2 * BLOCK].iter().all(|&b| b == 0),
            "{spec}: discarded/zeroed file range"
        );
        assert!(
            back[2 * BLOCK..].iter().all(|&b| b == 0x3C),
            "{spec}: untouched file range"
        );
        drop(c);
        srv.stop();
    }
    // The data reached the file: block written by the last run is in the image.
    let data = std::fs::read(&path).expect("read image");
    assert!(data.iter().any(|&b| b != 0), "image is still all zeroes");
}

#[test]
fn discard_and_write_zeroes_read_back_as_zeroes() {
    let srv = Running::start(DiskSpec::Ram(4 << 20), |_| {});
    let mut c = Client::connect(&srv.socket, 1, 16 * BLOCK).expect("connect");
    c.buf()[..8 * BLOCK].fill(0x5A);
    c.write(0, 0, 0, 8 * BLOCK, 1);
    assert_eq!(c.drain(0), vec![(1, 0)]);
    c.discard(0, 0, 4 * BLOCK as u64, 2);
    c.write_zeroes(0, 4 * BLOCK as u64, 2 * BLOCK as u64, 3);
    let mut r = c.drain(0);
    r.sort_unstable();
    assert_eq!(r, vec![(2, 0), (3, 0)]);
    c.read(0, 0, 8 * BLOCK, 8 * BLOCK, 4);
    assert_eq!(c.drain(0), vec![(4, 0)]);
    let back = c.buf()[8 * BLOCK..16 * BLOCK].to_vec();
    assert!(
        back[..6 * BLOCK].iter().all(|&b| b == 0),
        "discarded/zeroed range not zero"
    );
    assert!(
        back[6 * BLOCK..].iter().all(|&b| b == 0x5A),
        "untouched range changed"
    );
    drop(c);
    srv.stop();
}

#[test]
fn read_only_disk_refuses_writes_and_serves_reads() {
    let srv = Running::start(DiskSpec::Ram(1 << 20), |o| o.read_only = true);
    // libblkio itself refuses a writable attach to a device that offers VIRTIO_BLK_F_RO; the
    // backend's own refusal of writes is covered by the mock-guest tests.
    assert!(
        Client::connect(&srv.socket, 1, 4 * BLOCK).is_err(),
        "writable attach to a read-only device"
    );
    let mut c = Client::connect_with(&srv.socket, 1, 4 * BLOCK, true).expect("connect");
    assert!(c.read_only(), "read-only not visible to the driver");
    c.read(0, 0, BLOCK, BLOCK, 2);
    assert_eq!(c.drain(0), vec![(2, 0)]);
    drop(c);
    srv.stop();
}

#[test]
fn three_queues_serve_with_one_two_or_three_worker_threads() {
    for threads in 1..=3 {
        let srv = Running::start(DiskSpec::Ram(4 << 20), |o| {
            o.queues = 3;
            o.threads = Some(threads);
        });
        let mut c = Client::connect(&srv.socket, 3, 8 * BLOCK).expect("connect");
        for q in 0..3 {
            let byte = 0x70 + u8::try_from(q).expect("small");
            c.buf()[..BLOCK].fill(byte);
            c.write(q, (q * BLOCK) as u64, 0, BLOCK, q);
            assert_eq!(
                c.drain(q),
                vec![(q, 0)],
                "threads={threads} queue {q} write"
            );
        }
        for q in 0..3 {
            // Read queue q's block through the next queue.
            let via = (q + 1) % 3;
            c.read(via, (q * BLOCK) as u64, BLOCK, BLOCK, 10 + q);
            assert_eq!(
                c.drain(via),
                vec![(10 + q, 0)],
                "threads={threads} queue {via} read"
            );
            assert!(c.buf()[BLOCK..2 * BLOCK]
                .iter()
                .all(|&b| b == 0x70 + u8::try_from(q).expect("small")));
        }
        drop(c);
        let per_queue: Vec<u64> = srv
            .handle
            .counters()
            .iter()
            .map(|c| c.device.requests)
            .collect();
        srv.stop();
        assert_eq!(
            per_queue,
            vec![2, 2, 2],
            "threads={threads}: requests per queue"
        );
    }
}

#[test]
fn malformed_vhost_user_message_closes_only_that_connection() {
    use std::io::{Read, Write};
    let srv = Running::start(DiskSpec::Ram(1 << 20), |_| {});
    // A header claiming request 0xFFFF with a payload size beyond the protocol limit.
    let mut s = connect_raw(&srv.socket);
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut msg = Vec::new();
    msg.extend_from_slice(&0xFFFFu32.to_le_bytes()); // request
    msg.extend_from_slice(&1u32.to_le_bytes()); // flags: version 1
    msg.extend_from_slice(&0x10_0000u32.to_le_bytes()); // size
    msg.extend_from_slice(&[0xAB; 64]);
    let _ = s.write_all(&msg);
    // The server ends the connection (EOF or reset), it does not hang or crash.
    let mut buf = [0u8; 256];
    let mut ended = false;
    for _ in 0..16 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => {
                ended = true;
                break;
            }
            Ok(_) => {} // an error reply
        }
    }
    assert!(ended, "server kept the malformed connection open");
    drop(s);
    // The next frontend is served normally.
    let mut c = Client::connect(&srv.socket, 1, 4 * BLOCK).expect("connect after malformed peer");
    c.read(0, 0, 0, BLOCK, 1);
    assert_eq!(c.drain(0), vec![(1, 0)]);
    drop(c);
    srv.stop();
}

#[test]
fn metrics_endpoint_serves_prometheus_counters() {
    use std::io::{Read, Write};
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
        l.local_addr().expect("addr").port()
    };
    let srv = Running::start(DiskSpec::Ram(1 << 20), |o| {
        o.metrics = Some(port.to_string())
    });
    let mut c = Client::connect(&srv.socket, 1, 4 * BLOCK).expect("connect");
    for i in 0..5 {
        c.read(0, 0, 0, BLOCK, i);
        c.drain(0);
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    assert!(
        text.contains("vmirq_blk_requests_total{queue=\"0\"} 5\n"),
        "{text}"
    );
    assert!(
        text.contains("vmirq_blk_read_bytes_total{queue=\"0\"} 20480\n"),
        "{text}"
    );
    drop(c);
    srv.stop();
}

/// QD 1 reads; returns the server's counters. `None`: the server's default wait policy.
fn qd1_reads(poll: Option<&str>, n: usize) -> vmirq_blk::counters::CounterSnapshot {
    let poll = poll.map(|p| p.parse().expect("spec"));
    let srv = Running::start(DiskSpec::Ram(1 << 20), |o| {
        if let Some(p) = poll {
            o.poll = p;
        }
    });
    let mut c = Client::connect(&srv.socket, 1, 4 * BLOCK).expect("connect");
    for i in 0..n {
        c.read(0, 0, 0, BLOCK, i);
        assert_eq!(c.drain(0), vec![(i, 0)]);
    }
    drop(c);
    let q = srv.handle.counters()[0];
    srv.stop();
    assert_eq!(q.device.requests, n as u64);
    q
}

#[test]
fn adaptive_poll_runs_by_default_and_not_with_never() {
    let never = qd1_reads(Some("never"), 1000);
    let kvm = qd1_reads(Some("kvm:max_ns=200000"), 1000);
    let default = qd1_reads(None, 1000);
    let polls = |c: &vmirq_blk::counters::CounterSnapshot| {
        // Polls that ran, plus those the contention gate refused (other tests share the CPUs).
        c.queue.poll_hits + c.queue.poll_misses + c.queue.poll_contended
    };
    assert_eq!(polls(&never), 0, "`never` polled: {never:?}");
    assert!(polls(&kvm) > 0, "kvm policy never polled: {kvm:?}");
    assert!(polls(&default) > 0, "the default never polled: {default:?}");
}

#[test]
fn once_returns_after_the_first_frontend_disconnects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("once.sock");
    let mut opts = vmirq_blk::ServerOptions::new(&socket, DiskSpec::Null(1 << 20));
    opts.once = true;
    let server = vmirq_blk::Server::new(opts.validate().expect("options")).expect("server");
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || tx.send(server.run().is_ok()));
    for _ in 0..500 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let mut c = Client::connect(&socket, 1, 2 * BLOCK).expect("connect");
    c.buf()[..BLOCK].fill(9);
    c.read(0, 0, 0, BLOCK, 1);
    assert_eq!(c.drain(0), vec![(1, 0)]);
    assert!(
        c.buf()[..BLOCK].iter().all(|&b| b == 0),
        "null disk read returned data"
    );
    drop(c);
    let ok = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("server did not exit after the disconnect");
    assert!(ok);
    t.join().expect("server thread").expect("result sent");
}

/// Connect a raw unix stream, retrying while the server is between bind() and listen().
fn connect_raw(path: &std::path::Path) -> std::os::unix::net::UnixStream {
    for _ in 0..200 {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(s) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("raw connect: {e}"),
        }
    }
    panic!("server never listened");
}

/// With a poll policy and steady QD 32 load the engine yields to the event loop every
/// `MAX_BATCHES_PER_EVENT` batches through its timer. A `Hold` decided on that timer event
/// used to be left unarmed, and DIM / SPDK left completions unannounced (found with the
/// release build and `examples/blk_load`: the client hung). This debug-build test did not
/// reproduce that bug (the engine is too slow here to chain 64 poll hits); it checks the
/// no-hang property for the holding policies under polling.
#[test]
fn holding_policies_with_polling_never_lose_a_notification() {
    for spec in [
        "dim",
        "spdk",
        "count:usecs=50,frames=16",
        "budget:us=20",
        "vic",
    ] {
        let moderation = spec.parse().expect("spec");
        let poll = "kvm:max_ns=200000".parse().expect("poll spec");
        let srv = Running::start(DiskSpec::Null(64 << 20), |o| {
            o.moderation = moderation;
            o.poll = poll;
        });
        let mut c = Client::connect(&srv.socket, 1, 32 * BLOCK).expect("connect");
        let blocks = c.capacity() / BLOCK as u64;
        for k in 0..32 {
            c.read(0, (k as u64 % blocks) * BLOCK as u64, k * BLOCK, BLOCK, k);
        }
        // Keep 32 in flight for 3000 completions; Client::wait fails after 10 s of silence.
        let mut done = 0u64;
        while done < 3000 {
            for (tag, ret) in c.wait(0, 1) {
                assert_eq!(ret, 0, "{spec}: read failed");
                done += 1;
                c.read(
                    0,
                    ((done * 7) % blocks) * BLOCK as u64,
                    tag * BLOCK,
                    BLOCK,
                    tag,
                );
            }
        }
        c.drain(0);
        drop(c);
        srv.stop();
    }
}

#[test]
fn image_with_o_direct_round_trips_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("direct.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(4 << 20))
        .expect("image");
    // O_DIRECT needs filesystem support (tmpfs has none): say so visibly instead of failing.
    let probe = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
    };
    if let Err(e) = probe {
        common::skip(
            "image_with_o_direct_round_trips_data",
            &format!("O_DIRECT unsupported here ({e})"),
        );
        return;
    }
    let srv = Running::start(DiskSpec::Image { path, direct: true }, |_| {});
    let mut c = Client::connect(&srv.socket, 1, 64 * BLOCK).expect("connect");
    write_read_verify(&mut c, 31, 64, 16);
    c.flush(0, 5);
    assert_eq!(c.drain(0), vec![(5, 0)]);
    drop(c);
    srv.stop();
}
