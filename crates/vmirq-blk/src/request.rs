//! Parse a guest descriptor chain into a validated virtio-blk [`Request`].
//!
//! This is the trust boundary for guest input: descriptor addresses, lengths, directions,
//! chain shape, request type and sector range are all checked here, once. Everything after
//! parsing (the storage backends, the queue engine) only sees a [`Request`] whose data
//! segments lie inside guest memory, point the right way and stay inside the disk.
//!
//! The chain's structure is checked first ([`crate::chain`]): a chain that breaks a ring rule
//! or has no writable status byte yields [`Failure::Broken`] and is never completed. A chain
//! with a sound structure whose request is bad yields [`Failure::Rejected`], carrying the
//! status to write (`IOERR` or `UNSUPP`) into its status byte.

use crate::chain::{self, DescTable, Violation};
use crate::virtio::{req, status, DISCARD_SEG_LEN, HEADER_LEN, ID_LEN, SECTOR_SHIFT, SECTOR_SIZE};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// Most descriptors one request may use (header + data + status); `seg_max` is derived from
/// it. Longer chains that are otherwise sound (at most the queue size) get IOERR.
pub const MAX_DESCRIPTORS: u16 = 1024;

// The ring walker's floor on chain length and this parser's limit are one number.
const _: () = assert!(chain::CHAIN_MAX == MAX_DESCRIPTORS as u32);
/// Most DISCARD / WRITE_ZEROES segments per request (`max_discard_seg`).
pub const MAX_DISCARD_SEGMENTS: u32 = 1;

/// What the disk looks like to the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskGeometry {
    /// Capacity in bytes (a multiple of [`SECTOR_SIZE`]).
    pub capacity_bytes: u64,
    /// Writes, DISCARD and WRITE_ZEROES are refused.
    pub read_only: bool,
    /// DISCARD is offered.
    pub discard: bool,
    /// WRITE_ZEROES is offered.
    pub write_zeroes: bool,
    /// Largest payload of one request in bytes.
    pub max_data_bytes: u32,
    /// Logical block size in bytes (a power of two, at least 512): offsets and lengths of
    /// reads, writes, discards and write-zeroes must be multiples of it.
    pub block_size: u64,
}

/// A request type the device implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    /// Read sectors into guest memory.
    In,
    /// Write sectors from guest memory.
    Out,
    /// Make completed writes durable.
    Flush,
    /// Return the device id string.
    GetId,
    /// Discard sector ranges.
    Discard,
    /// Zero sector ranges.
    WriteZeroes,
}

/// A contiguous guest-physical buffer (already checked to be inside guest memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Start address.
    pub addr: GuestAddress,
    /// Length in bytes.
    pub len: u32,
}

/// A sector range of a DISCARD or WRITE_ZEROES request (checked against the capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectorRange {
    /// First byte offset on the disk.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Head descriptor index (to return in the used ring).
    pub head: u16,
    /// Type.
    pub kind: RequestType,
    /// Byte offset on the disk (IN / OUT).
    pub offset: u64,
    /// Data segments, in order.
    pub data: Vec<Segment>,
    /// Total data bytes.
    pub data_len: u32,
    /// Where the status byte goes.
    pub status: GuestAddress,
    /// DISCARD / WRITE_ZEROES ranges.
    pub ranges: Vec<SectorRange>,
}

/// Why a chain was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// More descriptors than [`MAX_DESCRIPTORS`] (more than `seg_max` data buffers).
    #[error("more than {MAX_DESCRIPTORS} descriptors")]
    TooManyDescriptors,
    /// GET_ID with less than the 20 bytes of the id string to write into.
    #[error("GET_ID buffer shorter than {ID_LEN} bytes")]
    ShortIdBuffer,
    /// The header is missing, short or device-writable.
    #[error("request header is missing, short or writable")]
    BadHeader,
    /// A data buffer points the wrong way for the request type.
    #[error("data buffer has the wrong direction")]
    WrongDirection,
    /// A data buffer lies outside guest memory.
    #[error("data buffer outside guest memory")]
    OutsideMemory,
    /// Data length is not a whole number of sectors, or too large.
    #[error("bad data length")]
    BadLength,
    /// The sector range goes past the end of the disk.
    #[error("sector range past the end of the disk")]
    OutOfRange,
    /// Offset or length is not a multiple of the disk's logical block size.
    #[error("request not aligned to the logical block size")]
    Unaligned,
    /// A write-type request to a read-only disk.
    #[error("write to a read-only disk")]
    ReadOnly,
    /// Unknown or not offered request type.
    #[error("unsupported request type {0}")]
    Unsupported(u32),
    /// DISCARD / WRITE_ZEROES payload is malformed (flags, count).
    #[error("bad discard or write-zeroes segment")]
    BadDiscard,
}

impl ParseError {
    /// The status the driver gets for this error.
    #[must_use]
    pub fn status(self) -> u8 {
        match self {
            ParseError::Unsupported(_) => status::UNSUPP,
            _ => status::IOERR,
        }
    }
}

