//! What the vhost-user message fuzz targets (`vhost_messages`, `net_messages`) attach and
//! send alike: file descriptors of every kind ([`Fd`], [`make_fd`]), and memory tables with
//! fuzzed guest addresses, sizes, frontend addresses, offsets and memfd sizes, sent as
//! SET_MEM_TABLE (with a fuzzed or the true region count) or as one ADD_MEM_REG
//! ([`send_regions`]).

use arbitrary::Arbitrary;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use vmirq_vhost::raw_frontend::{
    mem_table, memfd, req, RawFrontend, Session, FLAG_NEED_REPLY, VA_BASE, VERSION_1,
};

/// A descriptor to attach to a message.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Fd {
    /// A memfd of this many 4 KiB pages.
    Memfd(u8),
    EventFd,
    DevNull,
    Socket,
    /// A queue's own call eventfd (the queue index modulo the session's queues).
    Call(u8),
}

/// Descriptors kept open until the message that carries them is sent.
pub type Keep = Vec<Box<dyn AsRawFd>>;

/// Make the descriptor (kept open in `keep`).
pub fn make_fd(fd: Fd, s: &Session, keep: &mut Keep) -> Option<RawFd> {
    let owner: Box<dyn AsRawFd> = match fd {
        Fd::Memfd(pages) => Box::new(memfd(u64::from(pages) * 4096).ok()?),
        Fd::EventFd => Box::new(vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).ok()?),
        Fd::DevNull => Box::new(File::open("/dev/null").ok()?),
        Fd::Socket => Box::new(UnixStream::pair().ok()?.0),
        Fd::Call(q) => {
            let q = usize::from(q) % s.queues.len().max(1);
            return s.queues.get(q).map(|q| q.call.as_raw_fd());
        }
    };
    let raw = owner.as_raw_fd();
    keep.push(owner);
    Some(raw)
}

/// A frontend address.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Addr {
    /// Frontend address of a guest address in region 0.
    Guest(u32),
    /// Anything.
    Raw(u64),
}

impl Addr {
    /// The address.
    pub fn resolve(self) -> u64 {
        match self {
            Addr::Guest(g) => VA_BASE + u64::from(g % (8 << 20)),
            Addr::Raw(x) => x,
        }
    }
}

/// One memory region of a table (sizes in 4 KiB pages).
#[derive(Arbitrary, Debug)]
pub struct Region {
    gpa: u32,
    pages: u16,
    va: Addr,
    offset_pages: u8,
    file_pages: u8,
}

/// Send up to four of `regions` as SET_MEM_TABLE (the region count `count`, or the true one
/// when `count % 4 == 0`), or the first as ADD_MEM_REG (`add`). The memfds stay open in
/// `keep` until the input ends.
pub fn send_regions(fe: &RawFrontend, count: u8, regions: &[Region], add: bool, keep: &mut Keep) {
    let mut entries = Vec::new();
    let mut fds = Vec::new();
    for r in regions.iter().take(4) {
        let Ok(f) = memfd(u64::from(r.file_pages) * 4096) else {
            continue;
        };
        fds.push(f.as_raw_fd());
        keep.push(Box::new(f));
        entries.push((
            u64::from(r.gpa) * 4096,
            u64::from(r.pages) * 4096,
            r.va.resolve(),
            u64::from(r.offset_pages) * 4096,
        ));
    }
    if add {
        let mut p = 0u64.to_le_bytes().to_vec();
        if let Some(&e) = entries.first() {
            p.extend_from_slice(&mem_table(0, &[e])[8..]);
        }
        let _ = fe.send(
            req::ADD_MEM_REG,
            VERSION_1 | FLAG_NEED_REPLY,
            &p,
            &fds[..fds.len().min(1)],
        );
    } else {
        let n = if count % 4 == 0 {
            entries.len() as u32
        } else {
            u32::from(count)
        };
        let _ = fe.send(
            req::SET_MEM_TABLE,
            VERSION_1 | FLAG_NEED_REPLY,
            &mem_table(n, &entries),
            &fds,
        );
    }
}
