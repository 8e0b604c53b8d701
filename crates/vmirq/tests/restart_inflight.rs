//! Restart without losing I/O: `vmirq serve` is killed with SIGKILL while requests are in
//! flight and started again on the same socket; a frontend that follows the vhost-user
//! inflight protocol (`vmirq_blk::vhost_frontend`: area kept across connections, rings
//! restarted from the used index as QEMU does, or from the available index) reconnects, and
//! every request completes exactly once with the right data.
//!
//! The kill lands while the backend has heads marked in its inflight area (the frontend
//! watches its own mapping of the area and kills as soon as marks appear); a kill that
//! happens to land after everything completed still checks exactly-once and data, and the
//! test requires at least [`KILLS_WITH_MARKS`] kills that caught marked requests.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vmirq_blk::vhost_frontend::{Completion, FrontendConfig, RingBase, VhostFrontend};
use vmirq_blk::virtio::{req, status};

const QUEUES: u16 = 2;
const QUEUE_SIZE: u16 = 128;
/// Bytes per request: large, so the backend is busy for a while after taking a batch.
const BLOCK: u32 = 256 << 10;
const BLOCKS: u64 = 128;
const BLOCKS_USIZE: usize = 128;
const MAX_ATTEMPTS: u64 = 20;
const KILLS_WITH_MARKS: u64 = 3;
const T: Duration = Duration::from_secs(20);
const POLICIES: [&str; 4] = ["none", "vic", "count:usecs=50,frames=32", "dim"];

/// `vmirq serve`, killed when dropped.
struct Serve(Child);

impl Serve {
    fn start(sock: &Path, image: &Path, direct: bool, moderation: &str) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmirq"));
        cmd.args([
            "serve",
            "--queues",
            "2",
            "--queue-size",
            "128",
            "--moderation",
        ])
        .arg(moderation)
        .arg("--socket")
        .arg(sock)
        .arg("--image")
        .arg(image)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if direct {
            cmd.arg("--direct");
        }
        Self(cmd.spawn().expect("spawn vmirq serve"))
    }

    fn sigkill(mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("reap");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Deterministic content of block `b` written in round `round`.
fn pattern(round: u64, b: u64) -> Vec<u8> {
    let mut x = (round << 32) ^ b ^ 0x9E37_79B9_7F4A_7C15;
    let mut out = vec![0u8; BLOCK as usize];
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}

fn idx(b: u64) -> usize {
    usize::try_from(b).expect("block index")
}

fn sector(b: u64) -> u64 {
    b * u64::from(BLOCK) / 512
}

/// Wait until every request in `pending` completed, checking each completion.
fn drain(
    f: &mut VhostFrontend,
    pending: &mut [HashMap<u16, u64>],
    mut on: impl FnMut(u64, &Completion),
) {
    let deadline = Instant::now() + T;
    for (q, p) in pending.iter_mut().enumerate() {
        while !p.is_empty() {
            assert!(Instant::now() < deadline, "requests never completed: {p:?}");
            for c in f.wait(q, T).expect("completions after the restart") {
                assert!(
                    !c.unexpected,
                    "head {} completed twice (or never submitted)",
                    c.head
                );
                assert_eq!(c.status, status::OK, "head {}", c.head);
                let b = p.remove(&c.head).expect("pending head");
                on(b, &c);
            }
        }
    }
}

/// Image file for the test; O_DIRECT when the filesystem supports it (slower storage keeps
/// requests in flight longer).
fn image(dir: &Path) -> (PathBuf, bool) {
    let path = dir.join("disk.img");
    std::fs::write(&path, vec![0u8; BLOCKS_USIZE * BLOCK as usize]).expect("image");
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .is_ok()
    };
    (path, direct)
}

