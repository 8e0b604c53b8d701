//! Fuzz `vmirq serve-net`'s vhost-user message level: a real switch
//! (`vmirq_net::server::Server`, on sockets in a private temp dir, started once per fuzz
//! process) and, per input, a hand-driven frontend on port 0 that sends arbitrary sequences
//! of messages with descriptors attached (memfds, eventfds, /dev/null, sockets), raw junk,
//! structured messages with fuzzed fields (features of virtio-net, config space offsets and
//! sizes, memory tables, vring indexes in and out of range, addresses, fds), the valid setup
//! steps QEMU takes, and guest activity on the shared memory (frames on the transmit rings,
//! receive buffers, raw descriptors, control commands, kicks); optionally the other ports
//! get valid frontends with receive buffers, so frames cross the switch. Any of these
//! frontends may shrink its memory under the backend while frames move (ftruncate of a
//! region's memfd after SET_MEM_TABLE).
//!
//! The switch's shape is chosen per fuzz process by `VMIRQ_FUZZ_NET` (comma-separated, any
//! order, the words of serve-net's own options): a `--datapath` (`pmd`: one forwarding
//! thread polling every port, one queue pair per port; `per-port`), a port count 2 to 4, a
//! `--switch` mode (`pairs`: 0 <-> 1, 2 <-> 3, an odd last port gets nothing; `learn`; by
//! default fixed pairs on 2 ports and MAC learning on more). Default: the per-port data path
//! with two queue pairs, two ports. CI runs the
//! default; e.g. `VMIRQ_FUZZ_NET=pmd,3 cargo fuzz run net_messages` for the others.
//!
//! Oracles: no thread of the server panics (libfuzzer-sys's panic hook aborts the process)
//! or dies of SIGBUS; once the frontends close, each port is free again within a bound (its
//! connection torn down, `ServerHandle::serving` false) and the server still runs, so no
//! input can wedge a port or stop the switch for the next one.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmirq_net::queues::Datapath;
use vmirq_net::server::{Server, ServerConfig, ServerHandle};
use vmirq_net::switch::SwitchMode;
use vmirq_net::virtio::{
    default_mac, F_CTRL_VQ, F_EVENT_IDX, F_IN_ORDER, F_MAC, F_MQ, F_MRG_RXBUF, F_NOTF_COAL,
    F_PROTOCOL_FEATURES, F_STATUS, F_VERSION_1, F_VQ_NOTF_COAL, HDR_LEN,
};
use vmirq_vhost::mock_guest::{Desc, REGION0_LEN, REGION1_LEN};
use vmirq_vhost::raw_frontend::{
    req, vring_addr, vring_state, RawFrontend, Session, FLAG_NEED_REPLY, VERSION_1,
};

/// Queue pairs of each port on the per-port data path: RX 0, TX 0, RX 1, TX 1, then the
/// control queue (4). The pmd data path serves one pair (RX 0, TX 0, control queue 2).
const PAIRS_PER_PORT: u16 = 2;
/// Entries of the frontend's rings.
const SIZE: u16 = 16;
/// `VHOST_USER_SET_CONFIG` (not in the guard's table).
const SET_CONFIG: u32 = 25;
/// How long a port may take to be free again after its frontend closed.
const FREE_WITHIN: Duration = Duration::from_secs(20);

/// The switch under test.
struct Switch {
    /// The sockets' temp dir, removed at exit.
    dir: PathBuf,
    handle: ServerHandle,
    sockets: Vec<PathBuf>,
    thread: JoinHandle<vmirq_net::server::Result<()>>,
    /// Queue pairs of each port.
    pairs: u16,
}

impl Switch {
    /// Virtqueues of a port.
    fn queues(&self) -> u16 {
        2 * self.pairs + 1
    }

    /// The control queue's index.
    fn ctrl(&self) -> u16 {
        2 * self.pairs
    }

