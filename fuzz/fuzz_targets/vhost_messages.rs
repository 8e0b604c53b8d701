//! Fuzz the vhost-user message level: a real unix socket pair, `Server::serve_connection`
//! (the guard, rust-vmm's handler and the device) on one end, and on the other arbitrary
//! sequences of messages with descriptors attached (memfds of any size, eventfds, /dev/null,
//! sockets), raw junk bytes, structured messages with fuzzed fields (memory tables, vring
//! numbers, addresses, fds), the valid setup steps QEMU takes, and guest activity on the shared
//! memory (requests, raw descriptors, kicks). The server must never crash (a panic, or SIGBUS
//! from memory it mapped), and must end the connection within a bound once the frontend goes.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;
use std::time::Duration;
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::raw_frontend::{
    req, vring_addr, vring_state, RawFrontend, Session, FLAG_NEED_REPLY,
    VERSION_1,
};
use vmirq_blk::{DiskSpec, Server, ServerOptions};

const QUEUES: u16 = 2;
const SIZE: u16 = 16;

#[path = "../common/frontend_msg.rs"]
mod frontend_msg;
use frontend_msg::{make_fd, Addr, Fd, Keep, Region};

#[derive(Arbitrary, Debug)]
enum Op {
    Handshake,
    MemTable,
    StartVring(bool),
    StopVring(bool),
    Kick(bool),
    Submit { q: bool, kind: u8, sector: u16, len: u16, write: bool },
    Desc { q: bool, index: u8, addr: u32, len: u32, flags: u8, next: u16 },
    Publish { q: bool, head: u16 },
    /// Any request code and flags, any payload, any descriptors.
    Msg { request: u8, flags: u8, payload: Vec<u8>, fds: Vec<Fd> },
    Regions { count: u8, regions: Vec<Region>, add: bool },
    VringState { which: u8, index: u32, num: u32 },
    VringAddr { index: u32, desc: Addr, used: Addr, avail: Addr },
    VringFd { which: u8, value: u64, fd: Option<Fd> },
    Raw(Vec<u8>),
    Recv,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let mut o = ServerOptions::new("/nonexistent/unused.sock", DiskSpec::Ram(1 << 20));
        o.queues = QUEUES;
        o.queue_size = 64;
        Server::new(o.validate().expect("options")).expect("server")
    })
}

fn run(s: &mut Session, op: Op) {
    let fe = &s.fe;
    let mut keep: Keep = Vec::new();
    match op {
        Op::Handshake => drop(s.handshake()),
        Op::MemTable => drop(s.set_mem_table()),
        Op::StartVring(q) => drop(s.start_vring(u16::from(q))),
        Op::StopVring(q) => drop(s.stop_vring(u16::from(q))),
        Op::Kick(q) => drop(s.kick(u16::from(q))),
        Op::Submit { q, kind, sector, len, write } => {
            let kinds = [0, 1, 4, 8, 11, 13, u32::from(kind)];
            let kind = kinds[usize::from(kind) % kinds.len()];
            let g = &mut s.queues[usize::from(q)].guest;
            let _ = g.submit(kind, u64::from(sector), &[u32::from(len)], write);
        }
        Op::Desc { q, index, addr, len, flags, next } => {
            let g = &s.queues[usize::from(q)].guest;
            g.write_desc(u16::from(index) % SIZE, u64::from(addr) % (9 << 20), len, u16::from(flags & 7), next);
        }
        Op::Publish { q, head } => s.queues[usize::from(q)].guest.publish(head),
        Op::Msg { request, flags, payload, fds } => {
            let fds: Vec<RawFd> = fds.into_iter().take(4).filter_map(|f| make_fd(f, s, &mut keep)).collect();
            let flags = [VERSION_1, VERSION_1 | FLAG_NEED_REPLY, u32::from(flags)][usize::from(flags % 3)];
            let payload = &payload[..payload.len().min(512)];
            let _ = fe.send(u32::from(request % 48), flags, payload, &fds);
        }
        Op::Regions { count, regions, add } => {
            frontend_msg::send_regions(fe, count, &regions, add, &mut keep);
        }
        Op::VringState { which, index, num } => {
            let codes = [req::SET_VRING_NUM, req::SET_VRING_BASE, req::GET_VRING_BASE, req::SET_VRING_ENABLE];
            let index = if index % 8 < 6 { index % 3 } else { index };
            let _ = fe.send(codes[usize::from(which % 4)], VERSION_1 | FLAG_NEED_REPLY, &vring_state(index, num), &[]);
        }
        Op::VringAddr { index, desc, used, avail } => {
            let index = if index % 8 < 6 { index % 3 } else { index };
            let p = vring_addr(index, desc.resolve(), used.resolve(), avail.resolve());
            let _ = fe.send(req::SET_VRING_ADDR, VERSION_1 | FLAG_NEED_REPLY, &p, &[]);
        }
        Op::VringFd { which, value, fd } => {
            let codes = [req::SET_VRING_KICK, req::SET_VRING_CALL, req::SET_VRING_ERR];
            let fds: Vec<RawFd> = fd.into_iter().filter_map(|f| make_fd(f, s, &mut keep)).collect();
            let value = if which & 4 == 0 { value & 0x1ff } else { value };
            let _ = fe.send(codes[usize::from(which % 3)], VERSION_1 | FLAG_NEED_REPLY, &value.to_le_bytes(), &fds);
        }
        Op::Raw(bytes) => {
            let _ = fe.send_bytes(&bytes[..bytes.len().min(64)], &[]);
        }
        Op::Recv => {
            let _ = fe.recv(Duration::from_millis(1));
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let (front, back) = UnixStream::pair().expect("socket pair");
    let server = server();
    let thread = std::thread::spawn(move || server.serve_connection(back));
    front.set_write_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut fe = RawFrontend::from_stream(front);
    // A reply that does not come (the backend waits for the rest of a lying message) costs
    // this much, not the default 5 s.
    fe.set_reply_timeout(Duration::from_millis(50));
    let mut s = Session::prepare(fe, QUEUES, SIZE).expect("session");
    for op in ops.into_iter().take(48) {
        run(&mut s, op);
    }
    let _ = s.fe.stream().shutdown(std::net::Shutdown::Both);
    // The connection must end once the frontend is gone (bounded: a hang is a finding).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !thread.is_finished() {
        assert!(std::time::Instant::now() < deadline, "server did not end the connection");
        std::thread::sleep(Duration::from_millis(1));
    }
    thread.join().expect("server thread panicked").expect("serve_connection failed");
});
