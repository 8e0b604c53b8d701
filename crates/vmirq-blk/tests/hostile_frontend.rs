//! A hostile vhost-user frontend against the real server over a real unix socket
//! (`vmirq_blk::raw_frontend`). Each case checks the answer (a failure ack and a closed
//! connection for a refused message, or no completion and a broken queue for a hostile
//! chain), that guest memory outside what was handed over is unchanged (canaries, where the
//! case has set memory up), that the backend is alive, and that a fresh libblkio connection
//! then does verified I/O. Every case runs under every moderation policy, without and with
//! kick polling (as the descriptor-level suite does), a few configurations at a time.
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::{pattern, Running};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{
    Canary, Desc, EVERY_MODERATION, F_INDIRECT, F_NEXT, F_WRITE, REGION0_LEN, REGION1_LEN,
    REGION1_START,
};
use vmirq_blk::raw_frontend::{
    mem_table, memfd, message, req, vring_addr, vring_state, RawFrontend, Reply, Session,
    FLAG_NEED_REPLY, FLAG_REPLY, NO_FD, VA_BASE, VERSION_1,
};
use vmirq_blk::virtio::{feature, req as blk, status};
use vmirq_blk::DiskSpec;

const QUEUES: u16 = 2;
const SIZE: u16 = 64;
const BLOCK: usize = 4096;
const SECTOR: u32 = 512;

/// Kick polling off, and a fixed 20 µs poll (as in the descriptor-level suite).
const POLL: &[&str] = &["never", "fixed:ns=20000"];
/// Configurations run at once by one test (each case starts its own server and socket).
const PARALLEL: usize = 4;

/// The server configuration a case runs under.
struct Cfg {
    moderation: &'static str,
    poll: &'static str,
}

impl std::fmt::Display for Cfg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--moderation {} --poll {}", self.moderation, self.poll)
    }
}

/// Every moderation policy, each without and with kick polling.
fn configs() -> Vec<Cfg> {
    EVERY_MODERATION
        .iter()
        .flat_map(|&moderation| POLL.iter().map(move |&poll| Cfg { moderation, poll }))
        .collect()
}

/// Run `case` under every configuration, [`PARALLEL`] at a time; a failure names every
/// configuration it failed under.
fn each_config(case: fn(&Cfg)) {
    let all = configs();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(cfg) = all.get(i) else { break };
                if std::panic::catch_unwind(|| case(cfg)).is_err() {
                    failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(cfg.to_string());
                }
            });
        }
    });
    let failed = failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(
        failed.is_empty(),
        "case failed under: {}",
        failed.join("; ")
    );
}

fn server(cfg: &Cfg) -> Running {
    Running::start(DiskSpec::Ram(4 << 20), |o| {
        o.queues = QUEUES;
        o.queue_size = 256;
        o.moderation = cfg.moderation.parse().expect("moderation spec");
        o.poll = cfg.poll.parse().expect("poll spec");
    })
}

/// The backend is alive: the hostile connection is torn down, and a fresh libblkio
/// connection writes and reads back a block on each queue.
fn assert_fresh_connection_serves(srv: &Running, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.handle.serving() {
        assert!(
            Instant::now() < deadline,
            "hostile connection never torn down"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut c = Client::connect(&srv.socket, usize::from(QUEUES), 4 * BLOCK)
        .expect("fresh connection after a hostile one");
    for q in 0..usize::from(QUEUES) {
        let mut want = vec![0u8; BLOCK];
        pattern(seed, q as u64, &mut want);
        c.buf()[..BLOCK].copy_from_slice(&want);
        let off = (q * BLOCK) as u64;
        c.write(q, off, 0, BLOCK, 1);
        assert_eq!(c.drain(q), vec![(1, 0)], "write on queue {q}");
        c.read(q, off, BLOCK, BLOCK, 2);
        assert_eq!(c.drain(q), vec![(2, 0)], "read on queue {q}");
        assert_eq!(&c.buf()[BLOCK..2 * BLOCK], &want[..], "data on queue {q}");
    }
}

/// The message was refused: at most a failure ack (value 1), never a success, and the
/// connection closes.
fn assert_refused(fe: &RawFrontend) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match fe.recv(left) {
            Reply::Closed => return,
            Reply::Timeout => panic!("a hostile message was neither refused nor closed"),
            Reply::Message { payload, flags, .. } => {
                assert!(flags & FLAG_REPLY != 0, "a reply without the reply flag");
                assert_ne!(
                    payload.get(..8),
                    Some(&0u64.to_le_bytes()[..]),
                    "a hostile message was acked as a success"
                );
            }
        }
    }
}