    /// The pair an op's `pair` names.
    fn pair(&self, pair: bool) -> u16 {
        u16::from(pair) % self.pairs
    }
}

/// The switch's configuration from `VMIRQ_FUZZ_NET` (see the module docs), its sockets in
/// `dir`.
fn configure(dir: &std::path::Path) -> ServerConfig {
    let spec = std::env::var("VMIRQ_FUZZ_NET").unwrap_or_default();
    let (mut datapath, mut ports, mut switch) = (Datapath::PerPort, 2, None);
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if let Ok(d) = word.parse::<Datapath>() {
            datapath = d;
        } else if let Ok(m) = word.parse::<SwitchMode>() {
            switch = Some(m);
        } else {
            ports = word
                .parse()
                .ok()
                .filter(|n| (2..=4).contains(n))
                .unwrap_or_else(|| {
                    panic!(
                        "VMIRQ_FUZZ_NET: {word:?} is no data path, switch mode or port count 2-4"
                    )
                });
        }
    }
    let sockets = (0..ports)
        .map(|p| dir.join(format!("port{p}.sock")))
        .collect();
    let mut cfg = ServerConfig::new(sockets);
    cfg.policies.datapath = datapath;
    cfg.queue_pairs = match datapath {
        Datapath::Pmd { .. } => 1,
        Datapath::PerPort => PAIRS_PER_PORT,
    };
    cfg.queue_size = 64;
    cfg.switch = switch.unwrap_or(if ports > 2 {
        SwitchMode::Learn
    } else {
        SwitchMode::Pairs
    });
    cfg
}

/// The switch, started by the first input.
static SWITCH: OnceLock<Switch> = OnceLock::new();

/// At exit: remove the sockets' dir, and say how many connections the switch dropped
/// because their frontend shrank memory it had handed over (whether `Op::Shrink` reached
/// the backend).
extern "C" fn at_exit() {
    if let Some(sw) = SWITCH.get() {
        let _ = std::fs::remove_dir_all(&sw.dir);
        eprintln!(
            "net_messages: {} connection(s) dropped for revoked memory",
            sw.handle.memory_revoked()
        );
    }
}

fn switch() -> &'static Switch {
    SWITCH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("vmirq-net-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("socket dir");
        // SAFETY: `at_exit` is an `extern "C" fn()` that only reads a static, removes files
        // and writes to stderr; registering it has no other effect.
        unsafe { libc::atexit(at_exit) };
        let cfg = configure(&dir);
        let (sockets, pairs) = (cfg.sockets.clone(), cfg.queue_pairs);
        let server = Server::new(cfg).expect("server");
        let handle = server.handle();
        let thread = std::thread::spawn(move || server.run());
        Switch {
            dir,
            handle,
            sockets,
            thread,
            pairs,
        }
    })
}

#[path = "../common/frontend_msg.rs"]
mod frontend_msg;
use frontend_msg::{make_fd, Addr, Fd, Keep, Region};

/// The virtio-net and vhost-user feature bits a frontend may ack (bit i of a mask).
const FEATURES: [u64; 12] = [
    F_VERSION_1,
    F_MRG_RXBUF,
    F_EVENT_IDX,
    F_CTRL_VQ,
    F_MQ,
    F_MAC,
    F_STATUS,
    F_NOTF_COAL,
    F_VQ_NOTF_COAL,
    F_IN_ORDER,
    F_PROTOCOL_FEATURES,
    1 << 0, // VIRTIO_NET_F_CSUM: not offered
];

