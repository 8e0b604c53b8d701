//! VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD over the socket, against the in-process server: the
//! feature is offered, GET/SET_INFLIGHT_FD follow the spec, malformed or hostile inflight
//! messages end only their own connection, and a frontend that keeps its area across
//! reconnects (clean or not) keeps its data. The SIGKILL restart is in the `vmirq` crate's
//! tests (it needs the `vmirq serve` process).
#![allow(missing_docs)]

mod common;

use common::{pattern, Running};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;
use vhost::vhost_user::message::{FrontendReq, VhostUserInflight, VhostUserProtocolFeatures};
use vm_memory::ByteValued;
use vmirq_blk::guard::wire::{self, Message, WireError, FLAG_NEED_REPLY, VERSION_1};
use vmirq_blk::inflight::area;
use vmirq_blk::raw_frontend::RawFrontend;
use vmirq_blk::vhost_frontend::{FrontendConfig, RingBase, VhostFrontend};
use vmirq_blk::virtio::{req, status};
use vmirq_blk::DiskSpec;

const BLOCK: usize = 4096;
const BLOCK_U32: u32 = 4096;
const T: Duration = Duration::from_secs(10);

fn frontend(queues: u16) -> VhostFrontend {
    VhostFrontend::new(FrontendConfig {
        queues,
        queue_size: 64,
        max_request_bytes: BLOCK_U32,
        event_idx: true,
    })
    .expect("frontend")
}

/// Write `n` patterned blocks starting at block `first` on queue `q` and wait for them.
fn write_blocks(f: &mut VhostFrontend, q: usize, first: u64, n: u64, seed: u64) {
    let mut buf = vec![0u8; BLOCK];
    run_blocks(
        f,
        q,
        first,
        n,
        |f, i| {
            pattern(seed, i, &mut buf);
            f.submit(q, req::OUT, i * 8, &buf, BLOCK_U32)
        },
        |_, c| assert!(c.status == status::OK && !c.unexpected, "{c:?}"),
    );
}

/// Read blocks back and compare with the pattern.
fn check_blocks(f: &mut VhostFrontend, q: usize, first: u64, n: u64, seed: u64) {
    let mut want = vec![0u8; BLOCK];
    run_blocks(
        f,
        q,
        first,
        n,
        |f, i| f.submit(q, req::IN, i * 8, &[], BLOCK_U32),
        |i, c| {
            assert!(!c.unexpected && c.status == status::OK, "{c:?}");
            pattern(seed, i, &mut want);
            assert!(c.data == want, "block {i} differs");
        },
    );
}

/// Submit one request per block (as many at a time as there are free slots) and hand each
/// completion with its block to `check`.
fn run_blocks(
    f: &mut VhostFrontend,
    q: usize,
    first: u64,
    n: u64,
    mut submit: impl FnMut(&mut VhostFrontend, u64) -> Option<u16>,
    mut check: impl FnMut(u64, &vmirq_blk::vhost_frontend::Completion),
) {
    let mut next = first;
    let mut heads = std::collections::HashMap::new();
    while next < first + n || !heads.is_empty() {
        while next < first + n && f.free_slots(q) > 0 {
            let h = submit(f, next).expect("free slot");
            heads.insert(h, next);
            next += 1;
        }
        f.kick(q).expect("kick");
        for c in f.wait(q, T).expect("completions") {
            let i = heads.remove(&c.head).expect("a head in flight");
            check(i, &c);
        }
    }
}

#[test]
fn inflight_area_is_kept_across_clean_and_unclean_reconnects() {
    let srv = Running::start(DiskSpec::Ram(4 << 20), |o| o.queues = 2);
    let mut f = frontend(2);
    f.connect(&srv.socket, RingBase::UsedIdx, T)
        .expect("connect");
    write_blocks(&mut f, 0, 0, 16, 1);
    write_blocks(&mut f, 1, 16, 16, 1);
    for q in 0..2 {
        assert!(f.inflight_marked(q).is_empty(), "marks after completion");
        let (version, desc_num, _, used_idx) = f.inflight_log(q).expect("log").header();
        assert_eq!((version, desc_num, used_idx), (1, 64, 16));
    }
    // Clean: the rings are stopped, and restarted where the backend said.
    let bases = f.stop().expect("stop");
    assert_eq!(bases, vec![16, 16]);
    f.connect(&srv.socket, RingBase::Reported, T)
        .expect("reconnect");
    check_blocks(&mut f, 0, 0, 32, 1);
    write_blocks(&mut f, 1, 32, 8, 2);
    // Unclean: the socket just closes; the ring restarts from the used index, as QEMU does.
    f.drop_connection();
    f.connect(&srv.socket, RingBase::UsedIdx, T)
        .expect("reconnect");
    check_blocks(&mut f, 1, 0, 32, 1);
    check_blocks(&mut f, 0, 32, 8, 2);
    f.drop_connection();
    srv.stop();
}

