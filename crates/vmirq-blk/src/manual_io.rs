//! A storage context whose operations finish only when a test says so (feature
//! `test-utils`): it makes asynchronous completion deterministic, so tests can hold requests
//! in flight, finish them one by one, fail them, and check what the engine does meanwhile.
//!
//! Data goes to a RAM disk when an operation is finished, so reads return what earlier
//! finished writes stored.

use crate::storage::{Disk, Done, Io, QueueIo, RamDisk};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

struct State {
    started: VecDeque<(u32, Io)>,
    finished: Vec<Done>,
    disk: Box<dyn QueueIo>,
    waits: usize,
}

/// The storage context handed to the engine.
pub struct ManualIo {
    state: Arc<Mutex<State>>,
    capacity: usize,
}

/// The test's side: finish operations, look at what is in flight.
#[derive(Clone)]
pub struct ManualIoHandle(Arc<Mutex<State>>);

/// A manual storage context of `capacity` operations over a RAM disk of `disk_bytes`.
///
/// # Panics
/// When the RAM disk cannot be created (test setup).
#[must_use]
pub fn manual_io(capacity: usize, disk_bytes: u64) -> (ManualIo, ManualIoHandle) {
    let disk = RamDisk::new(disk_bytes).expect("ram disk");
    manual_io_on(&disk, capacity)
}

/// A manual storage context of `capacity` operations over `disk` (several contexts over one
/// disk see each other's finished writes, as a restarted backend sees the image).
///
/// # Panics
/// When the disk cannot open a queue (test setup).
#[must_use]
pub fn manual_io_on(disk: &dyn Disk, capacity: usize) -> (ManualIo, ManualIoHandle) {
    let queue = disk
        .open_queue(u32::try_from(capacity).unwrap_or(u32::MAX))
        .expect("queue");
    let state = Arc::new(Mutex::new(State {
        started: VecDeque::new(),
        finished: Vec::new(),
        disk: queue,
        waits: 0,
    }));
    (
        ManualIo {
            state: Arc::clone(&state),
            capacity,
        },
        ManualIoHandle(state),
    )
}

impl State {
    fn finish(&mut self, n: usize, fail: bool) -> usize {
        let mut count = 0;
        while count < n {
            let Some((tag, io)) = self.started.pop_front() else {
                break;
            };
            if fail {
                self.finished.push(Done { tag, ok: false });
            } else {
                self.disk.start(tag, io);
                self.disk.reap(&mut self.finished);
            }
            count += 1;
        }
        count
    }
}

impl ManualIoHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// Finish the `n` oldest operations successfully; returns how many there were.
    #[must_use]
    pub fn finish(&self, n: usize) -> usize {
        self.lock().finish(n, false)
    }
    /// Fail the `n` oldest operations; returns how many there were.
    #[must_use]
    pub fn fail(&self, n: usize) -> usize {
        self.lock().finish(n, true)
    }
    /// Operations started and not finished.
    #[must_use]
    pub fn started(&self) -> usize {
        self.lock().started.len()
    }
    /// How often the engine waited for everything in flight (reset, teardown).
    #[must_use]
    pub fn waits(&self) -> usize {
        self.lock().waits
    }
}

impl QueueIo for ManualIo {
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn start(&mut self, tag: u32, io: Io) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            (tag as usize) < self.capacity && s.started.iter().all(|(t, _)| *t != tag),
            "engine broke the QueueIo contract: tag {tag} out of range or in use"
        );
        s.started.push_back((tag, io));
    }
    fn submit(&mut self) {}
    fn reap(&mut self, done: &mut Vec<Done>) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        done.append(&mut s.finished);
    }
    fn in_flight(&self) -> usize {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.started.len() + s.finished.len()
    }
    fn wait(&mut self, done: &mut Vec<Done>, _timeout_ms: u32) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.waits += 1;
        let n = s.started.len();
        s.finish(n, false);
        done.append(&mut s.finished);
    }
}