/// A sound chain whose request failed validation: it is completed with an error status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// Head descriptor index.
    pub head: u16,
    /// Where to write the status (checked: device-writable, inside guest memory).
    pub status_addr: GuestAddress,
    /// Why.
    pub error: ParseError,
}

/// Why a chain did not yield a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The chain broke a ring rule or has no writable status byte: it must never be
    /// completed, and the queue stops.
    Broken(Violation),
    /// A sound chain with a bad request: complete it with the error status.
    Rejected(Rejected),
}

/// Buffers `parse` reuses from one request to the next, so a request allocates nothing for
/// its descriptor list and (once the caller hands the segment list back) its segments.
#[derive(Debug, Default)]
pub struct Scratch {
    descs: Vec<Descriptor>,
    segments: Vec<Segment>,
}

impl Scratch {
    /// Give a request's segment list back for the next `parse` (its contents are dropped).
    pub fn recycle(&mut self, mut segments: Vec<Segment>) {
        segments.clear();
        self.segments = segments;
    }
}

/// Parse the chain at `head` of the descriptor table `table`.
///
/// # Errors
/// [`Failure::Broken`] for a chain that breaks a ring rule ([`Violation`]),
/// [`Failure::Rejected`] for a sound chain whose request breaks a rule of [`ParseError`].
pub fn parse(
    head: u16,
    table: DescTable,
    mem: &GuestMemoryMmap,
    disk: &DiskGeometry,
    scratch: &mut Scratch,
) -> Result<Request, Failure> {
    let all = &mut scratch.descs;
    let status_addr = chain::walk(mem, table, head, all).map_err(Failure::Broken)?;
    let fail = |error| {
        Failure::Rejected(Rejected {
            head,
            status_addr,
            error,
        })
    };
    if all.len() > usize::from(MAX_DESCRIPTORS) {
        return Err(fail(ParseError::TooManyDescriptors));
    }
    let mut data = std::mem::take(&mut scratch.segments);
    data.clear();
    let body = split_header(all, mem, data).map_err(fail)?;
    let data_len = check_data(&body, mem, disk).map_err(fail)?;
    let (kind, offset, ranges) = check_kind(&body, data_len, mem, disk).map_err(fail)?;
    Ok(Request {
        head,
        kind,
        offset,
        data: body.data,
        data_len,
        status: status_addr,
        ranges,
    })
}

/// The header fields and data buffers of a chain, before type-specific checks.
struct Body {
    kind: u32,
    sector: u64,
    data: Vec<Segment>,
    /// Direction shared by all data buffers (`None` when there is no data).
    writable: Option<bool>,
}

/// Read the header from the first descriptor and collect the data buffers between the header
/// and the status byte. The header must sit entirely in the first descriptor; bytes after it
/// in that descriptor, and bytes before the status byte in the last one, are data.
fn split_header(
    all: &[Descriptor],
    mem: &GuestMemoryMmap,
    mut data: Vec<Segment>,
) -> Result<Body, ParseError> {
    let first = all.first().ok_or(ParseError::BadHeader)?;
    if all.len() < 2 || first.is_write_only() || first.len() < HEADER_LEN {
        return Err(ParseError::BadHeader);
    }
    let mut hdr = [0u8; HEADER_LEN as usize];
    mem.read_slice(&mut hdr, first.addr())
        .map_err(|_| ParseError::BadHeader)?;
    let (kind_bytes, rest) = hdr.split_at(4);
    let kind = u32::from_le_bytes(kind_bytes.try_into().map_err(|_| ParseError::BadHeader)?);
    let sector = u64::from_le_bytes(rest[4..12].try_into().map_err(|_| ParseError::BadHeader)?);
    let last_index = all.len() - 1;
    data.reserve(all.len());
    let mut writable = None;
    for (i, d) in all.iter().enumerate() {
        let (mut start, mut len) = (d.addr(), d.len());
        if i == 0 {
            start = start
                .checked_add(u64::from(HEADER_LEN))
                .ok_or(ParseError::BadHeader)?;
            len -= HEADER_LEN;
        }
        if i == last_index {
            len -= 1; // status byte; chain::walk checked len > 0
        }
        if len == 0 {
            continue;
        }
        if *writable.get_or_insert(d.is_write_only()) != d.is_write_only() {
            return Err(ParseError::WrongDirection);
        }
        data.push(Segment { addr: start, len });
    }
    Ok(Body {
        kind,
        sector,
        data,
        writable,
    })
}

/// Check that every data buffer is inside guest memory and the total is bounded.
fn check_data(body: &Body, mem: &GuestMemoryMmap, disk: &DiskGeometry) -> Result<u32, ParseError> {
    let mut total: u32 = 0;
    for seg in &body.data {
        let len = usize::try_from(seg.len).map_err(|_| ParseError::BadLength)?;
        if !GuestMemoryBackend::check_range(mem, seg.addr, len) {
            return Err(ParseError::OutsideMemory);
        }
        total = total.checked_add(seg.len).ok_or(ParseError::BadLength)?;
    }
    if total > disk.max_data_bytes {
        return Err(ParseError::BadLength);
    }
    Ok(total)
}