/// Send one message (NEED_REPLY set) and expect it refused.
fn refuse(fe: &RawFrontend, request: u32, payload: &[u8], fds: &[RawFd]) {
    // The send itself may fail if the backend already closed: that is a refusal too.
    let _ = fe.send(request, VERSION_1 | FLAG_NEED_REPLY, payload, fds);
    assert_refused(fe);
}

/// A full session, the canaries of its queues, the hostile step, then the checks.
fn after_setup(cfg: &Cfg, seed: u64, hostile: impl FnOnce(&Session)) {
    let srv = server(cfg);
    let s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    let canaries: Vec<Canary> = s.queues.iter().map(|q| q.guest.canary()).collect();
    hostile(&s);
    assert_refused(&s.fe);
    for (q, c) in s.queues.iter().zip(&canaries) {
        q.guest.assert_canary(c, &[]);
    }
    assert_fresh_connection_serves(&srv, seed);
    srv.stop();
}

/// A bare connection (nothing set up), the hostile step, then the checks.
fn on_connect(cfg: &Cfg, seed: u64, hostile: impl FnOnce(&RawFrontend)) {
    let srv = server(cfg);
    let fe = RawFrontend::connect(&srv.socket).expect("connect");
    hostile(&fe);
    assert_refused(&fe);
    drop(fe);
    assert_fresh_connection_serves(&srv, seed);
    srv.stop();
}

/// SET_OWNER, features and REPLY_ACK negotiated, no memory yet.
fn owned(srv: &Running) -> Session {
    let fe = RawFrontend::connect(&srv.socket).expect("connect");
    let s = Session::prepare(fe, QUEUES, SIZE).expect("prepare");
    s.handshake().expect("handshake");
    s
}

fn with_owner(cfg: &Cfg, seed: u64, hostile: impl FnOnce(&Session)) {
    let srv = server(cfg);
    let s = owned(&srv);
    hostile(&s);
    assert_refused(&s.fe);
    drop(s);
    assert_fresh_connection_serves(&srv, seed);
    srv.stop();
}

fn a_well_behaved_session_serves_through_the_raw_frontend(cfg: &Cfg) {
    let srv = server(cfg);
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    for q in 0..QUEUES {
        let g = &mut s.queues[usize::from(q)].guest;
        let w = g.submit(blk::OUT, 8, &[SECTOR], false);
        g.fill(&w.data[0], 0x5C);
        s.kick(q).expect("kick");
        assert_eq!(
            s.wait_used(q, 1, Duration::from_secs(5)),
            vec![(u32::from(w.head), 1)]
        );
        let g = &mut s.queues[usize::from(q)].guest;
        let r = g.submit(blk::IN, 8, &[SECTOR], true);
        s.kick(q).expect("kick");
        let used = s.wait_used(q, 1, Duration::from_secs(5));
        assert_eq!(used, vec![(u32::from(r.head), SECTOR + 1)]);
        let g = &s.queues[usize::from(q)].guest;
        assert_eq!(g.status(&r), status::OK);
        assert!(g.read(&r.data[0]).iter().all(|&b| b == 0x5C));
    }
    drop(s);
    assert_fresh_connection_serves(&srv, 1);
    srv.stop();
}

fn mem_table_with_zero_regions(cfg: &Cfg) {
    with_owner(cfg, 2, |s| {
        refuse(&s.fe, req::SET_MEM_TABLE, &mem_table(0, &[]), &[])
    });
}

fn mem_table_with_a_huge_region_count(cfg: &Cfg) {
    // A count far above the limit, with a payload the size of one region.
    with_owner(cfg, 3, |s| {
        let p = mem_table(u32::MAX, &[s.mem.regions()[0]]);
        refuse(&s.fe, req::SET_MEM_TABLE, &p, &s.mem.fds()[..1]);
    });
    // 33 regions (above the 32 one message can carry), payload sized to match.
    with_owner(cfg, 4, |s| {
        let regions = vec![s.mem.regions()[0]; 33];
        refuse(&s.fe, req::SET_MEM_TABLE, &mem_table(33, &regions), &[]);
    });
}

