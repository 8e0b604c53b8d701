//! The checks the guard makes on each frontend message, and the little state they need
//! (ownership, negotiated REPLY_ACK, memory regions, each vring's size and ring addresses).
//!
//! rust-vmm's `vhost` already checks the framing (header version and flags, payload sizes,
//! descriptor counts, ring alignment, vring indices of most messages). What it leaves out,
//! and what is checked here:
//! - messages that change the device before SET_OWNER (QEMU's vhost-user backend init sends
//!   GET_FEATURES, GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES, GET_QUEUE_NUM,
//!   GET_MAX_MEM_SLOTS and, with BACKEND_REQ, SET_BACKEND_REQ_FD before SET_OWNER; those, and
//!   GET_CONFIG, are allowed);
//! - SET_VRING_NUM that is not a power of two (vhost-user-backend acks it and keeps the old
//!   size, so the backend would use rings larger than the frontend laid out);
//! - SET_VRING_BASE above 16 bits and SET_VRING_KICK/CALL/ERR with bits other than the index
//!   and the no-fd flag (both silently truncated by `vhost`);
//! - memory regions whose file is shorter than `mmap_offset + memory_size` (mapped anyway;
//!   the first access past the end of the file kills the process with SIGBUS), and regions
//!   whose frontend addresses overlap (ring addresses would translate ambiguously);
//! - rings that do not lie wholly inside one memory region (checked at SET_VRING_ADDR once
//!   the size is known, and again at SET_VRING_KICK, when the ring starts).

use super::wire::{le_u64, Message, FLAG_REPLY};
use std::fs::File;

use super::wire::req as code;

/// `VHOST_USER_PROTOCOL_F_REPLY_ACK`.
const PROTOCOL_REPLY_ACK: u64 = 1 << 3;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (a virtio feature bit of SET_FEATURES).
const F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// Most regions in one SET_MEM_TABLE (`vhost`'s limit of descriptors per message).
const MAX_REGIONS: usize = 32;
/// Bytes of one region entry (guest address, size, frontend address, mmap offset).
const REGION_LEN: usize = 32;
/// Bit 8 of a vring fd message: no descriptor attached.
const NO_FD: u64 = 0x100;

/// What the device allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Queues of the device.
    pub queues: u16,
    /// Largest queue size.
    pub max_queue_size: u16,
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Header flags other than version 1.
    #[error("message {request} with header flags {flags:#x} (version 1, no reply flag expected)")]
    Header {
        /// Request code.
        request: u32,
        /// Flags.
        flags: u32,
    },
    /// A message that changes the device before SET_OWNER.
    #[error("message {0} before SET_OWNER")]
    BeforeOwner(u32),
    /// Wrong number of attached descriptors.
    #[error("message {request} carries {got} file descriptors, expected {want}")]
    Fds {
        /// Request code.
        request: u32,
        /// Attached.
        got: usize,
        /// Expected.
        want: usize,
    },
    /// Wrong payload size.
    #[error("message {request} has a {got}-byte payload, expected {want}")]
    Size {
        /// Request code.
        request: u32,
        /// Payload bytes.
        got: usize,
        /// Expected bytes.
        want: usize,
    },
    /// A vring index outside the device's queues (or extra bits in the index field).
    #[error("message {request} names vring {index}, the device has {queues}")]
    VringIndex {
        /// Request code.
        request: u32,
        /// The index field.
        index: u64,
        /// Queues of the device.
        queues: u16,
    },
    /// SET_VRING_NUM not a power of two between 1 and the maximum.
    #[error("queue size {num} is not a power of two from 1 to {max}")]
    QueueSize {
        /// Requested size.
        num: u32,
        /// Largest size.
        max: u16,
    },
    /// SET_VRING_BASE above 16 bits.
    #[error("vring base {0} does not fit 16 bits")]
    Base(u32),
    /// SET_MEM_TABLE with no or too many regions.
    #[error("{0} memory regions (1 to {MAX_REGIONS})")]
    RegionCount(u64),
    /// A region of size 0, or whose end overflows.
    #[error("memory region {0} is empty or wraps around")]
    RegionBounds(usize),
    /// A region's file cannot be measured.
    #[error("cannot read the size of memory region {0}'s file")]
    FileSize(usize),
    /// A region extends past the end of its file.
    #[error("memory region {index} ({size} bytes at file offset {offset}) extends past the end of its {file_len}-byte file")]
    PastEof {
        /// Region index in the message.
        index: usize,
        /// Region size.
        size: u64,
        /// mmap offset.
        offset: u64,
        /// File size.
        file_len: u64,
    },
    /// Two regions overlap in guest or frontend addresses.
    #[error("memory regions overlap ({what} addresses {a:#x} and {b:#x})")]
    Overlap {
        /// "guest" or "frontend".
        what: &'static str,
        /// Start of one region.
        a: u64,
        /// Start of the other.
        b: u64,
    },
    /// A ring not wholly inside one memory region.
    #[error("{ring} ring of vring {index} ({len} bytes at frontend address {addr:#x}) is not inside guest memory")]
    RingOutside {
        /// Vring index.
        index: u32,
        /// "descriptor", "available" or "used".
        ring: &'static str,
        /// Frontend address.
        addr: u64,
        /// Ring size in bytes.
        len: u64,
    },
}

