//! The queue engine with storage that completes asynchronously (the io_uring image backend's
//! behaviour, made deterministic with `ManualIo`): requests stay in flight across events,
//! complete in storage's order, never exceed the storage context's capacity, fail with
//! IOERR, and moderation sees the real number of commands in flight.
#![allow(missing_docs)]

use std::time::Duration;
use vmirq_blk::clock::now_ns;
use vmirq_blk::manual_io::{manual_io, ManualIoHandle};
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, Submitted, TestDevice};
use vmirq_blk::virtio::{req, status};

const SECTOR: u32 = 512;

fn device(capacity: usize, opts: DeviceOpts) -> (TestDevice, ManualIoHandle) {
    let (io, handle) = manual_io(capacity, opts.disk_bytes);
    (TestDevice::with_io(opts, Box::new(io)), handle)
}

fn reads(d: &mut TestDevice, n: u64) -> Vec<Submitted> {
    (0..n)
        .map(|i| d.guest.submit(req::IN, i, &[SECTOR], true))
        .collect()
}

#[test]
fn requests_stay_in_flight_until_storage_finishes_them() {
    let (mut d, io) = device(8, DeviceOpts::default());
    let subs = reads(&mut d, 3);
    d.kick();
    assert_eq!(d.engine.in_flight(), 3);
    assert_eq!(io.started(), 3);
    assert!(
        d.guest.take_used().is_empty(),
        "completed before storage finished"
    );
    assert_eq!(io.finish(2), 2);
    d.io_ready();
    let used = d.guest.take_used();
    assert_eq!(
        used.iter().map(|u| u.0).collect::<Vec<_>>(),
        vec![u32::from(subs[0].head), u32::from(subs[1].head)]
    );
    assert!(used.iter().all(|u| u.1 == SECTOR + 1));
    assert_eq!(d.engine.in_flight(), 1);
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(d.guest.take_used().len(), 1);
    assert_eq!(d.engine.in_flight(), 0);
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
    assert_eq!(d.counters.snapshot().device.requests, 3);
}

#[test]
fn chains_wait_in_the_ring_while_every_tag_is_in_flight() {
    let (mut d, io) = device(2, DeviceOpts::default());
    let subs = reads(&mut d, 5);
    d.kick();
    assert_eq!((d.engine.in_flight(), io.started()), (2, 2));
    let mut used = 0;
    for _ in 0..10 {
        if used == 5 {
            break;
        }
        let _ = io.finish(1);
        d.io_ready();
        used += d.guest.take_used().len();
        assert!(io.started() <= 2, "more than the capacity in flight");
    }
    assert_eq!(
        used, 5,
        "stalled chains were not picked up when tags came back"
    );
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
}

#[test]
fn data_written_then_read_back_through_async_storage() {
    let (mut d, io) = device(4, DeviceOpts::default());
    let w = d.guest.submit(req::OUT, 8, &[SECTOR], false);
    d.guest.fill(&w.data[0], 0x5a);
    d.kick();
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(d.guest.status(&w), status::OK);
    let r = d.guest.submit(req::IN, 8, &[SECTOR], true);
    d.kick();
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(d.guest.status(&r), status::OK);
    assert!(d.guest.read(&r.data[0]).iter().all(|&b| b == 0x5a));
}

#[test]
fn failed_storage_operation_completes_with_ioerr_and_no_data_length() {
    let (mut d, io) = device(4, DeviceOpts::default());
    let subs = reads(&mut d, 2);
    d.kick();
    assert_eq!(io.fail(1), 1);
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    let used = d.guest.take_used();
    assert_eq!(used.len(), 2);
    assert_eq!(d.guest.status(&subs[0]), status::IOERR);
    assert_eq!(d.guest.status(&subs[1]), status::OK);
    let len_of = |head: u16| used.iter().find(|u| u.0 == u32::from(head)).map(|u| u.1);
    assert_eq!(
        len_of(subs[0].head),
        Some(1),
        "failed read reported data bytes"
    );
    assert_eq!(len_of(subs[1].head), Some(SECTOR + 1));
    assert_eq!(d.counters.snapshot().queue.errors, 1);
}

#[test]
fn reset_waits_for_storage_in_flight_then_serves_again() {
    let (mut d, io) = device(4, DeviceOpts::default());
    let _ = reads(&mut d, 3);
    d.kick();
    assert_eq!(d.engine.in_flight(), 3);
    d.engine.reset();
    assert_eq!(io.waits(), 1, "reset did not wait for storage");
    assert_eq!((d.engine.in_flight(), io.started()), (0, 0));
    // Every tag is usable again.
    let subs = reads(&mut d, 4);
    d.kick();
    assert_eq!(d.engine.in_flight(), 4);
    assert_eq!(io.finish(4), 4);
    d.io_ready();
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
}