#[derive(Arbitrary, Debug)]
enum Op {
    /// QEMU's handshake (every offered feature but EVENT_IDX).
    Handshake,
    /// The whole valid setup in one step (handshake, memory table, every ring started),
    /// receive buffers on every pair, and with `peer` a valid frontend on the next free
    /// port: the data path runs from here.
    Setup {
        peer: bool,
    },
    /// SET_OWNER, GET_FEATURES, protocol features, then SET_FEATURES with the features of
    /// `mask` (bits of [`FEATURES`]), or `raw` as it is when `raw_bits` is set.
    Features {
        mask: u16,
        protocol: u8,
        raw_bits: bool,
        raw: u64,
    },
    MemTable,
    StartVring(u8),
    StopVring(u8),
    Kick(u8),
    /// A frame on transmit queue `pair` (to another port, broadcast, or itself), header
    /// flags.
    Frame {
        pair: bool,
        to: u8,
        len: u16,
        hdr0: u8,
    },
    /// `n` receive buffers of `len` bytes on receive queue `pair`.
    RxBuffers {
        pair: bool,
        n: u8,
        len: u16,
    },
    /// A control command: class, command, argument bytes.
    Ctrl {
        class: u8,
        cmd: u8,
        arg: Vec<u8>,
    },
    Desc {
        q: u8,
        index: u8,
        addr: u32,
        len: u32,
        flags: u8,
        next: u16,
    },
    Publish {
        q: u8,
        head: u16,
    },
    GetConfig {
        offset: u32,
        size: u32,
        lie: bool,
    },
    SetConfig {
        offset: u32,
        data: Vec<u8>,
    },
    /// Any request code and flags, any payload, any descriptors.
    Msg {
        request: u8,
        flags: u8,
        payload: Vec<u8>,
        fds: Vec<Fd>,
    },
    Regions {
        count: u8,
        regions: Vec<Region>,
        add: bool,
    },
    VringState {
        which: u8,
        index: u32,
        num: u32,
    },
    VringAddr {
        index: u32,
        desc: Addr,
        used: Addr,
        avail: Addr,
    },
    VringFd {
        which: u8,
        value: u64,
        fd: Option<Fd>,
    },
    Raw(Vec<u8>),
    Recv,
    /// Connect the next free port (1, 2, ...) with a valid frontend, receive buffers on
    /// every pair.
    Peer,
    /// Receive buffers on peer `which`'s pair.
    PeerRx {
        which: u8,
        pair: bool,
        n: u8,
    },
    /// A frame from peer `which` to port 0 on the peer's pair (port 0's receive path).
    PeerFrame {
        which: u8,
        pair: bool,
        len: u16,
    },
    /// Shrink region 0 or 1's memfd (see [`Frontend::shrink`]), as a hostile
    /// frontend may after SET_MEM_TABLE: port 0's (`who % (peers + 1) == 0`) or a peer's,
    /// while frames still cross the switch to and from it. That frontend then touches its
    /// own memory no more (that would fault in the fuzzer itself): later ops on it only send
    /// messages.
    Shrink {
        who: u8,
        region: bool,
        pages: u16,
    },
}

/// A queue index: mostly the device's, sometimes just past it, sometimes anything.
fn vring_index(index: u32) -> u32 {
    let queues = u32::from(switch().queues());
    match index % 8 {
        0..=5 => index % queues,
        6 => queues + (index >> 3) % 64,
        _ => index,
    }
}

/// Push `n % 8` device-writable buffers of `1 + len % 2048` bytes on queue `q` and kick.
fn rx_buffers(s: &mut Session, q: u16, n: u8, len: u16) {
    let g = &mut s.queues[usize::from(q)].guest;
    for _ in 0..n % 8 {
        let len = 1 + u32::from(len % 2048);
        let addr = g.alloc(len);
        g.push_chain(&[Desc {
            addr,
            len,
            write: true,
        }]);
    }
    let _ = s.kick(q);
}

/// A frame of `len % 1600` bytes (at least an Ethernet header) from `src` to `dst` behind
/// a net header whose first byte is `hdr0`, on transmit queue `tx`, kicked.
fn send_frame(s: &mut Session, tx: u16, dst: [u8; 6], src: [u8; 6], len: u16, hdr0: u8) {
    let len = usize::from(len % 1600);
    let mut frame = vec![0u8; HDR_LEN + len.max(14)];
    frame[0] = hdr0;
    frame[HDR_LEN..HDR_LEN + 6].copy_from_slice(&dst);
    frame[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&src);
    frame[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x08, 0x00]);
    let g = &mut s.queues[usize::from(tx)].guest;
    let n = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    let addr = g.alloc(n);
    g.mem_write(addr, &frame);
    g.push_chain(&[Desc {
        addr,
        len: n,
        write: false,
    }]);
    let _ = s.kick(tx);
}

