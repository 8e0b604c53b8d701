//! Soak client for `scripts/soak.sh`: mixed verified I/O against `vmirq serve` through the
//! spec-following vhost-user frontend (`vmirq_blk::vhost_frontend`, with the inflight area),
//! reconnecting on its own every so often (alternately clean: GET_VRING_BASE first, and
//! unclean: the socket just closes) and riding out backend restarts (SIGKILL by the script).
//!
//! Every write stores a known pattern per 4 KiB block; every read is compared with what the
//! last completed write of each block stored. Requests in flight never overlap. At the end
//! one JSON line goes to stdout:
//! `{"ops","reads","writes","flushes","bytes","mismatches","errors","clean_reconnects",
//! "unclean_reconnects","backend_losses","marked_at_loss","seconds"}`.
//! `errors` counts everything but the expected disconnects: a status other than OK, a
//! completion for a head not in flight, a request not completed within 30 s, a reconnect
//! that failed for 60 s.
//!
//! `soak_client SOCKET SECONDS RECONNECTS BLOCKS [SEED]`

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vmirq_blk::vhost_frontend::{FrontendConfig, FrontendError, RingBase, VhostFrontend};
use vmirq_blk::virtio::{req, status};

const QUEUES: u16 = 2;
const BLOCK: usize = 4096;
const MAX_BLOCKS_PER_REQ: u64 = 16;
const WAIT: Duration = Duration::from_secs(30);
const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// A request in flight.
#[derive(Debug, Clone, Copy)]
struct Op {
    kind: u32,
    first: u64,
    blocks: u64,
    generation: u64,
}

#[derive(Debug, Default)]
struct Stats {
    ops: u64,
    reads: u64,
    writes: u64,
    flushes: u64,
    bytes: u64,
    mismatches: u64,
    errors: u64,
    clean_reconnects: u64,
    unclean_reconnects: u64,
    backend_losses: u64,
    marked_at_loss: u64,
}

/// Index of block `b` in the per-block tables.
fn ix(b: u64) -> usize {
    usize::try_from(b).expect("block index")
}

