//! The vhost-user wire format as the guard needs it: whole messages (12-byte header, payload,
//! attached file descriptors) read from the frontend, and raw bytes with descriptors passed
//! through in either direction.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// vhost-user request codes (the vhost-user specification's numbering): one table for the
/// guard, its INFLIGHT_SHMFD handling and the test frontends.
pub mod req {
    #![allow(missing_docs)]
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const SET_BACKEND_REQ_FD: u32 = 21;
    pub const GET_CONFIG: u32 = 24;
    pub const GET_INFLIGHT_FD: u32 = 31;
    pub const SET_INFLIGHT_FD: u32 = 32;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
    pub const ADD_MEM_REG: u32 = 37;
    pub const REM_MEM_REG: u32 = 38;
}

/// Header bytes: request, flags, payload size (little-endian u32 each).
pub const HEADER_LEN: usize = 12;
/// Largest payload the protocol allows (`vhost`'s `MAX_MSG_SIZE`).
pub const MAX_PAYLOAD: usize = 0x1000;
/// Most descriptors one message may carry (`vhost`'s `MAX_ATTACHED_FD_ENTRIES`).
pub const MAX_FDS: usize = 32;

/// Header flag: protocol version 1 (bits 0-1).
pub const VERSION_1: u32 = 0x1;
/// Header flag: this is a reply.
pub const FLAG_REPLY: u32 = 0x4;
/// Header flag: the sender wants an ack (REPLY_ACK).
pub const FLAG_NEED_REPLY: u32 = 0x8;

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer closed the connection in the middle of a message.
    #[error("connection closed inside a message ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes the message needs.
        want: usize,
    },
    /// The header announces a payload larger than the protocol allows.
    #[error("payload size {0} is larger than {MAX_PAYLOAD}")]
    Oversized(u32),
    /// More descriptors than one message may carry, or descriptors cut off by the kernel.
    #[error("too many file descriptors attached")]
    TooManyFds,
    /// The socket failed.
    #[error("socket error")]
    Io(#[from] io::Error),
}

/// One frontend message.
#[derive(Debug)]
pub struct Message {
    /// Request code.
    pub request: u32,
    /// Header flags.
    pub flags: u32,
    /// Payload (`size` bytes, as the header says).
    pub payload: Vec<u8>,
    /// Descriptors attached to any part of the message.
    pub files: Vec<File>,
}

impl Message {
    /// The message as bytes on the wire (header and payload).
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.extend_from_slice(&self.request.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        let size = u32::try_from(self.payload.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Little-endian u64 at `offset` of the payload (0 when the payload is shorter).
    #[must_use]
    pub fn u64_at(&self, offset: usize) -> u64 {
        le_u64(&self.payload, offset)
    }

    /// Little-endian u32 at `offset` of the payload (0 when the payload is shorter).
    #[must_use]
    pub fn u32_at(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        if let Some(s) = self.payload.get(offset..offset + 4) {
            b.copy_from_slice(s);
        }
        u32::from_le_bytes(b)
    }
}

/// Little-endian u64 at `offset` of `bytes` (0 when too short).
#[must_use]
pub fn le_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = bytes.get(offset..offset + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

/// Read exactly `buf.len()` bytes, keeping every descriptor that arrives. Returns the bytes
/// read: less than `buf.len()` only at end of stream.
fn read_full(sock: &UnixStream, buf: &mut [u8], files: &mut Vec<File>) -> Result<usize, WireError> {
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
        let mut iov = [libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        }];
        let mut fds = [-1 as RawFd; MAX_FDS];
        // SAFETY: the iovec points into `rest`, a live mutable slice of `iov_len` bytes that
        // nothing else borrows during the call; arbitrary bytes are valid for u8.
        let r = unsafe { sock.recv_with_fds(&mut iov, &mut fds) };
        let (n, nfds) = match r {
            Ok(x) => x,
            Err(e) if e.errno() == libc::EINTR => continue,
            Err(e) if e.errno() == libc::ENOBUFS => return Err(WireError::TooManyFds),
            Err(e) => return Err(WireError::Io(io::Error::from_raw_os_error(e.errno()))),
        };
        for &fd in &fds[..nfds] {
            // SAFETY: recvmsg just created these descriptors in this process; nothing else
            // owns them, so the File takes sole ownership (and closes them on drop).
            files.push(unsafe { File::from_raw_fd(fd) });
        }
        if files.len() > MAX_FDS {
            return Err(WireError::TooManyFds);
        }
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Read one whole message. `Ok(None)` when the peer closed the connection between messages.
///
/// # Errors
/// A truncated or oversized message, too many descriptors, or a socket error.
pub fn read_message(sock: &UnixStream) -> Result<Option<Message>, WireError> {
    let mut files = Vec::new();
    let mut hdr = [0u8; HEADER_LEN];
    let got = read_full(sock, &mut hdr, &mut files)?;
    if got == 0 && files.is_empty() {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(WireError::Truncated {
            got,
            want: HEADER_LEN,
        });
    }
    let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
    let size = word(8);
    let len = usize::try_from(size).unwrap_or(usize::MAX);
    if len > MAX_PAYLOAD {
        return Err(WireError::Oversized(size));
    }
    let mut payload = vec![0u8; len];
    let got = read_full(sock, &mut payload, &mut files)?;
    if got < len {
        return Err(WireError::Truncated {
            got: HEADER_LEN + got,
            want: HEADER_LEN + len,
        });
    }
    Ok(Some(Message {
        request: word(0),
        flags: word(4),
        payload,
        files,
    }))
}

/// Send `bytes` with `files` attached to the first chunk, all of it.
///
/// # Errors
/// When the socket fails.
pub fn send_all(sock: &UnixStream, bytes: &[u8], files: &[File]) -> io::Result<()> {
    let fds: Vec<RawFd> = files.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = 0;
    let mut first = true;
    while sent < bytes.len() || first {
        let chunk = &bytes[sent..];
        let fds_now: &[RawFd] = if first { &fds } else { &[] };
        match sock.send_with_fds(&[chunk], fds_now) {
            Ok(n) => sent += n,
            Err(e) if e.errno() == libc::EINTR => continue,
            Err(e) => return Err(io::Error::from_raw_os_error(e.errno())),
        }
        first = false;
    }
    Ok(())
}

/// Pass whatever is readable on `from` (bytes and descriptors) to `to`. Returns `false` when
/// `from` reached end of stream.
///
/// # Errors
/// When either socket fails or too many descriptors arrive.
pub fn pass_through(from: &UnixStream, to: &UnixStream) -> Result<bool, WireError> {
    let mut buf = [0u8; MAX_PAYLOAD + HEADER_LEN];
    let mut iov = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    let mut fds = [-1 as RawFd; MAX_FDS];
    let (n, nfds) = loop {
        // SAFETY: the iovec points into `buf`, a live local array of `iov_len` bytes that
        // nothing else borrows during the call.
        match unsafe { from.recv_with_fds(&mut iov, &mut fds) } {
            Ok(x) => break x,
            Err(e) if e.errno() == libc::EINTR => {}
            Err(e) if e.errno() == libc::ENOBUFS => return Err(WireError::TooManyFds),
            Err(e) => return Err(WireError::Io(io::Error::from_raw_os_error(e.errno()))),
        }
    };
    let files: Vec<File> = fds[..nfds]
        .iter()
        // SAFETY: recvmsg just created these descriptors in this process; the File takes
        // sole ownership.
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect();
    if n == 0 && files.is_empty() {
        return Ok(false);
    }
    send_all(to, &buf[..n], &files)?;
    Ok(true)
}