/// SET_OWNER, the feature exchange with `acked` features, protocol features `protocol`.
fn features(s: &Session, acked: u64, protocol: u64) {
    let fe = &s.fe;
    let _ = fe.send(req::SET_OWNER, VERSION_1, &[], &[]);
    let _ = fe.call(req::GET_FEATURES, &[], &[]);
    let offered = fe
        .call(req::GET_PROTOCOL_FEATURES, &[], &[])
        .value()
        .unwrap_or(0);
    let _ = fe.send(
        req::SET_PROTOCOL_FEATURES,
        VERSION_1,
        &(offered & protocol).to_le_bytes(),
        &[],
    );
    let _ = fe.call(req::SET_FEATURES, &acked.to_le_bytes(), &[]);
}

/// A frontend of the input: port 0's or a peer's.
struct Frontend {
    s: Session,
    /// It shrank its memory: its mapping may fault, so it writes its memory no more.
    shrunk: bool,
}

impl Frontend {
    /// Shrink region `region`'s memfd to nothing (`pages % 4 == 0`) or to `pages / 4`
    /// 4 KiB pages modulo its size: the rings are in region 0's first pages, so a random
    /// cut mostly leaves them alone.
    fn shrink(&mut self, region: bool, pages: u16) {
        let region = usize::from(region);
        let len = [REGION0_LEN, REGION1_LEN][region];
        let bytes = if pages % 4 == 0 {
            0
        } else {
            u64::from(pages / 4) * 4096 % len
        };
        if self.s.mem.truncate(region, bytes).is_ok() {
            self.shrunk = true;
        }
    }
}

/// Peer `which` (modulo their number) if it may still write its memory.
fn live_peer(peers: &mut [Frontend], which: u8) -> Option<&mut Frontend> {
    let n = peers.len().max(1);
    peers.get_mut(usize::from(which) % n).filter(|p| !p.shrunk)
}

/// Whether `op` writes the frontend's own guest memory (refused once it shrank it).
fn touches_memory(op: &Op) -> bool {
    matches!(
        op,
        Op::Setup { .. }
            | Op::Frame { .. }
            | Op::RxBuffers { .. }
            | Op::Ctrl { .. }
            | Op::Desc { .. }
            | Op::Publish { .. }
    )
}