fn mem_table_whose_count_lies_about_the_payload(cfg: &Cfg) {
    with_owner(cfg, 5, |s| {
        let p = mem_table(2, &[s.mem.regions()[0]]);
        refuse(&s.fe, req::SET_MEM_TABLE, &p, &s.mem.fds()[..1]);
    });
}

fn overlapping_regions_in_guest_or_frontend_addresses(cfg: &Cfg) {
    with_owner(cfg, 6, |s| {
        let [r0, _] = s.mem.regions();
        let r1 = (r0.0 + 4096, 1 << 20, VA_BASE + (64 << 20), 0);
        refuse(
            &s.fe,
            req::SET_MEM_TABLE,
            &mem_table(2, &[r0, r1]),
            &s.mem.fds(),
        );
    });
    with_owner(cfg, 7, |s| {
        let [r0, r1] = s.mem.regions();
        let r1 = (r1.0, r1.1, r0.2 + 4096, 0);
        refuse(
            &s.fe,
            req::SET_MEM_TABLE,
            &mem_table(2, &[r0, r1]),
            &s.mem.fds(),
        );
    });
}

/// A region that extends past the end of its file: mapped as asked, the first backend access
/// past the end would kill the process with SIGBUS. Refused before it is mapped.
fn mmap_offset_or_size_past_the_end_of_the_fd(cfg: &Cfg) {
    with_owner(cfg, 8, |s| {
        let [r0, r1] = s.mem.regions();
        let r1 = (r1.0, r1.1, r1.2, REGION1_LEN); // offset at the end of the file
        refuse(
            &s.fe,
            req::SET_MEM_TABLE,
            &mem_table(2, &[r0, r1]),
            &s.mem.fds(),
        );
    });
    with_owner(cfg, 9, |s| {
        let small = memfd(4096).expect("memfd");
        let r = (0, REGION0_LEN, VA_BASE, 0); // 8 MiB region over a 4 KiB file
        refuse(
            &s.fe,
            req::SET_MEM_TABLE,
            &mem_table(1, &[r]),
            &[small.as_raw_fd()],
        );
    });
    with_owner(cfg, 10, |s| {
        let small = memfd(4096).expect("memfd");
        let mut p = 0u64.to_le_bytes().to_vec();
        p.extend_from_slice(&mem_table(0, &[(REGION1_START, 1 << 20, VA_BASE, 0)])[8..]);
        refuse(&s.fe, req::ADD_MEM_REG, &p, &[small.as_raw_fd()]);
    });
}

fn mem_table_with_missing_or_extra_fds(cfg: &Cfg) {
    with_owner(cfg, 11, |s| {
        let p = mem_table(2, &s.mem.regions());
        refuse(&s.fe, req::SET_MEM_TABLE, &p, &s.mem.fds()[..1]);
    });
    with_owner(cfg, 12, |s| {
        let p = mem_table(1, &[s.mem.regions()[0]]);
        refuse(&s.fe, req::SET_MEM_TABLE, &p, &s.mem.fds());
    });
}

/// Every SET_VRING_* message (and GET_VRING_BASE) naming a vring the device does not have.
fn vring_index_out_of_range_on_every_vring_message(cfg: &Cfg) {
    let bad = [u32::from(QUEUES), 255, u32::MAX];
    for (i, &index) in bad.iter().enumerate() {
        let seed = 20 + i as u64;
        for request in [
            req::SET_VRING_NUM,
            req::SET_VRING_BASE,
            req::GET_VRING_BASE,
            req::SET_VRING_ENABLE,
        ] {
            after_setup(cfg, seed, |s| {
                refuse(&s.fe, request, &vring_state(index, 1), &[])
            });
        }
        after_setup(cfg, seed, |s| {
            refuse(
                &s.fe,
                req::SET_VRING_ADDR,
                &vring_addr(index, VA_BASE, VA_BASE + 4096, VA_BASE + 2048),
                &[],
            );
        });
        for request in [req::SET_VRING_KICK, req::SET_VRING_CALL, req::SET_VRING_ERR] {
            after_setup(cfg, seed, |s| {
                let fd = s.queues[0].call.as_raw_fd();
                refuse(&s.fe, request, &u64::from(index).to_le_bytes(), &[fd]);
            });
        }
    }
    // Bits above the index and the no-fd flag (truncated to vring 1 by the vhost crate).
    after_setup(cfg, 30, |s| {
        let fd = s.queues[1].kick.as_raw_fd();
        refuse(
            &s.fe,
            req::SET_VRING_KICK,
            &(1u64 | 1 << 32).to_le_bytes(),
            &[fd],
        );
    });
}

