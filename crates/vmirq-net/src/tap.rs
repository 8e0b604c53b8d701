//! A Linux tap device as a port of the switch (`--tap NAME`): frames the kernel sends on the
//! interface come out of the tap fd and are switched like frames a guest transmitted; frames
//! switched to the port are written to the fd, and the kernel receives them on the
//! interface.
//!
//! The device is opened with IFF_TAP | IFF_NO_PI and without IFF_VNET_HDR: each read or
//! write is one bare Ethernet frame (the switch offers no offloads, so a virtio-net header
//! would carry nothing). TUNSETIFF creates the interface, or attaches to an existing tap of
//! that name; the interface is left down: bringing it up and addressing it is the
//! administrator's (or the test's) business, as for any tap a VMM opens. Writes never block:
//! a frame the kernel cannot take now is dropped and counted, as a NIC drops on a full ring.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use vmirq_vhost::daemon::readable;

/// Largest frame read from the tap (a 64 KiB frame plus an Ethernet header, the device's
/// largest: the tap's MTU bounds what the kernel sends).
pub const TAP_FRAME_MAX: usize = crate::virtio::FRAME_LEN_MAX;

/// `TUNSETIFF` (`_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// An open tap device.
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
}

impl Tap {
    /// Create the tap `name` (or attach to it if it exists).
    ///
    /// # Errors
    /// The name is empty or longer than 15 bytes, `/dev/net/tun` cannot be opened, or the
    /// kernel refuses (no CAP_NET_ADMIN, or `name` is another kind of interface).
    pub fn open(name: &str) -> io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a tap name is 1 to 15 bytes",
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = libc::c_char::from_ne_bytes([src]);
        }
        req.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI;
        // SAFETY: TUNSETIFF reads and writes the ifreq `req` points to, which lives for the
        // call; the fd is the tun device this function opened.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        set_nonblocking(&file)?;
        Ok(Self {
            file,
            name: name.to_owned(),
        })
    }

    /// The interface name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hand `frame` to the kernel; `false` when it cannot take it now (dropped).
    ///
    /// # Errors
    /// The fd failed (other than would-block).
    pub fn send(&self, frame: &[u8]) -> io::Result<bool> {
        match (&self.file).write(frame) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Wait up to `timeout_ms` for a frame from the kernel and read it into `buf`
    /// (resized to the frame); `None` when none came.
    ///
    /// # Errors
    /// poll or read failed.
    pub fn recv(&self, buf: &mut Vec<u8>, timeout_ms: i32) -> io::Result<Option<usize>> {
        if !readable(self.file.as_raw_fd(), timeout_ms)? {
            return Ok(None);
        }
        buf.resize(TAP_FRAME_MAX, 0);
        match (&self.file).read(buf) {
            Ok(n) => {
                buf.truncate(n);
                Ok(Some(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn set_nonblocking(file: &File) -> io::Result<()> {
    // SAFETY: F_GETFL on an fd this process owns reads its flags only.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL on the same fd sets its status flags only.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn bad_names_are_refused_before_the_kernel_is_asked() {
        for name in ["", "sixteen-bytes-xx", "a\0b"] {
            let e = super::Tap::open(name).expect_err(name);
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name:?}");
        }
    }
}
