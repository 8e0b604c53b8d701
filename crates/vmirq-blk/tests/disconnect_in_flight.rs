//! A frontend that goes away with requests in flight on the asynchronous image backend
//! (io_uring): the server waits for storage while the worker threads that submitted it are
//! alive, so every operation in flight finishes instead of being cancelled by the kernel
//! (-ECANCELED / -EFAULT, what happened when the wait came after the workers exited); none is
//! completed; the connection is torn down; and the next frontend is served with every
//! acknowledged write intact. Its own test binary (it counts fds and threads).
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::{checksum, pattern, Running};
use std::time::{Duration, Instant};
use vmirq_blk::DiskSpec;

const BLOCK: usize = 4096;
const DEPTH: usize = 32;
/// Size of each request of the rounds that disconnect with requests in flight.
const BIG: usize = 64 << 10;
/// Requests in flight at the disconnects (over all rounds) the test wants to have seen.
const MIN_DROPPED: u64 = 32;

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

fn wait_torn_down(srv: &Running, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while (srv.handle.connections() < n || srv.handle.serving()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        !srv.handle.serving(),
        "connection {n} not torn down within 10 s"
    );
}

#[test]
fn frontends_leaving_with_requests_in_flight_do_not_hurt_the_next_one() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let path = dir.path().join("disk.img");
    // Sparse: O_DIRECT writes into holes need blocks allocated, which io_uring cannot do
    // without blocking, so it hands them (like every flush) to its io-wq threads: the
    // operations a thread's exit cancels.
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(16 << 20))
        .expect("image");
    // O_DIRECT keeps requests at the disk long enough to be in flight at the disconnect.
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .is_ok()
    };
    if !direct {
        eprintln!(
            "note: O_DIRECT unsupported in /var/tmp; buffered image (requests finish sooner)"
        );
    }
    let srv = Running::start(
        DiskSpec::Image {
            path: path.clone(),
            direct,
        },
        |o| o.moderation = "vic".parse().expect("spec"),
    );
    // Acknowledged writes that must survive.
    let mut c = Client::connect(&srv.socket, 1, DEPTH * BLOCK).expect("connect");
    for i in 0..DEPTH {
        pattern(7, i as u64, &mut c.buf()[i * BLOCK..(i + 1) * BLOCK]);
        c.write(0, (i * BLOCK) as u64, i * BLOCK, BLOCK, i);
    }
    assert_eq!(c.drain(0).len(), DEPTH);
    let expected = checksum(&c.buf()[..DEPTH * BLOCK]);
    drop(c);
    wait_torn_down(&srv, 1);
    let fds = fd_count();
    // Rounds of 64 KiB reads and writes (to blocks the check below does not read), submitted
    // and never reaped, until enough were in flight at a disconnect (bounded).
    let mut round = 0u64;
    while round < 10 || (srv.handle.dropped_in_flight().requests < MIN_DROPPED && round < 40) {
        let mut c = Client::connect(&srv.socket, 1, DEPTH * BIG).expect("reconnect");
        for i in 0..DEPTH {
            match i % 4 {
                0 => c.read(0, (i * BLOCK) as u64, i * BIG, BIG, i),
                3 => c.flush(0, i),
                _ => c.write(0, (4 * DEPTH * BLOCK + i * BIG) as u64, i * BIG, BIG, i),
            }
        }
        let _ = c.wait(0, 0);
        drop(c);
        round += 1;
        wait_torn_down(&srv, 1 + round);
    }
    let dropped = srv.handle.dropped_in_flight();
    if dropped.requests < MIN_DROPPED {
        common::skip(
            "frontends_leaving_with_requests_in_flight_do_not_hurt_the_next_one (in-flight part)",
            &format!("storage finished before the disconnects in {round} rounds: {dropped:?}"),
        );
    }
    assert_eq!(
        (dropped.failed, dropped.unfinished),
        (0, 0),
        "operations in flight at a disconnect failed or never finished: {dropped:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while fd_count() > fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        fd_count() <= fds,
        "fd leak: {fds} before, {} after",
        fd_count()
    );
    let mut c = Client::connect(&srv.socket, 1, DEPTH * BLOCK).expect("final connect");
    for i in 0..DEPTH {
        c.read(0, (i * BLOCK) as u64, i * BLOCK, BLOCK, i);
    }
    let done = c.drain(0);
    assert_eq!(done.len(), DEPTH);
    assert!(done.iter().all(|&(_, ret)| ret == 0), "{done:?}");
    assert_eq!(
        checksum(&c.buf()[..DEPTH * BLOCK]),
        expected,
        "acknowledged writes lost or overwritten"
    );
    drop(c);
    srv.stop();
}
