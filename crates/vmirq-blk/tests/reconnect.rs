//! Reconnects: the server serves frontend after frontend on the same socket without leaking
//! descriptors or threads. Its own test binary, so no other test's threads or fds run in the
//! process while it counts them.
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::Running;
use vmirq_blk::DiskSpec;

const BLOCK: usize = 4096;

/// Open file descriptors of this process.
fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Threads of this process.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The tests of this binary count the process's descriptors and threads: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn survives_ten_reconnects_without_leaking_fds_or_threads() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let srv = Running::start(DiskSpec::Ram(4 << 20), |o| o.queues = 2);
    let mut c = Client::connect(&srv.socket, 2, 8 * BLOCK).expect("connect");
    c.buf()[..BLOCK].fill(0x77);
    c.write(0, 0, 0, BLOCK, 1);
    assert_eq!(c.drain(0), vec![(1, 0)]);
    drop(c);
    wait_for_connections(&srv, 1);
    let (fds, threads) = (fd_count(), thread_count());
    for i in 0..10 {
        let mut c = Client::connect(&srv.socket, 2, 8 * BLOCK).expect("reconnect");
        c.read(1, 0, BLOCK, BLOCK, i);
        assert_eq!(c.drain(1), vec![(i, 0)]);
        drop(c);
        wait_for_connections(&srv, 2 + i as u64);
    }
    let mut c = Client::connect(&srv.socket, 2, 8 * BLOCK).expect("final connect");
    c.read(0, 0, BLOCK, BLOCK, 7);
    assert_eq!(c.drain(0), vec![(7, 0)]);
    assert!(
        c.buf()[BLOCK..2 * BLOCK].iter().all(|&b| b == 0x77),
        "data lost across reconnects"
    );
    drop(c);
    wait_for_connections(&srv, 12);
    assert_no_leak(fds, threads);
    srv.stop();
}

/// Fds and threads are back to at most `fds` and `threads`, given the server up to 5 s to
/// finish tearing down the last connection.
fn assert_no_leak(fds: usize, threads: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while (fd_count() > fds || thread_count() > threads) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        fd_count() <= fds,
        "fd leak: {} before, {} after",
        fds,
        fd_count()
    );
    assert!(
        thread_count() <= threads,
        "thread leak: {} before, {} after",
        threads,
        thread_count()
    );
}

/// Wait until the server has accepted `n` connections and the last one is torn down.
fn wait_for_connections(srv: &Running, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while (srv.handle.connections() < n || srv.handle.serving())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        !srv.handle.serving(),
        "connection {n} not torn down within 5 s"
    );
}

/// Hostile frontends whose messages are refused with descriptors attached (memory past the
/// end of its file, two fds on SET_VRING_CALL, an fd on GET_FEATURES) leave no descriptor or
/// thread behind, and the server keeps serving.
#[test]
fn refused_messages_with_descriptors_leak_nothing() {
    use std::os::fd::AsRawFd;
    use vmirq_blk::raw_frontend::{mem_table, memfd, req, Session, FLAG_NEED_REPLY, VERSION_1};
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let srv = Running::start(DiskSpec::Ram(4 << 20), |o| o.queues = 2);
    let mut c = Client::connect(&srv.socket, 2, 2 * BLOCK).expect("connect");
    c.read(0, 0, 0, BLOCK, 1);
    assert_eq!(c.drain(0), vec![(1, 0)]);
    drop(c);
    wait_for_connections(&srv, 1);
    let (fds, threads) = (fd_count(), thread_count());
    for i in 0..10u64 {
        let s = Session::start(&srv.socket, 2, 64).expect("session");
        let small = memfd(4096).expect("memfd");
        let (fd_a, fd_b) = (s.queues[0].call.as_raw_fd(), s.queues[1].call.as_raw_fd());
        let flags = VERSION_1 | FLAG_NEED_REPLY;
        let _ = match i % 3 {
            0 => s.fe.send(
                req::SET_MEM_TABLE,
                flags,
                &mem_table(1, &[(0, 1 << 20, 1 << 40, 0)]),
                &[small.as_raw_fd()],
            ),
            1 => s.fe.send(
                req::SET_VRING_CALL,
                flags,
                &0u64.to_le_bytes(),
                &[fd_a, fd_b],
            ),
            _ => s.fe.send(req::GET_FEATURES, flags, &[], &[fd_a]),
        };
        assert!(
            s.fe.closed_within(std::time::Duration::from_secs(5)),
            "refused connection {i} not closed"
        );
        drop(s);
        wait_for_connections(&srv, 2 + i);
    }
    let mut c = Client::connect(&srv.socket, 2, 2 * BLOCK).expect("final connect");
    c.read(1, 0, 0, BLOCK, 2);
    assert_eq!(c.drain(1), vec![(2, 0)]);
    drop(c);
    wait_for_connections(&srv, 12);
    assert_no_leak(fds, threads);
    srv.stop();
}