/// A raw vhost-user connection for hostile messages (replies read with their descriptors).
struct Raw(RawFrontend);

/// Why no reply came.
#[derive(Debug)]
enum NoReply {
    Closed,
    Wire(WireError),
}

impl Raw {
    fn connect(path: &Path) -> Self {
        let raw = RawFrontend::connect(path).expect("connect");
        raw.stream().set_read_timeout(Some(T)).expect("timeout");
        Self(raw)
    }
    fn send(&self, request: FrontendReq, flags: u32, payload: &[u8], files: Vec<File>) {
        let fds: Vec<_> = files.iter().map(AsRawFd::as_raw_fd).collect();
        self.0
            .send(request as u32, VERSION_1 | flags, payload, &fds)
            .expect("send");
    }
    fn ask(&self, request: FrontendReq, payload: &[u8]) -> Message {
        self.send(request, 0, payload, vec![]);
        self.recv().expect("reply")
    }
    fn recv(&self) -> Result<Message, NoReply> {
        match wire::read_message(self.0.stream()) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(NoReply::Closed),
            Err(e) => Err(NoReply::Wire(e)),
        }
    }
    /// SET_OWNER, features, and the protocol features `protocol`.
    fn handshake(&self, protocol: VhostUserProtocolFeatures) -> u64 {
        self.send(FrontendReq::SET_OWNER, 0, &[], vec![]);
        let features = self.ask(FrontendReq::GET_FEATURES, &[]).u64_at(0);
        self.send(
            FrontendReq::SET_FEATURES,
            0,
            &features.to_ne_bytes(),
            vec![],
        );
        let offered = self.ask(FrontendReq::GET_PROTOCOL_FEATURES, &[]).u64_at(0);
        self.send(
            FrontendReq::SET_PROTOCOL_FEATURES,
            0,
            &protocol.bits().to_ne_bytes(),
            vec![],
        );
        offered
    }
    /// The server closed this connection (EOF, not a timeout).
    fn closed(&self) -> bool {
        matches!(
            self.recv(),
            Err(NoReply::Closed | NoReply::Wire(WireError::Truncated { .. }))
        )
    }
    /// The connection still answers.
    fn alive(&self) -> bool {
        self.ask(FrontendReq::GET_QUEUE_NUM, &[]).u64_at(0) == 1
    }
}

fn inflight_msg(mmap_size: u64, mmap_offset: u64, num_queues: u16, queue_size: u16) -> Vec<u8> {
    VhostUserInflight::new(mmap_size, mmap_offset, num_queues, queue_size)
        .as_slice()
        .to_vec()
}

fn with_inflight() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::INFLIGHT_SHMFD
}

/// After a hostile connection: a fresh one does verified I/O.
fn assert_serves(srv: &Running, seed: u64) {
    let mut f = frontend(1);
    f.connect(&srv.socket, RingBase::UsedIdx, T)
        .expect("connect");
    write_blocks(&mut f, 0, 0, 4, seed);
    check_blocks(&mut f, 0, 0, 4, seed);
    f.drop_connection();
}