fn run(me: &mut Frontend, peers: &mut Vec<Frontend>, op: Op) {
    if me.shrunk && touches_memory(&op) {
        return;
    }
    let sw = switch();
    let s = &mut me.s;
    let fe = &s.fe;
    let mut keep: Keep = Vec::new();
    let q = |q: u8| u16::from(q) % sw.queues();
    match op {
        Op::Handshake => drop(s.handshake()),
        Op::Setup { peer: with_peer } => {
            let _ = s.handshake();
            let _ = s.set_mem_table();
            for i in 0..sw.queues() {
                let _ = s.start_vring(i);
            }
            for pair in 0..sw.pairs {
                rx_buffers(s, 2 * pair, 4, 2047);
            }
            if with_peer {
                connect_next_peer(peers);
            }
        }
        Op::Features {
            mask,
            protocol,
            raw_bits,
            raw,
        } => {
            let acked = if raw_bits {
                raw
            } else {
                FEATURES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .fold(0, |a, (_, f)| a | f)
            };
            // Bit 7 of `protocol` asks for every protocol feature offered.
            let protocol = if protocol & 0x80 != 0 {
                u64::MAX
            } else {
                u64::from(protocol)
            };
            features(s, acked, protocol);
        }
        Op::MemTable => drop(s.set_mem_table()),
        Op::StartVring(i) => drop(s.start_vring(q(i))),
        Op::StopVring(i) => drop(s.stop_vring(q(i))),
        Op::Kick(i) => drop(s.kick(q(i))),
        Op::Frame {
            pair,
            to,
            len,
            hdr0,
        } => {
            let ports = sw.sockets.len();
            let dst = match usize::from(to) % (ports + 1) {
                0 => [0xff; 6],
                p => default_mac(p - 1),
            };
            let hdr0 = if hdr0 & 0x80 != 0 { hdr0 & 0x7f } else { 0 };
            send_frame(s, 2 * sw.pair(pair) + 1, dst, default_mac(0), len, hdr0);
        }
        Op::PeerFrame { which, pair, len } => {
            let src = default_mac(usize::from(which) % peers.len().max(1) + 1);
            if let Some(p) = live_peer(peers, which) {
                send_frame(&mut p.s, 2 * sw.pair(pair) + 1, default_mac(0), src, len, 0);
            }
        }
        Op::RxBuffers { pair, n, len } => rx_buffers(s, 2 * sw.pair(pair), n, len),
        Op::Ctrl { class, cmd, arg } => {
            let mut bytes = vec![class % 8, cmd % 4];
            bytes.extend_from_slice(&arg[..arg.len().min(32)]);
            let ctrl = sw.ctrl();
            let _ = s.queues[usize::from(ctrl)].guest.push_command(&bytes);
            let _ = s.kick(ctrl);
        }
        Op::Desc {
            q: i,
            index,
            addr,
            len,
            flags,
            next,
        } => {
            let g = &s.queues[usize::from(q(i))].guest;
            g.write_desc(
                u16::from(index) % SIZE,
                u64::from(addr) % (9 << 20),
                len,
                u16::from(flags & 7),
                next,
            );
        }
        Op::Publish { q: i, head } => s.queues[usize::from(q(i))].guest.publish(head),
        Op::GetConfig { offset, size, lie } => {
            let (offset, size) = if offset & 1 == 0 {
                (offset % 16, size % 16)
            } else {
                (offset, size)
            };
            let mut p = offset.to_le_bytes().to_vec();
            p.extend_from_slice(&size.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            let body = if lie {
                4
            } else {
                usize::try_from(size).unwrap_or(0).min(256)
            };
            p.resize(12 + body, 0);
            let _ = fe.call(req::GET_CONFIG, &p, &[]);
        }
        Op::SetConfig { offset, data } => {
            let data = &data[..data.len().min(64)];
            let mut p = (offset % 32).to_le_bytes().to_vec();
            p.extend_from_slice(&u32::try_from(data.len()).unwrap_or(0).to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(data);
            let _ = fe.call(SET_CONFIG, &p, &[]);
        }
        Op::Msg {
            request,
            flags,
            payload,
            fds,
        } => {
            let fds: Vec<RawFd> = fds
                .into_iter()
                .take(4)
                .filter_map(|f| make_fd(f, s, &mut keep))
                .collect();
            let flags =
                [VERSION_1, VERSION_1 | FLAG_NEED_REPLY, u32::from(flags)][usize::from(flags % 3)];
            let payload = &payload[..payload.len().min(512)];
            let _ = fe.send(u32::from(request % 48), flags, payload, &fds);
        }
        Op::Regions {
            count,
            regions,
            add,
        } => {
            frontend_msg::send_regions(fe, count, &regions, add, &mut keep);
        }
        Op::VringState { which, index, num } => {
            let codes = [
                req::SET_VRING_NUM,
                req::SET_VRING_BASE,
                req::GET_VRING_BASE,
                req::SET_VRING_ENABLE,
            ];
            let p = vring_state(vring_index(index), num);
            let _ = fe.send(
                codes[usize::from(which % 4)],
                VERSION_1 | FLAG_NEED_REPLY,
                &p,
                &[],
            );
        }
        Op::VringAddr {
            index,
            desc,
            used,
            avail,
        } => {
            let p = vring_addr(
                vring_index(index),
                desc.resolve(),
                used.resolve(),
                avail.resolve(),
            );
            let _ = fe.send(req::SET_VRING_ADDR, VERSION_1 | FLAG_NEED_REPLY, &p, &[]);
        }
        Op::VringFd { which, value, fd } => {
            let codes = [req::SET_VRING_KICK, req::SET_VRING_CALL, req::SET_VRING_ERR];
            let fds: Vec<RawFd> = fd
                .into_iter()
                .filter_map(|f| make_fd(f, s, &mut keep))
                .collect();
            let value = match which & 0xc {
                0 => (value % u64::from(sw.queues())) | (value & 0x100),
                4 => value & 0x1ff,
                _ => value,
            };
            let _ = fe.send(
                codes[usize::from(which % 3)],
                VERSION_1 | FLAG_NEED_REPLY,
                &value.to_le_bytes(),
                &fds,
            );
        }
        Op::Raw(bytes) => {
            let _ = fe.send_bytes(&bytes[..bytes.len().min(64)], &[]);
        }
        Op::Recv => {
            let _ = fe.recv(Duration::from_millis(1));
        }
        Op::Peer => connect_next_peer(peers),
        Op::PeerRx { which, pair, n } => {
            if let Some(p) = live_peer(peers, which) {
                rx_buffers(&mut p.s, 2 * sw.pair(pair), n, 2047);
            }
        }
        Op::Shrink { who, region, pages } => match usize::from(who) % (peers.len() + 1) {
            0 => me.shrink(region, pages),
            p => peers[p - 1].shrink(region, pages),
        },
    }
}

/// Wait (bounded) until `serving(port)` is `want`; panics (a finding) otherwise.
fn wait_serving(sw: &Switch, port: usize, want: bool) {
    let deadline = Instant::now() + FREE_WITHIN;
    while sw.handle.serving(port) != want {
        assert!(!sw.thread.is_finished(), "the server stopped (port {port})");
        assert!(
            Instant::now() < deadline,
            "port {port}: serving never became {want}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A valid frontend on the next free port (1, 2, ...) with every ring started and receive
/// buffers on every pair; nothing when every port has one.
fn connect_next_peer(peers: &mut Vec<Frontend>) {
    let sw = switch();
    let port = peers.len() + 1;
    let Some(path) = sw.sockets.get(port) else {
        return;
    };
    let Ok(mut p) = Session::start(path, sw.queues(), SIZE) else {
        return;
    };
    wait_serving(sw, port, true);
    for pair in 0..sw.pairs {
        rx_buffers(&mut p, 2 * pair, 7, 2047);
    }
    peers.push(Frontend {
        s: p,
        shrunk: false,
    });
}

fuzz_target!(|ops: Vec<Op>| {
    let sw = switch();
    let mut fe = RawFrontend::connect(&sw.sockets[0]).expect("connect port 0");
    // A backend that stops reading fails the send instead of blocking the input.
    fe.stream()
        .set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // A reply that does not come (the backend waits for the rest of a lying message) costs
    // this much, not the default 5 s.
    fe.set_reply_timeout(Duration::from_millis(50));
    // The port's connection is up (its daemon reads the messages) before the first one.
    wait_serving(sw, 0, true);
    let s = Session::prepare(fe, sw.queues(), SIZE).expect("session");
    let mut me = Frontend { s, shrunk: false };
    let mut peers = Vec::new();
    for op in ops.into_iter().take(48) {
        run(&mut me, &mut peers, op);
    }
    let _ = me.s.fe.stream().shutdown(std::net::Shutdown::Both);
    drop(me);
    drop(peers);
    // Every port must be free again (bounded: a hang is a finding), the server still up.
    for port in 0..sw.sockets.len() {
        wait_serving(sw, port, false);
    }
});
