//! The queue engine's own cost per request, without vhost-user, sockets or wakeups: a mock
//! guest submits batches of 4 KiB reads (header, one data buffer, status) to a null or RAM
//! disk, kicks, and reaps the used ring. Run under `valgrind --tool=callgrind` (see
//! `scripts/blk-engine-cost.sh`) to count instructions per request, a number that does not
//! move with machine noise.
//!
//! `engine_cost BATCHES [BATCH] [null|ram] [MODERATION]`; 0 batches measures setup only.

use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, TestDevice};
use vmirq_blk::storage::{Disk, NullDisk, RamDisk};
use vmirq_blk::virtio::req;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_owned());
    let batches: u64 = arg(1, "1000").parse().expect("BATCHES");
    let batch: u16 = arg(2, "32").parse().expect("BATCH");
    let disk_kind = arg(3, "null");
    let opts = DeviceOpts {
        queue_size: 256,
        event_idx: true,
        disk_bytes: 64 << 20,
        moderation: arg(4, "none").parse().expect("moderation spec"),
        ..DeviceOpts::default()
    };
    let io = match disk_kind.as_str() {
        "null" => NullDisk::new(opts.disk_bytes)
            .expect("null")
            .open_queue(256),
        "ram" => RamDisk::new(opts.disk_bytes).expect("ram").open_queue(256),
        other => panic!("unknown disk {other}: null or ram"),
    }
    .expect("queue io");
    let mut d = TestDevice::with_io(opts, io);
    let mut completed = 0u64;
    for b in 0..batches {
        for i in 0..batch {
            let sector = (b * u64::from(batch) + u64::from(i)) % 100_000 * 8;
            let _ = d.guest.submit(req::IN, sector, &[4096], true);
        }
        d.kick();
        completed += d.guest.take_used().len() as u64;
        d.guest.set_used_event(d.guest.used_seen());
    }
    assert_eq!(completed, batches * u64::from(batch), "requests lost");
    println!("{completed} requests");
}