fn vring_num_zero_not_a_power_of_two_or_above_the_maximum(cfg: &Cfg) {
    for (seed, num) in [(31, 0u32), (32, 3), (33, 100), (34, 512), (35, 1 << 16)] {
        after_setup(cfg, seed, |s| {
            refuse(&s.fe, req::SET_VRING_NUM, &vring_state(0, num), &[])
        });
    }
}

fn vring_base_above_16_bits(cfg: &Cfg) {
    after_setup(cfg, 36, |s| {
        refuse(&s.fe, req::SET_VRING_BASE, &vring_state(0, 0x1_0000), &[])
    });
}

fn vring_addr_unaligned_or_outside_memory(cfg: &Cfg) {
    let [desc, avail, used] = [0u64, 1024, 1536];
    let cases = [
        (desc + 8, avail, used),             // descriptor table not 16-byte aligned
        (desc, avail + 1, used),             // available ring not 2-byte aligned
        (desc, avail, used + 2),             // used ring not 4-byte aligned
        (REGION0_LEN + 4096, avail, used),   // in the hole between the regions
        (1 << 40, avail, used),              // far outside
        (REGION0_LEN - 16 * 8, avail, used), // starts inside, runs past the region's end
        (desc, avail, REGION1_START + REGION1_LEN - 16), // used ring runs past region 1
    ];
    for (i, (d, a, u)) in cases.into_iter().enumerate() {
        after_setup(cfg, 40 + i as u64, |s| {
            let p = vring_addr(0, VA_BASE + d, VA_BASE + u, VA_BASE + a);
            refuse(&s.fe, req::SET_VRING_ADDR, &p, &[]);
        });
    }
}

fn device_changing_messages_before_set_owner(cfg: &Cfg) {
    let mem = vmirq_blk::raw_frontend::SharedMemory::new().expect("memory");
    on_connect(cfg, 50, |fe| {
        refuse(
            fe,
            req::SET_MEM_TABLE,
            &mem_table(2, &mem.regions()),
            &mem.fds(),
        )
    });
    on_connect(cfg, 51, |fe| {
        refuse(fe, req::SET_VRING_NUM, &vring_state(0, 64), &[])
    });
    on_connect(cfg, 52, |fe| {
        refuse(fe, req::SET_FEATURES, &0u64.to_le_bytes(), &[])
    });
    // Queries QEMU sends before SET_OWNER are answered.
    on_connect(cfg, 53, |fe| {
        assert!(fe.call(req::GET_FEATURES, &[], &[]).value().is_some());
        assert!(fe
            .call(req::GET_PROTOCOL_FEATURES, &[], &[])
            .value()
            .is_some());
        refuse(fe, req::SET_VRING_KICK, &NO_FD.to_le_bytes(), &[]);
    });
}

fn a_second_set_owner(cfg: &Cfg) {
    after_setup(cfg, 54, |s| refuse(&s.fe, req::SET_OWNER, &[], &[]));
}

fn truncated_headers(cfg: &Cfg) {
    for (seed, len) in [(60, 1usize), (61, 6), (62, 11)] {
        on_connect(cfg, seed, |fe| {
            let m = message(req::GET_FEATURES, VERSION_1, &[]);
            fe.send_bytes(&m[..len], &[]).expect("send");
            // The backend waits for the rest; the frontend gives up.
            assert_eq!(fe.recv(Duration::from_millis(100)), Reply::Timeout);
            let _ = fe.stream().shutdown(std::net::Shutdown::Write);
        });
    }
}