/// Byte range `[sector * 512, + len)` if it lies inside the disk and is made of whole
/// logical blocks.
fn disk_range(sector: u64, len: u64, disk: &DiskGeometry) -> Result<u64, ParseError> {
    let offset = sector
        .checked_mul(SECTOR_SIZE)
        .ok_or(ParseError::OutOfRange)?;
    // A power of two (see `DiskGeometry::block_size`): a mask, not a division per request.
    let mask = disk.block_size.max(SECTOR_SIZE) - 1;
    if (offset | len) & mask != 0 {
        return Err(ParseError::Unaligned);
    }
    match offset.checked_add(len) {
        Some(end) if end <= disk.capacity_bytes => Ok(offset),
        _ => Err(ParseError::OutOfRange),
    }
}

/// Type-specific rules: direction, alignment, range, read-only, support.
fn check_kind(
    body: &Body,
    data_len: u32,
    mem: &GuestMemoryMmap,
    disk: &DiskGeometry,
) -> Result<(RequestType, u64, Vec<SectorRange>), ParseError> {
    let wants_writable = |w: bool| match body.writable {
        Some(x) if x != w => Err(ParseError::WrongDirection),
        _ => Ok(()),
    };
    let writes = matches!(body.kind, req::OUT | req::DISCARD | req::WRITE_ZEROES);
    let offered = match body.kind {
        req::IN | req::OUT | req::FLUSH | req::GET_ID => true,
        req::DISCARD => disk.discard,
        req::WRITE_ZEROES => disk.write_zeroes,
        _ => false,
    };
    if !offered {
        return Err(ParseError::Unsupported(body.kind));
    }
    if writes && disk.read_only {
        return Err(ParseError::ReadOnly);
    }
    match body.kind {
        req::IN | req::OUT => {
            wants_writable(body.kind == req::IN)?;
            // Whole sectors, and whole logical blocks, are checked with the range.
            let offset = disk_range(body.sector, u64::from(data_len), disk)?;
            let kind = if body.kind == req::IN {
                RequestType::In
            } else {
                RequestType::Out
            };
            Ok((kind, offset, Vec::new()))
        }
        req::FLUSH => Ok((RequestType::Flush, 0, Vec::new())),
        req::GET_ID => {
            wants_writable(true)?;
            // The whole id or nothing: a truncated id with status OK could pass for a whole
            // one (QEMU writes min(len, 20) bytes and reports OK).
            if usize::try_from(data_len).map_or(true, |n| n < ID_LEN) {
                return Err(ParseError::ShortIdBuffer);
            }
            Ok((RequestType::GetId, 0, Vec::new()))
        }
        _ => {
            wants_writable(false)?;
            let ranges = read_ranges(body, data_len, mem, disk)?;
            let kind = if body.kind == req::DISCARD {
                RequestType::Discard
            } else {
                RequestType::WriteZeroes
            };
            Ok((kind, 0, ranges))
        }
    }
}

/// Read and check the `virtio_blk_discard_write_zeroes` segments of a request.
fn read_ranges(
    body: &Body,
    data_len: u32,
    mem: &GuestMemoryMmap,
    disk: &DiskGeometry,
) -> Result<Vec<SectorRange>, ParseError> {
    if data_len == 0
        || data_len % DISCARD_SEG_LEN != 0
        || data_len / DISCARD_SEG_LEN > MAX_DISCARD_SEGMENTS
    {
        return Err(ParseError::BadDiscard);
    }
    // With MAX_DISCARD_SEGMENTS == 1 the payload is 16 bytes; gather it across buffers.
    let mut raw =
        Vec::with_capacity(usize::try_from(data_len).map_err(|_| ParseError::BadDiscard)?);
    for seg in &body.data {
        let mut chunk = vec![0u8; usize::try_from(seg.len).map_err(|_| ParseError::BadDiscard)?];
        mem.read_slice(&mut chunk, seg.addr)
            .map_err(|_| ParseError::OutsideMemory)?;
        raw.extend_from_slice(&chunk);
    }
    let mut ranges = Vec::new();
    for rec in raw.chunks_exact(DISCARD_SEG_LEN as usize) {
        let sector = u64::from_le_bytes(rec[0..8].try_into().map_err(|_| ParseError::BadDiscard)?);
        let sectors =
            u32::from_le_bytes(rec[8..12].try_into().map_err(|_| ParseError::BadDiscard)?);
        let flags = u32::from_le_bytes(rec[12..16].try_into().map_err(|_| ParseError::BadDiscard)?);
        // Only the `unmap` flag (bit 0) is defined, and only for WRITE_ZEROES.
        let allowed = if body.kind == req::WRITE_ZEROES { 1 } else { 0 };
        if flags & !allowed != 0 {
            return Err(ParseError::Unsupported(body.kind));
        }
        let len = u64::from(sectors) << SECTOR_SHIFT;
        let offset = disk_range(sector, len, disk)?;
        ranges.push(SectorRange { offset, len });
    }
    Ok(ranges)
}