#[test]
fn sigkilled_vmirq_serve_restarts_and_completes_every_request_exactly_once() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let sock = dir.path().join("v.sock");
    let (img, direct) = image(dir.path());
    let mut f = VhostFrontend::new(FrontendConfig {
        queues: QUEUES,
        queue_size: QUEUE_SIZE,
        max_request_bytes: BLOCK,
        event_idx: true,
    })
    .expect("frontend");
    let mut serve = Serve::start(&sock, &img, direct, POLICIES[0]);
    f.connect(&sock, RingBase::UsedIdx, T).expect("connect");
    // What each block holds: the round that last wrote it (0: zeros).
    let mut model = vec![None::<u64>; BLOCKS_USIZE];
    let mut caught = 0u64;
    let mut attempts = 0u64;
    while caught < KILLS_WITH_MARKS && attempts < MAX_ATTEMPTS {
        attempts += 1;
        let round = attempts;
        // Fill every free slot of both queues with writes to distinct blocks.
        let mut pending: Vec<HashMap<u16, u64>> = vec![HashMap::new(); QUEUES as usize];
        let mut b = (round * 17) % BLOCKS;
        for (q, p) in pending.iter_mut().enumerate() {
            while f.free_slots(q) > 0 && p.len() < BLOCKS_USIZE / 2 - 1 {
                let head = f
                    .submit(q, req::OUT, sector(b), &pattern(round, b), BLOCK)
                    .expect("slot");
                p.insert(head, b);
                b = (b + 1) % BLOCKS;
            }
            f.kick(q).expect("kick");
        }
        // Kill as soon as the backend has taken requests and not completed them all.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (0..QUEUES).all(|q| f.inflight_marked(q).is_empty()) && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        serve.sigkill();
        let marked: usize = (0..QUEUES).map(|q| f.inflight_marked(q).len()).sum();
        if marked > 0 {
            caught += 1;
        }
        // Start again (another policy) and reconnect with the same area and rings.
        let policy = POLICIES[usize::try_from(attempts).unwrap_or(0) % POLICIES.len()];
        serve = Serve::start(&sock, &img, direct, policy);
        let base = if attempts % 2 == 0 {
            RingBase::AvailIdx
        } else {
            RingBase::UsedIdx
        };
        f.connect(&sock, base, T).expect("reconnect after SIGKILL");
        drain(&mut f, &mut pending, |b, _| model[idx(b)] = Some(round));
        // Nothing else arrives: no request completes twice.
        std::thread::sleep(Duration::from_millis(100));
        for q in 0..QUEUES as usize {
            let extra = f.completions(q);
            assert!(
                extra.is_empty(),
                "completions after all were done: {extra:?}"
            );
        }
        for q in 0..QUEUES {
            assert!(f.inflight_marked(q).is_empty(), "marks left on queue {q}");
        }
        eprintln!(
            "round {round}: {marked} marked at SIGKILL, restarted with {policy}, base {base:?}"
        );
    }
    // Every block reads back what was written last.
    let mut reads: Vec<HashMap<u16, u64>> = vec![HashMap::new(); QUEUES as usize];
    let mut next = 0u64;
    while next < BLOCKS || reads.iter().any(|r| !r.is_empty()) {
        for (q, r) in reads.iter_mut().enumerate() {
            while next < BLOCKS && f.free_slots(q) > 0 {
                let head = f
                    .submit(q, req::IN, sector(next), &[], BLOCK)
                    .expect("slot");
                r.insert(head, next);
                next += 1;
            }
            f.kick(q).expect("kick");
        }
        drain(&mut f, &mut reads, |b, c| {
            let want = model[idx(b)].map_or_else(|| vec![0u8; BLOCK as usize], |r| pattern(r, b));
            assert!(
                c.data == want,
                "block {b} does not hold round {:?}",
                model[idx(b)]
            );
        });
    }
    assert!(
        caught >= KILLS_WITH_MARKS,
        "only {caught} of {attempts} SIGKILLs caught requests in flight (O_DIRECT: {direct})"
    );
    f.drop_connection();
    drop(serve);
}