fn payload_sizes_that_lie(cfg: &Cfg) {
    // Larger than the protocol allows.
    on_connect(cfg, 63, |fe| {
        let mut m = message(req::GET_FEATURES, VERSION_1, &[]);
        m[8..12].copy_from_slice(&0x10_0000u32.to_le_bytes());
        fe.send_bytes(&m, &[]).expect("send");
    });
    // Announces 8 bytes, sends 4, then closes its side.
    on_connect(cfg, 64, |fe| {
        let mut m = message(req::SET_FEATURES, VERSION_1, &[0; 4]);
        m[8..12].copy_from_slice(&8u32.to_le_bytes());
        fe.send_bytes(&m, &[]).expect("send");
        let _ = fe.stream().shutdown(std::net::Shutdown::Write);
    });
    // A payload where none belongs, and a short one where 8 bytes belong.
    after_setup(cfg, 65, |s| refuse(&s.fe, req::GET_FEATURES, &[0; 16], &[]));
    after_setup(cfg, 66, |s| refuse(&s.fe, req::SET_VRING_NUM, &[0; 4], &[]));
    // Announces less than it sends: the rest reads as a bogus header.
    after_setup(cfg, 67, |s| {
        let mut m = message(req::SET_VRING_NUM, VERSION_1, &vring_state(0, 64));
        m[8..12].copy_from_slice(&4u32.to_le_bytes());
        let _ = s.fe.send_bytes(&m, &[]);
    });
}

fn missing_or_extra_fds_on_vring_and_other_messages(cfg: &Cfg) {
    // KICK without a descriptor and without the no-fd flag.
    after_setup(cfg, 70, |s| {
        refuse(&s.fe, req::SET_VRING_KICK, &0u64.to_le_bytes(), &[])
    });
    // CALL with two descriptors; with the no-fd flag and a descriptor anyway.
    after_setup(cfg, 71, |s| {
        let fds = [s.queues[0].call.as_raw_fd(), s.queues[1].call.as_raw_fd()];
        refuse(&s.fe, req::SET_VRING_CALL, &0u64.to_le_bytes(), &fds);
    });
    after_setup(cfg, 72, |s| {
        let fd = s.queues[0].call.as_raw_fd();
        refuse(&s.fe, req::SET_VRING_CALL, &NO_FD.to_le_bytes(), &[fd]);
    });
    // A descriptor on a message that takes none.
    after_setup(cfg, 73, |s| {
        let fd = s.queues[0].call.as_raw_fd();
        refuse(&s.fe, req::GET_FEATURES, &[], &[fd]);
    });
}

fn bad_header_flags_and_unknown_requests(cfg: &Cfg) {
    after_setup(cfg, 74, |s| {
        let _ =
            s.fe.send(req::GET_FEATURES, VERSION_1 | FLAG_REPLY, &[], &[]);
    });
    after_setup(cfg, 75, |s| {
        let _ = s.fe.send(req::GET_FEATURES, 2, &[], &[]);
    });
    after_setup(cfg, 76, |s| refuse(&s.fe, 0xFFFF, &[], &[]));
}

/// A read through a sound 3-entry indirect table (header, one sector, status) published (not
/// kicked) on queue `q`; returns its head and status address.
fn publish_indirect_read(s: &mut Session, q: u16) -> (u16, u64) {
    let g = &mut s.queues[usize::from(q)].guest;
    let h = g.alloc(16);
    g.write_header(h, blk::IN, 0);
    let data = g.alloc(SECTOR);
    let st = g.alloc_status();
    let t = g.alloc(48);
    g.write_indirect(t, 0, h, 16, F_NEXT, 1);
    g.write_indirect(t, 1, data, SECTOR, F_WRITE | F_NEXT, 2);
    g.write_indirect(t, 2, st, 1, F_WRITE, 0);
    g.write_desc(40, t, 48, F_INDIRECT, 0);
    g.publish(40);
    (40, st)
}

