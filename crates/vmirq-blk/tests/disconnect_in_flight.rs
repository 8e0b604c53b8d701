//! A frontend that goes away with requests in flight on the asynchronous image backend: the
//! server waits for storage, tears the connection down, and serves the next frontend with
//! every acknowledged write intact. Its own test binary (it counts fds and threads).
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::{checksum, pattern, Running};
use std::time::{Duration, Instant};
use vmirq_blk::DiskSpec;

const BLOCK: usize = 4096;
const DEPTH: usize = 32;

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
    std::fs::write(&path, vec![0u8; 8 << 20]).expect("image");
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
    for round in 0..5u64 {
        let mut c = Client::connect(&srv.socket, 1, DEPTH * BLOCK).expect("reconnect");
        // Reads and writes (to blocks the check below does not read) submitted, never reaped.
        for i in 0..DEPTH {
            if i % 2 == 0 {
                c.read(0, (i * BLOCK) as u64, i * BLOCK, BLOCK, i);
            } else {
                c.write(0, ((DEPTH + i) * BLOCK) as u64, i * BLOCK, BLOCK, i);
            }
        }
        let _ = c.wait(0, 0);
        drop(c);
        wait_torn_down(&srv, 2 + round);
    }
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