/// A memory region as the frontend described it.
#[derive(Debug, Clone, Copy)]
struct Region {
    gpa: u64,
    size: u64,
    va: u64,
}

/// What the guard remembers of one vring.
#[derive(Debug, Clone, Copy, Default)]
struct Vring {
    /// Size from SET_VRING_NUM (`None`: not set yet).
    num: Option<u16>,
    /// Frontend addresses of the descriptor table, available and used ring.
    addrs: Option<[u64; 3]>,
}

/// The guard's view of one connection.
#[derive(Debug)]
pub struct Rules {
    limits: Limits,
    owner: bool,
    reply_ack: bool,
    /// SET_FEATURES acked VHOST_USER_F_PROTOCOL_FEATURES.
    protocol_features_acked: bool,
    /// The last SET_VRING_ENABLE of each vring sent before that ack, not yet applied.
    early_enable: Vec<Option<u32>>,
    regions: Vec<Region>,
    vrings: Vec<Vring>,
}

impl Rules {
    /// A fresh connection.
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            owner: false,
            reply_ack: false,
            protocol_features_acked: false,
            early_enable: vec![None; usize::from(limits.queues)],
            regions: Vec::new(),
            vrings: vec![Vring::default(); usize::from(limits.queues)],
        }
    }

    /// Whether REPLY_ACK was negotiated (a refused message with NEED_REPLY gets a failure ack).
    #[must_use]
    pub fn reply_ack(&self) -> bool {
        self.reply_ack
    }

    /// Whether `msg` (already [`Rules::check`]ed) is a SET_VRING_ENABLE sent before SET_FEATURES
    /// acked VHOST_USER_F_PROTOCOL_FEATURES; if so it is remembered for
    /// [`Rules::after_forward`]. QEMU 7.2's vhost-user-net sends the rings' enables only
    /// then (`peer_attach`, when the card is realized and when the guest's driver sets
    /// DRIVER_OK), before SET_FEATURES; rust-vmm's handler refuses such a message and drops
    /// the connection, and DPDK's vhost library keeps the state. So the guard answers it
    /// itself (a success ack when asked for) and hands the handler the last enable of each
    /// ring once PROTOCOL_FEATURES is acked and the ring has its kick fd.
    pub fn early_vring_enable(&mut self, msg: &Message) -> bool {
        if msg.request != code::SET_VRING_ENABLE || self.protocol_features_acked {
            return false;
        }
        if let Some(slot) = self.early_enable.get_mut(msg.u32_at(0) as usize) {
            *slot = Some(msg.u32_at(4));
        }
        true
    }

    /// A message for the handler right after `msg` was forwarded: the remembered early
    /// enable of a ring whose SET_VRING_KICK this is (see [`Rules::early_vring_enable`]).
    pub fn after_forward(&mut self, msg: &Message) -> Option<Message> {
        if msg.request != code::SET_VRING_KICK || !self.protocol_features_acked {
            return None;
        }
        let index = u32::try_from(msg.u64_at(0) & !NO_FD).ok()?;
        let enable = self.early_enable.get_mut(index as usize)?.take()?;
        let mut payload = index.to_le_bytes().to_vec();
        payload.extend_from_slice(&enable.to_le_bytes());
        Some(Message {
            request: code::SET_VRING_ENABLE,
            flags: 1,
            payload,
            files: Vec::new(),
        })
    }

    /// Check `msg`, and remember what it sets.
    ///
    /// # Errors
    /// The rule the message breaks.
    pub fn check(&mut self, msg: &Message) -> Result<(), Refusal> {
        let r = msg.request;
        if msg.flags & 0x3 != 1 || msg.flags & FLAG_REPLY != 0 {
            return Err(Refusal::Header {
                request: r,
                flags: msg.flags,
            });
        }
        let before_owner_ok = matches!(
            r,
            code::GET_FEATURES
                | code::SET_OWNER
                | code::GET_PROTOCOL_FEATURES
                | code::SET_PROTOCOL_FEATURES
                | code::GET_QUEUE_NUM
                | code::GET_MAX_MEM_SLOTS
                | code::SET_BACKEND_REQ_FD
                | code::GET_CONFIG
        );
        if !self.owner && !before_owner_ok {
            return Err(Refusal::BeforeOwner(r));
        }
        if !takes_fds(r) && !msg.files.is_empty() {
            return Err(Refusal::Fds {
                request: r,
                got: msg.files.len(),
                want: 0,
            });
        }
        match r {
            code::SET_OWNER => self.owner = true,
            code::RESET_OWNER => {
                self.owner = false;
                self.protocol_features_acked = false;
                self.early_enable.fill(None);
            }
            code::SET_FEATURES => {
                size(msg, 8)?;
                self.protocol_features_acked = msg.u64_at(0) & F_PROTOCOL_FEATURES != 0;
            }
            code::SET_PROTOCOL_FEATURES => {
                size(msg, 8)?;
                self.reply_ack = msg.u64_at(0) & PROTOCOL_REPLY_ACK != 0;
            }
            code::SET_VRING_NUM => self.set_vring_num(msg)?,
            code::SET_VRING_ADDR => self.set_vring_addr(msg)?,
            code::SET_VRING_BASE | code::GET_VRING_BASE | code::SET_VRING_ENABLE => {
                size(msg, 8)?;
                self.vring_index(r, u64::from(msg.u32_at(0)))?;
                let num = msg.u32_at(4);
                if r == code::SET_VRING_BASE && num > u32::from(u16::MAX) {
                    return Err(Refusal::Base(num));
                }
            }
            code::SET_VRING_KICK | code::SET_VRING_CALL | code::SET_VRING_ERR => {
                size(msg, 8)?;
                let v = msg.u64_at(0);
                let index = self.vring_index(r, v & !NO_FD)?;
                fds(msg, usize::from(v & NO_FD == 0))?;
                if r == code::SET_VRING_KICK {
                    self.check_rings(index)?;
                }
            }
            code::SET_MEM_TABLE => self.set_mem_table(msg)?,
            code::ADD_MEM_REG => self.add_mem_reg(msg)?,
            code::REM_MEM_REG => {
                size(msg, 8 + REGION_LEN)?;
                let gpa = msg.u64_at(8);
                self.regions.retain(|g| g.gpa != gpa);
            }
            _ => {}
        }
        Ok(())
    }

    fn vring_index(&self, request: u32, index: u64) -> Result<u32, Refusal> {
        match u32::try_from(index) {
            Ok(i) if i < u32::from(self.limits.queues) => Ok(i),
            _ => Err(Refusal::VringIndex {
                request,
                index,
                queues: self.limits.queues,
            }),
        }
    }

    fn set_vring_num(&mut self, msg: &Message) -> Result<(), Refusal> {
        size(msg, 8)?;
        let index = self.vring_index(msg.request, u64::from(msg.u32_at(0)))?;
        let num = msg.u32_at(4);
        let max = self.limits.max_queue_size;
        let size = match u16::try_from(num) {
            Ok(n) if n.is_power_of_two() && n <= max => n,
            _ => return Err(Refusal::QueueSize { num, max }),
        };
        self.vrings[index as usize].num = Some(size);
        if self.vrings[index as usize].addrs.is_some() {
            self.check_rings(index)?;
        }
        Ok(())
    }

    fn set_vring_addr(&mut self, msg: &Message) -> Result<(), Refusal> {
        // index u32, flags u32, descriptor, used, available, log (u64 each).
        size(msg, 40)?;
        let index = self.vring_index(msg.request, u64::from(msg.u32_at(0)))?;
        let (desc, used, avail) = (msg.u64_at(8), msg.u64_at(16), msg.u64_at(24));
        self.vrings[index as usize].addrs = Some([desc, avail, used]);
        self.check_rings(index)
    }

    /// Each ring of vring `index` lies wholly inside one region, at the vring's size (at
    /// least its first entry while the size is not set yet).
    fn check_rings(&self, index: u32) -> Result<(), Refusal> {
        let v = self.vrings[index as usize];
        let Some([desc, avail, used]) = v.addrs else {
            return Ok(());
        };
        let n = u64::from(v.num.unwrap_or(1));
        // With EVENT_IDX: used_event after the available ring, avail_event after the used.
        let rings = [
            ("descriptor", desc, 16 * n),
            ("available", avail, 6 + 2 * n),
            ("used", used, 6 + 8 * n),
        ];
        for (ring, addr, len) in rings {
            let inside = self.regions.iter().any(|g| {
                addr >= g.va
                    && addr
                        .checked_add(len)
                        .is_some_and(|end| end <= g.va.saturating_add(g.size))
            });
            if !inside {
                return Err(Refusal::RingOutside {
                    index,
                    ring,
                    addr,
                    len,
                });
            }
        }
        Ok(())
    }

    fn set_mem_table(&mut self, msg: &Message) -> Result<(), Refusal> {
        let n = msg.u32_at(0);
        let count = usize::try_from(n).unwrap_or(usize::MAX);
        if count == 0 || count > MAX_REGIONS {
            return Err(Refusal::RegionCount(u64::from(n)));
        }
        size(msg, 8 + count * REGION_LEN)?;
        fds(msg, count)?;
        let mut regions = Vec::with_capacity(count);
        for (i, file) in msg.files.iter().enumerate() {
            let g = region(&msg.payload[8 + i * REGION_LEN..], i, file)?;
            no_overlap(&regions, g)?;
            regions.push(g);
        }
        self.regions = regions;
        Ok(())
    }

    fn add_mem_reg(&mut self, msg: &Message) -> Result<(), Refusal> {
        // u64 padding, then one region.
        size(msg, 8 + REGION_LEN)?;
        fds(msg, 1)?;
        let g = region(&msg.payload[8..], self.regions.len(), &msg.files[0])?;
        no_overlap(&self.regions, g)?;
        self.regions.push(g);
        Ok(())
    }
}

