//! The memory-table part of the vhost-user message fuzz targets (`vhost_messages`,
//! `net_messages`): regions with fuzzed guest addresses, sizes, frontend addresses, offsets
//! and memfd sizes, sent as SET_MEM_TABLE (with a fuzzed or the true region count) or as one
//! ADD_MEM_REG.

use arbitrary::Arbitrary;
use std::os::fd::AsRawFd;
use vmirq_vhost::raw_frontend::{
    mem_table, memfd, req, RawFrontend, FLAG_NEED_REPLY, VA_BASE, VERSION_1,
};

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
pub fn send_regions(
    fe: &RawFrontend,
    count: u8,
    regions: &[Region],
    add: bool,
    keep: &mut Vec<Box<dyn AsRawFd>>,
) {
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
