//! vhost-user message framing on a unix stream socket, file descriptors included: a 12-byte
//! header (`request`, `flags`, `size`, native byte order), `size` bytes of payload, and up to
//! [`MAX_FDS`] descriptors in SCM_RIGHTS ancillary data. The relay reads whole messages and
//! writes them on unchanged; only the few it answers itself are interpreted.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Bytes of a message header.
pub const HEADER_BYTES: usize = 12;
/// Largest payload (vhost's `MAX_MSG_SIZE`; the backend refuses larger ones too).
pub const MAX_PAYLOAD: usize = 0x1000;
/// Most descriptors one message may carry (vhost's `MAX_ATTACHED_FD_ENTRIES`).
pub const MAX_FDS: usize = 32;

/// Header flag: protocol version 1.
pub const FLAG_VERSION_1: u32 = 0x1;
/// Header flag: this is a reply.
pub const FLAG_REPLY: u32 = 0x4;
/// Header flag: the sender wants a reply (REPLY_ACK).
pub const FLAG_NEED_REPLY: u32 = 0x8;

/// One message, with the descriptors that came with it.
#[derive(Debug)]
pub struct Message {
    /// Request code.
    pub request: u32,
    /// Header flags.
    pub flags: u32,
    /// Payload (`size` bytes).
    pub payload: Vec<u8>,
    /// Descriptors received with the message.
    pub files: Vec<File>,
}

impl Message {
    /// A reply to `request` carrying `payload` and `files`.
    #[must_use]
    pub fn reply(request: u32, payload: Vec<u8>, files: Vec<File>) -> Self {
        Self {
            request,
            flags: FLAG_VERSION_1 | FLAG_REPLY,
            payload,
            files,
        }
    }

    /// The sender asked for a REPLY_ACK answer.
    #[must_use]
    pub fn needs_reply(&self) -> bool {
        self.flags & FLAG_NEED_REPLY != 0
    }

    /// The payload as a native-endian `u64` (`None` unless it is exactly 8 bytes).
    #[must_use]
    pub fn u64_payload(&self) -> Option<u64> {
        let bytes: [u8; 8] = self.payload.as_slice().try_into().ok()?;
        Some(u64::from_ne_bytes(bytes))
    }
}

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer closed the connection between messages.
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection in the middle of a message.
    #[error("connection closed in the middle of a message")]
    Truncated,
    /// The header announces a payload larger than [`MAX_PAYLOAD`].
    #[error("payload of {0} bytes is larger than {MAX_PAYLOAD}")]
    TooLarge(u32),
    /// More than [`MAX_FDS`] descriptors came with one message.
    #[error("more than {MAX_FDS} file descriptors in one message")]
    TooManyFds,
    /// A socket call failed.
    #[error("socket error")]
    Io(#[from] io::Error),
}

/// Read one whole message.
///
/// # Errors
/// See [`WireError`]; the descriptors received so far are closed.
pub fn recv(sock: &UnixStream) -> Result<Message, WireError> {
    let mut files = Vec::new();
    let mut header = [0u8; HEADER_BYTES];
    recv_exact(sock, &mut header, &mut files, true)?;
    let word = |i: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&header[4 * i..4 * i + 4]);
        u32::from_ne_bytes(w)
    };
    let (request, flags, size) = (word(0), word(1), word(2));
    let len = usize::try_from(size).unwrap_or(usize::MAX);
    if len > MAX_PAYLOAD {
        return Err(WireError::TooLarge(size));
    }
    let mut payload = vec![0u8; len];
    recv_exact(sock, &mut payload, &mut files, false)?;
    Ok(Message {
        request,
        flags,
        payload,
        files,
    })
}

/// Fill `buf` from the socket, collecting descriptors into `files`. A connection closed before
/// the first byte is [`WireError::Closed`] when `buf` starts a message (`boundary`).
fn recv_exact(
    sock: &UnixStream,
    buf: &mut [u8],
    files: &mut Vec<File>,
    boundary: bool,
) -> Result<(), WireError> {
    let mut got = 0;
    while got < buf.len() {
        let n = recv_some(sock, &mut buf[got..], files)?;
        if n == 0 {
            return Err(if got == 0 && boundary {
                WireError::Closed
            } else {
                WireError::Truncated
            });
        }
        got += n;
    }
    Ok(())
}