/// VIRTIO_F_RING_INDIRECT_DESC as SET_FEATURES acked it: with the feature an indirect table
/// is served; after a SET_FEATURES without it, the same chain breaks its queue (virtio 1.2
/// §2.7.5.3.1), nothing is completed or written, and the other queue keeps serving.
fn indirect_descriptors_follow_the_acked_features(cfg: &Cfg) {
    let srv = server(cfg);
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    let (head, st) = publish_indirect_read(&mut s, 1);
    s.kick(1).expect("kick");
    assert_eq!(
        s.wait_used(1, 1, Duration::from_secs(5)),
        vec![(u32::from(head), SECTOR + 1)]
    );
    assert_eq!(s.queues[1].guest.byte_at(st), status::OK);
    drop(s);
    assert_fresh_connection_serves(&srv, 90);

    let fe = RawFrontend::connect(&srv.socket).expect("connect");
    let mut s = Session::prepare(fe, QUEUES, SIZE).expect("prepare");
    s.handshake().expect("handshake");
    let features =
        s.fe.call(req::GET_FEATURES, &[], &[])
            .value()
            .expect("features");
    let without =
        (features & !(1 << feature::RING_EVENT_IDX) & !(1 << feature::RING_INDIRECT_DESC))
            | vmirq_blk::raw_frontend::F_PROTOCOL_FEATURES;
    s.expect_ack(req::SET_FEATURES, &without.to_le_bytes(), &[])
        .expect("SET_FEATURES without INDIRECT_DESC");
    s.set_mem_table().expect("memory");
    for q in 0..QUEUES {
        s.start_vring(q).expect("vring");
    }
    let (_, st) = publish_indirect_read(&mut s, 0);
    let canary = s.queues[0].guest.canary();
    s.kick(0).expect("kick");
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.handle.counters()[0].queue.broken == 0 {
        assert!(Instant::now() < deadline, "queue 0 did not break");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.wait_used(0, 1, Duration::from_millis(50)), vec![]);
    assert_eq!(s.queues[0].guest.byte_at(st), 0xFF, "status written");
    s.queues[0].guest.assert_canary(&canary, &[]);
    let r = s.queues[1].guest.submit(blk::IN, 0, &[SECTOR], true);
    s.kick(1).expect("kick");
    assert_eq!(
        s.wait_used(1, 1, Duration::from_secs(5)),
        vec![(u32::from(r.head), SECTOR + 1)]
    );
    drop(s);
    assert_fresh_connection_serves(&srv, 91);
    srv.stop();
}

/// A hostile chain on queue 0 over the real protocol: no completion, queue 0 broken (and
/// counted), queue 1 keeps serving; GET_VRING_BASE and a restart of the ring recover queue 0,
/// which then serves the chain published after the broken one.
fn a_hostile_chain_breaks_only_its_queue_until_the_ring_restarts(cfg: &Cfg) {
    let srv = server(cfg);
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    let g = &mut s.queues[0].guest;
    let h = g.alloc(16);
    g.write_header(h, blk::IN, 0);
    let st = g.alloc_status();
    let data = g.alloc(SECTOR);
    g.write_desc(40, h, 16, F_NEXT, 41);
    g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 41);
    g.publish(40);
    let after = g.submit(blk::IN, 0, &[SECTOR], true);
    let canary = g.canary();
    s.kick(0).expect("kick");
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.handle.counters()[0].queue.broken == 0 {
        assert!(Instant::now() < deadline, "queue 0 did not break");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.wait_used(0, 1, Duration::from_millis(100)), vec![]);
    s.queues[0].guest.assert_canary(&canary, &[]);
    assert_eq!(s.queues[0].guest.byte_at(st), 0xFF);
    assert_eq!(srv.handle.counters()[1].queue.broken, 0);
    // Queue 1 serves.
    let g1 = &mut s.queues[1].guest;
    let r = g1.submit(blk::IN, 0, &[SECTOR], true);
    s.kick(1).expect("kick");
    assert_eq!(
        s.wait_used(1, 1, Duration::from_secs(5)),
        vec![(u32::from(r.head), SECTOR + 1)]
    );
    assert_eq!(s.queues[1].guest.status(&r), status::OK);
    // Stop and restart queue 0: the chain after the broken one is served.
    let base = s.stop_vring(0).expect("GET_VRING_BASE");
    assert_eq!(base, 1, "the position after the broken chain");
    s.restart_vring(0, base).expect("restart");
    s.kick(0).expect("kick");
    assert_eq!(
        s.wait_used(0, 1, Duration::from_secs(5)),
        vec![(u32::from(after.head), SECTOR + 1)]
    );
    assert_eq!(s.queues[0].guest.status(&after), status::OK);
    assert_eq!(srv.handle.counters()[0].queue.broken, 1);
    drop(s);
    assert_fresh_connection_serves(&srv, 80);
    srv.stop();
}

