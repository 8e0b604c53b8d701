//! Shared test support: the in-process server and the libblkio client.
#![allow(dead_code, missing_docs)]

pub mod client;

use std::path::PathBuf;
use std::thread::JoinHandle;
use vmirq_blk::{DiskSpec, Server, ServerHandle, ServerOptions};

/// A server running in a background thread on a fresh socket.
pub struct Running {
    pub socket: PathBuf,
    pub handle: ServerHandle,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Start a server; `tweak` adjusts the options.
    pub fn start(disk: DiskSpec, tweak: impl FnOnce(&mut ServerOptions)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("blk.sock");
        let mut opts = ServerOptions::new(&socket, disk);
        tweak(&mut opts);
        let server = Server::new(opts.validate().expect("valid options")).expect("server");
        let handle = server.handle();
        let thread = std::thread::spawn(move || server.run().expect("server run"));
        // The socket exists once the listener is bound.
        for _ in 0..500 {
            if socket.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Self {
            socket,
            handle,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Stop the server and wait for it.
    pub fn stop(mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

/// Report a test that cannot run here. Straight to stderr: the test harness hides
/// `eprintln!` output of passing tests, which would make the skip silent.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    // Nothing useful can be done if stderr itself fails.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// Deterministic test pattern for block `i` of a run seeded by `seed`.
pub fn pattern(seed: u64, i: u64, out: &mut [u8]) {
    let mut x = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// FNV-1a checksum.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