/// Content of block `b` after the write of generation `g` (0: never written, zeros).
fn fill(b: u64, g: u64, out: &mut [u8]) {
    if g == 0 {
        out.fill(0);
        return;
    }
    let mut x = (g << 24) ^ b ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

struct Soak {
    f: VhostFrontend,
    socket: PathBuf,
    blocks: u64,
    /// Generation last completed per block.
    model: Vec<u64>,
    /// Blocks covered by requests in flight.
    busy: Vec<bool>,
    pending: Vec<HashMap<u16, Op>>,
    next_generation: u64,
    rng: u64,
    stats: Stats,
}

impl Soak {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Fill queue `q`'s free slots with random reads, writes and flushes.
    fn submit(&mut self, q: usize) {
        let mut buf = vec![0u8; BLOCK * ix(MAX_BLOCKS_PER_REQ)];
        while self.f.free_slots(q) > 0 {
            let pick = self.rand() % 100;
            let blocks = 1 + self.rand() % MAX_BLOCKS_PER_REQ;
            let first = self.rand() % (self.blocks - blocks);
            let range = ix(first)..ix(first + blocks);
            if pick >= 95 {
                let Some(h) = self.f.submit(q, req::FLUSH, 0, &[], 0) else {
                    break;
                };
                self.pending[q].insert(
                    h,
                    Op {
                        kind: req::FLUSH,
                        first: 0,
                        blocks: 0,
                        generation: 0,
                    },
                );
                continue;
            }
            if self.busy[range.clone()].iter().any(|&b| b) {
                break;
            }
            let len = ix(blocks) * BLOCK;
            let (kind, generation) = if pick < 60 {
                self.next_generation += 1;
                let g = self.next_generation;
                for (i, chunk) in buf[..len].chunks_mut(BLOCK).enumerate() {
                    fill(first + i as u64, g, chunk);
                }
                (req::OUT, g)
            } else {
                (req::IN, 0)
            };
            let len_u32 = u32::try_from(len).expect("request length");
            let Some(h) = self.f.submit(q, kind, first * 8, &buf[..len], len_u32) else {
                break;
            };
            self.busy[range].iter_mut().for_each(|b| *b = true);
            self.pending[q].insert(
                h,
                Op {
                    kind,
                    first,
                    blocks,
                    generation,
                },
            );
        }
        let _ = self.f.kick(q);
    }

    /// Reap queue `q`'s completions (waiting for at least one).
    fn reap(&mut self, q: usize) -> Result<(), FrontendError> {
        let done = self.f.wait(q, WAIT)?;
        let mut want = vec![0u8; BLOCK];
        for c in done {
            let Some(op) = self.pending[q].remove(&c.head) else {
                eprintln!("unexpected completion of head {} on queue {q}", c.head);
                self.stats.errors += 1;
                continue;
            };
            self.stats.ops += 1;
            if c.status != status::OK || c.unexpected {
                eprintln!("head {} status {} ({:?})", c.head, c.status, op);
                self.stats.errors += 1;
            }
            for b in op.first..op.first + op.blocks {
                self.busy[ix(b)] = false;
            }
            match op.kind {
                req::OUT => {
                    self.stats.writes += 1;
                    self.stats.bytes += op.blocks * BLOCK as u64;
                    for b in op.first..op.first + op.blocks {
                        self.model[ix(b)] = op.generation;
                    }
                }
                req::IN => {
                    self.stats.reads += 1;
                    self.stats.bytes += op.blocks * BLOCK as u64;
                    for (i, chunk) in c.data.chunks(BLOCK).enumerate() {
                        let b = op.first + i as u64;
                        fill(b, self.model[ix(b)], &mut want);
                        if chunk != want.as_slice() {
                            eprintln!(
                                "block {b}: data mismatch (generation {})",
                                self.model[ix(b)]
                            );
                            self.stats.mismatches += 1;
                        }
                    }
                }
                _ => self.stats.flushes += 1,
            }
        }
        Ok(())
    }

    /// Connect again (retrying while the backend restarts).
    fn reconnect(&mut self, base: RingBase) {
        let deadline = Instant::now() + RECONNECT_FOR;
        loop {
            match self.f.connect(&self.socket, base, RECONNECT_FOR) {
                Ok(()) => return,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("reconnect: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    eprintln!("reconnect failed for {RECONNECT_FOR:?}: {e}");
                    self.stats.errors += 1;
                    std::process::exit(2);
                }
            }
        }
    }

    fn lost_backend(&mut self) {
        self.stats.backend_losses += 1;
        let marked: usize = (0..QUEUES).map(|q| self.f.inflight_marked(q).len()).sum();
        self.stats.marked_at_loss += u64::try_from(marked).unwrap_or(u64::MAX);
        eprintln!("backend lost with {marked} requests marked in flight; reconnecting");
        self.reconnect(RingBase::UsedIdx);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: soak_client SOCKET SECONDS RECONNECTS BLOCKS [SEED]");
        std::process::exit(1);
    }
    let socket = PathBuf::from(&args[1]);
    let seconds: u64 = args[2].parse().expect("SECONDS");
    let reconnects: u64 = args[3].parse().expect("RECONNECTS");
    let blocks: u64 = args[4].parse().expect("BLOCKS");
    let seed: u64 = args.get(5).map_or(1, |s| s.parse().expect("SEED"));
    let f = VhostFrontend::new(FrontendConfig {
        queues: QUEUES,
        queue_size: 128,
        max_request_bytes: u32::try_from(BLOCK * ix(MAX_BLOCKS_PER_REQ)).expect("size"),
        event_idx: true,
    })
    .expect("frontend");
    let mut s = Soak {
        f,
        socket,
        blocks,
        model: vec![0; ix(blocks)],
        busy: vec![false; ix(blocks)],
        pending: vec![HashMap::new(); usize::from(QUEUES)],
        next_generation: 0,
        rng: seed | 1,
        stats: Stats::default(),
    };
    s.reconnect(RingBase::UsedIdx);
    let start = Instant::now();
    let total = Duration::from_secs(seconds);
    let every = total / u32::try_from(reconnects + 1).unwrap_or(1);
    let mut next_reconnect = start + every;
    while start.elapsed() < total {
        for q in 0..usize::from(QUEUES) {
            s.submit(q);
            if s.pending[q].is_empty() {
                continue;
            }
            match s.reap(q) {
                Ok(()) => {}
                Err(FrontendError::Disconnected) => s.lost_backend(),
                Err(e) => {
                    eprintln!("queue {q}: {e}");
                    s.stats.errors += 1;
                    println!("{}", json(&s.stats, start.elapsed()));
                    std::process::exit(2);
                }
            }
        }
        if Instant::now() >= next_reconnect
            && s.stats.clean_reconnects + s.stats.unclean_reconnects < reconnects
        {
            next_reconnect += every;
            if (s.stats.clean_reconnects + s.stats.unclean_reconnects) % 2 == 0 {
                // Clean: the backend finishes what it started before reporting the ring.
                match s.f.stop() {
                    Ok(_) => {
                        s.stats.clean_reconnects += 1;
                        s.reconnect(RingBase::Reported);
                    }
                    Err(_) => s.lost_backend(),
                }
            } else {
                s.f.drop_connection();
                s.stats.unclean_reconnects += 1;
                s.reconnect(RingBase::UsedIdx);
            }
        }
    }
    // Let everything in flight finish.
    for q in 0..usize::from(QUEUES) {
        while !s.pending[q].is_empty() {
            match s.reap(q) {
                Ok(()) => {}
                Err(FrontendError::Disconnected) => s.lost_backend(),
                Err(e) => {
                    eprintln!("queue {q}: {e} with {} in flight", s.pending[q].len());
                    s.stats.errors += 1;
                    break;
                }
            }
        }
    }
    s.f.drop_connection();
    println!("{}", json(&s.stats, start.elapsed()));
}

fn json(s: &Stats, elapsed: Duration) -> String {
    format!(
        "{{\"ops\":{},\"reads\":{},\"writes\":{},\"flushes\":{},\"bytes\":{},\"mismatches\":{},\"errors\":{},\"clean_reconnects\":{},\"unclean_reconnects\":{},\"backend_losses\":{},\"marked_at_loss\":{},\"seconds\":{:.1}}}",
        s.ops, s.reads, s.writes, s.flushes, s.bytes, s.mismatches, s.errors,
        s.clean_reconnects, s.unclean_reconnects, s.backend_losses, s.marked_at_loss,
        elapsed.as_secs_f64()
    )
}