/// A queue broken by a hostile chain, and the frontend simply goes away: the next connection
/// gets fresh queues and serves on both.
fn a_new_connection_recovers_a_broken_queue(cfg: &Cfg) {
    let srv = server(cfg);
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    // A head outside the descriptor table.
    s.queues[1].guest.publish(SIZE + 1);
    s.kick(1).expect("kick");
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.handle.counters()[1].queue.broken == 0 {
        assert!(Instant::now() < deadline, "queue 1 did not break");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.wait_used(1, 1, Duration::from_millis(50)), vec![]);
    drop(s);
    assert_fresh_connection_serves(&srv, 81);
    assert_eq!(srv.handle.counters()[1].queue.broken, 1);
    srv.stop();
}

/// The frontend truncates region 0's memfd to 4 KiB after SET_MEM_TABLE and I/O (its rings
/// for queue 0 stay inside the first page; headers and buffers lie past 1 MiB), then kicks
/// a read whose header, buffer and status are gone: without the SIGBUS handler the backend
/// process (this test binary) dies. Now: the request is not completed, a queue breaks, the
/// backend drops the connection and counts it, and a fresh libblkio connection does
/// verified I/O.
fn a_frontend_that_truncates_its_memory_loses_only_its_connection(cfg: &Cfg) {
    let srv = server(cfg);
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    let g = &mut s.queues[0].guest;
    let w = g.submit(blk::OUT, 8, &[SECTOR], false);
    g.fill(&w.data[0], 0x5C);
    s.kick(0).expect("kick");
    assert_eq!(
        s.wait_used(0, 1, Duration::from_secs(5)),
        vec![(u32::from(w.head), 1)]
    );
    let before = srv.handle.memory_revoked();
    let r = s.queues[0].guest.submit(blk::IN, 8, &[SECTOR], true);
    let [desc, _, used] = s.queues[0].guest.ring_addresses();
    assert!(desc < 4096 && used + 4 + 8 * u64::from(SIZE) + 2 <= 4096);
    assert!(
        r.data[0].addr >= 4096,
        "the buffer lies in the truncated part"
    );
    s.mem.truncate(0, 4096).expect("ftruncate");
    s.kick(0).expect("kick");
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.handle.memory_revoked() == before {
        assert!(Instant::now() < deadline, "revocation not detected");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        s.fe.closed_within(Duration::from_secs(5)),
        "the connection of a frontend that truncated its memory was not dropped"
    );
    // Queue 0's used ring is in the page that is still backed: no completion appeared.
    assert_eq!(s.wait_used(0, 1, Duration::from_millis(20)), vec![]);
    // The truncation also took queue 1's rings (they start at 128 KiB): whichever worker
    // touches the gone pages first breaks its queue and ends the connection, after which
    // queue 0's worker may never handle the kick. CI saw that once (queue 0 not broken, about
    // 1 in 20 loaded runs of this binary; a queue 1 worker breaking on revoked memory was
    // logged at that moment). So: some queue broke, not necessarily queue 0.
    let broken: u64 = srv.handle.counters().iter().map(|c| c.queue.broken).sum();
    assert!(broken >= 1, "no queue broken");
    drop(s);
    assert_fresh_connection_serves(&srv, 82);
    assert_eq!(srv.handle.memory_revoked(), before + 1);
    srv.stop();
}