#[test]
fn get_inflight_fd_is_offered_checked_and_answered_per_spec() {
    let srv = Running::start(DiskSpec::Ram(1 << 20), |_| {});
    let raw = Raw::connect(&srv.socket);
    let offered = raw.handshake(with_inflight());
    assert!(offered & VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits() != 0);
    // The area for one queue of 128 entries: a sealed memfd of the spec's layout.
    let reply = raw.ask(FrontendReq::GET_INFLIGHT_FD, &inflight_msg(0, 0, 1, 128));
    assert_eq!(reply.flags & 0x4, 0x4, "reply flag");
    assert_eq!(reply.files.len(), 1);
    let got = VhostUserInflight::from_slice(&reply.payload)
        .copied()
        .expect("payload");
    let (size, offset) = (got.mmap_size, got.mmap_offset);
    assert_eq!((size, offset), (area::queue_stride(128) as u64, 0));
    assert_eq!(reply.files[0].metadata().expect("stat").len(), size);
    // Geometry this device does not serve: mmap_size 0 and no fd, connection kept.
    for (nq, qs) in [(2u16, 128u16), (1, 0), (1, 4096), (0, 64)] {
        let reply = raw.ask(FrontendReq::GET_INFLIGHT_FD, &inflight_msg(0, 0, nq, qs));
        let got = VhostUserInflight::from_slice(&reply.payload)
            .copied()
            .expect("payload");
        let size = got.mmap_size;
        assert_eq!((size, reply.files.len()), (0, 0), "{nq} queues of {qs}");
    }
    assert!(raw.alive());
    // A truncated body ends the connection.
    raw.send(FrontendReq::GET_INFLIGHT_FD, 0, &[0u8; 8], vec![]);
    assert!(raw.closed());
    // Without negotiating the feature, GET_INFLIGHT_FD ends the connection.
    let raw = Raw::connect(&srv.socket);
    raw.handshake(VhostUserProtocolFeatures::MQ);
    raw.send(
        FrontendReq::GET_INFLIGHT_FD,
        0,
        &inflight_msg(0, 0, 1, 64),
        vec![],
    );
    assert!(raw.closed());
    assert_serves(&srv, 3);
    srv.stop();
}

#[test]
fn set_inflight_fd_refuses_hostile_areas_and_ends_only_that_connection() {
    let srv = Running::start(DiskSpec::Ram(1 << 20), |_| {});
    let (good, len) = area::create(1, 64).expect("memfd");
    let unsealed = {
        let f = tempfile::tempfile().expect("tempfile");
        f.set_len(1 << 20).expect("len");
        f
    };
    let dup = |f: &File| f.try_clone().expect("dup");
    let cases: Vec<(&str, Vec<u8>, Vec<File>)> = vec![
        ("no fd", inflight_msg(len, 0, 1, 64), vec![]),
        (
            "two fds",
            inflight_msg(len, 0, 1, 64),
            vec![dup(&good), dup(&good)],
        ),
        ("short body", vec![0u8; 20], vec![dup(&good)]),
        (
            "mmap_size too small",
            inflight_msg(len - 64, 0, 1, 64),
            vec![dup(&good)],
        ),
        (
            "offset past the end",
            inflight_msg(len, 1 << 30, 1, 64),
            vec![dup(&good)],
        ),
        (
            "unaligned offset",
            inflight_msg(len, 100, 1, 64),
            vec![dup(&good)],
        ),
        (
            "offset overflows",
            inflight_msg(len, !4095u64, 1, 64),
            vec![dup(&good)],
        ),
        ("queue size 0", inflight_msg(len, 0, 1, 0), vec![dup(&good)]),
        (
            "queue size above the maximum",
            inflight_msg(1 << 24, 0, 1, 8192),
            vec![dup(&good)],
        ),
        ("unsealed file", inflight_msg(len, 0, 1, 64), vec![unsealed]),
        (
            "not a file",
            inflight_msg(len, 0, 1, 64),
            vec![File::open("/dev/zero").expect("open")],
        ),
    ];
    for (what, payload, files) in cases {
        let raw = Raw::connect(&srv.socket);
        raw.handshake(with_inflight());
        raw.send(
            FrontendReq::SET_INFLIGHT_FD,
            FLAG_NEED_REPLY,
            &payload,
            files,
        );
        // REPLY_ACK is negotiated: a failure status, then the connection ends; or it ends at
        // once (malformed message).
        match raw.recv() {
            Ok(ack) => {
                assert_eq!(ack.u64_at(0), 1, "{what}: not refused");
                assert!(raw.closed(), "{what}: connection kept");
            }
            Err(NoReply::Closed | NoReply::Wire(WireError::Truncated { .. })) => {}
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
    // The good area is accepted (ack 0) and the connection stays.
    let raw = Raw::connect(&srv.socket);
    raw.handshake(with_inflight());
    raw.send(
        FrontendReq::SET_INFLIGHT_FD,
        FLAG_NEED_REPLY,
        &inflight_msg(len, 0, 1, 64),
        vec![dup(&good)],
    );
    assert_eq!(raw.recv().expect("ack").u64_at(0), 0);
    assert!(raw.alive());
    drop(raw);
    assert_serves(&srv, 4);
    srv.stop();
}