#[test]
fn dropping_the_engine_waits_for_storage_in_flight() {
    let (mut d, io) = device(4, DeviceOpts::default());
    let _ = reads(&mut d, 2);
    d.kick();
    drop(d);
    assert_eq!(io.waits(), 1);
    assert_eq!(io.started(), 0);
}

/// With storage in flight, vIC sees commands in flight (CIF) well above `cif_low` while the
/// completions trickle in, and coalesces them; the hold timer still announces every one.
#[test]
fn vic_coalesces_when_many_commands_are_in_flight() {
    let opts = DeviceOpts {
        moderation: "vic".parse().expect("spec"),
        queue_size: 128, // 32 requests of 3 descriptors each
        ..DeviceOpts::default()
    };
    let (mut d, io) = device(32, opts);
    // One round to pass vIC's trickle gate (an epoch of 10 ms with enough completions)...
    let round = |d: &mut TestDevice| {
        let before = d.signals();
        let _ = reads(d, 32);
        d.kick();
        assert_eq!(d.engine.in_flight(), 32);
        for _ in 0..32 {
            assert_eq!(io.finish(1), 1);
            d.io_ready();
        }
        let during = d.signals() - before;
        // Whatever is still held goes out when the timer fires.
        for _ in 0..1000 {
            let Some(deadline) = d.engine.timer_deadline() else {
                break;
            };
            std::thread::sleep(Duration::from_nanos(deadline.saturating_sub(now_ns())));
            d.timer();
        }
        assert_eq!(d.engine.held(), 0, "a completion was left unannounced");
        assert_eq!(d.guest.take_used().len(), 32);
        during
    };
    let _ = round(&mut d);
    std::thread::sleep(Duration::from_millis(11));
    // ...then completions one by one at CIF 31, 30, ... are coalesced.
    let coalesced = round(&mut d);
    assert!(
        coalesced < 16,
        "vIC sent {coalesced} signals for 32 completions at CIF up to 31"
    );
}

/// Without moderation every completion that finishes alone is signalled (EVENT_IDX off).
#[test]
fn none_signals_each_asynchronous_completion() {
    let (mut d, io) = device(8, DeviceOpts::default());
    let _ = reads(&mut d, 4);
    d.kick();
    for i in 1..=4 {
        assert_eq!(io.finish(1), 1);
        d.io_ready();
        assert_eq!(d.signals(), i);
    }
}

/// A queue broken by the guest (a head index outside the descriptor table) completes
/// nothing more, but still reaps storage, so the completion fd does not stay readable and
/// keep the worker spinning.
#[test]
fn a_broken_queue_still_reaps_storage_without_completing() {
    let (mut d, io) = device(4, DeviceOpts::default());
    let _ = reads(&mut d, 1);
    d.guest.publish(1000);
    d.kick();
    assert!(
        d.engine.is_broken(),
        "a head outside the table did not break the queue"
    );
    assert_eq!(d.engine.in_flight(), 1);
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(
        d.engine.in_flight(),
        0,
        "storage of a broken queue was not reaped"
    );
    assert!(
        d.guest.take_used().is_empty(),
        "a broken queue completed a request"
    );
}

/// GET_VRING_BASE (the VM stops or migrates): every request in flight finishes and is in the
/// used ring, and signalled even if the policy was holding it, before the ring position is
/// reported.
#[test]
fn stopping_the_ring_completes_and_signals_everything_in_flight() {
    let opts = DeviceOpts {
        moderation: "count:usecs=1000000,frames=64".parse().expect("spec"),
        ..DeviceOpts::default()
    };
    let (mut d, io) = device(8, opts);
    let subs = reads(&mut d, 3);
    d.kick();
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(
        d.signals(),
        0,
        "count policy should hold the first completion"
    );
    d.stop();
    assert_eq!(io.waits(), 1, "stop did not wait for storage");
    assert_eq!(d.engine.in_flight(), 0);
    assert_eq!(d.guest.take_used().len(), 3);
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
    assert_eq!(d.signals(), 1, "held completions not signalled at stop");
    assert_eq!(
        d.engine.timer_deadline(),
        None,
        "hold timer left armed on a stopped ring"
    );
}

/// A completion the policy held before the stop, with nothing in flight at the stop, is still
/// signalled when the ring stops.
#[test]
fn stopping_the_ring_signals_completions_held_earlier() {
    let opts = DeviceOpts {
        moderation: "count:usecs=1000000,frames=64".parse().expect("spec"),
        ..DeviceOpts::default()
    };
    let (mut d, io) = device(8, opts);
    let _ = reads(&mut d, 1);
    d.kick();
    assert_eq!(io.finish(1), 1);
    d.io_ready();
    assert_eq!(d.guest.take_used().len(), 1);
    assert_eq!(
        (d.signals(), d.engine.held()),
        (0, 1),
        "count should hold it"
    );
    d.stop();
    assert_eq!(d.signals(), 1, "held completion not signalled at stop");
}