/// The frontend truncates region 0 right after SET_MEM_TABLE, then starts the rings: queue
/// 1's rings lie past the first page, so vhost-user-backend's SET_VRING_ADDR handling and
/// the engine read truncated memory (the README's old reproduction, but after the guard's
/// file-size check). The backend survives, drops the connection and counts it; the next
/// connection serves.
fn memory_truncated_before_the_rings_start(cfg: &Cfg) {
    let srv = server(cfg);
    let s = owned(&srv);
    s.set_mem_table().expect("memory");
    let before = srv.handle.memory_revoked();
    s.mem.truncate(0, 4096).expect("ftruncate");
    // Acks may or may not come (the backend drops the connection as soon as it sees the
    // revocation): the outcome is checked below.
    let _ = s.start_vring(0);
    let _ = s.start_vring(1);
    let _ = s.kick(1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.handle.memory_revoked() == before {
        assert!(Instant::now() < deadline, "revocation not detected");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        s.fe.closed_within(Duration::from_secs(5)),
        "the connection of a frontend that truncated its memory was not dropped"
    );
    drop(s);
    assert_fresh_connection_serves(&srv, 84);
    srv.stop();
}

/// The kernel-side variant on an image file (io_uring storage): the read's header and
/// status lie in region 1, only its buffer in region 0's truncated part, so no user-space
/// access faults before the storage read. The kernel cannot copy into the truncated page
/// (EFAULT, also on the blocking retry): the request ends with IOERR, or, if something in
/// the backend touched that page first, it is not completed at all. Never OK.
fn a_storage_read_into_truncated_memory_is_never_ok(cfg: &Cfg) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("disk.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(4 << 20))
        .expect("image");
    let srv = Running::start(
        DiskSpec::Image {
            path,
            direct: false,
        },
        |o| {
            o.queues = QUEUES;
            o.queue_size = 256;
            o.moderation = cfg.moderation.parse().expect("moderation spec");
            o.poll = cfg.poll.parse().expect("poll spec");
        },
    );
    let mut s = Session::start(&srv.socket, QUEUES, SIZE).expect("session");
    let before = srv.handle.memory_revoked();
    let g = &mut s.queues[0].guest;
    let (hdr, st) = (REGION1_START, REGION1_START + 64);
    let data = g.alloc(8 * SECTOR);
    assert!(data >= 4096, "the buffer lies in the truncated part");
    g.write_header(hdr, blk::IN, 0);
    g.fill(
        &Desc {
            addr: st,
            len: 1,
            write: true,
        },
        0xFF,
    );
    g.write_desc(50, hdr, 16, F_NEXT, 51);
    g.write_desc(51, data, 8 * SECTOR, F_WRITE | F_NEXT, 52);
    g.write_desc(52, st, 1, F_WRITE, 0);
    g.publish(50);
    s.mem.truncate(0, 4096).expect("ftruncate");
    s.kick(0).expect("kick");
    let used = s.wait_used(0, 1, Duration::from_secs(2));
    if used.is_empty() {
        assert!(
            srv.handle.memory_revoked() > before,
            "neither completed nor revoked"
        );
        eprintln!("{cfg}: storage read into truncated memory: not completed (revoked)");
    } else {
        assert_eq!(used, vec![(50, 1)], "completed with data");
        assert_eq!(s.queues[0].guest.byte_at(st), status::IOERR);
        eprintln!("{cfg}: storage read into truncated memory: IOERR");
    }
    drop(s);
    assert_fresh_connection_serves(&srv, 83);
    srv.stop();
}

/// One `#[test]` per case, each running the case under every configuration.
macro_rules! matrix {
    ($($case:ident),* $(,)?) => {
        mod matrix {
            $(
                #[test]
                fn $case() {
                    super::each_config(super::$case);
                }
            )*
        }
    };
}

matrix!(
    a_well_behaved_session_serves_through_the_raw_frontend,
    mem_table_with_zero_regions,
    mem_table_with_a_huge_region_count,
    mem_table_whose_count_lies_about_the_payload,
    overlapping_regions_in_guest_or_frontend_addresses,
    mmap_offset_or_size_past_the_end_of_the_fd,
    mem_table_with_missing_or_extra_fds,
    vring_index_out_of_range_on_every_vring_message,
    vring_num_zero_not_a_power_of_two_or_above_the_maximum,
    vring_base_above_16_bits,
    vring_addr_unaligned_or_outside_memory,
    device_changing_messages_before_set_owner,
    a_second_set_owner,
    truncated_headers,
    payload_sizes_that_lie,
    missing_or_extra_fds_on_vring_and_other_messages,
    bad_header_flags_and_unknown_requests,
    a_hostile_chain_breaks_only_its_queue_until_the_ring_restarts,
    a_new_connection_recovers_a_broken_queue,
    a_frontend_that_truncates_its_memory_loses_only_its_connection,
    a_storage_read_into_truncated_memory_is_never_ok,
    memory_truncated_before_the_rings_start,
    indirect_descriptors_follow_the_acked_features,
);
