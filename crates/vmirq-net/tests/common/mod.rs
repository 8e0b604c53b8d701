//! The server under test in a thread of the test process, on sockets in a temp dir, stopped
//! and joined (bounded) when dropped.

#![allow(dead_code)]

pub mod mock_fabric;
pub mod raw;
pub mod slow_mix;

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmirq_net::server::{Server, ServerConfig, ServerHandle};

pub struct Running {
    pub handle: ServerHandle,
    pub sockets: Vec<PathBuf>,
    thread: Option<JoinHandle<vmirq_net::server::Result<()>>>,
    _dir: tempfile::TempDir,
}

pub fn start(ports: usize, tweak: impl FnOnce(&mut ServerConfig)) -> Running {
    let dir = tempfile::Builder::new()
        .prefix("vmirq-net-")
        .tempdir()
        .expect("temp dir");
    let sockets: Vec<PathBuf> = (0..ports)
        .map(|i| dir.path().join(format!("port{i}.sock")))
        .collect();
    let mut cfg = ServerConfig::new(sockets.clone());
    tweak(&mut cfg);
    let server = Server::new(cfg).expect("server starts");
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    Running {
        handle,
        sockets,
        thread: Some(thread),
        _dir: dir,
    }
}

impl Running {
    /// Wait (bounded) until port `p` has no frontend.
    pub fn wait_idle(&self, p: usize) {
        let t = Instant::now();
        while self.handle.serving(p) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "port {p} never went idle"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait (bounded) until port `p`'s frontend is attached to the switch: its worker
    /// hands the vrings over after the connection is set up, and a frame switched before
    /// that is dropped for want of a destination.
    pub fn wait_attached(&self, p: usize) {
        let t = Instant::now();
        while !self.handle.attached(p) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "port {p} never attached"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn stop(mut self) {
        self.handle.stop();
        let t = self.thread.take().expect("running");
        let start = Instant::now();
        while !t.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "server did not stop"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        t.join()
            .expect("server thread")
            .expect("server ran cleanly");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Send one control command on queue `ctrl` of a raw frontend session: the command's bytes
/// in a readable descriptor, one writable ack byte; returns (used length, ack byte).
pub fn ctrl_command(
    s: &mut vmirq_vhost::raw_frontend::Session,
    ctrl: u16,
    bytes: &[u8],
) -> (u32, u8) {
    let ack = s.queues[usize::from(ctrl)].guest.push_command(bytes);
    s.kick(ctrl).expect("kick");
    let used = s.wait_used(ctrl, 1, Duration::from_secs(5));
    assert_eq!(used.len(), 1, "command answered");
    (used[0].1, s.queues[usize::from(ctrl)].guest.byte_at(ack))
}

/// A client run ended clean: no frame lost, none malformed, no device fault (the run's
/// summary goes to stderr either way).
pub fn assert_clean(r: &vmirq_netload::run::Report) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{}", r.summary());
    assert_eq!(r.lost(), 0, "lost frames: {}", r.summary());
    assert_eq!(r.frame_errors.total(), 0, "frame errors: {}", r.summary());
    assert_eq!(r.faults.total(), 0, "device faults: {}", r.summary());
}