/// Messages that may carry descriptors (their counts are checked where they are handled, or
/// by `vhost` for the ones this device does not implement).
fn takes_fds(request: u32) -> bool {
    // SET_LOG_BASE 6, SET_LOG_FD 7, SET_INFLIGHT_FD 32,
    // GPU_SET_SOCKET 33, REM_MEM_REG 38 (one tolerated for compatibility),
    // SET_DEVICE_STATE_FD 42, and the ones checked above.
    matches!(
        request,
        code::SET_MEM_TABLE
            | 6
            | 7
            | code::SET_VRING_KICK
            | code::SET_VRING_CALL
            | code::SET_VRING_ERR
            | code::SET_BACKEND_REQ_FD
            | 32
            | 33
            | code::ADD_MEM_REG
            | code::REM_MEM_REG
            | 42
    )
}

fn size(msg: &Message, want: usize) -> Result<(), Refusal> {
    if msg.payload.len() == want {
        Ok(())
    } else {
        Err(Refusal::Size {
            request: msg.request,
            got: msg.payload.len(),
            want,
        })
    }
}

fn fds(msg: &Message, want: usize) -> Result<(), Refusal> {
    if msg.files.len() == want {
        Ok(())
    } else {
        Err(Refusal::Fds {
            request: msg.request,
            got: msg.files.len(),
            want,
        })
    }
}