/// One `recvmsg` call: bytes into `buf`, descriptors appended to `files`.
fn recv_some(sock: &UnixStream, buf: &mut [u8], files: &mut Vec<File>) -> Result<usize, WireError> {
    // Room for MAX_FDS descriptors (CMSG_SPACE of 32 ints is 144 bytes on Linux), as u64s so
    // the buffer is aligned for `cmsghdr`.
    let mut control = [0u64; 24];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: `msg` points at `iov` (describing `buf`, writable for its length) and at
        // `control` (writable for `msg_controllen` bytes), both alive for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    };
    take_fds(&msg, files);
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || files.len() > MAX_FDS {
        return Err(WireError::TooManyFds);
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Move the SCM_RIGHTS descriptors of a received `msg` into `files` (so they are closed when
/// dropped, whatever happens next).
fn take_fds(msg: &libc::msghdr, files: &mut Vec<File>) {
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/CMSG_NXTHDR only follow the lengths
    // the kernel wrote inside `msg_control`/`msg_controllen`.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points at a header inside the control buffer.
        let hdr = unsafe { &*cmsg };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) is a constant computation.
            let header_len = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = hdr.cmsg_len.saturating_sub(header_len) / std::mem::size_of::<RawFd>();
            // SAFETY: the data of an SCM_RIGHTS message holds `count` ints.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
            for i in 0..count {
                // SAFETY: `i < count`, inside the message's data; unaligned read because the
                // data follows the header without an alignment guarantee for ints.
                let fd = unsafe { data.add(i).read_unaligned() };
                // SAFETY: the kernel just installed `fd` in this process for us; nobody else
                // owns it.
                files.push(unsafe { File::from_raw_fd(fd) });
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR; returns null after the last header.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
}

/// Write one whole message, its descriptors with the first bytes.
///
/// # Errors
/// When the socket fails (a closed peer included) or the message is out of bounds.
pub fn send(sock: &UnixStream, msg: &Message) -> Result<(), WireError> {
    if msg.payload.len() > MAX_PAYLOAD {
        return Err(WireError::TooLarge(
            u32::try_from(msg.payload.len()).unwrap_or(u32::MAX),
        ));
    }
    if msg.files.len() > MAX_FDS {
        return Err(WireError::TooManyFds);
    }
    let mut bytes = Vec::with_capacity(HEADER_BYTES + msg.payload.len());
    bytes.extend_from_slice(&msg.request.to_ne_bytes());
    bytes.extend_from_slice(&msg.flags.to_ne_bytes());
    let size = u32::try_from(msg.payload.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&size.to_ne_bytes());
    bytes.extend_from_slice(&msg.payload);
    let fds: Vec<RawFd> = msg.files.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = send_some(sock, &bytes, &fds)?;
    while sent < bytes.len() {
        sent += send_some(sock, &bytes[sent..], &[])?;
    }
    Ok(())
}

/// One `sendmsg` call with `fds` attached (none if empty). Never raises SIGPIPE.
fn send_some(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> Result<usize, WireError> {
    let mut control = [0u64; 24];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = std::mem::size_of_val(fds);
        let data_len_u32 = u32::try_from(data_len).unwrap_or(u32::MAX);
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a constant computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len_u32) } as usize;
        // SAFETY: `control` is 192 bytes, more than CMSG_SPACE of MAX_FDS ints (checked by
        // `send`), so the first header and its data fit; the pointers stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len_u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                data_len,
            );
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` (describing `bytes`, only read by sendmsg) and at
        // `control` (initialized above when used), all alive for the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(usize::try_from(n).unwrap_or(0));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    #[test]
    fn messages_cross_with_payload_and_descriptors() {
        let (a, b) = UnixStream::pair().expect("pair");
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(b"hello").expect("write");
        let msg = Message {
            request: 12,
            flags: FLAG_VERSION_1 | FLAG_NEED_REPLY,
            payload: 0x105u64.to_ne_bytes().to_vec(),
            files: vec![f],
        };
        send(&a, &msg).expect("send");
        send(&a, &Message::reply(15, vec![], vec![])).expect("send");
        let got = recv(&b).expect("recv");
        assert_eq!((got.request, got.flags), (12, 0x9));
        assert_eq!(got.u64_payload(), Some(0x105));
        assert!(got.needs_reply());
        assert_eq!(got.files.len(), 1);
        let mut file = &got.files[0];
        file.rewind().expect("seek");
        let mut s = String::new();
        std::io::Read::read_to_string(&mut file, &mut s).expect("read");
        assert_eq!(s, "hello");
        let empty = recv(&b).expect("recv");
        assert_eq!(
            (empty.request, empty.flags, empty.payload.len()),
            (15, 5, 0)
        );
        drop(a);
        assert!(matches!(recv(&b), Err(WireError::Closed)));
    }

    #[test]
    fn short_headers_lying_sizes_and_fd_floods_are_errors() {
        let (a, b) = UnixStream::pair().expect("pair");
        let mut w = &a;
        w.write_all(&[1, 0, 0]).expect("write");
        drop(a);
        assert!(matches!(recv(&b), Err(WireError::Truncated)));

        let (a, b) = UnixStream::pair().expect("pair");
        let mut w = &a;
        let mut hdr = Vec::new();
        for v in [1u32, 1, 0x10_0000] {
            hdr.extend_from_slice(&v.to_ne_bytes());
        }
        w.write_all(&hdr).expect("write");
        assert!(matches!(recv(&b), Err(WireError::TooLarge(0x10_0000))));

        let (a, b) = UnixStream::pair().expect("pair");
        let mut w = &a;
        let mut hdr = Vec::new();
        for v in [1u32, 1, 100] {
            hdr.extend_from_slice(&v.to_ne_bytes());
        }
        w.write_all(&hdr).expect("write");
        w.write_all(&[0u8; 10]).expect("write");
        drop(a);
        assert!(matches!(recv(&b), Err(WireError::Truncated)));

        // 40 descriptors (sendmsg of one SCM_RIGHTS block, bypassing `send`'s own limit).
        let (a, b) = UnixStream::pair().expect("pair");
        let files: Vec<File> = (0..40)
            .map(|_| File::open("/dev/null").expect("open"))
            .collect();
        let fds: Vec<RawFd> = files.iter().map(AsRawFd::as_raw_fd).collect();
        let mut control = vec![0u64; 64];
        let mut bytes = hdr.clone();
        bytes[8..12].copy_from_slice(&0u32.to_ne_bytes());
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        // SAFETY: test-only sendmsg with a control buffer of 512 bytes holding one SCM_RIGHTS
        // header and 40 ints; all pointers refer to live locals.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(160) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(160) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), 160);
            assert!(libc::sendmsg(a.as_raw_fd(), &msg, 0) > 0);
        }
        assert!(matches!(recv(&b), Err(WireError::TooManyFds)));
    }
}