/// Parse region entry `index` (32 bytes at the start of `raw`) and check it against its file.
fn region(raw: &[u8], index: usize, file: &File) -> Result<Region, Refusal> {
    let (gpa, size, va, offset) = (
        le_u64(raw, 0),
        le_u64(raw, 8),
        le_u64(raw, 16),
        le_u64(raw, 24),
    );
    let end = offset.checked_add(size);
    if size == 0 || gpa.checked_add(size).is_none() || va.checked_add(size).is_none() {
        return Err(Refusal::RegionBounds(index));
    }
    let file_len = file.metadata().map_err(|_| Refusal::FileSize(index))?.len();
    match end {
        Some(e) if e <= file_len => {
            if crate::sigbus::unsealed_memfd(file) {
                // Allowed (QEMU's file and hugetlbfs backends cannot be sealed at all): the
                // SIGBUS handler keeps the process alive if the frontend truncates it.
                tracing::warn!(
                    region = index,
                    guest_addr = format_args!("{gpa:#x}"),
                    size,
                    "memory region is a memfd without F_SEAL_SHRINK: the frontend can \
                     truncate it under the backend (the connection is then dropped)"
                );
            }
            Ok(Region { gpa, size, va })
        }
        _ => Err(Refusal::PastEof {
            index,
            size,
            offset,
            file_len,
        }),
    }
}

/// `g` overlaps no region of `regions`, in guest or in frontend addresses.
fn no_overlap(regions: &[Region], g: Region) -> Result<(), Refusal> {
    let overlaps = |a: u64, alen: u64, b: u64, blen: u64| a < b + blen && b < a + alen;
    for r in regions {
        if overlaps(r.gpa, r.size, g.gpa, g.size) {
            return Err(Refusal::Overlap {
                what: "guest",
                a: r.gpa,
                b: g.gpa,
            });
        }
        if overlaps(r.va, r.size, g.va, g.size) {
            return Err(Refusal::Overlap {
                what: "frontend",
                a: r.va,
                b: g.va,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const LIMITS: Limits = Limits {
        queues: 2,
        max_queue_size: 256,
    };

    fn msg(request: u32, payload: Vec<u8>, files: Vec<File>) -> Message {
        Message {
            request,
            flags: 1,
            payload,
            files,
        }
    }

    fn state(index: u32, num: u32) -> Vec<u8> {
        let mut p = index.to_le_bytes().to_vec();
        p.extend_from_slice(&num.to_le_bytes());
        p
    }

    /// A regular file of `len` bytes (a stand-in for a memfd).
    fn file(len: usize) -> File {
        let mut f = tempfile_in_tmp();
        f.write_all(&vec![0u8; len]).expect("write");
        f
    }

    fn tempfile_in_tmp() -> File {
        let path = std::env::temp_dir().join(format!(
            "vmirq-rules-{}-{}",
            std::process::id(),
            crate::clock::now_ns()
        ));
        let f = std::fs::OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .expect("temp file");
        let _ = std::fs::remove_file(&path);
        f
    }

    fn table(regions: &[(u64, u64, u64, u64)]) -> Vec<u8> {
        let mut p = u32::try_from(regions.len())
            .expect("count")
            .to_le_bytes()
            .to_vec();
        p.extend_from_slice(&[0; 4]);
        for &(a, b, c, d) in regions {
            for v in [a, b, c, d] {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        p
    }

    fn owned() -> Rules {
        let mut r = Rules::new(LIMITS);
        r.check(&msg(code::SET_OWNER, vec![], vec![]))
            .expect("owner");
        r
    }

    #[test]
    fn vring_enable_before_protocol_features_are_acked_is_applied_after_the_kick() {
        let mut r = owned();
        let enable = msg(code::SET_VRING_ENABLE, state(1, 1), vec![]);
        r.check(&enable).expect("a valid ring");
        assert!(r.early_vring_enable(&enable), "QEMU's early enable");
        let kick = msg(
            code::SET_VRING_KICK,
            (1u64 | NO_FD).to_le_bytes().to_vec(),
            vec![],
        );
        assert!(r.after_forward(&kick).is_none(), "features not acked yet");
        let with = msg(
            code::SET_FEATURES,
            ((1u64 << 32) | F_PROTOCOL_FEATURES).to_le_bytes().to_vec(),
            vec![],
        );
        r.check(&with).expect("features");
        assert!(!r.early_vring_enable(&enable), "the handler's from now on");
        let other = msg(code::SET_VRING_KICK, NO_FD.to_le_bytes().to_vec(), vec![]);
        assert!(
            r.after_forward(&other).is_none(),
            "ring 0 had no early enable"
        );
        let late = r.after_forward(&kick).expect("ring 1's enable, once");
        assert_eq!(
            (late.request, late.payload),
            (code::SET_VRING_ENABLE, state(1, 1))
        );
        assert!(r.after_forward(&kick).is_none(), "applied once");
        r.check(&msg(code::RESET_OWNER, vec![], vec![]))
            .expect("reset");
        assert!(
            r.early_vring_enable(&enable),
            "a reset forgets the features"
        );
    }

    #[test]
    fn device_changes_before_set_owner_are_refused_and_queries_answered() {
        let mut r = Rules::new(LIMITS);
        assert_eq!(r.check(&msg(code::GET_FEATURES, vec![], vec![])), Ok(()));
        assert_eq!(
            r.check(&msg(code::SET_VRING_NUM, state(0, 64), vec![])),
            Err(Refusal::BeforeOwner(code::SET_VRING_NUM))
        );
    }

    #[test]
    fn queue_sizes_must_be_powers_of_two_up_to_the_maximum() {
        let mut r = owned();
        assert_eq!(
            r.check(&msg(code::SET_VRING_NUM, state(1, 128), vec![])),
            Ok(())
        );
        for num in [0, 3, 512, 1 << 16] {
            assert_eq!(
                r.check(&msg(code::SET_VRING_NUM, state(0, num), vec![])),
                Err(Refusal::QueueSize { num, max: 256 })
            );
        }
        assert!(matches!(
            r.check(&msg(code::SET_VRING_NUM, state(2, 64), vec![])),
            Err(Refusal::VringIndex { index: 2, .. })
        ));
    }

    #[test]
    fn regions_must_fit_their_files_and_not_overlap() {
        let mut r = owned();
        let ok = table(&[(0, 4096, 0x1000_0000, 0)]);
        assert_eq!(
            r.check(&msg(code::SET_MEM_TABLE, ok, vec![file(4096)])),
            Ok(())
        );
        let past = table(&[(0, 8192, 0x1000_0000, 0)]);
        assert_eq!(
            r.check(&msg(code::SET_MEM_TABLE, past, vec![file(4096)])),
            Err(Refusal::PastEof {
                index: 0,
                size: 8192,
                offset: 0,
                file_len: 4096
            })
        );
        let overlap = table(&[(0, 4096, 0x1000_0000, 0), (1 << 20, 4096, 0x1000_0800, 0)]);
        assert!(matches!(
            r.check(&msg(
                code::SET_MEM_TABLE,
                overlap,
                vec![file(4096), file(4096)]
            )),
            Err(Refusal::Overlap {
                what: "frontend",
                ..
            })
        ));
        let missing_fd = table(&[(0, 4096, 0x1000_0000, 0)]);
        assert!(matches!(
            r.check(&msg(code::SET_MEM_TABLE, missing_fd, vec![])),
            Err(Refusal::Fds {
                got: 0,
                want: 1,
                ..
            })
        ));
    }

    #[test]
    fn rings_must_lie_inside_one_region() {
        let mut r = owned();
        let t = table(&[(0, 8192, 0x1000_0000, 0)]);
        r.check(&msg(code::SET_MEM_TABLE, t, vec![file(8192)]))
            .expect("table");
        r.check(&msg(code::SET_VRING_NUM, state(0, 256), vec![]))
            .expect("num");
        let addr = |desc: u64, avail: u64, used: u64| {
            let mut p = vec![0u8; 8];
            for v in [desc, used, avail, 0] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            msg(code::SET_VRING_ADDR, p, vec![])
        };
        let base = 0x1000_0000;
        // 256 descriptors are 4096 bytes; the used ring (2054 bytes) fits after 4096 + 518.
        assert_eq!(r.check(&addr(base, base + 4096, base + 4096 + 520)), Ok(()));
        assert!(matches!(
            r.check(&addr(base + 4096 + 16, base, base + 520)),
            Err(Refusal::RingOutside {
                ring: "descriptor",
                ..
            })
        ));
    }
}
